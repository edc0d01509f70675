// SnapshotTreeModel: the lineage of snapshots as a tree (a node's children are the snapshots
// taken from it: forks, truncations, continued runs). Each row shows the operation that made
// the node and its parameters (the edge from its parent), its size, the model it was made with
// (a row of another model than the loaded one is greyed and says so) and where it is stored.
// Fed by value (setLedger + model reset); the current node is shown in bold.
#pragma once

#include "statedata.h"

#include <QAbstractItemModel>

namespace kvscope::widgets {

class SnapshotTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column {
        NodeColumn,
        TokensColumn,
        ModelColumn, // the model it was made with; another model's rows are greyed
        ParametersColumn,
        CreatedColumn,
        FileColumn,
        ColumnCount
    };
    enum Role { IdRole = Qt::UserRole + 1 };

    explicit SnapshotTreeModel(QObject* parent = nullptr);
    void setLedger(const LedgerViewPtr& ledger);
    const LedgerViewPtr& ledger() const { return m_ledger; }
    QModelIndex indexOf(const QString& id) const;
    const SnapshotNode* node(const QModelIndex& index) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;
    QString toCsv() const;

private:
    // Node i's children (indices into nodes); entry nodes.size() holds the roots.
    const std::vector<int>& childrenOf(int node) const;
    int rowInParent(int node) const;

    LedgerViewPtr m_ledger;
    std::vector<std::vector<int>> m_children;
    std::vector<int> m_parent; // -1 for roots
};

} // namespace kvscope::widgets
