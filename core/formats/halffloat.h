// IEEE binary16 (fp16) and bfloat16 <-> float conversion, header-only.
//
// float -> half/bf16 rounds to nearest, ties to even (as torch, numpy and ggml's reference
// code do). Overflow becomes ±inf, NaN stays NaN (quiet), fp16 subnormals are handled
// exactly. Integer-only arithmetic, so the results do not depend on compiler float flags.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvscope {

namespace halffloat_detail {
inline std::uint32_t bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float fromBits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
} // namespace halffloat_detail

inline float fp16ToFloat(std::uint16_t h) {
    using namespace halffloat_detail;
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1Fu;
    const std::uint32_t mant = h & 0x3FFu;
    if (exp == 0) {
        // Zero or subnormal: mant × 2^-24 is exact in float.
        const float v = static_cast<float>(mant) * fromBits(0x33800000u); // 2^-24
        return fromBits(bits(v) | sign);
    }
    if (exp == 31)
        return fromBits(sign | 0x7F800000u | (mant << 13));
    return fromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline std::uint16_t floatToFp16(float f) {
    const std::uint32_t x = halffloat_detail::bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t absx = x & 0x7FFFFFFFu;
    if (absx >= 0x7F800000u) // inf or NaN (keep NaN quiet and non-zero)
        return static_cast<std::uint16_t>(
            sign | (absx > 0x7F800000u ? 0x7E00u | ((absx >> 13) & 0x3FFu) : 0x7C00u));
    if (absx >= 0x477FF000u) // >= 65520 rounds past the largest half (65504)
        return static_cast<std::uint16_t>(sign | 0x7C00u);
    if (absx < 0x38800000u) {    // below 2^-14: fp16 subnormal or zero
        if (absx <= 0x33000000u) // <= 2^-25: rounds to zero (the tie goes to even 0)
            return static_cast<std::uint16_t>(sign);
        const std::uint32_t e = absx >> 23;
        const std::uint32_t m = (absx & 0x7FFFFFu) | 0x800000u;
        const std::uint32_t shift = 126u - e; // 14..24: units of 2^-24
        std::uint32_t r = m >> shift;
        const std::uint32_t rem = m & ((1u << shift) - 1u);
        const std::uint32_t halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (r & 1u)))
            ++r; // may carry into the smallest normal, which is the right encoding
        return static_cast<std::uint16_t>(sign | r);
    }
    const std::uint32_t rebiased = absx - 0x38000000u; // exponent bias 127 -> 15
    std::uint32_t h = rebiased >> 13;
    const std::uint32_t rem = rebiased & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        ++h;
    return static_cast<std::uint16_t>(sign | h);
}

inline float bf16ToFloat(std::uint16_t b) {
    return halffloat_detail::fromBits(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t floatToBf16(float f) {
    const std::uint32_t x = halffloat_detail::bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) // NaN: truncate and force quiet
        return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
    return static_cast<std::uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// Bulk helpers over little-endian storage (unaligned sources are fine).
inline void fp16ToFloat(const void* src, std::size_t count, float* dst) {
    const auto* p = static_cast<const unsigned char*>(src);
    for (std::size_t i = 0; i < count; ++i)
        dst[i] = fp16ToFloat(static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
}
inline void bf16ToFloat(const void* src, std::size_t count, float* dst) {
    const auto* p = static_cast<const unsigned char*>(src);
    for (std::size_t i = 0; i < count; ++i)
        dst[i] = bf16ToFloat(static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
}
inline void floatToFp16(const float* src, std::size_t count, void* dst) {
    auto* p = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t h = floatToFp16(src[i]);
        p[2 * i] = static_cast<unsigned char>(h & 0xFF);
        p[2 * i + 1] = static_cast<unsigned char>(h >> 8);
    }
}
inline void floatToBf16(const float* src, std::size_t count, void* dst) {
    auto* p = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t h = floatToBf16(src[i]);
        p[2 * i] = static_cast<unsigned char>(h & 0xFF);
        p[2 * i + 1] = static_cast<unsigned char>(h >> 8);
    }
}

} // namespace kvscope
