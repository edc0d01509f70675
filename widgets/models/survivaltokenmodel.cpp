#include "survivaltokenmodel.h"

#include "csv.h"

#include <algorithm>

namespace kvscope::widgets {

void SurvivalTokenModel::setResult(const SurvivalViewPtr& result) {
    m_result = result;
    auto state = std::make_shared<CacheView>();
    if (result)
        state->tokens = result->tokens;
    setState(state); // resets the model
}

bool SurvivalTokenModel::isKept(int row) const {
    return !m_result || row < 0 || size_t(row) >= m_result->kept.size() ||
           m_result->kept[size_t(row)];
}

float SurvivalTokenModel::maxDamage(int row) const {
    if (!m_result || m_result->result.damageLayers <= 0)
        return 0;
    const auto& d = m_result->result.damage;
    const size_t tokens = d.size() / size_t(m_result->result.damageLayers);
    float m = 0;
    if (size_t(row) < tokens)
        for (int64_t l = 0; l < m_result->result.damageLayers; ++l)
            m = std::max(m, d[size_t(l) * tokens + size_t(row)]);
    return m;
}

QVariant SurvivalTokenModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || !m_result)
        return TokenModel::data(index, role);
    const bool kept = isKept(index.row());
    switch (role) {
    case DimmedRole:
        return !kept;
    case SegmentColorRole:
        if (!kept)
            return QColor(0xb0, 0xb0, 0xb0);
        break;
    case Qt::DisplayRole:
        if (index.column() == SegmentColumn && !kept)
            return tr("evicted");
        break;
    case Qt::ToolTipRole:
        return TokenModel::data(index, role).toString() + QStringLiteral("\n") +
               (kept ? tr("kept; largest relative K/V error over the layers %1")
                           .arg(double(maxDamage(index.row())), 0, 'g', 3)
                     : tr("evicted: its K/V slot was dropped"));
    }
    return TokenModel::data(index, role);
}

QString SurvivalTokenModel::toCsv() const {
    CsvWriter csv({QStringLiteral("index"), QStringLiteral("token"), QStringLiteral("id"),
                   QStringLiteral("kept"), QStringLiteral("max_damage")});
    for (int r = 0; r < rowCount(); ++r)
        csv.row({QString::number(r), index(r, TextColumn).data().toString(),
                 index(r, IdColumn).data().toString(),
                 isKept(r) ? QStringLiteral("1") : QStringLiteral("0"),
                 QString::number(double(maxDamage(r)), 'g', 9)});
    return csv.text();
}

} // namespace kvscope::widgets
