// ggml's reference quantizers, rewritten so that every float operation happens in the order
// ggml's C code performs it: the bytes must equal llama-quantize's, and float arithmetic is
// not associative. This file is compiled with -ffp-contract=off (CMakeLists.txt): ggml's
// quantizers are built without fused multiply-adds, and one fused a*b+c rounds differently.
//
// Block layouts (the same ones ggufdequant.cpp reads; byte sizes from typeTraits):
//   Q4_0  d(f16) qs[16]                      x = (nibble - 8) * d
//   Q5_0  d(f16) qh[4] qs[16]                x = (5-bit q - 16) * d
//   Q5_1  d(f16) m(f16) qh[4] qs[16]         x = q * d + m
//   Q8_0  d(f16) qs[32] (int8)               x = q * d
//   Q4_K  d dmin scales[12] qs[128]          x = d*sc * q - dmin*m, 8 sub-blocks of 32
//   Q5_K  d dmin scales[12] qh[32] qs[128]   the same with a fifth bit per element
//   Q6_K  ql[128] qh[64] scales[16] d        x = d * sc * (6-bit q - 32), 16 sub-blocks of 16
#include "formats/ggufquantize.h"
#include "formats/halffloat.h"
#include "formats/kquantscales.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <thread>

namespace kvscope::gguf {

namespace {

constexpr int kSuper = 256; // elements in a K-quant super-block

// ggml's rounding: adding 1.5 · 2^23 pushes the fraction out of the float, so the low mantissa
// bits hold the integer rounded half to even. Done the same way (not with rint) so that values
// past ±2^22, where this stops being a rounding, still give ggml's numbers.
int nearestInt(float v) {
    const float shifted = v + 12582912.0f;
    std::int32_t bits;
    std::memcpy(&bits, &shifted, 4);
    return (bits & 0x007FFFFF) - 0x00400000;
}

// C's (int8_t) / (uint8_t) cast of a float as x86 compiles ggml's code: truncate toward zero to
// 32 bits (NaN and out-of-range give INT_MIN) and keep the low byte. Defined for every input.
std::uint8_t truncToByte(float v) {
    const int i = v > -2147483648.0f && v < 2147483648.0f ? static_cast<int>(v) : INT_MIN;
    return static_cast<std::uint8_t>(i);
}

// The same read as signed, capped at `cap` (ggml's MIN(cap, (int8_t)v)).
std::uint8_t truncCapped(float v, int cap) {
    return static_cast<std::uint8_t>(std::min(cap, int(static_cast<std::int8_t>(truncToByte(v)))));
}

void putHalf(std::uint8_t* p, float v) {
    const std::uint16_t h = floatToFp16(v);
    p[0] = static_cast<std::uint8_t>(h & 0xFF);
    p[1] = static_cast<std::uint8_t>(h >> 8);
}

float getHalf(const std::uint8_t* p) {
    return fp16ToFloat(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
}

// The value of largest magnitude in x[0..n) (the first of equals), signed.
float signedAbsMax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    return max;
}

// ---- blocks of 32 ----

// Q4_0: d = the extreme value / -8, so that it maps to level 0 and the other sign reaches +7.
void blockQ4_0(const float* x, std::uint8_t* b) {
    const float d = signedAbsMax(x, 32) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    putHalf(b, d);
    for (int j = 0; j < 16; ++j) { // element j in the low nibble, j + 16 in the high one
        const std::uint8_t lo = truncCapped(x[j] * id + 8.5f, 15);
        const std::uint8_t hi = truncCapped(x[j + 16] * id + 8.5f, 15);
        b[2 + j] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
}

// Q5_0 and Q5_1 keep the low four bits like Q4_0 and the fifth bits in a 32-bit word.
void packFifthBits(const std::uint8_t* q, std::uint8_t* qh, std::uint8_t* qs) {
    std::uint32_t high = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        high |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
        high |= static_cast<std::uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) // little-endian, as ggml's memcpy of the word
        qh[k] = static_cast<std::uint8_t>(high >> (8 * k));
}

void blockQ5_0(const float* x, std::uint8_t* b) {
    const float d = signedAbsMax(x, 32) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    putHalf(b, d);
    std::uint8_t q[32];
    for (int j = 0; j < 32; ++j)
        q[j] = truncCapped(x[j] * id + 16.5f, 31);
    packFifthBits(q, b + 2, b + 6);
}

// Q5_1: an offset (the minimum) and 31 steps up to the maximum.
void blockQ5_1(const float* x, std::uint8_t* b) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    putHalf(b, d);
    putHalf(b + 2, min);
    std::uint8_t q[32];
    for (int j = 0; j < 32; ++j)
        q[j] = truncToByte((x[j] - min) * id + 0.5f);
    packFifthBits(q, b + 4, b + 8);
}

void blockQ8_0(const float* x, std::uint8_t* b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
        amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    putHalf(b, d);
    for (int j = 0; j < 32; ++j)
        b[2 + j] = truncToByte(std::round(x[j] * id));
}

// ---- K-quants ----

// Scale and offset for one sub-block of `n` values on levels 0..nmax (ggml's
// make_qkx2_quants): x ≈ scale · L - offset, minimizing the `weights`-weighted squared error.
// Starts from the plain min/max mapping, then tries nstep + 1 slightly stretched grids, each
// followed by a weighted least-squares fit of scale and offset to its levels, and keeps the
// best. The offset is never negative (a sub-block above zero is fitted from zero). Returns the
// scale; `offset` and the levels `L` receive the rest.
float fitScaleOffset(int n, int nmax, const float* x, const float* weights, std::uint8_t* L,
                     float& offset, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sumW = weights[0];
    float sumX = sumW * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sumW += weights[i];
        sumX += weights[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        std::fill(L, L + n, std::uint8_t{0});
        offset = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float bestError = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearestInt(iscale * (x[i] - min)), 0, nmax);
        L[i] = static_cast<std::uint8_t>(l);
        const float diff = scale * L[i] + min - x[i];
        bestError += weights[i] * (diff * diff);
    }
    std::uint8_t trial[32];
    for (int step = 0; step <= nstep; ++step) {
        iscale = (rmin + rdelta * step + nmax) / (max - min);
        float sumL = 0, sumL2 = 0, sumXL = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearestInt(iscale * (x[i] - min)), 0, nmax);
            trial[i] = static_cast<std::uint8_t>(l);
            const float w = weights[i];
            sumL += w * l;
            sumL2 += w * l * l;
            sumXL += w * l * x[i];
        }
        const float det = sumW * sumL2 - sumL * sumL;
        if (!(det > 0))
            continue;
        float thisScale = (sumW * sumXL - sumX * sumL) / det;
        float thisMin = (sumL2 * sumX - sumL * sumXL) / det;
        if (thisMin > 0) { // the fit wants a positive offset: fit the scale alone from zero
            thisMin = 0;
            thisScale = sumXL / sumL2;
        }
        float error = 0;
        for (int i = 0; i < n; ++i) {
            const float diff = thisScale * trial[i] + thisMin - x[i];
            error += weights[i] * (diff * diff);
        }
        if (error < bestError) {
            std::copy(trial, trial + n, L);
            bestError = error;
            scale = thisScale;
            min = thisMin;
        }
    }
    offset = -min;
    return scale;
}

// Q4_K / Q5_K store eight 6-bit (scale, offset) pairs in 12 bytes: pairs 0–3 whole in the low
// six bits of bytes 0–3 and 4–7; pairs 4–7 with their low four bits in the nibbles of bytes
// 8–11 and their top two bits in the spare bits of bytes 0–7.
void packScales(const std::uint8_t* ls, const std::uint8_t* lm, std::uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = ls[j];
        s[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; ++j) {
        s[j + 4] = static_cast<std::uint8_t>((ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4));
        s[j - 4] |= static_cast<std::uint8_t>((ls[j] >> 4) << 6);
        s[j] |= static_cast<std::uint8_t>((lm[j] >> 4) << 6);
    }
}

// The common part of Q4_K and Q5_K (ggml's quantize_row_q4_K_ref / q5_K_ref): levels
// 0..nmax per element in L, and d, dmin and the packed scales written to the block's first 16
// bytes. Each sub-block of 32 gets its own scale and offset (fitScaleOffset, weighting each
// element by the sub-block's RMS plus its magnitude); those are then stored as 6-bit multiples
// of the super-block's d and dmin, and every element is re-rounded against the stored values.
void superBlockScaled(const float* x, std::uint8_t* head, int nmax, float rmin, int nstep,
                      std::uint8_t* L) {
    float scales[8], offsets[8], weights[32];
    float maxScale = 0, maxOffset = 0;
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        float sumX2 = 0;
        for (int l = 0; l < 32; ++l)
            sumX2 += xs[l] * xs[l];
        const float rms = std::sqrt(sumX2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = rms + std::fabs(xs[l]);
        scales[j] =
            fitScaleOffset(32, nmax, xs, weights, L + 32 * j, offsets[j], rmin, 0.1f, nstep);
        if (scales[j] > maxScale)
            maxScale = scales[j];
        if (offsets[j] > maxOffset)
            maxOffset = offsets[j];
    }
    const float toScale = maxScale > 0 ? 63.f / maxScale : 0.f;
    const float toOffset = maxOffset > 0 ? 63.f / maxOffset : 0.f;
    std::uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) { // ggml keeps the low byte of the rounded value, then caps it
        ls[j] =
            std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearestInt(toScale * scales[j])));
        lm[j] = std::min<std::uint8_t>(
            63, static_cast<std::uint8_t>(nearestInt(toOffset * offsets[j])));
    }
    putHalf(head, maxScale / 63.f);
    putHalf(head + 2, maxOffset / 63.f);
    packScales(ls, lm, head + 4);
    const float d = getHalf(head), dmin = getHalf(head + 2);
    for (int j = 0; j < 8; ++j) {
        std::uint8_t sc, m;
        kScaleMin(j, head + 4, sc, m);
        const float step = d * sc;
        if (step == 0) // keeps the fitted levels, as ggml does
            continue;
        const float off = dmin * m;
        for (int l = 0; l < 32; ++l)
            L[32 * j + l] = static_cast<std::uint8_t>(
                std::clamp(nearestInt((x[32 * j + l] + off) / step), 0, nmax));
    }
}

void blockQ4_K(const float* x, std::uint8_t* b) {
    std::uint8_t L[kSuper];
    superBlockScaled(x, b, 15, -1.0f, 20, L);
    // 64 elements per 32 bytes: the first 32 in the low nibbles, the next 32 in the high ones.
    std::uint8_t* q = b + 16;
    for (int j = 0; j < kSuper; j += 64, q += 32)
        for (int l = 0; l < 32; ++l)
            q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

void blockQ5_K(const float* x, std::uint8_t* b) {
    std::uint8_t L[kSuper];
    superBlockScaled(x, b, 31, -0.5f, 15, L);
    // Low four bits as Q4_K; the fifth bit of element j + l (of each 64) in bit 2k of qh[l]
    // for the first 32 and bit 2k + 1 for the next 32, k = j / 64.
    std::uint8_t* qh = b + 16;
    std::uint8_t* ql = b + 48;
    std::fill(qh, qh + 32, std::uint8_t{0});
    for (int j = 0, k = 0; j < kSuper; j += 64, ++k, ql += 32)
        for (int l = 0; l < 32; ++l) {
            const int a = L[j + l], c = L[j + l + 32];
            qh[l] = static_cast<std::uint8_t>(qh[l] | ((a >> 4) << (2 * k)) |
                                              ((c >> 4) << (2 * k + 1)));
            ql[l] = static_cast<std::uint8_t>((a & 0x0F) | ((c & 0x0F) << 4));
        }
}

// One scale for n values on the symmetric levels -nmax..nmax-1 (ggml's make_qx_quants with
// squared-value weights, as Q6_K uses it): start from the extreme value mapped to -nmax, then
// try 18 nearby grids and keep the one whose least-squares scale explains the most weighted
// energy. L receives level + nmax. Returns the scale (0 for an all-zero sub-block).
float fitSymmetricScale(int n, int nmax, const float* x, std::int8_t* L) {
    const float max = signedAbsMax(x, n);
    if (std::fabs(max) < 1e-15f) { // ggml's GROUP_MAX_EPS
        std::fill(L, L + n, std::int8_t{0});
        return 0.f;
    }
    auto level = [nmax](float v) { return std::clamp(nearestInt(v), -nmax, nmax - 1); };
    float iscale = -nmax / max;
    float sumLX = 0, sumL2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = level(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(l + nmax);
        const float w = x[i] * x[i];
        sumLX += w * x[i] * l;
        sumL2 += w * l * l;
    }
    float scale = sumL2 != 0 ? sumLX / sumL2 : 0.0f;
    float best = scale * sumLX;
    for (int step = -9; step <= 9; ++step) {
        if (step == 0)
            continue;
        iscale = -(nmax + 0.1f * step) / max;
        sumLX = sumL2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = level(iscale * x[i]);
            const float w = x[i] * x[i];
            sumLX += w * x[i] * l;
            sumL2 += w * l * l;
        }
        if (sumL2 > 0 && sumLX * sumLX > best * sumL2) {
            for (int i = 0; i < n; ++i)
                L[i] = static_cast<std::int8_t>(nmax + level(iscale * x[i]));
            scale = sumLX / sumL2;
            best = scale * sumLX;
        }
    }
    return scale;
}

// Q6_K (ggml's quantize_row_q6_K_ref): a scale per 16 values, stored as int8 multiples of the
// super-block's d (the largest-magnitude scale maps to -128), then each value re-rounded.
void blockQ6_K(const float* x, std::uint8_t* b) {
    std::int8_t L[kSuper];
    float scales[16];
    float maxScale = 0, maxAbsScale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = fitSymmetricScale(16, 32, x + 16 * ib, L + 16 * ib);
        if (std::fabs(scales[ib]) > maxAbsScale) {
            maxAbsScale = std::fabs(scales[ib]);
            maxScale = scales[ib];
        }
    }
    std::uint8_t* ql = b;
    std::uint8_t* qh = b + 128;
    std::uint8_t* sc = b + 192;
    if (maxAbsScale < 1e-15f) { // all zero
        std::fill(b, b + 210, std::uint8_t{0});
        return;
    }
    const float iscale = -128.f / maxScale;
    putHalf(b + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib)
        sc[ib] = static_cast<std::uint8_t>(std::min(127, nearestInt(iscale * scales[ib])));
    const float d = getHalf(b + 208);
    for (int j = 0; j < 16; ++j) {
        const float step = d * static_cast<float>(static_cast<std::int8_t>(sc[j]));
        if (step == 0)
            continue;
        for (int i = 0; i < 16; ++i)
            L[16 * j + i] = static_cast<std::int8_t>(
                std::clamp(nearestInt(x[16 * j + i] / step), -32, 31) + 32);
    }
    // Per 128 values: low nibbles of values l and l + 64 share ql[l], of l + 32 and l + 96
    // share ql[l + 32]; the top two bits of the four go to qh[l], two bits each.
    for (int j = 0; j < kSuper; j += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
            ql[l] = static_cast<std::uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
            ql[l + 32] = static_cast<std::uint8_t>((q2 & 0x0F) | ((q4 & 0x0F) << 4));
            qh[l] = static_cast<std::uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                              ((q4 >> 4) << 6));
        }
}

using BlockFn = void (*)(const float*, std::uint8_t*);

BlockFn blockFunction(TensorType type) {
    switch (type) {
    case TensorType::Q4_0:
        return blockQ4_0;
    case TensorType::Q5_0:
        return blockQ5_0;
    case TensorType::Q5_1:
        return blockQ5_1;
    case TensorType::Q8_0:
        return blockQ8_0;
    case TensorType::Q4_K:
        return blockQ4_K;
    case TensorType::Q5_K:
        return blockQ5_K;
    case TensorType::Q6_K:
        return blockQ6_K;
    default:
        return nullptr;
    }
}

} // namespace

bool canQuantize(TensorType type) {
    return blockFunction(type) != nullptr;
}

std::vector<std::uint8_t> quantize(TensorType type, std::span<const float> values) {
    const BlockFn block = blockFunction(type);
    if (!block)
        throw KvError("cannot quantize to " + typeName(type) +
                      " (supported: Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
    const TypeTraits traits = *typeTraits(type);
    if (values.size() % traits.blockSize != 0)
        throw KvError(typeName(type) + " quantization needs a multiple of " +
                      std::to_string(traits.blockSize) + " values, got " +
                      std::to_string(values.size()));
    const std::size_t blocks = values.size() / traits.blockSize;
    std::vector<std::uint8_t> out(blocks * traits.blockBytes);
    auto run = [&](std::size_t first, std::size_t last) {
        for (std::size_t i = first; i < last; ++i)
            block(values.data() + i * traits.blockSize, out.data() + i * traits.blockBytes);
    };
    // Blocks are independent, so a large tensor is split over the cores (the K-quants' grid
    // search costs ~100 ns per value); the bytes do not depend on the split.
    const std::size_t perThread = 16384; // blocks: below this a thread costs more than it saves
    const std::size_t threads = std::min<std::size_t>(
        std::max(1u, std::thread::hardware_concurrency()), (blocks + perThread - 1) / perThread);
    if (threads <= 1) {
        run(0, blocks);
        return out;
    }
    std::vector<std::thread> workers;
    const std::size_t chunk = (blocks + threads - 1) / threads;
    for (std::size_t t = 1; t < threads; ++t)
        workers.emplace_back(run, std::min(blocks, t * chunk), std::min(blocks, (t + 1) * chunk));
    run(0, std::min(blocks, chunk));
    for (auto& w : workers)
        w.join();
    return out;
}

// ---- llama-quantize's type per tensor (llama-quant.cpp, llama_tensor_get_type) ----

namespace {

// The file types, with llama.cpp's enum llama_ftype numbers (include/llama.h). llama-quantize
// has no "all Q4_K" file type: its Q4_K is an alias of Q4_K_M, and --pure turns the mix off.
constexpr QuantMix kMixes[] = {
    {"q4_0", TensorType::Q4_0, 2, false, "Q4_0"},
    {"q8_0", TensorType::Q8_0, 7, false, "Q8_0"},
    {"q4_k", TensorType::Q4_K, 15, true, "--pure Q4_K"},
    {"q5_k", TensorType::Q5_K, 17, true, "--pure Q5_K"},
    {"q6_k", TensorType::Q6_K, 18, false, "Q6_K"},
    {"q4_k_m", TensorType::Q4_K, 15, false, "Q4_K_M"},
    {"q5_k_m", TensorType::Q5_K, 17, false, "Q5_K_M"},
};

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}

// llama.cpp's tensor categories, decided by name in its order (attn_qkv before attn_v, …).
enum class Category {
    Output,
    TokenEmbd,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other
};

Category category(std::string_view name) {
    if (name == "output.weight")
        return Category::Output;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight")
        return Category::TokenEmbd;
    // The fused qkv and MLA's kv_b count as attn_v: the rules below treat them alike.
    if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") ||
        contains(name, "attn_v.weight"))
        return Category::AttnV;
    if (contains(name, "attn_k.weight"))
        return Category::AttnK;
    if (contains(name, "attn_q.weight"))
        return Category::AttnQ;
    if (contains(name, "attn_output.weight"))
        return Category::AttnOutput;
    if (contains(name, "ffn_up"))
        return Category::FfnUp;
    if (contains(name, "ffn_gate"))
        return Category::FfnGate;
    if (contains(name, "ffn_down"))
        return Category::FfnDown;
    return Category::Other;
}

// The layer of "blk.N.…", or -1.
int layerOf(std::string_view name) {
    if (name.substr(0, 4) != "blk.")
        return -1;
    int layer = 0;
    std::size_t i = 4;
    if (i >= name.size() || name[i] < '0' || name[i] > '9')
        return -1;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
        layer = layer * 10 + (name[i] - '0');
    return i < name.size() && name[i] == '.' ? layer : -1;
}

// llama.cpp's choice of the layers whose attn_v / ffn_down get more bits: the first and last
// eighth, and every third layer between.
bool useMoreBits(int layer, std::int64_t nLayers) {
    const auto n = static_cast<int>(nLayers);
    return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
}

std::int64_t blockOf(TensorType type) {
    return typeTraits(type)->blockSize;
}

} // namespace

std::optional<QuantMix> quantMix(std::string_view name) {
    for (const QuantMix& m : kMixes)
        if (m.name == name)
            return m;
    return std::nullopt;
}

std::string_view quantMixNames() {
    return "q4_0, q8_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m";
}

TensorType quantizedType(const QuantMix& mix, const QuantModel& model, std::string_view name,
                         std::span<const std::int64_t> dims) {
    // What llama-quantize quantizes at all: tensors of two or more dimensions (ggml counts
    // trailing dimensions of 1 as absent) named "…weight", except norms. The rest are copied.
    std::size_t nDims = 1;
    for (std::size_t i = 1; i < dims.size(); ++i)
        if (dims[i] > 1)
            nDims = i + 1;
    const bool endsInWeight = name.size() >= 6 && name.substr(name.size() - 6) == "weight";
    if (dims.empty() || nDims < 2 || !endsInWeight || contains(name, "_norm.weight"))
        return TensorType::F32;

    const std::int64_t rowLength = dims[0];
    TensorType type = mix.base;
    const Category cat = category(name);
    // The mixes' promotions (skipped by --pure). llama-quantize visits tensors in layer order,
    // so its running counts of attn_v and ffn_down tensors are the layer index here.
    if (!mix.pure) {
        const bool kMix = mix.name == "q4_k_m" || mix.name == "q5_k_m";
        const int layer = layerOf(name);
        if (cat == Category::Output || (!model.hasOutput && cat == Category::TokenEmbd)) {
            // The output matrix (or the embedding that doubles as it): Q6_K, or Q8_0 when its
            // rows are not whole blocks of the mix's own type. A Q8_0 file keeps Q8_0.
            if (rowLength % blockOf(type) != 0)
                type = TensorType::Q8_0;
            else if (type != TensorType::Q8_0)
                type = TensorType::Q6_K;
        } else if (cat == Category::AttnV) {
            if (kMix && layer >= 0 && useMoreBits(layer, model.nLayers))
                type = TensorType::Q6_K;
            if (model.llama70B && (type == TensorType::Q3_K || type == TensorType::Q4_K))
                type = TensorType::Q5_K;
        } else if (cat == Category::FfnDown) {
            if (kMix && layer >= 0 && useMoreBits(layer, model.nLayers))
                type = TensorType::Q6_K;
        }
    }
    // A row that is not whole blocks of the type: the nearest type of 32-element blocks, and
    // F16 when the row is not whole blocks of 32 either.
    if (rowLength % blockOf(type) != 0) {
        switch (type) {
        case TensorType::Q4_K:
            type = TensorType::Q5_0;
            break;
        case TensorType::Q5_K:
            type = TensorType::Q5_1;
            break;
        case TensorType::Q6_K:
            type = TensorType::Q8_0;
            break;
        default:
            break;
        }
        if (rowLength % blockOf(type) != 0)
            type = TensorType::F16;
    }
    return type;
}

} // namespace kvscope::gguf
