#include "heatmapraster.h"

#include <QThread>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace kvscope::widgets {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Runs fn(begin, end) over [0, n), split over the cores when each part gets at least `minPart`
// items: a 4,096 x 4,096 map is built while the window waits for it, a small one stays on the
// calling thread. fn must not throw.
template <class F> void inChunks(int64_t n, int64_t minPart, const F& fn) {
    const int64_t parts =
        std::clamp<int64_t>(n / std::max<int64_t>(1, minPart), 1, QThread::idealThreadCount());
    if (parts <= 1) {
        fn(int64_t(0), n);
        return;
    }
    std::vector<std::thread> threads;
    for (int64_t i = 1; i < parts; ++i)
        threads.emplace_back([&fn, b = n * i / parts, e = n * (i + 1) / parts] { fn(b, e); });
    fn(int64_t(0), n / parts);
    for (auto& t : threads)
        t.join();
}

// Rows of a level worth a thread: about a million cells.
int64_t rowsPerPart(int columns) {
    return std::max<int64_t>(1, (int64_t(1) << 20) / std::max(1, columns));
}

std::array<QRgb, 256> makeLut(uint32_t (*colour)(double)) {
    std::array<QRgb, 256> lut{};
    for (int i = 0; i < 256; ++i)
        lut[size_t(i)] = 0xff000000u | colour(i / 255.0);
    return lut;
}

// Greys a colour: light grey at 75% over the data colour. Light, because the gradient's low
// end is nearly black: a dark grey over it (the old overlay) looked like p = 0, so "grey =
// cannot see" showed no grey on an attention map.
QRgb greyed(QRgb c) {
    auto mix = [](int a) { return (a + 3 * 200) / 4; };
    return qRgb(mix(qRed(c)), mix(qGreen(c)), mix(qBlue(c)));
}

} // namespace

const std::array<QRgb, 256>& dataLut() {
    static const auto lut = makeLut(gradientColor);
    return lut;
}

const std::array<QRgb, 256>& divergingLut() {
    static const auto lut = makeLut(divergingColor);
    return lut;
}

namespace {

// One level of the pyramid from the one below: each block keeps the largest and smallest value
// of its (up to) 2 x 2 cells, NaN when any of them is not finite, and whether all are masked.
// The edge column/row of an odd-sized level is read twice.
void halve(int fColumns, int fRows, const float* fHi, const float* fLo, const uint8_t* fMasked,
           int columns, int rowBegin, int rowEnd, float* hi, float* lo, uint8_t* masked) {
    for (int r = rowBegin; r < rowEnd; ++r) {
        const size_t r0 = size_t(2 * r) * size_t(fColumns);
        const size_t r1 = size_t(std::min(2 * r + 1, fRows - 1)) * size_t(fColumns);
        const size_t o = size_t(r) * size_t(columns);
        for (int col = 0; col < columns; ++col) {
            const size_t c0 = size_t(2 * col), c1 = size_t(std::min(2 * col + 1, fColumns - 1));
            const float a = fHi[r0 + c0], b = fHi[r0 + c1], c = fHi[r1 + c0], d = fHi[r1 + c1];
            const float e = fLo[r0 + c0], f = fLo[r0 + c1], g = fLo[r1 + c0], h = fLo[r1 + c1];
            const bool ok = std::isfinite(a) && std::isfinite(b) && std::isfinite(c) &&
                            std::isfinite(d) && std::isfinite(e) && std::isfinite(f) &&
                            std::isfinite(g) && std::isfinite(h);
            const float top = std::max(std::max(a, b), std::max(c, d));
            const float bottom = std::min(std::min(e, f), std::min(g, h));
            hi[o + size_t(col)] = ok ? top : kNaN;
            lo[o + size_t(col)] = ok ? bottom : kNaN;
            if (masked)
                masked[o + size_t(col)] =
                    fMasked[r0 + c0] & fMasked[r0 + c1] & fMasked[r1 + c0] & fMasked[r1 + c1];
        }
    }
}

} // namespace

void HeatmapRaster::setData(int columns, int rows, LargeVector<float> values,
                            LargeVector<uint8_t> masked) {
    m_levels.clear();
    m_columns = m_rows = 0;
    if (columns <= 0 || rows <= 0 || int64_t(values.size()) != int64_t(columns) * rows)
        return;
    m_columns = columns;
    m_rows = rows;
    // Level 0 is the values themselves, kept as given (one cell is its own largest and
    // smallest value: no `lo`); non-finite cells are bad when painted.
    Level base;
    base.columns = columns;
    base.rows = rows;
    base.hi = std::move(values);
    if (masked.size() == base.hi.size()) {
        for (uint8_t& m : masked)
            m = m != 0;
        base.masked = std::move(masked);
    }
    m_levels.push_back(std::move(base));
    // Halve until the whole grid is a few blocks.
    while (m_levels.back().columns > 2 || m_levels.back().rows > 2) {
        const Level& f = m_levels.back();
        Level c;
        c.columns = (f.columns + 1) / 2;
        c.rows = (f.rows + 1) / 2;
        const size_t n = size_t(c.columns) * size_t(c.rows);
        c.hi.resize(n);
        c.lo.resize(n);
        if (!f.masked.empty())
            c.masked.resize(n);
        inChunks(c.rows, rowsPerPart(c.columns), [&](int64_t begin, int64_t end) {
            halve(f.columns, f.rows, f.hi.data(), f.lo.empty() ? f.hi.data() : f.lo.data(),
                  f.masked.empty() ? nullptr : f.masked.data(), c.columns, int(begin), int(end),
                  c.hi.data(), c.lo.data(), c.masked.empty() ? nullptr : c.masked.data());
        });
        m_levels.push_back(std::move(c));
    }
}

std::shared_ptr<const HeatmapData>
HeatmapData::build(int columns, int rows, LargeVector<float> values, LargeVector<uint8_t> masked) {
    auto d = std::make_shared<HeatmapData>();
    if (columns > 0 && rows > 0 && int64_t(values.size()) == int64_t(columns) * rows) {
        d->columns = columns;
        d->rows = rows;
        // The statistics by parts (a big map on several cores), merged.
        std::vector<ValueStats> parts(size_t(QThread::idealThreadCount()));
        std::atomic<size_t> next{0};
        inChunks(int64_t(values.size()), int64_t(1) << 22, [&](int64_t begin, int64_t end) {
            parts[next++] =
                ValueStats::scan(std::span(values).subspan(size_t(begin), size_t(end - begin)));
        });
        for (size_t i = 0; i < next; ++i)
            d->stats.add(parts[i]);
        d->raster.setData(columns, rows, std::move(values), std::move(masked));
        d->masked = d->raster.hasMask();
    }
    return d;
}

int64_t HeatmapRaster::bytes() const {
    int64_t n = 0;
    for (const Level& l : m_levels)
        n += int64_t((l.hi.size() + l.lo.size()) * sizeof(float) + l.masked.size());
    return n;
}

QImage HeatmapRaster::render(double xLeft, double xRight, double yTop, double yBottom, int width,
                             int height, const Colours& colours) const {
    m_blocksRead = 0;
    QImage image(std::max(1, width), std::max(1, height), QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::transparent);
    const double spanX = std::abs(xRight - xLeft), spanY = std::abs(yBottom - yTop);
    if (m_levels.empty() || width <= 0 || height <= 0 || !(spanX > 0) || !(spanY > 0))
        return image;
    // The coarsest level whose blocks fit in a pixel along both axes.
    int level = 0;
    const double finest = std::min(spanX / width, spanY / height);
    while (level + 1 < int(m_levels.size()) && double(1 << (level + 1)) <= finest)
        ++level;
    const Level& L = m_levels[size_t(level)];
    const auto& lut = colours.diverging ? divergingLut() : dataLut();
    const ColorScale& scale = colours.scale;
    const QRgb bad = 0xff000000u | kBadValueColor;

    // The blocks under pixel i of an axis of n pixels from coordinate `from` to `to`: cells c
    // whose [c - 0.5, c + 0.5) overlaps the pixel's interval, divided by 2^level; first > last
    // when the pixel is outside the grid.
    auto blocks = [level](double from, double to, int n, int cells, std::vector<int>& first,
                          std::vector<int>& last) {
        first.assign(size_t(n), 1);
        last.assign(size_t(n), 0);
        const double step = (to - from) / n;
        for (int i = 0; i < n; ++i) {
            double a = from + i * step, b = from + (i + 1) * step;
            if (a > b)
                std::swap(a, b);
            const double c0 = std::floor(a + 0.5), c1 = std::ceil(b + 0.5) - 1;
            if (c1 < 0 || c0 > cells - 1 || c1 < c0)
                continue;
            first[size_t(i)] = int(std::max(0.0, c0)) >> level;
            last[size_t(i)] = int(std::min(c1, double(cells - 1))) >> level;
        }
    };
    std::vector<int> colFirst, colLast, rowFirst, rowLast;
    blocks(xLeft, xRight, width, m_columns, colFirst, colLast);
    blocks(yTop, yBottom, height, m_rows, rowFirst, rowLast);
    for (int py = 0; py < height; ++py) {
        const int br0 = rowFirst[size_t(py)], br1 = rowLast[size_t(py)];
        if (br1 < br0)
            continue;
        auto* line = reinterpret_cast<QRgb*>(image.scanLine(py));
        // A line over the same blocks as the one above is the same line: a map with fewer rows
        // than pixels (30 layers in 300 px, the mask's single row) computes each row once.
        if (py > 0 && rowFirst[size_t(py - 1)] == br0 && rowLast[size_t(py - 1)] == br1) {
            std::copy_n(reinterpret_cast<const QRgb*>(image.constScanLine(py - 1)), width, line);
            continue;
        }
        for (int px = 0; px < width; ++px) {
            const int bc0 = colFirst[size_t(px)], bc1 = colLast[size_t(px)];
            if (bc1 < bc0)
                continue;
            float hi = -std::numeric_limits<float>::infinity(), lo = -hi;
            bool isBad = false, allMasked = !L.masked.empty();
            for (int br = br0; br <= br1; ++br) {
                const size_t base = size_t(br) * size_t(L.columns);
                for (int bc = bc0; bc <= bc1; ++bc) {
                    const float h = L.hi[base + size_t(bc)];
                    isBad = isBad || !std::isfinite(h);
                    hi = std::max(hi, h);
                    lo = std::min(lo, L.lo.empty() ? h : L.lo[base + size_t(bc)]);
                    if (allMasked)
                        allMasked = L.masked[base + size_t(bc)] != 0;
                }
            }
            m_blocksRead += int64_t(br1 - br0 + 1) * (bc1 - bc0 + 1);
            QRgb colour;
            if (isBad) {
                colour = bad;
            } else {
                const float v = colours.diverging && std::abs(lo) > std::abs(hi) ? lo : hi;
                // v is finite here; the linear case is ColorScale::normalized() inlined (this
                // runs once per pixel).
                double t = scale.log ? scale.normalized(double(v))
                                     : (double(v) - scale.lo) / (scale.hi - scale.lo);
                t = t > 0.0 ? (t < 1.0 ? t : 1.0) : 0.0; // also NaN -> 0
                colour = lut[size_t(t * 255.0 + 0.5)];
            }
            line[px] = allMasked ? greyed(colour) : colour;
        }
    }
    return image;
}

} // namespace kvscope::widgets
