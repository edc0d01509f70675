#include "attentionpanel.h"

#include "elidedlabel.h"

#include "enginecontroller.h"
#include "heatmapplot.h"
#include "selection.h"
#include "tokenmodel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace kvscope::widgets {

namespace {
QString kEmptyText() {
    return AttentionPanel::tr("Run a prompt to fill the cache: the attention of every token to "
                              "the ones before it shows here.");
}
} // namespace

AttentionPanel::AttentionPanel(EngineController* engine, Selection* selection, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_selection(selection) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_head = new QComboBox(this);
    m_head->setToolTip(tr("Query head (the selection's KV head picks its group)"));
    m_head->setSizeAdjustPolicy(QComboBox::AdjustToContents); // "head 12 (KV 3)" in full
    // A line of its own, elided (all of it in the tooltip): wrapped beside the head box, it took
    // four lines of a narrow dock from the plot at 1366x768.
    m_info = new ElidedLabel({}, this);
    controls->addWidget(new QLabel(tr("Query head"), this));
    controls->addWidget(m_head);
    controls->addStretch(1);
    layout->addLayout(controls);
    layout->addWidget(m_info);
    m_plot = new HeatmapPlot(tr("Attention (query × key)"), this);
    m_plot->setLabels(tr("key (cache slot)"), tr("query (token)"), tr("probability"));
    m_plot->setRowsDownwards(true);
    m_plot->setScaleModes(true);
    m_plot->setIncludeZero(true); // near-uniform attention is not stretched to full contrast
    m_plot->setEmptyText(kEmptyText());
    m_plot->setDescribe([this](HeatmapCell cell, float p) { return describe(cell, p); });
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
            m_info->setFullText({});
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
    if (!m_engine->hasModel() || m_heads == 0 || !m_engine->state() ||
        m_engine->state()->length == 0)
        return; // nothing cached: the empty plot says so
    m_pending = m_engine->requestAttention(m_selection->layer(), queryHead());
    m_info->setFullText(tr("computing…"));
}

QString AttentionPanel::tokenText(int64_t index) const {
    if (!m_engine->state() || index < 0 || index >= int64_t(m_engine->state()->tokens.size()))
        return {};
    return TokenModel::visibleText(m_engine->state()->tokens[size_t(index)]);
}

QString AttentionPanel::describe(HeatmapCell cell, float p) const {
    if (!m_view)
        return {};
    // Query row q is the q-th of the last `queries` tokens; key column k is cache slot k.
    const int64_t q = cell.row + (m_view->keys - m_view->queries), k = cell.column;
    auto position = [this](int64_t slot) {
        return m_engine->state() && slot < int64_t(m_engine->state()->positions.size())
                   ? QString::number(m_engine->state()->positions[size_t(slot)])
                   : QStringLiteral("?");
    };
    const bool seen = m_view->pattern.visible(cell.row, k);
    // The probability first: on a narrow dock the line is elided at its end, and what goes is
    // then the layer and head the panel's controls show anyway, not the number.
    return tr("%1 · query %2 “%3” (pos %4) → key %5 “%6” (pos %7) · layer %8 · head %9 (KV %10)")
        .arg(seen ? QStringLiteral("p = %1").arg(double(p), 0, 'g', 4) : tr("masked (cannot see)"))
        .arg(q)
        .arg(tokenText(q))
        .arg(position(q))
        .arg(k)
        .arg(tokenText(k))
        .arg(position(k))
        .arg(m_view->layer)
        .arg(m_view->head)
        .arg(m_view->kvHead);
}

void AttentionPanel::show(const AttentionViewPtr& view) {
    if (view->serial != m_pending)
        return;
    if (!view->error.isEmpty()) {
        m_view.reset();
        m_plot->setData(0, 0, {});
        m_plot->setEmptyText(view->error);
        m_info->setFullText(view->error);
        return;
    }
    m_plot->setEmptyText(kEmptyText());
    const bool sameShape = m_view && m_view->queries == view->queries && m_view->keys == view->keys;
    m_view = view;
    if (m_engine->state() && int64_t(m_engine->state()->tokens.size()) >= view->keys) {
        QStringList keys, queries;
        for (int64_t k = 0; k < view->keys; ++k)
            keys << tokenText(k);
        for (int64_t q = view->keys - view->queries; q < view->keys; ++q)
            queries << tokenText(q);
        m_plot->setAxisTokens(Qt::Horizontal, keys);
        m_plot->setAxisTokens(Qt::Vertical, queries);
    }
    // A new (layer, head) of the same session keeps the user's zoom.
    const QCPRange x = m_plot->plot()->xAxis->range(), y = m_plot->plot()->yAxis->range();
    m_plot->setPrepared(view->heatmap);
    if (sameShape)
        m_plot->zoomTo(x.lower, x.upper, y.lower, y.upper);
    const qint64 pos = m_selection->position();
    m_plot->setMarker(pos >= 0 ? std::optional(HeatmapCell{int(pos), int(view->queries - 1)})
                               : std::nullopt);
    m_info->setFullText(tr("layer %1 · head %2 (KV %3) · %4 × %5 · %6 · %7 ms · grey = cannot see")
                            .arg(view->layer)
                            .arg(view->head)
                            .arg(view->kvHead)
                            .arg(view->queries)
                            .arg(view->keys)
                            .arg(view->source)
                            .arg(view->milliseconds, 0, 'f', 0));
}

} // namespace kvscope::widgets
