// Forward pass of the Llama family (Llama 1/2/3, Mistral, Qwen2, llama2.c checkpoints, and
// with ModelConfig's switches Qwen3 and Gemma 2/3): RMSNorm, RoPE (half layout), grouped-query
// attention over an explicit cache, gated MLP; and the trainer's batched, cache-free forward
// over the same helpers.
#include "engine/forwardcommon.h"

#include <limits>

namespace kvscope {

namespace {

// Layer l's attention input from the residual stream x [T, C] entering it: the norm, the
// projections and RoPE. q is [H, T, D]; k, v are [KVH, T, D].
// Projected rows [rows, n * D] as [rows, n, D], each head RMS-normed where `norm` is defined
// (Qwen3, Gemma 3).
at::Tensor normedHeads(const Model::Impl& m, const at::Tensor& y, int64_t rows, int64_t n,
                       const at::Tensor& norm) {
    const int64_t D = m.config.headDim;
    at::Tensor r = y.view({rows * n, D});
    if (norm.defined())
        r = rmsNorm(r, norm, m.config.normEps);
    return r.view({rows, n, D});
}

// The attention output projection, RMS-normed where the model has output norms (Gemma).
at::Tensor attentionOut(const Model::Impl& m, const LayerWeights& w, const at::Tensor& attn) {
    at::Tensor out = dense(attn, w.wo, w.bo);
    return w.postAttnNorm.defined() ? rmsNorm(out, w.postAttnNorm, m.config.normEps) : out;
}

// The MLP block's contribution to the residual stream x: norm, gated MLP, output norm.
at::Tensor mlpOut(const Model::Impl& m, const LayerWeights& w, const at::Tensor& x) {
    const auto& c = m.config;
    at::Tensor ffn = gatedMlp(rmsNorm(x, w.ffnNorm, c.normEps), w, c.activation == "gelu_tanh");
    return w.postFfnNorm.defined() ? rmsNorm(ffn, w.postFfnNorm, c.normEps) : ffn;
}

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
    const at::Tensor& invFreq = m.layerInvFreq(il);
    const double scale = m.layerRopeScale(il);
    // [T, n * D] -> [n, T, D]
    auto heads = [&](const at::Tensor& y, int64_t n, const at::Tensor& norm) {
        return normedHeads(m, y, T, n, norm).transpose(0, 1);
    };
    Projected p;
    if (withQuery)
        p.q = applyRope(heads(dense(h, w.wq, w.bq), H, w.qNorm), invFreq, positions, scale);
    p.k = applyRope(heads(dense(h, w.wk, w.bk), KVH, w.kNorm), invFreq, positions, scale);
    p.v = dense(h, w.wv, w.bv).view({T, KVH, D}).transpose(0, 1); // [KVH, T, D]
    return p;
}

// Token embeddings in the compute dtype, times Gemma's sqrt(dim).
at::Tensor llamaEmbed(const Model::Impl& m, const at::Tensor& tokens) {
    at::Tensor x = matrixRows(m.embed, tokens).to(m.dtype);
    return m.config.embedScale != 1.0 ? x * m.config.embedScale : x;
}

} // namespace

at::Tensor forwardLlamaFrom(const Model::Impl& m, at::Tensor x, int from,
                            const std::vector<int64_t>& positions, KvCache::Impl& cache,
                            ForwardHook* hook, LogitRows rows) {
    at::NoGradGuard noGrad;
    const auto& c = m.config;
    const ForwardStart start = beginForward(m, x, cache, c.nKvHeads);
    const int64_t T = start.T, past = start.past;
    const AttentionMask& mask = start.mask;
    // Sliding-window layers see only the last slidingWindow positions.
    const AttentionMask slidingMask =
        c.slidingWindow > 0 ? buildMask(cache, past, T, m.device, positions, c.slidingWindow)
                            : AttentionMask{};
    const ScoreParams scores = scoreParams(c);

    for (int64_t l = from; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        const int il = static_cast<int>(l);
        Projected p = projectLlama(m, w, x, positions, hook, il, true);
        reportQkv(hook, il, p.q, p.k, p.v);

        at::Tensor attn =
            attend(cache, l, past, p.q, p.k, p.v, c.isSliding(l) ? slidingMask : mask, scores, hook,
                   il); // [T, H*D]
        report(hook, "attn_heads", il, attn);
        attn = attentionOut(m, w, attn);
        report(hook, "attn_out", il, attn);
        x = x + attn;

        at::Tensor ffn = mlpOut(m, w, x);
        report(hook, "ffn_out", il, ffn);
        x = x + ffn;
        report(hook, "resid", il, x);
    }
    return finishForward(m, x, cache, positions, hook, rows);
}

at::Tensor forwardLlama(const Model::Impl& m, const at::Tensor& tokens,
                        const std::vector<int64_t>& positions, KvCache::Impl& cache,
                        ForwardHook* hook, LogitRows rows) {
    at::NoGradGuard noGrad;
    at::Tensor x = llamaEmbed(m, tokens); // [T, C]
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
    // Causal additive masks [T, T] (as buildMask for an empty cache): -inf above the
    // diagonal, and for sliding layers W or more below it.
    const float ninf = -std::numeric_limits<float>::infinity();
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(m.device);
    const at::Tensor mask = T > 1 ? at::full({T, T}, ninf, opts).triu(1) : at::Tensor();
    const at::Tensor slidingMask = c.slidingWindow > 0 && T > c.slidingWindow
                                       ? mask + at::full({T, T}, ninf, opts).tril(-c.slidingWindow)
                                       : mask;
    const ScoreParams scores = scoreParams(c);

    at::Tensor x = llamaEmbed(m, tokens.reshape({N})); // [N, C]
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        at::Tensor h = rmsNorm(x, w.attnNorm, c.normEps);
        auto heads = [&](const at::Tensor& y, int64_t n, const at::Tensor& norm) {
            return normedHeads(m, y, N, n, norm).view({B, T, n, D}).transpose(1, 2); // [B, n, T, D]
        };
        at::Tensor q = heads(dense(h, w.wq, w.bq), H, w.qNorm);
        at::Tensor k = heads(dense(h, w.wk, w.bk), KVH, w.kNorm);
        at::Tensor v = dense(h, w.wv, w.bv).view({B, T, KVH, D}).transpose(1, 2);
        q = applyRope(q, m.layerInvFreq(l), positions, m.layerRopeScale(l));
        k = applyRope(k, m.layerInvFreq(l), positions, m.layerRopeScale(l));
        at::Tensor attn = groupedAttention(q, k, v, c.isSliding(l) ? slidingMask : mask, scores)
                              .view({N, H * D}); // [N, H*D]
        x = x + attentionOut(m, w, attn);
        x = x + mlpOut(m, w, x);
    }
    return headLogits(m, x, nullptr).view({B, T, c.vocabSize});
}

} // namespace kvscope
