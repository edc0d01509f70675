// Element types of the tensors stored in a .kvsnap file.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvscope::snapfile {

// Values are stable names in the file ("f32", "bf16", ...), never the enum's integer value.
enum class DType { F32, F16, BF16, F64, I64, I32, U8, Bool };

// Bytes per element: 4, 2, 2, 8, 8, 4, 1, 1.
std::size_t dtypeSize(DType dtype);
// The name used in the manifest: "f32", "f16", "bf16", "f64", "i64", "i32", "u8", "bool".
std::string dtypeName(DType dtype);
// Inverse of dtypeName; nullopt for anything else (case-sensitive).
std::optional<DType> parseDType(std::string_view name);
// True for f32, f16, bf16, f64: the types the writer byte-shuffles by default.
bool isFloat(DType dtype);

} // namespace kvscope::snapfile
