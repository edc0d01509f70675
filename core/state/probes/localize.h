// Localize: which of the K/V differences between two states of the same tokens change what
// the model does next — the question after "this restore is wrong" (issue 45).
//
// A is the state under suspicion (restored forcibly, as a runtime would continue from it), B
// the reference (by default A's own tokens recomputed in a fresh session: what A's cache
// should hold). Both must hold the same tokens in caches of the same shape. The quantity is
// the first step that reads every cached slot: B's greedy next token is fed to B and to A (at
// A's own next position), and KL(B ‖ A) compares the two next-token distributions. A patch
// copies B's K and V into A over one (layer, KV head or all heads, slot range); it never
// touches positions, the mask or the token buffer.
//
// The search, each step a forward pass of one token:
//   1. every layer patched alone: the KL each removes (kl_before - KL with that patch);
//   2. layers added largest effect first until KL falls under the tolerance (the layer-set
//      trace records every set tried, so "no smaller set in the search does" can be checked);
//   3. within each chosen layer the slot range is bisected: a half that brings KL under the
//      tolerance alone replaces the range, otherwise both halves are refined with the other
//      kept; then one KV head is tried in place of all (when the model has more than one);
//   4. a patch whose removal keeps KL under the tolerance is dropped (no single patch of the
//      minimal set can go).
// The tolerance is the KL bound of the equivalence profile (restore.h: same-device 1e-5 for
// f32, looser for f16/bf16). Verdicts: "clean" (A already continues as B does: nothing that
// matters), "localized" (a minimal set of patches found), "not-kv" (every layer patched and KL
// still above tolerance: what differs is not the K/V — positions, the next position, the mask
// or the head mask are named in otherDifferences). A map of KL removed per (layer, slot block),
// each block patched alone, is drawn by the GUI's Diff panel.
//
// Thread-safety: a free function over values; the model is shared read-only.
#pragma once

#include "engine/session.h"
#include "state/ledger/snapshot.h"
#include "state/verify/restore.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::state {

struct LocalizeOptions {
    ToleranceProfile profile = ToleranceProfile::SameDevice;
    int mapBlocks = 16; // slot blocks of the layer x slot map; 0: no map
    // A cap on the search's forward steps, counted from the first (the per-layer passes and the
    // layer search included; the map not counted): once reached, the bisection keeps ranges
    // whole and no single head is tried. Dropping unneeded patches (step 4) still runs.
    int maxEvaluations = 512;
};

struct LocalizePatch {
    int layer = 0;
    int head = -1;              // KV head, -1: every head
    int64_t first = 0, end = 0; // slots [first, end)
    double klAfter = 0;         // KL(B ‖ A with only this patch)
    double klRemoved = 0;       // kl_before - klAfter (negative: the patch made it worse)
    std::string stage;          // "layer" (step 1) | "minimal" (steps 2-4)
};

struct LayerSetTrial {
    std::vector<int> layers;
    double kl = 0;
};

struct LocalizeMap {
    int64_t block = 0;                          // slots per block (the last may be shorter)
    std::vector<std::vector<double>> klRemoved; // [layer][block]
};

struct LocalizeResult {
    std::string verdict;     // clean | localized | not-kv
    std::string summary;     // one sentence in words
    std::string reference;   // "replay" (A's tokens recomputed) | "b"
    int32_t probeToken = -1; // B's greedy next token, fed to both
    int64_t cacheSlots = 0;
    int layers = 0, kvHeads = 0;
    double klBefore = 0, klAfter = 0, klAllLayers = 0, tolerance = 0;
    ToleranceProfile profile = ToleranceProfile::SameDevice;
    std::vector<LocalizePatch> patches; // largest kl_removed first
    std::vector<int> minimal;           // indices into patches, by layer and slot
    std::vector<LayerSetTrial> layerSearch;
    std::vector<std::string> otherDifferences; // "positions", "next_position", "mask", ...
    std::optional<LocalizeMap> map;
    int evaluations = 0; // forward steps spent (map included)
    // The layers of the minimal set, ascending.
    std::vector<int> minimalLayers() const;
};
nlohmann::json toJson(const LocalizeResult& r);

// Sessions: `a` the suspect, `b` the reference (nullptr: a replay of a's tokens). Errors: no
// model, an empty state, a cache whose length is not the token count when no B is given (an
// eviction has no replay of the same slots), B with other tokens or another cache shape
// (named with the first differing index / field), no room in the context for the next step.
Result<LocalizeResult> localize(const Session& a, const Session* b,
                                const LocalizeOptions& options = {});

// Snapshots: each restored forcibly (structural violations still refuse, naming the file's
// fields), then localize() above.
Result<LocalizeResult> localize(const Snapshot& a, const Snapshot* b,
                                std::shared_ptr<const Model> model,
                                const LocalizeOptions& options = {});

} // namespace kvscope::state
