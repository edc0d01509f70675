// The decode step's matrix-vector products: y = W x (+ b) for one token, W [out, in] stored as
// f32, bf16 or f16 (used as stored: 16-bit weights are widened in registers, never in memory),
// x and y float32. Decoding is bound by the bytes of W streamed per token; these kernels
// stream each row once with the widest vector unit the CPU has (AVX-512, AVX2 + FMA, else
// plain C++), split the rows over the intra-op threads, and leave libtorch's per-call
// machinery out of the hot loop.
#pragma once

#include <ATen/ATen.h>

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

// The vector unit the kernels use: "avx512", "avx2" or "generic".
const char* matvecIsa();

} // namespace kvscope
