// PositionAlignment: token index vs stored position vs expected position, as plain data.
//
// A fresh run stores token i at position i and expects the next token at the cache length.
// A restored, spliced or tampered state may differ; this says where. Unit-tested in
// tst_widgets (no display needed).
#pragma once

#include <cstdint>
#include <vector>

namespace kvscope::widgets {

struct PositionAlignment {
    struct Row {
        int64_t index = 0;
        int64_t stored = -1;   // -1: the token has no cache slot
        int64_t expected = 0;  // index
        bool mismatch = false; // stored != expected, or no slot
    };
    std::vector<Row> rows;
    int64_t tokens = 0;
    int64_t cacheLength = 0;
    int64_t nextPosition = 0;
    int64_t expectedNext = 0; // cacheLength
    int64_t mismatches = 0;
    int64_t firstMismatch = -1;
    bool nextMismatch() const { return nextPosition != expectedNext; }
    bool lengthMismatch() const { return tokens != cacheLength; }

    static PositionAlignment compute(int64_t tokens, const std::vector<int64_t>& positions,
                                     int64_t nextPosition);
};

} // namespace kvscope::widgets
