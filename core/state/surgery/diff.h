// diff: what differs between two snapshots — no model needed.
//
// Four parts: (1) the token buffers aligned from the start (common prefix length, the first
// diverging index and the tokens there; -1 on a side that has ended); (2) the positional state
// and the mask compared index by index (how many differ, the first that does, and for positions
// the common offset when every cached position moved by the same amount); (3) the K/V delta per
// layer and per KV head over the cache slots both hold (min of the two lengths): max |Δ|,
// relative L2 ‖a - b‖ / ‖a‖ (0 when both are zero, +inf when only a is), cosine; computed in
// float64 from the raw bytes of any cache dtype; (3) the manifests compared field by field
// (config, dtype, fingerprints, sampler, prompt meta, lineage, ...), each difference as
// {"field": dotted path, "a", "b"}. Snapshots whose caches cannot be compared (other layer
// count, kv_heads, head_dim, dtype, or malformed blobs) get `cacheMismatch` set and no deltas —
// never a crash. The last-step logits are compared too (max |Δ|). (4) is the manifest.
//
// A side whose head mask cannot be read as [layers, kv_heads, slots] entries of 0 or 1 (the
// verifier's structural checks head_mask.shape and head_mask.values) is reported in `invalid`,
// by side and check: there is no (layer, head, slot) to compare its entries at, so such a
// report is not an answer (`kvscope-cli diff` refuses it, exit 1, naming the file). Other
// structural findings stay comparable and are reported as differences: positions or a mask of
// another length than the cache (compared slot by slot over the slots both hold, the lengths
// shown), K/V blobs of the wrong size (`cacheMismatch`, the caches not compared).
//
// This is the one diff of kvscope: `kvscope-cli diff` prints it and the GUI paints it.
//
// Thread-safety: pure functions over const values.
#pragma once

#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"

#include <nlohmann/json.hpp>
#include <optional>
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

// Two integer sequences (positions, mask) compared index by index over the indices both hold.
struct SequenceDiff {
    int64_t lengthA = 0, lengthB = 0;
    int64_t compared = 0;             // min(lengthA, lengthB)
    int64_t differ = 0;               // compared indices whose values differ
    int64_t firstDifferingIndex = -1; // -1: no compared index differs
    // b - a when every compared index differs by that same non-zero amount (a shifted
    // position record); empty otherwise.
    std::optional<int64_t> offset;
    bool equal() const { return differ == 0 && lengthA == lengthB; }
    nlohmann::json toJson() const;
};

struct FieldDifference {
    std::string field;
    nlohmann::json a, b;
};

// A structural problem of one input: "a" or "b", and the verifier's violation (its check id,
// e.g. "head_mask.shape", and message).
struct InvalidInput {
    std::string side;
    Violation violation;
};

struct DiffReport {
    // The models the two states were made with (modelName()), and whether they are the same
    // model (equal model fingerprints): two models' states differ in everything below for that
    // reason first, and their token ids belong to different vocabularies.
    std::string modelA, modelB;
    bool sameModel = true;
    int64_t tokensA = 0, tokensB = 0;
    int64_t commonPrefix = 0;
    int64_t firstDivergence = -1;     // -1: the token buffers are identical
    int32_t tokenA = -1, tokenB = -1; // at firstDivergence; -1 where that side has ended
    SequenceDiff positions;           // the recorded position of every cached token
    int64_t nextPositionA = 0, nextPositionB = 0;
    SequenceDiff mask;
    // The head masks over the (layer, KV head, slot) entries both states hold (a state without
    // one counts as every head seeing every slot): which differ. Lengths are each mask's entries
    // and indices a's, [layers, kv_heads, slots] flattened; an invalid mask is not compared.
    SequenceDiff headMask;
    int64_t comparedPositions = 0; // cache slots compared (min of the two lengths)
    std::string cacheMismatch;     // non-empty: caches not compared, and why
    std::vector<LayerDiff> layers;
    double maxAbs = 0; // over every layer, K and V
    // max |Δ| over heads, K and V per cache slot: [layers][comparedPositions], row-major
    // (for heatmaps; not in toJson()).
    std::vector<float> layerPositionMaxAbs;
    // A slot "diverges" when its max |Δ| exceeds `tolerance` (by cache dtype: f32 1e-3,
    // f16 2e-2, bf16 1e-1; a NaN delta always diverges). The first diverging layer and the
    // earliest diverging slot over all layers; -1 when none.
    double tolerance = 0;
    int firstDivergingLayer = -1;
    int64_t firstDivergingPosition = -1;
    // max |Δ| of the last-step logits; -1 when their sizes differ (e.g. one side has none).
    double logitsMaxAbs = 0;
    std::vector<FieldDifference> fields;
    // Structural problems of the inputs (see above); empty for two well-formed snapshots.
    std::vector<InvalidInput> invalid;

    // No input is invalid, and tokens, positions, next position, mask, cache (over the compared
    // slots), logits and manifest fields all equal, except the lineage's id/created_at which always
    // differ between two snapshots.
    bool identicalState() const;
    // Manifest fields that differ, the lineage's id and created_at (which always differ between
    // two snapshots) not counted.
    int manifestDifferences() const;
    // The first token index where the tokens, the positions, the mask or the K/V differ (the
    // smallest of firstDivergence, positions/mask's first differing index and
    // firstDivergingPosition); -1 when none does. What the GUI's strips select.
    int64_t firstDifference() const;
    // "identical" (identicalState()); "same" — the same tokens, positions, next position,
    // masks, no slot beyond `tolerance`, last-step logits within `tolerance` too, only manifest
    // fields (a replay's lineage, say) or sub-tolerance K/V deltas differing; "different"
    // otherwise (an invalid input included). JSON "verdict".
    std::string verdict() const;
    nlohmann::json toJson() const;
};

DiffReport diff(const Snapshot& a, const Snapshot& b);

// The slot tolerance diff() uses for a cache dtype ("f32", "f16", "bf16").
double cacheDiffTolerance(const std::string& dtype);

} // namespace kvscope::state
