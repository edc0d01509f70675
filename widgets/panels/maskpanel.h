// MaskPanel: the cache's attention mask as an image over the cache slots (x = slot, tick
// labels the stored positions), with its shape compared with the cache length.
#pragma once

#include "viewdata.h"

#include <QWidget>

class QLabel;

namespace kvscope::widgets {

class EngineController;
class HeatmapPlot;
class Selection;

class MaskPanel : public QWidget {
    Q_OBJECT
public:
    MaskPanel(EngineController* engine, Selection* selection, QWidget* parent = nullptr);
    HeatmapPlot* plot() const { return m_plot; }
    QString summary() const;

private:
    void rebuild(const CacheViewPtr& state);

    Selection* m_selection;
    HeatmapPlot* m_plot;
    QLabel* m_summary;
    CacheViewPtr m_state;
};

} // namespace kvscope::widgets
