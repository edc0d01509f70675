// The decode step's CPU kernels. Matrix-vector products: y = W x (+ b) for one token, W [out, in]
// stored as f32, bf16 or f16 (used as stored: 16-bit weights are widened in registers, never in
// memory), x and y float32. Decoding is bound by the bytes of W streamed per token; these kernels
// stream each row once with the widest vector unit the CPU has (AVX-512, AVX2 + FMA, else
// plain C++), split the rows over the intra-op threads, and leave libtorch's per-call
// machinery out of the hot loop.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace kvscope {

// True when matvec() can take this product: CPU tensors, W 2-D contiguous f32/bf16/f16, x a
// contiguous float32 vector of W's column count, b undefined or a float32 vector of W's row
// count, and no gradient to record.
bool canMatvec(const at::Tensor& w, const at::Tensor& x, const at::Tensor& b);

// W x (+ b) as a float32 vector [out]. Precondition: canMatvec(w, x, b).
at::Tensor matvec(const at::Tensor& w, const at::Tensor& x, const at::Tensor& b);

// x W^T for several rows x [T, in] float32 when W is 16-bit: W is widened a block of rows at a
// time (a few MB), so a prefill never holds a float32 copy of a whole matrix.
at::Tensor mixedMatmul(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// The small per-token operations of a decode step, written as loops: through libtorch each is
// several operator calls (rmsNorm 8, RoPE 12, attention 12), and with one token their
// dispatch costs more than their arithmetic. Each has a can...() test; callers fall back to
// the libtorch expression (autograd, other dtypes or devices, attention probabilities a hook
// wants to see), which computes the same function.

// x [N, C] and w [C] float32 CPU, contiguous, no gradient to record.
bool canRmsNormRows(const at::Tensor& x, const at::Tensor& w);
// Each row of x scaled by 1 / sqrt(mean of its squares + eps), times w.
at::Tensor rmsNormRows(const at::Tensor& x, const at::Tensor& w, double eps);

// x [H, T, D] float32 CPU with unit stride in D, invFreq [D/2] float32, no gradient.
bool canRopeRows(const at::Tensor& x, const at::Tensor& invFreq);
// RoPE, half layout (HF rotate_half): pairs (i, i + D/2) of token t rotated by
// positions[t] * invFreq[i], cos and sin times `scale`. Returns a new contiguous [H, T, D].
at::Tensor ropeRows(const at::Tensor& x, const at::Tensor& invFreq,
                    const std::vector<int64_t>& positions, float scale = 1.0f);

// One query token: q [H, D] float32 contiguous; K, V [KVH, P, D] float32 CPU with unit
// stride in D; additive undefined or float32 contiguous with P (shared) or KVH * P (one row
// per KV head) values of 0 / -inf. No gradient to record.
bool canAttendOne(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                  const at::Tensor& additive);
// softmax(cap(q_h K_kv^T * scale) + additive) V_kv for every query head h (kv = h / (H /
// KVH), HF repeat_kv order), cap(s) = softcap * tanh(s / softcap) when softcap > 0, scores
// and sums in float32. Returns [H * D]. A head that sees no slot gets NaN, as softmax over
// all -inf does.
at::Tensor attendOne(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                     const at::Tensor& additive, float scale, float softcap = 0.0f);

// attendOne over K/V's slots and one more slot held aside: its key and value rows kx, vx
// ([KVH, D] float32 contiguous) act as slot K.size(1), bit for bit as if they had been written
// there (additive then covers K.size(1) + 1 slots). For a cache that must not be written.
bool canAttendOneAside(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                       const at::Tensor& kx, const at::Tensor& vx, const at::Tensor& additive);
at::Tensor attendOneAside(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                          const at::Tensor& kx, const at::Tensor& vx, const at::Tensor& additive,
                          float scale, float softcap = 0.0f);

// The vector unit the kernels use: "avx512", "avx2" or "generic".
const char* matvecIsa();

} // namespace kvscope
