// Replay and drift: the two ways kvscope measures whether two states are "the same".
//
// replay(): rebuilds the cache from the snapshot's token buffer in a fresh session (one
// batched prefill at positions 0..n-1) and compares it with the restored cache layer by
// layer: max |ΔK|, max |ΔV|, cosine similarity of the flattened K and V, and the first
// position whose K or V differs by more than `threshold` — the first diverging
// layer/position of the whole cache. Replaying text is not restoring state: a restored
// cache with shifted positions, another model's keys or a corrupted layer shows up here.
//
// drift(): continues N steps from two sessions A and B under the same sampler state. A
// samples its own tokens; both are then teacher-forced on A's tokens, so every step compares
// logits for the same prefix: per-step KL(A || B), max |Δlogit|, top-1 and top-k agreement.
// B's own choice at each step (the same sampler state applied to B's logits) is recorded
// too; the first step where it differs from A's is the first diverging token.
//
// Thread-safety: free functions over values (sessions are copied; the caller's are intact).
#pragma once

#include "engine/session.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshot.h"

namespace kvscope::state {

struct LayerDelta {
    int layer = 0;
    double keyMaxAbs = 0, valueMaxAbs = 0;
    double keyCosine = 1, valueCosine = 1;
    int64_t firstDivergingPosition = -1; // -1: within threshold everywhere
    int firstDivergingHead = -1;
};

struct CacheComparison {
    std::vector<LayerDelta> layers;
    int firstDivergingLayer = -1;        // lowest layer with any divergence
    int64_t firstDivergingPosition = -1; // earliest diverging position over all layers
    double threshold = 0;
    std::string mismatch; // non-empty when shapes differ (nothing else is compared)
};
nlohmann::json toJson(const CacheComparison& c);

// Compares two caches element-wise (as float32). `threshold` is an absolute bound on |Δ|.
CacheComparison compareCaches(const KvCache& a, const KvCache& b, double threshold);

struct ReplayResult {
    CacheComparison cache;
    LogitComparison logits; // stored last-step logits vs the replay's
    std::vector<int64_t> restoredPositions;
    bool positionsMatch = true; // restored positions == 0..n-1
};
nlohmann::json toJson(const ReplayResult& r);

// threshold <= 0 picks a default by cache dtype (1e-3 f32, 2e-2 f16, 1e-1 bf16). The
// snapshot is restored forcibly (replay is a diagnostic, it must work on broken states as
// long as the cache can be built).
Result<ReplayResult> replay(const Snapshot& s, std::shared_ptr<const Model> model,
                            double threshold = 0);

struct DriftStep {
    int step = 0;
    int32_t tokenA = -1;    // A's sampled token (fed to both)
    int32_t ownTokenB = -1; // what B would have sampled from the same sampler state
    LogitComparison logits; // A (reference) vs B
    // log p(tokenA) under A's and under B's logits (nats): what perplexity and the reference
    // token's probability are made of.
    double logProbA = 0, logProbB = 0;
};

struct DriftResult {
    std::vector<DriftStep> steps;
    std::vector<int32_t> tokens; // A's tokens
    int firstDivergingStep = -1; // first step where B's own choice differs, -1 if never
    double maxKl = 0, maxAbs = 0;
    std::string stopReason; // "steps" | "eos" | "bos" | "context_full"
};
nlohmann::json toJson(const DriftResult& d);

Result<DriftResult> drift(const Session& a, const Session& b, int steps, const Sampler& sampler,
                          int topK = 5);

} // namespace kvscope::state
