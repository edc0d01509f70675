// HostTensor: a plain float32 copy of a tensor, the only tensor type in core's public API.
// The GUI and CLI never see libtorch; they get these values. Row-major, contiguous.
#pragma once

#include <cstdint>
#include <cstddef>
#include <numeric>
#include <vector>

namespace kvscope {

struct HostTensor {
    std::vector<int64_t> shape;
    std::vector<float> data; // size == numel()

    int64_t numel() const {
        return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    }
    int64_t dim(int i) const { return shape.at(static_cast<std::size_t>(i)); }
};

} // namespace kvscope
