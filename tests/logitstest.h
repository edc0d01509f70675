// Logits helpers for suites that compare the engine with a reference: every position's logits
// through the prefill or the one-token decode path, and the distances between two sets.
#pragma once

#include "engine/model.h"
#include "engine/session.h"

#include <nlohmann/json.hpp>

#include <QtGlobal>
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

namespace logitstest {

// Logits of every position: fed one token at a time (the decode kernels) or as one batch
// (the prefill path).
inline std::vector<float> logits(const std::shared_ptr<const kvscope::Model>& m,
                                 const std::vector<int32_t>& ids, bool oneByOne) {
    kvscope::Session s(m);
    std::vector<float> all;
    if (oneByOne) {
        for (int32_t id : ids) {
            if (!s.feed(std::span(&id, 1)))
                qFatal("feed failed");
            all.insert(all.end(), s.lastLogits().begin(), s.lastLogits().end());
        }
        return all;
    }
    kvscope::HostTensor t;
    if (!s.feed(ids, &t))
        qFatal("feed failed");
    return t.data;
}

inline double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size())
        return INFINITY;
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        d = std::max(d, double(std::abs(a[i] - b[i])));
    return d;
}

inline double maxAbs(const std::vector<float>& a) {
    double m = 0;
    for (float v : a)
        m = std::max(m, double(std::abs(v)));
    return m;
}

// The argmax of position p's row in flattened [positions][V] logits.
inline long argmaxAt(const std::vector<float>& l, std::size_t p, int64_t V) {
    const auto row = l.begin() + long(p * std::size_t(V));
    return long(std::max_element(row, row + long(V)) - row);
}

// A reference file's [positions][vocab] rows, flattened.
inline std::vector<float> flatRows(const nlohmann::json& rows) {
    std::vector<float> v;
    for (const auto& r : rows)
        for (const auto& x : r)
            v.push_back(x.get<float>());
    return v;
}

} // namespace logitstest
