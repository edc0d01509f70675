#include "statepicker.h"

#include <QHBoxLayout>
#include <QLabel>

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

StatePairPicker::StatePairPicker(QWidget* parent)
    : QWidget(parent), m_a(new StatePicker(this)), m_b(new StatePicker(this)) {
    auto* row = new QHBoxLayout(this);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(new QLabel(tr("A"), this));
    row->addWidget(m_a);
    row->addWidget(new QLabel(tr("B"), this));
    row->addWidget(m_b);
}

void StatePairPicker::setLedger(const LedgerViewPtr& ledger) {
    m_a->setLedger(ledger);
    m_b->setLedger(ledger);
}

void StatePairPicker::setIds(const QString& a, const QString& b) {
    m_a->setCurrentId(a);
    m_b->setCurrentId(b);
}

} // namespace kvscope::widgets
