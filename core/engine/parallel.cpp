#include "engine/parallel.h"

#include <ATen/Parallel.h>

namespace kvscope {

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0)
        return;
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { fn(begin, end); });
}

} // namespace kvscope
