// LedgerController: the GUI's handle on the state ledger — snapshots and their lineage tree,
// the verdict of the live session, restore with its verify report first, save, open, export,
// truncate, drift and diff, the transplant and the induction probe. Each call posts one
// Workspace operation (core/workspace) to the EngineController's worker; results arrive by
// signal and every operation ends with the engine's typed operationFinished().
//
// Snapshots are named by their lineage id; the empty id names the live session.
#pragma once

#include "statedata.h"

#include <QObject>

#include <atomic>

namespace kvscope::widgets {

class EngineController;
class EngineWorker;

class LedgerController : public QObject {
    Q_OBJECT
public:
    explicit LedgerController(EngineController* engine, QObject* parent = nullptr);
    ~LedgerController() override;

    // Captures the live session: a root after a fresh run, else a child of the snapshot the
    // live session descends from (ws::Workspace::capture).
    void snapshot();
    // Truncates the live session to `length` tokens and records the result as a node.
    void truncateAt(qint64 length);
    // The verify report a restore of `id` would act on (restorePreview()).
    void previewRestore(const QString& id);
    // Restores `id` into the live session (refused on errors unless force).
    void restore(const QString& id, bool force);
    void save(const QString& id, const QString& path);
    void exportSafetensors(const QString& id, const QString& path);
    // Loads a .kvsnap file as a node and reports its verification (validationReady()).
    void openFile(const QString& path);
    // Makes `folder` the workspace (ws::Workspace::openFolder): its states are opened into the
    // tree, and every state made from now on is saved there as it is made (operation
    // "workspace"; a file that could not be opened is named in its message).
    void openWorkspace(const QString& folder);
    // Validates the live session (coalesced: only the latest request runs).
    void validateLive();
    void drift(const QString& a, const QString& b, int steps, const QString& profile);
    void diff(const QString& a, const QString& b);
    // Which K/V differences of A against B change the next step (state::localize,
    // localizeReady()); b == a: against A's own tokens replayed.
    void localize(const QString& a, const QString& b);
    // The logit lens of a state ("" = the live session; state::logitLens, lensReady()):
    // refused like `kvscope-cli lens` when verify finds errors, unless `force`.
    void lens(const QString& id, bool force);
    // Two states aligned at their branch point (state::compareBranches, branchesReady()).
    void branches(const QString& a, const QString& b);
    // Slot and head attribution of a state's next token ("" = the live session;
    // state::attribute and state::attributeHeads, attributionReady()): refused like
    // `kvscope-cli attribute` when verify finds errors, unless `force`.
    void attribute(const QString& id, bool force);
    // Branches `id` `branches` ways, each continued `steps` tokens with its own seed at
    // `temperature` (< 0: the snapshot's own sampler settings).
    void forkBranches(const QString& id, int branches, int steps, double temperature = 1.0);
    // Layer `layer`'s K/V (one KV head, or all with head = -1) of `source` into `target`.
    void patchFrom(const QString& target, const QString& source, int layer, int head);
    // A copy of `id` with fault `fault` injected (state::allFaults()), then its report.
    void injectFault(const QString& id, const QString& fault);
    // The verify report of a node (as `kvscope-cli verify` prints it), by validationReady().
    void verifyNode(const QString& id);
    // The residual-stream transplant between two prompts (transplantReady()).
    void transplant(const QString& recipient, const QString& donor, int layer, bool allPositions,
                    int steps);
    // The induction probe (state/probes/induction.h) on the loaded model: `text` (non-empty), or a
    // random segment of `length` tokens drawn with `seed`, fed twice (inductionReady()).
    // Operation "induction"; it does not touch the live session.
    void probeInduction(const QString& text, int length, quint64 seed);
    // The survival lab on a stored snapshot or the live session (""): Workspace::survive —
    // the compressed state is stored as a child of its source (operation "survive",
    // survivalReady(), nodeId = the compressed snapshot).
    void survive(const QString& id, const kvscope::state::SurviveOptions& options);
    // Every policy x budget (Workspace::survivalSweep, operation "survival-sweep",
    // survivalSweepReady()); reports progress and stops with EngineController::stop().
    void survivalSweep(const QString& id, int steps);
    // The insights lab's experiment of insight `number` on the loaded model
    // (Workspace::runInsight, operation "insight", insightReady()); the live session and the
    // store are not touched.
    void runInsight(int number);
    // Stores the states of an experiment's evidence (Workspace::storeEvidence, operation
    // "evidence", evidenceReady()); with `restoreFirst` the first of them then becomes the
    // live session (a forced restore: the views that follow the live session show it).
    void storeEvidence(const kvscope::widgets::InsightViewPtr& insight, bool restoreFirst);

    LedgerViewPtr ledger() const { return m_ledger; }
    ValidationViewPtr liveValidation() const { return m_live; }
    QString label(const QString& id) const;

signals:
    void ledgerChanged(const kvscope::widgets::LedgerViewPtr& ledger);
    // The live session's report (subject "live session") or a file/snapshot's.
    void validationReady(const kvscope::widgets::ValidationViewPtr& report);
    void restorePreview(const QString& id, const kvscope::widgets::ValidationViewPtr& report);
    void driftReady(const kvscope::widgets::DriftViewPtr& drift);
    void diffReady(const kvscope::widgets::DiffViewPtr& diff);
    void localizeReady(const kvscope::widgets::LocalizeViewPtr& view);
    void lensReady(const kvscope::widgets::LensViewPtr& view);
    void branchesReady(const kvscope::widgets::BranchesViewPtr& view);
    void attributionReady(const kvscope::widgets::AttributionViewPtr& view);
    void transplantReady(const kvscope::widgets::TransplantViewPtr& result);
    void inductionReady(const kvscope::widgets::InductionViewPtr& report);
    void insightReady(const kvscope::widgets::InsightViewPtr& result);
    void evidenceReady(const kvscope::widgets::EvidenceViewPtr& evidence);
    void survivalReady(const kvscope::widgets::SurvivalViewPtr& result);
    void survivalSweepReady(const kvscope::widgets::SurvivalSweepViewPtr& sweep);

private:
    EngineController* m_engine;
    EngineWorker* m_worker;     // lives on the engine thread
    bool m_liveChanged = false; // the live session changed since its last validation
    LedgerViewPtr m_ledger;
    ValidationViewPtr m_live;
};

} // namespace kvscope::widgets
