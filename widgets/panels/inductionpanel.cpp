#include "inductionpanel.h"

#include "csv.h"
#include "displaytext.h"
#include "enginecontroller.h"
#include "exportmenu.h"
#include "ledgercontroller.h"
#include "selection.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <functional>
#include <limits>

namespace kvscope::widgets {

namespace st = kvscope::state;

namespace {

// Paints the score column as a bar (the score is an attention probability: 0..1) under the
// number, so the strong heads stand out at a glance.
class ScoreBarDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override {
        const QVariant v = index.data(InductionHeadModel::ScoreRole);
        if (v.isValid()) {
            const double score = std::clamp(v.toDouble(), 0.0, 1.0);
            QRectF bar = QRectF(option.rect).adjusted(2, 3, -2, -3);
            bar.setWidth(bar.width() * score);
            painter->save();
            painter->fillRect(bar, QColor(0x4c, 0x78, 0xa8, 110));
            painter->restore();
        }
        QStyledItemDelegate::paint(painter, option, index);
    }
};

} // namespace

// ---- InductionHeadModel ------------------------------------------------------------------

void InductionHeadModel::setReport(InductionViewPtr report) {
    beginResetModel();
    m_report = std::move(report);
    // Core's ranking: the strongest head first.
    m_rows = m_report ? m_report->report.byInduction() : std::vector<st::HeadScore>{};
    endResetModel();
}

int InductionHeadModel::rowOf(int layer, int head) const {
    for (size_t i = 0; i < m_rows.size(); ++i)
        if (m_rows[i].layer == layer && m_rows[i].head == head)
            return int(i);
    return -1;
}

int InductionHeadModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : int(m_rows.size());
}

int InductionHeadModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant InductionHeadModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount)
        return {};
    const st::HeadScore& h = m_rows[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case Layer:
            return h.layer;
        case Head:
            return h.head;
        case Induction:
            return QString::number(h.induction, 'f', 3);
        case PreviousToken:
            return QString::number(h.previousToken, 'f', 3);
        }
        break;
    case ScoreRole:
        if (index.column() == Induction)
            return h.induction;
        if (index.column() == PreviousToken)
            return h.previousToken;
        break;
    case Qt::ToolTipRole:
        if (index.column() == Induction)
            return tr("Mean attention, from a token that occurred before, to the token after its "
                      "earlier occurrence (where the continuation to copy is)");
        if (index.column() == PreviousToken)
            return tr("Mean attention to the immediately preceding position (the other half of "
                      "the induction circuit)");
        return tr("Select to show this query head in the Attention panel");
    case Qt::TextAlignmentRole:
        return int(Qt::AlignRight | Qt::AlignVCenter);
    }
    return {};
}

QVariant InductionHeadModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Layer:
        return tr("Layer");
    case Head:
        return tr("Head");
    case Induction:
        return tr("Induction");
    case PreviousToken:
        return tr("Previous token");
    }
    return {};
}

QString InductionHeadModel::toCsv() const {
    CsvWriter csv({QStringLiteral("layer"), QStringLiteral("head"), QStringLiteral("induction"),
                   QStringLiteral("previous_token")});
    for (const auto& h : m_rows)
        csv.row({QString::number(h.layer), QString::number(h.head),
                 QString::number(h.induction, 'g', 9), QString::number(h.previousToken, 'g', 9)});
    return csv.text();
}

// ---- InductionRecallModel ----------------------------------------------------------------

void InductionRecallModel::setReport(InductionViewPtr report) {
    beginResetModel();
    m_report = std::move(report);
    endResetModel();
}

int InductionRecallModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_report ? 0 : int(m_report->report.recalled.size());
}

int InductionRecallModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant InductionRecallModel::data(const QModelIndex& index, int role) const {
    if (!m_report || !index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount)
        return {};
    const st::RecalledToken& r = m_report->report.recalled[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case Position:
            return qint64(r.position);
        case Token:
            return displayToken(m_report->recalledTexts.value(index.row()));
        case Earlier:
            return qint64(r.earlierPosition);
        case Rank:
            return qint64(r.rank);
        case Probability:
            return QString::number(r.probability, 'f', 3);
        }
        break;
    case Qt::FontRole:
        if (r.rank == 1) { // the model predicted it: it remembered
            QFont f;
            f.setBold(true);
            return f;
        }
        break;
    case Qt::ToolTipRole:
        if (index.column() == Rank)
            return tr("Rank of this token in the model's prediction at this position (1 = its "
                      "top choice)");
        if (index.column() == Earlier)
            return tr("Position of its latest earlier occurrence");
        break;
    case Qt::TextAlignmentRole:
        return int(index.column() == Token ? Qt::AlignLeft | Qt::AlignVCenter
                                           : Qt::AlignRight | Qt::AlignVCenter);
    }
    return {};
}

QVariant InductionRecallModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Position:
        return tr("Position");
    case Token:
        return tr("Token");
    case Earlier:
        return tr("Earlier at");
    case Rank:
        return tr("Rank");
    case Probability:
        return tr("Probability");
    }
    return {};
}

QString InductionRecallModel::toCsv() const {
    CsvWriter csv({QStringLiteral("position"), QStringLiteral("token"),
                   QStringLiteral("earlier_position"), QStringLiteral("rank"),
                   QStringLiteral("probability")});
    if (m_report)
        for (size_t i = 0; i < m_report->report.recalled.size(); ++i) {
            const st::RecalledToken& r = m_report->report.recalled[i];
            csv.row({QString::number(r.position), m_report->recalledTexts.value(qsizetype(i)),
                     QString::number(r.earlierPosition), QString::number(r.rank),
                     QString::number(r.probability, 'g', 9)});
        }
    return csv.text();
}

// ---- InductionPanel ----------------------------------------------------------------------

InductionPanel::InductionPanel(EngineController* engine, LedgerController* ledger,
                               Selection* selection, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_ledger(ledger), m_selection(selection),
      m_heads(new InductionHeadModel(this)), m_recall(new InductionRecallModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* textRow = new QHBoxLayout;
    m_text = new QLineEdit(this);
    m_text->setPlaceholderText(
        tr("Text to probe (a passage that repeats a name or a phrase); empty: a random segment"));
    m_text->setClearButtonEnabled(true);
    m_useLive = new QPushButton(tr("Use the live session's text"), this);
    m_useLive->setToolTip(tr("Probe exactly the text the session panels show"));
    textRow->addWidget(new QLabel(tr("Text"), this));
    textRow->addWidget(m_text, 1);
    textRow->addWidget(m_useLive);
    layout->addLayout(textRow);

    auto* row = new QHBoxLayout;
    m_length = new QSpinBox(this);
    m_length->setRange(2, 512);
    m_length->setValue(32);
    m_length->setToolTip(tr("Length of the random segment (fed twice after BOS)"));
    m_seed = new QSpinBox(this);
    m_seed->setRange(0, std::numeric_limits<int>::max());
    // Room for six digits: the ten of INT_MAX would widen the whole dock.
    m_seed->setMinimumWidth(m_seed->fontMetrics().horizontalAdvance(QStringLiteral("000000")) + 32);
    m_seed->setValue(1);
    m_seed->setToolTip(tr("Seed that draws the random segment"));
    auto* go = new QPushButton(tr("Run"), this);
    row->addWidget(new QLabel(tr("Random segment length"), this));
    row->addWidget(m_length);
    row->addWidget(new QLabel(tr("Seed"), this));
    row->addWidget(m_seed);
    row->addWidget(go);
    row->addStretch();
    layout->addLayout(row);

    m_summary = new QLabel(tr("Which heads look back at the context? A head that attends from a "
                              "repeated token to the token after its earlier occurrence is an "
                              "induction head: it lets the model copy what came next last time."),
                           this);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    auto* split = new QSplitter(Qt::Horizontal, this);
    m_headTable = new QTableView(split);
    m_headTable->setModel(m_heads);
    m_headTable->setItemDelegateForColumn(InductionHeadModel::Induction,
                                          new ScoreBarDelegate(m_headTable));
    m_headTable->setItemDelegateForColumn(InductionHeadModel::PreviousToken,
                                          new ScoreBarDelegate(m_headTable));
    m_headTable->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_headTable->setSelectionMode(QAbstractItemView::SingleSelection);
    // Each column at least as wide as its header ("Induction" read "nductio" when four equal
    // stretched columns shared a narrow dock); the score bars take what is left.
    m_headTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_headTable->horizontalHeader()->setStretchLastSection(true);
    m_headTable->verticalHeader()->hide();
    m_recallTable = new QTableView(split);
    m_recallTable->setModel(m_recall);
    m_recallTable->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_recallTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // Sized from the first rows: measuring thousands of rows on every paint stalls the UI.
    m_recallTable->horizontalHeader()->setResizeContentsPrecision(64);
    m_recallTable->horizontalHeader()->setStretchLastSection(true);
    m_recallTable->verticalHeader()->hide();
    split->addWidget(m_headTable);
    split->addWidget(m_recallTable);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    layout->addWidget(split, 1);

    // Context menus: copy as CSV, then the shared PNG/CSV export.
    auto addCopy = [](QTableView* table, std::function<QString()> csv) {
        auto* copy = new QAction(tr("Copy table as CSV"), table);
        connect(copy, &QAction::triggered, table,
                [csv] { QApplication::clipboard()->setText(csv()); });
        table->addAction(copy);
    };
    addCopy(m_headTable, [this] { return m_heads->toCsv(); });
    addCopy(m_recallTable, [this] { return m_recall->toCsv(); });
    installExportMenu(m_headTable, {QStringLiteral("induction-heads"),
                                    [this] { return m_headTable->grab().toImage(); },
                                    [this] { return m_heads->toCsv(); }});
    installExportMenu(m_recallTable, {QStringLiteral("induction-recall"),
                                      [this] { return m_recallTable->grab().toImage(); },
                                      [this] { return m_recall->toCsv(); }});

    connect(go, &QPushButton::clicked, this, &InductionPanel::run);
    connect(m_text, &QLineEdit::returnPressed, this, &InductionPanel::run);
    connect(m_useLive, &QPushButton::clicked, this, &InductionPanel::useLiveText);
    connect(m_headTable->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        const auto rows = m_headTable->selectionModel()->selectedRows();
        if (!rows.isEmpty())
            onRowSelected(rows.first().row());
    });
    connect(engine, &EngineController::modelLoaded, this, [this](const ModelInfo& info) {
        // BOS and two copies must fit the context (the probe's own bound).
        const int most = int(std::clamp<int64_t>((info.maxContext - 1) / 2, 2, 512));
        m_length->setRange(2, most);
        // A report about another model's heads would select layers this one may not have.
        m_heads->setReport(nullptr);
        m_recall->setReport(nullptr);
    });
    connect(engine, &EngineController::stateChanged, this,
            [this](const CacheViewPtr& s) { m_useLive->setEnabled(s && s->length > 1); });
    m_useLive->setEnabled(false);
    ledger->onAnswer<InductionView>(this, &InductionPanel::showReport);
}

QString InductionPanel::summary() const {
    return m_summary->text();
}

void InductionPanel::setText(const QString& text) {
    m_text->setText(text);
}

void InductionPanel::setSegment(int length, quint64 seed) {
    m_length->setValue(length);
    m_seed->setValue(int(std::min<quint64>(seed, quint64(m_seed->maximum()))));
}

QString InductionPanel::liveText() const {
    QString text;
    if (const auto s = m_engine->state())
        for (const auto& t : s->tokens)
            if (!t.special)
                text += t.text;
    return text;
}

void InductionPanel::useLiveText() {
    m_text->setText(liveText());
}

void InductionPanel::run() {
    m_ledger->request(req::Induction{m_text->text(), m_length->value(), quint64(m_seed->value())});
}

bool InductionPanel::selectHead(int layer, int head) {
    const int row = m_heads->rowOf(layer, head);
    if (row < 0)
        return false;
    // Selecting the row that is already selected emits nothing: then tell the others here.
    const bool already = m_headTable->selectionModel()->isRowSelected(row, {});
    m_headTable->selectRow(row);
    m_headTable->scrollTo(m_heads->index(row, 0));
    if (already)
        onRowSelected(row);
    return true;
}

bool InductionPanel::selectStrongest() {
    if (m_heads->rowCount() == 0)
        return false;
    const st::HeadScore& h = m_heads->head(0);
    return selectHead(h.layer, h.head);
}

void InductionPanel::onRowSelected(int row) {
    if (row < 0 || row >= m_heads->rowCount())
        return;
    const st::HeadScore h = m_heads->head(row);
    m_selection->setLayer(h.layer);
    emit headSelected(h.layer, h.head);
}

void InductionPanel::showReport(const InductionViewPtr& report) {
    m_heads->setReport(report);
    m_recall->setReport(report);
    m_summary->setText(report->summary);
    if (!report->text.isEmpty())
        m_text->setText(report->text);
}

} // namespace kvscope::widgets
