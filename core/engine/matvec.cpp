#include "engine/matvec.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
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

// The dot product of one row with x. One row at a time, not several interleaved: one
// sequential stream is what the hardware prefetcher follows best (a mapped 438 MB matrix, one
// thread: ~1.6x the bytes per second of four rows at once; two bf16 rows sharing x's loads
// were slower too).

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

// x as the kernels read it. bf16: its even and odd elements apart (the bf16 kernels widen 32
// weights with one shift for the even elements and one mask for the odd ones instead of two
// loads and two conversions). f32: x itself, or a copy placed for the AVX-512 kernel (odd
// unused).
struct Split {
    const float* even = nullptr;
    const float* odd = nullptr;
};

// f16 rows, and dotF32's short vectors (norms, one query's scores): 16 elements at a time
// from the start.
template <Storage S> KV_AVX512 float dotAvx512(const std::uint8_t* w, const float* x, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc = _mm512_fmadd_ps(load16<S>(w, j), _mm512_loadu_ps(x + j), acc);
    float s = _mm512_reduce_add_ps(acc);
    for (; j < n; ++j)
        s += scalarAt<S>(w, j) * x[j];
    return s;
}

// A row of weights streamed as 4-byte units (one f32 weight, or a pair of bf16 weights, the
// even element in the low half): unit u times x's unit u is added to lane u % 16 of one of two
// sets of sums, set (u / 16) % 2 (the bf16 set keeps even and odd elements apart), in order of
// u; the sets are added lane by lane, the lanes by one fixed tree. That result depends only on
// the row's values, not on where the row lies in memory, and it can be computed from whole
// 64-byte lines:
// - Weights mapped from a file rarely start on a line (safetensors' tensors lie 8 bytes past
//   one, llama2.c's 28, GGUF's 0 or 32), and a load that straddles two lines costs: a bf16
//   decode of a smollm2-135m-shaped file ran at 52-58 tok/s with its tensors 8 bytes past a
//   line and at 71-79 with them on one (one thread, the same bytes).
// - So when the row starts k units into a line, line t (t = 0 the line holding the row's
//   start) is read whole: its lanes >= k hold units of the row's 16-unit group t, its lanes < k
//   units of group t - 1. Line t goes to set t % 2 whole: lanes >= k get their own set, lanes
//   < k always the other one, and a lane's two sets only meet in one addition, which does
//   not care about order. Unit u then sits in lane (u + k) % 16: the lanes are rotated by k,
//   which the fixed tree (sumLanes) does not see. Bit for bit the sum of the row read from a
//   line's start (tst_kernels matvecIgnoresAlignment).
// - bf16 lines are also asked for kBf16Prefetch bytes ahead: a bf16 line costs about twice
//   the instructions of an f32 one (widening, two halves of x), so the out-of-order window
//   alone keeps half as many lines in flight; on a smollm2-135m-shaped sequence of matrices
//   (one thread, huge pages) the prefetch and the two sets together stream 1.25-1.4x the bytes
//   per second of one line per step without either. f32 lines gain nothing from the prefetch
//   (slightly slower), so they do without.
// ex (and for bf16 ox) hold x's units: f32 x itself, bf16 x's even and odd elements.

// How far ahead of the line it reads the bf16 kernel asks for weights (bytes; a prefetch past
// the end of a mapping is ignored by the CPU, it never faults). The AVX2 kernel asks too, one
// line per 64 bytes it reads: on a Zen 2 EPYC (2 cores, smollm2-135m-shaped bf16 file, mapped)
// decode went from 44-47 to 53-54 tok/s on one thread and from 70-71 to 83-84 on two; 512 and
// 768 bytes ahead gained less or as much, 1536 and 2048 little. Its f32 kernel, asked the same
// way (512-2048 bytes ahead), lost 5-20%: it does without, as the AVX-512 one does.
constexpr int64_t kBf16Prefetch = 1024;

// The sum of v's lanes by one fixed tree: lane i + lane i + 8, then of those i + (i + 4), i + (i
// + 2), i + (i + 1). The pairs are the same when the lanes are rotated, and an addition does not
// care about the order of its two terms, so a rotated v sums to the same bits.
KV_AVX512 inline float sumLanes(__m512 v) {
    const __m256 low = _mm512_castps512_ps256(v);
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 eight = _mm256_add_ps(low, high);
    __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
    four = _mm_add_ps(four, _mm_shuffle_ps(four, four, _MM_SHUFFLE(1, 0, 3, 2)));
    four = _mm_add_ps(four, _mm_shuffle_ps(four, four, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtss_f32(four);
}

// One line's 16 units v times x's units xe (bf16: xe the even elements, xo the odd) into the
// sums e (bf16: e and o).
template <Storage S>
KV_AVX512 inline void lineFma(__m512i v, __m512 xe, __m512 xo, __m512& e, __m512& o) {
    if constexpr (S == Storage::BF16) {
        const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
        e = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), xe, e);
        o = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), xo, o);
    } else {
        (void)xo;
        (void)o;
        e = _mm512_fmadd_ps(_mm512_castsi512_ps(v), xe, e);
    }
}

// Line t (line-relative unit t, a multiple of 16) whole, x's units from t - k.
template <Storage S>
KV_AVX512 inline void fullLine(const std::uint8_t* line, const float* ex, const float* ox,
                               int64_t t, int k, __m512& e, __m512& o) {
    const __m512i v = _mm512_loadu_si512(reinterpret_cast<const void*>(line + 4 * t));
    const __m512 xe = _mm512_loadu_ps(ex + (t - k));
    const __m512 xo = S == Storage::BF16 ? _mm512_loadu_ps(ox + (t - k)) : xe;
    lineFma<S>(v, xe, xo, e, o);
}

// How many 4-byte units into its 64-byte line a row starts: the k of streamAvx512. A row not
// on a 4-byte boundary (a bf16 tensor after one of odd length) counts its lines from its own
// start (k = 0): the same sums, with straddling loads.
inline int unitsIntoLine(const void* row) {
    const auto address = reinterpret_cast<std::uintptr_t>(row);
    return (address & 3) == 0 ? static_cast<int>(address & 63) / 4 : 0;
}

template <Storage S>
KV_AVX512 float streamAvx512(const std::uint8_t* w, const float* ex, const float* ox,
                             int64_t units) {
    const int k = unitsIntoLine(w);
    // The line holding the row's start (by address: it may begin before the tensor).
    const auto* line = reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(w) -
                                                             4 * static_cast<unsigned>(k));
    const int64_t end = units + k; // line-relative
    __m512 eA = _mm512_setzero_ps(), oA = eA, eB = eA, oB = eA;
    // Line 0: lanes [k, min(16, end)), loaded from the row's start (expanded into those lanes,
    // nothing read outside the row).
    const unsigned top = end >= 16 ? 0xFFFFu : (1u << end) - 1;
    const auto m0 = static_cast<__mmask16>(top & ~((1u << k) - 1));
    const __m512 xe0 = _mm512_maskz_expandloadu_ps(m0, ex);
    const __m512 xo0 = S == Storage::BF16 ? _mm512_maskz_expandloadu_ps(m0, ox) : xe0;
    lineFma<S>(_mm512_maskz_expandloadu_epi32(m0, w), xe0, xo0, eA, oA);
    // Lines 1, 2, ...: odd ones to set B, even ones to set A.
    const int64_t full = end / 16 * 16;
    int64_t t = 16;
    for (; t + 32 <= full; t += 32) {
        if constexpr (S == Storage::BF16) {
            _mm_prefetch(reinterpret_cast<const char*>(line + 4 * t + kBf16Prefetch), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(line + 4 * t + kBf16Prefetch + 64),
                         _MM_HINT_T0);
        }
        fullLine<S>(line, ex, ox, t, k, eB, oB);
        fullLine<S>(line, ex, ox, t + 16, k, eA, oA);
    }
    if (t < full) {
        fullLine<S>(line, ex, ox, t, k, eB, oB);
        t += 16;
    }
    if (t < end) { // the last line, lanes [0, end - t)
        const auto m = static_cast<__mmask16>((1u << (end - t)) - 1);
        const __m512i v = _mm512_maskz_loadu_epi32(m, line + 4 * t);
        const __m512 xe = _mm512_maskz_loadu_ps(m, ex + (t - k));
        const __m512 xo = S == Storage::BF16 ? _mm512_maskz_loadu_ps(m, ox + (t - k)) : xe;
        if ((t / 16) % 2 == 1)
            lineFma<S>(v, xe, xo, eB, oB);
        else
            lineFma<S>(v, xe, xo, eA, oA);
    }
    __m512 sum = S == Storage::BF16 ? _mm512_add_ps(_mm512_add_ps(eA, oA), _mm512_add_ps(eB, oB))
                                    : _mm512_add_ps(eA, eB);
    return sumLanes(sum);
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

// A 32-bit lane of bf16 pairs as floats: the even element is the low half shifted up, the odd
// one the lane with its low half cleared.
KV_AVX2 inline __m256 bf16Even(__m256i v) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
KV_AVX2 inline __m256 bf16Odd(__m256i v, __m256i high) {
    return _mm256_castsi256_ps(_mm256_and_si256(v, high));
}

// Four independent sums: a single FMA chain is bound by its latency (5 cycles on Zen 2, so
// 32 bytes of f32 weights per 5 cycles), below what memory delivers to one core; with four,
// decode streams the weights at memory speed.
template <Storage S>
KV_AVX2 float dotAvx2(const std::uint8_t* w, const float* x, Split xs, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    if constexpr (S == Storage::BF16) {
        const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
        for (; j + 32 <= n; j += 32) {
            _mm_prefetch(reinterpret_cast<const char*>(w + 2 * j + kBf16Prefetch), _MM_HINT_T0);
            const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j));
            const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j + 32));
            a0 = _mm256_fmadd_ps(bf16Even(v0), _mm256_loadu_ps(xs.even + j / 2), a0);
            a1 = _mm256_fmadd_ps(bf16Odd(v0, high), _mm256_loadu_ps(xs.odd + j / 2), a1);
            a2 = _mm256_fmadd_ps(bf16Even(v1), _mm256_loadu_ps(xs.even + j / 2 + 8), a2);
            a3 = _mm256_fmadd_ps(bf16Odd(v1, high), _mm256_loadu_ps(xs.odd + j / 2 + 8), a3);
        }
        for (; j + 16 <= n; j += 16) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * j));
            a0 = _mm256_fmadd_ps(bf16Even(v), _mm256_loadu_ps(xs.even + j / 2), a0);
            a1 = _mm256_fmadd_ps(bf16Odd(v, high), _mm256_loadu_ps(xs.odd + j / 2), a1);
        }
    } else {
        for (; j + 32 <= n; j += 32) {
            a0 = _mm256_fmadd_ps(load8<S>(w, j), _mm256_loadu_ps(x + j), a0);
            a1 = _mm256_fmadd_ps(load8<S>(w, j + 8), _mm256_loadu_ps(x + j + 8), a1);
            a2 = _mm256_fmadd_ps(load8<S>(w, j + 16), _mm256_loadu_ps(x + j + 16), a2);
            a3 = _mm256_fmadd_ps(load8<S>(w, j + 24), _mm256_loadu_ps(x + j + 24), a3);
        }
    }
    for (; j + 8 <= n; j += 8)
        a0 = _mm256_fmadd_ps(load8<S>(w, j), _mm256_loadu_ps(x + j), a0);
    const __m256 acc = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    const __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
    __m128 v = _mm_add_ps(lo, hi);
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    float s = _mm_cvtss_f32(v);
    for (; j < n; ++j)
        s += scalarAt<S>(w, j) * x[j];
    return s;
}

template <Storage S> float dotGeneric(const std::uint8_t* w, const float* x, int64_t n) {
    float acc[8] = {};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k)
            acc[k] += scalarAt<S>(w, j + k) * x[j + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; j < n; ++j)
        s += scalarAt<S>(w, j) * x[j];
    return s;
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

float dotF32(const float* a, const float* b, int64_t n) {
    const auto* w = reinterpret_cast<const std::uint8_t*>(a);
    switch (isa()) {
    case Isa::Avx512:
        return dotAvx512<Storage::F32>(w, b, n);
    case Isa::Avx2:
        return dotAvx2<Storage::F32>(w, b, {}, n);
    default:
        return dotGeneric<Storage::F32>(w, b, n);
    }
}

bool noGradFloatCpu(const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
           !(c10::GradMode::is_enabled() && t.requires_grad());
}

// Rows [begin, end) of W x into y.
template <Storage S>
void rows(const std::uint8_t* w, int64_t rowBytes, const float* x, Split xs, int64_t n, float* y,
          int64_t begin, int64_t end) {
    const Isa unit = isa();
    for (int64_t r = begin; r < end; ++r) {
        const std::uint8_t* row = w + r * rowBytes;
        if (unit == Isa::Avx512) {
            if constexpr (S == Storage::F32)
                y[r] = streamAvx512<S>(row, xs.even, nullptr, n);
            else if constexpr (S == Storage::BF16)
                y[r] = streamAvx512<S>(row, xs.even, xs.odd, n / 2) +
                       (n % 2 == 1 ? scalarAt<S>(row, n - 1) * x[n - 1] : 0.0f);
            else
                y[r] = dotAvx512<S>(row, x, n);
        } else if (unit == Isa::Avx2)
            y[r] = dotAvx2<S>(row, x, xs, n);
        else
            y[r] = dotGeneric<S>(row, x, n);
    }
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
    // x's units for the kernels (bf16: its even and odd elements apart; f32: x itself), each
    // array placed so that the unit a line's lane 0 multiplies lies on a 64-byte boundary
    // when every row starts k units into a line (rows of a multiple of 64 bytes); otherwise
    // the x loads straddle lines instead of the weight loads.
    const bool bf16 = w.scalar_type() == at::kBFloat16;
    const int64_t units = bf16 ? n / 2 : n;
    const int64_t k = rowBytes % 64 == 0 ? unitsIntoLine(wp) : 0;
    const int64_t span = (k + units + 15) / 16 * 16; // floats per array, from its line
    std::vector<float> staging;
    Split xs{xp, nullptr};
    if (bf16 || (w.scalar_type() == at::kFloat && k != 0)) {
        staging.resize(static_cast<size_t>(2 * span + 16));
        const auto base =
            (reinterpret_cast<std::uintptr_t>(staging.data()) + 63) & ~std::uintptr_t{63};
        float* even = reinterpret_cast<float*>(base) + k;
        float* odd = even + span;
        for (int64_t u = 0; u < units; ++u) {
            if (bf16) {
                even[u] = xp[2 * u];
                odd[u] = xp[2 * u + 1];
            } else {
                even[u] = xp[u];
            }
        }
        xs = {even, bf16 ? odd : nullptr};
    }
    // Enough rows per task that a task streams at least ~64 KB of weights.
    const int64_t grain = std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, rowBytes));
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
    // Blocks of rows widened to float32 at a time, ~8 MB each, into one buffer the thread
    // keeps: a fresh block per matrix cost a page fault per 4 KB (the kernel zeroes each page)
    // and an at::cat of the parts; each block's products now go straight into its columns of
    // y. A smollm2-135m-shaped bf16 prefill on two threads: 656 -> 826-883 tok/s (blocks of
    // 1, 2 and 32 MB: 731, 776, 800).
    const int64_t block =
        std::min(out, std::max<int64_t>(64, (8 << 20) / std::max<int64_t>(1, 4 * n)));
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    at::Tensor y = at::empty({xf.size(0), out}, xf.options());
    thread_local std::vector<float> scratch;
    const bool cpu = xf.device().is_cpu();
    if (cpu && scratch.size() < static_cast<std::size_t>(block * n))
        scratch.resize(static_cast<std::size_t>(block * n));
    for (int64_t r = 0; r < out; r += block) {
        const int64_t rows = std::min(block, out - r);
        at::Tensor wf = cpu ? at::from_blob(scratch.data(), {rows, n}, xf.options())
                            : at::empty({rows, n}, xf.options());
        wf.copy_(w.narrow(0, r, rows));
        at::Tensor part = y.narrow(1, r, rows);
        at::mm_out(part, xf, wf.t());
    }
    if (b.defined())
        y.add_(b.to(at::kFloat));
    return y;
}

bool canRmsNormRows(const at::Tensor& x, const at::Tensor& w) {
    return noGradFloatCpu(x) && noGradFloatCpu(w) && x.dim() == 2 && x.is_contiguous() &&
           w.dim() == 1 && w.is_contiguous() && w.size(0) == x.size(1);
}

at::Tensor rmsNormRows(const at::Tensor& x, const at::Tensor& w, double eps) {
    const int64_t N = x.size(0), C = x.size(1);
    at::Tensor y = at::empty({N, C}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* row = xp + r * C;
            const float meanSquare = dotF32(row, row, C) / static_cast<float>(C);
            const float scale = 1.0f / std::sqrt(meanSquare + static_cast<float>(eps));
            for (int64_t j = 0; j < C; ++j)
                yp[r * C + j] = row[j] * scale * wp[j];
        }
    });
    return y;
}

bool canRopeRows(const at::Tensor& x, const at::Tensor& invFreq) {
    return noGradFloatCpu(x) && noGradFloatCpu(invFreq) && x.dim() == 3 && x.stride(2) == 1 &&
           x.size(2) % 2 == 0 && invFreq.dim() == 1 && invFreq.is_contiguous() &&
           invFreq.size(0) == x.size(2) / 2;
}

at::Tensor ropeRows(const at::Tensor& x, const at::Tensor& invFreq,
                    const std::vector<int64_t>& positions, float scale) {
    const int64_t H = x.size(0), T = x.size(1), D = x.size(2), half = D / 2;
    if (static_cast<int64_t>(positions.size()) != T)
        throw std::invalid_argument("ropeRows: one position per token");
    at::Tensor y = at::empty({H, T, D}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* inv = invFreq.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const int64_t sh = x.stride(0), st = x.stride(1);
    at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) {
        std::vector<float> cs(static_cast<size_t>(2 * half));
        for (int64_t t = begin; t < end; ++t) {
            const float pos = static_cast<float>(positions[static_cast<size_t>(t)]);
            for (int64_t i = 0; i < half; ++i) {
                const float angle = pos * inv[i];
                cs[static_cast<size_t>(i)] = std::cos(angle) * scale;
                cs[static_cast<size_t>(half + i)] = std::sin(angle) * scale;
            }
            for (int64_t h = 0; h < H; ++h) {
                const float* in = xp + h * sh + t * st;
                float* out = yp + (h * T + t) * D;
                for (int64_t i = 0; i < half; ++i) {
                    const float c = cs[static_cast<size_t>(i)],
                                s = cs[static_cast<size_t>(half + i)];
                    out[i] = in[i] * c - in[half + i] * s;
                    out[half + i] = in[half + i] * c + in[i] * s;
                }
            }
        }
    });
    return y;
}

namespace {

// q [H, D] and K, V [KVH, P, D] as attendOne reads them.
bool attendOneShapes(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V) {
    return noGradFloatCpu(q) && noGradFloatCpu(K) && noGradFloatCpu(V) && q.dim() == 2 &&
           q.is_contiguous() && K.dim() == 3 && V.dim() == 3 && K.sizes() == V.sizes() &&
           K.stride(2) == 1 && V.stride(2) == 1 && K.size(2) == q.size(1) && K.size(0) != 0 &&
           q.size(0) % K.size(0) == 0;
}

// Undefined, or P (shared) or KVH * P (one row per KV head) float32 values.
bool additiveFits(const at::Tensor& additive, int64_t kvHeads, int64_t P) {
    return !additive.defined() || (noGradFloatCpu(additive) && additive.is_contiguous() &&
                                   (additive.numel() == P || additive.numel() == kvHeads * P));
}

} // namespace

bool canAttendOne(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                  const at::Tensor& additive) {
    return attendOneShapes(q, K, V) && additiveFits(additive, K.size(0), K.size(1));
}

namespace {

// attendOne over K/V's P slots, then (when kx is given) one more slot whose key and value rows
// are kx, vx [KVH, D]: the same arithmetic, in the same order, as if that slot were K/V's last.
at::Tensor attendOneImpl(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                         const float* kx, const float* vx, const at::Tensor& additive, float scale,
                         float softcap) {
    const int64_t H = q.size(0), D = q.size(1), KVH = K.size(0), G = H / KVH;
    const int64_t Pc = K.size(1), P = Pc + (kx ? 1 : 0);
    at::Tensor y = at::empty({H * D}, q.options());
    const float* qp = q.data_ptr<float>();
    const float* kp = K.data_ptr<float>();
    const float* vp = V.data_ptr<float>();
    const float* add = additive.defined() ? additive.data_ptr<float>() : nullptr;
    const int64_t addHeadStride = additive.defined() && additive.numel() != P ? P : 0;
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, H, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> p(static_cast<size_t>(P));
        for (int64_t h = begin; h < end; ++h) {
            const int64_t kv = h / G;
            const float* qh = qp + h * D;
            const float* keys = kp + kv * K.stride(0);
            const float* values = vp + kv * V.stride(0);
            const float* mask = add ? add + kv * addHeadStride : nullptr;
            auto keyRow = [&](int64_t j) { return j < Pc ? keys + j * K.stride(1) : kx + kv * D; };
            auto valueRow = [&](int64_t j) {
                return j < Pc ? values + j * V.stride(1) : vx + kv * D;
            };
            float top = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < P; ++j) {
                float s = dotF32(qh, keyRow(j), D) * scale;
                if (softcap > 0)
                    s = softcap * std::tanh(s / softcap);
                if (mask)
                    s += mask[j];
                p[static_cast<size_t>(j)] = s;
                top = std::max(top, s);
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < P; ++j) {
                const float e = std::exp(p[static_cast<size_t>(j)] - top);
                p[static_cast<size_t>(j)] = e;
                sum += e;
            }
            float* out = yp + h * D;
            std::fill(out, out + D, 0.0f);
            for (int64_t j = 0; j < P; ++j) {
                const float w = p[static_cast<size_t>(j)] / sum;
                const float* row = valueRow(j);
                for (int64_t d = 0; d < D; ++d)
                    out[d] += w * row[d];
            }
        }
    });
    return y;
}

} // namespace

at::Tensor attendOne(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                     const at::Tensor& additive, float scale, float softcap) {
    return attendOneImpl(q, K, V, nullptr, nullptr, additive, scale, softcap);
}

bool canAttendOneAside(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                       const at::Tensor& kx, const at::Tensor& vx, const at::Tensor& additive) {
    return attendOneShapes(q, K, V) && noGradFloatCpu(kx) && noGradFloatCpu(vx) &&
           kx.is_contiguous() && vx.is_contiguous() && kx.numel() == K.size(0) * K.size(2) &&
           vx.numel() == kx.numel() && additiveFits(additive, K.size(0), K.size(1) + 1);
}

at::Tensor attendOneAside(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                          const at::Tensor& kx, const at::Tensor& vx, const at::Tensor& additive,
                          float scale, float softcap) {
    return attendOneImpl(q, K, V, kx.data_ptr<float>(), vx.data_ptr<float>(), additive, scale,
                         softcap);
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
