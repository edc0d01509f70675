#include "colorscale.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace kvscope::widgets {

ValueStats ValueStats::scan(std::span<const float> values) {
    // One branch-free pass over the finite values (a 4,096 x 4,096 map is 16 M of them), in
    // float: min/max/compare are exact in float. Non-finite values are counted only when there
    // are any.
    ValueStats s;
    constexpr float inf = std::numeric_limits<float>::infinity();
    constexpr float most = std::numeric_limits<float>::max();
    float lo = inf, hi = -inf, pos = inf;
    int64_t finite = 0;
    for (const float v : values) {
        const bool ok = std::abs(v) <= most; // false for NaN and +-Inf
        finite += ok;
        lo = ok && v < lo ? v : lo;
        hi = ok && v > hi ? v : hi;
        pos = ok && v > 0 && v < pos ? v : pos;
    }
    s.finite = finite;
    if (finite != int64_t(values.size()))
        for (const float v : values) {
            if (std::isnan(v))
                ++s.nan;
            else if (std::isinf(v))
                ++(v > 0 ? s.posInf : s.negInf);
        }
    if (s.finite > 0) {
        s.min = lo;
        s.max = hi;
        s.minPositive = pos < inf ? pos : 0.0;
    }
    return s;
}

void ValueStats::add(const ValueStats& o) {
    if (o.finite > 0) {
        if (finite == 0) {
            min = o.min;
            max = o.max;
            minPositive = o.minPositive;
        } else {
            min = std::min(min, o.min);
            max = std::max(max, o.max);
            if (o.minPositive > 0)
                minPositive =
                    minPositive > 0 ? std::min(minPositive, o.minPositive) : o.minPositive;
        }
    }
    finite += o.finite;
    nan += o.nan;
    posInf += o.posInf;
    negInf += o.negInf;
}

ColorScale ColorScale::fromStats(const ValueStats& stats) {
    if (stats.finite == 0)
        return {0.0, 1.0};
    if (stats.max > stats.min)
        return {stats.min, stats.max};
    return {stats.min - 0.5, stats.max + 0.5};
}

ColorScale ColorScale::symmetric(const ValueStats& stats) {
    const double m = stats.finite == 0 ? 0.0 : std::max(std::abs(stats.min), std::abs(stats.max));
    return m > 0 ? ColorScale{-m, m} : ColorScale{-1.0, 1.0};
}

ColorScale ColorScale::manual(double lo, double hi) {
    if (lo > hi)
        std::swap(lo, hi);
    if (!(hi > lo))
        return {lo - 0.5, hi + 0.5};
    return {lo, hi};
}

ColorScale ColorScale::logarithmic(const ValueStats& stats) {
    if (stats.finite == 0 || stats.max <= 0)
        return {1e-6, 1.0, true};
    const double lo = std::max(stats.minPositive, stats.max * 1e-6);
    return lo < stats.max ? ColorScale{lo, stats.max, true}
                          : ColorScale{stats.max / 10, stats.max, true};
}

ColorScale ColorScale::withZero() const {
    if (log)
        return *this;
    return {std::min(lo, 0.0), std::max(hi, 0.0), false};
}

double ColorScale::normalized(double v) const {
    if (!std::isfinite(v))
        return std::numeric_limits<double>::quiet_NaN();
    if (log) {
        if (v <= lo)
            return 0.0;
        return std::clamp(std::log10(v / lo) / std::log10(hi / lo), 0.0, 1.0);
    }
    return std::clamp((v - lo) / (hi - lo), 0.0, 1.0);
}

double ColorScale::displayValue(float v) {
    return std::isfinite(v) ? double(v) : std::numeric_limits<double>::quiet_NaN();
}

uint32_t gradientColor(double t) {
    if (std::isnan(t))
        return kBadValueColor;
    // Five viridis stops; linear interpolation between them.
    static constexpr std::array<uint32_t, 5> stops = {0x440154, 0x3b528b, 0x21918c, 0x5ec962,
                                                      0xfde725};
    t = std::clamp(t, 0.0, 1.0) * double(stops.size() - 1);
    const auto i = std::min<std::size_t>(std::size_t(t), stops.size() - 2);
    const double f = t - double(i);
    auto channel = [&](int shift) {
        const double a = double((stops[i] >> shift) & 0xff);
        const double b = double((stops[i + 1] >> shift) & 0xff);
        return uint32_t(std::lround(a + (b - a) * f)) << shift;
    };
    return channel(16) | channel(8) | channel(0);
}

std::optional<HeatmapCell> HeatmapGeometry::cellAt(double x, double y) const {
    if (empty() || !std::isfinite(x) || !std::isfinite(y))
        return std::nullopt;
    const double c = std::floor(x + 0.5);
    const double r = std::floor(y + 0.5);
    if (c < 0 || r < 0 || c >= columns || r >= rows)
        return std::nullopt;
    return HeatmapCell{int(c), int(r)};
}

} // namespace kvscope::widgets

namespace kvscope::widgets {

uint32_t divergingColor(double t) {
    if (std::isnan(t))
        return kBadValueColor;
    t = std::clamp(t, 0.0, 1.0);
    // blue (0x3b4cc0) -> white -> red (0xb40426), linear in each half.
    auto mix = [](uint32_t a, uint32_t b, double u) {
        uint32_t out = 0;
        for (int shift : {16, 8, 0}) {
            const double ca = (a >> shift) & 0xff, cb = (b >> shift) & 0xff;
            out |= uint32_t(std::lround(ca + (cb - ca) * u)) << shift;
        }
        return out;
    };
    return t < 0.5 ? mix(0x3b4cc0, 0xffffff, t * 2) : mix(0xffffff, 0xb40426, (t - 0.5) * 2);
}

} // namespace kvscope::widgets
