// SnapshotPanel ("Snapshots & fork tree"): the lineage tree and the ledger actions — snapshot,
// fork, restore (the verify report is shown first and the user decides), truncate at the
// selected position, save, open and export. Double-clicking a node restores it.
#pragma once

#include "statedata.h"

#include <QWidget>

#include <functional>

class QLabel;
class QTreeView;

namespace kvscope::widgets {

class EngineController;
class LedgerController;
class Selection;
class SnapshotTreeModel;

class SnapshotPanel : public QWidget {
    Q_OBJECT
public:
    SnapshotPanel(EngineController* engine, LedgerController* ledger, Selection* selection,
                  QWidget* parent = nullptr);

    SnapshotTreeModel* model() const { return m_model; }
    QTreeView* tree() const { return m_tree; }
    QString selectedId() const;
    void selectId(const QString& id);
    // Decides a restore from its report: 0 cancel, 1 restore, 2 restore despite errors. The
    // default asks with a dialog; tests replace it.
    using Confirm = std::function<int(const ValidationView&)>;
    void setRestoreConfirmation(Confirm confirm) { m_confirm = std::move(confirm); }

public slots:
    void takeSnapshot();
    void fork();
    void restoreSelected();
    void truncateAtSelection();
    void saveSelected();
    void exportSelected();
    void openFileDialog();

private:
    int askRestore(const ValidationView& report);

    EngineController* m_engine;
    LedgerController* m_ledger;
    Selection* m_selection;
    SnapshotTreeModel* m_model;
    QTreeView* m_tree;
    QLabel* m_details;
    Confirm m_confirm;
};

} // namespace kvscope::widgets
