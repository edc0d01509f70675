#include "positionpanel.h"

#include "enginecontroller.h"
#include "exportmenu.h"
#include "plotwidget.h"
#include "positionmodel.h"
#include "selection.h"
#include "statedata.h" // countOf
#include "statefollower.h"

#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>

namespace kvscope::widgets {

PositionPanel::PositionPanel(EngineController* engine, Selection* selection, QWidget* parent)
    : QWidget(parent), m_selection(selection), m_model(new PositionModel(this)),
      m_plot(newPlot(this)) {
    auto* layout = new QVBoxLayout(this);
    m_summary = new QLabel(this);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setWordWrap(true); // wraps instead of widening the dock
    layout->addWidget(m_summary);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_plot);
    m_table = new QTableView(split);
    m_table->setModel(m_model);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // Sized from the first rows: measuring thousands of rows on every paint stalls the UI.
    m_table->horizontalHeader()->setResizeContentsPrecision(64);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    split->addWidget(m_table);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    m_plot->setMinimumSize(200, 120);
    m_plot->legend->setVisible(true);
    QFont legendFont = font();
    legendFont.setPointSizeF(std::max(6.0, legendFont.pointSizeF() * 0.8));
    m_plot->legend->setFont(legendFont);
    // Under the plot, two entries a row: inside the axis rect the legend covered the upper
    // half of the stored positions on a 1366x768 screen (the plot is ~200 px square there).
    legendUnderPlot(m_plot, 2, 6);
    m_plot->legend->setBorderPen(Qt::NoPen);
    m_plot->legend->setIconSize(24, 12);
    m_plot->plotLayout()->setRowStretchFactor(1, 0.001);
    m_plot->xAxis->setLabel(tr("token index"));
    m_plot->yAxis->setLabel(tr("position"));
    // Token indices and positions are whole numbers: no 2.5 ticks.
    for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis}) {
        auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
        ticker->setTickStep(1.0);
        ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
        // The plot is often narrow beside its table: about three index labels ("0 2000 4000") fit
        // where five ran into each other.
        if (axis == m_plot->xAxis)
            ticker->setTickCount(2);
        axis->setTicker(ticker);
    }
    auto* expected = m_plot->addGraph();
    expected->setName(tr("expected")); // = the index
    expected->setPen(QPen(QColor(120, 120, 120), 1, Qt::DashLine));
    auto* stored = m_plot->addGraph();
    stored->setName(tr("stored"));
    stored->setPen(QPen(QColor(0x4c, 0x78, 0xa8), 2));
    stored->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    auto* bad = m_plot->addGraph();
    bad->setName(tr("mismatch"));
    bad->setLineStyle(QCPGraph::lsNone);
    bad->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, QPen(Qt::red, 2), QBrush(), 10));
    auto* next = m_plot->addGraph();
    next->setName(tr("next")); // the position the next token gets
    next->setLineStyle(QCPGraph::lsNone);
    next->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond,
                                          QPen(QColor(0xf2, 0x8e, 0x2b), 2),
                                          QBrush(QColor(0xf2, 0x8e, 0x2b)), 10));
    auto* sel = m_plot->addGraph();
    sel->removeFromLegend();
    sel->setLineStyle(QCPGraph::lsNone);
    sel->setScatterStyle(
        QCPScatterStyle(QCPScatterStyle::ssSquare, QPen(Qt::red, 2), QBrush(), 12));

    installExportMenu(m_plot,
                      {QStringLiteral("positions"), [this] { return m_plot->toPixmap().toImage(); },
                       [this] { return m_model->toCsv(); }});
    installExportMenu(m_table,
                      {QStringLiteral("positions"), [this] { return m_table->grab().toImage(); },
                       [this] { return m_model->toCsv(); }});
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        const double x = m_plot->xAxis->pixelToCoord(e->position().x());
        const qint64 i = qRound64(x);
        if (i >= 0 && i < qint64(m_model->alignment().cacheLength))
            m_selection->setPosition(i);
    });
    connect(m_table, &QTableView::clicked, this,
            [this](const QModelIndex& index) { m_selection->setPosition(index.row()); });
    new StateFollower(engine, this, [this](const CacheViewPtr& s) { rebuild(s); });
    connect(m_selection, &Selection::changed, this, [this] {
        const qint64 p = m_selection->position();
        const auto& rows = m_model->alignment().rows;
        auto* g = m_plot->graph(4);
        g->data()->clear();
        if (p >= 0 && size_t(p) < rows.size()) {
            g->addData(double(p), double(rows[size_t(p)].stored));
            const QSignalBlocker block(m_table);
            m_table->selectRow(int(p));
        }
        m_plot->replot(QCustomPlot::rpQueuedReplot);
    });
}

QString PositionPanel::summary() const {
    return m_summary->text();
}

void PositionPanel::rebuild(const CacheViewPtr& state) {
    m_model->setState(state);
    const state::PositionAlignment& a = m_model->alignment();
    QVector<double> x, stored, expected, badX, badY;
    for (const auto& r : a.rows) {
        x << double(r.token);
        expected << double(r.expected);
        stored << (r.stored >= 0 ? double(r.stored) : qQNaN());
        if (r.mismatch) {
            badX << double(r.token);
            badY << (r.stored >= 0 ? double(r.stored) : double(r.expected));
        }
    }
    m_plot->graph(0)->setData(x, expected, true);
    m_plot->graph(1)->setData(x, stored, true);
    m_plot->graph(2)->setData(badX, badY, true);
    m_plot->graph(3)->setData({double(a.cacheLength)}, {double(a.nextPosition)}, true);
    m_plot->graph(4)->data()->clear();
    const double hi =
        std::max<double>({1.0, double(a.cacheLength), double(a.nextPosition), double(a.tokens)});
    m_plot->xAxis->setRange(-0.5, hi + 0.5);
    m_plot->yAxis->rescale();
    m_plot->yAxis->setRange(std::min(m_plot->yAxis->range().lower, -0.5),
                            std::max(m_plot->yAxis->range().upper, hi) + 0.5);
    m_plot->replot(QCustomPlot::rpQueuedReplot);

    if (!state || state->model.path.isEmpty()) {
        m_summary->clear();
        return;
    }
    const bool ok = a.aligned();
    QString text =
        tr("%1 · cache length %2 · next position %3 (expected %4) · %5")
            .arg(countOf(int(a.tokens), tr("token"), tr("tokens")))
            .arg(a.cacheLength)
            .arg(a.nextPosition)
            .arg(a.expectedNext)
            .arg(countOf(int(a.mismatches), tr("mismatched slot"), tr("mismatched slots")));
    if (a.firstMismatch >= 0)
        text += tr(" · first at index %1").arg(a.firstMismatch);
    if (a.evictionRecorded && a.tokens > a.cacheLength)
        text += tr(" · %1 evicted as recorded")
                    .arg(countOf(int(a.tokens - a.cacheLength), tr("token"), tr("tokens")));
    m_summary->setText(text);
    m_summary->setStyleSheet(ok ? QString() : QStringLiteral("color: #b00000; font-weight: bold"));
}

} // namespace kvscope::widgets
