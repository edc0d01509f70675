#include "transplantmodel.h"

#include "csv.h"
#include "displaytext.h"

namespace kvscope::widgets {

void TransplantModel::setResult(TransplantViewPtr result) {
    beginResetModel();
    m_result = std::move(result);
    endResetModel();
}

int TransplantModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_result ? 0 : int(m_result->rows.size());
}

int TransplantModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant TransplantModel::data(const QModelIndex& index, int role) const {
    if (!m_result || !index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount)
        return {};
    const TransplantRow& r = m_result->rows[size_t(index.row())];
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Intervention:
            return r.intervention;
        case Step:
            return r.step;
        case Token:
            return displayToken(r.token);
        case KlDonor:
            return QString::number(r.klDonor, 'g', 3);
        case KlOriginal:
            return QString::number(r.klOriginal, 'g', 3);
        case MatchesDonor:
            return r.matchesDonor ? tr("yes") : tr("no");
        case MatchesOriginal:
            return r.matchesOriginal ? tr("yes") : tr("no");
        }
    }
    if (role == Qt::ToolTipRole && index.column() == KlDonor)
        return tr("KL(donor's distribution ‖ intervened run's) at this step");
    if (role == Qt::TextAlignmentRole && index.column() != Intervention && index.column() != Token)
        return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant TransplantModel::headerData(int section, Qt::Orientation o, int role) const {
    if (o != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Intervention:
        return tr("Intervention");
    case Step:
        return tr("Step");
    case Token:
        return tr("Token");
    case KlDonor:
        return tr("KL → donor");
    case KlOriginal:
        return tr("KL → original");
    case MatchesDonor:
        return tr("= donor");
    case MatchesOriginal:
        return tr("= original");
    }
    return {};
}

QString TransplantModel::toCsv() const {
    CsvWriter csv({QStringLiteral("intervention"), QStringLiteral("step"), QStringLiteral("token"),
                   QStringLiteral("kl_donor"), QStringLiteral("kl_original"),
                   QStringLiteral("matches_donor"), QStringLiteral("matches_original")});
    if (m_result)
        for (const auto& r : m_result->rows)
            csv.row({r.intervention, QString::number(r.step), r.token,
                     QString::number(r.klDonor, 'g', 9), QString::number(r.klOriginal, 'g', 9),
                     r.matchesDonor ? QStringLiteral("1") : QStringLiteral("0"),
                     r.matchesOriginal ? QStringLiteral("1") : QStringLiteral("0")});
    return csv.text();
}

} // namespace kvscope::widgets
