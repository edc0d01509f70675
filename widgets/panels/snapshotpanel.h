// SnapshotPanel ("Snapshots & fork tree"): the lineage tree and the ledger actions — snapshot,
// fork (a branch point, or N branches continued with their own seeds), restore (the verify
// report is shown first and the user decides), truncate at the selected position, patch a
// layer from another snapshot, inject a fault (the fault lab), save, open and export.
// Double-clicking a node restores it.
#pragma once

#include "statedata.h"

#include <QWidget>

#include <functional>

class QLabel;
class QMenu;
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
    void restoreSelected();
    void truncateAtSelection();
    void saveSelected();
    void exportSelected();
    // Asks for a .kvsnap or llama.cpp state file (ggsq, ggsn, llama-server slot) and emits
    // openRequested.
    void openFileDialog();
    // Branches the selected snapshot `branches` ways, each continued `steps` tokens with its
    // own sampler seed (core/state/surgery/surgery.h fork).
    void forkSelected(int branches, int steps);
    // Asks for a source snapshot, a layer and a KV head, then patches the selected one.
    void patchDialog();
    void patchSelectedFrom(const QString& source, int layer, int head);
    // A copy of the selected snapshot with fault `name` (core/state/surgery/faults.h) injected.
    void injectFault(const QString& name);

public:
    // The fault lab as a menu (one action per fault, its check in the tooltip); shared with
    // the main window's State menu.
    QMenu* faultMenu() const { return m_faultMenu; }
    QMenu* forkMenu() const { return m_forkMenu; }
    // What the restore dialog asks (rich text): the state by name, the verdict counted as the
    // Validation panel counts it, the reasons (a screenful at most) and the equivalence line.
    static QString restoreQuestion(const ValidationView& report);

signals:
    // The user chose a file to open (a .kvsnap or a llama.cpp state): the main window decides
    // how (a llama.cpp state needs a model first).
    void openRequested(const QString& path);

private:
    int askRestore(const ValidationView& report);

    EngineController* m_engine;
    LedgerController* m_ledger;
    Selection* m_selection;
    SnapshotTreeModel* m_model;
    QTreeView* m_tree;
    QLabel* m_details;
    QMenu* m_faultMenu;
    QMenu* m_forkMenu;
    Confirm m_confirm;
};

} // namespace kvscope::widgets
