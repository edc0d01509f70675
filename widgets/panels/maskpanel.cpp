#include "maskpanel.h"

#include "enginecontroller.h"
#include "heatmapplot.h"
#include "selection.h"
#include "statefollower.h"
#include "tokenmodel.h"

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
    m_plot->setEmptyText(tr("Load a model and run a prompt: the mask says which cache slots the "
                            "next token may attend to."));
    m_plot->setDescribe([this](HeatmapCell cell, float v) {
        if (!m_state || cell.column >= int64_t(m_state->positions.size()))
            return QString();
        const auto slot = size_t(cell.column);
        return tr("slot %1 “%2” · stored position %3 · %4")
            .arg(cell.column)
            .arg(slot < m_state->tokens.size() ? TokenModel::visibleText(m_state->tokens[slot])
                                               : QString())
            .arg(m_state->positions[slot])
            .arg(v != 0 ? tr("visible") : tr("masked"));
    });
    layout->addWidget(m_plot, 1);
    connect(m_plot, &HeatmapPlot::cellClicked, this,
            [this](int slot, int) { m_selection->setPosition(slot); });
    new StateFollower(engine, this, [this](const CacheViewPtr& s) { rebuild(s); });
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
    // Zoomed in, each slot is labelled with its stored position and token.
    QStringList labels;
    for (size_t i = 0; i < state->positions.size(); ++i) {
        const int64_t t = state->tokenOfSlot(int64_t(i));
        labels << QStringLiteral("@%1 %2")
                      .arg(state->positions[i])
                      .arg(t >= 0 ? TokenModel::visibleText(state->tokens[size_t(t)]) : QString());
    }
    m_plot->setAxisTokens(Qt::Horizontal, labels);
    m_plot->plot()->xAxis->setLabel(tr("cache slot (@ stored position when zoomed in)"));

    // The live cache keeps one mask entry per slot (core refuses any other size); a stored
    // state whose mask does not fit is Validation's to say (mask.shape).
    m_summary->setText(tr("mask shape [%1], one entry per cache slot · %2 visible, %3 masked · "
                          "next query sees [1, %4]")
                           .arg(mask.size())
                           .arg(state->visibleSlots)
                           .arg(int64_t(mask.size()) - state->visibleSlots)
                           .arg(state->length + 1));
}

} // namespace kvscope::widgets
