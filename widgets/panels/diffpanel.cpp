#include "diffpanel.h"

#include "heatmapplot.h"
#include "ledgercontroller.h"
#include "selection.h"
#include "statepicker.h"
#include "tokenmodel.h"
#include "tokenstrip.h"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTabWidget>
#include <QTabBar>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include <limits>

namespace kvscope::widgets {

namespace {
CacheViewPtr tokensOnly(const std::vector<TokenInfo>& tokens) {
    auto v = std::make_shared<CacheView>();
    v->tokens = tokens;
    v->length = int64_t(tokens.size());
    return v;
}
} // namespace

DiffPanel::DiffPanel(LedgerController* ledger, Selection* selection, QWidget* parent)
    : QWidget(parent), m_ledger(ledger), m_selection(selection), m_tokensA(new TokenModel(this)),
      m_tokensB(new TokenModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_states = new StatePairPicker(this);
    auto* compareButton = new QPushButton(tr("Compare"), this);
    auto* mattersButton = new QPushButton(tr("What matters?"), this);
    mattersButton->setObjectName(QStringLiteral("diff.matters"));
    mattersButton->setToolTip(
        tr("Which of A's K/V differences from B change the next token: B's K/V patched into A "
           "layer by layer, then the smallest set of (layer, head, slots) patches that brings "
           "KL under the tolerance. With B = A, A is compared with its own tokens replayed."));
    controls->addWidget(m_states);
    controls->addWidget(compareButton);
    controls->addWidget(mattersButton);
    controls->addStretch();
    layout->addLayout(controls);
    m_diffText = introText();
    m_mattersText = mattersIntro();
    // The summary wraps inside a frameless area of two to three lines that scrolls when a
    // report says more: a longer text must not make the dock (and the window) taller
    // (tst_layout's tour step 5 grew the window past 768 px).
    auto* summaryArea = new QScrollArea(this);
    summaryArea->setFrameShape(QFrame::NoFrame);
    summaryArea->setWidgetResizable(true);
    summaryArea->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_summary = new QLabel(m_diffText, summaryArea);
    m_summary->setWordWrap(true);
    m_summary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    summaryArea->setWidget(m_summary);
    const int line = m_summary->fontMetrics().lineSpacing();
    summaryArea->setMinimumHeight(line + 4);
    summaryArea->setMaximumHeight(3 * line + 6);
    layout->addWidget(summaryArea);

    auto* split = m_split = new QSplitter(Qt::Vertical, this);
    auto* strips = new QWidget(split);
    auto* grid = new QGridLayout(strips);
    grid->setContentsMargins(0, 0, 0, 0);
    m_labelA = new QLabel(tr("A"), strips);
    m_labelB = new QLabel(tr("B"), strips);
    m_stripA = new TokenStrip(strips);
    m_stripB = new TokenStrip(strips);
    m_stripA->setObjectName(QStringLiteral("diff.stripA"));
    m_stripB->setObjectName(QStringLiteral("diff.stripB"));
    m_stripA->setModel(m_tokensA);
    m_stripB->setModel(m_tokensB);
    // A row of chips at the least (a list view asks for 70 px): with the maps under them they
    // set the height of the KV heatmaps' tab group, the tallest on the right.
    for (auto* strip : {m_stripA, m_stripB})
        strip->setMinimumHeight(3 * line);
    grid->addWidget(m_labelA, 0, 0);
    grid->addWidget(m_labelB, 0, 1);
    grid->addWidget(m_stripA, 1, 0);
    grid->addWidget(m_stripB, 1, 1);
    m_views = new QTabWidget(split);
    auto* maps = new QSplitter(Qt::Horizontal, m_views);
    m_byHead = new HeatmapPlot(tr("Δ layer × KV head"), maps);
    m_byPosition = new HeatmapPlot(tr("Δ layer × position"), maps);
    m_byHead->setLabels(tr("KV head"), tr("layer"), tr("max |Δ|"));
    m_byPosition->setLabels(tr("cache slot"), tr("layer"), tr("max |Δ|"));
    // max |Δ| is never negative: a sequential scale from zero (a diverging one left its blue
    // half unused), so a layer that changed stands out against the unchanged ones at zero.
    for (auto* plot : {m_byHead, m_byPosition})
        plot->setIncludeZero(true);
    for (auto* plot : {m_byHead, m_byPosition})
        plot->setEmptyText(emptyText());
    maps->addWidget(m_byHead);
    maps->addWidget(m_byPosition);
    maps->setStretchFactor(1, 3);
    // Tabs on the side: a tab bar above would take height the maps need on a 768-pixel screen.
    m_views->setTabPosition(QTabWidget::West);
    // Whole labels: squeezed, the side bar scrolled and read "…tters" (1366x768).
    m_views->tabBar()->setUsesScrollButtons(false);
    m_views->tabBar()->setElideMode(Qt::ElideNone);
    m_views->addTab(maps, tr("Bytes"));
    m_views->setTabToolTip(0, tr("Where the bytes differ: max |ΔK|, |ΔV| per layer and head, "
                                 "per layer and slot"));
    auto* matters = new QWidget(m_views);
    auto* mattersLayout = new QVBoxLayout(matters);
    mattersLayout->setContentsMargins(0, 0, 0, 0);
    m_matters = new HeatmapPlot(tr("KL removed by patching B's K/V in: layer × slots"), matters);
    m_matters->setLabels(tr("cache slots"), tr("layer"), tr("KL removed"));
    // Negative: the patch made A's next step further from B's. Zero is white.
    m_matters->setDiverging(true);
    m_matters->setEmptyText(mattersIntro());
    mattersLayout->addWidget(m_matters, 1);
    m_views->addTab(matters, tr("Matters"));
    // The maps may be lower than a standalone heatmap's default (120 px): this dock shares a
    // 768-pixel screen with the strips and the summary above them.
    for (auto* plot : {m_byHead, m_byPosition, m_matters})
        plot->plot()->setMinimumHeight(80);
    m_views->setTabToolTip(1, tr("What matters: the KL each patch of B's K/V into A removes "
                                 "from the next step, per layer and slot block"));
    split->addWidget(strips);
    split->addWidget(m_views);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    connect(compareButton, &QPushButton::clicked, this, &DiffPanel::compare);
    connect(mattersButton, &QPushButton::clicked, this, &DiffPanel::localize);
    // The line above the strips says what the page on show found.
    connect(m_views, &QTabWidget::currentChanged, this,
            [this](int page) { m_summary->setText(page == 1 ? m_mattersText : m_diffText); });
    ledger->onAnswer<LocalizeView>(this, &DiffPanel::showMatters);
    connect(m_matters, &HeatmapPlot::cellClicked, this, [this](int slot, int layer) {
        m_selection->set(layer, -1, slot);
        m_matters->setMarker(HeatmapCell{slot, layer});
    });
    ledger->onAnswer<LedgerView>(m_states, &StatePairPicker::setLedger);
    ledger->onAnswer<DiffView>(this, &DiffPanel::show);
    // Linked selection: a token chosen in either strip selects that position in both.
    for (TokenStrip* strip : {m_stripA, m_stripB})
        connect(strip, &TokenStrip::tokenClicked, this, [this](int row) {
            m_selection->setPosition(row);
            highlight(row);
            updateSelection(); // the position map's mark on the row too
        });
    connect(m_byHead, &HeatmapPlot::cellClicked, this, [this](int head, int layer) {
        m_selection->set(layer, head, m_selection->position());
    });
    connect(m_byPosition, &HeatmapPlot::cellClicked, this,
            [this](int position, int layer) { m_selection->set(layer, -1, position); });
    connect(m_selection, &Selection::changed, this, &DiffPanel::updateSelection);
}

QString DiffPanel::pickedA() const {
    return m_states->idA();
}

QString DiffPanel::pickedB() const {
    return m_states->idB();
}

void DiffPanel::setStates(const QString& a, const QString& b) {
    m_states->setIds(a, b);
}

void DiffPanel::compare() {
    m_ledger->request(req::Diff{m_states->idA(), m_states->idB()});
}

void DiffPanel::localize() {
    m_ledger->request(req::Localize{m_states->idA(), m_states->idB()});
}

QString DiffPanel::mattersIntro() {
    return tr("Press “What matters?” to find which of A's K/V differences from B change the next "
              "token (pick the same state twice to compare it with its own tokens replayed).");
}

void DiffPanel::showMatters(const LocalizeViewPtr& view) {
    // Paints core's result (state::localize, what `kvscope-cli localize --json` prints).
    m_localized = view;
    m_states->setIds(view->idA, view->idB);
    const auto& r = view->result;
    // Both states hold the same tokens (localize refuses others): the strips show them.
    m_tokensA->setState(tokensOnly(view->tokens));
    m_tokensB->setState(tokensOnly(view->tokens));
    m_labelA->setText(
        tr("<b>A</b> %1 · %2 tokens").arg(view->labelA.toHtmlEscaped()).arg(view->tokens.size()));
    m_labelB->setText(
        tr("<b>B</b> %1 · %2 tokens").arg(view->labelB.toHtmlEscaped()).arg(view->tokens.size()));
    const QString headline =
        QStringLiteral("<b>%1</b>").arg(QString::fromStdString(r.summary).toHtmlEscaped());
    QString detail = tr("A %1 vs B %2 · next token %3 fed to both · KL %4 → %5, tolerance %6 (%7)")
                         .arg(view->labelA, view->labelB)
                         .arg(r.probeToken)
                         .arg(r.klBefore, 0, 'g', 3)
                         .arg(r.klAfter, 0, 'g', 3)
                         .arg(r.tolerance, 0, 'g', 3)
                         .arg(QString::fromStdString(kvscope::state::profileName(r.profile)));
    QStringList minimal;
    for (int i : r.minimal) {
        const auto& p = r.patches[size_t(i)];
        minimal << tr("layer %1%2, slots %3–%4")
                       .arg(p.layer)
                       .arg(p.head < 0 ? QString() : tr(" kv head %1").arg(p.head))
                       .arg(p.first)
                       .arg(p.end - 1);
    }
    if (!minimal.isEmpty())
        detail += tr(" · minimal patches: %1").arg(minimal.join(QStringLiteral("; ")));
    m_mattersText = (r.verdict == "clean"
                         ? headline
                         : QStringLiteral("<span style='color:#c00000'>%1</span>").arg(headline)) +
                    QStringLiteral("<br>") + detail.toHtmlEscaped();
    m_summary->setText(m_mattersText);
    m_worst.reset();
    if (!r.map) {
        m_matters->setData(0, 0, {});
        m_views->setCurrentIndex(1);
        return;
    }
    // One column per cache slot (a block's value repeated over its slots), so that the x
    // axis reads slots and a click names one; the read-out names the block.
    const auto& map = *r.map;
    const int rows = int(map.klRemoved.size());
    const int columns = int(r.cacheSlots);
    std::vector<float> values;
    values.reserve(size_t(rows) * size_t(columns));
    float worst = -std::numeric_limits<float>::infinity();
    for (int l = 0; l < rows; ++l)
        for (int slot = 0; slot < columns; ++slot) {
            const auto b = size_t(slot / map.block);
            const auto v = float(map.klRemoved[size_t(l)][b]);
            values.push_back(v);
            if (v > worst) {
                worst = v;
                m_worst = HeatmapCell{int(b * size_t(map.block)), l};
            }
        }
    m_matters->setData(columns, rows, values);
    const int64_t block = map.block, slotCount = r.cacheSlots;
    QStringList slotTokens;
    for (const auto& t : view->tokens)
        slotTokens << TokenModel::visibleText(t);
    m_matters->setDescribe([block, slotCount, slotTokens](HeatmapCell c, float v) {
        const int64_t first = c.column / block * block;
        const int64_t last = std::min(slotCount, first + block) - 1;
        return tr("layer %1 · slot %2 %3 · slots %4–%5 patched together · KL removed %6")
            .arg(c.row)
            .arg(c.column)
            .arg(slotTokens.value(c.column))
            .arg(first)
            .arg(last)
            .arg(double(v), 0, 'g', 3);
    });
    m_views->setCurrentIndex(1);
    // The map is the answer: the strips keep their smallest height, the map takes the rest.
    const int strips = m_split->widget(0)->minimumSizeHint().height();
    m_split->setSizes({strips, std::max(0, m_split->height() - strips)});
    if (m_worst && worst > 0) {
        m_matters->setMarker(m_worst);
        m_selection->set(m_worst->row, -1, m_worst->column);
        highlight(m_worst->column);
    } else {
        m_matters->setMarker(std::nullopt);
    }
}

QString DiffPanel::introText() {
    return tr("Pick two states and compare their tokens and caches.");
}

QString DiffPanel::emptyText() {
    return tr("Pick two states above and press Compare: where their caches differ shows here, "
              "layer by layer.");
}

void DiffPanel::clear() {
    m_diff.reset();
    m_firstDivergence = -1;
    m_highlight = -1;
    m_tokensA->setState(nullptr);
    m_tokensB->setState(nullptr);
    m_labelA->setText(tr("A"));
    m_labelB->setText(tr("B"));
    for (auto* plot : {m_byHead, m_byPosition}) {
        plot->setData(0, 0, {});
        plot->setEmptyText(emptyText());
    }
    m_summary->setText(introText());
    m_localized.reset();
    m_worst.reset();
    m_matters->setData(0, 0, {});
    m_matters->setMarker(std::nullopt);
    m_diffText = introText();
    m_mattersText = mattersIntro();
    m_views->setCurrentIndex(0);
}

void DiffPanel::show(const DiffViewPtr& diff) {
    // Paints core's report (state::diff, what `kvscope-cli diff` prints): nothing here compares.
    m_diff = diff;
    m_states->setIds(diff->idA, diff->idB); // the pickers name what is shown, whoever asked
    const auto& r = diff->report;
    m_tokensA->setState(tokensOnly(diff->tokensA));
    m_tokensB->setState(tokensOnly(diff->tokensB));
    m_labelA->setText(
        tr("<b>A</b> %1 · %2 tokens").arg(diff->labelA.toHtmlEscaped()).arg(diff->tokensA.size()));
    m_labelB->setText(
        tr("<b>B</b> %1 · %2 tokens").arg(diff->labelB.toHtmlEscaped()).arg(diff->tokensB.size()));
    for (auto* plot : {m_byHead, m_byPosition})
        plot->setEmptyText(r.cacheMismatch.empty()
                               ? emptyText()
                               : tr("The caches cannot be compared: %1")
                                     .arg(QString::fromStdString(r.cacheMismatch)));
    m_byHead->setData(diff->kvHeads, diff->layers, diff->layerHead);
    m_byPosition->setData(int(r.comparedPositions), diff->layers, r.layerPositionMaxAbs);
    QStringList slotTokens;
    for (int64_t i = 0; i < r.comparedPositions; ++i) {
        // A's token in slot i (a recorded eviction holds token keptA[i] there).
        const int64_t t = kvscope::state::tokenOfSlot(diff->keptA, i);
        slotTokens << (t >= 0 && t < int64_t(diff->tokensA.size())
                           ? TokenModel::visibleText(diff->tokensA[size_t(t)])
                           : QString());
    }
    m_byPosition->setAxisTokens(Qt::Horizontal, slotTokens);
    const QString red = QStringLiteral("<span style='color:#c00000'>%1</span>");
    QStringList parts;
    // Two models' states (core's DiffReport::sameModel, the CLI's "models"): said before
    // anything, since every difference below follows from it.
    if (!r.sameModel)
        parts << red.arg(tr("<b>two models' states</b>: A was made with %1, B with %2")
                             .arg(QString::fromStdString(r.modelA).toHtmlEscaped(),
                                  QString::fromStdString(r.modelB).toHtmlEscaped()));
    // A state whose head mask cannot be read is no answer (the CLI refuses the pair): said first.
    for (const auto& bad : r.invalid)
        parts << red.arg(tr("<b>%1 is invalid</b>: %2: %3")
                             .arg(QString::fromStdString(bad.side).toUpper(),
                                  QString::fromStdString(bad.violation.id),
                                  QString::fromStdString(bad.violation.message).toHtmlEscaped()));
    parts << (r.firstDivergence < 0
                  ? tr("Token buffers are identical")
                  : red.arg(tr("First diverging token at index %1").arg(r.firstDivergence)));
    const auto& p = r.positions;
    if (p.equal())
        parts << tr("positions identical");
    else if (p.differ == 0) // only the lengths differ
        parts << tr("positions agree over the %1 slots both hold (%2 vs %3)")
                     .arg(p.compared)
                     .arg(p.lengthA)
                     .arg(p.lengthB);
    else if (p.offset && p.differ == p.compared)
        parts << red.arg(tr("every cached position shifted by %1").arg(*p.offset));
    else
        parts << red.arg(tr("%1 of %2 positions differ, first at index %3")
                             .arg(p.differ)
                             .arg(p.compared)
                             .arg(p.firstDifferingIndex));
    if (r.nextPositionA != r.nextPositionB)
        parts << red.arg(tr("next position %1 vs %2").arg(r.nextPositionA).arg(r.nextPositionB));
    if (!r.mask.equal())
        parts << red.arg(tr("%1 mask entries differ").arg(r.mask.differ));
    if (!r.headMask.equal())
        parts << red.arg(
            tr("head masks differ (%1 layer/head/slot entries)").arg(r.headMask.differ));
    if (!r.cacheMismatch.empty())
        parts << tr("caches not comparable: %1")
                     .arg(QString::fromStdString(r.cacheMismatch).toHtmlEscaped());
    else if (r.firstDivergingLayer < 0)
        parts << tr("K/V agree within %1 over %2 shared slots (max |Δ| %3)")
                     .arg(r.tolerance)
                     .arg(r.comparedPositions)
                     .arg(r.maxAbs, 0, 'g', 3);
    else
        parts << red.arg(tr("K/V diverge (|Δ| > %1, max %2) first at layer %3, slot %4")
                             .arg(r.tolerance)
                             .arg(r.maxAbs, 0, 'g', 3)
                             .arg(r.firstDivergingLayer)
                             .arg(r.firstDivergingPosition));
    // Core's verdict (DiffReport::verdict, the CLI's "verdict"): a replay whose K/V agree within
    // the tolerance is the same state even though its lineage differs.
    const int fields = r.manifestDifferences();
    if (fields > 0)
        parts << tr("%1 manifest fields differ").arg(fields);
    const std::string verdict = r.verdict();
    parts << (verdict == "identical" ? tr("<b>identical state</b>")
              : verdict == "same"    ? tr("<b>the same state</b>")
                                     : red.arg(tr("<b>states differ</b>")));
    m_diffText = parts.join(QStringLiteral(" · "));
    m_summary->setText(m_diffText);
    m_views->setCurrentIndex(0);
    // The first divergence of anything (core's DiffReport::firstDifference), highlighted in
    // both strips (linked selection).
    m_firstDivergence = r.firstDifference();
    if (m_firstDivergence >= 0)
        m_selection->setPosition(m_firstDivergence); // bounded by the live session
    updateSelection();
    highlight(m_firstDivergence); // not bounded: the strips show the compared states
    updateSelection();
}

void DiffPanel::highlight(qint64 slot) {
    m_highlight = slot;
    m_stripA->setCurrentToken(int(slot)); // and scrolled to it
    m_stripB->setCurrentToken(int(slot));
}

void DiffPanel::updateSelection() {
    // A position chosen elsewhere moves the mark; another layer or head does not (the mark may
    // lie past the live session's end, where the window's selection cannot follow it: the
    // tour's fork step marked slot 35 and then the live session's last, 29, for a first
    // divergence at 45).
    const qint64 p = m_selection->position();
    if (p >= 0 && p != m_followedPosition)
        highlight(p);
    m_followedPosition = p;
    if (!m_diff || m_diff->layers == 0)
        return;
    const int layer = std::clamp(m_selection->layer(), 0, m_diff->layers - 1);
    m_byHead->setMarker(
        HeatmapCell{std::clamp(m_selection->head(), 0, std::max(0, m_diff->kvHeads - 1)), layer});
    m_byPosition->setMarker(m_highlight >= 0 && m_highlight < m_diff->report.comparedPositions
                                ? std::optional(HeatmapCell{int(m_highlight), layer})
                                : std::nullopt);
}

} // namespace kvscope::widgets
