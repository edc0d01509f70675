#include "heatmapplot.h"

#include "elidedlabel.h"

#include "csv.h"
#include "exportmenu.h"
#include "heatmapraster.h"
#include "plotwidget.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QAbstractScrollArea>
#include <QCoreApplication>
#include <QMouseEvent>
#include <QScrollBar>
#include <QWheelEvent>
#include <QStackedWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <cmath>

namespace kvscope::widgets {

namespace {

QCPColorGradient gradientFrom(uint32_t (*colour)(double)) {
    QCPColorGradient g;
    g.clearColorStops();
    for (int i = 0; i <= 8; ++i) {
        const double t = i / 8.0;
        g.setColorStopAt(t, QColor::fromRgb(colour(t)));
    }
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor::fromRgb(kBadValueColor));
    return g;
}

// The smallest step of 1, 2, 5 x 10^k (k >= 0) giving at most `maxTicks` ticks over `span`.
double integerStep(double span, int maxTicks) {
    const double raw = std::max(1.0, span / std::max(1, maxTicks));
    double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * magnitude >= raw)
            return m * magnitude;
    return 10 * magnitude;
}

constexpr int kTokenLabelChars = 14;

} // namespace

// Integer ticks for a cell axis; token text per cell once there is room for one label per cell.
class CellTicker : public QCPAxisTicker {
public:
    explicit CellTicker(QCPAxis* axis) : m_axis(axis) {}
    QStringList labels;
    bool tokenMode() const { return m_tokenMode; }

    // Decides whether the axis has room for one label per visible cell, from the axis rect's
    // size as last laid out. True when the decision changed.
    bool update() {
        const bool wasTokenMode = m_tokenMode;
        const int wasMaxTicks = m_maxTicks;
        const QCPRange r = m_axis->range();
        const bool horizontal = m_axis->orientation() == Qt::Horizontal;
        const int pixels = horizontal ? m_axis->axisRect()->width() : m_axis->axisRect()->height();
        const double perCell = r.size() > 0 ? pixels / r.size() : 0;
        const QFontMetrics fm(m_axis->tickLabelFont());
        // Horizontal token labels are drawn rotated, so both axes need a line height per cell.
        m_tokenMode = !labels.isEmpty() && perCell >= fm.height() + 2;
        m_axis->setTickLabelRotation(m_tokenMode && horizontal ? 90 : 0);
        const int spacing =
            horizontal ? fm.horizontalAdvance(QStringLiteral("00000")) + 12 : fm.height() * 2;
        m_maxTicks = std::max(2, pixels / std::max(1, spacing));
        return m_tokenMode != wasTokenMode || m_maxTicks != wasMaxTicks;
    }

protected:
    double getTickStep(const QCPRange& range) override {
        return m_tokenMode ? 1.0 : integerStep(range.size(), m_maxTicks);
    }
    int getSubTickCount(double) override { return 0; }
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar,
                         int precision) override {
        const long long i = std::llround(tick);
        if (m_tokenMode && i >= 0 && i < labels.size()) {
            QString text = labels[int(i)];
            if (text.size() > kTokenLabelChars)
                text = text.left(kTokenLabelChars - 1) + QChar(0x2026);
            return QStringLiteral("%1 %2").arg(i).arg(text);
        }
        return QCPAxisTicker::getTickLabel(double(i), locale, formatChar, precision);
    }

private:
    QCPAxis* m_axis;
    bool m_tokenMode = false;
    int m_maxTicks = 6;
};

// Draws the raster for the axes' visible range at the axis rect's pixel size (device pixels),
// and the selection marker at a visible size whatever the zoom. Keeps the last image while
// nothing it depends on changed, so hover and marker repaints cost a blit.
class HeatmapLayer : public QCPAbstractPlottable {
public:
    HeatmapLayer(QCPAxis* key, QCPAxis* value) : QCPAbstractPlottable(key, value) {
        setAntialiased(false);
    }
    const HeatmapRaster* raster = nullptr;
    HeatmapRaster::Colours colours;
    std::optional<HeatmapCell> marker;
    uint64_t revision = 0; // bumped by the owner when data or colours change

    double selectTest(const QPointF&, bool, QVariant*) const override { return -1; }
    QCPRange getKeyRange(bool& found, QCP::SignDomain) const override {
        found = raster && raster->columns() > 0;
        return found ? QCPRange(-0.5, raster->columns() - 0.5) : QCPRange();
    }
    QCPRange getValueRange(bool& found, QCP::SignDomain, const QCPRange&) const override {
        found = raster && raster->rows() > 0;
        return found ? QCPRange(-0.5, raster->rows() - 0.5) : QCPRange();
    }

protected:
    void draw(QCPPainter* painter) override {
        if (!raster || raster->columns() <= 0)
            return;
        const QRect rect = clipRect();
        const double dpr = parentPlot()->devicePixelRatioF();
        const int w = int(std::lround(rect.width() * dpr)),
                  h = int(std::lround(rect.height() * dpr));
        const double xl = keyAxis()->pixelToCoord(rect.left()),
                     xr = keyAxis()->pixelToCoord(rect.left() + rect.width());
        const double yt = valueAxis()->pixelToCoord(rect.top()),
                     yb = valueAxis()->pixelToCoord(rect.top() + rect.height());
        const std::array<double, 4> key{xl, xr, yt, yb};
        if (m_cache.isNull() || m_cacheKey != key || m_cacheRevision != revision ||
            m_cache.size() != QSize(w, h)) {
            m_cache = raster->render(xl, xr, yt, yb, w, h, colours);
            m_cache.setDevicePixelRatio(dpr);
            m_cacheKey = key;
            m_cacheRevision = revision;
            m_blocks = raster->lastBlocksRead();
        }
        painter->drawImage(rect.topLeft(), m_cache);
        if (marker)
            drawMarker(painter, rect, *marker);
    }
    void drawLegendIcon(QCPPainter*, const QRectF&) const override {}

public:
    int64_t blocks() const { return m_blocks; }

private:
    void drawMarker(QCPPainter* painter, const QRect& clip, HeatmapCell c) const {
        const double x0 = keyAxis()->coordToPixel(c.column - 0.5),
                     x1 = keyAxis()->coordToPixel(c.column + 0.5);
        const double y0 = valueAxis()->coordToPixel(c.row - 0.5),
                     y1 = valueAxis()->coordToPixel(c.row + 0.5);
        QRectF cell = QRectF(QPointF(x0, y0), QPointF(x1, y1)).normalized();
        // At least 9 px, so the selection is visible when thousands of cells share the width.
        const double minSide = 9;
        if (cell.width() < minSide)
            cell.adjust(-(minSide - cell.width()) / 2, 0, (minSide - cell.width()) / 2, 0);
        if (cell.height() < minSide)
            cell.adjust(0, -(minSide - cell.height()) / 2, 0, (minSide - cell.height()) / 2);
        painter->save();
        painter->setClipRect(clip);
        QPen guide(QColor(255, 40, 40, 110), 1, Qt::DashLine);
        painter->setPen(guide);
        painter->drawLine(QPointF(cell.center().x(), clip.top()),
                          QPointF(cell.center().x(), cell.top()));
        painter->drawLine(QPointF(cell.center().x(), cell.bottom()),
                          QPointF(cell.center().x(), clip.bottom()));
        painter->drawLine(QPointF(clip.left(), cell.center().y()),
                          QPointF(cell.left(), cell.center().y()));
        painter->drawLine(QPointF(cell.right(), cell.center().y()),
                          QPointF(clip.right(), cell.center().y()));
        painter->setPen(QPen(Qt::white, 4));
        painter->drawRect(cell);
        painter->setPen(QPen(QColor(220, 0, 0), 2));
        painter->drawRect(cell);
        painter->restore();
    }

    QImage m_cache;
    std::array<double, 4> m_cacheKey{};
    uint64_t m_cacheRevision = 0;
    int64_t m_blocks = 0;
};

HeatmapPlot::HeatmapPlot(const QString& title, QWidget* parent)
    : QWidget(parent), m_title(title), m_data(std::make_shared<HeatmapData>()),
      m_rowRaster(std::make_unique<HeatmapRaster>()) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    auto* controls = new QHBoxLayout;
    auto* titleLabel = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), this);
    titleLabel->setWordWrap(true); // two lines in a narrow dock rather than a wider dock
    m_modeBox = new QComboBox(this);
    m_modeBox->addItem(tr("linear"), int(ScaleMode::Linear));
    m_modeBox->addItem(tr("log"), int(ScaleMode::Log));
    m_modeBox->addItem(tr("per row"), int(ScaleMode::RowNormalized));
    m_modeBox->setToolTip(tr("Colour scale: linear, logarithmic (small values become visible), or "
                             "each row divided by its largest value (the shape of every "
                             "query's attention, however flat)"));
    m_modeBox->setVisible(false);
    m_zero = new QCheckBox(tr("from 0"), this);
    m_zero->setToolTip(tr("Automatic range starts at zero (near-uniform data keeps its "
                          "true contrast)"));
    m_auto = new QCheckBox(tr("Auto"), this);
    m_auto->setToolTip(tr("Colour range from the data; untick to set min and max"));
    m_auto->setChecked(true);
    m_lo = new QDoubleSpinBox(this);
    m_hi = new QDoubleSpinBox(this);
    for (auto* s : {m_lo, m_hi}) {
        s->setRange(-1e9, 1e9);
        s->setDecimals(4);
        s->setVisible(false); // shown when "Auto" is unticked: narrow docks stay narrow
        s->setEnabled(false);
        s->setKeyboardTracking(false);
        // Wide enough for the usual ranges; the +-1e9 range alone would make every heatmap
        // (and the docks holding two side by side) hundreds of pixels wider.
        s->setMinimumWidth(s->fontMetrics().horizontalAdvance(QStringLiteral("-00.0000")) + 32);
        s->setMaximumWidth(s->minimumWidth());
    }
    m_lo->setToolTip(tr("Lowest value on the colour scale"));
    m_hi->setToolTip(tr("Highest value on the colour scale"));
    m_reset = new QToolButton(this);
    m_reset->setText(QStringLiteral("⟲"));
    m_reset->setToolTip(tr("Reset view: show every cell (also: double-click the plot)"));
    m_badLabel = new QLabel(this);
    m_badLabel->setStyleSheet(QStringLiteral("color: #c000c0; font-weight: bold"));
    controls->addWidget(titleLabel, 1);
    controls->addWidget(m_badLabel);
    controls->addWidget(m_modeBox);
    controls->addWidget(m_zero);
    controls->addWidget(m_auto);
    controls->addWidget(m_lo);
    controls->addWidget(m_hi);
    controls->addWidget(m_reset);
    layout->addLayout(controls);

    m_stack = new QStackedWidget(this);
    m_empty = new QLabel(tr("No data"), m_stack);
    m_empty->setAlignment(Qt::AlignCenter);
    m_empty->setWordWrap(true);
    m_empty->setStyleSheet(QStringLiteral("color: palette(mid); font-size: 11pt"));
    m_plot = newPlot(m_stack);
    m_stack->addWidget(m_empty);
    m_stack->addWidget(m_plot);
    layout->addWidget(m_stack, 1);
    m_hint = tr("Wheel: zoom · drag: pan · Shift+drag: zoom to a region · double-click: reset");
    m_readout = new ElidedLabel(m_hint, this); // never widens the dock
    m_readout->setMinimumWidth(80);
    layout->addWidget(m_readout);

    m_plot->setMinimumSize(200, 120);
    m_plot->axisRect()->setupFullAxesBox(true);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->setSelectionRectMode(QCP::srmNone);
    m_plot->setMouseTracking(true);
    m_plot->installEventFilter(this);
    m_xTicker = QSharedPointer<CellTicker>::create(m_plot->xAxis);
    m_yTicker = QSharedPointer<CellTicker>::create(m_plot->yAxis);
    m_plot->xAxis->setTicker(m_xTicker);
    m_plot->yAxis->setTicker(m_yTicker);
    m_layer = new HeatmapLayer(m_plot->xAxis, m_plot->yAxis);
    m_layer->raster = &m_data->raster;
    m_colorScale = new QCPColorScale(m_plot);
    m_plot->plotLayout()->addElement(0, 1, m_colorScale);
    m_colorScale->setType(QCPAxis::atRight);
    m_colorScale->setGradient(gradientFrom(gradientColor));
    m_colorScale->setBarWidth(12);
    auto* margins = new QCPMarginGroup(m_plot);
    m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_colorScale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);

    connect(m_plot, &QCustomPlot::beforeReplot, this, [this] {
        m_xTicker->update();
        m_yTicker->update();
    });
    // The ticks of a replot are made before its layout, from the axis rect's previous size: a
    // plot shrunk in one step (a floating dock docked again) kept one token label per row,
    // piled over each other, until something else replotted. Once laid out, a decision that
    // no longer holds is redone by one more replot (one: the labels move the margins, which
    // could move the decision back and forth).
    connect(m_plot, &QCustomPlot::afterLayout, this, [this] {
        const bool x = m_xTicker->update();
        const bool y = m_yTicker->update();
        if ((x || y) && !m_redoingTicks) {
            m_redoingTicks = true;
            m_plot->replot(QCustomPlot::rpQueuedReplot);
        } else {
            m_redoingTicks = false;
        }
    });
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
            [this] { clampRanges(); });
    connect(m_plot->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
            [this] { clampRanges(); });
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        // Shift+drag draws a rectangle to zoom into; a plain drag pans (set before QCustomPlot
        // handles this press).
        m_plot->setSelectionRectMode(e->modifiers() & Qt::ShiftModifier ? QCP::srmCustom
                                                                        : QCP::srmNone);
    });
    connect(m_plot->selectionRect(), &QCPSelectionRect::accepted, this,
            [this](const QRect& dragged, QMouseEvent*) {
                m_plot->setSelectionRectMode(QCP::srmNone);
                const QRect r = dragged.normalized();
                if (r.width() < 3 || r.height() < 3)
                    return;
                zoomTo(m_plot->xAxis->pixelToCoord(r.left()),
                       m_plot->xAxis->pixelToCoord(r.right()), m_plot->yAxis->pixelToCoord(r.top()),
                       m_plot->yAxis->pixelToCoord(r.bottom()));
            });
    connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { resetView(); });
    connect(m_plot, &QCustomPlot::mouseMove, this,
            [this](QMouseEvent* e) { hover(e->position()); });
    connect(m_reset, &QToolButton::clicked, this, &HeatmapPlot::resetView);
    connect(m_modeBox, &QComboBox::activated, this,
            [this] { setScaleMode(ScaleMode(m_modeBox->currentData().toInt())); });
    connect(m_zero, &QCheckBox::toggled, this, [this] {
        applyRange();
        m_plot->replot();
    });
    connect(m_auto, &QCheckBox::clicked, this, [this](bool on) {
        // Only when the user unticks it: a panel's fixed range keeps the row narrow.
        m_lo->setVisible(!on);
        m_hi->setVisible(!on);
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
    setData(0, 0, {});
}

HeatmapPlot::~HeatmapPlot() = default;

void HeatmapPlot::setWheelScrolls(QAbstractScrollArea* area) {
    m_wheelScrolls = area;
    const bool showingHint = m_readout->fullText() == m_hint;
    m_hint = area ? tr("Ctrl+wheel: zoom · drag: pan · Shift+drag: zoom to a region · "
                       "double-click: reset")
                  : tr("Wheel: zoom · drag: pan · Shift+drag: zoom to a region · double-click: "
                       "reset");
    if (showingHint)
        setReadout(m_hint);
}

bool HeatmapPlot::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_plot) {
        // A click (press and release without a drag) selects the cell under the mouse.
        if (event->type() == QEvent::MouseButtonPress) {
            auto* e = static_cast<QMouseEvent*>(event);
            m_pressedAt = e->position().toPoint();
        } else if (event->type() == QEvent::MouseButtonRelease) {
            auto* e = static_cast<QMouseEvent*>(event);
            if (e->button() == Qt::LeftButton && !(e->modifiers() & Qt::ShiftModifier) &&
                (e->position().toPoint() - m_pressedAt).manhattanLength() <= 3) {
                const double x = m_plot->xAxis->pixelToCoord(e->position().x());
                const double y = m_plot->yAxis->pixelToCoord(e->position().y());
                if (auto cell = m_geometry.cellAt(x, y))
                    emit cellClicked(cell->column, cell->row);
            }
        } else if (event->type() == QEvent::Leave) {
            setReadout(m_hint);
        } else if (event->type() == QEvent::Wheel && m_wheelScrolls &&
                   !(static_cast<QWheelEvent*>(event)->modifiers() & Qt::ControlModifier)) {
            // Inside a scrolling panel the wheel scrolls the panel; Ctrl+wheel zooms.
            QCoreApplication::sendEvent(m_wheelScrolls->verticalScrollBar(), event);
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void HeatmapPlot::setLabels(const QString& x, const QString& y, const QString& value) {
    m_xLabel = x;
    m_yLabel = y;
    m_valueLabel = value;
    m_plot->xAxis->setLabel(x);
    m_plot->yAxis->setLabel(y);
    m_colorScale->axis()->setLabel(value);
}

void HeatmapPlot::setEmptyText(const QString& text) {
    m_empty->setText(text);
}

void HeatmapPlot::setRowsDownwards(bool on) {
    m_plot->yAxis->setRangeReversed(on);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setAxisTokens(Qt::Orientation axis, QStringList labels) {
    (axis == Qt::Horizontal ? m_xTicker : m_yTicker)->labels = std::move(labels);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

bool HeatmapPlot::axisShowsTokens(Qt::Orientation axis) const {
    return (axis == Qt::Horizontal ? m_xTicker : m_yTicker)->tokenMode();
}

QStringList HeatmapPlot::axisTokens(Qt::Orientation axis) const {
    return (axis == Qt::Horizontal ? m_xTicker : m_yTicker)->labels;
}

void HeatmapPlot::setData(int columns, int rows, std::span<const float> values,
                          std::span<const uint8_t> masked) {
    setPrepared(HeatmapData::build(columns, rows, LargeVector<float>(values.begin(), values.end()),
                                   LargeVector<uint8_t>(masked.begin(), masked.end())));
}

void HeatmapPlot::setPrepared(HeatmapDataPtr data) {
    // The layer must point at the new raster before anything below can paint: showing the
    // plot page paints at once, and the old data (with the raster the layer read) is gone.
    m_data = data ? std::move(data) : std::make_shared<HeatmapData>();
    m_geometry = {m_data->columns, m_data->rows};
    m_rowRaster->clear();
    useRaster();
    m_stack->setCurrentWidget(m_geometry.empty() ? static_cast<QWidget*>(m_empty) : m_plot);
    for (auto* w : std::initializer_list<QWidget*>{m_modeBox, m_zero, m_auto, m_reset})
        w->setEnabled(!m_geometry.empty());
    m_readout->setVisible(!m_geometry.empty()); // no hint under an empty plot
    resetView();
    updateBadLabel();
    setReadout(m_hint);
}

// Points the layer at the raster of the current mode (building the per-row one on demand).
void HeatmapPlot::useRaster() {
    if (m_mode == ScaleMode::RowNormalized && !m_geometry.empty()) {
        if (m_rowRaster->columns() == 0) {
            // Each row divided by its largest finite |value|: the shape of every row at full
            // contrast, however flat.
            const int cols = m_geometry.columns;
            LargeVector<float> scaled(m_data->values().size());
            for (int r = 0; r < m_geometry.rows; ++r) {
                const float* row = m_data->values().data() + size_t(r) * cols;
                float peak = 0;
                for (int c = 0; c < cols; ++c)
                    if (std::isfinite(row[c]))
                        peak = std::max(peak, std::abs(row[c]));
                for (int c = 0; c < cols; ++c)
                    scaled[size_t(r) * cols + c] = peak > 0 ? row[c] / peak : row[c];
            }
            // The mask stays the data's: rebuild it from the base raster's cells.
            m_rowRaster->setData(cols, m_geometry.rows, std::move(scaled),
                                 m_data->raster.baseMask());
        }
        m_layer->raster = m_rowRaster.get();
    } else {
        m_layer->raster = &m_data->raster;
    }
    applyRange();
}

void HeatmapPlot::setMarker(std::optional<HeatmapCell> cell) {
    if (cell && (cell->column >= m_geometry.columns || cell->row >= m_geometry.rows ||
                 cell->column < 0 || cell->row < 0))
        cell.reset();
    m_layer->marker = cell;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

std::optional<HeatmapCell> HeatmapPlot::marker() const {
    return m_layer->marker;
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
    m_colorScale->setGradient(gradientFrom(on ? divergingColor : gradientColor));
    m_zero->setVisible(!on); // a diverging scale is centred on zero already
    applyRange();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setScaleModes(bool offered) {
    m_modeBox->setVisible(offered);
}

void HeatmapPlot::setScaleMode(ScaleMode mode) {
    m_mode = mode;
    m_modeBox->setCurrentIndex(m_modeBox->findData(int(mode)));
    useRaster();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setIncludeZero(bool on) {
    m_zero->setChecked(on);
}

void HeatmapPlot::applyRange() {
    ColorScale automatic;
    if (m_diverging)
        automatic = ColorScale::symmetric(m_data->stats);
    else if (m_mode == ScaleMode::Log)
        automatic = ColorScale::logarithmic(m_data->stats);
    else if (m_mode == ScaleMode::RowNormalized)
        automatic = ColorScale{0.0, 1.0}; // every row's peak is 1
    else
        automatic = ColorScale::fromStats(m_data->stats);
    if (m_zero->isChecked() && !m_diverging)
        automatic = automatic.withZero();
    if (m_auto->isChecked()) {
        m_scale = automatic;
        const QSignalBlocker b1(m_lo), b2(m_hi);
        m_lo->setValue(m_scale.lo);
        m_hi->setValue(m_scale.hi);
    } else {
        m_scale = ColorScale::manual(m_lo->value(), m_hi->value());
        if (m_mode == ScaleMode::Log && !m_diverging && m_scale.lo > 0)
            m_scale.log = true;
    }
    m_colorScale->setDataScaleType(m_scale.log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (m_scale.log)
        m_colorScale->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else
        m_colorScale->axis()->setTicker(QSharedPointer<QCPAxisTicker>::create());
    m_colorScale->setDataRange(QCPRange(m_scale.lo, m_scale.hi));
    m_layer->colours = {m_scale, m_diverging};
    ++m_layer->revision;
}

void HeatmapPlot::resetView() {
    m_clamping = true;
    m_plot->xAxis->setRange(m_geometry.xMin(), std::max(0.5, m_geometry.xMax()));
    m_plot->yAxis->setRange(m_geometry.yMin(), std::max(0.5, m_geometry.yMax()));
    m_clamping = false;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::zoomTo(double x0, double x1, double y0, double y1) {
    if (m_geometry.empty())
        return;
    m_plot->xAxis->setRange(std::min(x0, x1), std::max(x0, x1));
    m_plot->yAxis->setRange(std::min(y0, y1), std::max(y0, y1));
    clampRanges();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

// Keeps the view inside the data, at least 3 cells (or all of them) wide and tall.
void HeatmapPlot::clampRanges() {
    if (m_clamping || m_geometry.empty())
        return;
    m_clamping = true;
    auto clamp = [](QCPAxis* axis, double lo, double hi) {
        QCPRange r = axis->range();
        const double full = hi - lo;
        double size = std::clamp(r.size(), std::min(3.0, full), full);
        double centre = r.center();
        double a = centre - size / 2, b = centre + size / 2;
        if (a < lo)
            b += lo - a, a = lo;
        if (b > hi)
            a -= b - hi, b = hi;
        if (std::abs(a - r.lower) > 1e-9 || std::abs(b - r.upper) > 1e-9)
            axis->setRange(a, b);
    };
    clamp(m_plot->xAxis, m_geometry.xMin(), m_geometry.xMax());
    clamp(m_plot->yAxis, m_geometry.yMin(), m_geometry.yMax());
    m_clamping = false;
}

QString HeatmapPlot::describe(HeatmapCell cell) const {
    const float v = value(cell);
    if (m_describe)
        return m_describe(cell, v);
    const QString x = m_xLabel.isEmpty() ? QStringLiteral("x") : m_xLabel;
    const QString y = m_yLabel.isEmpty() ? QStringLiteral("y") : m_yLabel;
    const QString name = m_valueLabel.isEmpty() ? tr("value") : m_valueLabel;
    return tr("%1 %2 · %3 %4 · %5 = %6")
        .arg(x)
        .arg(cell.column)
        .arg(y)
        .arg(cell.row)
        .arg(name)
        .arg(double(v), 0, 'g', 5);
}

void HeatmapPlot::hover(const QPointF& pixel) {
    if (m_geometry.empty())
        return;
    const auto cell = m_plot->axisRect()->rect().contains(pixel.toPoint())
                          ? m_geometry.cellAt(m_plot->xAxis->pixelToCoord(pixel.x()),
                                              m_plot->yAxis->pixelToCoord(pixel.y()))
                          : std::nullopt;
    if (!cell) {
        setReadout(m_hint);
        return;
    }
    setReadout(describe(*cell));
    emit cellHovered(cell->column, cell->row);
}

QString HeatmapPlot::readout() const {
    return m_readout->fullText();
}

void HeatmapPlot::setReadout(const QString& text) {
    m_readout->setFullText(text);
}

int64_t HeatmapPlot::lastBlocksRead() const {
    return m_layer->blocks();
}

int64_t HeatmapPlot::rasterBytes() const {
    return m_data->raster.bytes() + m_rowRaster->bytes(); // level 0 is the values
}

void HeatmapPlot::updateBadLabel() {
    const ValueStats& stats = m_data->stats;
    if (stats.nonFinite() == 0) {
        m_badLabel->clear();
        m_badLabel->setToolTip({});
        return;
    }
    m_badLabel->setText(
        tr("%1 NaN · %2 +Inf · %3 −Inf").arg(stats.nan).arg(stats.posInf).arg(stats.negInf));
    m_badLabel->setToolTip(tr("Non-finite cells are painted magenta, also when zoomed out"));
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
            csv.row({QString::number(c), QString::number(r),
                     QString::number(double(m_data->values()[size_t(r) * m_geometry.columns + c]),
                                     'g', 8)});
    return csv.text();
}

} // namespace kvscope::widgets
