// StatePicker: a combo box listing the live session and every snapshot of the ledger, by
// label; currentId() is "" for the live session. StatePairPicker: the "A [picker] B [picker]"
// row of the panels that compare two states (Diff, Logit drift, Branches).
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

class StatePairPicker : public QWidget {
    Q_OBJECT
public:
    explicit StatePairPicker(QWidget* parent = nullptr);
    void setLedger(const LedgerViewPtr& ledger);
    QString idA() const { return m_a->currentId(); }
    QString idB() const { return m_b->currentId(); }
    void setIds(const QString& a, const QString& b);

private:
    StatePicker* m_a;
    StatePicker* m_b;
};

} // namespace kvscope::widgets
