// Forward pass of the Llama family (Llama 1/2/3, Mistral, Qwen2, llama2.c checkpoints):
// RMSNorm, RoPE (half layout), grouped-query attention over an explicit cache, SwiGLU MLP;
// and the trainer's batched, cache-free forward over the same helpers.
#include "engine/forwardcommon.h"

#include <limits>

namespace kvscope {

namespace {

// Layer l's attention input from the residual stream x [T, C] entering it: the norm, the
// projections and RoPE. q is [H, T, D]; k, v are [KVH, T, D].
struct Projected {
    at::Tensor q, k, v;
};
Projected projectLlama(const Model::Impl& m, const LayerWeights& w, const at::Tensor& x,
                       const std::vector<int64_t>& positions, ForwardHook* hook, int il,
                       bool withQuery) {
    const auto& c = m.config;
    const int64_t T = x.size(0), H = c.nHeads, KVH = c.nKvHeads, D = c.headDim;
    at::Tensor h = rmsNorm(x, w.attnNorm, c.normEps);
    report(hook, "attn_norm", il, h);
    Projected p;
    if (withQuery)
        p.q = applyRope(dense(h, w.wq, w.bq).view({T, H, D}).transpose(0, 1), m.invFreq,
                        positions); // [H, T, D]
    p.k = applyRope(dense(h, w.wk, w.bk).view({T, KVH, D}).transpose(0, 1), m.invFreq, positions);
    p.v = dense(h, w.wv, w.bv).view({T, KVH, D}).transpose(0, 1); // [KVH, T, D]
    return p;
}

} // namespace

at::Tensor forwardLlamaFrom(const Model::Impl& m, at::Tensor x, int from,
                            const std::vector<int64_t>& positions, KvCache::Impl& cache,
                            ForwardHook* hook, LogitRows rows) {
    at::NoGradGuard noGrad;
    const auto& c = m.config;
    const int64_t T = x.size(0);
    const int64_t past = cache.length;
    cache.reserve(c.nLayers, c.nKvHeads, c.headDim, T, m.dtype, m.device);
    const AttentionMask mask = buildMask(cache, past, T, m.device);

    for (int64_t l = from; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        const int il = static_cast<int>(l);
        Projected p = projectLlama(m, w, x, positions, hook, il, true);
        report(hook, "q", il, p.q);
        report(hook, "k", il, p.k);
        report(hook, "v", il, p.v);

        at::Tensor attn = attend(cache, l, past, p.q, p.k, p.v, mask, hook, il); // [T, H*D]
        attn = dense(attn, w.wo, w.bo);
        report(hook, "attn_out", il, attn);
        x = x + attn;

        at::Tensor h = rmsNorm(x, w.ffnNorm, c.normEps);
        at::Tensor ffn = swiGlu(h, w);
        report(hook, "ffn_out", il, ffn);
        x = x + ffn;
        report(hook, "resid", il, x);
    }
    commitAppend(cache, positions);
    if (rows == LogitRows::Last && x.size(0) > 1)
        x = x.narrow(0, x.size(0) - 1, 1);

    x = rmsNorm(x, m.finalNorm, c.normEps);
    at::Tensor logits = dense(x, m.lmHead).to(at::kFloat);
    report(hook, "logits", -1, logits);
    return logits;
}

at::Tensor forwardLlama(const Model::Impl& m, const at::Tensor& tokens,
                        const std::vector<int64_t>& positions, KvCache::Impl& cache,
                        ForwardHook* hook, LogitRows rows) {
    at::NoGradGuard noGrad;
    at::Tensor x = m.embed.index_select(0, tokens).to(m.dtype); // [T, C]
    report(hook, "embed", -1, x);
    return forwardLlamaFrom(m, x, 0, positions, cache, hook, rows);
}

std::pair<at::Tensor, at::Tensor> projectKvLlama(const Model::Impl& m, int layer,
                                                 const at::Tensor& x,
                                                 const std::vector<int64_t>& positions) {
    at::NoGradGuard noGrad;
    Projected p =
        projectLlama(m, m.layers[static_cast<size_t>(layer)], x, positions, nullptr, layer, false);
    return {p.k, p.v};
}

at::Tensor forwardLlamaBatch(const Model::Impl& m, const at::Tensor& tokens) {
    const auto& c = m.config;
    const int64_t B = tokens.size(0), T = tokens.size(1), N = B * T;
    const int64_t H = c.nHeads, KVH = c.nKvHeads, D = c.headDim;
    std::vector<int64_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
        positions[static_cast<size_t>(t)] = t;
    // Causal additive mask [T, T]: -inf above the diagonal (as buildMask for an empty cache).
    const at::Tensor mask = T > 1 ? at::full({T, T}, -std::numeric_limits<float>::infinity(),
                                             at::TensorOptions().dtype(at::kFloat).device(m.device))
                                        .triu(1)
                                  : at::Tensor();

    at::Tensor x = m.embed.index_select(0, tokens.reshape({N})).to(m.dtype); // [N, C]
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        at::Tensor h = rmsNorm(x, w.attnNorm, c.normEps);
        at::Tensor q = dense(h, w.wq, w.bq).view({B, T, H, D}).transpose(1, 2);   // [B, H, T, D]
        at::Tensor k = dense(h, w.wk, w.bk).view({B, T, KVH, D}).transpose(1, 2); // [B, KVH, T, D]
        at::Tensor v = dense(h, w.wv, w.bv).view({B, T, KVH, D}).transpose(1, 2); // [B, KVH, T, D]
        q = applyRope(q, m.invFreq, positions);
        k = applyRope(k, m.invFreq, positions);
        at::Tensor attn = groupedAttention(q, k, v, mask).view({N, H * D}); // [N, H*D]
        x = x + dense(attn, w.wo, w.bo);
        h = rmsNorm(x, w.ffnNorm, c.normEps);
        x = x + swiGlu(h, w);
    }
    x = rmsNorm(x, m.finalNorm, c.normEps);
    return dense(x, m.lmHead).to(at::kFloat).view({B, T, c.vocabSize});
}

} // namespace kvscope
