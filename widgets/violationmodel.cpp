#include "violationmodel.h"

#include "csv.h"

#include <QBrush>
#include <QColor>

#include <algorithm>

namespace kvscope::widgets {

QString severityText(SeverityRank s) {
    switch (s) {
    case SeverityRank::Error:
        return QStringLiteral("error");
    case SeverityRank::Warning:
        return QStringLiteral("warning");
    case SeverityRank::Note:
        return QStringLiteral("note");
    case SeverityRank::None:
        break;
    }
    return QStringLiteral("ok");
}

SeverityRank ValidationView::worst() const {
    SeverityRank w = SeverityRank::None;
    for (const auto& v : violations)
        w = std::max(w, v.severity);
    return w;
}

ViolationModel::ViolationModel(QObject* parent) : QAbstractTableModel(parent) {}

void ViolationModel::setReport(const ValidationViewPtr& report) {
    beginResetModel();
    m_report = report;
    m_rows = report ? report->violations : std::vector<ViolationInfo>{};
    std::stable_sort(
        m_rows.begin(), m_rows.end(),
        [](const ViolationInfo& a, const ViolationInfo& b) { return a.severity > b.severity; });
    endResetModel();
}

int ViolationModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : int(m_rows.size());
}

int ViolationModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QColor ViolationModel::severityColor(SeverityRank s) {
    switch (s) {
    case SeverityRank::Error:
        return QColor(0xd0, 0x30, 0x30);
    case SeverityRank::Warning:
        return QColor(0xe0, 0x9a, 0x20);
    case SeverityRank::Note:
        return QColor(0x40, 0x80, 0xc0);
    case SeverityRank::None:
        break;
    }
    return QColor(0x3a, 0xa0, 0x50);
}

QString ViolationModel::where(const ViolationInfo& v) {
    QStringList parts;
    if (v.layer >= 0)
        parts << tr("layer %1").arg(v.layer);
    if (v.head >= 0)
        parts << tr("head %1").arg(v.head);
    if (v.position >= 0)
        parts << tr("position %1").arg(v.position);
    return parts.join(QStringLiteral(", "));
}

QVariant ViolationModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const ViolationInfo& v = m_rows[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case SeverityColumn:
            return severityText(v.severity);
        case IdColumn:
            return v.id;
        case ItemColumn:
            return v.item;
        case MessageColumn:
            return v.message;
        case WhereColumn:
            return where(v);
        }
        return {};
    case Qt::DecorationRole:
        return index.column() == SeverityColumn ? QVariant(severityColor(v.severity)) : QVariant();
    case Qt::ToolTipRole:
        return v.explanation;
    case ExplanationRole:
        return v.explanation;
    case LayerRole:
        return v.layer;
    case HeadRole:
        return v.head;
    case PositionRole:
        return v.position;
    case SeverityRole:
        return int(v.severity);
    }
    return {};
}

QVariant ViolationModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case SeverityColumn:
        return tr("Severity");
    case IdColumn:
        return tr("Check");
    case ItemColumn:
        return tr("Ledger item");
    case MessageColumn:
        return tr("Message");
    case WhereColumn:
        return tr("Where");
    }
    return {};
}

QString ViolationModel::toCsv() const {
    CsvWriter csv({QStringLiteral("severity"), QStringLiteral("id"), QStringLiteral("item"),
                   QStringLiteral("message"), QStringLiteral("layer"), QStringLiteral("head"),
                   QStringLiteral("position"), QStringLiteral("explanation")});
    for (const auto& v : m_rows)
        csv.row({severityText(v.severity), v.id, v.item, v.message, QString::number(v.layer),
                 QString::number(v.head), QString::number(v.position), v.explanation});
    return csv.text();
}

} // namespace kvscope::widgets
