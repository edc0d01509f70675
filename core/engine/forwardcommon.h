// Core-internal building blocks shared by the per-architecture forward passes.
#pragma once

#include "engine/matvec.h"
#include "engine/modelimpl.h"

#include <functional>

namespace kvscope {

inline void report(ForwardHook* hook, const char* name, int layer, at::Tensor& t) {
    if (hook && hook->wants(name, layer))
        hook->on(name, layer, t);
}

// y = x W^T (+ b); w is [out, in]. An undefined b means no bias. W may be stored in 16 bits
// while x is float32 (CPU models keep bf16/f16 checkpoints as stored): the result is float32.
// Quantized W (ggml blocks, CPU): quantizedMatmul, float32 as well.
inline at::Tensor dense(const at::Tensor& x, const Matrix& matrix,
                        const at::Tensor& b = at::Tensor()) {
    if (matrix.quantized())
        return quantizedMatmul(x, matrix, b);
    const at::Tensor& w = matrix.t;
    if (x.size(0) == 1) {
        // One token (decode): stream W once, row by row (kvscope's kernels where they apply;
        // GEMM with M=1 would pack W first and run at a fraction of the memory bandwidth).
        const at::Tensor row = x[0];
        if (canMatvec(w, row, b))
            return matvec(w, row, b).unsqueeze(0);
        auto y = b.defined() ? at::addmv(b, w, row) : at::mv(w, row);
        return y.unsqueeze(0);
    }
    if (w.scalar_type() != x.scalar_type())
        return mixedMatmul(x, w, b);
    return b.defined() ? at::addmm(b, x, w.t()) : at::mm(x, w.t());
}

inline at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
    if (canRmsNormRows(x, w))
        return rmsNormRows(x, w, eps);
    auto xf = x.to(at::kFloat);
    auto r = xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps);
    return r.to(x.scalar_type()) * w;
}

// The final norm of the model's head over residual rows x [N, C]: LayerNorm with its bias where
// the architecture says so (GPT-2's ln_f), RMSNorm otherwise (model.norm).
at::Tensor finalNormed(const Model::Impl& m, const at::Tensor& x);

// The final norm and the vocabulary projection (dense() over the stored output matrix, quantized
// or not) of residual rows x [N, C]: logits [N, vocab] float32 before any soft-capping.
at::Tensor vocabularyLogits(const Model::Impl& m, const at::Tensor& x);
// The model's head, the one place a forward pass ends: vocabularyLogits, then Gemma 2's logit
// soft-capping; reports the result as "logits". The logit lens (unembed.h) reads the residual
// after every layer through the same function.
at::Tensor headLogits(const Model::Impl& m, const at::Tensor& x, ForwardHook* hook);

// Additive attention mask for T new queries over past + T keys: -inf where a key is masked
// out in the cache or lies in a query's future (by cache index, as HF's cache_position does),
// and, with a window W > 0, where the key's position is W or more before the query's
// (`positions` are the new tokens'; the past ones are the cache's).
struct AttentionMask {
    at::Tensor additive; // [T, past + T] float32, or undefined when nothing is masked
};
AttentionMask buildMask(const KvCache::Impl& cache, int64_t past, int64_t T, at::Device dev,
                        const std::vector<int64_t>& positions = {}, int64_t window = 0);

// How a layer turns q.k into scores before the mask: scores = q.k * scale, then, with a
// softcap c > 0, c * tanh(scores / c).
struct ScoreParams {
    double scale = 1.0;
    double softcap = 0.0;
};
inline ScoreParams scoreParams(const ModelConfig& c) {
    return {c.scoreScale(), c.attnSoftcap};
}

// The start of every architecture's forward pass over the T rows of x: the cache reserved
// for them (`kvHeads` per layer) and the mask of the new queries over past + T keys.
struct ForwardStart {
    int64_t T = 0;    // new tokens
    int64_t past = 0; // cached before them
    AttentionMask mask;
};
inline ForwardStart beginForward(const Model::Impl& m, const at::Tensor& x, KvCache::Impl& cache,
                                 int64_t kvHeads) {
    const auto& c = m.config;
    ForwardStart s{x.size(0), cache.length, {}};
    cache.reserve(c.nLayers, kvHeads, c.headDim, s.T, m.cacheDtype(), m.device);
    s.mask = buildMask(cache, s.past, s.T, m.device);
    return s;
}

// A layer's projected queries, keys and values, reported as "q", "k", "v".
inline void reportQkv(ForwardHook* hook, int layer, at::Tensor& q, at::Tensor& k, at::Tensor& v) {
    report(hook, "q", layer, q);
    report(hook, "k", layer, k);
    report(hook, "v", layer, v);
}

// Makes the slots written by this forward pass part of the cache: length, positions, mask.
// Called only after every layer succeeded, so a failed pass leaves the cache unchanged.
inline void commitAppend(KvCache::Impl& cache, const std::vector<int64_t>& positions) {
    cache.appendHeadMask(static_cast<int64_t>(positions.size()));
    cache.length += static_cast<int64_t>(positions.size());
    cache.positions.insert(cache.positions.end(), positions.begin(), positions.end());
    cache.mask.insert(cache.mask.end(), positions.size(), uint8_t{1});
}

// The end of every architecture's forward pass, after its last layer: commits the new slots
// (commitAppend), keeps only the last row for LogitRows::Last, and applies the head.
inline at::Tensor finishForward(const Model::Impl& m, at::Tensor x, KvCache::Impl& cache,
                                const std::vector<int64_t>& positions, ForwardHook* hook,
                                LogitRows rows) {
    commitAppend(cache, positions);
    if (rows == LogitRows::Last && x.size(0) > 1)
        x = x.narrow(0, x.size(0) - 1, 1);
    return headLogits(m, x, hook);
}

// Gated MLP of the Llama family: down(act(gate(h)) * up(h)), act silu (SwiGLU) or GELU with
// the tanh approximation (GeGLU: Gemma). h: [N, C] -> [N, C].
inline at::Tensor gatedMlp(const at::Tensor& h, const LayerWeights& w, bool gelu) {
    at::Tensor g = dense(h, w.wGate);
    g = gelu ? at::gelu(g, "tanh") : at::silu(g);
    return dense(g * dense(h, w.wUp), w.wDown);
}

// Grouped-query attention of B sequences: q [B, H, T, D] over keys/values [B, KVH, P, D],
// scores as `params` says;
// query head h = kv * G + g shares kv head `kv` (HF repeat_kv order). `additive` is an
// undefined tensor or a float32 mask (0 / -inf) of [T, P], or [KVH, 1, T, P] for B = 1 (one
// mask per KV head group). Scores and softmax are float32.
// onProbs (optional) sees the probabilities [B, H, T, P] before they weight the values (an
// in-place edit takes effect). Returns [B, T, H*D]. Used by the engine's cached
// forward (B = 1) and the trainer's batched forward, so both run the same math.
at::Tensor groupedAttention(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                            const at::Tensor& additive, const ScoreParams& params,
                            const std::function<void(at::Tensor&)>& onProbs = {});

// The trainer's forward pass of the Llama family: B sequences of T tokens at positions
// 0..T-1, causal, no cache, no hooks. tokens: [B, T] int64. Returns logits [B, T, vocab]
// float32. Runs the same per-op helpers as forwardLlama (rmsNorm, dense, applyRope,
// groupedAttention, gatedMlp); records autograd when the bound weights require grad.
at::Tensor forwardLlamaBatch(const Model::Impl& m, const at::Tensor& tokens);

// Writes k, v ([KVH, T, D]) into layer l of the cache at slots [past, past+T) and attends
// q ([H, T, D]) over slots [0, past+T), each KV head's group only over the past slots the
// cache's head mask gives it (when it has one). Reports "attn_probs". Returns [T, H*D].
// With cache.appendAside nothing is written: k, v are attended to after the cached slots.
at::Tensor attend(KvCache::Impl& cache, int64_t l, int64_t past, const at::Tensor& q,
                  const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                  const ScoreParams& params, ForwardHook* hook, int il);

} // namespace kvscope
