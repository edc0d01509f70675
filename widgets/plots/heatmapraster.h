// HeatmapRaster: renders a grid of values (up to thousands x thousands of cells) into an image
// of the screen's pixels, at a cost that depends on the pixels, not on the cells.
//
// On setData() it builds a pyramid of 2x2 reductions (each level keeps the largest and the
// smallest value of the cells it covers, and whether all of them are masked); a NaN/Inf
// anywhere under a block makes the block bad, so a single corrupted value stays visible when
// zoomed out. render() picks, per image, the coarsest level whose blocks are no larger than a
// pixel and reduces the few blocks under each pixel: a zoomed-out pixel shows the most extreme
// value it covers (the largest; for a diverging scale the one farthest from zero), never an
// average that would hide a spike. Memory: the data (level 0, not copied) plus about two
// thirds of it.
//
// Cell (c, r) is centred on data coordinate (c, r) (colorscale.h's convention).
#pragma once

#include "colorscale.h"
#include "util/largebuffer.h"

#include <QImage>
#include <QRgb>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvscope::widgets {

class HeatmapRaster {
public:
    // values [rows, columns] row-major, kept as level 0 (values()); non-finite values are bad
    // cells. masked: empty or [rows, columns], non-zero = drawn greyed.
    void setData(int columns, int rows, LargeVector<float> values,
                 LargeVector<uint8_t> masked = {});
    void clear() { setData(0, 0, {}); }
    // The values as given to setData.
    const LargeVector<float>& values() const {
        static const LargeVector<float> none;
        return m_levels.empty() ? none : m_levels[0].hi;
    }
    int columns() const { return m_columns; }
    int rows() const { return m_rows; }
    int levels() const { return int(m_levels.size()); }
    bool hasMask() const { return !m_levels.empty() && !m_levels[0].masked.empty(); }
    // The cells' mask as given to setData (empty: none).
    const LargeVector<uint8_t>& baseMask() const {
        static const LargeVector<uint8_t> none;
        return m_levels.empty() ? none : m_levels[0].masked;
    }

    struct Colours {
        ColorScale scale;
        bool diverging = false; // reduce to the value farthest from zero; diverging gradient
    };
    // Renders a width x height image whose left/right edges are at data x = xLeft/xRight and
    // top/bottom edges at y = yTop/yBottom (x = column, y = row; either may decrease, for a
    // reversed axis). Outside the grid is transparent.
    QImage render(double xLeft, double xRight, double yTop, double yBottom, int width, int height,
                  const Colours& colours) const;
    // Bytes held: the data and its pyramid (the view's memory; no per-cell objects).
    int64_t bytes() const;
    // Blocks read by the last render() (tests and the benchmark check the cost bound).
    int64_t lastBlocksRead() const { return m_blocksRead; }

private:
    struct Level {
        int columns = 0;
        int rows = 0;
        LargeVector<float> hi, lo;   // level 0: the values, no lo; above: NaN = a bad cell below
        LargeVector<uint8_t> masked; // 1: every cell below is masked (empty: no mask)
    };
    int m_columns = 0;
    int m_rows = 0;
    std::vector<Level> m_levels;
    mutable int64_t m_blocksRead = 0;
};

// A heatmap's data made ready to paint: the values, their statistics and the raster pyramid.
// Immutable once built, so the engine thread can build a big one (a 4,096 x 4,096 attention
// map) and hand it to the GUI thread, which then only paints.
struct HeatmapData {
    int columns = 0;
    int rows = 0;
    ValueStats stats;
    HeatmapRaster raster;
    bool masked = false; // the raster carries a mask
    const LargeVector<float>& values() const { return raster.values(); } // [rows, columns]

    // values.size() must be columns * rows (otherwise the result is empty); masked: empty or
    // [rows, columns], non-zero = greyed.
    static std::shared_ptr<const HeatmapData>
    build(int columns, int rows, LargeVector<float> values, LargeVector<uint8_t> masked = {});
};
using HeatmapDataPtr = std::shared_ptr<const HeatmapData>;

// 256-entry colour tables of the two gradients (the widgets' gradientColor/divergingColor).
const std::array<QRgb, 256>& dataLut();
const std::array<QRgb, 256>& divergingLut();

} // namespace kvscope::widgets
