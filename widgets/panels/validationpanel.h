// ValidationPanel: the invariant report of the live session (or of the snapshot/file last
// verified) by severity; the explanation of the selected violation below; selecting one moves
// the selection to its layer/head/position.
#pragma once

#include "statedata.h"

#include <QWidget>

class QLabel;
class QTableView;
class QTextBrowser;

namespace kvscope::widgets {

class LedgerController;
class Selection;
class ViolationModel;

class ValidationPanel : public QWidget {
    Q_OBJECT
public:
    ValidationPanel(LedgerController* ledger, Selection* selection, QWidget* parent = nullptr);
    ViolationModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    void showReport(const ValidationViewPtr& report);

private:
    Selection* m_selection;
    ViolationModel* m_model;
    QLabel* m_header;
    QTableView* m_table;
    QTextBrowser* m_explanation;
};

} // namespace kvscope::widgets
