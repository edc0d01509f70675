#include "attributionpanel.h"

#include "attributionmodel.h"
#include "heatmapplot.h"
#include "ledgercontroller.h"
#include "plotwidget.h"
#include "selection.h"
#include "statepicker.h"
#include "tokenmodel.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QStackedWidget>
#include <QTableView>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace kvscope::widgets {

namespace {

QString introText() {
    return AttributionPanel::tr(
        "Pick a state and press Run: how much the next token depends on each cached slot, and "
        "which heads and MLPs wrote its logit.");
}

QString quotedText(const QString& text) {
    return QStringLiteral("“%1”").arg(text);
}

} // namespace

AttributionPanel::AttributionPanel(LedgerController* ledger, Selection* selection, QWidget* parent)
    : QWidget(parent), m_ledger(ledger), m_selection(selection),
      m_layerModel(new AttributionLayerModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_state = new StatePicker(this);
    auto* runButton = new QPushButton(tr("Run"), this);
    runButton->setObjectName(QStringLiteral("attribution.run"));
    runButton->setToolTip(tr("Hide each cached slot in turn and recompute the next token (one "
                             "forward step per slot), and split its logit over heads and MLPs"));
    m_force = new QCheckBox(tr("even if verify fails"), this);
    m_force->setToolTip(tr("Attribute a state whose verify report has errors (what a damaged "
                           "cache makes the next token depend on); structural errors still "
                           "refuse"));
    controls->addWidget(new QLabel(tr("State"), this));
    controls->addWidget(m_state);
    controls->addWidget(runButton);
    controls->addWidget(m_force);
    controls->addStretch();
    layout->addLayout(controls);
    m_summary = new QLabel(introText(), this);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    // Slots: the ablation KL as bars, the estimate as points on its own axis (another unit).
    m_slotPlot = newPlot(this);
    m_slotPlot->setMinimumSize(200, 120);
    // No legend (a row under a plot this short took half its height): each series is named
    // by its own axis, in its colour.
    const QColor klColour(0x4c, 0x78, 0xa8), estimateColour(0xe1, 0x57, 0x59);
    m_slotPlot->xAxis->setLabel(tr("cache slot"));
    m_slotPlot->yAxis->setLabel(tr("ablation KL (bars)"));
    m_slotPlot->yAxis2->setLabel(tr("estimate (dots)"));
    m_slotPlot->yAxis2->setVisible(true);
    for (auto [axis, colour] :
         {std::pair{m_slotPlot->yAxis, klColour}, std::pair{m_slotPlot->yAxis2, estimateColour}}) {
        axis->setLabelColor(colour);
        axis->setNumberFormat(QStringLiteral("g"));
        axis->ticker()->setTickCount(4);
    }
    auto whole = QSharedPointer<QCPAxisTickerFixed>::create();
    whole->setTickStep(1);
    whole->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    m_slotPlot->xAxis->setTicker(whole);
    m_ablation = new QCPBars(m_slotPlot->xAxis, m_slotPlot->yAxis);
    m_ablation->setName(tr("ablation KL"));
    m_ablation->setWidth(0.8);
    m_ablation->setPen(Qt::NoPen);
    m_ablation->setBrush(klColour);
    m_estimate = m_slotPlot->addGraph(m_slotPlot->xAxis, m_slotPlot->yAxis2);
    m_estimate->setName(tr("estimate: attention × |W_O v|"));
    m_estimate->setLineStyle(QCPGraph::lsNone);
    m_estimate->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, estimateColour, 5));
    m_slotMarker = new QCPItemStraightLine(m_slotPlot);
    m_slotMarker->setPen(QPen(QColor(0x30, 0x30, 0x30), 1, Qt::DashLine));
    m_slotMarker->setVisible(false);

    // Heads: the direct contribution of every head, signed around zero.
    m_heads = new HeatmapPlot(tr("Logit per head"), this);
    m_heads->setLabels(tr("query head"), tr("layer"), tr("logit contribution"));
    m_heads->setDiverging(true);
    m_heads->setEmptyText(tr("Run to split the next token's logit over the heads"));
    m_layers = new QTableView(this);
    m_layers->setModel(m_layerModel);
    m_layers->setSelectionMode(QAbstractItemView::SingleSelection);
    m_layers->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_layers->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_layers->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_layers->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    m_layers->verticalHeader()->setDefaultSectionSize(m_layers->fontMetrics().height() + 6);
    m_layers->setToolTip(tr("Each layer's MLP contribution to the logit (and the attention "
                            "output bias, for models that have one)"));

    auto* split = new QSplitter(Qt::Horizontal, this);
    split->setChildrenCollapsible(false);
    // Until a result arrives, a sentence rather than axes with nothing on them (as HeatmapPlot).
    m_slotStack = new QStackedWidget(this);
    auto* empty = new QLabel(tr("Run to hide each cached slot in turn: the KL it causes, one bar "
                                "per slot"),
                             m_slotStack);
    empty->setAlignment(Qt::AlignCenter);
    empty->setWordWrap(true);
    empty->setStyleSheet(QStringLiteral("color: palette(mid); font-size: 11pt"));
    m_slotStack->addWidget(empty);
    m_slotStack->addWidget(m_slotPlot);
    split->addWidget(m_slotStack);
    split->addWidget(m_heads);
    split->addWidget(m_layers);
    // The slots get the most room (one bar each), the layer table what its numbers need.
    split->setStretchFactor(0, 5);
    split->setStretchFactor(1, 4);
    split->setStretchFactor(2, 0);
    split->setSizes({500, 400, 100});
    fitLayerTable();
    layout->addWidget(split, 1);

    connect(runButton, &QPushButton::clicked, this, &AttributionPanel::run);
    ledger->onAnswer<LedgerView>(this, [this](const LedgerViewPtr& l) { m_state->setLedger(l); });
    ledger->onAnswer<AttributionView>(this, &AttributionPanel::show);
    connect(m_slotPlot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        const int64_t slot = slotAt(e->position());
        if (slot < 0)
            QToolTip::hideText();
        else
            QToolTip::showText(e->globalPosition().toPoint(), describeSlot(slot), m_slotPlot);
    });
    connect(m_slotPlot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        const int64_t slot = slotAt(e->position());
        if (slot < 0 || e->button() != Qt::LeftButton)
            return;
        m_clickedSlot = slot;
        m_selection->setPosition(slot);
        followSelection(); // marked even where the live session is shorter than this state
    });
    connect(m_heads, &HeatmapPlot::cellClicked, this, [this](int head, int layer) {
        // The selection's head is a KV head: the group this query head reads. The heads wrote
        // the last position's logit: that position (its cache slot) goes along.
        if (!m_view)
            return;
        m_clickedCell = HeatmapCell{head, layer};
        const int group = std::max(1, m_view->queryHeads / std::max(1, m_view->kvHeads));
        const auto& bySlot = m_view->slotResult.bySlot;
        m_selection->set(layer, head / group,
                         bySlot.empty() ? m_selection->position() : bySlot.back().slot);
        followSelection();
    });
    connect(m_layers, &QTableView::clicked, this,
            [this](const QModelIndex& index) { m_selection->setLayer(index.row()); });
    connect(m_selection, &Selection::changed, this, &AttributionPanel::followSelection);
}

QString AttributionPanel::summaryText() const {
    return m_summary->text();
}

void AttributionPanel::setState(const QString& id) {
    m_state->setCurrentId(id);
}

void AttributionPanel::setForce(bool force) {
    m_force->setChecked(force);
}

void AttributionPanel::run() {
    m_ledger->request(req::Attribute{m_state->currentId(), m_force->isChecked()});
}

void AttributionPanel::clear() {
    m_view.reset();
    m_clickedSlot = -1;
    m_clickedCell.reset();
    m_layerModel->setResult(nullptr);
    m_ablation->data()->clear();
    m_estimate->data()->clear();
    m_slotMarker->setVisible(false);
    m_slotPlot->replot();
    m_slotStack->setCurrentIndex(0);
    m_heads->setData(0, 0, {});
    m_heads->setMarker(std::nullopt);
    m_summary->setText(introText());
    m_summary->setToolTip({});
}

QString AttributionPanel::slotText(int64_t slot) const {
    const auto& a = m_view->slotResult.bySlot[size_t(slot)];
    if (a.tokenIndex >= 0 && size_t(a.tokenIndex) < m_view->tokens.size())
        return TokenModel::visibleText(m_view->tokens[size_t(a.tokenIndex)]);
    return a.token >= 0 ? QString::number(a.token) : QStringLiteral("?");
}

int64_t AttributionPanel::slotAt(const QPointF& pixel) const {
    if (!m_view || !m_slotPlot->axisRect()->rect().contains(pixel.toPoint()))
        return -1;
    const auto slot = int64_t(std::lround(m_slotPlot->xAxis->pixelToCoord(pixel.x())));
    return slot >= 0 && size_t(slot) < m_view->slotResult.bySlot.size() ? slot : -1;
}

QString AttributionPanel::describeSlot(int64_t slot) const {
    if (!m_view || slot < 0 || size_t(slot) >= m_view->slotResult.bySlot.size())
        return {};
    const auto& a = m_view->slotResult.bySlot[size_t(slot)];
    QString text = tr("slot %1 · position %2 · %3")
                       .arg(a.slot)
                       .arg(a.position)
                       .arg(quotedText(slotText(slot)));
    if (!a.ablatable)
        text += QStringLiteral("\n") + (a.why == "query"
                                            ? tr("not ablated: the query of the recomputed step")
                                            : tr("not ablated: the cache already masks it"));
    else
        text += QStringLiteral("\n") + tr("hidden: KL %1 · Δ log p of %2 %3")
                                           .arg(a.ablationKl, 0, 'g', 3)
                                           .arg(quotedText(m_view->headToken))
                                           .arg(a.deltaLogp, 0, 'g', 3);
    text +=
        QStringLiteral("\n") + tr("estimate (attention × |W_O v|) %1").arg(a.estimate, 0, 'g', 3);
    return text;
}

void AttributionPanel::show(const AttributionViewPtr& view) {
    // Paints core's results (what `kvscope-cli attribute [--heads] --json` prints).
    m_view = view;
    m_clickedSlot = -1;
    m_clickedCell.reset();
    m_state->setCurrentId(view->id);
    const auto& r = view->slotResult;
    const auto& h = view->headResult;
    const auto& p = h.parts;
    QString text = tr("<b>%1</b> · next %2 (log p %3) · %4 of %5 slots hidden in turn")
                       .arg(view->label.toHtmlEscaped())
                       .arg(quotedText(view->headToken).toHtmlEscaped())
                       .arg(r.topLogp, 0, 'g', 3)
                       .arg(r.ablated)
                       .arg(r.bySlot.size());
    text += std::isfinite(r.rankCorrelation)
                ? tr(" · estimate vs ablation: Spearman %1").arg(r.rankCorrelation, 0, 'f', 2)
                : tr(" · no rank correlation (fewer than two slots hidden, or a constant column)");
    if (view->forced)
        text += tr(" · run despite verify's errors");
    // Core's ranking (the CLI's --top 10): three in the line, all ten in its tooltip.
    QStringList top, ranked;
    for (size_t i = 0; i < r.ranked.size(); ++i) {
        const int64_t slot = r.ranked[i];
        const QString one = tr("%1 %2 (KL %3)")
                                .arg(slot)
                                .arg(quotedText(slotText(slot)))
                                .arg(r.bySlot[size_t(slot)].ablationKl, 0, 'g', 2);
        ranked << one;
        if (i < 3)
            top << one.toHtmlEscaped();
    }
    if (!top.isEmpty())
        text += QStringLiteral("<br>") +
                tr("Depends most on slots %1").arg(top.join(QStringLiteral(", ")));
    QString logit = tr("Logit %1").arg(h.modelLogit, 0, 'f', 3);
    if (p.preCapLogit != p.logit)
        logit += tr(" (%1 before the soft-cap)").arg(p.preCapLogit, 0, 'f', 3);
    logit += tr(" = embedding %1 + heads (grid) + MLPs (table)").arg(p.embedding, 0, 'f', 3);
    if (p.normBias != 0)
        logit += tr(" + final norm bias %1").arg(p.normBias, 0, 'f', 3);
    logit += tr("; the parts sum to %1 (error %2)").arg(p.sum(), 0, 'f', 3).arg(h.error, 0, 'g', 2);
    text += QStringLiteral("<br>") + logit.toHtmlEscaped();
    m_summary->setToolTip(
        tr("Slots: the last token's step recomputed with each cached slot hidden from every layer "
           "and head (KL to the full step), beside attention × |W_O v| summed over heads and "
           "layers. Logit: the restored last step (position %1) split with the final norm's "
           "scale frozen at %2, as TransformerLens does.")
            .arg(h.position)
            .arg(p.normScale, 0, 'g', 4) +
        QStringLiteral("\n") +
        tr("Largest ablation effects: %1").arg(ranked.join(QStringLiteral(", "))));
    m_summary->setText(text);
    showSlots();
    showHeads();
    followSelection();
}

void AttributionPanel::showSlots() {
    const auto& bySlot = m_view->slotResult.bySlot;
    QVector<double> x, kl, estimate;
    for (const auto& a : bySlot) {
        x << double(a.slot);
        kl << a.ablationKl;
        estimate << a.estimate;
    }
    m_ablation->setData(x, kl, true);
    m_estimate->setData(x, estimate, true);
    m_slotPlot->xAxis->setRange(-0.5, double(bySlot.size()) - 0.5);
    bool found = false;
    const QCPRange klRange = m_ablation->getValueRange(found);
    m_slotPlot->yAxis->setRange(0, found && klRange.upper > 0 ? klRange.upper * 1.05 : 1);
    const QCPRange estimateRange = m_estimate->getValueRange(found);
    m_slotPlot->yAxis2->setRange(0,
                                 found && estimateRange.upper > 0 ? estimateRange.upper * 1.05 : 1);
    m_slotStack->setCurrentWidget(m_slotPlot);
    m_slotPlot->replot();
}

void AttributionPanel::showHeads() {
    const auto& heads = m_view->headResult.parts.heads;
    const int layers = int(heads.size());
    const int perLayer = layers > 0 ? int(heads.front().size()) : 0;
    std::vector<float> values;
    values.reserve(size_t(layers) * size_t(perLayer));
    for (const auto& layer : heads)
        for (double v : layer)
            values.push_back(float(v));
    m_heads->setData(perLayer, layers, values);
    const QString token = quotedText(m_view->headToken);
    m_heads->setDescribe([token](HeatmapCell c, float v) {
        return tr("layer %1 · head %2 · adds %3 to the logit of %4")
            .arg(c.row)
            .arg(c.column)
            .arg(double(v), 0, 'g', 3)
            .arg(token);
    });
    m_layerModel->setResult(m_view);
    m_layers->setColumnHidden(AttributionLayerModel::AttentionBias,
                              !m_layerModel->hasAttentionBias());
    fitLayerTable();
}

void AttributionPanel::fitLayerTable() {
    // As wide as its columns: the splitter gives the rest to the plots.
    m_layers->resizeColumnsToContents();
    int width = m_layers->verticalHeader()->sizeHint().width() + 2 * m_layers->frameWidth() +
                m_layers->verticalScrollBar()->sizeHint().width();
    for (int c = 0; c < m_layerModel->columnCount(); ++c)
        if (!m_layers->isColumnHidden(c))
            width += m_layers->columnWidth(c);
    m_layers->setMaximumWidth(width);
}

void AttributionPanel::followSelection() {
    if (!m_view)
        return;
    // The slot: the selection's position, or the slot clicked here when the live session
    // cannot hold it (the selection is bounded by the live cache).
    const qint64 position = m_selection->position() >= 0 ? m_selection->position() : m_clickedSlot;
    const bool onSlot = position >= 0 && size_t(position) < m_view->slotResult.bySlot.size();
    m_slotMarker->setVisible(onSlot);
    if (onSlot) {
        m_slotMarker->point1->setCoords(double(position), 0);
        m_slotMarker->point2->setCoords(double(position), 1);
    }
    m_slotPlot->replot();
    // The cell clicked here while the selection still names its layer and KV head group (a
    // KV head selected elsewhere stands for several query heads: none is marked).
    const int group = std::max(1, m_view->queryHeads / std::max(1, m_view->kvHeads));
    if (m_clickedCell && m_clickedCell->row == m_selection->layer() &&
        m_clickedCell->column / group == m_selection->head())
        m_heads->setMarker(m_clickedCell);
    else
        m_heads->setMarker(std::nullopt);
}

} // namespace kvscope::widgets
