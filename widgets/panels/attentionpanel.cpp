#include "attentionpanel.h"

#include "enginecontroller.h"
#include "heatmapplot.h"
#include "selection.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace kvscope::widgets {

AttentionPanel::AttentionPanel(EngineController* engine, Selection* selection, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_selection(selection) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_head = new QComboBox(this);
    m_head->setToolTip(tr("Query head (the selection's KV head picks its group)"));
    m_info = new QLabel(this);
    m_info->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_info->setWordWrap(true); // wraps instead of widening the dock
    controls->addWidget(new QLabel(tr("Query head"), this));
    controls->addWidget(m_head);
    controls->addWidget(m_info, 1);
    layout->addLayout(controls);
    m_plot = new HeatmapPlot(tr("Attention (query × key)"), this);
    m_plot->setLabels(tr("key (cache slot)"), tr("query (token)"), tr("probability"));
    m_plot->plot()->yAxis->setRangeReversed(true);
    m_plot->setManualRange(std::pair{0.0, 1.0});
    layout->addWidget(m_plot, 1);

    connect(m_head, &QComboBox::activated, this, [this](int qh) {
        m_selection->setHead(qh / std::max(1, m_groups)); // may not change: request anyway
        request();
    });
    connect(m_plot, &HeatmapPlot::cellClicked, this,
            [this](int key, int) { m_selection->setPosition(key); });
    connect(m_selection, &Selection::changed, this, [this] {
        const int kv = m_selection->head();
        if (queryHead() / std::max(1, m_groups) != kv && kv * m_groups < m_head->count()) {
            const QSignalBlocker block(m_head);
            m_head->setCurrentIndex(kv * m_groups);
        }
        if (m_view)
            m_plot->setMarker(m_selection->position() >= 0
                                  ? std::optional(HeatmapCell{int(m_selection->position()),
                                                              int(m_view->queries - 1)})
                                  : std::nullopt);
        if (!m_view || m_view->layer != m_selection->layer() || m_view->head != queryHead())
            request();
    });
    connect(m_engine, &EngineController::modelLoaded, this, [this](const ModelInfo& info) {
        m_heads = info.heads;
        m_groups = info.kvHeads > 0 ? std::max(1, info.heads / info.kvHeads) : 1;
        const QSignalBlocker block(m_head);
        m_head->clear();
        for (int h = 0; h < info.heads; ++h)
            m_head->addItem(tr("head %1 (KV %2)").arg(h).arg(h / m_groups));
    });
    connect(m_engine, &EngineController::stateChanged, this, [this](const CacheViewPtr& s) {
        m_revision = s ? s->revision : 0;
        if (s && s->length > 0 && !m_engine->isBusy())
            request(); // during generation the pattern refreshes when the run ends
        else if (!s || s->length == 0) {
            m_view.reset();
            m_plot->setData(0, 0, {});
            m_info->clear();
        }
    });
    connect(m_engine, &EngineController::busyChanged, this, [this](bool busy) {
        if (!busy && m_engine->state() && m_engine->state()->length > 0 &&
            (!m_view || m_view->revision != m_engine->state()->revision))
            request();
    });
    connect(m_engine, &EngineController::attentionReady, this, &AttentionPanel::show);
}

int AttentionPanel::queryHead() const {
    return std::max(0, m_head->currentIndex());
}

void AttentionPanel::setQueryHead(int queryHead) {
    if (queryHead < 0 || queryHead >= m_head->count())
        return;
    {
        const QSignalBlocker block(m_head);
        m_head->setCurrentIndex(queryHead);
    }
    const int kv = queryHead / std::max(1, m_groups);
    if (m_selection->head() != kv) {
        m_selection->setHead(kv); // changed() requests the new pattern
        if (m_selection->head() == kv)
            return;
    }
    if (!m_view || m_view->layer != m_selection->layer() || m_view->head != queryHead)
        request();
}

void AttentionPanel::request() {
    if (!m_engine->hasModel() || m_heads == 0)
        return;
    m_pending = m_engine->requestAttention(m_selection->layer(), queryHead());
    m_info->setText(tr("computing…"));
}

std::vector<uint8_t> AttentionPanel::maskedCells(const AttentionView& v) {
    std::vector<uint8_t> masked(size_t(v.queries * v.keys), 0);
    for (int64_t q = 0; q < v.queries; ++q)
        for (int64_t k = 0; k < v.keys; ++k) {
            const bool future = k > q;
            const bool maskedOut = size_t(k) < v.mask.size() && v.mask[size_t(k)] == 0;
            masked[size_t(q * v.keys + k)] = future || maskedOut;
        }
    return masked;
}

void AttentionPanel::show(const AttentionViewPtr& view) {
    if (view->serial != m_pending)
        return;
    m_view = view;
    m_plot->setData(int(view->keys), int(view->queries), view->probs);
    m_plot->setMaskOverlay(maskedCells(*view));
    const qint64 pos = m_selection->position();
    m_plot->setMarker(pos >= 0 ? std::optional(HeatmapCell{int(pos), int(view->queries - 1)})
                               : std::nullopt);
    m_info->setText(tr("layer %1 · head %2 · %3 queries × %4 keys · %5 · grey = masked")
                        .arg(view->layer)
                        .arg(view->head)
                        .arg(view->queries)
                        .arg(view->keys)
                        .arg(view->source));
}

} // namespace kvscope::widgets
