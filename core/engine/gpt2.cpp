// Forward pass of GPT-2 (GPT2LMHeadModel): learned absolute positions, pre-LayerNorm,
// fused c_attn split into q/k/v at load, GELU (tanh approximation, "gelu_new"), tied head.
#include "engine/forwardcommon.h"
#include "util/status.h"

namespace kvscope {

at::Tensor forwardGpt2(const Model::Impl& m, const at::Tensor& tokens,
                       const std::vector<int64_t>& positions, KvCache::Impl& cache,
                       ForwardHook* hook) {
    at::NoGradGuard noGrad;
    const auto& c = m.config;
    const int64_t T = tokens.size(0);
    const int64_t H = c.nHeads, D = c.headDim;
    for (int64_t p : positions)
        if (p < 0 || p >= c.maxContext)
            throw KvError("position " + std::to_string(p) +
                          " is outside GPT-2's learned range 0.." +
                          std::to_string(c.maxContext - 1));
    const int64_t past = cache.length;
    cache.reserve(c.nLayers, H, D, T, m.dtype, m.device);
    const AttentionMask mask = buildMask(cache, past, T, m.device);

    auto pos = at::from_blob(const_cast<int64_t*>(positions.data()), {T}, at::kLong).to(m.device);
    at::Tensor x = m.embed.index_select(0, tokens) + m.posEmbed.index_select(0, pos);
    report(hook, "embed", -1, x);
    const std::vector<int64_t> normShape{c.dim};
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        const int il = static_cast<int>(l);
        at::Tensor h = at::layer_norm(x, normShape, w.attnNorm, w.attnNormBias, c.normEps);
        report(hook, "attn_norm", il, h);
        at::Tensor q = dense(h, w.wq, w.bq).view({T, H, D}).transpose(0, 1).contiguous();
        at::Tensor k = dense(h, w.wk, w.bk).view({T, H, D}).transpose(0, 1).contiguous();
        at::Tensor v = dense(h, w.wv, w.bv).view({T, H, D}).transpose(0, 1).contiguous();
        report(hook, "q", il, q);
        report(hook, "k", il, k);
        report(hook, "v", il, v);
        at::Tensor attn = dense(attend(cache, l, past, q, k, v, mask, hook, il), w.wo, w.bo);
        report(hook, "attn_out", il, attn);
        x = x + attn;
        h = at::layer_norm(x, normShape, w.ffnNorm, w.ffnNormBias, c.normEps);
        at::Tensor ffn = dense(at::gelu(dense(h, w.wUp, w.bUp), "tanh"), w.wDown, w.bDown);
        report(hook, "ffn_out", il, ffn);
        x = x + ffn;
        report(hook, "resid", il, x);
    }
    commitAppend(cache, positions);

    x = at::layer_norm(x, normShape, m.finalNorm, m.finalNormBias, c.normEps);
    at::Tensor logits = dense(x, m.lmHead).to(at::kFloat);
    report(hook, "logits", -1, logits);
    return logits;
}

} // namespace kvscope
