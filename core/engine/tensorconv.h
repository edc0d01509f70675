// Core-internal conversions between libtorch tensors and kvscope's plain value types.
#pragma once

#include "engine/hosttensor.h"
#include "formats/mappedfile.h"

#include <memory>
#include <string>
#include <vector>
#include <ATen/ATen.h>

namespace kvscope {

// A tensor of `shape` and `dtype` over the bytes at `data` inside `map`, used in place (no
// copy): its storage keeps the mapping alive. A copy instead when `data` is not aligned for
// the dtype. `data` must hold numel x element size bytes inside the mapping.
at::Tensor mappedTensor(const std::shared_ptr<const MappedFile>& map, const std::uint8_t* data,
                        at::IntArrayRef shape, at::ScalarType dtype);
// Whether `t`'s elements lie inside `map` (used in place, not copied).
bool usesMapping(const at::Tensor& t, const MappedFile& map);

// Empty CPU tensors of these shapes and dtypes, packed into one buffer on transparent huge pages
// (2 MiB; ordinary pages where the kernel refuses the advice). The buffer lives until the last
// of them is released. Why: on some machines (virtual ones especially) a matrix streamed from
// anonymous 4 KiB pages reads at under half the bytes per second of the same matrix on huge
// pages or in the page cache, and weights copied at load (permuted, dequantized, widened) and
// the KV cache are read once per decoded token.
struct TensorSpec {
    std::vector<int64_t> shape;
    at::ScalarType dtype = at::kFloat;
};
std::vector<at::Tensor> emptyOnLargePages(const std::vector<TensorSpec>& specs);

HostTensor toHost(const at::Tensor& t);
at::Tensor fromHost(const HostTensor& h);
std::string dtypeName(at::ScalarType t); // f32, f16, bf16, i64, ...
at::ScalarType parseDtype(const std::string& name, const std::string& what);

} // namespace kvscope
