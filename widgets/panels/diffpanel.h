// DiffPanel: two states side by side — their token strips with linked selection and the
// first diverging token marked — and the per-layer/head and per-layer/position delta
// heatmaps of their caches (max |ΔK|, |ΔV|), with the first diverging layer/position; and
// "What matters?": which of those differences change the next step (state::localize), as a
// layer × slot map of the KL each patch from B removes, the worst cell selected.
#pragma once

#include "colorscale.h"
#include "statedata.h"

#include <QWidget>

#include <optional>

class QLabel;
class QSplitter;
class QTabWidget;

namespace kvscope::widgets {

class HeatmapPlot;
class LedgerController;
class Selection;
class StatePairPicker;
class TokenModel;
class TokenStrip;

class DiffPanel : public QWidget {
    Q_OBJECT
public:
    DiffPanel(LedgerController* ledger, Selection* selection, QWidget* parent = nullptr);
    DiffViewPtr diff() const { return m_diff; }
    // The first index where tokens, positions, mask or K/V differ (-1: none); selected and
    // highlighted in both strips when a diff arrives.
    qint64 firstDivergence() const { return m_firstDivergence; }
    // The slot both strips highlight: the first divergence when a diff arrives, then the
    // token the user picks. The window's selection is bounded by the live session, which may
    // be shorter than the compared states, so the strips keep their own.
    qint64 highlighted() const { return m_highlight; }
    HeatmapPlot* headPlot() const { return m_byHead; }
    HeatmapPlot* positionPlot() const { return m_byPosition; }
    HeatmapPlot* mattersPlot() const { return m_matters; }
    LocalizeViewPtr localized() const { return m_localized; }
    // The map cell with the largest KL removed (selected when a result arrives).
    std::optional<HeatmapCell> worstCell() const { return m_worst; }
    void setStates(const QString& a, const QString& b);
    // The states the pickers name ("" = the live session).
    QString pickedA() const;
    QString pickedB() const;
    // The summary line of the last comparison (HTML).
    QString summary() const { return m_diffText; }

public slots:
    void compare();
    // What matters in A against B (B == A: against A's tokens replayed).
    void localize();
    // Back to the empty panel (another model was loaded: what it showed was the old one's).
    void clear();

private:
    void show(const DiffViewPtr& diff);
    void showMatters(const LocalizeViewPtr& view);
    static QString introText();    // the line above, before a comparison
    static QString emptyText();    // the heatmaps' line, before a comparison
    static QString mattersIntro(); // "What matters", before a result
    void updateSelection();

    LedgerController* m_ledger;
    Selection* m_selection;
    StatePairPicker* m_states; // A and B
    QLabel* m_summary;
    TokenModel* m_tokensA;
    TokenModel* m_tokensB;
    TokenStrip* m_stripA;
    TokenStrip* m_stripB;
    QLabel* m_labelA;
    QLabel* m_labelB;
    HeatmapPlot* m_byHead;
    HeatmapPlot* m_byPosition;
    QTabWidget* m_views;
    QSplitter* m_split;
    QString m_diffText, m_mattersText; // the summary line of each page
    HeatmapPlot* m_matters;
    DiffViewPtr m_diff;
    LocalizeViewPtr m_localized;
    std::optional<HeatmapCell> m_worst;
    qint64 m_firstDivergence = -1;
    qint64 m_highlight = -1;
    // The window selection's position when this panel last followed it: a change of layer or
    // head elsewhere keeps the strips' mark (the selection stops at the live session's end).
    qint64 m_followedPosition = -1;
    void highlight(qint64 slot);
};

} // namespace kvscope::widgets
