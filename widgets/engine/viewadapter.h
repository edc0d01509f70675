// The one place where core results become view values (statedata.h, viewdata.h): labels,
// token texts, the segment colours of a prompt meta, the lineage tree of the store. Adapting
// means decoding and formatting for display — never recomputing: a verdict stays core's
// report, a diff core's DiffReport, a drift ws::DriftOutcome, the tree core's lineage tree.
//
// Thread-safety: pure functions; called on the engine thread.
#pragma once

#include "statedata.h"
#include "viewdata.h"

#include "state/ledger/snapshot.h"
#include "state/verify/verifyfile.h"
#include "workspace/snapshotmodel.h"
#include "workspace/workspace.h"

namespace kvscope::tok {
class Tokenizer;
}

namespace kvscope::widgets::adapt {

// One label per token from a prompt meta's segment map: a message's role ("system", "user",
// "assistant"), "generation prompt", "scaffold", "prompt"; tokens no segment covers were
// generated ("generated").
std::vector<QString> segmentLabels(const kvscope::state::PromptMeta& meta, std::size_t tokens);

// The text token `id` prints as when it follows `prev` (-1: first), as streamed: special
// tokens as their piece ("<|eos|>"); the id itself without a tokenizer. Shown through
// displayToken() (displaytext.h) by every panel.
QString decodedText(const kvscope::tok::Tokenizer* tokenizer, int32_t prev, int32_t id);

// Token strip values: ids decoded as streamed (special tokens as their piece), positions of
// their cache slots (-1 without one: past the cache, or dropped by a recorded eviction whose
// `keptTokens` say which token each slot holds), segment labels.
std::vector<TokenInfo> tokenInfos(const std::vector<int32_t>& ids,
                                  const std::vector<int64_t>& positions,
                                  const std::vector<QString>& segments,
                                  const kvscope::tok::Tokenizer* tokenizer,
                                  const std::vector<int64_t>& keptTokens = {});
// A snapshot's tokens as the strips show them (with its positions and segment labels).
std::vector<TokenInfo> snapshotTokens(const kvscope::state::Snapshot& s,
                                      const kvscope::tok::Tokenizer* tok);

QString describe(const kvscope::state::Equivalence& e);

ValidationViewPtr validation(const kvscope::state::VerifyResult& verdict, const QString& subject,
                             uint64_t revision = 0);

// The state's tokens and the text of every id the lens cells name, beside core's result.
std::shared_ptr<LensView> lens(kvscope::state::LensResult result, const kvscope::state::Snapshot& s,
                               const QString& label, const kvscope::tok::Tokenizer* tok);
// The state's tokens and the attributed token's text beside core's two attributions.
std::shared_ptr<AttributionView> attribution(kvscope::state::AttributionResult slotResult,
                                             kvscope::state::HeadAttribution headResult,
                                             const kvscope::state::Snapshot& s,
                                             const QString& label,
                                             const kvscope::tok::Tokenizer* tok);
// Both states' tokens beside core's branch comparison.
std::shared_ptr<BranchesView> branches(kvscope::state::BranchComparison result,
                                       const kvscope::state::Snapshot& a,
                                       const kvscope::state::Snapshot& b, const QString& labelA,
                                       const QString& labelB, const kvscope::tok::Tokenizer* tok);
// A's tokens beside core's localize result.
std::shared_ptr<LocalizeView> localize(kvscope::state::LocalizeResult result,
                                       const kvscope::state::Snapshot& a, const QString& labelA,
                                       const QString& labelB, const kvscope::tok::Tokenizer* tok);
std::shared_ptr<DiffView> diff(kvscope::state::DiffReport report, const kvscope::state::Snapshot& a,
                               const kvscope::state::Snapshot& b, const QString& labelA,
                               const QString& labelB, const kvscope::tok::Tokenizer* tokenizerA,
                               const kvscope::tok::Tokenizer* tokenizerB);

std::shared_ptr<DriftView> drift(const ws::DriftOutcome& outcome, const QString& labelA,
                                 const QString& labelB, const kvscope::tok::Tokenizer* tokenizer);

// The store in creation order, each node linked to its parent as core's lineage tree does.
LedgerViewPtr ledger(const ws::Workspace& workspace, ws::TokenizerFinder& tokenizers);
// A stored snapshot's name in pickers and labels: "<operation> <id8>", or for an insights-lab
// evidence state (its parameters record "insight" and "role") "#<insight> <role> · <id8>".
QString snapshotName(const kvscope::state::Lineage& lineage);
// The attention view of core's pattern: its probabilities as paint-ready heatmap data with the
// slots no query could see (AttentionPattern::visible) greyed.
void attention(AttentionView& view, kvscope::AttentionPattern pattern);

} // namespace kvscope::widgets::adapt
