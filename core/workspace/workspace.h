// Workspace: the state a kvscope user works on — the loaded model, the live session (its own
// room, livesession.h: feeding, generating, the snapshot it descends from, its sampler and
// prompt meta), and a store of immutable snapshots — and every operation over it, each
// returning Result<T>. The GUI runs these operations and
// paints their results; the CLI runs the same state functions on files. Neither computes a
// verdict, a diff, a drift or a lineage of its own.
//
// Lineage rules (the provenance users rely on):
//   - a capture after a fresh run (LiveSession::beginRun / reset) is a root;
//   - after restoring A (or truncating into A), a capture is a child of A, with the operations
//     since then recorded ("continued": tokens generated after A);
//   - loading another model starts a new root (nothing of the old model is a parent);
//   - a capture becomes the parent of the next capture of the same live session.
//
// Snapshot ids are lineage ids; the empty id names the live session wherever an operation
// reads a state (verify, diff, drift).
//
// Thread-safety: none. One thread (the GUI's engine thread, or the CLI's main thread) owns a
// Workspace; the snapshots it hands out are immutable and may be shared with other threads.
#pragma once

#include "engine/attention.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "insights/lab.h"
#include "workspace/labcache.h"
#include "workspace/livesession.h"
#include "workspace/snapshotstore.h"
#include "state/probes/compare.h"
#include "state/probes/survive.h"
#include "state/surgery/diff.h"
#include "state/surgery/faults.h"
#include "state/surgery/lineagetree.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshot.h"
#include "state/surgery/surgery.h"
#include "state/verify/verifyfile.h"

#include <functional>
#include <map>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {
class Observer;
}

namespace kvscope::ws {

// A prompt as the user typed it: raw text (encoded with the tokenizer's special tokens), or
// chat messages rendered with the tokenizer's chat template (state/ledger/chatprompt.h), or — for a
// model without a tokenizer — whitespace-separated token ids.
struct PromptSpec {
    bool chat = false;
    std::string text = {};   // raw mode
    std::string system = {}; // chat mode; empty: no system message
    std::string user = {};   // chat mode
};

// The ids to feed and the prompt meta a capture records (segment map, template, BOS).
struct PreparedPrompt {
    std::vector<int32_t> tokens;
    state::PromptMeta meta;
};

// What restore() did.
struct RestoreOutcome {
    std::string id;
    state::Report report; // the validation restore acted on
    bool forced = false;  // restored despite (semantic) errors
};

// A diff and the two states it compared (the live session captured once), for a view that
// shows their tokens beside the report.
struct DiffOutcome {
    state::DiffReport report;
    std::shared_ptr<const state::Snapshot> a, b;
};

// The drift of B against A, with the tolerance band the verdict uses.
struct DriftOutcome {
    state::DriftResult result;
    state::ToleranceProfile profile = state::ToleranceProfile::SameDevice;
    state::Tolerance tolerance;
    // Whether step i's logits are within the tolerance (state::within: the profile's KL and
    // |Δlogit| bounds, top-1 agreement, the top-5 overlap where the profile asks for one).
    bool withinTolerance(std::size_t step) const;
    int stepsOutsideTolerance() const;
    // state::toJson(result) + {"profile", "tolerance", "steps_outside_tolerance"}, each step with
    // "within_tolerance".
    nlohmann::json toJson() const;
};

// What Workspace::survive() made: the compressed state's id in the store and the measurement.
struct SurviveOutcome {
    std::string id;       // the compressed snapshot (a "survive" child of its source)
    std::string sourceId; // the state it was made from (a capture of the live session
                          // when survive() was asked for it)
    state::SurviveResult result;
};

// Drift of two snapshots on `model`: both restored (force: semantic errors do not stop a
// diagnostic; structural ones always do), continued `steps` tokens with A's sampler (A's
// tokens fed to both), judged under `profile`. `kvscope-cli drift` and the GUI both call it.
// `names` prefix a refusal ("A x.kvsnap: restore refused ...").
Result<DriftOutcome> driftSnapshots(const state::Snapshot& a, const state::Snapshot& b,
                                    std::shared_ptr<const Model> model, int steps, bool force,
                                    state::ToleranceProfile profile,
                                    const std::array<std::string, 2>& names = {"A", "B"});

// Turns a prompt into tokens and prompt meta (one segmentation for every front end).
Result<PreparedPrompt> preparePrompt(const PromptSpec& spec, const Model& model);

class Workspace {
public:
    Workspace() = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // ---- model ----
    // Makes `model` current with an empty live session; lineage starts a new root. The store
    // keeps its snapshots (they name their own model by fingerprint).
    void setModel(std::shared_ptr<const Model> model);
    const std::shared_ptr<const Model>& model() const { return m_model; }
    bool hasModel() const { return m_model != nullptr; }

    // ---- the live session ----
    // The live session's room (livesession.h): feeding, generating, its prompt meta, sampler
    // and lineage bookkeeping, attention; null without a model.
    LiveSession* liveSession() { return m_live.get(); }
    const LiveSession* liveSession() const { return m_live.get(); }
    // Its session; nullptr without a model.
    const Session* live() const { return m_live ? &m_live->session() : nullptr; }
    // The snapshot the live session descends from ("" after a fresh run, or without a model).
    std::string parentId() const { return m_live ? m_live->parentId() : std::string(); }
    // The token each live cache slot holds when the live session continues a recorded eviction
    // (state::keptTokensAfter its parent); empty: slot i holds token i.
    std::vector<int64_t> liveKeptTokens() const;

    // ---- the store ----
    // The snapshot store's room (snapshotstore.h): states by id, their files and read
    // problems, their lineage, the workspace folder.
    const SnapshotStore& store() const { return m_store; }
    const StoredSnapshot* find(const std::string& id) const { return m_store.find(id); }
    const std::vector<std::string>& order() const { return m_store.order(); }
    state::LineageTree lineage() const { return m_store.lineage(); }
    // A stored snapshot, or the live session's capture for the empty id.
    Result<std::shared_ptr<const state::Snapshot>> stateFor(const std::string& id) const;
    std::string add(state::Snapshot snapshot, std::string file = {},
                    std::vector<state::Violation> readViolations = {}) {
        return m_store.add(std::move(snapshot), std::move(file), std::move(readViolations));
    }

    // ---- operations ----
    // The live session as a snapshot (not stored): tokens, cache, prompt meta, sampler.
    Result<state::Snapshot> captureLive(const std::string& operation = "capture",
                                        nlohmann::json parameters = nlohmann::json::object()) const;
    // Captures the live session into the store as a child of parentId(); it becomes the
    // parent of what follows. Returns the new id.
    Result<std::string> capture();
    // The one verdict (state::verifySnapshot) of a stored snapshot, or of the live session
    // for the empty id.
    Result<state::VerifyResult> verify(const std::string& id,
                                       const state::VerifyOptions& options = {}) const;
    // Restores `id` into the live session (state::restore; structural violations are never
    // forced). The live session then descends from `id`.
    Result<RestoreOutcome> restore(const std::string& id, bool force);
    // Truncates the live session to `at` tokens (state::truncate: tokens, cache, positions,
    // mask, segments and the recomputed last logits move together), stores the result as a
    // "truncate" child of the live session's parent and makes it the live session.
    Result<std::string> truncateLive(int64_t at);
    // state::diff of two states ("" = the live session), with the states it compared.
    Result<DiffOutcome> diff(const std::string& a, const std::string& b) const;
    // driftSnapshots() of two states ("" = the live session), always forced.
    Result<DriftOutcome> drift(const std::string& a, const std::string& b, int steps,
                               state::ToleranceProfile profile) const;
    // state::fork of a stored snapshot; the branches are stored. Returns their ids.
    Result<std::vector<std::string>> fork(const std::string& id, const state::ForkOptions& o);
    // state::patch of `target` with `source`'s K/V; the result is stored.
    Result<std::pair<std::string, state::PatchReport>>
    patch(const std::string& target, const std::string& source, state::PatchOptions o);
    // state::injectFault into a stored snapshot; the faulty copy is stored.
    Result<std::string> injectFault(const std::string& id, const std::string& fault,
                                    std::map<std::string, std::string> params = {});
    // The survival lab (state/probes/survive.h) on a stored snapshot, or on the live session
    // for the empty id: state::survive() of it with `options`; the compressed state is stored
    // as a child of its source (restorable, continuable, verifiable like any other). The live
    // session compresses as parentId() when it is that snapshot unchanged (nothing generated
    // since, the same tokens); otherwise it is captured as capture() would, and stored (as
    // capture() does) only when the compression succeeds, so the compressed state has a parent
    // in the lineage and a refusal leaves the store as it was.
    Result<SurviveOutcome> survive(const std::string& id, const state::SurviveOptions& options);
    // state::sweep() of a stored snapshot or the live session: every policy x budget (nothing
    // is stored). options.progress may stop it ("survive: sweep stopped").
    Result<std::vector<state::SurviveResult>>
    survivalSweep(const std::string& id, const state::SweepOptions& options) const;
    // The insights lab (insights/lab.h) on the loaded model, through the lab's room
    // (labcache.h): the experiment of insight `number` from the lab's standard state, made on
    // first use and kept until the model changes (the live session and the store are not
    // touched). Errors: no model, no experiment for that number (a definitional or untestable
    // claim), a failed step.
    Result<insights::ExperimentResult> runInsight(int number);
    // Stores the evidence states of `result` (runInsight's on this model) so that the views
    // can open them: the lab's standard state once per model (a root whose parameters say
    // "insights_lab"), each evidence state as a child of it (or of its own parent when that
    // is stored), keeping its operation and parameters with "insight" and "role" added. The
    // standard state itself, when it is one of them, is not stored twice; storing the same
    // result again replaces its states in place. Returns the ids in result.states' order.
    // Errors: no model, no lab state yet (run an insight first), a result without states,
    // a state made with another model.
    Result<std::vector<std::string>> storeEvidence(const insights::ExperimentResult& result);
    // Saves a stored snapshot (atomically) and remembers the file.
    Status save(const std::string& id, const std::string& path) { return m_store.save(id, path); }
    // state::exportSafetensors of a stored snapshot.
    Status exportSafetensors(const std::string& id, const std::string& path) const;
    // Reads and verifies a .kvsnap file (state::verifyFile) and stores what could be read
    // completely. The id is empty when nothing usable was read; the verdict is returned
    // either way.
    struct Opened {
        std::string id;
        state::VerifyResult verdict;
    };
    Opened open(const std::string& path);

    // ---- the workspace folder (SnapshotStore): nothing a user makes is lost ----
    Status useFolder(const std::string& folder) { return m_store.useFolder(folder); }
    const std::string& folder() const { return m_store.folder(); }
    // SnapshotStore::openFolder, each listed file opened with open() (read and verified
    // against the current model).
    using FolderOpened = SnapshotStore::FolderOpened;
    Result<FolderOpened> openFolder(const std::string& folder);
    const nlohmann::json& viewState() const { return m_store.viewState(); }
    void setViewState(nlohmann::json view) { m_store.setViewState(std::move(view)); }
    std::vector<std::string> takeSaveProblems() { return m_store.takeSaveProblems(); }

private:
    // The live session as capture() stores it ("continue" of its parent after generating).
    Result<state::Snapshot> captureNext() const;

    std::shared_ptr<const Model> m_model;
    LabCache m_lab;
    std::unique_ptr<LiveSession> m_live; // set with a model
    SnapshotStore m_store;
};

} // namespace kvscope::ws
