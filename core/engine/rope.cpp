// RoPE in one place: layouts, frequency scaling, rotation.
#include "engine/matvec.h"
#include "engine/modelimpl.h"
#include "util/status.h"

#include <algorithm>
#include <cmath>

namespace kvscope {

at::Tensor permuteInterleavedToHalf(const at::Tensor& w, int64_t nHeads) {
    // Row (head, i, pair) -> (head, pair, i): the permutation HF's Llama converter applies.
    const int64_t rows = w.size(0);
    const int64_t hd = rows / nHeads;
    auto rest = w.sizes().slice(1).vec();
    std::vector<int64_t> v{nHeads, hd / 2, 2};
    v.insert(v.end(), rest.begin(), rest.end());
    return w.reshape(v).transpose(1, 2).reshape(w.sizes()).contiguous();
}

at::Tensor permuteHalfToInterleaved(const at::Tensor& w, int64_t nHeads) {
    const int64_t rows = w.size(0);
    const int64_t hd = rows / nHeads;
    auto rest = w.sizes().slice(1).vec();
    std::vector<int64_t> v{nHeads, 2, hd / 2};
    v.insert(v.end(), rest.begin(), rest.end());
    return w.reshape(v).transpose(1, 2).reshape(w.sizes()).contiguous();
}

std::vector<float> llama3FreqFactors(const ModelConfig& c) {
    // For each frequency f: 1 where its wavelength is short, `factor` where it is long, and in
    // between the divisor that gives ropeInvFreq's blend: f / d = (1 - smooth) f / factor +
    // smooth f.
    const auto& s = c.ropeScaling;
    const int64_t half = c.headDim / 2;
    const double oldCtx = static_cast<double>(s.originalMaxPositions);
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(0, half)), 1.0f);
    for (int64_t i = 0; i < half; ++i) {
        const double f = 1.0 / std::pow(c.ropeTheta, static_cast<double>(2 * i) /
                                                         static_cast<double>(c.headDim));
        const double wave = 2.0 * M_PI / f;
        if (wave < oldCtx / s.highFreqFactor)
            continue;
        if (wave > oldCtx / s.lowFreqFactor) {
            out[size_t(i)] = static_cast<float>(s.factor);
            continue;
        }
        const double smooth =
            (oldCtx / wave - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
        out[size_t(i)] = static_cast<float>(1.0 / ((1.0 - smooth) / s.factor + smooth));
    }
    return out;
}

at::Tensor ropeInvFreq(const ModelConfig& c) {
    const int64_t half = c.headDim / 2;
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
        inv[i] =
            static_cast<float>(1.0 / std::pow(c.ropeTheta, static_cast<double>(2 * i) /
                                                               static_cast<double>(c.headDim)));
    const auto& s = c.ropeScaling;
    if (s.type == "none" || s.type == "default") {
    } else if (s.type == "linear") {
        for (float& f : inv)
            f = static_cast<float>(f / s.factor);
    } else if (s.type == "llama3") {
        // Llama 3.1: keep high frequencies, divide low ones by `factor`, blend in between.
        const double oldCtx = static_cast<double>(s.originalMaxPositions);
        const double lowWave = oldCtx / s.lowFreqFactor;
        const double highWave = oldCtx / s.highFreqFactor;
        for (float& f : inv) {
            const double wave = 2.0 * M_PI / f;
            if (wave < highWave) {
            } else if (wave > lowWave) {
                f = static_cast<float>(f / s.factor);
            } else {
                const double smooth =
                    (oldCtx / wave - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
                f = static_cast<float>((1 - smooth) * f / s.factor + smooth * f);
            }
        }
    } else if (s.type == "longrope") {
        const auto& factors = s.usesLongFactors(c.maxContext) ? s.longFactor : s.shortFactor;
        if (int64_t(factors.size()) != half)
            throw KvError("rope_scaling: " + std::to_string(factors.size()) +
                          " longrope factors for head_dim " + std::to_string(c.headDim));
        for (int64_t i = 0; i < half; ++i)
            inv[size_t(i)] = static_cast<float>(
                1.0 /
                (factors[size_t(i)] * std::pow(c.ropeTheta, double(2 * i) / double(c.headDim))));
    } else {
        throw KvError("rope_scaling type '" + s.type +
                      "' is not supported (supported: none, linear, llama3, longrope)");
    }
    return at::from_blob(inv.data(), {half}, at::kFloat).clone();
}

at::Tensor ropeInvFreqLocal(const ModelConfig& c) {
    if (c.ropeThetaLocal <= 0 || c.slidingWindow <= 0)
        return {};
    ModelConfig local = c;
    local.ropeTheta = c.ropeThetaLocal;
    local.ropeScaling = RopeScaling{};
    return ropeInvFreq(local);
}

at::Tensor applyRope(const at::Tensor& x, const at::Tensor& invFreq,
                     const std::vector<int64_t>& positions, double scale) {
    if (canRopeRows(x, invFreq))
        return ropeRows(x, invFreq, positions, static_cast<float>(scale));
    const int64_t T = static_cast<int64_t>(positions.size());
    auto pos = at::from_blob(const_cast<int64_t*>(positions.data()), {T}, at::kLong)
                   .to(invFreq.device(), at::kFloat);
    auto freqs = at::outer(pos, invFreq);   // [T, D/2]
    auto emb = at::cat({freqs, freqs}, -1); // [T, D]
    auto cos = (emb.cos() * scale).to(x.scalar_type());
    auto sin = (emb.sin() * scale).to(x.scalar_type());
    const int64_t half = x.size(-1) / 2;
    auto x1 = x.narrow(-1, 0, half);
    auto x2 = x.narrow(-1, half, half);
    auto rotated = at::cat({-x2, x1}, -1); // rotate_half
    return x * cos + rotated * sin;
}

} // namespace kvscope
