#include "attributionmodel.h"

#include "colorscale.h"

#include <QColor>

#include <algorithm>

namespace kvscope::widgets {

void AttributionLayerModel::setResult(AttributionViewPtr result) {
    beginResetModel();
    m_result = std::move(result);
    endResetModel();
}

bool AttributionLayerModel::hasAttentionBias() const {
    if (!m_result)
        return false;
    const auto& b = m_result->headResult.parts.attnBias;
    return std::any_of(b.begin(), b.end(), [](double v) { return v != 0; });
}

int AttributionLayerModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_result ? 0 : int(m_result->headResult.parts.mlp.size());
}

int AttributionLayerModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant AttributionLayerModel::data(const QModelIndex& index, int role) const {
    if (!m_result || !index.isValid() || index.row() >= rowCount())
        return {};
    const auto& p = m_result->headResult.parts;
    const size_t layer = size_t(index.row());
    const double v = index.column() == Mlp ? p.mlp[layer] : p.attnBias[layer];
    switch (role) {
    case Qt::DisplayRole:
        return QStringLiteral("%1").arg(v, 0, 'f', 4);
    case Qt::ForegroundRole: // the sign, as the heads' diverging grid shows it
        return v == 0 ? QVariant() : QVariant(QColor::fromRgb(divergingColor(v < 0 ? 0.0 : 1.0)));
    case Qt::TextAlignmentRole:
        return int(Qt::AlignRight | Qt::AlignVCenter);
    case Qt::ToolTipRole:
        return (index.column() == Mlp ? tr("Layer %1's MLP adds %2 to the logit of %3")
                                      : tr("Layer %1's attention output bias adds %2 to the "
                                           "logit of %3"))
            .arg(index.row())
            .arg(v, 0, 'g', 4)
            .arg(m_result->headToken);
    default:
        return {};
    }
}

QVariant AttributionLayerModel::headerData(int section, Qt::Orientation o, int role) const {
    if (role != Qt::DisplayRole)
        return {};
    if (o == Qt::Vertical)
        return tr("layer %1").arg(section);
    return section == Mlp ? tr("MLP") : tr("attn bias");
}

} // namespace kvscope::widgets
