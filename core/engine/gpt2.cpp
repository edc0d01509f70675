// Forward pass of GPT-2 (GPT2LMHeadModel): learned absolute positions, pre-LayerNorm,
// fused c_attn split into q/k/v at load, GELU (tanh approximation, "gelu_new"), tied head.
#include "engine/forwardcommon.h"
#include "util/status.h"

namespace kvscope {

namespace {

void checkPositions(const Model::Impl& m, const std::vector<int64_t>& positions) {
    for (int64_t p : positions)
        if (p < 0 || p >= m.config.maxContext)
            throw KvError("position " + std::to_string(p) +
                          " is outside GPT-2's learned range 0.." +
                          std::to_string(m.config.maxContext - 1));
}

// Layer l's attention input from the residual stream x [T, C] entering it: the LayerNorm and
// the projections (no RoPE: positions are in the embeddings). Each [H, T, D].
struct Projected {
    at::Tensor q, k, v;
};
Projected projectGpt2(const Model::Impl& m, const LayerWeights& w, const at::Tensor& x,
                      ForwardHook* hook, int il, bool withQuery) {
    const auto& c = m.config;
    const int64_t T = x.size(0), H = c.nHeads, D = c.headDim;
    at::Tensor h = at::layer_norm(x, {c.dim}, w.attnNorm, w.attnNormBias, c.normEps);
    report(hook, "attn_norm", il, h);
    Projected p;
    if (withQuery)
        p.q = dense(h, w.wq, w.bq).view({T, H, D}).transpose(0, 1).contiguous();
    p.k = dense(h, w.wk, w.bk).view({T, H, D}).transpose(0, 1).contiguous();
    p.v = dense(h, w.wv, w.bv).view({T, H, D}).transpose(0, 1).contiguous();
    return p;
}

} // namespace

at::Tensor forwardGpt2From(const Model::Impl& m, at::Tensor x, int from,
                           const std::vector<int64_t>& positions, KvCache::Impl& cache,
                           ForwardHook* hook, LogitRows rows) {
    at::NoGradGuard noGrad;
    const auto& c = m.config;
    checkPositions(m, positions);
    const ForwardStart start = beginForward(m, x, cache, c.nHeads);
    const int64_t past = start.past;
    const AttentionMask& mask = start.mask;

    const std::vector<int64_t> normShape{c.dim};
    for (int64_t l = from; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        const int il = static_cast<int>(l);
        Projected p = projectGpt2(m, w, x, hook, il, true);
        reportQkv(hook, il, p.q, p.k, p.v);
        at::Tensor heads =
            attend(cache, l, past, p.q, p.k, p.v, mask, scoreParams(c), hook, il); // [T, H*D]
        report(hook, "attn_heads", il, heads);
        at::Tensor attn = dense(heads, w.wo, w.bo);
        report(hook, "attn_out", il, attn);
        x = x + attn;
        at::Tensor h = at::layer_norm(x, normShape, w.ffnNorm, w.ffnNormBias, c.normEps);
        at::Tensor ffn = dense(at::gelu(dense(h, w.wUp, w.bUp), "tanh"), w.wDown, w.bDown);
        report(hook, "ffn_out", il, ffn);
        x = x + ffn;
        report(hook, "resid", il, x);
    }
    return finishForward(m, x, cache, positions, hook, rows);
}

at::Tensor forwardGpt2(const Model::Impl& m, const at::Tensor& tokens,
                       const std::vector<int64_t>& positions, KvCache::Impl& cache,
                       ForwardHook* hook, LogitRows rows) {
    at::NoGradGuard noGrad;
    checkPositions(m, positions);
    const int64_t T = tokens.size(0);
    auto pos = at::from_blob(const_cast<int64_t*>(positions.data()), {T}, at::kLong).to(m.device);
    at::Tensor x =
        m.embed.t.index_select(0, tokens).to(m.dtype) + m.posEmbed.index_select(0, pos).to(m.dtype);
    report(hook, "embed", -1, x);
    return forwardGpt2From(m, x, 0, positions, cache, hook, rows);
}

std::pair<at::Tensor, at::Tensor> projectKvGpt2(const Model::Impl& m, int layer,
                                                const at::Tensor& x,
                                                const std::vector<int64_t>& positions) {
    at::NoGradGuard noGrad;
    (void)positions;
    Projected p = projectGpt2(m, m.layers[static_cast<size_t>(layer)], x, nullptr, layer, false);
    return {p.k, p.v};
}

} // namespace kvscope
