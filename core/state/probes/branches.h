// Branches side by side: two states that share a prefix of tokens (a fork's branches, a
// restored state and its original) as token rows aligned at the branch point, each step after
// it with the KL between the two states' next-token distributions (issue 45).
//
// The prefix p is the number of leading tokens both hold. Row k (k = 0, 1, ...) is the step
// after token p-1+k: the distribution that predicts token p+k, computed over each state's own
// cache of the prefix (its first p-1 slots; the rest of its tokens are run again from there,
// in one pass). Two KLs per step, KL(A ‖ B):
//   own     each state on its own tokens: how far apart the branches' futures are (0 at k = 0
//           for two forks of one state, growing as their tokens part);
//   forced  B's cached prefix teacher-forced on A's tokens: what B's cache alone changes (0 at
//           every step for forks of one state; a damaged or foreign restore shows here).
// A step exists while both states hold its token (own) or while A does (forced). With p = 0
// (nothing shared), rows start after token 0 and are computed from scratch.
//
// Thread-safety: a free function over values; the model is shared read-only.
#pragma once

#include "engine/session.h"
#include "state/ledger/snapshot.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace kvscope::tok {
class Tokenizer;
}

namespace kvscope::state {

struct BranchStep {
    int64_t after = 0;              // the token index whose next-token distribution this is
    int32_t tokenA = -1;            // A's token after it (-1: A has ended)
    int32_t tokenB = -1;            // B's token after it (-1: B has ended)
    std::optional<double> klOwn;    // each state on its own tokens (both hold token `after`)
    std::optional<double> klForced; // B's prefix fed A's tokens
};

struct BranchComparison {
    int64_t prefix = 0; // tokens both states hold at the start
    int64_t tokensA = 0, tokensB = 0;
    std::vector<BranchStep> steps;
    double maxKlOwn = 0, maxKlForced = 0;
    int64_t firstStepForcedAbove = -1; // first step whose forced KL exceeds `threshold`; -1 none
    double threshold = 0;              // the same-device profile's KL bound (restore.h)
};
// `tokenizer` may be null (texts are then the ids).
nlohmann::json toJson(const BranchComparison& c, const tok::Tokenizer* tokenizer);

// Errors: no model, an empty state, a cache that does not hold one slot per token (an
// eviction: there is no per-token prefix to branch from), states of another model shape.
Result<BranchComparison> compareBranches(const Session& a, const Session& b);
// Snapshots: each restored forcibly first (structural violations still refuse, naming the side).
Result<BranchComparison> compareBranches(const Snapshot& a, const Snapshot& b,
                                         std::shared_ptr<const Model> model);

} // namespace kvscope::state
