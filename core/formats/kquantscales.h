// The 6-bit (scale, min) pairs of ggml's Q4_K and Q5_K blocks, read back: shared by the
// dequantizer (ggufdequant.cpp) and the quantizer (ggufquantize.cpp, which packs them).
#pragma once

#include <cstdint>

namespace kvscope::gguf {

// Q4_K and Q5_K pack eight 6-bit (scale, min) pairs into 12 bytes: pairs 0–3 in the low six
// bits of bytes 0–3 (scales) and 4–7 (mins); pairs 4–7 take their low four bits from the
// nibbles of bytes 8–11 and their top two from the spare bits of bytes 0–7. Pair j of `q`.
inline void kScaleMin(int j, const std::uint8_t* q, std::uint8_t& scale, std::uint8_t& min) {
    if (j < 4) {
        scale = q[j] & 63;
        min = q[j + 4] & 63;
    } else {
        scale = static_cast<std::uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

} // namespace kvscope::gguf
