#include "positionalignment.h"

#include <algorithm>

namespace kvscope::widgets {

PositionAlignment PositionAlignment::compute(int64_t tokens, const std::vector<int64_t>& positions,
                                             int64_t nextPosition) {
    PositionAlignment a;
    a.tokens = tokens;
    a.cacheLength = int64_t(positions.size());
    a.nextPosition = nextPosition;
    a.expectedNext = a.cacheLength;
    const int64_t n = std::max(tokens, a.cacheLength);
    a.rows.reserve(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
        Row r;
        r.index = i;
        r.expected = i;
        r.stored = i < a.cacheLength ? positions[size_t(i)] : -1;
        r.mismatch = r.stored != r.expected || i >= tokens;
        if (r.mismatch) {
            ++a.mismatches;
            if (a.firstMismatch < 0)
                a.firstMismatch = i;
        }
        a.rows.push_back(r);
    }
    return a;
}

} // namespace kvscope::widgets
