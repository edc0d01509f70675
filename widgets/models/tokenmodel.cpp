#include "tokenmodel.h"

#include "csv.h"
#include "displaytext.h"

#include <algorithm>

namespace kvscope::widgets {

TokenModel::TokenModel(QObject* parent) : QAbstractTableModel(parent) {}

void TokenModel::setState(const CacheViewPtr& state) {
    // A run appends tokens: the rows already shown stay, the new ones are inserted (a reset
    // would make every view lay out thousands of rows again for each new token).
    const size_t before = m_state ? m_state->tokens.size() : 0;
    const size_t after = state ? state->tokens.size() : 0;
    const auto same = [](const TokenInfo& a, const TokenInfo& b) {
        return a.id == b.id && a.position == b.position && a.special == b.special &&
               a.text == b.text && a.piece == b.piece && a.segment == b.segment;
    };
    const bool appended =
        m_state && state && before > 0 && after > before &&
        std::equal(m_state->tokens.begin(), m_state->tokens.end(), state->tokens.begin(), same);
    if (!appended) {
        beginResetModel();
        m_state = state;
        endResetModel();
        return;
    }
    beginInsertRows({}, int(before), int(after) - 1);
    m_state = state;
    endInsertRows();
}

int TokenModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_state ? 0 : int(m_state->tokens.size());
}

int TokenModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QColor TokenModel::segmentColor(const QString& segment) {
    if (segment == QLatin1String("prompt") || segment == QLatin1String("user"))
        return QColor(0x4c, 0x78, 0xa8);
    if (segment == QLatin1String("generated") || segment == QLatin1String("assistant"))
        return QColor(0x59, 0xa1, 0x4f);
    if (segment == QLatin1String("system"))
        return QColor(0xb0, 0x7a, 0xa1);
    if (segment == QLatin1String("generation prompt"))
        return QColor(0xf2, 0x8e, 0x2b);
    if (segment == QLatin1String("scaffold") || segment == QLatin1String("unsegmented"))
        return QColor(0x79, 0x70, 0x6e);
    return QColor::fromHsv(int(qHash(segment) % 360), 120, 170);
}

QString TokenModel::visibleText(const TokenInfo& token) {
    return displayToken(token.text.isEmpty() ? token.piece : token.text);
}

QVariant TokenModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid) ||
        !m_state)
        return {};
    const TokenInfo& t = m_state->tokens[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case IndexColumn:
            return index.row();
        case IdColumn:
            return t.id;
        case TextColumn:
            return visibleText(t);
        case PositionColumn:
            return t.position >= 0 ? QVariant(qlonglong(t.position)) : QVariant();
        case SegmentColumn:
            return t.segment;
        }
        return {};
    case Qt::ToolTipRole:
        return tr("token #%1  id %2  piece %3\nposition %4  segment %5%6")
            .arg(index.row())
            .arg(t.id)
            .arg(t.piece.toHtmlEscaped(),
                 t.position >= 0 ? QString::number(t.position) : tr("(no cache slot)"), t.segment,
                 t.special ? tr("  (special)") : QString());
    case SegmentColorRole:
        return segmentColor(t.segment);
    case TokenIdRole:
        return t.id;
    case PositionRole:
        return qlonglong(t.position);
    case SpecialRole:
        return t.special;
    }
    return {};
}

QVariant TokenModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
    case IndexColumn:
        return tr("#");
    case IdColumn:
        return tr("Id");
    case TextColumn:
        return tr("Text");
    case PositionColumn:
        return tr("Position");
    case SegmentColumn:
        return tr("Segment");
    }
    return {};
}

QString TokenModel::toCsv() const {
    CsvWriter csv({QStringLiteral("index"), QStringLiteral("id"), QStringLiteral("text"),
                   QStringLiteral("piece"), QStringLiteral("position"), QStringLiteral("segment")});
    if (m_state)
        for (size_t i = 0; i < m_state->tokens.size(); ++i) {
            const auto& t = m_state->tokens[i];
            csv.row({QString::number(i), QString::number(t.id), t.text, t.piece,
                     QString::number(t.position), t.segment});
        }
    return csv.text();
}

} // namespace kvscope::widgets
