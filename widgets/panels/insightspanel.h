// The Insights panel: the compendium's 80 claims by tier (core/insights/registry.h), each
// with its class, and for the measurable ones the experiment that decides it on the loaded
// model (req::RunInsight -> Workspace::runInsight, core/insights/lab.h): the
// computed verdict as a badge, the measurements, the explanation citing them, and a button
// that opens the evidence: the states the experiment made are stored as snapshots
// (req::StoreEvidence; children of the lab's standard state in the fork tree)
// and the main window opens them in the panel the evidence names, with the experiment's
// selection (showEvidence). Nothing is computed here: the verdict and the numbers are
// core's, the same as `kvscope-cli insights run N --json`.
#pragma once

#include "statedata.h"

#include <QWidget>

#include <map>

class QLabel;
class QPushButton;
class QStandardItemModel;
class QTableView;
class QTreeWidget;
class QTreeWidgetItem;

namespace kvscope::widgets {

class EngineController;
class LedgerController;

class InsightsPanel : public QWidget {
    Q_OBJECT
public:
    InsightsPanel(EngineController* engine, LedgerController* ledger, QWidget* parent = nullptr);

    // Selects insight `number` (1..80) in the tree; false when there is none.
    bool select(int number);
    int selected() const { return m_number; }
    // Runs the selected insight's experiment (no-op for one without).
    void run();
    // The last result of `number` on the loaded model; null when not run.
    InsightViewPtr result(int number) const;
    // Forgets the results (another model was loaded).
    void clearResults();
    // The detail pane's texts (tests): verdict badge, explanation, where to look.
    QString verdictText() const;
    QString whyText() const;
    QString evidenceText() const;
    // The dock that shows an evidence view ("dock.drift", ...).
    static QString evidenceDock(insights::EvidenceView view);
    // Opens the selected insight's evidence (the button): stores its states, restoring the
    // first when its view follows the live session; without states only raises the dock.
    void showEvidence();

signals:
    // The user asked to see the evidence of a result without states: the main window raises
    // that dock.
    void evidenceRequested(const QString& dockId);

private:
    void showInsight(int number);
    void showResult(const InsightViewPtr& view);
    void refreshItem(int number);

    LedgerController* m_ledger;
    QTreeWidget* m_tree;
    QLabel* m_title;
    QLabel* m_meta;
    QLabel* m_plan;
    QPushButton* m_run;
    QLabel* m_badge;
    QStandardItemModel* m_measurements;
    QTableView* m_table;
    QLabel* m_why;
    QLabel* m_hint; // where to look, as the experiment says
    QPushButton* m_evidence;
    std::map<int, QTreeWidgetItem*> m_items;
    std::map<int, InsightViewPtr> m_results;
    int m_number = 0;
    bool m_running = false;
};

} // namespace kvscope::widgets
