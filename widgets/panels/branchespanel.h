// BranchesPanel ("Branches"): two states that share a prefix (a fork's branches, a restored
// state beside its original) as two token rows aligned at the branch point, each step shaded
// by the KL between their next-token distributions (state::compareBranches, `kvscope-cli
// branches`): on their own tokens (how far the branches' futures part) or with B's cached
// prefix fed A's tokens (what B's cache alone changes). Clicking a step selects its position.
#pragma once

#include "statedata.h"

#include <QAbstractTableModel>
#include <QWidget>

class QComboBox;
class QLabel;
class QTableView;

namespace kvscope::widgets {

class LedgerController;
class Selection;
class StatePairPicker;

// Row 0 = A, row 1 = B; column k = step k (after token prefix-1+k): the token each state
// holds next, shaded by the step's KL (own or forced).
class BranchesModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum class Shade { Own, Forced };
    using QAbstractTableModel::QAbstractTableModel;
    void setResult(BranchesViewPtr result);
    const BranchesViewPtr& result() const { return m_result; }
    void setShade(Shade shade);
    Shade shade() const { return m_shade; }
    // The KL that shades column `column` (NaN when the step has none).
    double klOf(int column) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    BranchesViewPtr m_result;
    Shade m_shade = Shade::Own;
};

class BranchesPanel : public QWidget {
    Q_OBJECT
public:
    BranchesPanel(LedgerController* ledger, Selection* selection, QWidget* parent = nullptr);
    BranchesModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    QString summaryText() const;
    void setStates(const QString& a, const QString& b);

public slots:
    void compare();
    void clear();

private:
    void show(const BranchesViewPtr& view);

    LedgerController* m_ledger;
    Selection* m_selection;
    StatePairPicker* m_states; // A and B
    QComboBox* m_shade;
    QLabel* m_summary;
    BranchesModel* m_model;
    QTableView* m_table;
};

} // namespace kvscope::widgets
