#include "lenspanel.h"

#include "lensmodel.h"
#include "ledgercontroller.h"
#include "selection.h"
#include "statepicker.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

namespace kvscope::widgets {

LensPanel::LensPanel(LedgerController* ledger, Selection* selection, QWidget* parent)
    : QWidget(parent), m_ledger(ledger), m_selection(selection), m_model(new LensModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    m_state = new StatePicker(this);
    auto* readButton = new QPushButton(tr("Read"), this);
    readButton->setObjectName(QStringLiteral("lens.read"));
    m_force = new QCheckBox(tr("even if verify fails"), this);
    m_force->setToolTip(tr("Read a state whose verify report has errors (a damaged cache is "
                           "what the restored column shows); structural errors still refuse"));
    m_colour = new QComboBox(this);
    m_colour->addItem(tr("colour: top token's probability"));
    m_colour->addItem(tr("colour: KL to the final layer"));
    controls->addWidget(new QLabel(tr("State"), this));
    controls->addWidget(m_state);
    controls->addWidget(readButton);
    controls->addWidget(m_force);
    controls->addWidget(m_colour);
    controls->addStretch();
    layout->addLayout(controls);
    m_summary = new QLabel(
        tr("Pick a state and press Read: what each layer would predict next, at every position."),
        this);
    m_summary->setWordWrap(true);
    layout->addWidget(m_summary);
    m_table = new QTableView(this);
    m_table->setModel(m_model);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setSelectionBehavior(QAbstractItemView::SelectItems);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setDefaultSectionSize(72);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    m_table->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
    layout->addWidget(m_table, 1);

    connect(readButton, &QPushButton::clicked, this, &LensPanel::read);
    connect(m_colour, &QComboBox::currentIndexChanged, this, [this](int i) {
        m_model->setColour(i == 1 ? LensModel::Colour::KlToFinal : LensModel::Colour::Probability);
    });
    ledger->onAnswer<LedgerView>(this, [this](const LedgerViewPtr& l) { m_state->setLedger(l); });
    ledger->onAnswer<LensView>(this, &LensPanel::show);
    connect(m_table, &QTableView::clicked, this, [this](const QModelIndex& index) {
        const auto [layer, position] = m_model->cellAt(index);
        if (layer >= 0)
            m_selection->set(layer, -1, position);
    });
    connect(m_selection, &Selection::changed, this, &LensPanel::followSelection);
}

LensViewPtr LensPanel::lens() const {
    return m_model->result();
}

QString LensPanel::summaryText() const {
    return m_summary->text();
}

void LensPanel::setState(const QString& id) {
    m_state->setCurrentId(id);
}

void LensPanel::setForce(bool force) {
    m_force->setChecked(force);
}

void LensPanel::read() {
    m_ledger->request(req::Lens{m_state->currentId(), m_force->isChecked()});
}

void LensPanel::clear() {
    m_model->setResult(nullptr);
    m_summary->setText(
        tr("Pick a state and press Read: what each layer would predict next, at every position."));
}

void LensPanel::show(const LensViewPtr& view) {
    // Paints core's result (state::logitLens, what `kvscope-cli lens --json` prints).
    m_state->setCurrentId(view->id);
    m_model->setResult(view);
    const auto& r = view->result;
    QString text = tr("<b>%1</b> · %2 layers × %3 positions (a fresh run of its tokens)")
                       .arg(view->label.toHtmlEscaped())
                       .arg(r.layers)
                       .arg(r.to - r.from);
    if (r.firstChangedLayer < 0)
        text += tr(" · the restored cache changes no layer's prediction (KL ≤ %1 at every layer)")
                    .arg(r.tolerance, 0, 'g', 3);
    else
        text += QStringLiteral(" · <span style='color:#c00000'>%1</span>")
                    .arg(tr("the restored cache changes what layer %1 predicts (KL %2 > %3) and "
                            "the final distribution by KL %4")
                             .arg(r.firstChangedLayer)
                             .arg(r.klToFresh[size_t(r.firstChangedLayer)], 0, 'g', 3)
                             .arg(r.tolerance, 0, 'g', 3)
                             .arg(r.klFinalToFresh, 0, 'g', 3));
    if (view->forced)
        text += tr(" · read despite verify's errors");
    m_summary->setText(text);
    followSelection();
}

void LensPanel::followSelection() {
    const QModelIndex index = m_model->indexOf(m_selection->layer(), m_selection->position());
    if (!index.isValid())
        return;
    m_table->setCurrentIndex(index);
    m_table->scrollTo(index);
}

} // namespace kvscope::widgets
