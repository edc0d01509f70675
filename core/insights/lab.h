// The insights lab: an experiment for each measurable insight of the registry (registry.h),
// run live on a loaded model with kvscope's own operations (restore, replay, drift, truncate,
// patch, splice, fork, the fault lab, the observer, the attention view, transplant,
// induction, the survival lab), returning measurements and a verdict computed from them.
//
// Every verdict is computed from the measurements with thresholds written next to the
// experiment's code (core/insights/tier*.cpp): the same experiment on another model may
// reach another verdict. measurements[0] is the experiment's key number (the one the report
// table shows); `why` cites the numbers; `evidence` names the kvscope view that shows the
// effect and what to select in it.
//
// The standard state every experiment starts from (LabContext::base) is a fixed neutral
// sentence encoded by the model's tokenizer and continued greedily; experiments derive
// every other state from it (truncations, other prompts of the same length, longer
// continuations), so a run is deterministic for a model.
//
// Experiments that move rotary keys (12, 79) or rotate them with another theta (74) need a
// RoPE model: on a model with learned positions (GPT-2) runExperiment reports the refusal of
// the operation as its error.
//
// Thread-safety: free functions over values; a LabContext may be shared between threads
// (the model is immutable, the snapshot a value). An experiment runs in seconds on small
// models (the demo model, stories260K); it may write temporary .kvsnap files under the
// system temp folder and removes them.
#pragma once

#include "engine/model.h"
#include "insights/registry.h"
#include "state/ledger/snapshot.h"
#include "util/status.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::insights {

enum class Verdict { Holds, HoldsWithCaveat, DoesNotHold };
// "holds" | "holds-with-caveat" | "does-not-hold"
std::string verdictName(Verdict v);

struct Measurement {
    std::string name;
    double value = 0;
    // "" (a count, a share or a flag), "nats", "relative L2", "tokens", "bytes", "s",
    // "ratio", "logit", "probability"
    std::string unit;
    std::string note;
};

// One state an experiment made, kept so that a view can show the effect: named by its role
// in the experiment ("live", "restored", "shifted by 1", ...).
struct EvidenceState {
    std::string role;
    state::Snapshot snapshot;
};

// Where to look in the evidence states; -1 = no preference.
struct Focus {
    int layer = -1;
    int head = -1;         // the query head (attention) or the KV head (heatmaps)
    int64_t position = -1; // a cache slot, or the query row of the attention view
    // The drift view's step count where the experiment measured a drift of its evidence states
    // (its numbers are then the view's); -1: the view's own.
    int steps = -1;
};

// The kvscope view that shows an experiment's evidence.
enum class EvidenceView { Drift, Diff, Faults, Attention, Positions, Heatmap, Induction };

// Its name: "drift", "diff", "faults", "attention", "positions", "heatmap", "induction" (the
// JSON's evidence_view and the first word of ExperimentResult::evidence).
const char* evidenceViewName(EvidenceView v);

// Whether the view shows the live session (attention, positions, heatmap): opening the evidence
// makes its first state the live session, by a forced restore. The others compare stored states.
bool evidenceFollowsLive(EvidenceView v);

struct ExperimentResult {
    int number = 0;
    std::vector<Measurement> measurements; // [0] is the key number
    Verdict verdict = Verdict::DoesNotHold;
    std::string why; // one paragraph citing the measured numbers
    EvidenceView view = EvidenceView::Drift;
    std::string evidence; // "<view>: <hint>": the view's name and what to look at in it
    // The states the view opens, by the view's convention:
    //   drift, diff, faults: [0] the reference (A), [1] the state compared with it (B);
    //   attention, positions, heatmap: [0] the state to show ([1], when present, the state to
    //   compare it with);
    //   induction: [0] the state whose heads are scored.
    std::vector<EvidenceState> states;
    Focus focus;
    // The measurement called `name`; nullptr when there is none.
    const Measurement* find(const std::string& name) const;
};

struct LabContext {
    std::shared_ptr<const Model> model;
    state::Snapshot base;        // the standard state: prompt + greedy tokens
    std::vector<int32_t> prompt; // the prompt's ids (BOS included when the tokenizer adds it)
};

// The neutral sentence makeLabContext uses by default.
const std::string& defaultLabText();

// The standard state: `text` encoded by the model's tokenizer, then `steps` greedy tokens.
// Errors: no model, a model without a tokenizer, text that encodes to nothing, a prompt that
// leaves fewer than 128 positions of the context free.
Result<LabContext> makeLabContext(std::shared_ptr<const Model> model,
                                  const std::string& text = defaultLabText(), int steps = 24);

bool hasExperiment(int number);
// The insight numbers that have an experiment, ascending.
std::vector<int> experimentNumbers();
// Runs one experiment. Errors: no experiment for that number, or an operation it needs
// failed (the message names the step).
Result<ExperimentResult> runExperiment(int number, const LabContext& ctx);

// {"number", "tier", "claim", "class", "experiment", "measurements": [{"name", "value",
// "unit", "note"}], "verdict", "why", "evidence", "evidence_view", "evidence_states":
// [{"role", "id", "tokens", "cache_length"}], "focus": {"layer", "head", "position", "steps"}};
// measurements [] and verdict, why and evidence null when `result` is null (not measurable,
// or not run). A non-finite value is written as null.
nlohmann::json toJson(const Insight& insight, const ExperimentResult* result);

// A Markdown table, one row per entry: | # | claim | class | verdict | key number |
// (verdict and key number "—" when the result is null).
std::string
toMarkdownTable(const std::vector<std::pair<const Insight*, const ExperimentResult*>>& rows);

} // namespace kvscope::insights
