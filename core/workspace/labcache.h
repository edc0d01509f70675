// LabCache: the insights lab's side of the workspace — one of its rooms (workspace.h). It keeps
// the lab's standard state for the loaded model (insights::makeLabContext: a fixed sentence
// continued greedily, which every experiment starts from), made on the first experiment and
// kept until the model changes, so that running insight after insight costs only the
// experiments.
//
// Thread-safety: none; one thread owns it (as the Workspace that holds it).
#pragma once

#include "insights/lab.h"

#include <memory>
#include <optional>

namespace kvscope::ws {

class LabCache {
public:
    // Forgets the standard state (another model, or none).
    void setModel(std::shared_ptr<const Model> model);
    // The experiment of insight `number` from the standard state (made now when there is
    // none). Errors: no model, no such insight, a claim without an experiment (definitional
    // or untestable), a failed step.
    Result<insights::ExperimentResult> run(int number);
    // The standard state the last experiments started from; null before the first.
    const state::Snapshot* base() const { return m_context ? &m_context->base : nullptr; }

private:
    std::shared_ptr<const Model> m_model;
    std::optional<insights::LabContext> m_context; // m_model's
};

} // namespace kvscope::ws
