// ViolationModel: a verdict's violations (core's state::Violation) as a table (severity, check
// id, ledger item, message, where), sorted by severity (errors first), fed by value (setReport
// + model reset).
#pragma once

#include "statedata.h"

#include <QAbstractTableModel>

namespace kvscope::widgets {

class ViolationModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { SeverityColumn, IdColumn, ItemColumn, MessageColumn, WhereColumn, ColumnCount };
    enum Role {
        ExplanationRole = Qt::UserRole + 1,
        LayerRole,
        HeadRole,
        PositionRole,
        SeverityRole,
        StructuralRole // bool: the violation can never be forced (Violation::structural)
    };
    using Violation = kvscope::state::Violation;

    explicit ViolationModel(QObject* parent = nullptr);
    void setReport(const ValidationViewPtr& report);
    const ValidationViewPtr& report() const { return m_report; }
    const Violation& violation(int row) const { return m_rows[size_t(row)]; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

    static QColor severityColor(SeverityRank s);
    static QString where(const Violation& v);
    QString toCsv() const;

private:
    ValidationViewPtr m_report;
    std::vector<Violation> m_rows; // sorted by severity, then report order
};

} // namespace kvscope::widgets
