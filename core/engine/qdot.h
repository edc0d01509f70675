// Dot products of ggml-quantized weight rows with activations, as llama.cpp computes them on the
// CPU: the activation vector is quantized once per product to 8-bit blocks (Q8_0 for Q4_0, Q5_0,
// Q8_0 and IQ4_NL rows, Q8_1 for Q4_1 and Q5_1, Q8_K for the K quants and IQ4_XS), and each
// row's blocks are multiplied with it in integers, scaled per block in float. The weights are
// read as stored (a mapped GGUF file's bytes): nothing is widened in memory.
//
// Kernels: AVX2 for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (with VNNI where the CPU has it), Q4_K,
// Q5_K and Q6_K (the types of Q8_0, Q4_K_M and Q5_K_M files: a K-quant file's matrices whose rows
// are not whole 256-element blocks are Q5_0 / Q5_1 / Q8_0 there), summing in integers within a
// block as ggml does; a plain C++ kernel for every type (Q2_K, Q3_K and IQ4_XS use only it),
// which widens one block at a time with gguf::dequantize (the exact ggml values) and sums it
// against the activation block in float. The two differ by float rounding only.
// The ISA is chosen once, at run time.
//
// Thread-safety: every function is pure; callers split rows over threads.
#pragma once

#include "formats/gguf.h"

#include <cstddef>
#include <cstdint>

namespace kvscope::qdot {

// True when `w` rows have a dot kernel (and so can stay quantized in a model).
bool hasKernel(gguf::TensorType w);

// The activation block type a row of `w` is multiplied with: Q8_0, Q8_1 or Q8_K.
gguf::TensorType activationType(gguf::TensorType w);

// Bytes of n activations quantized for rows of `w`. Precondition: hasKernel(w), n a multiple of
// w's block size.
std::size_t activationBytes(gguf::TensorType w, std::int64_t n);

// x[0..n) quantized into `out` (activationBytes(w, n) bytes) as llama.cpp does for rows of `w`:
// the same integers and scale values (Q8_0 / Q8_1's f16 scales are held as the floats they are).
void quantizeActivations(gguf::TensorType w, const float* x, std::int64_t n, std::uint8_t* out);

// One row (n elements) times N activation vectors quantized for it, `stride` bytes apart:
// out[0..N). A token's result is the same bits whatever N is and whichever tokens share the
// call (a prefill's products equal its tokens' one-by-one products).
using RowFn = void (*)(const std::uint8_t* row, const std::uint8_t* xq, std::size_t stride,
                       std::int64_t n, float* out);
constexpr int kMaxTokens = 4;
// One row times kTileTokens vectors (a prefill's tile: each weight block unpacked once for
// eight tokens, whose sums fit the registers): out[t], each the bits forCount gives that token.
constexpr int kTileTokens = 8;
struct RowKernel {
    RowFn forCount[kMaxTokens] = {}; // forCount[N - 1] takes N vectors
    RowFn tile = nullptr;            // kTileTokens vectors, where the type has such a kernel
    explicit operator bool() const { return forCount[0] != nullptr; }
    // Up to kMaxTokens vectors at a time.
    void run(const std::uint8_t* row, const std::uint8_t* xq, std::size_t stride, int count,
             std::int64_t n, float* out) const {
        for (int t = 0; t < count; t += kMaxTokens) {
            const int c = count - t < kMaxTokens ? count - t : kMaxTokens;
            forCount[c - 1](row, xq + static_cast<std::size_t>(t) * stride, stride, n, out + t);
        }
    }
};
// The fastest kernels this CPU has for `w` (look them up outside loops).
RowKernel rowKernel(gguf::TensorType w);
// The plain C++ kernels (tests compare the vector kernels with them).
RowKernel genericRowKernel(gguf::TensorType w);

// "avx2+vnni+avx512" (as "avx2+vnni", and the Q8_0 tile on 512-bit registers), "avx2+vnni" (the
// 32-element types through AVX-512 VNNI's 256-bit dot instruction), "avx2" or "generic": what
// rowKernel() uses for the types with vector kernels.
const char* isa();

} // namespace kvscope::qdot
