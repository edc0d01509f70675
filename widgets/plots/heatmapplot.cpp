#include "heatmapplot.h"

#include "csv.h"
#include "exportmenu.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace kvscope::widgets {

namespace {

QCPColorGradient dataGradient() {
    QCPColorGradient g;
    g.clearColorStops();
    for (int i = 0; i <= 8; ++i) {
        const double t = i / 8.0;
        g.setColorStopAt(t, QColor::fromRgb(gradientColor(t)));
    }
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor::fromRgb(kBadValueColor));
    return g;
}

QCPColorGradient divergingGradient() {
    QCPColorGradient g;
    g.clearColorStops();
    for (int i = 0; i <= 8; ++i) {
        const double t = i / 8.0;
        g.setColorStopAt(t, QColor::fromRgb(divergingColor(t)));
    }
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor::fromRgb(kBadValueColor));
    return g;
}

QCPColorGradient overlayGradient() {
    QCPColorGradient g;
    g.clearColorStops();
    g.setColorStopAt(0.0, QColor(0, 0, 0, 0));
    g.setColorStopAt(0.49, QColor(0, 0, 0, 0));
    g.setColorStopAt(0.5, QColor(40, 40, 40, 190));
    g.setColorStopAt(1.0, QColor(40, 40, 40, 190));
    return g;
}

// QCPColorMap draws a dimension of size 1 with zero extent (its cell size comes from the
// distance between the first and last cell centres), so a single row or column is stored
// twice, with centres at +-0.25: together they cover [-0.5, 0.5] like any other cell.
template <typename Fn> void fillMap(QCPColorMapData* data, int columns, int rows, Fn value) {
    const int keys = columns == 1 ? 2 : columns;
    const int values = rows == 1 ? 2 : rows;
    data->setSize(keys, values);
    data->setRange(columns == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, columns - 1),
                   rows == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, rows - 1));
    for (int r = 0; r < values; ++r)
        for (int c = 0; c < keys; ++c)
            data->setCell(c, r, value(columns == 1 ? 0 : c, rows == 1 ? 0 : r));
}

} // namespace

HeatmapPlot::HeatmapPlot(const QString& title, QWidget* parent)
    : QWidget(parent), m_title(title), m_plot(new QCustomPlot(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    auto* controls = new QHBoxLayout;
    auto* titleLabel = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), this);
    titleLabel->setWordWrap(true); // two lines in a narrow dock rather than a wider dock
    m_auto = new QCheckBox(tr("Auto range"), this);
    m_auto->setChecked(true);
    m_lo = new QDoubleSpinBox(this);
    m_hi = new QDoubleSpinBox(this);
    for (auto* s : {m_lo, m_hi}) {
        s->setRange(-1e9, 1e9);
        s->setDecimals(4);
        s->setEnabled(false);
        s->setKeyboardTracking(false);
        // Wide enough for the usual ranges; the +-1e9 range alone would make every heatmap
        // (and the docks holding two side by side) hundreds of pixels wider.
        s->setMinimumWidth(s->fontMetrics().horizontalAdvance(QStringLiteral("-00.0000")) + 32);
    }
    m_lo->setToolTip(tr("Lowest value on the colour scale"));
    m_hi->setToolTip(tr("Highest value on the colour scale"));
    m_badLabel = new QLabel(this);
    m_badLabel->setStyleSheet(QStringLiteral("color: #c000c0; font-weight: bold"));
    controls->addWidget(titleLabel);
    controls->addStretch();
    controls->addWidget(m_badLabel);
    controls->addWidget(m_auto);
    controls->addWidget(new QLabel(tr("min"), this));
    controls->addWidget(m_lo);
    controls->addWidget(new QLabel(tr("max"), this));
    controls->addWidget(m_hi);
    layout->addLayout(controls);
    layout->addWidget(m_plot, 1);

    m_plot->setMinimumSize(200, 120);
    m_plot->axisRect()->setupFullAxesBox(true);
    m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
    m_map->setInterpolate(false);
    m_map->setTightBoundary(false);
    m_colorScale = new QCPColorScale(m_plot);
    m_plot->plotLayout()->addElement(0, 1, m_colorScale);
    m_colorScale->setType(QCPAxis::atRight);
    m_map->setColorScale(m_colorScale);
    m_colorScale->setGradient(dataGradient());
    auto* margins = new QCPMarginGroup(m_plot);
    m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_colorScale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);

    m_overlay = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
    m_overlay->setInterpolate(false);
    m_overlay->setGradient(overlayGradient());
    m_overlay->setDataRange(QCPRange(0, 1));
    m_overlay->setVisible(false);

    m_marker = new QCPItemRect(m_plot);
    m_marker->setPen(QPen(Qt::red, 2));
    m_marker->setBrush(Qt::NoBrush);
    m_marker->setVisible(false);

    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        if (e->button() != Qt::LeftButton)
            return;
        const double x = m_plot->xAxis->pixelToCoord(e->position().x());
        const double y = m_plot->yAxis->pixelToCoord(e->position().y());
        if (auto cell = m_geometry.cellAt(x, y))
            emit cellClicked(cell->column, cell->row);
    });
    connect(m_auto, &QCheckBox::toggled, this, [this](bool on) {
        m_lo->setEnabled(!on);
        m_hi->setEnabled(!on);
        applyRange();
        m_plot->replot();
    });
    for (auto* s : {m_lo, m_hi})
        connect(s, &QDoubleSpinBox::valueChanged, this, [this] {
            if (!m_auto->isChecked()) {
                applyRange();
                m_plot->replot();
            }
        });
    installExportMenu(m_plot, {title.toLower().replace(QLatin1Char(' '), QLatin1Char('-')),
                               [this] { return image(); }, [this] { return toCsv(); }});
}

void HeatmapPlot::setLabels(const QString& x, const QString& y, const QString& value) {
    m_xLabel = x;
    m_yLabel = y;
    m_valueLabel = value;
    m_plot->xAxis->setLabel(x);
    m_plot->yAxis->setLabel(y);
    m_colorScale->axis()->setLabel(value);
}

void HeatmapPlot::setData(int columns, int rows, std::vector<float> values) {
    m_geometry = {columns, rows};
    m_values = std::move(values);
    if (m_geometry.empty() || int64_t(m_values.size()) != int64_t(columns) * rows) {
        m_geometry = {};
        m_values.clear();
    }
    m_stats = ValueStats::scan(m_values);
    auto* data = m_map->data();
    if (m_geometry.empty()) {
        data->setSize(1, 1);
        data->setRange(QCPRange(0, 0), QCPRange(0, 0));
        data->fill(std::numeric_limits<double>::quiet_NaN());
        m_map->setVisible(false);
    } else {
        m_map->setVisible(true);
        fillMap(data, columns, rows, [this, columns](int c, int r) {
            return ColorScale::displayValue(m_values[size_t(r) * columns + c]);
        });
    }
    m_plot->xAxis->setRange(m_geometry.xMin(), std::max(0.5, m_geometry.xMax()));
    m_plot->yAxis->setRange(m_geometry.yMin(), std::max(0.5, m_geometry.yMax()));
    m_overlay->setVisible(false); // an overlay belongs to the data it was made for
    applyRange();
    updateBadLabel();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setMaskOverlay(std::vector<uint8_t> masked) {
    const int cols = m_geometry.columns, rows = m_geometry.rows;
    if (masked.empty() || int64_t(masked.size()) != int64_t(cols) * rows) {
        m_overlay->setVisible(false);
    } else {
        fillMap(m_overlay->data(), cols, rows,
                [&masked, cols](int c, int r) { return masked[size_t(r) * cols + c] ? 1.0 : 0.0; });
        m_overlay->setVisible(true);
    }
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setMarker(std::optional<HeatmapCell> cell) {
    if (!cell || cell->column >= m_geometry.columns || cell->row >= m_geometry.rows) {
        m_marker->setVisible(false);
    } else {
        m_marker->topLeft->setCoords(cell->column - 0.5, cell->row + 0.5);
        m_marker->bottomRight->setCoords(cell->column + 0.5, cell->row - 0.5);
        m_marker->setVisible(true);
    }
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setManualRange(std::optional<std::pair<double, double>> range) {
    if (range) {
        m_lo->setValue(range->first);
        m_hi->setValue(range->second);
    }
    m_auto->setChecked(!range);
    applyRange();
}

void HeatmapPlot::setDiverging(bool on) {
    m_diverging = on;
    m_colorScale->setGradient(on ? divergingGradient() : dataGradient());
    applyRange();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::applyRange() {
    const ColorScale automatic =
        m_diverging ? ColorScale::symmetric(m_stats) : ColorScale::fromStats(m_stats);
    m_scale = m_auto->isChecked() ? automatic : ColorScale::manual(m_lo->value(), m_hi->value());
    if (m_auto->isChecked()) {
        const QSignalBlocker b1(m_lo), b2(m_hi);
        m_lo->setValue(m_scale.lo);
        m_hi->setValue(m_scale.hi);
    }
    m_map->setDataRange(QCPRange(m_scale.lo, m_scale.hi));
}

void HeatmapPlot::updateBadLabel() {
    if (m_stats.nonFinite() == 0) {
        m_badLabel->clear();
        m_badLabel->setToolTip({});
        return;
    }
    m_badLabel->setText(
        tr("%1 NaN · %2 +Inf · %3 −Inf").arg(m_stats.nan).arg(m_stats.posInf).arg(m_stats.negInf));
    m_badLabel->setToolTip(tr("Non-finite cells are painted magenta"));
}

QImage HeatmapPlot::image() {
    m_plot->replot();
    return m_plot->toPixmap(m_plot->width(), m_plot->height()).toImage();
}

QString HeatmapPlot::toCsv() const {
    CsvWriter csv({m_xLabel.isEmpty() ? QStringLiteral("x") : m_xLabel,
                   m_yLabel.isEmpty() ? QStringLiteral("y") : m_yLabel,
                   m_valueLabel.isEmpty() ? QStringLiteral("value") : m_valueLabel});
    for (int r = 0; r < m_geometry.rows; ++r)
        for (int c = 0; c < m_geometry.columns; ++c)
            csv.row(
                {QString::number(c), QString::number(r),
                 QString::number(double(m_values[size_t(r) * m_geometry.columns + c]), 'g', 8)});
    return csv.text();
}

} // namespace kvscope::widgets
