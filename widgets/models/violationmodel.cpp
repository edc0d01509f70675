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

QString countOf(int n, const QString& singular, const QString& plural) {
    return QStringLiteral("%1 %2").arg(n).arg(n == 1 ? singular : plural);
}

QString severityCounts(const kvscope::state::Report& report) {
    using kvscope::state::Severity;
    const auto tr = [](const char* s) { return ViolationModel::tr(s); };
    return QStringLiteral("%1, %2, %3")
        .arg(countOf(report.count(Severity::Error), tr("error"), tr("errors")),
             countOf(report.count(Severity::Warning), tr("warning"), tr("warnings")),
             countOf(report.count(Severity::Note), tr("note"), tr("notes")));
}

SeverityRank rankOf(kvscope::state::Severity s) {
    return SeverityRank(int(s));
}

SeverityRank ValidationView::worst() const {
    return report.violations.empty() ? SeverityRank::None : rankOf(report.worst());
}

int ValidationView::count(kvscope::state::Severity s) const {
    return report.count(s);
}

ViolationModel::ViolationModel(QObject* parent) : QAbstractTableModel(parent) {}

void ViolationModel::setReport(const ValidationViewPtr& report) {
    beginResetModel();
    m_report = report;
    m_rows = report ? report->violations() : std::vector<Violation>{};
    std::stable_sort(m_rows.begin(), m_rows.end(), [](const Violation& a, const Violation& b) {
        return a.severity > b.severity;
    });
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

QString ViolationModel::where(const Violation& v) {
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
    const Violation& v = m_rows[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case SeverityColumn:
            return severityText(rankOf(v.severity));
        case IdColumn:
            return QString::fromStdString(v.id);
        case ItemColumn:
            return QString::fromStdString(v.item);
        case MessageColumn:
            return QString::fromStdString(v.message);
        case WhereColumn:
            return where(v);
        }
        return {};
    case Qt::DecorationRole:
        return index.column() == SeverityColumn ? QVariant(severityColor(rankOf(v.severity)))
                                                : QVariant();
    case Qt::ToolTipRole:
    case ExplanationRole:
        return QString::fromStdString(v.explanation);
    case StructuralRole:
        return v.structural;
    case LayerRole:
        return v.layer;
    case HeadRole:
        return v.head;
    case PositionRole:
        return qlonglong(v.position);
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
        csv.row({severityText(rankOf(v.severity)), QString::fromStdString(v.id),
                 QString::fromStdString(v.item), QString::fromStdString(v.message),
                 QString::number(v.layer), QString::number(v.head), QString::number(v.position),
                 QString::fromStdString(v.explanation)});
    return csv.text();
}

} // namespace kvscope::widgets
