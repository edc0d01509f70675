#include "engine/qdot.h"

#include "formats/halffloat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

// GCC 12 reports the intrinsics' own "undefined" placeholders as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kvscope::qdot {

using gguf::TensorType;

namespace {

// The activation blocks: ggml's block_q8_K, and its block_q8_0 / block_q8_1 with their f16
// scales held as the float values they round to (the same numbers, read without a conversion
// in every (row, token) product).
struct Q8_0 {
    float d; // scale, an f16 value
    std::int8_t qs[32];
};
struct Q8_1 {
    float d; // scale, an f16 value
    float s; // d * sum(qs), an f16 value
    std::int8_t qs[32];
};
#pragma pack(push, 1)
struct Q8_0W { // a Q8_0 weight block
    std::uint16_t d;
    std::int8_t qs[32];
};
struct Q8K {
    float d;
    std::int8_t qs[256];
    std::int16_t bsums[16]; // sums of qs by 16
};
// The weight blocks the vector kernels read (layouts as ggml defines them).
struct Q4K {
    std::uint16_t d, dmin;
    std::uint8_t scales[12]; // eight 6-bit (scale, min) pairs
    std::uint8_t qs[128];
};
struct Q5K {
    std::uint16_t d, dmin;
    std::uint8_t scales[12];
    std::uint8_t qh[32];
    std::uint8_t qs[128];
};
struct Q6K {
    std::uint8_t ql[128];
    std::uint8_t qh[64];
    std::int8_t scales[16];
    std::uint16_t d;
};
#pragma pack(pop)
static_assert(sizeof(Q8_0) == 36 && sizeof(Q8_1) == 40 && sizeof(Q8K) == 292 &&
              sizeof(Q8_0W) == 34);
static_assert(sizeof(Q4K) == 144 && sizeof(Q5K) == 176 && sizeof(Q6K) == 210);

// IQ4_NL / IQ4_XS's 16 levels, fixed by the format.
alignas(16) constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                    1,    13,   25,  38,  53,  69,  89,  113};

float half(std::uint16_t h) {
    return fp16ToFloat(h);
}

// ggml's nearest_int: round half to even through the float's mantissa (|v| < 2^22).
int nearestInt(float v) {
    float f = v + 12582912.f;
    std::int32_t i;
    std::memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

bool isK(TensorType w) {
    switch (w) {
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
        return true;
    default:
        return false;
    }
}

// x86's Q8_0 / Q8_1 quantization (ggml's AVX path): d = max|x| / 127, q = round-to-even(x * 127
// / max|x|); Q8_1 also stores d * sum(q).
void quantizeQ8_0(const float* x, std::int64_t n, std::uint8_t* out, bool withSum) {
    for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j)
            amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        std::int8_t* qs;
        if (withSum) {
            auto* y = reinterpret_cast<Q8_1*>(out) + b;
            y->d = half(floatToFp16(d));
            qs = y->qs;
        } else {
            auto* y = reinterpret_cast<Q8_0*>(out) + b;
            y->d = half(floatToFp16(d));
            qs = y->qs;
        }
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            qs[j] = static_cast<std::int8_t>(nearestInt(x[j] * id)); // |x * id| <= 127
            sum += qs[j];
        }
        if (withSum)
            (reinterpret_cast<Q8_1*>(out) + b)->s = half(floatToFp16(d * static_cast<float>(sum)));
    }
}

// ggml's quantize_row_q8_K: the element of largest magnitude becomes -127 (or 127).
void quantizeQ8K(const float* x, std::int64_t n, std::uint8_t* out) {
    for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
        auto* y = reinterpret_cast<Q8K*>(out) + b;
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < 256; ++j)
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        if (amax == 0.0f) {
            std::memset(y, 0, sizeof(Q8K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < 256; ++j)
            y->qs[j] = static_cast<std::int8_t>(std::min(127, nearestInt(iscale * x[j])));
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j)
                sum += y->qs[16 * g + j];
            y->bsums[g] = static_cast<std::int16_t>(sum);
        }
        y->d = 1.0f / iscale;
    }
}

// ---- plain C++: one weight block widened (gguf::dequantize, ggml's values), summed against
// the activation block's integers, times the activation scale.

template <TensorType W>
const std::int8_t* activationBlock(const std::uint8_t* xq, std::int64_t b, float& dy) {
    if constexpr (W == TensorType::Q2_K || W == TensorType::Q3_K || W == TensorType::Q4_K ||
                  W == TensorType::Q5_K || W == TensorType::Q6_K || W == TensorType::IQ4_XS) {
        const auto* y = reinterpret_cast<const Q8K*>(xq) + b;
        dy = y->d;
        return y->qs;
    } else if constexpr (W == TensorType::Q4_1 || W == TensorType::Q5_1) {
        const auto* y = reinterpret_cast<const Q8_1*>(xq) + b;
        dy = y->d;
        return y->qs;
    } else {
        const auto* y = reinterpret_cast<const Q8_0*>(xq) + b;
        dy = y->d;
        return y->qs;
    }
}

template <TensorType W, int N>
void genericRows(const std::uint8_t* row, const std::uint8_t* xq, std::size_t stride,
                 std::int64_t n, float* out) {
    const auto traits = *gguf::typeTraits(W);
    const int bs = static_cast<int>(traits.blockSize);
    float w[256];
    float sum[N] = {};
    for (std::int64_t b = 0; b < n / bs; ++b, row += traits.blockBytes) {
        gguf::dequantize(W, row, static_cast<std::size_t>(bs), w);
        for (int t = 0; t < N; ++t) {
            float dy;
            const std::int8_t* q = activationBlock<W>(xq + t * stride, b, dy);
            float s = 0.0f;
            for (int j = 0; j < bs; ++j)
                s += w[j] * static_cast<float>(q[j]);
            sum[t] += s * dy;
        }
    }
    for (int t = 0; t < N; ++t)
        out[t] = sum[t];
}

// ---- AVX2: unsigned weight bytes times signed activation bytes, pairs summed to 16 bits
// (maddubs) and then, times a per-group scale, to 32 bits (madd). No product can saturate:
// weights are at most 63 (Q6_K) or 128 (|Q8_0|), activations at most 127 in magnitude.
//
// Each kernel takes N token vectors at once: a weight block is loaded and unpacked once for all
// of them (a prefill's cost), and every token's sums see the same operations in the same order
// as with N = 1, so a token's result does not depend on the tokens beside it.

#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KV_VNNI __attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni")))

KV_AVX2 inline float hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

KV_AVX2 inline int hsumInt(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

KV_AVX2 inline __m256i load(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Eight 32-bit sums of u * s (32 unsigned and 32 signed bytes), each times `scale` (16 bits).
KV_AVX2 inline __m256i scaledDot(__m256i u, __m256i s, __m256i scale) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}

// An f16 scale through the F16C unit (halffloat.h's portable conversion branches).
KV_AVX2 inline float halfHw(std::uint16_t h) {
    return _cvtsh_ss(h);
}

// Q8_0 rows: per block, the integer dot product of |x| with y carrying x's signs (the product
// of two signed bytes through an unsigned-by-signed instruction), times both scales. VNNI
// (AVX-512 VNNI on 256-bit registers) sums four products to 32 bits in one instruction where
// AVX2 takes two (maddubs, madd); the sums are the same integers. Two sums per token, blocks
// in turn, so that consecutive blocks do not wait on one another.
KV_AVX2 inline __m256i dotU8S8Avx2(__m256i u, __m256i s) {
    return scaledDot(u, s, _mm256_set1_epi16(1));
}
KV_VNNI inline __m256i dotU8S8Vnni(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
template <bool Vnni> KV_AVX2 inline __m256i dotU8S8(__m256i u, __m256i s) {
    if constexpr (Vnni)
        return dotU8S8Vnni(u, s); // inlined where the caller's target has VNNI (flatten below)
    else
        return dotU8S8Avx2(u, s);
}

// R rows at once (a prefill's tile): a token's activation block is loaded once for the R rows;
// each (row, token) sum sees the same operations in the same order as alone.
template <bool Vnni, int R, int N>
KV_AVX2 inline void q8Block(const Q8_0W* const* x, const std::uint8_t* xq, std::size_t stride,
                            std::int64_t b, __m256 (*acc)[N]) {
    __m256i qx[R], ax[R];
    __m256 dx[R];
    for (int r = 0; r < R; ++r) {
        qx[r] = load(x[r][b].qs);
        ax[r] = _mm256_sign_epi8(qx[r], qx[r]);
        dx[r] = _mm256_set1_ps(halfHw(x[r][b].d));
    }
    for (int t = 0; t < N; ++t) {
        const Q8_0& y = reinterpret_cast<const Q8_0*>(xq + t * stride)[b];
        const __m256i qy = load(y.qs);
        const __m256 dy = _mm256_set1_ps(y.d);
        for (int r = 0; r < R; ++r) {
            const __m256i dot = dotU8S8<Vnni>(ax[r], _mm256_sign_epi8(qy, qx[r]));
            acc[r][t] =
                _mm256_fmadd_ps(_mm256_mul_ps(dx[r], dy), _mm256_cvtepi32_ps(dot), acc[r][t]);
        }
    }
}

template <bool Vnni, int R, int N>
KV_AVX2 inline void q8Rows(const std::uint8_t* row, std::size_t rowBytes, const std::uint8_t* xq,
                           std::size_t stride, std::int64_t n, float* out) {
    const Q8_0W* x[R];
    for (int r = 0; r < R; ++r)
        x[r] = reinterpret_cast<const Q8_0W*>(row + r * rowBytes);
    __m256 even[R][N], odd[R][N];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < N; ++t)
            even[r][t] = odd[r][t] = _mm256_setzero_ps();
    const std::int64_t blocks = n / 32;
    std::int64_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        for (int r = 0; r < R; ++r)
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + b) + 512, _MM_HINT_T0);
        q8Block<Vnni, R, N>(x, xq, stride, b, even);
        q8Block<Vnni, R, N>(x, xq, stride, b + 1, odd);
    }
    if (b < blocks)
        q8Block<Vnni, R, N>(x, xq, stride, b, even);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < N; ++t)
            out[r * N + t] = hsum(_mm256_add_ps(even[r][t], odd[r][t]));
}

// flatten: q8Rows (compiled for AVX2) and its VNNI dot inlined into one function with the
// VNNI target; a VNNI instruction cannot be inlined into an AVX2-only function, and a call
// per block costs half the kernel's time.
template <int N>
KV_AVX2 __attribute__((flatten)) void q8RowsAvx2(const std::uint8_t* row, const std::uint8_t* xq,
                                                 std::size_t stride, std::int64_t n, float* out) {
    q8Rows<false, 1, N>(row, 0, xq, stride, n, out);
}
template <int N>
KV_VNNI __attribute__((flatten)) void q8RowsVnni(const std::uint8_t* row, const std::uint8_t* xq,
                                                 std::size_t stride, std::int64_t n, float* out) {
    q8Rows<true, 1, N>(row, 0, xq, stride, n, out);
}
KV_AVX2 __attribute__((flatten)) void q8TileAvx2(const std::uint8_t* row, const std::uint8_t* xq,
                                                 std::size_t stride, std::int64_t n, float* out) {
    q8Rows<false, 1, kTileTokens>(row, 0, xq, stride, n, out);
}
KV_VNNI __attribute__((flatten)) void q8TileVnni(const std::uint8_t* row, const std::uint8_t* xq,
                                                 std::size_t stride, std::int64_t n, float* out) {
    q8Rows<true, 1, kTileTokens>(row, 0, xq, stride, n, out);
}

// The Q8_0 tile on 512-bit registers, where the CPU has AVX-512 VNNI: blocks b and b + 1 side
// by side, the low half of every register block b's, the high half block b + 1's. Each half does
// what q8Rows does to its block (|x| times y carrying x's signs, summed in integers, times both
// scales, added to the sum), so the low halves are q8Rows' even sums and the high halves its odd
// ones, and a token's result is the same bits as the one-token kernels give it. A pair of blocks
// costs one of each operation instead of two (and two inserts that put the halves together);
// on CPUs whose vector units are 512 bits wide that is the gain.
#define KV_Z512                                                                                    \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

KV_Z512 inline __m512i load2(const void* lo, const void* hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load(lo)), load(hi), 1);
}
KV_Z512 inline __m512 scales2(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

KV_Z512 __attribute__((flatten)) void q8TileZmm(const std::uint8_t* row, const std::uint8_t* xq,
                                                std::size_t stride, std::int64_t n, float* out) {
    constexpr int N = kTileTokens;
    const Q8_0W* x = reinterpret_cast<const Q8_0W*>(row);
    __m512 acc[N];
    for (int t = 0; t < N; ++t)
        acc[t] = _mm512_setzero_ps();
    const std::int64_t blocks = n / 32;
    std::int64_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        _mm_prefetch(reinterpret_cast<const char*>(x + b) + 512, _MM_HINT_T0);
        const __m512i qx = load2(x[b].qs, x[b + 1].qs);
        const __m512i ax = _mm512_abs_epi8(qx);
        const __mmask64 negative = _mm512_movepi8_mask(qx);
        const __m512 dx = scales2(halfHw(x[b].d), halfHw(x[b + 1].d));
        for (int t = 0; t < N; ++t) {
            const Q8_0* y = reinterpret_cast<const Q8_0*>(xq + t * stride) + b;
            const __m512i qy = load2(y[0].qs, y[1].qs);
            // y with x's signs (where x is 0 the product is 0 either way).
            const __m512i sy = _mm512_mask_sub_epi8(qy, negative, _mm512_setzero_si512(), qy);
            const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, scales2(y[0].d, y[1].d)),
                                     _mm512_cvtepi32_ps(dot), acc[t]);
        }
    }
    for (int t = 0; t < N; ++t) {
        __m256 even = _mm512_castps512_ps256(acc[t]);
        const __m256 odd = _mm512_extractf32x8_ps(acc[t], 1);
        if (b < blocks) { // an odd count: the last block is an even one
            const Q8_0& y = reinterpret_cast<const Q8_0*>(xq + t * stride)[b];
            const __m256i qx = load(x[b].qs);
            const __m256i dot =
                dotU8S8Vnni(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(load(y.qs), qx));
            even =
                _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(halfHw(x[b].d)), _mm256_set1_ps(y.d)),
                                _mm256_cvtepi32_ps(dot), even);
        }
        out[t] = hsum(_mm256_add_ps(even, odd));
    }
}

// Q4_K / Q5_K pack eight 6-bit (scale, min) pairs into 12 bytes: pairs 0-3 in the low six bits
// of bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 take their low four bits from the nibbles of
// bytes 8-11 and their top two from the spare bits of bytes 0-7 (formats/kquantscales.h).
// Those with 32-bit word operations: the 12 bytes become four words whose bytes are the eight
// scales then the eight mins.
KV_AVX2 inline __m128i kScalesMins8(const std::uint8_t* q) {
    std::uint32_t w[4];
    std::memcpy(w, q, 12);
    constexpr std::uint32_t six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
    w[3] = ((w[2] >> 4) & four) | (((w[1] >> 6) & two) << 4); // mins 4-7
    const std::uint32_t mins03 = w[1] & six;
    w[1] = (w[2] & four) | (((w[0] >> 6) & two) << 4); // scales 4-7
    w[2] = mins03;
    w[0] &= six; // scales 0-3
    return _mm_set_epi32(static_cast<int>(w[3]), static_cast<int>(w[2]), static_cast<int>(w[1]),
                         static_cast<int>(w[0]));
}

// Every 16-bit lane set to lane k (0-7) of `v`'s halves (each half holding the same eight).
KV_AVX2 inline __m256i broadcast16(__m256i v, int k) {
    return _mm256_shuffle_epi8(v,
                               _mm256_set1_epi16(static_cast<short>(((2 * k + 1) << 8) | (2 * k))));
}

// sum + scaledDot(u, s, scale): VNNI's 16-bit dot instruction adds the scaled pairs into the
// sums itself (one instruction for madd and add; the same integers).
KV_VNNI inline __m256i scaledDotAddVnni(__m256i sum, __m256i u, __m256i s, __m256i scale) {
    return _mm256_dpwssd_epi32(sum, _mm256_maddubs_epi16(u, s), scale);
}
template <bool Vnni>
KV_AVX2 inline __m256i scaledDotAdd(__m256i sum, __m256i u, __m256i s, __m256i scale) {
    if constexpr (Vnni)
        return scaledDotAddVnni(sum, u, s, scale); // inlined under the VNNI target (flatten)
    else
        return _mm256_add_epi32(sum, scaledDot(u, s, scale));
}

inline const Q8K& q8k(const std::uint8_t* xq, std::size_t stride, int t, std::int64_t b) {
    return reinterpret_cast<const Q8K*>(xq + t * stride)[b];
}

// Q4_K and Q5_K: element 64c + l (l < 32) is the low nibble of qs[32c + l], 64c + 32 + l its high
// nibble (Q5_K: plus 16 when bit 2c, resp. 2c + 1, of qh[l] is set); group g = element / 32
// has scale scales[g] and min mins[g]: w = d * scale * q - dmin * min.
template <bool Five, bool Vnni, int R, int N>
KV_AVX2 inline void q45kRows(const std::uint8_t* row, std::size_t rowBytes, const std::uint8_t* xq,
                             std::size_t stride, std::int64_t n, float* out) {
    using Block = std::conditional_t<Five, Q5K, Q4K>;
    const Block* x[R];
    for (int r = 0; r < R; ++r)
        x[r] = reinterpret_cast<const Block*>(row + r * rowBytes);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[R][N];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < N; ++t)
            acc[r][t] = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < n / 256; ++b) {
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + b + 1), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + b + 1) + 64, _MM_HINT_T0);
        }
        float dy[N];
        __m256i bsums[N];
        for (int t = 0; t < N; ++t) {
            dy[t] = q8k(xq, stride, t, b).d;
            bsums[t] = load(q8k(xq, stride, t, b).bsums);
        }
        __m256i scales[R], sum[R][N];
        [[maybe_unused]] __m256i high[R];
        __m256 d[R];
        for (int r = 0; r < R; ++r) {
            // The eight scales as 16-bit lanes, repeated in both halves for the shuffles that
            // broadcast one of them; the eight mins each twice, one per activation sum by 16.
            const __m128i scalesMins = kScalesMins8(x[r][b].scales);
            scales[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scalesMins));
            const __m256i minsTwice =
                _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scalesMins, scalesMins));
            d[r] = _mm256_set1_ps(halfHw(x[r][b].d));
            // The mins' term: each pair of groups' min times their activation sums by 16 (eight
            // integer lanes), times the token's scale and dmin, taken off the token's sums
            // lane by lane (as llama.cpp's AVX2 kernel keeps it, without a horizontal sum per
            // block).
            const float dmin = halfHw(x[r][b].dmin);
            for (int t = 0; t < N; ++t) {
                acc[r][t] = _mm256_fnmadd_ps(
                    _mm256_set1_ps(dy[t] * dmin),
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(minsTwice, bsums[t])), acc[r][t]);
                sum[r][t] = _mm256_setzero_si256();
            }
            if constexpr (Five)
                high[r] = load(x[r][b].qh);
        }
        for (int c = 0; c < 4; ++c) {
            __m256i lo[R], hi[R], sLo[R], sHi[R];
            for (int r = 0; r < R; ++r) {
                const __m256i q = load(x[r][b].qs + 32 * c);
                lo[r] = _mm256_and_si256(q, low4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
                if constexpr (Five) {
                    const __m256i one = _mm256_set1_epi8(1);
                    lo[r] = _mm256_or_si256(
                        lo[r], _mm256_slli_epi16(
                                   _mm256_and_si256(_mm256_srli_epi16(high[r], 2 * c), one), 4));
                    hi[r] = _mm256_or_si256(
                        hi[r],
                        _mm256_slli_epi16(
                            _mm256_and_si256(_mm256_srli_epi16(high[r], 2 * c + 1), one), 4));
                }
                sLo[r] = broadcast16(scales[r], 2 * c);
                sHi[r] = broadcast16(scales[r], 2 * c + 1);
            }
            for (int t = 0; t < N; ++t) {
                const Q8K& y = q8k(xq, stride, t, b);
                const __m256i yLo = load(y.qs + 64 * c), yHi = load(y.qs + 64 * c + 32);
                for (int r = 0; r < R; ++r) {
                    sum[r][t] = scaledDotAdd<Vnni>(sum[r][t], lo[r], yLo, sLo[r]);
                    sum[r][t] = scaledDotAdd<Vnni>(sum[r][t], hi[r], yHi, sHi[r]);
                }
            }
        }
        for (int t = 0; t < N; ++t) {
            const __m256 yd = _mm256_set1_ps(dy[t]);
            for (int r = 0; r < R; ++r)
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(yd, d[r]), _mm256_cvtepi32_ps(sum[r][t]),
                                            acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < N; ++t)
            out[r * N + t] = hsum(acc[r][t]);
}

// Q6_K: in each half h of the block (128 elements), element 128h + 32k + l (l < 32) takes its
// low four bits from ql[64h + l] (k = 0, 2) or ql[64h + 32 + l] (k = 1, 3), low nibble for k < 2,
// its top two from bits 2k, 2k + 1 of qh[32h + l]; w = d * scales[element / 16] * (q - 32).
template <bool Vnni, int R, int N>
KV_AVX2 inline void q6kRows(const std::uint8_t* row, std::size_t rowBytes, const std::uint8_t* xq,
                            std::size_t stride, std::int64_t n, float* out) {
    const Q6K* x[R];
    for (int r = 0; r < R; ++r)
        x[r] = reinterpret_cast<const Q6K*>(row + r * rowBytes);
    const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
    __m256 total[R][N];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < N; ++t)
            total[r][t] = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < n / 256; ++b) {
        __m256i sc16[R], scLow[R], scHigh[R], sum[R][N];
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + b + 1), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + b + 1) + 64, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(x[r] + b + 1) + 128, _MM_HINT_T0);
            sc16[r] = _mm256_cvtepi8_epi16(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][b].scales)));
            // Scales 0-7, resp. 8-15, in both halves.
            scLow[r] = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16[r]));
            scHigh[r] = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16[r], 1));
            for (int t = 0; t < N; ++t)
                sum[r][t] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; ++h) {
            for (int k = 0; k < 4; ++k) {
                // The scales of the two 16-element groups, g = 8h + 2k and g + 1, one per half.
                const __m256i pick = _mm256_set_m128i(
                    _mm_set1_epi16(static_cast<short>(((4 * k + 3) << 8) | (4 * k + 2))),
                    _mm_set1_epi16(static_cast<short>(((4 * k + 1) << 8) | (4 * k))));
                __m256i q[R], scale[R];
                for (int r = 0; r < R; ++r) {
                    const __m256i l = load(x[r][b].ql + 64 * h + 32 * (k & 1));
                    const __m256i nib = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), low4);
                    const __m256i top =
                        _mm256_and_si256(_mm256_srli_epi16(load(x[r][b].qh + 32 * h), 2 * k), two);
                    q[r] = _mm256_or_si256(nib, _mm256_slli_epi16(top, 4));
                    scale[r] = _mm256_shuffle_epi8(h == 0 ? scLow[r] : scHigh[r], pick);
                }
                for (int t = 0; t < N; ++t) {
                    const __m256i y = load(q8k(xq, stride, t, b).qs + 128 * h + 32 * k);
                    for (int r = 0; r < R; ++r)
                        sum[r][t] = scaledDotAdd<Vnni>(sum[r][t], q[r], y, scale[r]);
                }
            }
        }
        // The -32 of every element, through the activation's sums by 16: 32 * sum over groups
        // of scale * sum, taken off in integers; then each token's eight lanes times both
        // scales, added lane by lane (llama.cpp's AVX2 order: no horizontal sum per block).
        for (int t = 0; t < N; ++t) {
            const Q8K& y = q8k(xq, stride, t, b);
            const __m256i bsums = load(y.bsums);
            for (int r = 0; r < R; ++r) {
                const __m256i offset = _mm256_madd_epi16(sc16[r], bsums);
                const __m256i whole = _mm256_sub_epi32(sum[r][t], _mm256_slli_epi32(offset, 5));
                total[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(halfHw(x[r][b].d) * y.d),
                                              _mm256_cvtepi32_ps(whole), total[r][t]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < N; ++t)
            out[r * N + t] = hsum(total[r][t]);
}

// The K-quant kernels compiled for AVX2 and for VNNI's target, where AVX-512VL also gives them
// 32 vector registers (four tokens' sums and the unpacked block fit without spilling).
template <bool Five, int N>
KV_AVX2 __attribute__((flatten)) void q45kRowsAvx2(const std::uint8_t* row, const std::uint8_t* xq,
                                                   std::size_t stride, std::int64_t n, float* out) {
    q45kRows<Five, false, 1, N>(row, 0, xq, stride, n, out);
}
template <bool Five, int N>
KV_VNNI __attribute__((flatten)) void q45kRowsVnni(const std::uint8_t* row, const std::uint8_t* xq,
                                                   std::size_t stride, std::int64_t n, float* out) {
    q45kRows<Five, true, 1, N>(row, 0, xq, stride, n, out);
}
template <int N>
KV_AVX2 __attribute__((flatten)) void q6kRowsAvx2(const std::uint8_t* row, const std::uint8_t* xq,
                                                  std::size_t stride, std::int64_t n, float* out) {
    q6kRows<false, 1, N>(row, 0, xq, stride, n, out);
}
template <int N>
KV_VNNI __attribute__((flatten)) void q6kRowsVnni(const std::uint8_t* row, const std::uint8_t* xq,
                                                  std::size_t stride, std::int64_t n, float* out) {
    q6kRows<true, 1, N>(row, 0, xq, stride, n, out);
}
template <bool Five>
KV_AVX2 __attribute__((flatten)) void q45kTileAvx2(const std::uint8_t* row, const std::uint8_t* xq,
                                                   std::size_t stride, std::int64_t n, float* out) {
    q45kRows<Five, false, 1, kTileTokens>(row, 0, xq, stride, n, out);
}
template <bool Five>
KV_VNNI __attribute__((flatten)) void q45kTileVnni(const std::uint8_t* row, const std::uint8_t* xq,
                                                   std::size_t stride, std::int64_t n, float* out) {
    q45kRows<Five, true, 1, kTileTokens>(row, 0, xq, stride, n, out);
}
KV_AVX2 __attribute__((flatten)) void q6kTileAvx2(const std::uint8_t* row, const std::uint8_t* xq,
                                                  std::size_t stride, std::int64_t n, float* out) {
    q6kRows<false, 1, kTileTokens>(row, 0, xq, stride, n, out);
}
KV_VNNI __attribute__((flatten)) void q6kTileVnni(const std::uint8_t* row, const std::uint8_t* xq,
                                                  std::size_t stride, std::int64_t n, float* out) {
    q6kRows<true, 1, kTileTokens>(row, 0, xq, stride, n, out);
}

// The legacy 32-element types: Q4_0 (d, 16 nibble bytes: element j the low nibble of qs[j],
// j + 16 its high one; w = d (q - 8)), Q5_0 (d, 32 fifth bits, nibbles; w = d (q - 16)), IQ4_NL
// (d, nibbles indexing 16 fixed levels), with Q8_0 activations: signed weights through the sign
// trick; Q4_1 / Q5_1 (d, m, ...; w = d q + m) with Q8_1 activations, whose s = d_y * sum(y)
// carries the m term.
enum class Legacy { Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL };

#pragma pack(push, 1)
struct L4_0 {
    std::uint16_t d;
    std::uint8_t qs[16];
};
struct L4_1 {
    std::uint16_t d, m;
    std::uint8_t qs[16];
};
struct L5_0 {
    std::uint16_t d;
    std::uint8_t qh[4];
    std::uint8_t qs[16];
};
struct L5_1 {
    std::uint16_t d, m;
    std::uint8_t qh[4];
    std::uint8_t qs[16];
};
#pragma pack(pop)

template <Legacy K> struct LegacyBlock;
template <> struct LegacyBlock<Legacy::Q4_0> { using T = L4_0; };
template <> struct LegacyBlock<Legacy::Q4_1> { using T = L4_1; };
template <> struct LegacyBlock<Legacy::Q5_0> { using T = L5_0; };
template <> struct LegacyBlock<Legacy::Q5_1> { using T = L5_1; };
template <> struct LegacyBlock<Legacy::IQ4_NL> { using T = L4_0; }; // same layout

// 32 bytes: the 16 low nibbles, then the 16 high ones (element order).
KV_AVX2 inline __m256i nibbles(const std::uint8_t* qs) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// 16 in byte j where bit j of the 32-bit word is set, else 0.
KV_AVX2 inline __m256i fifthBits(const std::uint8_t* qh) {
    std::uint32_t bits;
    std::memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    // Byte k of each 8 has every bit but k set: OR gives all ones exactly when bit k is.
    const __m256i all = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, all), _mm256_set1_epi64x(-1));
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The block's 32 weights as bytes: signed for Q4_0, Q5_0, IQ4_NL; unsigned for Q4_1, Q5_1.
template <Legacy K> KV_AVX2 inline __m256i legacyValues(const typename LegacyBlock<K>::T& x) {
    const __m256i q = nibbles(x.qs);
    if constexpr (K == Legacy::Q4_0)
        return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
    else if constexpr (K == Legacy::Q4_1)
        return q;
    else if constexpr (K == Legacy::Q5_0)
        return _mm256_sub_epi8(_mm256_or_si256(q, fifthBits(x.qh)), _mm256_set1_epi8(16));
    else if constexpr (K == Legacy::Q5_1)
        return _mm256_or_si256(q, fifthBits(x.qh));
    else {
        const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels));
        return _mm256_shuffle_epi8(_mm256_set_m128i(levels, levels), q);
    }
}

template <Legacy K, bool Vnni, int N>
KV_AVX2 inline void legacyRows(const std::uint8_t* row, const std::uint8_t* xq, std::size_t stride,
                               std::int64_t n, float* out) {
    using Block = typename LegacyBlock<K>::T;
    constexpr bool withMin = K == Legacy::Q4_1 || K == Legacy::Q5_1;
    using Act = std::conditional_t<withMin, Q8_1, Q8_0>;
    const auto* x = reinterpret_cast<const Block*>(row);
    __m256 acc[N];
    float mins[N];
    for (int t = 0; t < N; ++t) {
        acc[t] = _mm256_setzero_ps();
        mins[t] = 0.0f;
    }
    for (std::int64_t b = 0; b < n / 32; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(x + b) + 512, _MM_HINT_T0);
        const __m256i v = legacyValues<K>(x[b]);
        const float dx = halfHw(x[b].d);
        [[maybe_unused]] __m256i av;
        if constexpr (!withMin)
            av = _mm256_sign_epi8(v, v);
        for (int t = 0; t < N; ++t) {
            const Act& y = reinterpret_cast<const Act*>(xq + t * stride)[b];
            const __m256i qy = load(y.qs);
            __m256i dot;
            if constexpr (withMin) {
                dot = dotU8S8<Vnni>(v, qy);
                mins[t] += halfHw(x[b].m) * y.s;
            } else {
                dot = dotU8S8<Vnni>(av, _mm256_sign_epi8(qy, v));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y.d), _mm256_cvtepi32_ps(dot), acc[t]);
        }
    }
    for (int t = 0; t < N; ++t)
        out[t] = hsum(acc[t]) + mins[t];
}

template <Legacy K, int N>
KV_AVX2 __attribute__((flatten)) void legacyRowsAvx2(const std::uint8_t* row,
                                                     const std::uint8_t* xq, std::size_t stride,
                                                     std::int64_t n, float* out) {
    legacyRows<K, false, N>(row, xq, stride, n, out);
}
template <Legacy K, int N>
KV_VNNI __attribute__((flatten)) void legacyRowsVnni(const std::uint8_t* row,
                                                     const std::uint8_t* xq, std::size_t stride,
                                                     std::int64_t n, float* out) {
    legacyRows<K, true, N>(row, xq, stride, n, out);
}

bool hasAvx2() {
    // F16C came before AVX2 on every x86 CPU that has both (and clang's builtin does not know
    // the name): AVX2 and FMA stand for the three.
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
}

bool hasVnni() {
    static const bool yes =
        hasAvx2() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    return yes;
}
bool hasZmmVnni() {
    static const bool yes = hasVnni() && __builtin_cpu_supports("avx512f") &&
                            __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512dq");
    return yes;
}

} // namespace

bool hasKernel(TensorType w) {
    return static_cast<bool>(genericRowKernel(w)); // every type has the plain kernel, or none
}

TensorType activationType(TensorType w) {
    if (isK(w))
        return TensorType::Q8_K;
    if (w == TensorType::Q4_1 || w == TensorType::Q5_1)
        return TensorType::Q8_1;
    return TensorType::Q8_0;
}

std::size_t activationBytes(TensorType w, std::int64_t n) {
    switch (activationType(w)) {
    case TensorType::Q8_K:
        return static_cast<std::size_t>(n / 256) * sizeof(Q8K);
    case TensorType::Q8_1:
        return static_cast<std::size_t>(n / 32) * sizeof(Q8_1);
    default:
        return static_cast<std::size_t>(n / 32) * sizeof(Q8_0);
    }
}

void quantizeActivations(TensorType w, const float* x, std::int64_t n, std::uint8_t* out) {
    switch (activationType(w)) {
    case TensorType::Q8_K:
        quantizeQ8K(x, n, out);
        break;
    case TensorType::Q8_1:
        quantizeQ8_0(x, n, out, true);
        break;
    default:
        quantizeQ8_0(x, n, out, false);
    }
}

namespace {

template <template <int> class F> RowKernel table() {
    return {{F<1>::fn, F<2>::fn, F<3>::fn, F<4>::fn}};
}
RowKernel withTile(RowKernel k, RowFn tile) {
    k.tile = tile;
    return k;
}
template <TensorType W> struct Generic {
    template <int N> struct At { static constexpr RowFn fn = genericRows<W, N>; };
};
template <bool Vnni> struct Q8 {
    template <int N> struct At {
        static constexpr RowFn fn = Vnni ? q8RowsVnni<N> : q8RowsAvx2<N>;
    };
};
template <bool Five, bool Vnni> struct Q45 {
    template <int N> struct At {
        static constexpr RowFn fn = Vnni ? q45kRowsVnni<Five, N> : q45kRowsAvx2<Five, N>;
    };
};
template <bool Vnni> struct Q6 {
    template <int N> struct At {
        static constexpr RowFn fn = Vnni ? q6kRowsVnni<N> : q6kRowsAvx2<N>;
    };
};
template <Legacy K, bool Vnni> struct Leg {
    template <int N> struct At {
        static constexpr RowFn fn = Vnni ? legacyRowsVnni<K, N> : legacyRowsAvx2<K, N>;
    };
};

} // namespace

RowKernel genericRowKernel(TensorType w) {
    switch (w) {
    case TensorType::Q4_0:
        return table<Generic<TensorType::Q4_0>::At>();
    case TensorType::Q4_1:
        return table<Generic<TensorType::Q4_1>::At>();
    case TensorType::Q5_0:
        return table<Generic<TensorType::Q5_0>::At>();
    case TensorType::Q5_1:
        return table<Generic<TensorType::Q5_1>::At>();
    case TensorType::Q8_0:
        return table<Generic<TensorType::Q8_0>::At>();
    case TensorType::Q2_K:
        return table<Generic<TensorType::Q2_K>::At>();
    case TensorType::Q3_K:
        return table<Generic<TensorType::Q3_K>::At>();
    case TensorType::Q4_K:
        return table<Generic<TensorType::Q4_K>::At>();
    case TensorType::Q5_K:
        return table<Generic<TensorType::Q5_K>::At>();
    case TensorType::Q6_K:
        return table<Generic<TensorType::Q6_K>::At>();
    case TensorType::IQ4_NL:
        return table<Generic<TensorType::IQ4_NL>::At>();
    case TensorType::IQ4_XS:
        return table<Generic<TensorType::IQ4_XS>::At>();
    default:
        return {};
    }
}

RowKernel rowKernel(TensorType w) {
    if (hasAvx2()) {
        switch (w) {
        case TensorType::Q8_0:
            return hasVnni()
                       ? withTile(table<Q8<true>::At>(), hasZmmVnni() ? q8TileZmm : q8TileVnni)
                       : withTile(table<Q8<false>::At>(), q8TileAvx2);
        case TensorType::Q4_K:
            return hasVnni() ? withTile(table<Q45<false, true>::At>(), q45kTileVnni<false>)
                             : withTile(table<Q45<false, false>::At>(), q45kTileAvx2<false>);
        case TensorType::Q5_K:
            return hasVnni() ? withTile(table<Q45<true, true>::At>(), q45kTileVnni<true>)
                             : withTile(table<Q45<true, false>::At>(), q45kTileAvx2<true>);
        case TensorType::Q6_K:
            return hasVnni() ? withTile(table<Q6<true>::At>(), q6kTileVnni)
                             : withTile(table<Q6<false>::At>(), q6kTileAvx2);
        case TensorType::Q4_0:
            return hasVnni() ? withTile(table<Leg<Legacy::Q4_0, true>::At>(),
                                        legacyRowsVnni<Legacy::Q4_0, kTileTokens>)
                             : withTile(table<Leg<Legacy::Q4_0, false>::At>(),
                                        legacyRowsAvx2<Legacy::Q4_0, kTileTokens>);
        case TensorType::Q4_1:
            return hasVnni() ? withTile(table<Leg<Legacy::Q4_1, true>::At>(),
                                        legacyRowsVnni<Legacy::Q4_1, kTileTokens>)
                             : withTile(table<Leg<Legacy::Q4_1, false>::At>(),
                                        legacyRowsAvx2<Legacy::Q4_1, kTileTokens>);
        case TensorType::Q5_0:
            return hasVnni() ? withTile(table<Leg<Legacy::Q5_0, true>::At>(),
                                        legacyRowsVnni<Legacy::Q5_0, kTileTokens>)
                             : withTile(table<Leg<Legacy::Q5_0, false>::At>(),
                                        legacyRowsAvx2<Legacy::Q5_0, kTileTokens>);
        case TensorType::Q5_1:
            return hasVnni() ? withTile(table<Leg<Legacy::Q5_1, true>::At>(),
                                        legacyRowsVnni<Legacy::Q5_1, kTileTokens>)
                             : withTile(table<Leg<Legacy::Q5_1, false>::At>(),
                                        legacyRowsAvx2<Legacy::Q5_1, kTileTokens>);
        case TensorType::IQ4_NL:
            return hasVnni() ? withTile(table<Leg<Legacy::IQ4_NL, true>::At>(),
                                        legacyRowsVnni<Legacy::IQ4_NL, kTileTokens>)
                             : withTile(table<Leg<Legacy::IQ4_NL, false>::At>(),
                                        legacyRowsAvx2<Legacy::IQ4_NL, kTileTokens>);
        default:
            break;
        }
    }
    return genericRowKernel(w);
}

const char* isa() {
    return hasZmmVnni() ? "avx2+vnni+avx512"
           : hasVnni()  ? "avx2+vnni"
           : hasAvx2()  ? "avx2"
                        : "generic";
}

} // namespace kvscope::qdot
