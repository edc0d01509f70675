// State surgery: fork, truncate, patch and splice — operations over Snapshots that each
// produce a NEW snapshot whose lineage records the operation and its parameters (nothing is
// edited in place, so "undo" is selecting the parent). Each returns the new snapshot(s) and a
// report (toJson() for `--json` and the GUI).
//
// Lineage operations and parameters (LEDGER.md "Lineage"):
//   fork      {"branch", "branches", "seed", "seed_base", "steps", "temperature", "top_p",
//              "top_k"; with steps > 0 also "generated", "stop_reason"}: one "fork" entry per
//              branch, parent = the source. With steps > 0 the branch is restored, continued
//              `steps` tokens with its own seed and captured — still a single "fork" entry
//              (steps recorded), so the tree shows one edge per branch.
//   truncate  {"at", "dropped_tokens", "logits": "recomputed"}
//   patch     {"source_id", "source_file"?, "layer", "head" (-1 = all), "begin", "end",
//              "logits": "recomputed" | "stale"}
//   splice    {"source_id", "begin", "end", "at", "inserted", "shift",
//              "logits": "recomputed"}
//
// Logits: truncate and splice always recompute the last step with the model (the cache
// truncated to n-1 positions, then the last token fed at its recorded position — exactly what
// the equivalence check does, so `verify` accepts the result). patch recomputes the same way
// when a model is given; the patched K/V of every position but the last then shape the new
// logits (the last token's own K/V are recomputed by that forward pass; the patched ones at
// the last position act from the next step on). Without a model patch keeps A's logits and
// records "logits": "stale" — `verify` then reports logits.equivalence, as it should.
//
// Thread-safety: free functions over values; snapshots share their immutable K/V buffers.
#pragma once

#include "engine/model.h"
#include "state/probes/compare.h"
#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::state {

// ---- fork ----

struct ForkOptions {
    int branches = 2;
    // Branch i samples with seed seedBase + i (its RNG state is that seed, as Sampler seeds
    // it). Unset: the source's sampler seed + 1 (42 + 1 without a recorded sampler).
    std::optional<uint64_t> seedBase;
    int steps = 0; // > 0: continue each branch this many tokens (needs a model)
    // Sampler settings for the branches; unset fields keep the source's (or temperature 1,
    // top-p 0.9 without a recorded sampler).
    std::optional<float> temperature;
    std::optional<float> topP;
    std::optional<int32_t> topK;
    // steps > 0 restores each branch first; like `continue`, that refuses a state with
    // error-severity violations (e.g. a patched cache.provenance) unless forced.
    bool force = false;
};

struct ForkBranch {
    Snapshot snapshot;
    uint64_t seed = 0;
    std::vector<int32_t> generated; // tokens generated when steps > 0
    std::string text;               // their text when the model has a tokenizer
    std::string stopReason;         // "" when not continued
};

struct ForkResult {
    std::vector<ForkBranch> branches;
    std::string sourceId;
    nlohmann::json toJson() const; // branch snapshots by lineage id, not their tensors
};

// `model` may be null when options.steps == 0.
Result<ForkResult> fork(const Snapshot& source, const ForkOptions& options,
                        std::shared_ptr<const Model> model = nullptr);

// ---- truncate ----

struct TruncateReport {
    int64_t at = 0;
    int64_t originalTokens = 0;
    std::vector<int32_t> droppedTokens;
    std::string droppedText; // empty without a tokenizer
    std::vector<TokenSegment> segmentsRemoved;
    std::vector<TokenSegment> segmentsClipped; // as they were before clipping
    int64_t promptTokensBefore = 0, promptTokensAfter = 0;
    nlohmann::json toJson() const;
};

struct TruncateResult {
    Snapshot snapshot;
    TruncateReport report;
};

// Keeps tokens 0..at-1 (1 <= at <= tokens) with their cache slots, positions, mask and
// segments, sets the next position after the last kept one and recomputes the last step's
// logits with `model` (required).
Result<TruncateResult> truncate(const Snapshot& source, int64_t at,
                                std::shared_ptr<const Model> model);

// ---- patch ----

struct PatchOptions {
    int layer = 0;
    int head = -1;      // KV head; -1 = all heads
    int64_t begin = -1; // position range [begin, end); -1/-1 = all positions (equal lengths)
    int64_t end = -1;
    std::string sourceFile; // informational, recorded in the lineage when set
};

struct PatchReport {
    int layer = 0, head = -1;
    int64_t begin = 0, end = 0;
    std::string sourceId;
    int64_t keyElementsChanged = 0, valueElementsChanged = 0;
    bool logitsRecomputed = false;              // false: A's logits kept and marked stale
    std::optional<LogitComparison> logitChange; // old vs recomputed logits (with a model)
    std::vector<std::string> notes;             // e.g. the source was computed by another model
    nlohmann::json toJson() const;
};

struct PatchResult {
    Snapshot snapshot;
    PatchReport report;
};

// Replaces layer `layer`'s K and V (one KV head's, or all) at positions [begin, end) of
// `target` by `source`'s. Shapes must agree (layers, kv_heads, head_dim, dtype) and both must
// cover the range. `model` may be null (logits are then kept and marked stale).
Result<PatchResult> patch(const Snapshot& target, const Snapshot& source,
                          const PatchOptions& options,
                          std::shared_ptr<const Model> model = nullptr);

// ---- splice ----

struct SpliceOptions {
    int64_t begin = 0, end = 0; // token range [begin, end) of the source
    int64_t at = 0;             // insert before token `at` of the target (0..target length)
};

struct SpliceReport {
    int64_t begin = 0, end = 0, at = 0;
    std::string sourceId;
    int64_t inserted = 0;
    int64_t fragmentShift = 0; // new position - old position of the fragment's first token
    int64_t tailShift = 0;     // positions the target's tail moved by (== inserted)
    int64_t rerotatedFragmentKeys = 0, rerotatedTailKeys = 0; // positions whose keys moved
    Report validation;                                        // state::validate(result, model)
    CacheComparison drift;      // spliced cache vs a fresh prefill of the spliced tokens
    LogitComparison logitDrift; // next-step logits: recomputed text (reference) vs spliced
    nlohmann::json toJson() const;
};

struct SpliceResult {
    Snapshot snapshot;
    SpliceReport report;
};

// Inserts the source's cache fragment for tokens [begin, end) into the target before token
// `at`: the fragment's keys are re-rotated from their old positions to their new ones and the
// target's tail is shifted (and re-rotated) by the fragment length; tokens, positions, mask,
// segments and the next position follow. Models with learned positions (GPT-2) are refused
// unless nothing moves. The drift against recomputing the spliced text in place is measured
// (a fresh session prefills the spliced tokens at 0..n-1). `model` is required.
Result<SpliceResult> splice(const Snapshot& target, const Snapshot& source,
                            const SpliceOptions& options, std::shared_ptr<const Model> model);

// ---- helpers shared with diff / the CLI ----

// Checks that the cache, tokens, positions and mask of `s` agree in size (the invariants
// surgery relies on); throws nothing, returns an error naming `what` and the field.
Status checkSurgeryShape(const Snapshot& s, const std::string& what);

// Bytes per cache element for "f32" | "f16" | "bf16" (0 otherwise).
std::size_t cacheElementSize(const std::string& dtype);

} // namespace kvscope::state
