#include "statepicker.h"

namespace kvscope::widgets {

StatePicker::StatePicker(QWidget* parent) : QComboBox(parent) {
    setSizeAdjustPolicy(QComboBox::AdjustToContents);
    addItem(tr("live session"), QString());
}

void StatePicker::setLedger(const LedgerViewPtr& ledger) {
    const QString keep = currentId();
    const QSignalBlocker block(this);
    clear();
    addItem(tr("live session"), QString());
    if (ledger)
        for (const auto& n : ledger->nodes)
            addItem(tr("%1 (%2 tokens)").arg(n.name).arg(n.tokens), n.id);
    setCurrentId(keep);
}

void StatePicker::setCurrentId(const QString& id) {
    const int i = findData(id);
    setCurrentIndex(i >= 0 ? i : 0);
}

} // namespace kvscope::widgets
