#include "state/verify/positionalign.h"

#include "state/ledger/snapshot.h"

#include <algorithm>

namespace kvscope::state {

PositionAlignment alignPositions(int64_t tokens, const std::vector<int64_t>& positions,
                                 int64_t nextPosition, const std::vector<int64_t>& keptTokens) {
    PositionAlignment a;
    a.tokens = std::max<int64_t>(0, tokens);
    a.cacheLength = static_cast<int64_t>(positions.size());
    a.nextPosition = nextPosition;
    // A kept-token record counts only where it fits: one strictly increasing processed token
    // per slot.
    a.evictionRecorded =
        !keptTokens.empty() && static_cast<int64_t>(keptTokens.size()) == a.cacheLength &&
        keptTokens.front() >= 0 && keptTokens.back() < a.tokens &&
        std::adjacent_find(keptTokens.begin(), keptTokens.end(),
                           [](int64_t x, int64_t y) { return y <= x; }) == keptTokens.end();
    std::vector<int64_t> slotOf(static_cast<size_t>(a.tokens), -1);
    if (a.evictionRecorded) {
        for (size_t i = 0; i < keptTokens.size(); ++i)
            slotOf[static_cast<size_t>(keptTokens[i])] = static_cast<int64_t>(i);
        a.expectedNext = keptTokens.back() + 1;
    } else {
        for (int64_t t = 0; t < std::min(a.tokens, a.cacheLength); ++t)
            slotOf[static_cast<size_t>(t)] = t;
        a.expectedNext = a.cacheLength;
    }
    const int64_t n = a.evictionRecorded ? a.tokens : std::max(a.tokens, a.cacheLength);
    a.rows.reserve(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        PositionAlignment::Row r;
        r.token = t;
        r.expected = t;
        r.slot = t < a.tokens ? slotOf[static_cast<size_t>(t)] : t; // past the tokens: slot t
        r.stored = r.slot >= 0 ? positions[static_cast<size_t>(r.slot)] : -1;
        r.evicted = r.slot < 0 && a.evictionRecorded;
        r.mismatch = r.slot >= 0 ? (r.stored != r.expected || t >= a.tokens) : !r.evicted;
        if (r.mismatch) {
            ++a.mismatches;
            if (a.firstMismatch < 0)
                a.firstMismatch = t;
        }
        a.rows.push_back(r);
    }
    return a;
}

PositionAlignment alignPositions(const Snapshot& s) {
    return alignPositions(static_cast<int64_t>(s.tokens.size()), s.positions, s.nextPosition,
                          recordedKeptTokens(s));
}

} // namespace kvscope::state
