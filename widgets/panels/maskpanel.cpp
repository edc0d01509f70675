#include "maskpanel.h"

#include "enginecontroller.h"
#include "heatmapplot.h"
#include "selection.h"

#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace kvscope::widgets {

MaskPanel::MaskPanel(EngineController* engine, Selection* selection, QWidget* parent)
    : QWidget(parent), m_selection(selection) {
    auto* layout = new QVBoxLayout(this);
    m_summary = new QLabel(this);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setWordWrap(true); // wraps instead of widening the dock
    layout->addWidget(m_summary);
    m_plot = new HeatmapPlot(tr("Attention mask over cache slots"), this);
    m_plot->setLabels(tr("cache slot"), QString(), tr("mask (1 = visible)"));
    m_plot->setManualRange(std::pair{0.0, 1.0});
    m_plot->plot()->yAxis->setTicks(false);
    m_plot->plot()->yAxis->setTickLabels(false);
    layout->addWidget(m_plot, 1);
    connect(m_plot, &HeatmapPlot::cellClicked, this,
            [this](int slot, int) { m_selection->setPosition(slot); });
    connect(engine, &EngineController::stateChanged, this, &MaskPanel::rebuild);
    connect(m_selection, &Selection::changed, this, [this] {
        const qint64 p = m_selection->position();
        m_plot->setMarker(p >= 0 && m_state && p < qint64(m_state->mask.size())
                              ? std::optional(HeatmapCell{int(p), 0})
                              : std::nullopt);
    });
}

QString MaskPanel::summary() const {
    return m_summary->text();
}

void MaskPanel::rebuild(const CacheViewPtr& state) {
    m_state = state;
    if (!state || state->model.path.isEmpty()) {
        m_plot->setData(0, 0, {});
        m_summary->clear();
        return;
    }
    const auto& mask = state->mask;
    m_plot->setData(int(mask.size()), 1, std::vector<float>(mask.begin(), mask.end()));
    // Tick labels: stored positions under their slots (a sparse set for long caches).
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    const int64_t n = int64_t(state->positions.size());
    const int64_t step = std::max<int64_t>(1, n / 16);
    for (int64_t i = 0; i < n; i += step)
        ticker->addTick(double(i),
                        QStringLiteral("%1\n@%2").arg(i).arg(state->positions[size_t(i)]));
    m_plot->plot()->xAxis->setTicker(ticker);
    m_plot->plot()->xAxis->setLabel(tr("cache slot (@ stored position)"));

    const int64_t visible = std::count(mask.begin(), mask.end(), uint8_t(1));
    const bool shapeOk = int64_t(mask.size()) == state->length;
    m_summary->setText(tr("mask shape [%1] · cache length %2 %3 · %4 visible, %5 masked · next "
                          "query sees [1, %6]")
                           .arg(mask.size())
                           .arg(state->length)
                           .arg(shapeOk ? tr("✓ matches") : tr("✗ MISMATCH"))
                           .arg(visible)
                           .arg(int64_t(mask.size()) - visible)
                           .arg(state->length + 1));
    m_summary->setStyleSheet(shapeOk ? QString()
                                     : QStringLiteral("color: #b00000; font-weight: bold"));
}

} // namespace kvscope::widgets
