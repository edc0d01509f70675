// newPlot: every QCustomPlot of the window is made here.
//
// QCustomPlot's default hints repaint at once on replot(): the plot paints and the window is
// flushed, once per plot. A state change during a run touches several plots, and those
// synchronous paints one after another kept the window late by tens of milliseconds per token
// (kvscope-bench-gui). Here replot() only marks the plot dirty and everything changed paints
// in the window's one update.
//
// legendUnderPlot: the legend as a grid of up to `columns` entries a row in its own layout row
// under the axis rect, for plots too small to hold it inside without covering data.
#pragma once

#include <algorithm>
#include <qcustomplot.h>

namespace kvscope::widgets {

inline QCustomPlot* newPlot(QWidget* parent) {
    auto* plot = new QCustomPlot(parent);
    plot->setPlottingHint(QCP::phImmediateRefresh, false);
    return plot;
}

inline void legendUnderPlot(QCustomPlot* plot, int columns, int columnSpacing) {
    plot->legend->setWrap(columns);
    plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    plot->legend->setRowSpacing(0);
    plot->legend->setColumnSpacing(columnSpacing);
    plot->axisRect()->insetLayout()->take(plot->legend);
    plot->plotLayout()->addElement(1, 0, plot->legend);
    // At most `columns` a row, fewer where the widest entry would be clipped that many times
    // over (a narrow dock): checked before every replot, which a resize also causes.
    QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot, columns, columnSpacing] {
        QCPLegend* legend = plot->legend;
        int widest = 0;
        for (int i = 0; i < legend->itemCount(); ++i) // cells of the grid: some empty
            if (const QCPAbstractLegendItem* item = legend->item(i))
                widest = std::max(widest, item->minimumOuterSizeHint().width());
        const QMargins m = legend->margins();
        const int room = plot->width() - m.left() - m.right();
        const int fit = widest > 0 ? (room + columnSpacing) / (widest + columnSpacing) : columns;
        const int wrap = std::clamp(fit, 1, columns);
        if (legend->wrap() != wrap) {
            legend->setWrap(wrap);
            legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true); // re-flows the entries
        }
    });
}

} // namespace kvscope::widgets
