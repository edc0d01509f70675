// Slot attribution: how much the next token depends on each cached slot of a state.
//
// The next-token distribution used throughout is the last token's logits RECOMPUTED over the
// cache of the tokens before it (Session::recomputeLastStep: the probe restore's equivalence
// verdict uses), not the stored last logits. Two consequences, both deliberate:
//   - the full distribution and every ablated one come from the same code path, so a slot
//     whose hiding changes nothing gives KL exactly 0, and a state whose stored logits are off
//     is still attributed against what its cache computes;
//   - the last slot is the query of that step (its K/V are recomputed from the last token),
//     so it cannot be hidden from it: it is reported with `ablatable` false and left out of
//     the rank correlation. A slot the cache already masks is not ablatable either.
//
// Two measures per slot:
//   ablation   leave-one-slot-out: the slot hidden from every layer and head through the
//              cache's own mask (KvCache::withPositions with mask[slot] = 0), the distribution
//              recomputed. ablationKl = KL(full || ablated) in nats, deltaLogp = log p_ablated
//              - log p_full of the full distribution's top token (negative: the slot supported
//              it). Hiding a slot this way is the same computation as evicting it (a survival-lab
//              state without the slot gives the same logits: tst_attribution).
//              Cost: one single-token forward pass and one copy of the cache per slot.
//   estimate   the last query's attention probability of the slot times the norm of what
//              attending to it writes, |W_O,h v| (engine's valueOutputNorms: the slot's value
//              through head h's slice of the output projection), summed over every query head
//              and layer. One forward pass in all. It ignores everything after o_proj (output
//              norms, the MLP, later layers), so it can rank slots differently from the ablation:
//              rankCorrelation (Spearman, ties ranked by their mean) says how well it agrees.
//
// Slots are cache slots: in an evicted state slot i holds token keptTokens[i] (the lineage's
// record, recordedKeptTokens); otherwise slot i holds token i.
//
// Thread-safety: free functions over values. The ablations run recomputeLastStep on copies of
// the session's cache; the session passed in is only read, but (as recomputeLastStep says)
// no other thread may read its cache while attributeSession() or ablationEffects() runs.
#pragma once

#include "engine/model.h"
#include "engine/session.h"
#include "state/ledger/snapshot.h"
#include "util/status.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::state {

struct SlotAttribution {
    int64_t slot = 0;
    int64_t position = 0;    // the slot's recorded position
    int64_t tokenIndex = -1; // index into the state's tokens (-1: the state does not say)
    int32_t token = -1;      // the token's id (-1 when tokenIndex is -1)
    std::string text;        // the token's text as the tokenizer decodes it ("" without one)
    // false: the last slot (the recomputed step's own query) or a slot the cache already masks;
    // ablationKl and deltaLogp are then 0 and `why` says which.
    bool ablatable = true;
    std::string why;       // "query" | "masked" | ""
    double ablationKl = 0; // KL(full || ablated), nats
    double deltaLogp = 0;  // log p_ablated(topToken) - log p_full(topToken), nats
    double estimate = 0;   // sum over layers and heads of attention x |W_O,h v|
};

struct AttributionOptions {
    // How many slots `ranked` lists (the largest ablation effects first); 0 = every ablatable
    // slot. Negative is an error naming `top`.
    int64_t top = 0;
};

struct AttributionResult {
    int32_t topToken = -1;               // argmax of the full (recomputed) distribution
    double topLogp = 0;                  // its log probability there, nats
    std::string topText;                 // its text after the last token ("" without a tokenizer)
    std::vector<SlotAttribution> bySlot; // every cache slot, in slot order
    // Spearman's rank correlation between ablationKl and estimate over the ablatable slots, in
    // [-1, 1]; NaN when fewer than two slots are ablatable or either column is constant.
    double rankCorrelation = 0;
    int64_t ablated = 0;         // slots ablated (the ones the correlation is over)
    std::vector<int64_t> ranked; // slot indices, largest ablationKl first (ties: earlier slot)
};

// {"slots": [{"slot", "position", "token_index", "token", "text", "ablatable", "why",
// "ablation_kl", "delta_logp", "estimate"}], "rank_correlation" (null when NaN), "ablated",
// "top_token", "top_text", "top_logp", "ranked", "distribution": "recompute-last-step"}.
nlohmann::json toJson(const AttributionResult& r);

// The last step's logits recomputed with cache slot `slot` hidden from every layer and head.
// Errors: an empty session, a slot outside 0..length-2 (the last slot is the query).
Result<std::vector<float>> ablateSlot(const Session& session, int64_t slot);

// The leave-one-out effect of every slot ([length]): KL(full || ablated) on the recomputed
// last step, and with horizon > 1 averaged over that many steps: the full state's own greedy
// continuation (horizon - 1 tokens, fewer where the context ends) fed to both, the slot staying
// hidden while the continuation's slots are seen, as after an eviction. The last slot and slots
// the cache masks get 0. What the survival lab's `oracle` policy ranks by (its horizon: the
// steps the lab measures). Cost: length x horizon single-token forward passes.
// Errors: an empty session, horizon outside 1..4096.
Result<std::vector<double>> ablationEffects(const Session& session, int horizon = 1);

// Attribution of `session`'s slots; slotTokens[i] is the token index slot i holds (empty:
// slot i holds token i, which needs as many tokens as slots). Errors: no model, an empty
// session, a bad `top`, slotTokens that do not fit the cache.
Result<AttributionResult> attributeSession(const Session& session,
                                           const std::vector<int64_t>& slotTokens,
                                           const AttributionOptions& options = {});

// The same for a snapshot: restored (restore(); `force` restores despite semantic errors,
// structural ones always refuse), its slots mapped to tokens by recordedKeptTokens().
Result<AttributionResult> attribute(const Snapshot& snapshot, std::shared_ptr<const Model> model,
                                    const AttributionOptions& options = {}, bool force = false);

// Spearman's rank correlation of two equally long columns (ties ranked by their mean); NaN when
// fewer than two values or a column is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

} // namespace kvscope::state
