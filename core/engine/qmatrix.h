// Weight matrices as the forward pass multiplies with them: plain tensors (float32, bf16, f16)
// or ggml-quantized rows used as a GGUF file stores them, never widened as a whole.
#pragma once

#include "formats/gguf.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kvscope {

// The stored form of a quantized weight: its ggml block type and logical shape [out, in] (the
// tensor holding it is uint8 [out, bytes per row]).
struct QuantInfo {
    gguf::TensorType type = gguf::TensorType::F32;
    std::vector<int64_t> shape;
};

// A matrix [out, in]: a plain tensor, or quantized rows (t: uint8 [out, rowBytes], contiguous,
// `type` their block type, `cols` the elements of a row). Cheap to copy (shares t's storage).
struct Matrix {
    at::Tensor t;
    gguf::TensorType type = gguf::TensorType::F32; // F32: t holds plain elements of its dtype
    int64_t cols = 0;                              // quantized: elements per row

    Matrix() = default;
    Matrix(at::Tensor plain) : t(std::move(plain)) {} // NOLINT: every tensor is a plain matrix
    Matrix(at::Tensor raw, gguf::TensorType type, int64_t cols)
        : t(std::move(raw)), type(type), cols(cols) {}

    bool defined() const { return t.defined(); }
    bool quantized() const { return type != gguf::TensorType::F32; }
    int64_t rows() const { return t.size(0); }
    int64_t columns() const { return quantized() ? cols : t.size(1); }
};

// x [T, in] (CPU, converted to float32) times a quantized W^T, plus b when defined: [T, out]
// float32. Each row of x is quantized once as llama.cpp quantizes activations (qdot.h), and
// every (token, row) product runs the same kernel whatever T is, so a prefill's outputs are bit
// for bit those of feeding its tokens one at a time. Rows are split over the intra-op threads.
at::Tensor quantizedMatmul(const at::Tensor& x, const Matrix& w, const at::Tensor& b);

// Rows `ids` (int64, any device for plain W) of W as a [n, in] tensor: plain W's own dtype,
// quantized W widened to float32 row by row (an embedding lookup). Throws KvError for an id
// outside [0, out).
at::Tensor matrixRows(const Matrix& w, const at::Tensor& ids);

// The whole matrix: plain W itself, quantized W widened to float32 [out, in] (ggml's values).
at::Tensor widenMatrix(const Matrix& w);

// Quantized rows [first, first + count) of W widened to float32 into `out` (count * in floats).
void widenRows(const Matrix& w, int64_t first, int64_t count, float* out);

} // namespace kvscope
