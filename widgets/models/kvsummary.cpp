#include "kvsummary.h"

#include <cstddef>

using std::size_t;

namespace kvscope::widgets {

std::vector<float> KvSummary::layerByHead(const std::vector<std::vector<float>>& norms, int kvHeads,
                                          int64_t length) {
    std::vector<float> out(norms.size() * size_t(kvHeads), 0.0f);
    if (length <= 0)
        return out;
    for (size_t l = 0; l < norms.size(); ++l)
        for (int h = 0; h < kvHeads; ++h) {
            double sum = 0.0;
            for (int64_t p = 0; p < length; ++p)
                sum += norms[l][size_t(h * length + p)];
            out[l * size_t(kvHeads) + size_t(h)] = float(sum / double(length));
        }
    return out;
}

std::vector<float> KvSummary::layerByPosition(const std::vector<std::vector<float>>& norms,
                                              int kvHeads, int64_t length, int head) {
    std::vector<float> out(norms.size() * size_t(length), 0.0f);
    for (size_t l = 0; l < norms.size(); ++l)
        for (int64_t p = 0; p < length; ++p) {
            float v;
            if (head >= 0) {
                v = norms[l][size_t(head * length + p)];
            } else {
                double sum = 0.0;
                for (int h = 0; h < kvHeads; ++h)
                    sum += norms[l][size_t(h * length + p)];
                v = kvHeads > 0 ? float(sum / kvHeads) : 0.0f;
            }
            out[l * size_t(length) + size_t(p)] = v;
        }
    return out;
}

} // namespace kvscope::widgets
