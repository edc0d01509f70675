// TransplantModel: the persistence table of a residual-stream transplant (one row per
// intervention and decode step: the token the intervened run chose, KL to the donor's and to
// the original recipient's next-token distribution, and whether the token matches theirs).
// Read-only; reset wholesale when a new result arrives.
#pragma once

#include "statedata.h"

#include <QAbstractTableModel>

#include <vector>

namespace kvscope::widgets {

class TransplantModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        Intervention,
        Step,
        Token,
        KlDonor,
        KlOriginal,
        MatchesDonor,
        MatchesOriginal,
        ColumnCount
    };
    using QAbstractTableModel::QAbstractTableModel;

    void setResult(TransplantViewPtr result);
    const TransplantViewPtr& result() const { return m_result; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

    QString toCsv() const;

private:
    struct Row {
        int intervention; // index into result.persistence
        int step;         // index into its steps
    };
    TransplantViewPtr m_result;
    std::vector<Row> m_rows; // the persistence steps, intervention by intervention
    QString tokenText(Row row) const;
};

} // namespace kvscope::widgets
