// The k largest entries of a vector, by index: the one top-k every report, view and CLI line
// uses, with one order — larger values first, equal values by lower index, NaN after every
// number (a NaN logit never ranks as a prediction). A strict weak order, so ties and NaNs
// cannot make two callers disagree on the same numbers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace kvscope {

template <typename T> std::vector<int64_t> topKIndices(std::span<const T> x, std::size_t k) {
    std::vector<int64_t> ids(x.size());
    std::iota(ids.begin(), ids.end(), int64_t{0});
    k = std::min(k, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int64_t a, int64_t b) {
                          const T va = x[static_cast<std::size_t>(a)];
                          const T vb = x[static_cast<std::size_t>(b)];
                          const bool na = std::isnan(va), nb = std::isnan(vb);
                          if (na != nb)
                              return nb; // a number before a NaN
                          if (!na && va != vb)
                              return va > vb;
                          return a < b;
                      });
    ids.resize(k);
    return ids;
}

template <typename T> std::vector<int64_t> topKIndices(const std::vector<T>& x, std::size_t k) {
    return topKIndices(std::span<const T>(x), k);
}

} // namespace kvscope
