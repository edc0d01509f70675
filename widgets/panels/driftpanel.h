// DriftPanel: continue two states (live session, snapshots, restored or forked) for N steps
// under the same sampler and plot per-step KL, max |Δlogit| and top-k agreement, with the
// tolerance band of the chosen profile and the first diverging step marked.
#pragma once

#include "statedata.h"

#include <QWidget>

class QComboBox;
class QCustomPlot;
class QLabel;
class QSpinBox;

namespace kvscope::widgets {

class LedgerController;
class StatePairPicker;

class DriftPanel : public QWidget {
    Q_OBJECT
public:
    explicit DriftPanel(LedgerController* ledger, QWidget* parent = nullptr);
    QCustomPlot* plot() const { return m_plot; }
    DriftViewPtr drift() const { return m_drift; }
    void setStates(const QString& a, const QString& b);
    // The Steps box: how many steps the next run() continues both states.
    void setSteps(int steps);
    // The Tolerance box: a profile by core's name (state::profileName); false when unknown.
    bool setProfile(const QString& name);
    // The states the pickers name ("" = the live session).
    QString pickedA() const;
    QString pickedB() const;
    QString toCsv() const;
    // The line above the plot (rich text): the states, steps, tolerance and first divergence.
    QString summaryText() const;

public slots:
    void run();
    // Back to the empty panel (another model was loaded: what it showed was the old one's).
    void clear();

private:
    void show(const DriftViewPtr& drift);
    static QString introText();

    LedgerController* m_ledger;
    StatePairPicker* m_states; // A and B
    QSpinBox* m_steps;
    QComboBox* m_profile;
    QLabel* m_summary;
    QCustomPlot* m_plot;
    DriftViewPtr m_drift;
};

} // namespace kvscope::widgets
