#include "snapfile/dtype.h"

#include <array>
#include <utility>

namespace kvscope::snapfile {

namespace {
struct DTypeEntry {
    DType dtype;
    const char* name;
    std::size_t size;
};
constexpr std::array<DTypeEntry, 8> kDTypes{{
    {DType::F32, "f32", 4},
    {DType::F16, "f16", 2},
    {DType::BF16, "bf16", 2},
    {DType::F64, "f64", 8},
    {DType::I64, "i64", 8},
    {DType::I32, "i32", 4},
    {DType::U8, "u8", 1},
    {DType::Bool, "bool", 1},
}};

const DTypeEntry& entry(DType dtype) {
    for (const auto& e : kDTypes)
        if (e.dtype == dtype)
            return e;
    return kDTypes[0]; // unreachable for valid enum values
}
} // namespace

std::size_t dtypeSize(DType dtype) {
    return entry(dtype).size;
}

std::string dtypeName(DType dtype) {
    return entry(dtype).name;
}

std::optional<DType> parseDType(std::string_view name) {
    for (const auto& e : kDTypes)
        if (name == e.name)
            return e.dtype;
    return std::nullopt;
}

bool isFloat(DType dtype) {
    return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
           dtype == DType::F64;
}

} // namespace kvscope::snapfile
