// KvHeatmapPanel: norms of the cached keys or values as two heatmaps, layer x KV head (mean
// over positions) and layer x position (one head or the mean over heads). Clicking a cell
// selects layer/head or layer/position; the selection is marked in both.
#pragma once

#include "viewdata.h"

#include <QWidget>

class QComboBox;
class QLabel;

namespace kvscope::widgets {

class EngineController;
class HeatmapPlot;
class Selection;

class KvHeatmapPanel : public QWidget {
    Q_OBJECT
public:
    KvHeatmapPanel(EngineController* engine, Selection* selection, QWidget* parent = nullptr);

    HeatmapPlot* headPlot() const { return m_byHead; }
    HeatmapPlot* positionPlot() const { return m_byPosition; }
    // "K" or "V"; the head shown in the position map (-1: mean over heads).
    void setTensor(const QString& which);
    void setPositionHead(int head);

private:
    void rebuild();
    void updateMarkers();
    const std::vector<std::vector<float>>& norms() const;

    EngineController* m_engine;
    Selection* m_selection;
    CacheViewPtr m_state;
    QComboBox* m_tensor;
    QComboBox* m_head;
    QLabel* m_info;
    HeatmapPlot* m_byHead;
    HeatmapPlot* m_byPosition;
};

} // namespace kvscope::widgets
