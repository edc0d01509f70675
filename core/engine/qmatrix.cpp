#include "engine/qmatrix.h"

#include "engine/qdot.h"
#include "util/status.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <string>

namespace kvscope {

at::Tensor quantizedMatmul(const at::Tensor& x, const Matrix& w, const at::Tensor& b) {
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    const int64_t T = xf.size(0), n = w.cols, out = w.rows();
    const int64_t rowBytes = w.t.size(1);
    const std::size_t actBytes = qdot::activationBytes(w.type, n);
    std::vector<std::uint8_t> xq(static_cast<std::size_t>(T) * actBytes);
    const float* xp = xf.data_ptr<float>();
    at::parallel_for(0, T, 8, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
            qdot::quantizeActivations(w.type, xp + t * n, n, xq.data() + t * actBytes);
    });
    const qdot::RowKernel kernel = qdot::rowKernel(w.type);
    const auto* wp = static_cast<const std::uint8_t*>(w.t.data_ptr());
    at::Tensor y = at::empty({T, out}, xf.options());
    float* yp = y.data_ptr<float>();
    // One token: enough rows per task that it streams ~64 KB of weights. Several: tiles of 16
    // rows times 8 tokens, a row against the eight tokens in one kernel call where the type has
    // a tile kernel (each weight block unpacked once for eight tokens), else four at a time.
    // Eight tokens' activations are 18 KB for 2,048-wide rows, so they stay in L1 while the 16
    // rows pass; 64 tokens' (147 KB) came from L2 for every row, which cost a 2,048 x 2,048
    // Q8_0 product on 64 tokens 22 % of its speed on a Zen 5 EPYC (44 -> 57 G weight-tokens/s,
    // one thread; Q4_K 60 -> 73, Q6_K 62 -> 69).
    const int64_t grain =
        T == 1 ? std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, rowBytes)) : 16;
    at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
        constexpr int64_t kRows = 16, kTokens = 8;
        constexpr int kTile = qdot::kTileTokens;
        float dots[kTokens];
        for (int64_t r0 = begin; r0 < end; r0 += kRows) {
            const int64_t r1 = std::min(end, r0 + kRows);
            for (int64_t t0 = 0; t0 < T; t0 += kTokens) {
                const int count = static_cast<int>(std::min(kTokens, T - t0));
                const std::uint8_t* x0 = xq.data() + t0 * actBytes;
                for (int64_t r = r0; r < r1; ++r) {
                    const std::uint8_t* row = wp + r * rowBytes;
                    int t = 0;
                    if (kernel.tile)
                        for (; t + kTile <= count; t += kTile)
                            kernel.tile(row, x0 + t * actBytes, actBytes, n, dots + t);
                    kernel.run(row, x0 + t * actBytes, actBytes, count - t, n, dots + t);
                    for (int k = 0; k < count; ++k)
                        yp[(t0 + k) * out + r] = dots[k];
                }
            }
        }
    });
    if (b.defined())
        y.add_(b.to(at::kFloat));
    return y;
}

void widenRows(const Matrix& w, int64_t first, int64_t count, float* out) {
    const auto* wp = static_cast<const std::uint8_t*>(w.t.data_ptr());
    const int64_t rowBytes = w.t.size(1);
    at::parallel_for(0, count, 16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
            gguf::dequantize(w.type, wp + (first + r) * rowBytes, static_cast<std::size_t>(w.cols),
                             out + r * w.cols);
    });
}

at::Tensor matrixRows(const Matrix& w, const at::Tensor& ids) {
    if (!w.quantized())
        return w.t.index_select(0, ids);
    const at::Tensor idx = ids.to(at::kCPU, at::kLong).contiguous();
    const int64_t n = idx.numel(), rows = w.rows();
    const int64_t* ip = idx.data_ptr<int64_t>();
    at::Tensor y = at::empty({n, w.cols}, at::kFloat);
    float* yp = y.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
        if (ip[i] < 0 || ip[i] >= rows)
            throw KvError("row " + std::to_string(ip[i]) + " is outside the matrix's " +
                          std::to_string(rows) + " rows");
        widenRows(w, ip[i], 1, yp + i * w.cols);
    }
    return y;
}

at::Tensor widenMatrix(const Matrix& w) {
    if (!w.quantized())
        return w.t;
    at::Tensor y = at::empty({w.rows(), w.cols}, at::kFloat);
    widenRows(w, 0, w.rows(), y.data_ptr<float>());
    return y;
}

} // namespace kvscope
