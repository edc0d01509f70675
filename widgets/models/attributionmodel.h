// AttributionLayerModel: the per-layer parts of a head attribution that are not heads (core's
// state::attributeHeads, the "layers" of `kvscope-cli attribute --heads --json`): one row per
// layer, layer 0 first, with the MLP's direct contribution to the token's logit and the
// attention output's bias. Values as core computed them; nothing summed or ranked here.
// Read-only; reset wholesale when a new result arrives.
#pragma once

#include "statedata.h"

#include <QAbstractTableModel>

namespace kvscope::widgets {

class AttributionLayerModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Mlp, AttentionBias, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setResult(AttributionViewPtr result);
    const AttributionViewPtr& result() const { return m_result; }
    // Whether the model has an attention output bias (a column of zeros is hidden otherwise).
    bool hasAttentionBias() const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    AttributionViewPtr m_result;
};

} // namespace kvscope::widgets
