// KvSummary: reduces the per-layer [kvHeads, length] norm arrays of a CacheView into the two
// heatmap grids the KV panel draws. Plain functions, unit-tested.
//   layerByHead:     [layers, kvHeads]  mean norm over positions
//   layerByPosition: [layers, length]   norm of one head, or the mean over heads (head < 0)
// NaN/Inf propagate (a mean over a non-finite value is non-finite), so a bad slot stays
// visible in the summaries.
#pragma once

#include <cstdint>
#include <vector>

namespace kvscope::widgets {

struct KvSummary {
    static std::vector<float> layerByHead(const std::vector<std::vector<float>>& norms, int kvHeads,
                                          int64_t length);
    static std::vector<float> layerByPosition(const std::vector<std::vector<float>>& norms,
                                              int kvHeads, int64_t length, int head);
};

} // namespace kvscope::widgets
