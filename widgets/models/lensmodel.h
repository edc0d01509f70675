// LensModel: the logit lens of a state as a table (state::logitLens, core/state/probes/lens.h):
// one row per layer, the last layer on top (the output reads first, as the layer axis of the
// heatmaps grows upwards), one column per position of the fresh run, and, when the state was
// read over its restored cache, one more column: the last token run again over that cache.
// A cell shows its most probable token; its colour is that token's probability or the cell's
// KL to the final distribution (colour()); its tooltip lists the top tokens, the entropy and
// the KL. A restored cell whose layer the cache changed (core's klToFresh above its tolerance)
// is bold and marked "≠". Read-only; reset wholesale when a new result arrives.
#pragma once

#include "statedata.h"

#include <QAbstractTableModel>

namespace kvscope::widgets {

class LensModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum class Colour { Probability, KlToFinal };
    using QAbstractTableModel::QAbstractTableModel;

    void setResult(LensViewPtr result);
    const LensViewPtr& result() const { return m_result; }
    void setColour(Colour colour);
    Colour colour() const { return m_colour; }

    // The (layer, token position) a cell stands for; the restored column's position is the
    // last token's. {-1, -1} outside the table.
    std::pair<int, int64_t> cellAt(const QModelIndex& index) const;
    // The cell of (layer, position) in the fresh grid; invalid when it is not shown.
    QModelIndex indexOf(int layer, int64_t position) const;
    bool isRestoredColumn(int column) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    const kvscope::state::LensCell* cell(const QModelIndex& index) const;
    QString tokenText(int32_t id) const;
    // The restored column's cell of a layer whose KL to the fresh run exceeds the tolerance.
    bool changedByCache(const QModelIndex& index) const;

    LensViewPtr m_result;
    Colour m_colour = Colour::Probability;
    double m_maxKl = 0; // the KL colour scale's top: the largest KL to final in the table
};

} // namespace kvscope::widgets
