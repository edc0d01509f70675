// Colour-scale and heatmap-geometry math for the plots, kept out of the widgets so it can be
// unit-tested without a display (tst_widgets). Qt-free apart from nothing: plain values.
//
// Convention shared by every heatmap: a grid of `columns` x `rows` cells whose centres sit at
// integer data coordinates 0..columns-1 and 0..rows-1 (what QCPColorMap draws when its key
// and value ranges are [0, n-1]); cell (c, r) covers [c-0.5, c+0.5) x [r-0.5, r+0.5).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace kvscope::widgets {

// What a scan over float data found: the finite range and how many values are not finite.
struct ValueStats {
    double min = 0.0; // over finite values; 0 when there are none
    double max = 0.0;
    double minPositive = 0.0; // smallest finite value > 0; 0 when there is none (log scales)
    int64_t finite = 0;
    int64_t nan = 0;
    int64_t posInf = 0;
    int64_t negInf = 0;
    int64_t nonFinite() const { return nan + posInf + negInf; }

    static ValueStats scan(std::span<const float> values);
    // Adds the statistics of other values (scanned separately: parts of one map).
    void add(const ValueStats& other);
};

// Maps data values onto [0, 1] for a colour gradient. Non-finite values map to NaN so the
// plot paints them with its "bad value" colour (the NaN/Inf overlay).
struct ColorScale {
    double lo = 0.0;
    double hi = 1.0;
    bool log = false; // logarithmic: lo > 0, values <= lo get the lowest colour

    // The finite range of the data; a degenerate range (all values equal, or none finite) is
    // widened so that normalized() stays defined: [v - 0.5, v + 0.5] (or [0, 1]).
    static ColorScale fromStats(const ValueStats& stats);
    static ColorScale fromData(std::span<const float> values) {
        return fromStats(ValueStats::scan(values));
    }
    // Zero-neutral and symmetric, for differences: [-m, m] with m = max |finite value| (0
    // sits mid-scale, whatever the data's minimum; all-zero data gives [-1, 1]).
    static ColorScale symmetric(const ValueStats& stats);
    // A user-chosen range; swapped when lo > hi, widened when equal.
    static ColorScale manual(double lo, double hi);
    // Logarithmic over the positive data: [max(minPositive, max * 1e-6), max]; [1e-6, 1]
    // when nothing is positive. Zeros (masked attention) take the lowest colour.
    static ColorScale logarithmic(const ValueStats& stats);
    // The same scale stretched to include 0 (a linear auto range that starts at zero, so
    // near-uniform data is not blown up to the full gradient).
    ColorScale withZero() const;

    // (v - lo) / (hi - lo) clamped to [0, 1] (on log10 values for a log scale); NaN for
    // NaN/Inf input.
    double normalized(double v) const;
    // The value shown for v: v itself when finite, NaN otherwise (so +Inf does not saturate
    // the scale silently but shows as a bad cell).
    static double displayValue(float v);
};

// 0xRRGGBB on the viridis-like gradient used by every heatmap, t in [0, 1] (clamped); NaN
// gives the overlay colour (magenta) so bad cells stand out.
uint32_t gradientColor(double t);
// 0xRRGGBB on the diverging gradient of difference maps: blue (t = 0) through white (t = 0.5,
// no difference) to red (t = 1); NaN gives the overlay colour.
uint32_t divergingColor(double t);
inline constexpr uint32_t kBadValueColor = 0xff00ff;

struct HeatmapCell {
    int column = 0;
    int row = 0;
    bool operator==(const HeatmapCell&) const = default;
};

struct HeatmapGeometry {
    int columns = 0;
    int rows = 0;

    bool empty() const { return columns <= 0 || rows <= 0; }
    // The cell containing data coordinate (x, y), or nothing outside the grid.
    std::optional<HeatmapCell> cellAt(double x, double y) const;
    // Row-major index of a cell (row * columns + column).
    int64_t index(HeatmapCell c) const { return int64_t(c.row) * columns + c.column; }
    // Data range that shows every cell completely: [-0.5, n - 0.5].
    double xMin() const { return -0.5; }
    double xMax() const { return columns - 0.5; }
    double yMin() const { return -0.5; }
    double yMax() const { return rows - 0.5; }
};

} // namespace kvscope::widgets
