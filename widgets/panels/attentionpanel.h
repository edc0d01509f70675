// AttentionPanel: the query x key attention pattern of the selected layer and one query head
// (from the engine's observer hook), with the mask overlaid: slots a query could not attend
// to (future slots, mask = 0) are greyed. Requests are tagged, so changing layer/head quickly
// only computes and paints the latest one.
#pragma once

#include "colorscale.h"
#include "viewdata.h"

#include <QWidget>

class QComboBox;

namespace kvscope::widgets {

class ElidedLabel;
class EngineController;
class HeatmapPlot;
class Selection;

class AttentionPanel : public QWidget {
    Q_OBJECT
public:
    AttentionPanel(EngineController* engine, Selection* selection, QWidget* parent = nullptr);

    HeatmapPlot* plot() const { return m_plot; }
    AttentionViewPtr view() const { return m_view; }
    int queryHead() const;
    // Shows query head `queryHead` (the combo box, and the selection's KV head becomes its
    // group's); out-of-range heads are ignored.
    void setQueryHead(int queryHead);
    // The serial of the request whose answer this panel waits for (0: none).
    uint64_t pendingSerial() const { return m_pending; }

private:
    void request();
    void show(const AttentionViewPtr& view);
    QString tokenText(int64_t index) const;
    QString describe(HeatmapCell cell, float p) const;

    EngineController* m_engine;
    Selection* m_selection;
    QComboBox* m_head;
    ElidedLabel* m_info;
    HeatmapPlot* m_plot;
    AttentionViewPtr m_view;
    uint64_t m_revision = 0;
    uint64_t m_pending = 0;
    int m_heads = 0;
    int m_groups = 1;
};

} // namespace kvscope::widgets
