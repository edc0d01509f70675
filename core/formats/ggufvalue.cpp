// GGUF metadata values and the ggml type table (dequantization: ggufdequant.cpp).
#include "formats/gguf.h"
#include "formats/halffloat.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kvscope::gguf {

namespace {

template <typename T> constexpr ValueType valueTypeOf() {
    if constexpr (std::is_same_v<T, bool>)
        return ValueType::Bool;
    else if constexpr (std::is_same_v<T, std::uint8_t>)
        return ValueType::U8;
    else if constexpr (std::is_same_v<T, std::int8_t>)
        return ValueType::I8;
    else if constexpr (std::is_same_v<T, std::uint16_t>)
        return ValueType::U16;
    else if constexpr (std::is_same_v<T, std::int16_t>)
        return ValueType::I16;
    else if constexpr (std::is_same_v<T, std::uint32_t>)
        return ValueType::U32;
    else if constexpr (std::is_same_v<T, std::int32_t>)
        return ValueType::I32;
    else if constexpr (std::is_same_v<T, std::uint64_t>)
        return ValueType::U64;
    else if constexpr (std::is_same_v<T, std::int64_t>)
        return ValueType::I64;
    else if constexpr (std::is_same_v<T, float>)
        return ValueType::F32;
    else {
        static_assert(std::is_same_v<T, double>, "unsupported GGUF value type");
        return ValueType::F64;
    }
}

bool isSigned(ValueType t) {
    return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}
bool isUnsigned(ValueType t) {
    return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}

// Integer element i of packed storage, widened. `neg` is set for negative signed values.
struct Wide {
    std::uint64_t magnitudeBits; // the value as uint64 (two's complement for negatives)
    bool negative;
};
Wide intElement(ValueType t, const std::uint8_t* p, std::size_t i) {
    const std::size_t n = valueTypeSize(t);
    std::uint64_t u = 0;
    std::memcpy(&u, p + i * n, n); // little-endian host assumed (see CMakeLists check)
    if (isSigned(t) && n < 8 && (u >> (8 * n - 1)) & 1u)
        u |= ~std::uint64_t{0} << (8 * n); // sign-extend
    const bool negative = isSigned(t) && static_cast<std::int64_t>(u) < 0;
    return {u, negative};
}

double floatElement(ValueType t, const std::uint8_t* p, std::size_t i) {
    if (t == ValueType::F32) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    return d;
}

} // namespace

std::optional<TypeTraits> typeTraits(TensorType type) {
    switch (type) {
    case TensorType::F32:
        return TypeTraits{"F32", 1, 4};
    case TensorType::F16:
        return TypeTraits{"F16", 1, 2};
    case TensorType::Q4_0:
        return TypeTraits{"Q4_0", 32, 18};
    case TensorType::Q4_1:
        return TypeTraits{"Q4_1", 32, 20};
    case TensorType::Q5_0:
        return TypeTraits{"Q5_0", 32, 22};
    case TensorType::Q5_1:
        return TypeTraits{"Q5_1", 32, 24};
    case TensorType::Q8_0:
        return TypeTraits{"Q8_0", 32, 34};
    case TensorType::Q8_1:
        return TypeTraits{"Q8_1", 32, 36};
    case TensorType::Q2_K:
        return TypeTraits{"Q2_K", 256, 84};
    case TensorType::Q3_K:
        return TypeTraits{"Q3_K", 256, 110};
    case TensorType::Q4_K:
        return TypeTraits{"Q4_K", 256, 144};
    case TensorType::Q5_K:
        return TypeTraits{"Q5_K", 256, 176};
    case TensorType::Q6_K:
        return TypeTraits{"Q6_K", 256, 210};
    case TensorType::Q8_K:
        return TypeTraits{"Q8_K", 256, 292};
    case TensorType::IQ2_XXS:
        return TypeTraits{"IQ2_XXS", 256, 66};
    case TensorType::IQ2_XS:
        return TypeTraits{"IQ2_XS", 256, 74};
    case TensorType::IQ3_XXS:
        return TypeTraits{"IQ3_XXS", 256, 98};
    case TensorType::IQ1_S:
        return TypeTraits{"IQ1_S", 256, 50};
    case TensorType::IQ4_NL:
        return TypeTraits{"IQ4_NL", 32, 18};
    case TensorType::IQ3_S:
        return TypeTraits{"IQ3_S", 256, 110};
    case TensorType::IQ2_S:
        return TypeTraits{"IQ2_S", 256, 82};
    case TensorType::IQ4_XS:
        return TypeTraits{"IQ4_XS", 256, 136};
    case TensorType::I8:
        return TypeTraits{"I8", 1, 1};
    case TensorType::I16:
        return TypeTraits{"I16", 1, 2};
    case TensorType::I32:
        return TypeTraits{"I32", 1, 4};
    case TensorType::I64:
        return TypeTraits{"I64", 1, 8};
    case TensorType::F64:
        return TypeTraits{"F64", 1, 8};
    case TensorType::IQ1_M:
        return TypeTraits{"IQ1_M", 256, 56};
    case TensorType::BF16:
        return TypeTraits{"BF16", 1, 2};
    case TensorType::TQ1_0:
        return TypeTraits{"TQ1_0", 256, 54};
    case TensorType::TQ2_0:
        return TypeTraits{"TQ2_0", 256, 66};
    case TensorType::MXFP4:
        return TypeTraits{"MXFP4", 32, 17};
    }
    return std::nullopt;
}

std::string typeName(TensorType type) {
    if (auto t = typeTraits(type))
        return std::string(t->name);
    return "type " + std::to_string(static_cast<std::uint32_t>(type));
}

std::string_view valueTypeName(ValueType type) {
    switch (type) {
    case ValueType::U8:
        return "u8";
    case ValueType::I8:
        return "i8";
    case ValueType::U16:
        return "u16";
    case ValueType::I16:
        return "i16";
    case ValueType::U32:
        return "u32";
    case ValueType::I32:
        return "i32";
    case ValueType::F32:
        return "f32";
    case ValueType::Bool:
        return "bool";
    case ValueType::String:
        return "string";
    case ValueType::Array:
        return "array";
    case ValueType::U64:
        return "u64";
    case ValueType::I64:
        return "i64";
    case ValueType::F64:
        return "f64";
    }
    return "unknown";
}

std::size_t valueTypeSize(ValueType type) {
    switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool:
        return 1;
    case ValueType::U16:
    case ValueType::I16:
        return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
        return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
        return 8;
    case ValueType::String:
    case ValueType::Array:
        return 0;
    }
    return 0;
}

// ---- Value ------------------------------------------------------------------------------

template <typename T> Value Value::scalar(T v) {
    Value out;
    out.m_type = out.m_elementType = valueTypeOf<T>();
    out.m_packed.resize(sizeof(T));
    if constexpr (std::is_same_v<T, bool>)
        out.m_packed[0] = v ? 1 : 0;
    else
        std::memcpy(out.m_packed.data(), &v, sizeof(T));
    return out;
}

template <typename T> Value Value::array(std::span<const T> values) {
    Value out;
    out.m_type = ValueType::Array;
    out.m_elementType = valueTypeOf<T>();
    out.m_packed.resize(values.size() * sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
        for (std::size_t i = 0; i < values.size(); ++i)
            out.m_packed[i] = values[i] ? 1 : 0;
    } else if (!values.empty()) {
        std::memcpy(out.m_packed.data(), values.data(), out.m_packed.size());
    }
    return out;
}

#define KVSCOPE_GGUF_INSTANTIATE(T)                                                                \
    template Value Value::scalar<T>(T);                                                            \
    template Value Value::array<T>(std::span<const T>);
KVSCOPE_GGUF_INSTANTIATE(bool)
KVSCOPE_GGUF_INSTANTIATE(std::uint8_t)
KVSCOPE_GGUF_INSTANTIATE(std::int8_t)
KVSCOPE_GGUF_INSTANTIATE(std::uint16_t)
KVSCOPE_GGUF_INSTANTIATE(std::int16_t)
KVSCOPE_GGUF_INSTANTIATE(std::uint32_t)
KVSCOPE_GGUF_INSTANTIATE(std::int32_t)
KVSCOPE_GGUF_INSTANTIATE(std::uint64_t)
KVSCOPE_GGUF_INSTANTIATE(std::int64_t)
KVSCOPE_GGUF_INSTANTIATE(float)
KVSCOPE_GGUF_INSTANTIATE(double)
#undef KVSCOPE_GGUF_INSTANTIATE

Value Value::string(std::string s) {
    Value out;
    out.m_type = out.m_elementType = ValueType::String;
    out.m_strings.push_back(std::move(s));
    return out;
}

Value Value::stringArray(std::vector<std::string> values) {
    Value out;
    out.m_type = ValueType::Array;
    out.m_elementType = ValueType::String;
    out.m_strings = std::move(values);
    return out;
}

Value Value::fromPacked(ValueType elementType, std::vector<std::uint8_t> bytes, bool isArray) {
    const std::size_t n = valueTypeSize(elementType);
    if (n == 0 || bytes.size() % n != 0 || (!isArray && bytes.size() != n))
        throw KvError("GGUF value: " + std::to_string(bytes.size()) + " bytes are not " +
                      (isArray ? "an array" : "one element") + " of " +
                      std::string(valueTypeName(elementType)));
    Value out;
    out.m_type = isArray ? ValueType::Array : elementType;
    out.m_elementType = elementType;
    out.m_packed = std::move(bytes);
    return out;
}

std::size_t Value::size() const {
    if (!isArray())
        return 1;
    if (m_elementType == ValueType::String)
        return m_strings.size();
    const std::size_t n = valueTypeSize(m_elementType);
    return n ? m_packed.size() / n : 0;
}

std::optional<std::int64_t> Value::asI64() const {
    if (isArray() || !(isSigned(m_type) || isUnsigned(m_type)))
        return std::nullopt;
    const Wide w = intElement(m_type, m_packed.data(), 0);
    if (!w.negative && w.magnitudeBits > static_cast<std::uint64_t>(INT64_MAX))
        return std::nullopt;
    return static_cast<std::int64_t>(w.magnitudeBits);
}

std::optional<std::uint64_t> Value::asU64() const {
    if (isArray() || !(isSigned(m_type) || isUnsigned(m_type)))
        return std::nullopt;
    const Wide w = intElement(m_type, m_packed.data(), 0);
    if (w.negative)
        return std::nullopt;
    return w.magnitudeBits;
}

std::optional<double> Value::asF64() const {
    if (m_type != ValueType::F32 && m_type != ValueType::F64)
        return std::nullopt;
    return floatElement(m_type, m_packed.data(), 0);
}

std::optional<bool> Value::asBool() const {
    if (m_type != ValueType::Bool)
        return std::nullopt;
    return m_packed[0] != 0;
}

const std::string* Value::asString() const {
    return m_type == ValueType::String ? &m_strings.front() : nullptr;
}

const std::vector<std::string>* Value::asStringArray() const {
    return isArray() && m_elementType == ValueType::String ? &m_strings : nullptr;
}

std::optional<std::vector<float>> Value::toF32Array() const {
    if (!isArray() || (m_elementType != ValueType::F32 && m_elementType != ValueType::F64))
        return std::nullopt;
    std::vector<float> out(size());
    if (m_elementType == ValueType::F32) {
        if (!out.empty())
            std::memcpy(out.data(), m_packed.data(), m_packed.size());
    } else {
        for (std::size_t i = 0; i < out.size(); ++i)
            out[i] = static_cast<float>(floatElement(m_elementType, m_packed.data(), i));
    }
    return out;
}

std::optional<std::vector<std::int64_t>> Value::toI64Array() const {
    if (!isArray() || !(isSigned(m_elementType) || isUnsigned(m_elementType)))
        return std::nullopt;
    std::vector<std::int64_t> out(size());
    for (std::size_t i = 0; i < out.size(); ++i) {
        const Wide w = intElement(m_elementType, m_packed.data(), i);
        if (!w.negative && w.magnitudeBits > static_cast<std::uint64_t>(INT64_MAX))
            return std::nullopt;
        out[i] = static_cast<std::int64_t>(w.magnitudeBits);
    }
    return out;
}

std::optional<std::vector<std::int32_t>> Value::toI32Array() const {
    if (isArray() && m_elementType == ValueType::I32) { // the common case: one memcpy
        std::vector<std::int32_t> out(size());
        if (!out.empty())
            std::memcpy(out.data(), m_packed.data(), m_packed.size());
        return out;
    }
    auto wide = toI64Array();
    if (!wide)
        return std::nullopt;
    std::vector<std::int32_t> out(wide->size());
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int64_t v = (*wide)[i];
        if (v < INT32_MIN || v > INT32_MAX)
            return std::nullopt;
        out[i] = static_cast<std::int32_t>(v);
    }
    return out;
}

std::string Value::toDisplayString(std::size_t maxItems) const {
    auto element = [&](std::size_t i) -> std::string {
        const ValueType t = m_elementType;
        if (t == ValueType::String) {
            std::string s = m_strings[i];
            if (s.size() > 80)
                s = s.substr(0, 77) + "...";
            return "\"" + s + "\"";
        }
        if (t == ValueType::Bool)
            return m_packed[i] ? "true" : "false";
        if (t == ValueType::F32 || t == ValueType::F64) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.9g", floatElement(t, m_packed.data(), i));
            return buf;
        }
        const Wide w = intElement(t, m_packed.data(), i);
        return w.negative ? std::to_string(static_cast<std::int64_t>(w.magnitudeBits))
                          : std::to_string(w.magnitudeBits);
    };
    if (!isArray())
        return element(0);
    std::string out = "[";
    const std::size_t n = size();
    for (std::size_t i = 0; i < n && i < maxItems; ++i)
        out += (i ? ", " : "") + element(i);
    if (n > maxItems)
        out += ", … (" + std::to_string(n) + " items)";
    return out + "]";
}

} // namespace kvscope::gguf
