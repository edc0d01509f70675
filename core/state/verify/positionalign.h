// Position alignment, token by token: which cache slot holds each processed token, the position
// stored there and the position it should have — the Positions panel's table, plot and counts.
//
// A fresh run holds token t in slot t at position t and expects the next token at the cache
// length. A recorded eviction (its kept_tokens, recordedKeptTokens()) holds token kept[i] in
// slot i at position kept[i]: the tokens it dropped have no slot by intent, and the next token
// is expected after the last kept one. This is the rule verify's checkPositions applies (an
// evicted state that verifies clean has no mismatch here), so the panel and Validation agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvscope::state {

struct Snapshot;

struct PositionAlignment {
    struct Row {
        int64_t token = 0;     // token index; past the processed tokens for a slot holding none
        int64_t slot = -1;     // the cache slot holding it; -1: none
        int64_t stored = -1;   // the position stored in that slot; -1 without a slot
        int64_t expected = 0;  // the token's index
        bool evicted = false;  // no slot, by a recorded eviction's intent
        bool mismatch = false; // stored != expected, or a slot missing without such a record
    };
    std::vector<Row> rows;
    int64_t tokens = 0;
    int64_t cacheLength = 0;
    int64_t nextPosition = 0;
    int64_t expectedNext = 0;
    bool evictionRecorded = false; // slots follow a recorded kept_tokens
    int64_t mismatches = 0;
    int64_t firstMismatch = -1; // row index
    bool nextMismatch() const { return nextPosition != expectedNext; }
    // More or fewer slots than processed tokens, not explained by a recorded eviction.
    bool lengthMismatch() const { return !evictionRecorded && tokens != cacheLength; }
    bool aligned() const { return mismatches == 0 && !nextMismatch() && !lengthMismatch(); }
};

// `keptTokens`: the token each slot holds (a recorded eviction, one strictly increasing index
// per slot equal to its stored position, as recordedKeptTokens() returns it); empty: slot i
// holds token i.
PositionAlignment alignPositions(int64_t tokens, const std::vector<int64_t>& positions,
                                 int64_t nextPosition, const std::vector<int64_t>& keptTokens = {});
PositionAlignment alignPositions(const Snapshot& s);

// The token index cache slot `slot` holds: keptTokens[slot] after a recorded eviction, else
// `slot`; -1 for a slot the record does not cover or a negative one.
inline int64_t tokenOfSlot(const std::vector<int64_t>& keptTokens, int64_t slot) {
    if (slot < 0)
        return -1;
    if (keptTokens.empty())
        return slot;
    return static_cast<std::size_t>(slot) < keptTokens.size()
               ? keptTokens[static_cast<std::size_t>(slot)]
               : -1;
}

} // namespace kvscope::state
