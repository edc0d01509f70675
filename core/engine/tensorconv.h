// Core-internal conversions between libtorch tensors and kvscope's plain value types.
#pragma once

#include "engine/hosttensor.h"

#include <string>
#include <ATen/ATen.h>

namespace kvscope {

HostTensor toHost(const at::Tensor& t);
at::Tensor fromHost(const HostTensor& h);
std::string dtypeName(at::ScalarType t); // f32, f16, bf16, i64, ...
at::ScalarType parseDtype(const std::string& name, const std::string& what);

} // namespace kvscope
