#include "driftpanel.h"

#include "csv.h"
#include "displaytext.h"
#include "exportmenu.h"
#include "ledgercontroller.h"
#include "plotwidget.h"
#include "statepicker.h"

#include <QComboBox>
#include <QFontMetrics>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvscope::widgets {

namespace {
// Three stacked axis rects share the step axis: KL, max |Δlogit|, top-k agreement.
constexpr int kRects = 3;

// Each rect's title, long and short: the rotated title a rect shows is the longest that fits
// between its neighbours' (a short dock leaves each rect ~30 px, less than "max |Δlogit|").
struct Title {
    QString full, brief;
};

// The longest of `t` no wider than `room` pixels in `font`, or none.
QString fittingTitle(const Title& t, const QFont& font, int room) {
    const QFontMetrics fm(font);
    if (fm.horizontalAdvance(t.full) <= room)
        return t.full;
    return fm.horizontalAdvance(t.brief) <= room ? t.brief : QString();
}

// The top-5 overlap axis: the whole range's ends (0 and 5) as its ticks, or only 5 where the
// two labels would touch. A tick count alone put a lone "4" beside the line at 5.
// True when the ticks changed.
bool setOverlapTicks(QCPAxis* y, int lineHeight) {
    auto* ticker = dynamic_cast<QCPAxisTickerText*>(y->ticker().data());
    if (!ticker)
        return false;
    const bool both = std::abs(y->coordToPixel(5) - y->coordToPixel(0)) >= lineHeight;
    if (ticker->ticks().size() == (both ? 2 : 1))
        return false;
    ticker->clear();
    if (both)
        ticker->addTick(0, QStringLiteral("0"));
    ticker->addTick(5, QStringLiteral("5"));
    return true;
}
} // namespace

QString DriftPanel::introText() {
    return tr("Continue two states under the same sampler and compare their logits step by step.");
}

DriftPanel::DriftPanel(LedgerController* ledger, QWidget* parent)
    : QWidget(parent), m_ledger(ledger), m_plot(newPlot(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_states = new StatePairPicker(this);
    m_steps = new QSpinBox(this);
    m_steps->setRange(1, 4096);
    m_steps->setValue(32);
    m_profile = new QComboBox(this);
    // Core's profiles by core's names (what `kvscope-cli drift --profile` takes).
    using kvscope::state::ToleranceProfile;
    for (const ToleranceProfile p :
         {ToleranceProfile::Exact, ToleranceProfile::SameDevice, ToleranceProfile::CrossDevice})
        m_profile->addItem(QString::fromStdString(kvscope::state::profileName(p)));
    m_profile->setCurrentText(
        QString::fromStdString(kvscope::state::profileName(ToleranceProfile::SameDevice)));
    auto* run = new QPushButton(tr("Run drift"), this);
    controls->addWidget(m_states);
    controls->addStretch();
    layout->addLayout(controls);
    // A second row, so that the panel fits beside the Attention panel on a laptop screen.
    auto* settings = new QHBoxLayout;
    settings->addWidget(new QLabel(tr("Steps"), this));
    settings->addWidget(m_steps);
    settings->addWidget(new QLabel(tr("Tolerance"), this));
    settings->addWidget(m_profile);
    settings->addWidget(run);
    settings->addStretch();
    layout->addLayout(settings);
    m_summary = new QLabel(introText(), this);
    m_summary->setWordWrap(true);
    layout->addWidget(m_summary);
    layout->addWidget(m_plot, 1);
    m_plot->setMinimumSize(240, 150); // three small axis rects; grows with the dock

    m_plot->plotLayout()->clear();
    const std::vector<Title> titles = {{tr("KL(A‖B)"), tr("KL")},
                                       {tr("max |Δlogit|"), tr("|Δ|")},
                                       {tr("top-5 overlap"), tr("top-5")}};
    auto* group = new QCPMarginGroup(m_plot);
    for (int i = 0; i < kRects; ++i) {
        auto* rect = new QCPAxisRect(m_plot);
        m_plot->plotLayout()->addElement(i, 0, rect);
        rect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
        rect->axis(QCPAxis::atLeft)->setLabel(titles[size_t(i)].full);
        if (i == kRects - 1)
            rect->axis(QCPAxis::atLeft)->setTicker(QSharedPointer<QCPAxisTickerText>::create());
        rect->axis(QCPAxis::atLeft)->ticker()->setTickCount(3);
        // Fewer, less round ticks (0.9, 1.3) rather than more than the rect has room for.
        rect->axis(QCPAxis::atLeft)->ticker()->setTickStepStrategy(QCPAxisTicker::tssMeetTickCount);
        rect->axis(QCPAxis::atLeft)->setNumberFormat(QStringLiteral("g"));
        rect->axis(QCPAxis::atBottom)->setTickLabels(i == kRects - 1);
        // Steps are whole numbers: ticks at multiples of 1 (5, 10, ...), never at 2.5.
        auto steps = QSharedPointer<QCPAxisTickerFixed>::create();
        steps->setTickStep(1);
        steps->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
        rect->axis(QCPAxis::atBottom)->setTicker(steps);
        if (i == kRects - 1)
            rect->axis(QCPAxis::atBottom)->setLabel(tr("step"));
        auto* g = m_plot->addGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        g->setPen(QPen(QColor(0x4c, 0x78, 0xa8), 2));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
        if (i == kRects - 1) {
            g->setLineStyle(QCPGraph::lsStepCenter);
            rect->axis(QCPAxis::atLeft)->setRange(-0.2, 5.5);
        }
    }
    // A short dock gives each rect ~30 px: three ticks' labels there sat on top of each other
    // (1.5e-05 over 1e-05 over 5e-06), and the rotated titles ran into each other. As many
    // ticks as fit two label heights apart, and each title the longest that fits the distance
    // to its neighbours' (centre to centre: two titles that fit it never meet); a change
    // applies from the next replot, queued once.
    connect(m_plot, &QCustomPlot::afterLayout, this, [this, titles] {
        bool changed = false;
        int pitch = m_plot->height();
        for (int i = 1; i < m_plot->axisRectCount(); ++i)
            pitch = std::min(pitch, m_plot->axisRect(i)->center().y() -
                                        m_plot->axisRect(i - 1)->center().y());
        for (int i = 0; i < m_plot->axisRectCount(); ++i) {
            QCPAxis* y = m_plot->axisRect(i)->axis(QCPAxis::atLeft);
            const int line = QFontMetrics(y->tickLabelFont()).height();
            const int fit = std::clamp(m_plot->axisRect(i)->height() / (2 * line), 1, 3);
            if (y->ticker()->tickCount() != fit) {
                y->ticker()->setTickCount(fit);
                changed = true;
            }
            if (i == kRects - 1)
                changed |= setOverlapTicks(y, line);
            const QString title = fittingTitle(titles[size_t(i)], y->labelFont(), pitch);
            if (y->label() != title) {
                y->setLabel(title);
                changed = true;
            }
        }
        if (changed)
            m_plot->replot(QCustomPlot::rpQueuedReplot);
    });
    installExportMenu(m_plot,
                      {QStringLiteral("drift"), [this] { return m_plot->toPixmap().toImage(); },
                       [this] { return toCsv(); }});
    connect(run, &QPushButton::clicked, this, &DriftPanel::run);
    ledger->onAnswer<LedgerView>(m_states, &StatePairPicker::setLedger);
    ledger->onAnswer<DriftView>(this, &DriftPanel::show);
}

bool DriftPanel::setProfile(const QString& name) {
    const int i = m_profile->findText(name);
    if (i >= 0)
        m_profile->setCurrentIndex(i);
    return i >= 0;
}

QString DriftPanel::pickedA() const {
    return m_states->idA();
}

QString DriftPanel::pickedB() const {
    return m_states->idB();
}

void DriftPanel::setStates(const QString& a, const QString& b) {
    m_states->setIds(a, b);
}

void DriftPanel::setSteps(int steps) {
    m_steps->setValue(steps);
}

void DriftPanel::run() {
    m_ledger->request(
        req::Drift{m_states->idA(), m_states->idB(), m_steps->value(), m_profile->currentText()});
}

void DriftPanel::clear() {
    m_drift.reset();
    m_plot->clearItems();
    for (int i = 0; i < m_plot->graphCount(); ++i)
        m_plot->graph(i)->data()->clear();
    m_summary->setText(introText());
    m_plot->replot();
}

void DriftPanel::show(const DriftViewPtr& drift) {
    m_drift = drift;
    const kvscope::state::DriftResult& r = drift->outcome.result;
    const auto n = int(r.steps.size());
    // The pickers name what is shown, also when the request came from elsewhere (the tour,
    // Ctrl+D).
    m_states->setIds(drift->idA, drift->idB);
    // So do the steps (when the run did them all: otherwise the count asked is unknown) and
    // the tolerance: the tour asks for 16 steps while the box still said 32.
    const QString stopReason = QString::fromStdString(r.stopReason);
    if (n > 0 && stopReasonText(stopReason).isEmpty())
        m_steps->setValue(n);
    if (m_profile->findText(drift->profile) >= 0)
        m_profile->setCurrentText(drift->profile);
    m_plot->clearItems();
    QVector<double> x, kl, abs, overlap;
    for (const auto& s : r.steps) {
        x << s.step;
        kl << s.logits.kl;
        abs << s.logits.maxAbs;
        overlap << s.logits.topKOverlap;
    }
    m_plot->graph(0)->setData(x, kl, true);
    m_plot->graph(1)->setData(x, abs, true);
    m_plot->graph(2)->setData(x, overlap, true);
    const double tol[2] = {drift->outcome.tolerance.maxKl, drift->outcome.tolerance.maxAbsLogit};
    for (int i = 0; i < kRects; ++i) {
        QCPAxisRect* rect = m_plot->axisRect(i);
        QCPAxis* xAxis = rect->axis(QCPAxis::atBottom);
        QCPAxis* yAxis = rect->axis(QCPAxis::atLeft);
        xAxis->setRange(-0.5, std::max<double>(1.0, double(n)) - 0.5);
        if (i < 2) {
            // Tolerance band: [0, tol] shaded; values above it are out of tolerance.
            double hi = tol[i] * 1.5;
            for (double v : (i == 0 ? kl : abs))
                hi = std::max(hi, v * 1.1);
            yAxis->setRange(0, hi > 0 ? hi : 1e-6);
            auto* band = new QCPItemRect(m_plot);
            band->setClipAxisRect(rect);
            band->topLeft->setAxes(xAxis, yAxis);
            band->bottomRight->setAxes(xAxis, yAxis);
            band->topLeft->setCoords(-1e9, tol[i]);
            band->bottomRight->setCoords(1e9, 0);
            band->setPen(QPen(QColor(0x59, 0xa1, 0x4f), 1, Qt::DashLine));
            band->setBrush(QColor(0x59, 0xa1, 0x4f, 50));
        }
        if (r.firstDivergingStep >= 0) {
            auto* line = new QCPItemStraightLine(m_plot);
            line->setClipAxisRect(rect);
            line->point1->setAxes(xAxis, yAxis);
            line->point2->setAxes(xAxis, yAxis);
            line->point1->setCoords(r.firstDivergingStep, 0);
            line->point2->setCoords(r.firstDivergingStep, 1);
            line->setPen(QPen(Qt::red, 2));
        }
    }
    // Core's judgement per step (state::within under the profile), counted by core.
    const int outside = drift->outcome.stepsOutsideTolerance();
    // "32 steps", or "12 steps (stopped at the end-of-text token)": the reason only when the
    // run ended before the steps asked for.
    QString steps = countOf(n, tr("step"), tr("steps"));
    if (const QString why = stopReasonText(stopReason); !why.isEmpty())
        steps += QStringLiteral(" (%1)").arg(why);
    QString text = tr("<b>%1</b> vs <b>%2</b> · %3 · %4 outside the %5 tolerance")
                       .arg(drift->labelA.toHtmlEscaped(), drift->labelB.toHtmlEscaped(),
                            steps.toHtmlEscaped(), QString::number(outside), drift->profile);
    if (r.firstDivergingStep >= 0 && r.firstDivergingStep < n &&
        r.firstDivergingStep < drift->tokenA.size()) {
        const int i = r.firstDivergingStep;
        text += tr(" · <span style='color:#c00000'>first divergence at step %1: A %2, B would pick "
                   "%3</span>")
                    .arg(i)
                    .arg(displayToken(drift->tokenA[i]).toHtmlEscaped(),
                         displayToken(drift->ownTokenB[i]).toHtmlEscaped());
    } else {
        text += tr(" · the same tokens throughout");
    }
    m_summary->setText(text);
    m_plot->replot();
}

QString DriftPanel::summaryText() const {
    return m_summary->text();
}

QString DriftPanel::toCsv() const {
    CsvWriter csv({QStringLiteral("step"), QStringLiteral("kl"), QStringLiteral("max_abs_logit"),
                   QStringLiteral("topk_overlap"), QStringLiteral("top1_agree"),
                   QStringLiteral("token_a"), QStringLiteral("own_token_b")});
    if (m_drift) {
        const auto& steps = m_drift->outcome.result.steps;
        for (int i = 0; i < int(steps.size()); ++i) {
            const auto& s = steps[size_t(i)];
            csv.row({QString::number(s.step), QString::number(s.logits.kl, 'g', 8),
                     QString::number(s.logits.maxAbs, 'g', 8),
                     QString::number(s.logits.topKOverlap),
                     s.logits.top1Agree ? QStringLiteral("1") : QStringLiteral("0"),
                     m_drift->tokenA.value(i), m_drift->ownTokenB.value(i)});
        }
    }
    return csv.text();
}

} // namespace kvscope::widgets
