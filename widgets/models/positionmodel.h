// PositionModel: the position-alignment table (index, token, stored, expected, status) of core's
// state::alignPositions (which knows a recorded eviction's intended gaps), fed by value
// (setState + model reset).
#pragma once

#include "viewdata.h"

#include "state/verify/positionalign.h"

#include <QAbstractTableModel>

namespace kvscope::widgets {

class PositionModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        IndexColumn,
        TokenColumn,
        StoredColumn,
        ExpectedColumn,
        StatusColumn,
        ColumnCount
    };

    explicit PositionModel(QObject* parent = nullptr);
    void setState(const CacheViewPtr& state);
    // Core's alignment (state::alignPositions) of the state shown.
    const state::PositionAlignment& alignment() const { return m_alignment; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;
    QString toCsv() const;

private:
    CacheViewPtr m_state;
    state::PositionAlignment m_alignment;
};

} // namespace kvscope::widgets
