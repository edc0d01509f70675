#include "transplantmodel.h"

#include "csv.h"
#include "displaytext.h"

namespace kvscope::widgets {

void TransplantModel::setResult(TransplantViewPtr result) {
    beginResetModel();
    m_result = std::move(result);
    m_rows.clear();
    if (m_result)
        for (size_t i = 0; i < m_result->result.persistence.size(); ++i)
            for (size_t k = 0; k < m_result->result.persistence[i].steps.size(); ++k)
                m_rows.push_back({int(i), int(k)});
    endResetModel();
}

QString TransplantModel::tokenText(Row row) const {
    const auto& texts = m_result->stepTokens;
    if (size_t(row.intervention) < texts.size() &&
        row.step < texts[size_t(row.intervention)].size())
        return texts[size_t(row.intervention)][row.step];
    // No text (a view built without a tokenizer): the id.
    return QString::number(
        m_result->result.persistence[size_t(row.intervention)].steps[size_t(row.step)].token);
}

int TransplantModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : int(m_rows.size());
}

int TransplantModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant TransplantModel::data(const QModelIndex& index, int role) const {
    if (!m_result || !index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount)
        return {};
    const Row row = m_rows[size_t(index.row())];
    const auto& p = m_result->result.persistence[size_t(row.intervention)];
    const auto& r = p.steps[size_t(row.step)];
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Intervention:
            return QString::fromStdString(p.intervention);
        case Step:
            return r.step;
        case Token:
            return displayToken(tokenText(row));
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
        for (const Row row : m_rows) {
            const auto& p = m_result->result.persistence[size_t(row.intervention)];
            const auto& r = p.steps[size_t(row.step)];
            csv.row({QString::fromStdString(p.intervention), QString::number(r.step),
                     tokenText(row), QString::number(r.klDonor, 'g', 9),
                     QString::number(r.klOriginal, 'g', 9),
                     r.matchesDonor ? QStringLiteral("1") : QStringLiteral("0"),
                     r.matchesOriginal ? QStringLiteral("1") : QStringLiteral("0")});
        }
    return csv.text();
}

} // namespace kvscope::widgets
