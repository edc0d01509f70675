// The survival lab: how much of a state can be dropped or coarsened, and what that does to
// the continuation ("what has to survive?").
//
// compress() turns a snapshot into a smaller state that restores and continues like any other:
//   full             the state as it is (the reference point)
//   replay           the token buffer only; the cache rebuilt by one prefill (rebuild time)
//   sink-window      evicts all but the first `sinks` (4) slots and the most recent ones
//   h2o              keeps the slots with the most attention accumulated over every query,
//                    plus a recent window (`recent`, default half the budget)
//   tova             keeps the slots the last query attends to most
//   snapkv           keeps an observation window of the last `window` (64, by default at
//                    most half the budget) queries and the
//                    slots that window attends to most, averaged over `pool` (5) neighbours;
//                    "query_aware" records whether the window reached into the prompt (the
//                    question was among the observing queries)
//   knorm            keeps the slots whose keys have the smallest L2 norm
//   random           keeps a seeded random choice (`seed`): the control
//   oracle           keeps the slots whose removal changes the continuation most: each slot's
//                    leave-one-out KL (probes/attribution.h, ablationEffects), averaged over
//                    `horizon` steps of the state's own greedy continuation (default: `steps`,
//                    what survive() measures; 1 = the next token only, as `attribute`
//                    reports). One forward pass per slot and step. The reference the other
//                    policies are measured against, but not an upper bound: it judges slots one
//                    at a time with all the others present (what a slot is worth once most
//                    others are gone it does not see) and keeps one set for every layer and
//                    head; the README says where other policies beat it
//   quant-kivi       quantizes keys per channel and values per token in groups of `group`
//                    (32) to `bits` (2, 4, 8), the last `residual` (16) tokens kept as they are
//                    (KIVI's axes); `kv` = kv | k | v quantizes both, keys or values only
//   quant-same-axis  the same with keys also grouped per token
//   residual-all     keeps the residual stream entering every layer instead of K/V; K/V
//                    rebuilt by each layer's norm, K/V projections and RoPE (engine/residual.h)
//   residual-at      keeps K/V of the layers below `layer` (default: half the layers) and the
//                    residual entering `layer`; layers `layer`.. rebuilt by running them
//                    over the stored positions
//
// Every eviction policy takes `allocation` (probes/eviction.h): uniform (default: one set of
// slots for every layer and head, by the score summed over all of them), pyramid (more slots
// in low layers, the same total) or head-adaptive (per layer, a top-k over (head, slot)
// entries). A non-uniform allocation keeps the union of the heads' slots in the cache and a
// head mask (KvCache::headMask) saying which head kept which; the slots a head dropped hold
// zeros. Attention scores come from the queries of one replay of the token buffer
// (QueryRecorder) against the state's own keys.
// Every eviction keeps the last token's slot, and every compressed state's last-step logits
// are recomputed over the compressed cache, so `verify` finds it consistent: its lineage
// ("survive", with the policy, its parameters, the kept token indices and, for a head mask,
// the slots each head kept: "kept_per_head") tells verify which
// gaps were made on purpose; a gap it does not record is still corruption.
//
// Quantized states store the dequantized values in the cache dtype; bytes_kept counts what a
// packed store takes: the quantized values at `bits` each, one f32 scale and one f32 zero
// point per group, the residual tokens at the cache dtype. An evicted state counts its kept
// slots and 8 bytes per kept position; with a non-uniform allocation, each head's kept slots
// with a 4-byte slot index each, and 8 bytes per position of the union. The full state counts its K
// and V. A residual checkpoint counts its residuals as float32 [tokens, dim] each (plus the kept
// layers' K/V); its build time is the rebuild, not the recording of the residual stream.
//
// survive() then measures the compressed state against the full one over a teacher-forced
// continuation of `steps` tokens (the full state's greedy tokens fed to both): per-step
// KL(full || compressed), top-1 agreement, the probability the compressed state gives the
// reference token, the first step where its own greedy choice differs, the perplexity ratio
// of the reference tokens, and the recall probes (RecallProbe).
//
// Thread-safety: free functions over values; the model is shared read-only.
#pragma once

#include "engine/model.h"
#include "state/ledger/snapshot.h"
#include "util/status.h"

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::state {

// The policy names compress() knows, in the order a sweep runs them.
const std::vector<std::string>& survivalPolicies();
// Whether `policy` keeps fewer slots (eviction) rather than coarser values.
bool isEvictionPolicy(const std::string& policy);
// How one run of a sweep is told apart from the policy's other runs: "25 %" or "16 slots"
// (eviction), "2 bits" (quantization), "layer 1" (residual-at); empty for the others.
std::string runSetting(const std::string& policy, double budget, const nlohmann::json& parameters);
// Which curve of the frontier a run belongs to: the policy, and its budget allocation when that
// is not uniform ("snapkv pyramid").
std::string runCurve(const std::string& policy, const nlohmann::json& parameters);

struct SurviveOptions {
    std::string policy = "full";
    // A fraction of the cached slots in (0, 1], or a slot count when > 1 (eviction only).
    double budget = 1.0;
    // Policy parameters (name -> value): sinks, recent, window, pool, seed, horizon, bits,
    // group, residual, kv. Unknown names are refused by name.
    std::map<std::string, std::string> params;
    int steps = 32;     // teacher-forced continuation (survive())
    bool recall = true; // survive(): run the recall probes too
};

// Recall probes: can the compressed state still copy what its context holds? Each probe is a
// state of its own (seeded random ordinary tokens), compressed with the same policy, budget
// (as a share of its slots) and parameters, then fed the probe's answer teacher-forced:
//   induction      BOS + R + R[0, n/2): does it continue the repeat, R[n/2, n)?
//   needle@d       BOS + a haystack (the model's own greedy text from BOS) with a needle N
//                  of 16 random tokens at depth d (0.1, 0.5, 0.9 of the haystack) + N[0, 8)
//                  as the cue: does it continue N[8, 16)?
// Scored for the full probe state and for its compressed copy: the share of answer tokens
// the state ranks first, and their mean negative log-likelihood (a small model may rank
// few copied tokens first, yet give them far more probability than an unseen token).
struct RecallProbe {
    std::string name; // "induction", "needle"
    double depth = 0; // needle: where it sits in the filler (0..1); induction: 0
    int64_t contextTokens = 0, answerTokens = 0;
    double full = 0, compressed = 0;         // top-1 accuracy on the answer
    double fullLoss = 0, compressedLoss = 0; // mean NLL of the answer tokens, nats
};

struct Compressed {
    Snapshot snapshot; // restorable and continuable
    std::string policy;
    double budget = 1.0;
    nlohmann::json parameters;        // as applied, defaults included
    std::vector<int64_t> keptTokens;  // token indices whose slots were kept (all for non-eviction)
    int64_t budgetSlots = 0;          // the slots per head the budget buys (all for non-eviction)
    std::vector<int64_t> keptPerHead; // eviction: slots each (layer, KV head) kept, layer-major
    uint64_t bytesKept = 0, bytesFull = 0;
    double buildSeconds = 0; // building the compressed state (replay: the rebuild)
};

// Errors: an unknown policy or parameter, a budget outside (0, 1] (or a count beyond the
// cache), a state whose cache does not hold every token at positions 0..n-1 with no masked
// slot (already compressed, spliced or offset), a model that does not fit the state.
Result<Compressed> compress(const Snapshot& source, std::shared_ptr<const Model> model,
                            const SurviveOptions& options);

struct KlSummary {
    double mean = 0, median = 0, p99 = 0, max = 0;
};

struct SurviveResult {
    std::string policy;
    double budget = 1.0;
    nlohmann::json parameters;
    uint64_t bytesKept = 0, bytesFull = 0;
    double buildSeconds = 0;
    int steps = 0;                    // steps compared
    KlSummary kl;                     // per-step KL(full || compressed), nats
    double top1Agreement = 1;         // share of steps whose top-1 tokens agree
    double meanDeltaP = 0;            // mean of p_full(ref) - p_compressed(ref)
    int firstDivergence = -1;         // first step the compressed state's own greedy choice differs
    double pplRatio = 1;              // perplexity of the reference tokens, compressed / full
    std::vector<int64_t> keptTokens;  // every slot some head kept (the union)
    std::vector<int64_t> keptPerHead; // eviction: slots each (layer, KV head) kept, layer-major
    int64_t budgetSlots = 0;          // the slots per head the budget bought
    std::vector<int32_t> reference, ownTokens; // full state's greedy tokens; compressed's own
    std::vector<RecallProbe> recall;           // empty when not asked for
    // What the compression did to each token's K/V, layer-major [layers x tokens]: the
    // relative L2 error of the token's keys and values over all KV heads,
    // |(K', V') - (K, V)| / |(K, V)|; 1 for an evicted token, 0 for an exact one.
    int64_t damageLayers = 0;
    std::vector<float> damage;
    // `withDamage`: include "damage" ({"layers", "tokens", "values"}; a sweep leaves it out).
    nlohmann::json toJson(bool withDamage = true) const;
};

// compress(), then the comparison. The Compressed state comes back too when asked for.
Result<SurviveResult> survive(const Snapshot& source, std::shared_ptr<const Model> model,
                              const SurviveOptions& options, Compressed* compressed = nullptr);

// Every policy at every budget (eviction and quantization at the budgets / bits that apply),
// in the order of survivalPolicies(): the frontier table.
struct SweepOptions {
    std::vector<double> budgets{0.125, 0.25, 0.5, 0.75};
    std::vector<int> bits{2, 4, 8};
    std::vector<int> layers; // residual-at's layers; empty: every layer
    // Budget allocations, each run for the policies whose scores differ per head
    // (scoresPerHead(): h2o, tova, snapkv, knorm); the others run uniform only.
    std::vector<std::string> allocations{"uniform", "pyramid", "head-adaptive"};
    int steps = 32;
    bool recall = true;
    // Called before each run with (runs done, runs in all, the run's label, e.g. "h2o 25 %");
    // returning false stops the sweep (an error "survive: sweep stopped").
    std::function<bool(int done, int total, const std::string& what)> progress = {};
};
Result<std::vector<SurviveResult>> sweep(const Snapshot& source, std::shared_ptr<const Model> model,
                                         const SweepOptions& options = {});
nlohmann::json sweepToJson(const std::vector<SurviveResult>& results);
std::string sweepToMarkdown(const std::vector<SurviveResult>& results);

} // namespace kvscope::state
