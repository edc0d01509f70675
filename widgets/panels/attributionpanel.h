// AttributionPanel ("Attribution"): what the next token of a state depends on, as core computes
// it (`kvscope-cli attribute`): per cached slot, the KL that hiding it from every layer and head
// causes (leave-one-slot-out ablation) beside the cheap attention × |W_O v| estimate, as bars
// over the slots (the slot's token on hover; the rank correlation between the two and core's
// top slots above); and for the top-1 next token, each attention head's direct contribution
// to its logit as a layer × head grid (signed: blue lowers it, red raises it), with each layer's
// MLP in a small table and the embedding and final-norm terms above (state::attributeHeads,
// `attribute --heads`). Clicking a slot selects that position; clicking a cell selects that
// layer and the query head's KV head (at the attributed last position); both are marked here.
#pragma once

#include "colorscale.h"
#include "statedata.h"

#include <QWidget>

#include <optional>

class QCheckBox;
class QCustomPlot;
class QCPBars;
class QCPGraph;
class QCPItemStraightLine;
class QLabel;
class QStackedWidget;
class QTableView;

namespace kvscope::widgets {

class AttributionLayerModel;
class HeatmapPlot;
class LedgerController;
class Selection;
class StatePicker;

class AttributionPanel : public QWidget {
    Q_OBJECT
public:
    AttributionPanel(LedgerController* ledger, Selection* selection, QWidget* parent = nullptr);

    AttributionViewPtr attribution() const { return m_view; }
    QCustomPlot* slotPlot() const { return m_slotPlot; }
    HeatmapPlot* headPlot() const { return m_heads; }
    QTableView* layerTable() const { return m_layers; }
    QString summaryText() const;
    // What hovering slot `slot` shows: its token, ablation KL, Δ log p and estimate.
    QString describeSlot(int64_t slot) const;
    // The slot under a pixel of the slot plot; -1 for none.
    int64_t slotAt(const QPointF& pixel) const;
    void setState(const QString& id);
    void setForce(bool force);

public slots:
    void run();
    // Back to the empty panel (another model was loaded).
    void clear();

private:
    void show(const AttributionViewPtr& view);
    void showSlots();
    void showHeads();
    void followSelection();
    void fitLayerTable();
    QString slotText(int64_t slot) const;

    LedgerController* m_ledger;
    Selection* m_selection;
    StatePicker* m_state;
    QCheckBox* m_force;
    QLabel* m_summary;
    QStackedWidget* m_slotStack; // a sentence until a result, then m_slotPlot
    QCustomPlot* m_slotPlot;
    QCPBars* m_ablation;
    QCPGraph* m_estimate;
    QCPItemStraightLine* m_slotMarker;
    HeatmapPlot* m_heads;
    AttributionLayerModel* m_layerModel;
    QTableView* m_layers;
    AttributionViewPtr m_view;
    int64_t m_clickedSlot = -1;               // the slot clicked last (-1: none)
    std::optional<HeatmapCell> m_clickedCell; // the head cell clicked last
};

} // namespace kvscope::widgets
