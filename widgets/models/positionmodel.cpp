#include "positionmodel.h"

#include "csv.h"
#include "tokenmodel.h"

#include <QBrush>
#include <QColor>

namespace kvscope::widgets {

PositionModel::PositionModel(QObject* parent) : QAbstractTableModel(parent) {}

void PositionModel::setState(const CacheViewPtr& state) {
    beginResetModel();
    m_state = state;
    m_alignment = state ? state::alignPositions(int64_t(state->tokens.size()), state->positions,
                                                state->nextPosition, state->keptTokens)
                        : state::PositionAlignment{};
    endResetModel();
}

int PositionModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : int(m_alignment.rows.size());
}

int PositionModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant PositionModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const auto& r = m_alignment.rows[size_t(index.row())];
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case IndexColumn:
            return qlonglong(r.token);
        case TokenColumn:
            if (m_state && size_t(r.token) < m_state->tokens.size())
                return TokenModel::visibleText(m_state->tokens[size_t(r.token)]);
            return tr("(none)");
        case StoredColumn:
            return r.stored >= 0 ? QVariant(qlonglong(r.stored)) : QVariant(tr("—"));
        case ExpectedColumn:
            return qlonglong(r.expected);
        case StatusColumn:
            if (r.evicted)
                return tr("evicted (recorded)");
            if (!r.mismatch)
                return tr("ok");
            if (r.stored < 0)
                return tr("no cache slot");
            return tr("off by %1").arg(r.stored - r.expected);
        }
    }
    if (role == Qt::ForegroundRole && r.mismatch)
        return QBrush(QColor(0xc0, 0x20, 0x20));
    return {};
}

QVariant PositionModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case IndexColumn:
        return tr("Index");
    case TokenColumn:
        return tr("Token");
    case StoredColumn:
        return tr("Stored");
    case ExpectedColumn:
        return tr("Expected");
    case StatusColumn:
        return tr("Status");
    }
    return {};
}

QString PositionModel::toCsv() const {
    CsvWriter csv({QStringLiteral("index"), QStringLiteral("stored_position"),
                   QStringLiteral("expected_position"), QStringLiteral("mismatch")});
    for (const auto& r : m_alignment.rows)
        csv.row({QString::number(r.token), QString::number(r.stored), QString::number(r.expected),
                 r.mismatch ? QStringLiteral("1") : QStringLiteral("0")});
    return csv.text();
}

} // namespace kvscope::widgets
