// The requests the GUI makes of the engine thread about stored states and the lab: one type per
// operation, holding its arguments. LedgerController::request() posts one (the window shows
// `busy()` while it runs); on the engine thread its `run()` makes one Workspace or core call
// (core/workspace, core/state) through the EngineWorker, sends the result as an Answer (answer.h)
// of a view type of statedata.h, and ends with exactly one operationDone(). A view subscribes to
// the type it shows with LedgerController::onAnswer<View>().
//
// Adding an operation: its core call, one type here with its run() (engineworker*.cpp), and the
// view that shows its answer.
//
// Snapshots are named by their lineage id; the empty id names the live session.
#pragma once

#include "statedata.h"

#include "state/probes/survive.h"

#include <QString>

#include <cstdint>
#include <functional>

namespace kvscope::widgets {

class EngineWorker;

// The name the window shows for a state id (LedgerController::label).
using Labeler = std::function<QString(const QString& id)>;

namespace req {

// The requests' texts (busy(), messages), in the engine worker's translation context.
QString tr(const char* text, const char* disambiguation = nullptr, int n = -1);

// Captures the live session: a root after a fresh run, else a child of the snapshot the live
// session descends from (ws::Workspace::capture). Answers a LedgerView.
struct Snapshot {
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Truncates the live session to `length` tokens and records the result as a node.
struct Truncate {
    qint64 length = 0;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The verify report a restore of `id` would act on: a ValidationView and a RestorePreview.
// Not an operation of its own (the window is not busy); a failure still ends with
// operationDone("restore").
struct PreviewRestore {
    QString id;
    void run(EngineWorker& w) const;
};

// Restores `id` into the live session (refused on errors unless `force`).
struct Restore {
    QString id;
    bool force = false;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

struct Save {
    QString id;
    QString path;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The state as safetensors (`kvscope-cli export`).
struct ExportSafetensors {
    QString id;
    QString path;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Loads a .kvsnap file as a node and answers its verification (a ValidationView).
struct OpenFile {
    QString path;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Makes `folder` the workspace (ws::Workspace::openFolder): its states are opened into the
// tree, and every state made from now on is saved there as it is made (operation "workspace";
// a file that could not be opened is named in its message).
struct OpenWorkspace {
    QString folder;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The live session's verdict (subject "live session"), skipped when `serial` is no longer the
// latest request (RequestTags::validation). Not an operation: no operationDone().
struct ValidateLive {
    uint64_t serial = 0;
    void run(EngineWorker& w) const;
};

// The verify report of a node, as `kvscope-cli verify` prints it (a ValidationView). Not an
// operation: no operationDone().
struct VerifyNode {
    QString id;
    void run(EngineWorker& w) const;
};

// Logit drift of B against A over `steps` (Workspace::drift, a DriftView); `profile` is a
// tolerance profile name (state::parseProfile).
struct Drift {
    QString a;
    QString b;
    int steps = 0;
    QString profile;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The diff of two states (st::diff, as Workspace::diff and `kvscope-cli diff`; a DiffView).
struct Diff {
    QString a;
    QString b;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Which K/V differences of A against B change the next step (state::localize, a
// LocalizeView); b == a: against A's own tokens replayed. The store is not touched.
struct Localize {
    QString a;
    QString b;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The logit lens of a state (state::logitLens, a LensView), restored as `kvscope-cli lens`
// restores it: refused on verify's errors unless `force`.
struct Lens {
    QString id;
    bool force = false;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Slot attribution (state::attribute) and head attribution of the top-1 next token
// (state::attributeHeads) of a state, each restored as `kvscope-cli attribute [--heads]`
// restores it: refused on verify's errors unless `force` (an AttributionView).
struct Attribute {
    QString id;
    bool force = false;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Two states aligned at their branch point (state::compareBranches, each restored forcibly;
// a BranchesView).
struct Branches {
    QString a;
    QString b;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Branches `id` `branches` ways, each continued `steps` tokens with its own seed at
// `temperature` (< 0: the snapshot's own sampler settings). Answers a LedgerView.
struct Fork {
    QString id;
    int branches = 2;
    int steps = 0;
    double temperature = 1.0;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Layer `layer`'s K/V (one KV head, or all with head = -1) of `source` into a copy of `target`.
struct Patch {
    QString target;
    QString source;
    int layer = 0;
    int head = -1;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// A copy of `id` with fault `fault` injected (state::allFaults()), then its report (a
// ValidationView).
struct InjectFault {
    QString id;
    QString fault;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The residual-stream transplant between two prompts (state::transplant, a TransplantView).
struct Transplant {
    QString recipient;
    QString donor;
    int layer = 0;
    bool allPositions = false;
    int steps = 0;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The induction probe (state/probes/induction.h) on the loaded model: `text` (non-empty), or
// a random segment of `length` tokens drawn with `seed`, fed twice (an InductionView). It
// does not touch the live session.
struct Induction {
    QString text;
    int length = 0;
    quint64 seed = 0;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// The survival lab on a stored snapshot or the live session (""): Workspace::survive — the
// compressed state is stored as a child of its source (a SurvivalView; nodeId = the
// compressed snapshot).
struct Survive {
    QString id;
    kvscope::state::SurviveOptions options;
    QString busy(const Labeler& label) const;
    void run(EngineWorker& w) const;
};

// Every policy × budget (Workspace::survivalSweep, a SurvivalSweepView); reports progress and
// stops with EngineController::stop() (`epoch`: set when posted).
struct SurvivalSweep {
    QString id;
    int steps = 0;
    uint64_t epoch = 0;
    QString busy(const Labeler& label) const;
    void run(EngineWorker& w) const;
};

// The insights lab's experiment of insight `number` on the loaded model (Workspace::runInsight,
// an InsightView); the live session and the store are not touched.
struct RunInsight {
    int number = 0;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

// Stores the states of an experiment's evidence (Workspace::storeEvidence, an EvidenceView);
// with `restoreFirst` the first of them then becomes the live session (a forced restore: the
// views that follow the live session show it).
struct StoreEvidence {
    InsightViewPtr insight;
    bool restoreFirst = false;
    QString busy(const Labeler&) const;
    void run(EngineWorker& w) const;
};

} // namespace req
} // namespace kvscope::widgets
