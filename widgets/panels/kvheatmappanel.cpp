#include "kvheatmappanel.h"

#include "enginecontroller.h"
#include "heatmapplot.h"
#include "kvsummary.h"
#include "selection.h"
#include "statefollower.h"
#include "tokenmodel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSplitter>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace kvscope::widgets {

KvHeatmapPanel::KvHeatmapPanel(EngineController* engine, Selection* selection, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_selection(selection) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_tensor = new QComboBox(this);
    m_tensor->addItem(tr("Keys |K|"), QStringLiteral("K"));
    m_tensor->addItem(tr("Values |V|"), QStringLiteral("V"));
    m_head = new QComboBox(this);
    m_head->setToolTip(tr("Which KV head the layer × position map shows"));
    m_head->setSizeAdjustPolicy(QComboBox::AdjustToContents); // "mean over heads" in full
    m_info = new QLabel(this);
    m_info->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_info->setWordWrap(true); // wraps instead of widening the dock
    controls->addWidget(new QLabel(tr("Tensor"), this));
    controls->addWidget(m_tensor);
    controls->addWidget(new QLabel(tr("Position map head"), this));
    controls->addWidget(m_head);
    controls->addWidget(m_info, 1);
    layout->addLayout(controls);

    auto* split = new QSplitter(Qt::Horizontal, this);
    m_byHead = new HeatmapPlot(tr("Layer × KV head"), split);
    m_byPosition = new HeatmapPlot(tr("Layer × position"), split);
    split->addWidget(m_byHead);
    split->addWidget(m_byPosition);
    for (auto* plot : {m_byHead, m_byPosition})
        plot->setEmptyText(tr("Run a prompt to fill the cache: one column per cached token, one "
                              "row per layer."));
    m_byHead->setIncludeZero(true);
    m_byPosition->setDescribe([this](HeatmapCell cell, float v) {
        const QString name =
            m_tensor->currentData().toString() == QLatin1String("V") ? tr("|V|") : tr("|K|");
        const int64_t token = m_state ? m_state->tokenOfSlot(cell.column) : -1;
        if (token < 0)
            return tr("layer %1 · slot %2 · %3 = %4")
                .arg(cell.row)
                .arg(cell.column)
                .arg(name)
                .arg(double(v), 0, 'g', 4);
        const auto& t = m_state->tokens[size_t(token)];
        return tr("layer %1 · slot %2 “%3” (pos %4) · %5 = %6")
            .arg(cell.row)
            .arg(cell.column)
            .arg(TokenModel::visibleText(t))
            .arg(t.position)
            .arg(name)
            .arg(double(v), 0, 'g', 4);
    });
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 3);
    layout->addWidget(split, 1);

    connect(m_tensor, &QComboBox::currentIndexChanged, this, &KvHeatmapPanel::rebuild);
    connect(m_head, &QComboBox::currentIndexChanged, this, &KvHeatmapPanel::rebuild);
    connect(m_byHead, &HeatmapPlot::cellClicked, this, [this](int head, int layer) {
        m_selection->set(layer, head, m_selection->position());
    });
    connect(m_byPosition, &HeatmapPlot::cellClicked, this,
            [this](int position, int layer) { m_selection->set(layer, -1, position); });
    connect(m_selection, &Selection::changed, this, &KvHeatmapPanel::updateMarkers);
    new StateFollower(m_engine, this, [this](const CacheViewPtr& s) {
        m_state = s;
        if (m_head->count() != (s ? s->kvHeads : 0) + 1) {
            const QSignalBlocker block(m_head);
            m_head->clear();
            m_head->addItem(tr("mean over heads"), -1);
            for (int h = 0; s && h < s->kvHeads; ++h)
                m_head->addItem(tr("head %1").arg(h), h);
        }
        rebuild();
    });
}

void KvHeatmapPanel::setTensor(const QString& which) {
    m_tensor->setCurrentIndex(which == QLatin1String("V") ? 1 : 0);
}

void KvHeatmapPanel::setPositionHead(int head) {
    const int i = m_head->findData(head);
    if (i >= 0)
        m_head->setCurrentIndex(i);
}

const std::vector<std::vector<float>>& KvHeatmapPanel::norms() const {
    return m_tensor->currentData().toString() == QLatin1String("V") ? m_state->valueNorms
                                                                    : m_state->keyNorms;
}

void KvHeatmapPanel::rebuild() {
    const QString name =
        m_tensor->currentData().toString() == QLatin1String("V") ? tr("|V|") : tr("|K|");
    m_byHead->setLabels(tr("KV head"), tr("layer"), tr("mean %1").arg(name));
    m_byPosition->setLabels(tr("cache slot"), tr("layer"), name);
    if (!m_state || m_state->length == 0 || m_state->keyNorms.empty()) {
        m_byHead->setData(0, 0, {});
        m_byPosition->setData(0, 0, {});
        m_info->setText(m_state && !m_state->model.path.isEmpty() ? tr("The cache is empty")
                                                                  : QString());
        return;
    }
    const auto& s = *m_state;
    m_byHead->setData(s.kvHeads, s.layers, KvSummary::layerByHead(norms(), s.kvHeads, s.length));
    const int head = m_head->currentData().isValid() ? m_head->currentData().toInt() : -1;
    QStringList tokens;
    for (int64_t i = 0; i < s.length; ++i) {
        const int64_t t = s.tokenOfSlot(i); // the slot's token (a recorded eviction's gaps)
        tokens << (t >= 0 ? TokenModel::visibleText(s.tokens[size_t(t)]) : QString());
    }
    m_byPosition->setAxisTokens(Qt::Horizontal, tokens);
    // Growing during a run: keep the user's zoom unless the view showed everything.
    const QCPRange shown = m_byPosition->plot()->xAxis->range();
    const bool zoomed = m_byPosition->geometry().columns > 0 &&
                        shown.upper < m_byPosition->geometry().xMax() - 0.01;
    const QCPRange rows = m_byPosition->plot()->yAxis->range();
    m_byPosition->setData(int(s.length), s.layers,
                          KvSummary::layerByPosition(norms(), s.kvHeads, s.length, head));
    if (zoomed)
        m_byPosition->zoomTo(shown.lower, shown.upper, rows.lower, rows.upper);
    updateMarkers();
}

void KvHeatmapPanel::updateMarkers() {
    if (!m_state || m_state->length == 0 || m_state->keyNorms.empty()) {
        m_byHead->setMarker(std::nullopt);
        m_byPosition->setMarker(std::nullopt);
        return;
    }
    const int layer = m_selection->layer(), head = m_selection->head();
    const qint64 pos = m_selection->position();
    m_byHead->setMarker(HeatmapCell{head, layer});
    m_byPosition->setMarker(pos >= 0 ? std::optional(HeatmapCell{int(pos), layer}) : std::nullopt);
    const auto& s = *m_state;
    QString text = tr("layer %1 · KV head %2").arg(layer).arg(head);
    if (pos >= 0 && pos < s.length && layer < s.layers && head < s.kvHeads)
        text += tr(" · slot %1 (position %2): |K| %3 · |V| %4")
                    .arg(pos)
                    .arg(s.positions[size_t(pos)])
                    .arg(double(s.keyNorm(layer, head, pos)), 0, 'g', 4)
                    .arg(double(s.valueNorm(layer, head, pos)), 0, 'g', 4);
    m_info->setText(text);
}

} // namespace kvscope::widgets
