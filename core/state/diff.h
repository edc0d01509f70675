// diff: what differs between two snapshots — no model needed.
//
// Three parts: (1) the token buffers aligned from the start (common prefix length, the first
// diverging index and the tokens there; -1 on a side that has ended); (2) the K/V delta per
// layer and per KV head over the cache slots both hold (min of the two lengths): max |Δ|,
// relative L2 ‖a - b‖ / ‖a‖ (0 when both are zero, +inf when only a is), cosine; computed in
// float64 from the raw bytes of any cache dtype; (3) the manifests compared field by field
// (config, dtype, fingerprints, sampler, prompt meta, lineage, ...), each difference as
// {"field": dotted path, "a", "b"}. Snapshots whose caches cannot be compared (other layer
// count, kv_heads, head_dim, dtype, or malformed blobs) get `cacheMismatch` set and no deltas —
// never a crash. The last-step logits are compared too (max |Δ|).
//
// Thread-safety: pure functions over const values.
#pragma once

#include "state/snapshot.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::state {

struct KvDelta {
    double maxAbs = 0;
    double relL2 = 0;
    double cosine = 1;
};

struct HeadDiff {
    int head = 0;
    KvDelta key, value;
};

struct LayerDiff {
    int layer = 0;
    KvDelta key, value; // over all heads
    std::vector<HeadDiff> heads;
};

struct FieldDifference {
    std::string field;
    nlohmann::json a, b;
};

struct DiffReport {
    int64_t tokensA = 0, tokensB = 0;
    int64_t commonPrefix = 0;
    int64_t firstDivergence = -1;     // -1: the token buffers are identical
    int32_t tokenA = -1, tokenB = -1; // at firstDivergence; -1 where that side has ended
    int64_t comparedPositions = 0;    // cache slots compared (min of the two lengths)
    std::string cacheMismatch;        // non-empty: caches not compared, and why
    std::vector<LayerDiff> layers;
    double maxAbs = 0; // over every layer, K and V
    // max |Δ| of the last-step logits; -1 when their sizes differ (e.g. one side has none).
    double logitsMaxAbs = 0;
    std::vector<FieldDifference> fields;

    // Tokens, cache (over the compared slots) and manifest fields all equal, except the
    // lineage's id/created_at which always differ between two snapshots.
    bool identicalState() const;
    nlohmann::json toJson() const;
};

DiffReport diff(const Snapshot& a, const Snapshot& b);

} // namespace kvscope::state
