// ggml's tensor types turned into float: the plain ones, the legacy 32-element blocks (Q4_0 …
// Q8_0), the 256-element "K" super-blocks (Q2_K … Q6_K) and the non-linear 4-bit types
// (IQ4_NL, IQ4_XS). Each kernel follows the block layout ggml defines and evaluates every
// product in the order ggml's reference dequantization does, so the floats are the ones
// llama.cpp computes, bit for bit (tests/tst_quants.cpp checks this against a file whose
// reference values ggml itself wrote).
#include "formats/gguf.h"
#include "formats/halffloat.h"
#include "formats/kquantscales.h"

#include <cstring>

namespace kvscope::gguf {

namespace {

constexpr int kSuper = 256; // elements in a K-quant super-block

float half(const std::uint8_t* p) {
    return fp16ToFloat(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
}

// The 16 levels of the non-linear 4-bit types, fixed by the format.
constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

// Q5_0 / Q5_1: 16 packed nibbles plus a 32-bit word of fifth bits (bit j belongs to x[j]).
void fifthBits(const std::uint8_t* qh, const std::uint8_t* qs, int* x) {
    std::uint32_t high;
    std::memcpy(&high, qh, 4);
    for (int j = 0; j < 16; ++j) {
        x[j] = (qs[j] & 0x0F) | static_cast<int>(((high >> j) << 4) & 0x10);
        x[j + 16] = (qs[j] >> 4) | static_cast<int>((high >> (j + 12)) & 0x10);
    }
}

void q2k(const std::uint8_t* b, float* y) { // scales[16] qs[64] d dmin
    const std::uint8_t* scales = b;
    const std::uint8_t* q = b + 16;
    const float d = half(b + 80);
    const float dmin = half(b + 82);
    int is = 0;
    for (int n = 0; n < kSuper; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half16 = 0; half16 < 2; ++half16) {
                const std::uint8_t sc = scales[is++];
                const float dl = d * static_cast<float>(sc & 0x0F);
                const float ml = dmin * static_cast<float>(sc >> 4);
                const std::uint8_t* qq = q + 16 * half16;
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * static_cast<float>((qq[l] >> shift) & 3) - ml;
            }
        }
    }
}

void q3k(const std::uint8_t* b, float* y) { // hmask[32] qs[64] scales[12] d
    const std::uint8_t* hmask = b;
    const std::uint8_t* q = b + 32;
    const float d = half(b + 108);
    // Sixteen 6-bit scales: low nibbles from bytes 0–7, top two bits from bytes 8–11.
    std::uint32_t aux[4];
    std::memcpy(aux, b + 96, 12);
    constexpr std::uint32_t low2 = 0x03030303, low4 = 0x0F0F0F0F;
    const std::uint32_t top = aux[2];
    aux[2] = ((aux[0] >> 4) & low4) | (((top >> 4) & low2) << 4);
    aux[3] = ((aux[1] >> 4) & low4) | (((top >> 6) & low2) << 4);
    aux[0] = (aux[0] & low4) | (((top >> 0) & low2) << 4);
    aux[1] = (aux[1] & low4) | (((top >> 2) & low2) << 4);
    std::int8_t scales[16];
    std::memcpy(scales, aux, 16);
    int is = 0;
    std::uint8_t bit = 1;
    for (int n = 0; n < kSuper; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2, bit = static_cast<std::uint8_t>(bit << 1)) {
            for (int half16 = 0; half16 < 2; ++half16) {
                const float dl = d * static_cast<float>(scales[is++] - 32);
                const int o = 16 * half16;
                for (int l = 0; l < 16; ++l) {
                    const int v = ((q[o + l] >> shift) & 3) - ((hmask[o + l] & bit) ? 0 : 4);
                    *y++ = dl * static_cast<float>(v);
                }
            }
        }
    }
}

void q4k(const std::uint8_t* b, float* y) { // d dmin scales[12] qs[128]
    const float d = half(b);
    const float dmin = half(b + 2);
    const std::uint8_t* scales = b + 4;
    const std::uint8_t* q = b + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
        std::uint8_t sc, m;
        kScaleMin(is, scales, sc, m);
        const float d1 = d * sc, m1 = dmin * m;
        kScaleMin(is + 1, scales, sc, m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l)
            *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
        for (int l = 0; l < 32; ++l)
            *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
}

void q5k(const std::uint8_t* b, float* y) { // d dmin scales[12] qh[32] qs[128]
    const float d = half(b);
    const float dmin = half(b + 2);
    const std::uint8_t* scales = b + 4;
    const std::uint8_t* qh = b + 16;
    const std::uint8_t* ql = b + 48;
    std::uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
        std::uint8_t sc, m;
        kScaleMin(is, scales, sc, m);
        const float d1 = d * sc, m1 = dmin * m;
        kScaleMin(is + 1, scales, sc, m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l)
            *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
            *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        u1 = static_cast<std::uint8_t>(u1 << 2);
        u2 = static_cast<std::uint8_t>(u2 << 2);
    }
}

void q6k(const std::uint8_t* b, float* y) { // ql[128] qh[64] scales[16] (int8) d
    const std::uint8_t* ql = b;
    const std::uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
    const float d = half(b + 208);
    for (int n = 0; n < kSuper; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
            y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
        }
    }
}

void iq4xs(const std::uint8_t* b, float* y) { // d scales_h(u16) scales_l[4] qs[128]
    const float d = half(b);
    const int scalesHigh = b[2] | (b[3] << 8);
    const std::uint8_t* scalesLow = b + 4;
    const std::uint8_t* qs = b + 8;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
        const int ls =
            ((scalesLow[ib / 2] >> 4 * (ib % 2)) & 0x0F) | (((scalesHigh >> 2 * ib) & 3) << 4);
        const float dl = d * static_cast<float>(ls - 32);
        for (int j = 0; j < 16; ++j) {
            y[j] = dl * static_cast<float>(kIq4Levels[qs[j] & 0x0F]);
            y[j + 16] = dl * static_cast<float>(kIq4Levels[qs[j] >> 4]);
        }
    }
}

// Runs `kernel(block, out)` over count / blockSize blocks of `blockBytes` each.
template <typename Kernel>
void blocks(const std::uint8_t* src, std::size_t count, float* dst, int blockSize, int blockBytes,
            Kernel kernel) {
    for (std::size_t b = 0; b < count / blockSize; ++b, src += blockBytes, dst += blockSize)
        kernel(src, dst);
}

} // namespace

bool canReadF32(TensorType type) {
    switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::F64:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
        return true;
    default:
        return false;
    }
}

std::string_view readableTypes() {
    return "F32, F16, BF16, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
           "IQ4_NL, IQ4_XS";
}

void dequantize(TensorType type, const std::uint8_t* src, std::size_t count, float* dst) {
    switch (type) {
    case TensorType::F32:
        if (count)
            std::memcpy(dst, src, count * 4);
        return;
    case TensorType::F16:
        fp16ToFloat(src, count, dst);
        return;
    case TensorType::BF16:
        bf16ToFloat(src, count, dst);
        return;
    case TensorType::F64:
        for (std::size_t i = 0; i < count; ++i) {
            double d;
            std::memcpy(&d, src + 8 * i, 8);
            dst[i] = static_cast<float>(d);
        }
        return;
    case TensorType::Q8_0: // d, int8 qs[32]; x = d * q
        return blocks(src, count, dst, 32, 34, [](const std::uint8_t* b, float* y) {
            const float d = half(b);
            for (int j = 0; j < 32; ++j)
                y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
        });
    case TensorType::Q4_0: // d, qs[16]; low nibbles are x[0..15], high ones x[16..31]
        return blocks(src, count, dst, 32, 18, [](const std::uint8_t* b, float* y) {
            const float d = half(b);
            for (int j = 0; j < 16; ++j) {
                y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
                y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
            }
        });
    case TensorType::Q4_1: // d, m, qs[16]; x = q * d + m
        return blocks(src, count, dst, 32, 20, [](const std::uint8_t* b, float* y) {
            const float d = half(b), m = half(b + 2);
            for (int j = 0; j < 16; ++j) {
                y[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
                y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
            }
        });
    case TensorType::Q5_0: // d, qh[4], qs[16]; x = (q - 16) * d
        return blocks(src, count, dst, 32, 22, [](const std::uint8_t* b, float* y) {
            const float d = half(b);
            int x[32];
            fifthBits(b + 2, b + 6, x);
            for (int j = 0; j < 32; ++j)
                y[j] = static_cast<float>(x[j] - 16) * d;
        });
    case TensorType::Q5_1: // d, m, qh[4], qs[16]; x = q * d + m
        return blocks(src, count, dst, 32, 24, [](const std::uint8_t* b, float* y) {
            const float d = half(b), m = half(b + 2);
            int x[32];
            fifthBits(b + 4, b + 8, x);
            for (int j = 0; j < 32; ++j)
                y[j] = static_cast<float>(x[j]) * d + m;
        });
    case TensorType::Q2_K:
        return blocks(src, count, dst, kSuper, 84, q2k);
    case TensorType::Q3_K:
        return blocks(src, count, dst, kSuper, 110, q3k);
    case TensorType::Q4_K:
        return blocks(src, count, dst, kSuper, 144, q4k);
    case TensorType::Q5_K:
        return blocks(src, count, dst, kSuper, 176, q5k);
    case TensorType::Q6_K:
        return blocks(src, count, dst, kSuper, 210, q6k);
    case TensorType::IQ4_NL: // d, qs[16]; x = d * level[nibble]
        return blocks(src, count, dst, 32, 18, [](const std::uint8_t* b, float* y) {
            const float d = half(b);
            for (int j = 0; j < 16; ++j) {
                y[j] = d * static_cast<float>(kIq4Levels[b[2 + j] & 0x0F]);
                y[j + 16] = d * static_cast<float>(kIq4Levels[b[2 + j] >> 4]);
            }
        });
    case TensorType::IQ4_XS:
        return blocks(src, count, dst, kSuper, 136, iq4xs);
    default:
        throw KvError("cannot convert " + typeName(type) +
                      " to float (supported: " + std::string(readableTypes()) + ")");
    }
}

} // namespace kvscope::gguf
