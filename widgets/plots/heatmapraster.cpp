#include "heatmapraster.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::widgets {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::array<QRgb, 256> makeLut(uint32_t (*colour)(double)) {
    std::array<QRgb, 256> lut{};
    for (int i = 0; i < 256; ++i)
        lut[size_t(i)] = 0xff000000u | colour(i / 255.0);
    return lut;
}

// Greys a colour the way the old overlay did (dark grey at 75% over the data colour).
QRgb greyed(QRgb c) {
    auto mix = [](int a) { return (a + 3 * 40) / 4; };
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

void HeatmapRaster::setData(int columns, int rows, const std::vector<float>& values,
                            const std::vector<uint8_t>& masked) {
    m_levels.clear();
    m_columns = m_rows = 0;
    if (columns <= 0 || rows <= 0 || int64_t(values.size()) != int64_t(columns) * rows)
        return;
    m_columns = columns;
    m_rows = rows;
    Level base;
    base.columns = columns;
    base.rows = rows;
    base.hi.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i)
        base.hi[i] = std::isfinite(values[i]) ? values[i] : kNaN;
    // One cell is its own largest and smallest value: level 0 keeps only `hi`.
    if (masked.size() == values.size())
        base.masked.assign(masked.begin(), masked.end());
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
        for (int r = 0; r < c.rows; ++r) {
            const int r0 = 2 * r, r1 = std::min(2 * r + 1, f.rows - 1);
            for (int col = 0; col < c.columns; ++col) {
                const int c0 = 2 * col, c1 = std::min(2 * col + 1, f.columns - 1);
                float hi = -std::numeric_limits<float>::infinity(), lo = -hi;
                bool bad = false, allMasked = true;
                for (int rr : {r0, r1})
                    for (int cc : {c0, c1}) {
                        const size_t i = size_t(rr) * size_t(f.columns) + size_t(cc);
                        const float h = f.hi[i], l = f.lo.empty() ? h : f.lo[i];
                        bad = bad || std::isnan(h);
                        hi = std::max(hi, h);
                        lo = std::min(lo, l);
                        if (!f.masked.empty())
                            allMasked = allMasked && f.masked[i];
                    }
                const size_t o = size_t(r) * size_t(c.columns) + size_t(col);
                c.hi[o] = bad ? kNaN : hi;
                c.lo[o] = bad ? kNaN : lo;
                if (!c.masked.empty())
                    c.masked[o] = allMasked;
            }
        }
        m_levels.push_back(std::move(c));
    }
}

std::shared_ptr<const HeatmapData> HeatmapData::build(int columns, int rows,
                                                      std::vector<float> values,
                                                      const std::vector<uint8_t>& masked) {
    auto d = std::make_shared<HeatmapData>();
    if (columns > 0 && rows > 0 && int64_t(values.size()) == int64_t(columns) * rows) {
        d->columns = columns;
        d->rows = rows;
        d->values = std::move(values);
        d->stats = ValueStats::scan(d->values);
        d->raster.setData(columns, rows, d->values, masked);
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
                    isBad = isBad || std::isnan(h);
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
                const double t = scale.normalized(double(v)); // NaN for +-Inf
                colour = std::isnan(t) ? bad : lut[size_t(std::lround(t * 255.0))];
            }
            line[px] = allMasked ? greyed(colour) : colour;
        }
    }
    return image;
}

} // namespace kvscope::widgets
