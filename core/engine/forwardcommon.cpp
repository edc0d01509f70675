#include "engine/forwardcommon.h"

#include <cmath>

namespace kvscope {

AttentionMask buildMask(const KvCache::Impl& cache, int64_t past, int64_t T, at::Device dev) {
    bool anyMasked = T > 1;
    for (int64_t j = 0; j < past && !anyMasked; ++j)
        anyMasked = cache.mask[static_cast<size_t>(j)] == 0;
    if (!anyMasked)
        return {};
    std::vector<float> add(static_cast<size_t>(T * (past + T)), 0.0f);
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < past + T; ++j) {
            const bool visible = j < past ? cache.mask[static_cast<size_t>(j)] != 0 : j - past <= i;
            if (!visible)
                add[static_cast<size_t>(i * (past + T) + j)] = ninf;
        }
    return {at::from_blob(add.data(), {T, past + T}, at::kFloat).clone().to(dev)};
}

at::Tensor attend(KvCache::Impl& cache, int64_t l, int64_t past, const at::Tensor& q,
                  const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                  ForwardHook* hook, int il) {
    const int64_t H = q.size(0), T = q.size(1), D = q.size(2);
    const int64_t KVH = k.size(0), G = H / KVH, P = past + T;
    cache.k[l].narrow(1, past, T).copy_(k);
    cache.v[l].narrow(1, past, T).copy_(v);
    auto K = cache.keys(l, P);   // [KVH, P, D]
    auto V = cache.values(l, P); // [KVH, P, D]

    // Query heads h = kv * G + g share kv head `kv` (HF repeat_kv order).
    auto qg = q.reshape({KVH, G * T, D});
    auto scores = at::bmm(qg, K.transpose(1, 2)).to(at::kFloat) /
                  std::sqrt(static_cast<double>(D)); // [KVH, G*T, P]
    if (mask.additive.defined())
        scores = (scores.view({KVH, G, T, P}) + mask.additive).view({KVH, G * T, P});
    auto probs = at::softmax(scores, -1);
    if (hook && hook->wants("attn_probs", il)) {
        auto p = probs.view({H, T, P});
        hook->on("attn_probs", il, p);
    }
    auto out = at::bmm(probs.to(V.scalar_type()), V); // [KVH, G*T, D]
    return out.view({H, T, D}).transpose(0, 1).reshape({T, H * D});
}

} // namespace kvscope
