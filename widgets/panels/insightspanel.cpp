#include "insightspanel.h"

#include "enginecontroller.h"
#include "ledgercontroller.h"

#include "insights/registry.h"

#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace kvscope::widgets {

namespace {

namespace in = kvscope::insights;

QString qstr(const std::string& s) {
    return QString::fromStdString(s);
}

// The badge colours: green holds, amber holds with a caveat, red does not hold.
QString badgeStyle(in::Verdict v) {
    const char* colour = v == in::Verdict::Holds             ? "#2e7d32"
                         : v == in::Verdict::HoldsWithCaveat ? "#b26a00"
                                                             : "#c62828";
    return QStringLiteral("QLabel { color: white; background: %1; border-radius: 4px; "
                          "padding: 2px 8px; font-weight: bold; }")
        .arg(QLatin1String(colour));
}

QLabel* wrapped(QWidget* parent) {
    auto* l = new QLabel(parent);
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    return l;
}

} // namespace

InsightsPanel::InsightsPanel(EngineController* engine, LedgerController* ledger, QWidget* parent)
    : QWidget(parent), m_ledger(ledger) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* split = new QSplitter(Qt::Horizontal, this);
    layout->addWidget(split);

    m_tree = new QTreeWidget(split);
    m_tree->setColumnCount(3);
    m_tree->setHeaderLabels({tr("Insight"), tr("Class"), tr("Verdict")});
    m_tree->setUniformRowHeights(true);
    m_tree->setToolTip(tr("The compendium's 80 claims by tier; run a measurable one to get its "
                          "verdict on the loaded model"));
    const auto tiers = in::tierNames();
    std::vector<QTreeWidgetItem*> tierItems;
    for (size_t t = 0; t < tiers.size(); ++t) {
        auto* item =
            new QTreeWidgetItem(m_tree, {tr("Tier %1 · %2").arg(t + 1).arg(qstr(tiers[t]))});
        item->setFirstColumnSpanned(true);
        tierItems.push_back(item);
    }
    for (const in::Insight& i : in::registry()) {
        auto* item =
            new QTreeWidgetItem(tierItems[size_t(i.tier - 1)],
                                {QStringLiteral("%1 · %2").arg(i.number).arg(qstr(i.claim)),
                                 qstr(in::className(i.cls)), QString()});
        item->setData(0, Qt::UserRole, i.number);
        item->setToolTip(0, qstr(i.claim));
        m_items[i.number] = item;
    }
    m_tree->header()->setStretchLastSection(false);
    m_tree->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_tree->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_tree->header()->setSectionResizeMode(2, QHeaderView::ResizeToContents);

    // The detail pane scrolls: on a laptop screen the claim, the plan, the measurements and
    // the explanation are taller than the dock, and a squeezed label would be cut off.
    auto* scroll = new QScrollArea(split);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    auto* detail = new QWidget(scroll);
    scroll->setWidget(detail);
    auto* d = new QVBoxLayout(detail);
    d->setContentsMargins(6, 0, 0, 0);
    m_title = wrapped(detail);
    m_title->setStyleSheet(QStringLiteral("font-weight: bold;"));
    m_meta = wrapped(detail);
    m_meta->setStyleSheet(QStringLiteral("color: #555;"));
    m_plan = wrapped(detail);
    m_run = new QPushButton(tr("Run experiment"), detail);
    m_badge = new QLabel(detail);
    auto* row = new QHBoxLayout;
    row->addWidget(m_run);
    row->addWidget(m_badge);
    row->addStretch();
    m_measurements = new QStandardItemModel(0, 3, this);
    m_measurements->setHorizontalHeaderLabels({tr("Measurement"), tr("Value"), tr("Unit")});
    m_table = new QTableView(detail);
    m_table->setModel(m_measurements);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_table->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setWordWrap(false);
    // Room for the header and four measurements before the table scrolls.
    m_table->setMinimumHeight(m_table->horizontalHeader()->sizeHint().height() +
                              4 * m_table->verticalHeader()->defaultSectionSize() + 4);
    m_why = wrapped(detail);
    m_hint = wrapped(detail);
    m_evidence = new QPushButton(detail);
    d->addWidget(m_title);
    d->addWidget(m_meta);
    d->addWidget(m_plan);
    d->addLayout(row);
    d->addWidget(m_table, 1);
    d->addWidget(m_why);
    d->addWidget(m_hint);
    d->addWidget(m_evidence, 0, Qt::AlignLeft);
    // A claim without an experiment hides the table, which took the spare height: the texts
    // stay at the top instead of spreading down the panel.
    d->addStretch();
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);

    connect(m_tree, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
        if (item && item->data(0, Qt::UserRole).isValid())
            showInsight(item->data(0, Qt::UserRole).toInt());
    });
    connect(m_run, &QPushButton::clicked, this, &InsightsPanel::run);
    connect(m_evidence, &QPushButton::clicked, this, &InsightsPanel::showEvidence);
    ledger->onAnswer<InsightView>(this, [this](const InsightViewPtr& view) {
        m_results[view->number] = view;
        refreshItem(view->number);
        if (view->number == m_number)
            showResult(view);
    });
    connect(engine, &EngineController::operationFinished, this, [this](const OperationResult& r) {
        if (r.kind != QLatin1String("insight"))
            return;
        m_running = false;
        m_run->setEnabled(in::hasExperiment(m_number));
        if (!r.ok) {
            m_badge->setStyleSheet(QStringLiteral("color: #c00000;"));
            m_badge->setText(r.message);
        }
    });
    select(1);
}

bool InsightsPanel::select(int number) {
    const auto it = m_items.find(number);
    if (it == m_items.end())
        return false;
    m_tree->setCurrentItem(it->second);
    m_tree->scrollToItem(it->second);
    showInsight(number);
    return true;
}

void InsightsPanel::run() {
    if (!in::hasExperiment(m_number) || m_running)
        return;
    m_running = true;
    m_run->setEnabled(false);
    m_badge->setStyleSheet(QString());
    m_badge->setText(tr("running…"));
    m_ledger->request(req::RunInsight{m_number});
}

InsightViewPtr InsightsPanel::result(int number) const {
    const auto it = m_results.find(number);
    return it == m_results.end() ? nullptr : it->second;
}

void InsightsPanel::clearResults() {
    m_results.clear();
    for (const auto& [n, item] : m_items)
        item->setText(2, QString());
    showInsight(m_number);
}

QString InsightsPanel::verdictText() const {
    return m_badge->text();
}
QString InsightsPanel::whyText() const {
    return m_why->text();
}
QString InsightsPanel::evidenceText() const {
    return m_hint->text();
}

QString InsightsPanel::evidenceDock(in::EvidenceView view) {
    switch (view) {
    case in::EvidenceView::Drift:
        return QStringLiteral("dock.drift");
    case in::EvidenceView::Diff:
        return QStringLiteral("dock.diff");
    case in::EvidenceView::Faults:
        return QStringLiteral("dock.validation");
    case in::EvidenceView::Attention:
        return QStringLiteral("dock.attention");
    case in::EvidenceView::Positions:
        return QStringLiteral("dock.positions");
    case in::EvidenceView::Heatmap:
        return QStringLiteral("dock.kv");
    case in::EvidenceView::Induction:
        return QStringLiteral("dock.induction");
    }
    return QStringLiteral("dock.drift");
}

void InsightsPanel::showEvidence() {
    const auto r = result(m_number);
    if (!r)
        return;
    if (r->result.states.empty()) {
        emit evidenceRequested(evidenceDock(r->result.view));
        return;
    }
    m_ledger->request(req::StoreEvidence{r, in::evidenceFollowsLive(r->result.view)});
}

void InsightsPanel::showInsight(int number) {
    const in::Insight* i = in::findInsight(number);
    if (!i)
        return;
    m_number = number;
    m_title->setText(QStringLiteral("#%1 · %2").arg(number).arg(qstr(i->claim)));
    m_meta->setText(
        tr("Tier %1 (%2) · %3").arg(i->tier).arg(qstr(i->tierName), qstr(in::className(i->cls))));
    QString plan;
    if (i->cls == in::InsightClass::Measurable)
        plan = tr("<b>Experiment:</b> %1").arg(qstr(i->experiment).toHtmlEscaped());
    if (!i->note.empty())
        plan += (plan.isEmpty() ? QString() : QStringLiteral("<br>")) +
                (i->cls == in::InsightClass::Definitional  ? tr("<b>By construction:</b> %1")
                 : i->cls == in::InsightClass::NotTestable ? tr("<b>Not testable here:</b> %1")
                                                           : tr("<b>Caveat:</b> %1"))
                    .arg(qstr(i->note).toHtmlEscaped());
    m_plan->setText(plan);
    const bool runnable = in::hasExperiment(number);
    m_run->setVisible(runnable);
    m_run->setEnabled(runnable && !m_running);
    m_table->setVisible(runnable);
    if (const auto r = result(number)) {
        showResult(r);
        return;
    }
    m_badge->setStyleSheet(QString());
    m_badge->setText(runnable ? tr("not run on this model yet") : QString());
    m_measurements->removeRows(0, m_measurements->rowCount());
    m_why->clear();
    m_hint->clear();
    m_evidence->hide();
}

void InsightsPanel::showResult(const InsightViewPtr& view) {
    const in::ExperimentResult& r = view->result;
    m_badge->setStyleSheet(badgeStyle(r.verdict));
    m_badge->setText(qstr(in::verdictName(r.verdict)));
    m_measurements->removeRows(0, m_measurements->rowCount());
    for (const auto& m : r.measurements) {
        QList<QStandardItem*> cells{new QStandardItem(qstr(m.name)),
                                    new QStandardItem(QString::number(m.value, 'g', 4)),
                                    new QStandardItem(qstr(m.unit))};
        cells[0]->setToolTip(qstr(m.note));
        cells[1]->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        m_measurements->appendRow(cells);
    }
    m_why->setText(qstr(r.why));
    const QString evidence = qstr(r.evidence);
    m_hint->setText(tr("<i>Where to look:</i> %1").arg(evidence.toHtmlEscaped()));
    m_evidence->setVisible(true);
    const QString where = QLatin1String(in::evidenceViewName(r.view));
    QStringList roles;
    for (const in::EvidenceState& e : r.states)
        roles << qstr(e.role);
    m_evidence->setText(r.states.empty() ? tr("Show the %1 panel").arg(where)
                                         : tr("Show the evidence (%1)").arg(where));
    m_evidence->setToolTip(
        r.states.empty()
            ? QString()
            : tr("Adds the experiment's states (%1) to the fork tree and opens them in the %2 "
                 "panel%3")
                  .arg(roles.join(QStringLiteral(", ")), where,
                       in::evidenceFollowsLive(r.view)
                           ? tr("; the first becomes the live session (a forced restore)")
                           : QString()));
}

void InsightsPanel::refreshItem(int number) {
    const auto it = m_items.find(number);
    const auto r = result(number);
    if (it == m_items.end() || !r)
        return;
    it->second->setText(2, qstr(in::verdictName(r->result.verdict)));
    it->second->setForeground(2, QColor(r->result.verdict == in::Verdict::Holds ? "#2e7d32"
                                        : r->result.verdict == in::Verdict::HoldsWithCaveat
                                            ? "#b26a00"
                                            : "#c62828"));
}

} // namespace kvscope::widgets
