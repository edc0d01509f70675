#include "transplantpanel.h"

#include "enginecontroller.h"
#include "exportmenu.h"
#include "ledgercontroller.h"
#include "plotwidget.h"
#include "transplantmodel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace kvscope::widgets {

TransplantPanel::TransplantPanel(EngineController* engine, LedgerController* ledger,
                                 QWidget* parent)
    : QWidget(parent), m_ledger(ledger), m_model(new TransplantModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    // Prompts that differ in one word of the same length, so that the default (every position)
    // works with any tokenizer that splits "cat" and "dog" alike (a character-level one too;
    // "girl ... Lily" against "boy ... Tim" were 36 and 33 tokens for aidreams260K).
    m_recipient =
        new QLineEdit(QStringLiteral("Once upon a time, there was a little cat named Lily"), this);
    m_donor =
        new QLineEdit(QStringLiteral("Once upon a time, there was a little dog named Lily"), this);
    form->addRow(tr("Recipient"), m_recipient);
    form->addRow(tr("Donor"), m_donor);
    auto* row = new QHBoxLayout;
    m_layer = new QSpinBox(this);
    m_layer->setRange(0, 0);
    m_positions = new QComboBox(this);
    m_positions->addItem(tr("all positions"), true);
    m_positions->addItem(tr("last position"), false);
    m_steps = new QSpinBox(this);
    m_steps->setRange(0, 256);
    m_steps->setValue(8);
    auto* go = new QPushButton(tr("Transplant"), this);
    // One row of short words, with the long ones as tooltips: two rows left the plot ~50 px in
    // the tab group beside Attention on a 1366x768 screen.
    auto* layerLabel = new QLabel(tr("After layer"), this);
    const QString layerTip = tr("The donor's residual stream after this layer replaces the "
                                "recipient's");
    layerLabel->setToolTip(layerTip);
    m_layer->setToolTip(layerTip);
    auto* stepsLabel = new QLabel(tr("Steps"), this);
    const QString stepsTip = tr("Persistence steps: how many greedy steps the recipient runs "
                                "after the transplant");
    stepsLabel->setToolTip(stepsTip);
    m_steps->setToolTip(stepsTip);
    row->addWidget(layerLabel);
    row->addWidget(m_layer);
    row->addWidget(m_positions);
    row->addWidget(stepsLabel);
    row->addWidget(m_steps);
    row->addWidget(go);
    row->addStretch();
    form->addRow(row);
    layout->addLayout(form);
    m_summary = new QLabel(tr("Replace the recipient's residual stream at one layer with the "
                              "donor's and see what survives."),
                           this);
    m_summary->setWordWrap(true);
    m_summary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    // Two to three lines that scroll when the result says more: wrapped at the dock's minimum
    // width it was four lines that set the height of the tab group beside Position alignment.
    auto* summaryArea = new QScrollArea(this);
    summaryArea->setFrameShape(QFrame::NoFrame);
    summaryArea->setWidgetResizable(true);
    summaryArea->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    summaryArea->setWidget(m_summary);
    const int line = m_summary->fontMetrics().lineSpacing();
    summaryArea->setMinimumHeight(2 * line + 4);
    summaryArea->setMaximumHeight(3 * line + 6);
    layout->addWidget(summaryArea);

    auto* split = new QSplitter(Qt::Vertical, this);
    m_plot = newPlot(split);
    m_plot->setMinimumHeight(70);
    m_plot->xAxis->setLabel(tr("step"));
    // "KL → donor" as the table heads it did not fit the 70-px plot a 1366x768 screen leaves
    // ("KL → dono"): the axis says KL, the tooltip says to what.
    m_plot->yAxis->setLabel(tr("KL"));
    m_plot->setToolTip(tr("KL of each decode step's next-token distribution to the donor run's, "
                          "after each intervention (one line each)"));
    m_plot->legend->setVisible(false); // shown with the lines it names (empty, it was a box)
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    // The legend's three lines side by side, and few y ticks: in a short dock the plot is its
    // 70 px minimum, which a stacked legend and six tick labels covered whole.
    m_plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m_plot->legend->setWrap(3);
    m_plot->yAxis->ticker()->setTickCount(3);
    m_table = new QTableView(split);
    m_table->setModel(m_model);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // Sized from the first rows: measuring thousands of rows on every paint stalls the UI.
    m_table->horizontalHeader()->setResizeContentsPrecision(64);
    m_table->verticalHeader()->hide();
    split->addWidget(m_plot);
    split->addWidget(m_table);
    m_table->setMinimumHeight(3 * line); // two rows; the splitter gives it more when there is room
    // The plot first: with equal shares the table took the room and left the plot at its
    // minimum (its axis title cut to "KL to the do…" in a 1600x1000 window).
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setSizes({300, 200}); // the same shares from the start (scaled to the room)
    layout->addWidget(split, 1);
    installExportMenu(m_plot, {QStringLiteral("transplant"),
                               [this] { return m_plot->toPixmap().toImage(); },
                               [this] { return m_model->toCsv(); }});
    installExportMenu(m_table,
                      {QStringLiteral("transplant"), [this] { return m_table->grab().toImage(); },
                       [this] { return m_model->toCsv(); }});

    connect(go, &QPushButton::clicked, this, &TransplantPanel::run);
    connect(m_recipient, &QLineEdit::returnPressed, this, &TransplantPanel::run);
    connect(m_donor, &QLineEdit::returnPressed, this, &TransplantPanel::run);
    connect(engine, &EngineController::modelLoaded, this,
            [this](const ModelInfo& info) { m_layer->setRange(0, std::max(0, info.layers - 1)); });
    ledger->onAnswer<TransplantView>(this, &TransplantPanel::show);
    // A refused transplant says why here, where the user looks, not only in the status bar
    // for a few seconds; the result of an earlier run goes, so that it is not read as this one.
    connect(engine, &EngineController::operationFinished, this, [this](const OperationResult& r) {
        if (r.kind != QLatin1String("transplant") || r.ok)
            return;
        m_model->setResult(nullptr);
        m_plot->clearGraphs();
        m_plot->legend->setVisible(false);
        m_plot->replot();
        m_summary->setText(tr("Not run: %1").arg(r.message));
    });
}

void TransplantPanel::setPrompts(const QString& recipient, const QString& donor) {
    m_recipient->setText(recipient);
    m_donor->setText(donor);
}

QString TransplantPanel::summaryText() const {
    return m_summary->text();
}

void TransplantPanel::setLayer(int layer) {
    m_layer->setValue(layer);
}

void TransplantPanel::run() {
    m_ledger->request(req::Transplant{m_recipient->text(), m_donor->text(), m_layer->value(),
                                      m_positions->currentData().toBool(), m_steps->value()});
}

void TransplantPanel::show(const TransplantViewPtr& view) {
    m_model->setResult(view);
    const kvscope::state::TransplantResult& r = view->result;
    QString text =
        tr("Layer %1, %2: KL(donor ‖ transplanted) = %3 (donor vs original: "
           "%4); top-1 %5 the donor's.")
            .arg(r.layer)
            .arg(r.positions == kvscope::state::TransplantPositions::Last ? tr("the last position")
                                                                          : tr("all positions"))
            .arg(r.vsDonor.kl, 0, 'g', 3)
            .arg(r.donorVsOriginal.kl, 0, 'g', 3)
            .arg(r.vsDonor.top1Agree ? tr("matches") : tr("differs from"));
    if (!view->donorContinuation.isEmpty())
        text +=
            tr("\nDonor continues: “%1”. Original continues: “%2”.")
                .arg(view->donorContinuation.simplified(), view->originalContinuation.simplified());
    for (const auto& p : r.persistence)
        if (!p.skipped.empty())
            text += QStringLiteral("\n") + tr("Skipped %1: %2")
                                               .arg(QString::fromStdString(p.intervention),
                                                    QString::fromStdString(p.skipped));
    m_summary->setText(text);

    // One line per intervention with steps: KL to the donor by step.
    m_plot->clearGraphs();
    const QColor colours[] = {QColor(0x4c, 0x78, 0xa8), QColor(0xf5, 0x85, 0x18),
                              QColor(0x54, 0xa2, 0x4b)};
    double maxY = 0, maxX = 1;
    int line = 0;
    for (const auto& p : r.persistence) {
        if (p.steps.empty())
            continue;
        QVector<double> xs, ys;
        for (const auto& s : p.steps) {
            xs << s.step;
            ys << s.klDonor;
            maxY = std::max(maxY, s.klDonor);
            maxX = std::max(maxX, double(s.step));
        }
        auto* g = m_plot->addGraph();
        g->setName(QString::fromStdString(p.intervention));
        g->setPen(QPen(colours[line++ % 3], 2));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
        g->setData(xs, ys);
    }
    m_plot->xAxis->setRange(0, maxX + 0.5);
    m_plot->yAxis->setRange(0, maxY > 0 ? maxY * 1.1 : 1);
    m_plot->legend->setVisible(m_plot->graphCount() > 0);
    m_plot->replot();
}

} // namespace kvscope::widgets
