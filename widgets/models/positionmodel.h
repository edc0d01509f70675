// PositionModel: the position-alignment table (index, token, stored, expected, status), fed
// by value (setState + model reset).
#pragma once

#include "positionalignment.h"
#include "viewdata.h"

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
    const PositionAlignment& alignment() const { return m_alignment; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;
    QString toCsv() const;

private:
    CacheViewPtr m_state;
    PositionAlignment m_alignment;
};

} // namespace kvscope::widgets
