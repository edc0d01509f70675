#include "engine/matvec.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <vector>

// GCC 12 reports the intrinsics' own "undefined" placeholders as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kvscope {

namespace {

enum class Storage { F32, BF16, F16 };

template <Storage S> float scalarAt(const std::uint8_t* row, int64_t j) {
    if constexpr (S == Storage::F32) {
        float f;
        std::memcpy(&f, row + 4 * j, 4);
        return f;
    } else {
        std::uint16_t h;
        std::memcpy(&h, row + 2 * j, 2);
        if constexpr (S == Storage::BF16) {
            const std::uint32_t bits = std::uint32_t{h} << 16;
            float f;
            std::memcpy(&f, &bits, 4);
            return f;
        } else {
            return c10::detail::fp16_ieee_to_fp32_value(h);
        }
    }
}

// Dot products of R consecutive rows (rowBytes apart) with x, written to out[0..R).
// Each kernel keeps one accumulator per row, so the R rows' FMA chains overlap.

#define KV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define KV_AVX2 __attribute__((target("avx2,f16c,fma")))

template <Storage S> KV_AVX512 inline __m512 load16(const std::uint8_t* row, int64_t j) {
    if constexpr (S == Storage::F32)
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + j);
    else {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j));
        if constexpr (S == Storage::BF16)
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        else
            return _mm512_cvtph_ps(h);
    }
}

// x split into its even and odd elements: the bf16 kernels widen 32 weights with one shift
// (even elements) and one mask (odd elements) instead of two loads and two conversions.
struct Split {
    const float* even = nullptr;
    const float* odd = nullptr;
};

template <Storage S, int R>
KV_AVX512 void dotAvx512(const std::uint8_t* w, int64_t rowBytes, const float* x, Split xs,
                         int64_t n, float* out) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r)
        acc[r] = _mm512_setzero_ps();
    int64_t j = 0;
    if constexpr (S == Storage::BF16) {
        const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
        __m512 odd[R];
        for (int r = 0; r < R; ++r)
            odd[r] = _mm512_setzero_ps();
        for (; j + 32 <= n; j += 32) {
            const __m512 xe = _mm512_loadu_ps(xs.even + j / 2);
            const __m512 xo = _mm512_loadu_ps(xs.odd + j / 2);
            for (int r = 0; r < R; ++r) {
                const __m512i v =
                    _mm512_loadu_si512(reinterpret_cast<const void*>(w + r * rowBytes + 2 * j));
                acc[r] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), xe, acc[r]);
                odd[r] =
                    _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), xo, odd[r]);
            }
        }
        for (int r = 0; r < R; ++r)
            acc[r] = _mm512_add_ps(acc[r], odd[r]);
    }
    for (; j + 16 <= n; j += 16) {
        const __m512 xv = _mm512_loadu_ps(x + j);
        for (int r = 0; r < R; ++r)
            acc[r] = _mm512_fmadd_ps(load16<S>(w + r * rowBytes, j), xv, acc[r]);
    }
    for (int r = 0; r < R; ++r) {
        float s = _mm512_reduce_add_ps(acc[r]);
        for (int64_t k = j; k < n; ++k)
            s += scalarAt<S>(w + r * rowBytes, k) * x[k];
        out[r] = s;
    }
}

template <Storage S> KV_AVX2 inline __m256 load8(const std::uint8_t* row, int64_t j) {
    if constexpr (S == Storage::F32)
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + j);
    else {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j));
        if constexpr (S == Storage::BF16)
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        else
            return _mm256_cvtph_ps(h);
    }
}

template <Storage S, int R>
KV_AVX2 void dotAvx2(const std::uint8_t* w, int64_t rowBytes, const float* x, Split xs, int64_t n,
                     float* out) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r)
        acc[r] = _mm256_setzero_ps();
    int64_t j = 0;
    if constexpr (S == Storage::BF16) {
        const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
        for (; j + 16 <= n; j += 16) {
            const __m256 xe = _mm256_loadu_ps(xs.even + j / 2);
            const __m256 xo = _mm256_loadu_ps(xs.odd + j / 2);
            for (int r = 0; r < R; ++r) {
                const __m256i v =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * rowBytes + 2 * j));
                acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, acc[r]);
                acc[r] =
                    _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, high)), xo, acc[r]);
            }
        }
    }
    for (; j + 8 <= n; j += 8) {
        const __m256 xv = _mm256_loadu_ps(x + j);
        for (int r = 0; r < R; ++r)
            acc[r] = _mm256_fmadd_ps(load8<S>(w + r * rowBytes, j), xv, acc[r]);
    }
    for (int r = 0; r < R; ++r) {
        const __m128 lo = _mm256_castps256_ps128(acc[r]), hi = _mm256_extractf128_ps(acc[r], 1);
        __m128 v = _mm_add_ps(lo, hi);
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        v = _mm_add_ss(v, _mm_movehdup_ps(v));
        float s = _mm_cvtss_f32(v);
        for (int64_t k = j; k < n; ++k)
            s += scalarAt<S>(w + r * rowBytes, k) * x[k];
        out[r] = s;
    }
}

template <Storage S, int R>
void dotGeneric(const std::uint8_t* w, int64_t rowBytes, const float* x, Split, int64_t n,
                float* out) {
    for (int r = 0; r < R; ++r) {
        float acc[8] = {};
        int64_t j = 0;
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; ++k)
                acc[k] += scalarAt<S>(w + r * rowBytes, j + k) * x[j + k];
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; j < n; ++j)
            s += scalarAt<S>(w + r * rowBytes, j) * x[j];
        out[r] = s;
    }
}

enum class Isa { Avx512, Avx2, Generic };

Isa detectIsa() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("fma"))
        return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("fma"))
        return Isa::Avx2;
    return Isa::Generic;
}

Isa isa() {
    static const Isa chosen = detectIsa();
    return chosen;
}

constexpr int kRowsPerStep = 4;

// Rows [begin, end) of W x into y.
template <Storage S>
void rows(const std::uint8_t* w, int64_t rowBytes, const float* x, Split xs, int64_t n, float* y,
          int64_t begin, int64_t end) {
    const Isa unit = isa();
    auto step = [&](auto rowsAtOnce, int64_t r) {
        constexpr int R = decltype(rowsAtOnce)::value;
        const std::uint8_t* row = w + r * rowBytes;
        if (unit == Isa::Avx512)
            dotAvx512<S, R>(row, rowBytes, x, xs, n, y + r);
        else if (unit == Isa::Avx2)
            dotAvx2<S, R>(row, rowBytes, x, xs, n, y + r);
        else
            dotGeneric<S, R>(row, rowBytes, x, xs, n, y + r);
    };
    int64_t r = begin;
    for (; r + kRowsPerStep <= end; r += kRowsPerStep)
        step(std::integral_constant<int, kRowsPerStep>{}, r);
    for (; r < end; ++r)
        step(std::integral_constant<int, 1>{}, r);
}

} // namespace

bool canMatvec(const at::Tensor& w, const at::Tensor& x, const at::Tensor& b) {
    if (!w.defined() || !x.defined() || !w.device().is_cpu() || !x.device().is_cpu())
        return false;
    if (c10::GradMode::is_enabled() &&
        (w.requires_grad() || x.requires_grad() || (b.defined() && b.requires_grad())))
        return false;
    const auto t = w.scalar_type();
    if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf)
        return false;
    if (w.dim() != 2 || !w.is_contiguous() || x.scalar_type() != at::kFloat || x.dim() != 1 ||
        !x.is_contiguous() || x.size(0) != w.size(1))
        return false;
    return !b.defined() || (b.device().is_cpu() && b.scalar_type() == at::kFloat && b.dim() == 1 &&
                            b.size(0) == w.size(0));
}

at::Tensor matvec(const at::Tensor& w, const at::Tensor& x, const at::Tensor& b) {
    const int64_t out = w.size(0), n = w.size(1);
    at::Tensor y = at::empty({out}, x.options());
    const auto* wp = static_cast<const std::uint8_t*>(w.data_ptr());
    const int64_t rowBytes = n * static_cast<int64_t>(w.element_size());
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    std::vector<float> split;
    Split xs;
    if (w.scalar_type() == at::kBFloat16) {
        split.resize(static_cast<size_t>(n / 2 * 2));
        for (int64_t j = 0; j + 1 < n; j += 2) {
            split[static_cast<size_t>(j / 2)] = xp[j];
            split[static_cast<size_t>(n / 2 + j / 2)] = xp[j + 1];
        }
        xs = {split.data(), split.data() + n / 2};
    }
    // Enough rows per task that a task streams at least ~64 KB of weights.
    const int64_t grain =
        std::max<int64_t>(kRowsPerStep, (64 << 10) / std::max<int64_t>(1, rowBytes));
    at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
        switch (w.scalar_type()) {
        case at::kBFloat16:
            rows<Storage::BF16>(wp, rowBytes, xp, xs, n, yp, begin, end);
            break;
        case at::kHalf:
            rows<Storage::F16>(wp, rowBytes, xp, xs, n, yp, begin, end);
            break;
        default:
            rows<Storage::F32>(wp, rowBytes, xp, xs, n, yp, begin, end);
        }
    });
    if (b.defined())
        y.add_(b);
    return y;
}

at::Tensor mixedMatmul(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const int64_t out = w.size(0), n = w.size(1);
    // Blocks of rows widened to float32 at a time: ~8 MB each.
    const int64_t block = std::max<int64_t>(64, (8 << 20) / std::max<int64_t>(1, 4 * n));
    const at::Tensor xf = x.to(at::kFloat);
    std::vector<at::Tensor> parts;
    for (int64_t r = 0; r < out; r += block) {
        const at::Tensor wf = w.narrow(0, r, std::min(block, out - r)).to(at::kFloat);
        parts.push_back(at::mm(xf, wf.t()));
    }
    at::Tensor y = parts.size() == 1 ? parts.front() : at::cat(parts, 1);
    if (b.defined())
        y.add_(b.to(at::kFloat));
    return y;
}

const char* matvecIsa() {
    switch (isa()) {
    case Isa::Avx512:
        return "avx512";
    case Isa::Avx2:
        return "avx2";
    default:
        return "generic";
    }
}

} // namespace kvscope
