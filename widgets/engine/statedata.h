// Values the state-ledger operations hand to the GUI (verdicts, the snapshot tree, drift and
// diff results, the transplant, the induction probe and the survival lab), filled on the engine
// thread by viewadapter.cpp and shared as std::shared_ptr<const T>. Verdicts, diffs and drifts
// carry core's own result types (core/state is Qt-free and torch-free): the GUI adapts them for
// display and never recomputes them.
#pragma once

#include "viewdata.h"

#include "state/surgery/diff.h"
#include "state/probes/attribution.h"
#include "state/probes/branches.h"
#include "state/probes/induction.h"
#include "state/probes/lens.h"
#include "state/probes/localize.h"
#include "insights/lab.h"
#include "state/probes/survive.h"
#include "state/probes/transplant.h"
#include "state/verify/restore.h"
#include "state/verify/validate.h"
#include "workspace/workspace.h"

#include <QMetaType>
#include <QString>
#include <QStringList>

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kvscope::widgets {

enum class SeverityRank { None = -1, Note = 0, Warning = 1, Error = 2 };

QString severityText(SeverityRank s);
// "1 error", "2 errors", "0 warnings": a count with its noun (English plural).
QString countOf(int n, const QString& singular, const QString& plural);
// "1 error, 0 warnings, 2 notes": a report's counts by severity (state::Report::count), as
// the Validation panel heads them.
QString severityCounts(const kvscope::state::Report& report);
SeverityRank rankOf(kvscope::state::Severity s);

// A verdict as the GUI shows it: core's report (state::verifySnapshot — the function behind
// `kvscope-cli verify`) with the subject it was computed for. `json` is exactly what
// `kvscope-cli verify --json` prints for the same state.
struct ValidationView {
    uint64_t revision = 0;
    QString subject; // "live session", a snapshot label, or a file
    kvscope::state::Report report;
    std::optional<kvscope::state::Equivalence> equivalence; // when computed
    QString equivalenceText; // one line on the equivalence verdict; empty when none
    nlohmann::json json;
    const std::vector<kvscope::state::Violation>& violations() const { return report.violations; }
    SeverityRank worst() const; // None when there is no violation
    int count(kvscope::state::Severity s) const;
};
using ValidationViewPtr = std::shared_ptr<const ValidationView>;

// The verify report a restore of `id` would act on: what the restore dialog asks about
// (req::PreviewRestore). The same report also comes as a ValidationView for the panel.
struct RestorePreview {
    QString id;
    ValidationViewPtr report;
};

// One snapshot of the store as the tree and the pickers list it. `parent` is the index of its
// parent in LedgerView::nodes as core's lineage tree links it (-1: a root).
struct SnapshotNode {
    QString id;
    QString parentId;
    int parent = -1;
    QString operation;  // capture | continue | fork | truncate | patch | fault | ...
    QString parameters; // compact JSON of the operation's parameters
    QString createdAt;
    QString file; // where it was saved or loaded from; empty when only in memory
    qint64 tokens = 0;
    qint64 cacheLength = 0;
    QString preview; // the last few tokens as text (as ids when its tokenizer was not found)
    // The model it was made with (state::modelName), and whether that is another model than
    // the loaded one (the tree greys its row).
    QString modelName;
    bool otherModel = false;
    bool ownTokenizerFound = true; // false: its tokens are shown as ids
    // How the pickers and the status line name it (adapt::snapshotName): "fork 1a2b3c4d", or
    // for an insights-lab evidence state "#21 restored · 1a2b3c4d".
    QString name;
};

struct LedgerView {
    std::vector<SnapshotNode> nodes; // in creation order
    QString currentId;               // the node the live session descends from ("" = none)
};
using LedgerViewPtr = std::shared_ptr<const LedgerView>;

// ws::driftSnapshots' own result (the drift `kvscope-cli drift --json` prints: `json`, which is
// outcome.toJson()) with the texts of the tokens it names, for the plot's tooltips.
struct DriftView {
    QString idA, idB; // the states compared ("" = the live session)
    QString labelA, labelB;
    kvscope::ws::DriftOutcome outcome;
    // tokenA[i], ownTokenB[i]: outcome.result.steps[i]'s token fed to both, and the one B
    // would have sampled, decoded as the token strip decodes them.
    QStringList tokenA, ownTokenB;
    QString profile; // st::profileName(outcome.profile)
    nlohmann::json json;
};
using DriftViewPtr = std::shared_ptr<const DriftView>;

// state::diff's report (what `kvscope-cli diff --json` prints: report.toJson()) with both
// token buffers for the strips and the layer x KV-head map for the heatmap.
struct DiffView {
    QString idA, idB; // the states compared ("" = the live session)
    QString labelA, labelB;
    std::vector<TokenInfo> tokensA, tokensB;
    // The token A's slot i holds, when A records an eviction (recordedKeptTokens); empty: i.
    std::vector<int64_t> keptA;
    kvscope::state::DiffReport report;
    int layers = 0;
    int kvHeads = 0;
    std::vector<float> layerHead; // [layers, kvHeads] max |ΔK|,|ΔV| over the compared slots
};
using DiffViewPtr = std::shared_ptr<const DiffView>;

// Which of two states' K/V differences matter (state::localize, what `kvscope-cli localize
// --json` prints: toJson(result)), with the compared states' tokens for the map's slot axis.
struct LocalizeView {
    QString idA, idB; // idB == idA: B was A's tokens replayed
    QString labelA, labelB;
    std::vector<TokenInfo> tokens; // A's
    kvscope::state::LocalizeResult result;
};
using LocalizeViewPtr = std::shared_ptr<const LocalizeView>;

// The logit lens of a state (state::logitLens, what `kvscope-cli lens --json` prints:
// toJson(result, tokenizer)), with the state's tokens for the column headers and the text of
// every token id the cells name.
struct LensView {
    QString id; // "" = the live session
    QString label;
    bool forced = false; // read despite errors of verify
    std::vector<TokenInfo> tokens;
    kvscope::state::LensResult result;
    std::unordered_map<int32_t, QString> texts; // id -> displayed text
};
using LensViewPtr = std::shared_ptr<const LensView>;

// Slot and head attribution of a state's next token, both as core computed them: the slots
// (state::attribute, what `kvscope-cli attribute --json` prints: toJson(slotResult)) and the
// heads (state::attributeHeads, `attribute --heads --json`: toJson(headResult, tokenizer)),
// with the state's tokens for the slots' texts.
struct AttributionView {
    QString id; // "" = the live session
    QString label;
    bool forced = false; // run despite errors of verify
    std::vector<TokenInfo> tokens;
    kvscope::state::AttributionResult slotResult;
    kvscope::state::HeadAttribution headResult;
    QString headToken; // the attributed token's text, as displayed
    // Query heads share a KV head in groups of queryHeads / kvHeads (GQA): the selection's head
    // is a KV head.
    int queryHeads = 0, kvHeads = 0;
};
using AttributionViewPtr = std::shared_ptr<const AttributionView>;

// Two states aligned at their branch point (state::compareBranches, what `kvscope-cli
// branches --json` prints: toJson(result, tokenizer)), with the text of every token shown.
struct BranchesView {
    QString idA, idB;
    QString labelA, labelB;
    std::vector<TokenInfo> tokensA, tokensB;
    kvscope::state::BranchComparison result;
};
using BranchesViewPtr = std::shared_ptr<const BranchesView>;

// The residual-stream transplant (core/state/probes/transplant.h) as the GUI shows it.
// state::transplant's own result (what `kvscope-cli transplant --json` prints: toJson(result))
// with the texts of the tokens it names.
struct TransplantView {
    kvscope::state::TransplantResult result;
    QString donorContinuation, originalContinuation;
    // stepTokens[i][k]: the text of result.persistence[i].steps[k].token
    std::vector<QStringList> stepTokens;
};
using TransplantViewPtr = std::shared_ptr<const TransplantView>;

// The induction probe (core/state/probes/induction.h) as the GUI shows it: core's report as
// is (its heads, copy losses, recalled tokens and ranking), with what the window prints beside it.
struct InductionView {
    kvscope::state::InductionReport report;
    QString text;     // the probed text; empty for the random segment
    quint64 seed = 0; // the random segment's seed (0 for a text)
    int layers = 0;
    int queryHeads = 0;
    // report.recalled[i] as it prints (a byte fragment of a longer character: its vocabulary
    // piece).
    QStringList recalledTexts;
    QString summary; // one line: the copy losses or the recall, and the strongest head
};
using InductionViewPtr = std::shared_ptr<const InductionView>;

// The survival lab (core/state/probes/survive.h) as the GUI shows it: core's SurviveResult,
// with `json` exactly what `kvscope-cli survive --json` prints for the same state and options,
// plus the source's tokens and both continuations decoded for display.
struct SurvivalView {
    QString sourceId; // the state compressed (a capture of the live session when it was asked for)
    QString sourceLabel;
    QString id; // the compressed snapshot, stored as a "survive" child of sourceId
    kvscope::state::SurviveResult result;
    nlohmann::json json;
    std::vector<TokenInfo> tokens; // the source's token buffer
    std::vector<uint8_t> kept;     // [tokens] 1 = the token's slot was kept (result.keptTokens)
    QStringList reference, own;    // result.reference / ownTokens, each step decoded as streamed
};
using SurvivalViewPtr = std::shared_ptr<const SurvivalView>;

// state::sweep's results (`json`: what `kvscope-cli survive --sweep --json` prints), in run
// order.
struct SurvivalSweepView {
    QString sourceId, sourceLabel;
    std::vector<kvscope::state::SurviveResult> results;
    nlohmann::json json;
};
using SurvivalSweepViewPtr = std::shared_ptr<const SurvivalSweepView>;

// One run of the insights lab (Workspace::runInsight): core's result as is, and its JSON as
// `kvscope-cli insights run N --json` prints it (one entry of "insights").
struct InsightView {
    int number = 0;
    kvscope::insights::ExperimentResult result;
    nlohmann::json json;
};
using InsightViewPtr = std::shared_ptr<const InsightView>;

// An experiment's evidence in the store (Workspace::storeEvidence): the ids of its states, in
// the result's order, and whether the first was restored into the live session (for the
// views that show the live session: attention, positions, heatmap).
struct EvidenceView {
    InsightViewPtr insight;
    QStringList ids;
    bool restored = false;
};
using EvidenceViewPtr = std::shared_ptr<const EvidenceView>;

} // namespace kvscope::widgets
