// LensPanel ("Logit lens"): what every layer of a state predicts next, read from its residual
// stream through the model's own head (state::logitLens, `kvscope-cli lens`): a layer ×
// position grid of each cell's most probable token, coloured by its probability or by its KL to
// the final layer's distribution, and one more column with the last token run again over the
// state's restored cache, where a damaged cache shows (the first layer whose prediction it
// changes is named above the grid). Clicking a cell selects that layer and position in every
// view; a selection made elsewhere is shown here.
#pragma once

#include "statedata.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QTableView;

namespace kvscope::widgets {

class LedgerController;
class LensModel;
class Selection;
class StatePicker;

class LensPanel : public QWidget {
    Q_OBJECT
public:
    LensPanel(LedgerController* ledger, Selection* selection, QWidget* parent = nullptr);

    LensModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    LensViewPtr lens() const;
    QString summaryText() const;
    void setState(const QString& id);
    void setForce(bool force);

public slots:
    void read();
    // Back to the empty panel (another model was loaded).
    void clear();

private:
    void show(const LensViewPtr& view);
    void followSelection();

    LedgerController* m_ledger;
    Selection* m_selection;
    StatePicker* m_state;
    QCheckBox* m_force;
    QComboBox* m_colour;
    QLabel* m_summary;
    LensModel* m_model;
    QTableView* m_table;
};

} // namespace kvscope::widgets
