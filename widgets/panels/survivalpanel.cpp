#include "survivalpanel.h"

#include "csv.h"
#include "enginecontroller.h"
#include "exportmenu.h"
#include "heatmapplot.h"
#include "ledgercontroller.h"
#include "plotwidget.h"
#include "statepicker.h"
#include "survivaltokenmodel.h"
#include "tokenstrip.h"

#include "state/probes/eviction.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QResizeEvent>
#include <QCoreApplication>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QToolTip>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

namespace kvscope::widgets {

namespace st = kvscope::state;

namespace {

constexpr double kSlotCount = -1; // the budget combo's "slots" entry

// One colour per policy, in the order survivalPolicies() lists them (Tableau 10 and three more).
QColor policyColour(int i) {
    static const QColor colours[] = {{0x4e, 0x79, 0xa7}, {0xf2, 0x8e, 0x2b}, {0xe1, 0x57, 0x59},
                                     {0x76, 0xb7, 0xb2}, {0x59, 0xa1, 0x4f}, {0xed, 0xc9, 0x48},
                                     {0xb0, 0x7a, 0xa1}, {0xff, 0x9d, 0xa7}, {0xbc, 0xbd, 0x22},
                                     {0x9c, 0x75, 0x5f}, {0x79, 0x70, 0x6e}, {0x17, 0xbe, 0xcf},
                                     {0x2f, 0x2f, 0x2f}};
    constexpr int n = int(sizeof(colours) / sizeof(colours[0]));
    return colours[i % n];
}

// The marker says the kind of policy: eviction a disc, quantization a square, a rebuild
// (replay, residual checkpoints) a triangle, the full state a diamond.
QCPScatterStyle::ScatterShape policyShape(const QString& policy) {
    if (st::isEvictionPolicy(policy.toStdString()))
        return QCPScatterStyle::ssDisc;
    if (policy.startsWith(QLatin1String("quant")))
        return QCPScatterStyle::ssSquare;
    if (policy == QLatin1String("full"))
        return QCPScatterStyle::ssDiamond;
    return QCPScatterStyle::ssTriangle;
}

int policyIndex(const QString& policy) {
    const auto& all = st::survivalPolicies();
    for (size_t i = 0; i < all.size(); ++i)
        if (QString::fromStdString(all[i]) == policy)
            return int(i);
    return int(all.size());
}

bool isQuantization(const QString& policy) {
    return policy.startsWith(QLatin1String("quant"));
}

QString htmlTokens(const QStringList& tokens, int mark) {
    QString out;
    for (int i = 0; i < tokens.size(); ++i) {
        const QString t = tokens[i].toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("⏎"));
        if (i == mark)
            out += QStringLiteral("<span style='background:#ffd6d6; color:#b00000; "
                                  "font-weight:bold; text-decoration:underline'>%1</span>")
                       .arg(t.isEmpty() ? QStringLiteral("∅") : t);
        else if (mark >= 0 && i > mark)
            out += QStringLiteral("<span style='color:#7a7a7a'>%1</span>").arg(t);
        else
            out += t;
    }
    return out;
}

} // namespace

SurvivalPanel::SurvivalPanel(EngineController* engine, LedgerController* ledger, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_ledger(ledger), m_tokens(new SurvivalTokenModel(this)) {
    // Everything scrolls inside the dock: controls, two plots side by side and the texts need
    // more room than a laptop screen's tab group gives, and the panel's minimum size must not
    // widen or heighten the window (tst_layout).
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    auto* scroll = m_scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* content = new QWidget(scroll);
    scroll->setWidget(content);
    outer->addWidget(scroll);
    auto* layout = new QVBoxLayout(content);

    // Three short rows rather than one long one: the panel shares a tab group beside the
    // Attention panel and must fit a laptop screen.
    m_state = new StatePicker(this);
    m_state->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_state->setMinimumContentsLength(12);
    m_state->setToolTip(tr("The state to compress: a snapshot, or the live session (captured "
                           "into the store first, so the result has a parent in the tree)"));
    m_policy = new QComboBox(this);
    for (const auto& p : st::survivalPolicies())
        m_policy->addItem(QString::fromStdString(p));
    m_policy->setToolTip(tr("How the state is made smaller (state::survivalPolicies())"));
    m_budget = new QComboBox(this);
    for (double b : {0.125, 0.25, 0.5, 0.75, 1.0})
        m_budget->addItem(QStringLiteral("%1 %").arg(b * 100), b);
    m_budget->addItem(tr("slots:"), kSlotCount);
    m_budget->setToolTip(tr("Eviction: the share of cached slots kept, or a slot count"));
    m_slots = new QSpinBox(this);
    m_slots->setRange(2, 1 << 20);
    m_slots->setValue(16);
    m_allocation = new QComboBox(this);
    for (const auto& a : st::evictionAllocations())
        m_allocation->addItem(QString::fromStdString(a));
    m_allocation->setToolTip(
        tr("Eviction: how the budget is spread — uniform (the same slots for every layer and "
           "head), pyramid (more in low layers), head-adaptive (each layer's best slots across "
           "its heads)"));
    m_bits = new QComboBox(this);
    for (int b : {2, 4, 8})
        m_bits->addItem(QString::number(b), b);
    m_bits->setToolTip(tr("Quantization: bits per value"));
    m_params = new QLineEdit(this);
    m_params->setPlaceholderText(tr("e.g. sinks=4 recent=32 seed=1"));
    m_params->setToolTip(tr("Policy parameters as name=value: sinks, recent, window, pool, seed, "
                            "horizon (oracle), group, residual, kv"));
    m_steps = new QSpinBox(this);
    m_steps->setRange(1, 4096);
    m_steps->setValue(32);
    m_steps->setToolTip(tr("Teacher-forced continuation steps"));
    m_run = new QPushButton(tr("Run"), this);
    m_sweepButton = new QPushButton(tr("Sweep"), this);
    m_sweepButton->setToolTip(tr("Every policy at every budget (12.5/25/50/75 %) and 2/4/8 bits: "
                                 "the frontier"));
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setEnabled(false);

    // Four short rows: with the bits and parameters beside the budget a row asked for ~470 px
    // and the dock (430 px beside Attention) scrolled sideways, cutting the policy combo off.
    m_policy->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_policy->setMinimumContentsLength(12);
    m_allocation->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_allocation->setMinimumContentsLength(8);
    auto* row1 = new QHBoxLayout;
    row1->addWidget(new QLabel(tr("State"), this));
    row1->addWidget(m_state, 1);
    row1->addWidget(new QLabel(tr("Policy"), this));
    row1->addWidget(m_policy);
    layout->addLayout(row1);
    auto* row2 = new QHBoxLayout;
    row2->addWidget(new QLabel(tr("Budget"), this));
    row2->addWidget(m_budget);
    row2->addWidget(m_slots);
    row2->addWidget(m_allocation);
    row2->addStretch();
    layout->addLayout(row2);
    auto* row3 = new QHBoxLayout;
    row3->addWidget(new QLabel(tr("Bits"), this));
    row3->addWidget(m_bits);
    row3->addWidget(new QLabel(tr("Parameters"), this));
    row3->addWidget(m_params, 1);
    row3->addWidget(new QLabel(tr("Steps"), this));
    row3->addWidget(m_steps);
    layout->addLayout(row3);
    auto* row4 = new QHBoxLayout;
    row4->addWidget(m_run);
    row4->addWidget(m_sweepButton);
    row4->addWidget(m_stop);
    row4->addStretch();
    layout->addLayout(row4);

    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setMinimumWidth(10);
    showMessage(tr("Compress a state (evict slots, quantize K/V) and see what survives: bytes "
                   "kept against the drift of its continuation."),
                false);
    layout->addWidget(m_summary);

    auto* split = m_split = new QSplitter(Qt::Vertical, content);
    split->setChildrenCollapsible(false);
    m_strip = new TokenStrip(split);
    m_strip->setModel(m_tokens);
    m_strip->setMinimumHeight(40);
    m_strip->setToolTip(tr("The source's tokens; struck through: evicted"));
    auto* plots = m_plots = new QSplitter(Qt::Horizontal, split);
    plots->setChildrenCollapsible(false);
    m_damage = new HeatmapPlot(tr("Damage layer × token"), plots);
    m_damage->setWheelScrolls(scroll); // the wheel scrolls the panel; Ctrl+wheel zooms
    m_damage->setLabels(tr("token"), tr("layer"), tr("relative K/V error"));
    m_damage->setIncludeZero(true);
    m_damage->setEmptyText(tr("Run to see what the compression did to each token's K/V, layer "
                              "by layer (1 = evicted)."));
    m_damage->setMinimumSize(120, 80);
    m_frontierPlot = newPlot(plots);
    m_frontierPlot->setMinimumSize(120, 80);
    m_frontierPlot->installEventFilter(this); // the wheel scrolls the panel (eventFilter)
    m_frontierPlot->xAxis->setLabel(tr("bytes kept / full"));
    m_frontierPlot->yAxis->setLabel(tr("KL mean (nats)"));
    m_frontierPlot->yAxis->setScaleType(QCPAxis::stLogarithmic);
    // A few decade ticks: replay's KL (~1e-13) next to an eviction's (~1) spans many decades.
    QSharedPointer<QCPAxisTickerLog> logTicker(new QCPAxisTickerLog);
    logTicker->setTickCount(3);
    logTicker->setSubTickCount(0);
    m_frontierPlot->yAxis->setTicker(logTicker);
    m_frontierPlot->yAxis->setNumberFormat(QStringLiteral("eb"));
    m_frontierPlot->yAxis->setNumberPrecision(0);
    m_frontierPlot->xAxis->setRange(0, 1.05);
    m_frontierPlot->yAxis->setRange(1e-4, 10);
    m_frontierPlot->legend->setVisible(false);
    QFont small = font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.8));
    m_frontierPlot->legend->setFont(small);
    // The legend under the plot (ten policies would cover the curves inside it), a title over.
    legendUnderPlot(m_frontierPlot, 3, 4);
    auto* title = new QCPTextElement(m_frontierPlot, tr("Frontier: Sweep to fill"), small);
    m_frontierPlot->plotLayout()->insertRow(0);
    m_frontierPlot->plotLayout()->addElement(0, 0, title);
    m_frontierPlot->plotLayout()->setRowStretchFactor(0, 0.001);
    m_frontierPlot->plotLayout()->setRowStretchFactor(2, 0.001);
    plots->addWidget(m_damage);
    plots->addWidget(m_frontierPlot);
    m_continuation = new QTextBrowser(split);
    m_continuation->setMinimumHeight(40);
    m_continuation->setPlaceholderText(
        tr("The full state's continuation and the compressed state's own show here."));
    split->addWidget(m_strip);
    split->addWidget(plots);
    split->addWidget(m_continuation);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 4);
    split->setStretchFactor(2, 1);
    layout->addWidget(split, 1);

    installExportMenu(m_strip, {QStringLiteral("survival-tokens"),
                                [this] { return m_strip->grab().toImage(); },
                                [this] { return m_tokens->toCsv(); }});
    installExportMenu(m_frontierPlot,
                      {QStringLiteral("survival-frontier"),
                       [this] { return m_frontierPlot->toPixmap().toImage(); },
                       [this] { return m_sweep ? Frontier::toCsv(m_sweep->json) : QString(); }});
    installExportMenu(m_continuation, {QStringLiteral("survival-continuation"),
                                       [this] { return m_continuation->grab().toImage(); },
                                       [this] { return continuationCsv(); }});

    m_frontierPlot->setMouseTracking(true);
    connect(m_frontierPlot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        const QString text = frontierPointAt(e->position());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(e->globalPosition().toPoint(), text, m_frontierPlot);
    });
    connect(m_policy, &QComboBox::currentIndexChanged, this, &SurvivalPanel::policyChanged);
    connect(m_budget, &QComboBox::currentIndexChanged, this, &SurvivalPanel::policyChanged);
    connect(m_run, &QPushButton::clicked, this, &SurvivalPanel::run);
    connect(m_sweepButton, &QPushButton::clicked, this, &SurvivalPanel::sweep);
    connect(m_stop, &QPushButton::clicked, engine, &EngineController::stop);
    connect(m_params, &QLineEdit::returnPressed, this, &SurvivalPanel::run);
    connect(engine, &EngineController::busyChanged, this,
            [this](bool busy) { m_stop->setEnabled(busy); });
    ledger->onAnswer<LedgerView>(m_state, &StatePicker::setLedger);
    ledger->onAnswer<SurvivalView>(this, &SurvivalPanel::showResult);
    ledger->onAnswer<SurvivalSweepView>(this, &SurvivalPanel::showSweep);
    connect(engine, &EngineController::operationFinished, this, [this](const OperationResult& r) {
        if (!r.ok &&
            (r.kind == QLatin1String("survive") || r.kind == QLatin1String("survival-sweep")))
            showMessage(r.message, true);
    });
    m_budget->setCurrentIndex(1); // 25 %
    policyChanged();
    arrangePlots();
}

void SurvivalPanel::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    arrangePlots();
}

void SurvivalPanel::arrangePlots() {
    // Side by side, the frontier is unreadable under ~300 px beside the heatmap's controls.
    const bool wide = width() >= 760;
    const Qt::Orientation o = wide ? Qt::Horizontal : Qt::Vertical;
    if (m_plots->orientation() != o || m_split->minimumHeight() == 0) {
        m_plots->setOrientation(o);
        // Below these heights the scroll area scrolls rather than squashing the plots. Narrow,
        // the frontier's legend wraps to two entries a row (ten rows for a sweep's twenty
        // curves, ~150 px) and the axes keep ~250 px above it.
        m_split->setMinimumHeight(wide ? 360 : 900);
        m_frontierPlot->setMinimumSize(wide ? 240 : 120, wide ? 160 : 440);
    }
}

void SurvivalPanel::policyChanged() {
    const QString p = m_policy->currentText();
    const bool eviction = st::isEvictionPolicy(p.toStdString());
    m_budget->setEnabled(eviction);
    m_slots->setEnabled(eviction && m_budget->currentData().toDouble() == kSlotCount);
    m_allocation->setEnabled(eviction);
    m_bits->setEnabled(isQuantization(p));
}

void SurvivalPanel::setState(const QString& id) {
    m_state->setCurrentId(id);
}

QString SurvivalPanel::stateId() const {
    return m_state->currentId();
}

bool SurvivalPanel::setPolicy(const QString& policy) {
    const int i = m_policy->findText(policy);
    if (i < 0)
        return false;
    m_policy->setCurrentIndex(i);
    return true;
}

QString SurvivalPanel::policy() const {
    return m_policy->currentText();
}

bool SurvivalPanel::setAllocation(const QString& allocation) {
    const int i = m_allocation->findText(allocation);
    if (i >= 0)
        m_allocation->setCurrentIndex(i);
    return i >= 0;
}

void SurvivalPanel::setBudget(double budget) {
    if (budget <= 1)
        for (int i = 0; i < m_budget->count(); ++i)
            if (std::abs(m_budget->itemData(i).toDouble() - budget) < 1e-12) {
                m_budget->setCurrentIndex(i);
                return;
            }
    m_budget->setCurrentIndex(m_budget->findData(kSlotCount));
    m_slots->setValue(int(std::lround(budget)));
}

double SurvivalPanel::budget() const {
    const double b = m_budget->currentData().toDouble();
    return b == kSlotCount ? double(m_slots->value()) : b;
}

void SurvivalPanel::setBits(int bits) {
    const int i = m_bits->findData(bits);
    if (i >= 0)
        m_bits->setCurrentIndex(i);
}

void SurvivalPanel::setSteps(int steps) {
    m_steps->setValue(steps);
}

void SurvivalPanel::setParameters(const QString& text) {
    m_params->setText(text);
}

bool SurvivalPanel::options(st::SurviveOptions* out, QString* error) const {
    st::SurviveOptions o;
    o.policy = policy().toStdString();
    o.budget = st::isEvictionPolicy(o.policy) ? budget() : 1.0;
    if (isQuantization(policy()))
        o.params["bits"] = m_bits->currentText().toStdString();
    if (st::isEvictionPolicy(o.policy) && m_allocation->currentIndex() > 0)
        o.params["allocation"] = m_allocation->currentText().toStdString();
    // Names and values are core's to judge (an unknown name is refused by name); only the
    // shape name=value is checked here.
    static const QRegularExpression separators(QStringLiteral("[\\s,]+"));
    for (const QString& pair : m_params->text().split(separators, Qt::SkipEmptyParts)) {
        const qsizetype eq = pair.indexOf(QLatin1Char('='));
        if (eq <= 0 || eq == pair.size() - 1) {
            *error = tr("Parameter “%1” is not name=value (e.g. sinks=4)").arg(pair);
            return false;
        }
        o.params[pair.left(eq).toStdString()] = pair.mid(eq + 1).toStdString();
    }
    o.steps = m_steps->value();
    *out = std::move(o);
    return true;
}

void SurvivalPanel::run() {
    st::SurviveOptions o;
    QString error;
    if (!options(&o, &error)) {
        showMessage(error, true);
        return;
    }
    if (!m_engine->hasModel()) {
        showMessage(tr("Load a model first"), true);
        return;
    }
    m_ledger->request(req::Survive{stateId(), o});
}

void SurvivalPanel::sweep() {
    if (!m_engine->hasModel()) {
        showMessage(tr("Load a model first"), true);
        return;
    }
    m_ledger->request(req::SurvivalSweep{stateId(), m_steps->value()});
}

void SurvivalPanel::showMessage(const QString& text, bool error) {
    m_summary->setText(
        error ? QStringLiteral("<span style='color:#c00000'>%1</span>").arg(text.toHtmlEscaped())
              : text.toHtmlEscaped());
}

QString SurvivalPanel::summary() const {
    return m_summary->text();
}

void SurvivalPanel::showResult(const SurvivalViewPtr& view) {
    m_result = view;
    const st::SurviveResult& r = view->result;
    const QString policy = QString::fromStdString(r.policy);
    QString what = policy;
    if (st::isEvictionPolicy(r.policy))
        what +=
            r.budget > 1 ? tr(" at %1 slots").arg(r.budget) : tr(" at %1 %").arg(r.budget * 100);
    for (const auto& [k, v] : r.parameters.items())
        what += QStringLiteral(", %1=%2").arg(
            QString::fromStdString(k),
            QString::fromStdString(v.is_string() ? v.get<std::string>() : v.dump()));
    const double ratio = view->json.value("bytes_ratio", 0.0);
    QString text =
        tr("%1 of %2: %3 % of the bytes kept (%4 of %5 bytes) · KL mean %6, p99 %7, max %8 "
           "nats over %9 · top-1 agreement %10 % · %11 · perplexity ratio %12")
            .arg(what, view->sourceLabel)
            .arg(ratio * 100, 0, 'f', 1)
            .arg(r.bytesKept)
            .arg(r.bytesFull)
            .arg(r.kl.mean, 0, 'g', 3)
            .arg(r.kl.p99, 0, 'g', 3)
            .arg(r.kl.max, 0, 'g', 3)
            .arg(countOf(r.steps, tr("step"), tr("steps")))
            .arg(r.top1Agreement * 100, 0, 'f', 0)
            .arg(r.firstDivergence < 0 ? tr("no greedy divergence")
                                       : tr("first divergence at step %1").arg(r.firstDivergence))
            .arg(r.pplRatio, 0, 'g', 4);
    if (st::isEvictionPolicy(r.policy) && r.keptPerHead.empty())
        text += tr(" · %1 of %2 slots kept").arg(r.keptTokens.size()).arg(view->tokens.size());
    else if (st::isEvictionPolicy(r.policy)) {
        const auto [lo, hi] = std::minmax_element(r.keptPerHead.begin(), r.keptPerHead.end());
        text += tr(" · %1 of %2 slots kept by some head, %3–%4 per head (budget %5)")
                    .arg(r.keptTokens.size())
                    .arg(view->tokens.size())
                    .arg(*lo)
                    .arg(*hi)
                    .arg(r.budgetSlots);
    }
    // Recall probes: the answer's loss, compressed (full state), as core measured it.
    QStringList recall;
    for (const auto& p : r.recall)
        recall << (p.name == "needle" ? tr("needle at %1").arg(p.depth)
                                      : QString::fromStdString(p.name)) +
                      tr(" %1 (%2)").arg(p.compressedLoss, 0, 'f', 2).arg(p.fullLoss, 0, 'f', 2);
    if (!recall.isEmpty())
        text += tr(" · recall loss, nats: ") + recall.join(QStringLiteral(", "));
    text += tr(" · stored as survive %1 (child of %2)").arg(view->id.left(8), view->sourceLabel);
    showMessage(text, false);

    m_tokens->setResult(view);

    // The damage map: [layers x tokens], layer-major as core stores it.
    const int layers = int(r.damageLayers);
    const int tokens = layers > 0 ? int(r.damage.size() / size_t(layers)) : 0;
    m_damage->setData(tokens, layers, r.damage);
    QStringList labels;
    for (const auto& t : view->tokens)
        labels << TokenModel::visibleText(t);
    m_damage->setAxisTokens(Qt::Horizontal, labels);
    m_damage->setDescribe([view](HeatmapCell c, float v) {
        const int t = c.column;
        const QString token = t >= 0 && size_t(t) < view->tokens.size()
                                  ? TokenModel::visibleText(view->tokens[size_t(t)])
                                  : QString();
        const bool kept = t < 0 || size_t(t) >= view->kept.size() || view->kept[size_t(t)];
        return tr("layer %1 · token #%2 “%3” · relative K/V error %4%5")
            .arg(c.row)
            .arg(t)
            .arg(token)
            .arg(double(v), 0, 'g', 3)
            .arg(kept ? QString() : tr(" (evicted)"));
    });

    // The continuations: the full state's greedy tokens and the compressed state's own.
    m_continuation->setHtml(continuationHtml());
    drawFrontier();
}

QString SurvivalPanel::continuationHtml() const {
    if (!m_result)
        return {};
    const int mark = m_result->result.firstDivergence;
    return tr("<p><b>Full state</b>: %1</p><p><b>Compressed</b> (its own greedy choices): "
              "%2</p><p style='color:#555'>%3</p>")
        .arg(htmlTokens(m_result->reference, mark), htmlTokens(m_result->own, mark),
             mark < 0 ? tr("The two continuations agree on every step.")
                      : tr("First divergence at step %1 (marked).").arg(mark));
}

QString SurvivalPanel::continuationCsv() const {
    CsvWriter csv({QStringLiteral("step"), QStringLiteral("full"), QStringLiteral("compressed"),
                   QStringLiteral("full_id"), QStringLiteral("compressed_id")});
    if (!m_result)
        return csv.text();
    const auto& r = m_result->result;
    const size_t n = std::max(r.reference.size(), r.ownTokens.size());
    for (size_t i = 0; i < n; ++i)
        csv.row(
            {QString::number(i),
             i < size_t(m_result->reference.size()) ? m_result->reference[qsizetype(i)] : QString(),
             i < size_t(m_result->own.size()) ? m_result->own[qsizetype(i)] : QString(),
             i < r.reference.size() ? QString::number(r.reference[i]) : QString(),
             i < r.ownTokens.size() ? QString::number(r.ownTokens[i]) : QString()});
    return csv.text();
}

void SurvivalPanel::showSweep(const SurvivalSweepViewPtr& sweep) {
    m_sweep = sweep;
    m_frontier = Frontier::fromSweep(sweep->json);
    showMessage(tr("Sweep of %1: %2 over %3 · hover a point for its run · Run marks one here")
                    .arg(sweep->sourceLabel)
                    .arg(countOf(int(sweep->results.size()), tr("run"), tr("runs")))
                    .arg(countOf(int(m_frontier.curves.size()), tr("curve"), tr("curves"))),
                false);
    drawFrontier();
}

QString SurvivalPanel::frontierPointAt(const QPointF& pixel) const {
    constexpr double kReach = 8; // pixels
    const QCPAxis* x = m_frontierPlot->xAxis;
    const QCPAxis* y = m_frontierPlot->yAxis;
    auto near = [&](double px, double py) {
        return std::hypot(x->coordToPixel(px) - pixel.x(), y->coordToPixel(py) - pixel.y()) <=
               kReach;
    };
    if (m_result) {
        const double bytes = m_result->json.value("bytes_ratio", 0.0);
        const QCPGraph* run = m_frontierPlot->graphCount() > 0
                                  ? m_frontierPlot->graph(m_frontierPlot->graphCount() - 1)
                                  : nullptr;
        if (run && !run->data()->isEmpty() && near(bytes, run->data()->begin()->value))
            return tr("this run (%1): %2 % of the bytes, KL mean %3")
                .arg(QString::fromStdString(m_result->result.policy))
                .arg(bytes * 100, 0, 'f', 1)
                .arg(m_result->result.kl.mean, 0, 'g', 3);
    }
    for (const FrontierCurve& c : m_frontier.curves)
        for (qsizetype i = 0; i < c.x.size(); ++i)
            if (near(c.x[i], c.y[i]))
                return tr("%1 %2: %3 % of the bytes, KL mean %4")
                    .arg(c.name, c.labels.value(i))
                    .arg(c.x[i] * 100, 0, 'f', 1)
                    .arg(c.kl.value(i), 0, 'g', 3);
    return {};
}

void SurvivalPanel::drawFrontier() {
    QCustomPlot* p = m_frontierPlot;
    p->clearGraphs();
    double maxY = m_frontier.maxY, floor = m_frontier.floor, maxX = 1.0;
    for (const FrontierCurve& c : m_frontier.curves) {
        auto* g = p->addGraph();
        g->setName(c.name);
        const QColor colour = policyColour(policyIndex(c.policy));
        // A budget allocation other than uniform: the policy's colour, dashed (pyramid) or
        // dotted (head-adaptive), hollow markers.
        const Qt::PenStyle line = c.allocation.isEmpty()                     ? Qt::SolidLine
                                  : c.allocation == QLatin1String("pyramid") ? Qt::DashLine
                                                                             : Qt::DotLine;
        g->setPen(QPen(QBrush(colour), 1.5, line));
        g->setScatterStyle(QCPScatterStyle(policyShape(c.policy), colour,
                                           c.allocation.isEmpty() ? colour : Qt::white, 6));
        g->setData(c.x, c.y);
        for (double x : c.x)
            maxX = std::max(maxX, x);
    }
    if (m_result) {
        // This run's point, on the same axes (a KL of 0 sits at the floor as in the sweep).
        const double kl = m_result->result.kl.mean;
        if (m_frontier.curves.empty())
            floor = kl > 0 ? kl / 10 : 1e-6;
        const double y = kl > floor ? kl : floor;
        maxY = std::max(maxY, y);
        auto* g = p->addGraph();
        g->setName(tr("this run"));
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(Qt::black, 2),
                                           QBrush(Qt::NoBrush), 12));
        const double x = m_result->json.value("bytes_ratio", 0.0);
        maxX = std::max(maxX, x);
        g->setData(QVector<double>{x}, QVector<double>{y});
    }
    p->legend->setVisible(p->graphCount() > 0);
    if (auto* t = qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0)))
        t->setText(m_sweep ? tr("Frontier of %1").arg(m_sweep->sourceLabel)
                           : tr("Frontier: Sweep to fill"));
    p->xAxis->setRange(0, maxX * 1.05); // a residual checkpoint may keep more than the cache
    p->yAxis->setRange(floor / 2, std::max(maxY * 2, floor * 10));
    p->replot();
}

bool SurvivalPanel::eventFilter(QObject* watched, QEvent* event) {
    // QCustomPlot accepts every wheel event, zoom or not: without this the panel would stand
    // still under the mouse wherever the frontier is.
    if (watched == m_frontierPlot && event->type() == QEvent::Wheel) {
        QCoreApplication::sendEvent(m_scroll->verticalScrollBar(), event);
        return true;
    }
    return QWidget::eventFilter(watched, event);
}

} // namespace kvscope::widgets
