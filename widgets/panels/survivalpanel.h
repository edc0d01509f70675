// SurvivalPanel ("Survival"): the survival lab (core/state/probes/survive.h) — how much of a
// state can be dropped or coarsened, and what that does to its continuation. Pick a state (a
// snapshot or the live session), a policy (state::survivalPolicies()), a budget (eviction
// policies only: a share of the slots or a slot count), bits (quantization), further
// parameters as name=value, and the continuation's steps; Run compresses and measures it
// (Workspace::survive: the compressed state is stored as a child of its source), Sweep runs
// every policy at every budget (Workspace::survivalSweep; Stop ends it).
//
// Shows core's numbers only: a summary line (bytes kept of full, KL mean/p99/max, top-1
// agreement, first divergence, perplexity ratio, the stored snapshot's id), the source's
// tokens with the evicted ones struck through, the layer x token damage map, the frontier of
// the last sweep (bytes kept / full against KL mean, one curve per policy, this run marked)
// and both continuations as text with the first divergence marked. Every view exports PNG and
// CSV from its context menu. GUI thread only.
#pragma once

#include "statedata.h"
#include "survivalfrontier.h"

#include <QWidget>

class QScrollArea;

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QSplitter;
class QTextBrowser;

namespace kvscope::widgets {

class EngineController;
class HeatmapPlot;
class LedgerController;
class StatePicker;
class SurvivalTokenModel;
class TokenStrip;

class SurvivalPanel : public QWidget {
    Q_OBJECT
public:
    SurvivalPanel(EngineController* engine, LedgerController* ledger, QWidget* parent = nullptr);

    // Inputs (also what the controls show).
    void setState(const QString& id);
    QString stateId() const;
    bool setPolicy(const QString& policy); // false: not one of survivalPolicies()
    QString policy() const;
    // An eviction's budget allocation (state::evictionAllocations()); false when unknown.
    bool setAllocation(const QString& allocation);
    // A share in (0, 1] picks the matching preset (or the slot count when none matches); a
    // value > 1 is a slot count.
    void setBudget(double budget);
    double budget() const;
    void setBits(int bits);
    void setSteps(int steps);
    // "name=value" pairs separated by spaces or commas (sinks=4 recent=32 ...).
    void setParameters(const QString& text);
    // The options Run would post; false with *error set when the parameters do not parse.
    bool options(kvscope::state::SurviveOptions* out, QString* error) const;

    SurvivalViewPtr result() const { return m_result; }
    SurvivalSweepViewPtr sweepResult() const { return m_sweep; }
    const Frontier& frontier() const { return m_frontier; }
    QString summary() const;
    QCustomPlot* frontierPlot() const { return m_frontierPlot; }
    HeatmapPlot* damagePlot() const { return m_damage; }
    SurvivalTokenModel* tokenModel() const { return m_tokens; }
    QString continuationHtml() const;

public slots:
    void run();
    void sweep();

protected:
    // The wheel over the frontier (which has no zoom) scrolls the panel.
    bool eventFilter(QObject* watched, QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    // The damage map and the frontier side by side when the panel is wide, stacked otherwise.
    void arrangePlots();
    void showResult(const SurvivalViewPtr& result);
    void showSweep(const SurvivalSweepViewPtr& sweep);
    void showMessage(const QString& text, bool error);
    void policyChanged();
    void drawFrontier();
    // The run under the cursor (within a few pixels): its policy, budget or bits and numbers.
    QString frontierPointAt(const QPointF& pixel) const;
    QString continuationCsv() const;

    EngineController* m_engine;
    LedgerController* m_ledger;
    StatePicker* m_state;
    QComboBox* m_policy;
    QComboBox* m_budget;
    QSpinBox* m_slots;
    QComboBox* m_allocation;
    QComboBox* m_bits;
    QLineEdit* m_params;
    QSpinBox* m_steps;
    QPushButton* m_run;
    QPushButton* m_sweepButton;
    QPushButton* m_stop;
    QLabel* m_summary;
    SurvivalTokenModel* m_tokens;
    TokenStrip* m_strip;
    HeatmapPlot* m_damage;
    QCustomPlot* m_frontierPlot;
    QScrollArea* m_scroll; // everything scrolls inside the dock
    QTextBrowser* m_continuation;
    QSplitter* m_split;
    QSplitter* m_plots;
    SurvivalViewPtr m_result;
    SurvivalSweepViewPtr m_sweep;
    Frontier m_frontier;
};

} // namespace kvscope::widgets
