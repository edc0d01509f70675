// RoPE re-rotation of cached keys (rerotate.h).
#include "engine/rerotate.h"

#include "engine/modelimpl.h"
#include "engine/tensorconv.h"

#include <cstring>

namespace kvscope {

bool usesRotaryPositions(const Model& model) {
    return model.usesRope() && model.impl().invFreq.defined();
}

Result<std::vector<uint8_t>> rerotateKeys(const Model& model, int64_t layer,
                                          const std::string& dtype, int64_t kvHeads,
                                          int64_t headDim, std::span<const uint8_t> raw,
                                          const std::vector<int64_t>& from,
                                          const std::vector<int64_t>& to) {
    return catchToResult([&]() -> std::vector<uint8_t> {
        const auto st = parseDtype(dtype, "cache dtype");
        const int64_t len = static_cast<int64_t>(from.size());
        if (to.size() != from.size())
            throw KvError("re-rotation: " + std::to_string(from.size()) + " source positions but " +
                          std::to_string(to.size()) + " targets");
        if (kvHeads <= 0 || headDim <= 0)
            throw KvError("re-rotation: kv_heads " + std::to_string(kvHeads) + " / head_dim " +
                          std::to_string(headDim) + " must be positive");
        const uint64_t expected =
            static_cast<uint64_t>(kvHeads * len * headDim) * at::elementSize(st);
        if (raw.size() != expected)
            throw KvError("re-rotation: keys hold " + std::to_string(raw.size()) + " bytes; [" +
                          std::to_string(kvHeads) + ", " + std::to_string(len) + ", " +
                          std::to_string(headDim) + "] x " + dtype + " needs " +
                          std::to_string(expected));
        std::vector<int64_t> moving;
        for (int64_t i = 0; i < len; ++i)
            if (from[static_cast<size_t>(i)] != to[static_cast<size_t>(i)])
                moving.push_back(i);
        std::vector<uint8_t> out(raw.begin(), raw.end());
        if (moving.empty())
            return out;
        if (!usesRotaryPositions(model))
            throw KvError("re-rotation: " + model.config().architecture +
                          " uses learned absolute positions; its cached keys cannot be moved "
                          "to other positions");
        if (layer < 0 || layer >= model.config().nLayers)
            throw KvError("re-rotation: layer " + std::to_string(layer) +
                          " is outside the model's " + std::to_string(model.config().nLayers) +
                          " layers");
        const at::Tensor& invFreq = model.impl().layerInvFreq(layer);
        if (invFreq.numel() * 2 != headDim)
            throw KvError("re-rotation: head_dim " + std::to_string(headDim) +
                          " does not match the model's " + std::to_string(invFreq.numel() * 2));
        const int64_t n = static_cast<int64_t>(moving.size());
        auto keys = at::from_blob(const_cast<uint8_t*>(raw.data()), {kvHeads, len, headDim},
                                  at::TensorOptions().dtype(st))
                        .to(at::kDouble);
        auto idx = at::from_blob(moving.data(), {n}, at::kLong).clone();
        auto x = keys.index_select(1, idx); // [kvHeads, n, headDim]
        std::vector<double> delta(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            const auto m = static_cast<size_t>(moving[static_cast<size_t>(i)]);
            delta[static_cast<size_t>(i)] = static_cast<double>(to[m] - from[m]);
        }
        auto d = at::from_blob(delta.data(), {n}, at::kDouble).clone();
        auto freqs = at::outer(d, invFreq.to(at::kCPU, at::kDouble)); // [n, D/2]
        auto emb = at::cat({freqs, freqs}, -1);                       // [n, D]
        const int64_t half = headDim / 2;
        auto x1 = x.narrow(-1, 0, half);
        auto x2 = x.narrow(-1, half, half);
        auto rotated = x * emb.cos() + at::cat({-x2, x1}, -1) * emb.sin();
        keys.index_copy_(1, idx, rotated);
        auto result = keys.to(st).contiguous();
        // Keys that did not move went through float64 and back: exact for f32, f16 and bf16.
        std::memcpy(out.data(), result.data_ptr(), out.size());
        return out;
    });
}

} // namespace kvscope
