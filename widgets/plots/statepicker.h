// StatePicker: a combo box listing the live session and every snapshot of the ledger, by
// label; currentId() is "" for the live session. Used by the drift and diff panels.
#pragma once

#include "statedata.h"

#include <QComboBox>

namespace kvscope::widgets {

class StatePicker : public QComboBox {
    Q_OBJECT
public:
    explicit StatePicker(QWidget* parent = nullptr);
    void setLedger(const LedgerViewPtr& ledger);
    QString currentId() const { return currentData().toString(); }
    void setCurrentId(const QString& id);
};

} // namespace kvscope::widgets
