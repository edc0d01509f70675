// HeatmapPlot: one QCPColorMap with its colour scale, a range control (auto or min/max), the
// NaN/Inf overlay (bad cells painted magenta and counted), an optional "masked" overlay
// (greyed cells), a marker on the selected cell, click-to-select and PNG/CSV export.
// Used by the KV heatmaps, the attention pattern and the mask view. Paints only: the data
// arrives by setData() and the geometry/colour math lives in colorscale.h.
#pragma once

#include "colorscale.h"

#include <QImage>
#include <QWidget>

#include <optional>
#include <vector>

class QCustomPlot;
class QCPColorMap;
class QCPColorScale;
class QCPItemRect;
class QCheckBox;
class QDoubleSpinBox;
class QLabel;

namespace kvscope::widgets {

class HeatmapPlot : public QWidget {
    Q_OBJECT
public:
    explicit HeatmapPlot(const QString& title, QWidget* parent = nullptr);

    // values: [rows, columns] row-major (row = y, column = x).
    void setData(int columns, int rows, std::vector<float> values);
    void setLabels(const QString& x, const QString& y, const QString& value);
    // [rows, columns], non-zero = masked (drawn greyed over the data); empty clears it.
    void setMaskOverlay(std::vector<uint8_t> masked);
    void setMarker(std::optional<HeatmapCell> cell);
    // Fixed range (lo/hi) or automatic (the finite range of the data).
    void setManualRange(std::optional<std::pair<double, double>> range);
    // A difference map: automatic ranges are symmetric around zero (ColorScale::symmetric)
    // on a diverging gradient, so "no difference" is always white.
    void setDiverging(bool on);

    const HeatmapGeometry& geometry() const { return m_geometry; }
    const ColorScale& scale() const { return m_scale; }
    const ValueStats& stats() const { return m_stats; }
    float value(HeatmapCell c) const { return m_values[size_t(m_geometry.index(c))]; }
    QCustomPlot* plot() const { return m_plot; }
    QImage image(); // the plot as drawn, for "Export PNG…"
    QString toCsv() const;

signals:
    void cellClicked(int column, int row);

private:
    void applyRange();
    void updateBadLabel();

    QString m_title, m_xLabel, m_yLabel, m_valueLabel;
    QCustomPlot* m_plot;
    QCPColorMap* m_map;
    QCPColorMap* m_overlay;
    QCPColorScale* m_colorScale;
    QCPItemRect* m_marker;
    QCheckBox* m_auto;
    QDoubleSpinBox* m_lo;
    QDoubleSpinBox* m_hi;
    QLabel* m_badLabel;
    HeatmapGeometry m_geometry;
    ValueStats m_stats;
    ColorScale m_scale;
    std::vector<float> m_values;
    bool m_diverging = false;
};

} // namespace kvscope::widgets
