// TransplantPanel ("Transplant"): the residual-stream experiment ("what has to survive?",
// core/state/probes/transplant.h). Two prompts (recipient, donor), a layer and all/last positions;
// the result is the KL of the transplanted run to the donor's next-token distribution (≈ 0 for an
// all-position transplant) and, over K greedy steps, how long each intervention (residual
// only, token only, residual + K/V) keeps the run on the donor's track — a plot of KL to the
// donor per step and the table behind it (PNG/CSV from the context menu).
#pragma once

#include "statedata.h"

#include <QWidget>

class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QSpinBox;
class QTableView;

namespace kvscope::widgets {

class EngineController;
class LedgerController;
class TransplantModel;

class TransplantPanel : public QWidget {
    Q_OBJECT
public:
    TransplantPanel(EngineController* engine, LedgerController* ledger, QWidget* parent = nullptr);

    TransplantModel* model() const { return m_model; }
    void setPrompts(const QString& recipient, const QString& donor);
    void setLayer(int layer);
    // The line above the plot: the result, or why the last run was refused.
    QString summaryText() const;

public slots:
    void run();

private:
    void show(const TransplantViewPtr& result);

    LedgerController* m_ledger;
    TransplantModel* m_model;
    QLineEdit* m_recipient;
    QLineEdit* m_donor;
    QSpinBox* m_layer;
    QComboBox* m_positions;
    QSpinBox* m_steps;
    QLabel* m_summary;
    QCustomPlot* m_plot;
    QTableView* m_table;
};

} // namespace kvscope::widgets
