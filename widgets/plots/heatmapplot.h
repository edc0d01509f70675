// HeatmapPlot: the one heatmap viewer of kvscope (KV heatmaps, attention, mask, diff).
//
// - Rendering goes through HeatmapRaster: an image of the plot's pixels built from a pyramid
//   of the data, so 4,096 x 4,096 cells cost what the screen costs; a NaN/Inf cell stays
//   visible (magenta) at every zoom and is counted.
// - Wheel zooms, drag pans, Shift+drag zooms to a rectangle, double-click or "Reset view"
//   shows everything again; the view never leaves the data.
// - Hovering shows the cell's value in the read-out line (panels describe their cells: token
//   text, positions, layer/head); token text replaces numbers on an axis once zoomed in far
//   enough to print one label per cell; integer axes never get fractional ticks.
// - Colour scales fit the data: automatic (optionally including 0), manual min/max, log, per-
//   row normalised (attention) and diverging zero-neutral (differences).
// - Empty data shows a sentence instead of meaningless axes.
// Paints only: the data arrives by setData() and the colour math lives in colorscale.h.
#pragma once

#include "colorscale.h"
#include "heatmapraster.h"

#include <QImage>
#include <QSharedPointer>
#include <QStringList>
#include <QWidget>

class QAbstractScrollArea;

#include <functional>
#include <memory>
#include <span>
#include <optional>
#include <vector>

class QCustomPlot;
class QCPColorScale;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QStackedWidget;
class QToolButton;

namespace kvscope::widgets {

class ElidedLabel;

class HeatmapLayer;
class CellTicker;

class HeatmapPlot : public QWidget {
    Q_OBJECT
public:
    explicit HeatmapPlot(const QString& title, QWidget* parent = nullptr);
    ~HeatmapPlot() override;

    // values: [rows, columns] row-major (row = y, column = x). The view is reset to show all.
    // masked: empty or [rows, columns], non-zero = greyed.
    void setData(int columns, int rows, std::span<const float> values,
                 std::span<const uint8_t> masked = {});
    // Data prepared on another thread (HeatmapData::build): painting only, nothing scanned here.
    void setPrepared(HeatmapDataPtr data);
    void setLabels(const QString& x, const QString& y, const QString& value);
    void setMarker(std::optional<HeatmapCell> cell);
    std::optional<HeatmapCell> marker() const;
    // Fixed range (lo/hi) or automatic (the finite range of the data).
    void setManualRange(std::optional<std::pair<double, double>> range);
    // A difference map: automatic ranges are symmetric around zero (ColorScale::symmetric)
    // on a diverging gradient, so "no difference" is always white.
    void setDiverging(bool on);
    // Offers the scale modes (linear; log; per-row normalised) in the controls.
    enum class ScaleMode { Linear, Log, RowNormalized };
    void setScaleModes(bool offered);
    void setScaleMode(ScaleMode mode);
    ScaleMode scaleMode() const { return m_mode; }
    // Auto range stretched to include 0.
    void setIncludeZero(bool on);
    // Text per column (x) or row (y), shown on that axis when zoomed in far enough for one
    // label per cell; empty: numbers.
    void setAxisTokens(Qt::Orientation axis, QStringList labels);
    QStringList axisTokens(Qt::Orientation axis) const;
    // Whether the axis labels each cell with its token (there is room for one a cell).
    bool axisShowsTokens(Qt::Orientation axis) const;
    // Wording of the read-out for a hovered cell (default: "x · y · value").
    using Describe = std::function<QString(HeatmapCell cell, float value)>;
    void setDescribe(Describe describe) { m_describe = std::move(describe); }
    // What an empty plot says ("Run a prompt to fill the cache").
    void setEmptyText(const QString& text);
    // The y axis grows downwards (row 0 at the top), as for query x key maps.
    void setRowsDownwards(bool on);
    // The plot sits in a scrolling panel: the plain wheel scrolls `area` (the panel), Ctrl+wheel
    // zooms, and the hint says so. nullptr: the wheel zooms.
    void setWheelScrolls(QAbstractScrollArea* area);
    // Shows the data rectangle [x0, x1] x [y0, y1] (data coordinates, clamped to the data).
    void zoomTo(double x0, double x1, double y0, double y1);
    void resetView();

    const HeatmapGeometry& geometry() const { return m_geometry; }
    const ColorScale& scale() const { return m_scale; }
    const ValueStats& stats() const { return m_data->stats; }
    float value(HeatmapCell c) const { return m_data->values()[size_t(m_geometry.index(c))]; }
    QCustomPlot* plot() const { return m_plot; }
    // The read-out line's current text (hover, or the hint).
    QString readout() const;
    bool isEmpty() const { return m_geometry.empty(); }
    // Blocks the last paint read from the pyramid (the cost bound of kvscope-bench-gui).
    int64_t lastBlocksRead() const;
    // Memory of the values and their raster pyramid.
    int64_t rasterBytes() const;
    QImage image(); // the plot as drawn, for "Export PNG…"
    QString toCsv() const;

signals:
    void cellClicked(int column, int row);
    void cellHovered(int column, int row);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void applyRange();
    void updateBadLabel();
    void useRaster();
    void clampRanges();
    void hover(const QPointF& pixel);
    // The read-out line, elided to the plot's width (the whole text in its tooltip).
    void setReadout(const QString& text);
    QString describe(HeatmapCell cell) const;

    QString m_title, m_xLabel, m_yLabel, m_valueLabel;
    QStackedWidget* m_stack;
    QLabel* m_empty;
    QCustomPlot* m_plot;
    HeatmapLayer* m_layer;
    QSharedPointer<CellTicker> m_xTicker;
    QSharedPointer<CellTicker> m_yTicker;
    bool m_redoingTicks = false; // the replot asked for after a layout moved a tick decision
    QCPColorScale* m_colorScale;
    QComboBox* m_modeBox;
    QCheckBox* m_zero;
    QCheckBox* m_auto;
    QDoubleSpinBox* m_lo;
    QDoubleSpinBox* m_hi;
    QToolButton* m_reset;
    QLabel* m_badLabel;
    ElidedLabel* m_readout;
    QString m_hint;
    QAbstractScrollArea* m_wheelScrolls = nullptr;
    HeatmapGeometry m_geometry;
    ColorScale m_scale;
    HeatmapDataPtr m_data;
    std::unique_ptr<HeatmapRaster> m_rowRaster; // per-row normalised, built when chosen
    Describe m_describe;
    ScaleMode m_mode = ScaleMode::Linear;
    bool m_diverging = false;
    bool m_clamping = false;
    QPoint m_pressedAt;
};

} // namespace kvscope::widgets
