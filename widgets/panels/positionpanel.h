// PositionPanel: token index vs stored position vs expected position, as a plot (mismatches
// marked with red crosses, the next position as a diamond) and a table.
#pragma once

#include "viewdata.h"

#include <QWidget>

class QCustomPlot;
class QLabel;
class QTableView;

namespace kvscope::widgets {

class EngineController;
class PositionModel;
class Selection;

class PositionPanel : public QWidget {
    Q_OBJECT
public:
    PositionPanel(EngineController* engine, Selection* selection, QWidget* parent = nullptr);
    QCustomPlot* plot() const { return m_plot; }
    PositionModel* model() const { return m_model; }
    QString summary() const;

private:
    void rebuild(const CacheViewPtr& state);

    Selection* m_selection;
    PositionModel* m_model;
    QCustomPlot* m_plot;
    QLabel* m_summary;
    QTableView* m_table;
};

} // namespace kvscope::widgets
