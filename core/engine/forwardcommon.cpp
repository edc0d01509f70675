#include "engine/forwardcommon.h"

#include <c10/core/GradMode.h>

#include <cmath>
#include <limits>

namespace kvscope {

at::Tensor finalNormed(const Model::Impl& m, const at::Tensor& x) {
    const auto& c = m.config;
    return m.arch->layerNorm ? at::layer_norm(x, {c.dim}, m.finalNorm, m.finalNormBias, c.normEps)
                             : rmsNorm(x, m.finalNorm, c.normEps);
}

at::Tensor vocabularyLogits(const Model::Impl& m, const at::Tensor& x) {
    return dense(finalNormed(m, x), m.lmHead).to(at::kFloat);
}

at::Tensor headLogits(const Model::Impl& m, const at::Tensor& x, ForwardHook* hook) {
    const auto& c = m.config;
    at::Tensor logits = vocabularyLogits(m, x);
    if (c.finalSoftcap > 0)
        logits = at::tanh(logits / c.finalSoftcap) * c.finalSoftcap;
    report(hook, "logits", -1, logits);
    return logits;
}

AttentionMask buildMask(const KvCache::Impl& cache, int64_t past, int64_t T, at::Device dev,
                        const std::vector<int64_t>& positions, int64_t window) {
    const bool windowed = window > 0 && int64_t(positions.size()) == T;
    auto keyPosition = [&](int64_t j) {
        return j < past ? cache.positions[static_cast<size_t>(j)]
                        : positions[static_cast<size_t>(j - past)];
    };
    auto outside = [&](int64_t i, int64_t j) {
        return windowed && positions[static_cast<size_t>(i)] - keyPosition(j) >= window;
    };
    bool anyMasked = T > 1;
    for (int64_t j = 0; j < past && !anyMasked; ++j)
        anyMasked = cache.mask[static_cast<size_t>(j)] == 0 || outside(0, j) || outside(T - 1, j);
    if (!anyMasked)
        return {};
    std::vector<float> add(static_cast<size_t>(T * (past + T)), 0.0f);
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < past + T; ++j) {
            const bool visible =
                (j < past ? cache.mask[static_cast<size_t>(j)] != 0 : j - past <= i) &&
                !outside(i, j);
            if (!visible)
                add[static_cast<size_t>(i * (past + T) + j)] = ninf;
        }
    return {at::from_blob(add.data(), {T, past + T}, at::kFloat).clone().to(dev)};
}

at::Tensor groupedAttention(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                            const at::Tensor& additive, const ScoreParams& params,
                            const std::function<void(at::Tensor&)>& onProbs) {
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
    const int64_t KVH = K.size(1), G = H / KVH, P = K.size(2);
    if (B == 1 && T == 1 && !onProbs && canAttendOne(q.reshape({H, D}), K[0], V[0], additive))
        return attendOne(q.reshape({H, D}), K[0], V[0], additive, float(params.scale),
                         float(params.softcap))
            .view({1, 1, H * D});
    auto qg = q.reshape({B * KVH, G * T, D});
    auto kt = K.reshape({B * KVH, P, D}).transpose(1, 2);
    at::Tensor scores; // [B*KVH, G*T, P] float32
    if (q.scalar_type() == at::kFloat && !c10::GradMode::is_enabled() && params.softcap <= 0) {
        // Inference in f32: one buffer, the mask copied in and the scaled product added by
        // the GEMM itself (a prompt chunk's scores are tens of MB; each temporary of that
        // size is fresh memory the kernel has to fault in).
        if (additive.defined()) {
            scores = at::empty({B * KVH, G * T, P}, q.options());
            scores.view({B * KVH, G, T, P}).copy_(additive); // never the mask itself
            scores.baddbmm_(qg, kt, 1.0, params.scale);
        } else {
            scores = at::bmm(qg, kt).mul_(params.scale);
        }
    } else {
        scores = at::bmm(qg, kt).to(at::kFloat) * params.scale;
        if (params.softcap > 0)
            scores = at::tanh(scores / params.softcap) * params.softcap;
        if (additive.defined())
            scores = (scores.view({B * KVH, G, T, P}) + additive).view({B * KVH, G * T, P});
    }
    auto p = at::softmax(scores, -1);
    if (onProbs) {
        auto pv = p.view({B, H, T, P});
        onProbs(pv);
    }
    auto out = at::bmm(p.to(V.scalar_type()), V.reshape({B * KVH, P, D})); // [B*KVH, G*T, D]
    return out.view({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});
}

at::Tensor attend(KvCache::Impl& cache, int64_t l, int64_t past, const at::Tensor& q,
                  const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                  const ScoreParams& params, ForwardHook* hook, int il) {
    const int64_t H = q.size(0), T = q.size(1), P = past + T;
    // A cache in another dtype than the compute dtype (LoadOptions::cacheDtype: an f16 cache
    // under f32 compute) is read converted, one layer per use: attention runs the compute
    // dtype's kernels on the values the cache holds. A cache in the compute dtype is read as is.
    const at::ScalarType computeType = q.scalar_type();
    auto readable = [&](const at::Tensor& t) {
        return t.scalar_type() == computeType ? t : t.to(computeType);
    };
    at::Tensor K, V; // [KVH, P, D]
    if (!cache.appendAside) {
        cache.k[l].narrow(1, past, T).copy_(k);
        cache.v[l].narrow(1, past, T).copy_(v);
        K = readable(cache.keys(l, P));
        V = readable(cache.values(l, P));
    }
    std::function<void(at::Tensor&)> onProbs;
    if (hook && hook->wants("attn_probs", il))
        onProbs = [&](at::Tensor& probs) {
            auto p = probs.view({H, T, P});
            hook->on("attn_probs", il, p);
        };
    at::Tensor additive = mask.additive; // [T, P] or undefined
    if (!cache.headMask.empty()) {
        // Per KV head: [KVH, 1, 1, P] (0 / -inf) over the past slots; the new ones are seen by
        // every head. Broadcast against the shared mask to [KVH, 1, T, P] (groupedAttention
        // adds it to scores viewed as [KVH, G, T, P]).
        const int64_t KVH = cache.kvHeadCount();
        std::vector<float> add(static_cast<size_t>(KVH * P), 0.0f);
        const float ninf = -std::numeric_limits<float>::infinity();
        for (int64_t h = 0; h < KVH; ++h)
            for (int64_t j = 0; j < past; ++j)
                if (!cache.headVisible(l, h, j))
                    add[static_cast<size_t>(h * P + j)] = ninf;
        auto perHead = at::from_blob(add.data(), {KVH, 1, 1, P}, at::kFloat).clone().to(q.device());
        additive = additive.defined() ? perHead + additive.view({1, 1, T, P}) : perHead;
    }
    if (cache.appendAside) {
        const auto Kc = readable(cache.keys(l, past)), Vc = readable(cache.values(l, past));
        // The new slots as the cache would hold them (rounded to its dtype), so that attending
        // beside the cache gives what writing into it gives.
        const at::ScalarType cacheType = cache.k[l].scalar_type();
        const at::Tensor kx =
            cacheType == k.scalar_type() ? k : k.to(cacheType).to(k.scalar_type()).contiguous();
        const at::Tensor vx =
            cacheType == v.scalar_type() ? v : v.to(cacheType).to(v.scalar_type()).contiguous();
        const auto qh = q.reshape({H, q.size(2)});
        if (T == 1 && !onProbs && canAttendOneAside(qh, Kc, Vc, kx, vx, additive))
            return attendOneAside(qh, Kc, Vc, kx, vx, additive, float(params.scale),
                                  float(params.softcap))
                .view({1, -1});
        K = at::cat({Kc.to(k.scalar_type()), kx}, 1); // a copy: the general path
        V = at::cat({Vc.to(v.scalar_type()), vx}, 1);
    }
    auto out = groupedAttention(q.unsqueeze(0), K.unsqueeze(0), V.unsqueeze(0), additive, params,
                                onProbs); // [1, T, H*D]
    return out.view({T, -1});
}

} // namespace kvscope
