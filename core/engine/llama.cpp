// Forward pass of the Llama family (Llama 1/2/3, Mistral, Qwen2, llama2.c checkpoints):
// RMSNorm, RoPE (half layout), grouped-query attention over an explicit cache, SwiGLU MLP;
// and the trainer's batched, cache-free forward over the same helpers.
#include "engine/forwardcommon.h"

#include <limits>

namespace kvscope {

at::Tensor forwardLlama(const Model::Impl& m, const at::Tensor& tokens,
                        const std::vector<int64_t>& positions, KvCache::Impl& cache,
                        ForwardHook* hook) {
    at::NoGradGuard noGrad;
    const auto& c = m.config;
    const int64_t T = tokens.size(0);
    const int64_t H = c.nHeads, KVH = c.nKvHeads, D = c.headDim;
    const int64_t past = cache.length;
    cache.reserve(c.nLayers, KVH, D, T, m.dtype, m.device);
    const AttentionMask mask = buildMask(cache, past, T, m.device);

    at::Tensor x = m.embed.index_select(0, tokens); // [T, C]
    report(hook, "embed", -1, x);
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        const int il = static_cast<int>(l);
        at::Tensor h = rmsNorm(x, w.attnNorm, c.normEps);
        report(hook, "attn_norm", il, h);

        at::Tensor q = dense(h, w.wq, w.bq).view({T, H, D}).transpose(0, 1);   // [H, T, D]
        at::Tensor k = dense(h, w.wk, w.bk).view({T, KVH, D}).transpose(0, 1); // [KVH, T, D]
        at::Tensor v = dense(h, w.wv, w.bv).view({T, KVH, D}).transpose(0, 1); // [KVH, T, D]
        q = applyRope(q, m.invFreq, positions);
        k = applyRope(k, m.invFreq, positions);
        report(hook, "q", il, q);
        report(hook, "k", il, k);
        report(hook, "v", il, v);

        at::Tensor attn = attend(cache, l, past, q, k, v, mask, hook, il); // [T, H*D]
        attn = dense(attn, w.wo, w.bo);
        report(hook, "attn_out", il, attn);
        x = x + attn;

        h = rmsNorm(x, w.ffnNorm, c.normEps);
        at::Tensor ffn = swiGlu(h, w);
        report(hook, "ffn_out", il, ffn);
        x = x + ffn;
        report(hook, "resid", il, x);
    }
    commitAppend(cache, positions);

    x = rmsNorm(x, m.finalNorm, c.normEps);
    at::Tensor logits = dense(x, m.lmHead).to(at::kFloat);
    report(hook, "logits", -1, logits);
    return logits;
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

    at::Tensor x = m.embed.index_select(0, tokens.reshape({N})); // [N, C]
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
