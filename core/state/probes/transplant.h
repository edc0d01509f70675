// The residual-stream transplant ("what has to survive?"): which part of the state
// carries a generation forward — the residual stream at one position, the token, or the
// cache?
//
// transplant() runs a donor and a recipient prompt, replaces the recipient's residual stream
// after layer L with the donor's (all positions, or only the last one) through the session's
// Observer::replace hook, and compares the recipient's next-token distribution with the
// donor's: an all-position transplant reproduces the donor exactly (KL ~ 0), because every
// layer above L then computes from the donor's residual (and caches the donor's K/V).
//
// Persistence then follows K greedy decode steps after three interventions on the recipient:
//   residual-only  the last position's residual at layer L (the cache keeps the recipient's
//                  K/V everywhere else);
//   token-only     nothing patched, but the donor's next token is fed instead of the
//                  recipient's own;
//   residual+kv    the residual at every position at layer L, hence also the K/V of layers
//                  L+1.. at every cached position (layers 0..L keep the recipient's K/V);
//                  needs prompts of the same length.
// Step k compares the intervened run's distribution for its k-th continuation token with
// the donor's and the original recipient's (each continuing greedily on its own tokens):
// KL(donor_k || intervened_k) and KL(original_k || intervened_k).
//
// Thread-safety: a free function over values; the model is shared read-only.
#pragma once

#include "engine/model.h"
#include "state/verify/restore.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::state {

enum class TransplantPositions { All, Last };
std::string transplantPositionsName(TransplantPositions p); // "all" | "last"

struct TransplantOptions {
    int layer = 0; // residual after this layer (0..layers-1)
    TransplantPositions positions = TransplantPositions::All;
    int steps = 8; // persistence steps K; 0 skips the persistence table
};

struct PersistenceStep {
    int step = 0;
    int32_t token = -1; // the intervened run's greedy token at this step
    double klDonor = 0, klOriginal = 0;
    bool matchesDonor = false, matchesOriginal = false; // token == donor's / original's
};

struct Persistence {
    std::string intervention; // residual-only | token-only | residual+kv
    std::vector<PersistenceStep> steps;
    std::string skipped; // why there are no steps (e.g. prompts of different lengths)
};

struct TransplantResult {
    int layer = 0;
    TransplantPositions positions = TransplantPositions::All;
    int64_t recipientTokens = 0, donorTokens = 0;
    LogitComparison vsDonor;         // donor (reference) vs transplanted recipient
    LogitComparison vsOriginal;      // original recipient (reference) vs transplanted
    LogitComparison donorVsOriginal; // donor vs original recipient: the gap to close
    std::vector<int32_t> donorTokensGenerated, originalTokensGenerated; // greedy, K each
    std::vector<Persistence> persistence; // residual-only, token-only, residual+kv
};
nlohmann::json toJson(const TransplantResult& r);

// Errors: no model, an empty prompt, a token outside the vocabulary, a layer out of range,
// `all` positions with prompts of different lengths, prompts + steps beyond the context.
Result<TransplantResult> transplant(std::shared_ptr<const Model> model,
                                    const std::vector<int32_t>& recipient,
                                    const std::vector<int32_t>& donor,
                                    const TransplantOptions& options = {});

} // namespace kvscope::state
