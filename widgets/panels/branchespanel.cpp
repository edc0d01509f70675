#include "branchespanel.h"

#include "colorscale.h"
#include "ledgercontroller.h"
#include "selection.h"
#include "statepicker.h"
#include "tokenmodel.h"

#include <QColor>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>
#include <limits>

namespace kvscope::widgets {

namespace {
QString introText() {
    return QObject::tr("Pick two states that share a beginning (two forks of one snapshot, a "
                       "restored state and its original) and press Align.");
}
} // namespace

void BranchesModel::setResult(BranchesViewPtr result) {
    beginResetModel();
    m_result = std::move(result);
    endResetModel();
}

void BranchesModel::setShade(Shade shade) {
    if (shade == m_shade)
        return;
    m_shade = shade;
    if (columnCount() > 0)
        emit dataChanged(index(0, 0), index(1, columnCount() - 1),
                         {Qt::BackgroundRole, Qt::ForegroundRole});
}

int BranchesModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_result ? 0 : 2;
}

int BranchesModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_result ? 0 : int(m_result->result.steps.size());
}

double BranchesModel::klOf(int column) const {
    if (!m_result || column < 0 || column >= int(m_result->result.steps.size()))
        return std::numeric_limits<double>::quiet_NaN();
    const auto& s = m_result->result.steps[size_t(column)];
    const auto& kl = m_shade == Shade::Own ? s.klOwn : s.klForced;
    return kl ? *kl : std::numeric_limits<double>::quiet_NaN();
}

QVariant BranchesModel::data(const QModelIndex& index, int role) const {
    if (!m_result || !index.isValid())
        return {};
    const auto& r = m_result->result;
    const auto& s = r.steps[size_t(index.column())];
    const bool a = index.row() == 0;
    const auto& tokens = a ? m_result->tokensA : m_result->tokensB;
    const int64_t at = s.after + 1;
    const bool has = at < int64_t(tokens.size());
    const double kl = klOf(index.column());
    const double top = m_shade == Shade::Own ? r.maxKlOwn : r.maxKlForced;
    const double t = std::isnan(kl) ? 0.0 : top > 0 ? std::clamp(kl / top, 0.0, 1.0) : 0.0;
    switch (role) {
    case Qt::DisplayRole:
        return has ? TokenModel::visibleText(tokens[size_t(at)]) : QString();
    case Qt::BackgroundRole:
        return std::isnan(kl) ? QVariant() : QVariant(QColor::fromRgb(gradientColor(t)));
    case Qt::ForegroundRole:
        return std::isnan(kl)
                   ? QVariant()
                   : QVariant(QColor(QColor::fromRgb(gradientColor(t)).lightnessF() > 0.55
                                         ? Qt::black
                                         : Qt::white));
    case Qt::ToolTipRole: {
        auto num = [](const std::optional<double>& x) {
            return x ? QString::number(*x, 'g', 3) : QObject::tr("none (a state has ended)");
        };
        return tr("%1's token %2 %3\nafter token %4: KL on their own tokens %5, with B's cached "
                  "prefix on A's tokens %6")
            .arg(a ? QStringLiteral("A") : QStringLiteral("B"))
            .arg(at)
            .arg(has ? TokenModel::visibleText(tokens[size_t(at)]) : tr("(ended)"))
            .arg(s.after)
            .arg(num(s.klOwn), num(s.klForced));
    }
    case Qt::TextAlignmentRole:
        return int(Qt::AlignCenter);
    default:
        return {};
    }
}

QVariant BranchesModel::headerData(int section, Qt::Orientation o, int role) const {
    if (!m_result || role != Qt::DisplayRole)
        return {};
    if (o == Qt::Vertical)
        return section == 0 ? tr("A %1").arg(m_result->labelA) : tr("B %1").arg(m_result->labelB);
    const auto& s = m_result->result.steps[size_t(section)];
    return section == 0 ? tr("%1 (branch)").arg(s.after + 1) : QString::number(s.after + 1);
}

BranchesPanel::BranchesPanel(LedgerController* ledger, Selection* selection, QWidget* parent)
    : QWidget(parent), m_ledger(ledger), m_selection(selection), m_model(new BranchesModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_states = new StatePairPicker(this);
    auto* align = new QPushButton(tr("Align"), this);
    align->setObjectName(QStringLiteral("branches.align"));
    m_shade = new QComboBox(this);
    m_shade->addItem(tr("shade: KL on their own tokens"));
    m_shade->addItem(tr("shade: KL of B's cache on A's tokens"));
    controls->addWidget(m_states);
    controls->addWidget(align);
    controls->addWidget(m_shade);
    controls->addStretch();
    layout->addLayout(controls);
    m_summary = new QLabel(introText(), this);
    m_summary->setWordWrap(true);
    layout->addWidget(m_summary);
    m_table = new QTableView(this);
    m_table->setModel(m_model);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setDefaultSectionSize(72);
    m_table->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    layout->addWidget(m_table, 1);

    connect(align, &QPushButton::clicked, this, &BranchesPanel::compare);
    connect(m_shade, &QComboBox::currentIndexChanged, this, [this](int i) {
        m_model->setShade(i == 1 ? BranchesModel::Shade::Forced : BranchesModel::Shade::Own);
    });
    ledger->onAnswer<LedgerView>(m_states, &StatePairPicker::setLedger);
    ledger->onAnswer<BranchesView>(this, &BranchesPanel::show);
    connect(m_table, &QTableView::clicked, this, [this](const QModelIndex& index) {
        if (const auto& r = m_model->result())
            m_selection->setPosition(r->result.steps[size_t(index.column())].after + 1);
    });
}

QString BranchesPanel::summaryText() const {
    return m_summary->text();
}

void BranchesPanel::setStates(const QString& a, const QString& b) {
    m_states->setIds(a, b);
}

void BranchesPanel::compare() {
    m_ledger->request(req::Branches{m_states->idA(), m_states->idB()});
}

void BranchesPanel::clear() {
    m_model->setResult(nullptr);
    m_summary->setText(introText());
}

void BranchesPanel::show(const BranchesViewPtr& view) {
    // Paints core's result (state::compareBranches, what `kvscope-cli branches --json` prints).
    m_states->setIds(view->idA, view->idB);
    m_model->setResult(view);
    const auto& c = view->result;
    QString text = tr("%1 shared tokens, then A holds %2 more and B %3 · max KL on their own "
                      "tokens %4 · ")
                       .arg(c.prefix)
                       .arg(c.tokensA - c.prefix)
                       .arg(c.tokensB - c.prefix)
                       .arg(c.maxKlOwn, 0, 'g', 3);
    text +=
        c.firstStepForcedAbove < 0
            ? tr("B's cache changes no step on A's tokens (KL ≤ %1)").arg(c.threshold, 0, 'g', 3)
            : QStringLiteral("<span style='color:#c00000'>%1</span>")
                  .arg(tr("B's cache changes A's next-token distribution from column %1 on "
                          "(max KL %2)")
                           .arg(c.steps[size_t(c.firstStepForcedAbove)].after + 1)
                           .arg(c.maxKlForced, 0, 'g', 3));
    m_summary->setText(text);
    // Where the two part: the branch point in view.
    if (m_model->columnCount() > 0)
        m_table->scrollTo(m_model->index(0, 0));
}

} // namespace kvscope::widgets
