// The views that scale (issue "Views that scale and explain"):
//   - HeatmapRaster: the cost of a paint is bounded by its pixels, not the cells; a single NaN
//     or spike stays visible zoomed out; masks and diverging reductions;
//   - HeatmapPlot as a user drives it: wheel zoom, drag pan, Shift+drag rectangle zoom,
//     double-click reset, hover read-out, integer ticks, token text on zoomed axes, empty state;
//   - the attention view on stories260K: zoom/pan/hover with the read-out naming tokens and the
//     probability, the pattern equal to `kvscope-cli attention --json` for the same state, and
//     after a restore one replay, then new (layer, head) without re-running the model.
#include "screenchild.h"
#include "guitest.h"
#include "testdata.h"

#include "attentionpanel.h"
#include "enginecontroller.h"
#include "heatmapplot.h"
#include "heatmapraster.h"
#include "kvheatmappanel.h"
#include "maskpanel.h"
#include "ledgercontroller.h"
#include "mainwindow.h"
#include "selection.h"
#include "sessionpanel.h"
#include "statepicker.h"

#include "engine/randommodel.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <QDir>
#include <QDockWidget>

#include <QProcess>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <qcustomplot.h>

#include <cmath>

using namespace kvscope::widgets;
using guitest::waitDone;

namespace {

const QString kModel = QStringLiteral("models/stories260K/stories260K.bin");

// Sends a wheel turn of `steps` notches at `pos` (positive: zoom in).
void wheel(QWidget* w, QPoint pos, int steps) {
    QWheelEvent e(QPointF(pos), w->mapToGlobal(QPointF(pos)), QPoint(), QPoint(0, 120 * steps),
                  Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QCoreApplication::sendEvent(w, &e);
}

void drag(QWidget* w, QPoint from, QPoint to, Qt::KeyboardModifiers mods = Qt::NoModifier) {
    QTest::mousePress(w, Qt::LeftButton, mods, from);
    // QTest::mouseMove carries no buttons; QCustomPlot reads them from the event.
    for (int i = 1; i <= 4; ++i) {
        const QPoint p = from + (to - from) * i / 4;
        QMouseEvent move(QEvent::MouseMove, QPointF(p), w->mapToGlobal(QPointF(p)), Qt::NoButton,
                         Qt::LeftButton, mods);
        QCoreApplication::sendEvent(w, &move);
    }
    QTest::mouseRelease(w, Qt::LeftButton, mods, to);
}

void hoverAt(QWidget* w, QPoint p) {
    QMouseEvent move(QEvent::MouseMove, QPointF(p), w->mapToGlobal(QPointF(p)), Qt::NoButton,
                     Qt::NoButton, Qt::NoModifier);
    QCoreApplication::sendEvent(w, &move);
}

QPoint pixelOf(QCustomPlot* plot, double x, double y) {
    return QPoint(int(std::lround(plot->xAxis->coordToPixel(x))),
                  int(std::lround(plot->yAxis->coordToPixel(y))));
}

const QString kSmolTokenizer = QStringLiteral("tokenizers/hf/smollm/tokenizer.json");

// Sentences repeated until just under `tokens` tokens.
QString promptOf(const kvscope::tok::Tokenizer& tok, int64_t tokens) {
    static const char* kSentences[] = {
        "The keeper of the lighthouse wrote every ship's name in a blue book. ",
        "When the fog came in, she counted the seconds between the horns. ",
        "A cache remembers what the model has already read, one column per token. ",
        "Nobody in the village knew why the clock struck thirteen on Tuesdays. "};
    std::string text;
    for (int i = 0;; ++i) {
        std::string more = text + kSentences[i % 4];
        if (int64_t(tok.encode(more).size()) > tokens)
            return QString::fromStdString(text);
        text = std::move(more);
    }
}

QString cliPath() {
    return QStringLiteral(KVSCOPE_CLI);
}

// Loads the test model, runs "Once upon a time" with `steps` generated tokens and snapshots the
// live session: the snapshot operation's result (its nodeId names the snapshot).
OperationResult snapshotOfARun(EngineController& engine, LedgerController& ledger, QSignalSpy& done,
                               int steps) {
    engine.loadModel(QString::fromStdString(testdata::path(kModel)));
    if (const OperationResult r = waitDone(done); !r.ok)
        return r;
    PromptRequest r;
    r.prompt.text = "Once upon a time";
    r.steps = steps;
    engine.runPrompt(r);
    if (const OperationResult run = waitDone(done); !run.ok)
        return run;
    ledger.request(req::Snapshot{});
    return waitDone(done);
}

} // namespace

class TestViews : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_views"), false); }

    // 4,096 x 4,096 cells into 800 x 600 pixels: the pyramid keeps the blocks read per pixel
    // small (the bound is 9: a pixel covers at most 3 x 3 blocks of the chosen level), and a
    // single spike, a single NaN and a single negative extreme survive the reduction.
    void rasterCostAndExtremes() {
        const int n = 4096;
        kvscope::LargeVector<float> values(size_t(n) * n, 0.25f);
        values[size_t(1234) * n + 3000] = 7.0f;                                  // spike
        values[size_t(4000) * n + 17] = std::numeric_limits<float>::quiet_NaN(); // bad cell
        values[size_t(3000) * n + 40] = -std::numeric_limits<float>::infinity(); // bad cell
        values[size_t(100) * n + 100] = -9.0f;                                   // extreme low
        HeatmapRaster raster;
        raster.setData(n, n, std::move(values));
        QVERIFY(raster.levels() >= 11);
        HeatmapRaster::Colours c;
        c.scale = ColorScale{0.0, 7.0};
        const QImage img = raster.render(-0.5, n - 0.5, -0.5, n - 0.5, 800, 600, c);
        QCOMPARE(img.size(), QSize(800, 600));
        QVERIFY2(raster.lastBlocksRead() <= 9 * 800 * 600,
                 qPrintable(QString::number(raster.lastBlocksRead())));
        auto pixelOfCell = [&](int col, int row) {
            return img.pixel(int((col + 0.5) / n * 800), int((row + 0.5) / n * 600));
        };
        QCOMPARE(pixelOfCell(3000, 1234), dataLut()[255]);                   // the spike's colour
        QCOMPARE(pixelOfCell(17, 4000), QRgb(0xff000000u | kBadValueColor)); // NaN: magenta
        QCOMPARE(pixelOfCell(40, 3000), QRgb(0xff000000u | kBadValueColor)); // -Inf too
        QCOMPARE(raster.values()[size_t(1234) * n + 3000], 7.0f); // level 0 kept as given
        QCOMPARE(pixelOfCell(2000, 2000), dataLut()[size_t(std::lround(0.25 / 7 * 255))]);
        // Diverging: the pixel holding -9 shows -9, not the 0.25 around it.
        c.diverging = true;
        c.scale = ColorScale{-9.0, 9.0};
        const QImage d = raster.render(-0.5, n - 0.5, -0.5, n - 0.5, 800, 600, c);
        QCOMPARE(d.pixel(int(100.5 / n * 800), int(100.5 / n * 600)), divergingLut()[0]);
        // Zoomed in on 10 x 10 cells: level 0, one block per pixel (or two at cell edges).
        const QImage z = raster.render(2994.5, 3004.5, 1228.5, 1238.5, 200, 200, c);
        QVERIFY(raster.lastBlocksRead() <= 4 * 200 * 200);
        QCOMPARE(z.pixel(100, 100), divergingLut()[size_t(std::lround((7.0 + 9) / 18 * 255))]);
        // Upside down (a reversed axis): row 0 at the bottom.
        const QImage up = raster.render(-0.5, n - 0.5, n - 0.5, -0.5, 800, 600, c);
        QCOMPARE(up.pixel(int(100.5 / n * 800), 599 - int(100.5 / n * 600)), divergingLut()[0]);

        // Masks: a block is greyed only when every cell under it is masked.
        kvscope::LargeVector<float> small(16, 1.0f);
        kvscope::LargeVector<uint8_t> mask(16, 0);
        for (int r = 0; r < 4; ++r)
            for (int col = r + 1; col < 4; ++col)
                mask[size_t(r * 4 + col)] = 1; // causal: above the diagonal
        raster.setData(4, 4, std::move(small), std::move(mask));
        QVERIFY(raster.hasMask());
        c = {};
        c.scale = ColorScale{0.0, 1.0};
        const QImage m = raster.render(-0.5, 3.5, -0.5, 3.5, 4, 4, c);
        QVERIFY(m.pixel(3, 0) != m.pixel(0, 3));          // masked corner greyed
        QVERIFY(QColor(m.pixel(3, 0)).lightness() > 150); // visibly grey, not near-black
        QCOMPARE(m.pixel(0, 0), m.pixel(1, 1));
        const QImage coarse = raster.render(-0.5, 3.5, -0.5, 3.5, 1, 1, c);
        QCOMPARE(coarse.pixel(0, 0), dataLut()[255]); // mixed block: data, not grey
        raster.clear();
        QCOMPARE(raster.columns(), 0);
    }

    void colourScales() {
        ValueStats s = ValueStats::scan(std::vector<float>{0.0f, 0.001f, 0.5f, 0.25f});
        QCOMPARE(s.minPositive, double(0.001f));
        const ColorScale log = ColorScale::logarithmic(s);
        QVERIFY(log.log);
        QCOMPARE(log.normalized(0.0), 0.0); // zeros (masked) take the lowest colour
        QCOMPARE(log.normalized(0.5), 1.0);
        QVERIFY(std::abs(log.normalized(std::sqrt(0.001 * 0.5)) - 0.5) < 1e-3); // geometric mid
        const ColorScale lin =
            ColorScale::fromStats(ValueStats::scan(std::vector<float>{0.20f, 0.21f}));
        QVERIFY(lin.lo > 0.19);
        QCOMPARE(lin.withZero().lo, 0.0); // near-uniform data keeps its contrast from zero
    }

    // The viewer as a user drives it: wheel, drag, Shift+drag, double-click, hover; ticks stay
    // whole numbers; token text appears once each cell has room for a label.
    void heatmapInteractions() {
        HeatmapPlot plot(QStringLiteral("Test map"));
        plot.resize(700, 500);
        plot.setLabels(QStringLiteral("key"), QStringLiteral("query"), QStringLiteral("p"));
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        QVERIFY(plot.isEmpty());
        plot.setEmptyText(QStringLiteral("Run a prompt to fill the cache"));
        const int cols = 300, rows = 200;
        std::vector<float> v(size_t(cols) * rows);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c)
                v[size_t(r) * cols + c] = float(r * 1000 + c);
        plot.setData(cols, rows, v);
        QStringList tokens;
        for (int c = 0; c < cols; ++c)
            tokens << QStringLiteral("tok%1").arg(c);
        plot.setAxisTokens(Qt::Horizontal, tokens);
        QCustomPlot* qcp = plot.plot();
        qcp->replot();
        QCOMPARE(qcp->xAxis->range().lower, -0.5);
        QCOMPARE(qcp->xAxis->range().upper, cols - 0.5);
        for (double t : qcp->xAxis->tickVector())
            QCOMPARE(t, std::round(t)); // integer ticks only
        QVERIFY(!qcp->xAxis->tickVectorLabels().join(' ').contains(QStringLiteral("tok")));

        // Wheel: zoom in around the cursor.
        const QPoint centre = pixelOf(qcp, 150, 100);
        wheel(qcp, centre, 3);
        qcp->replot();
        const double zoomed = qcp->xAxis->range().size();
        QVERIFY2(zoomed < cols * 0.8, qPrintable(QString::number(zoomed)));
        QVERIFY(std::abs(qcp->xAxis->pixelToCoord(centre.x()) - 150) < 2);

        // Drag: pan left by 100 px moves the view right (towards higher columns).
        const double before = qcp->xAxis->range().lower;
        drag(qcp, centre, centre - QPoint(100, 0));
        qcp->replot();
        QVERIFY2(qcp->xAxis->range().lower > before + 5,
                 qPrintable(QStringLiteral("%1 -> %2").arg(before).arg(qcp->xAxis->range().lower)));
        QVERIFY(std::abs(qcp->xAxis->range().size() - zoomed) < 1e-6); // panning keeps the zoom

        // Shift+drag: zoom to the rectangle.
        plot.resetView();
        qcp->replot();
        const QPoint a = pixelOf(qcp, 10, 20), b = pixelOf(qcp, 30, 40);
        drag(qcp, a, b, Qt::ShiftModifier);
        qcp->replot();
        QVERIFY2(std::abs(qcp->xAxis->range().lower - 10) < 1.5 &&
                     std::abs(qcp->xAxis->range().upper - 30) < 1.5,
                 qPrintable(QStringLiteral("%1..%2")
                                .arg(qcp->xAxis->range().lower)
                                .arg(qcp->xAxis->range().upper)));
        // 20 cells in ~600 px: one token label per cell.
        QVERIFY2(qcp->xAxis->tickVectorLabels().join(' ').contains(QStringLiteral("tok15")),
                 qPrintable(qcp->xAxis->tickVectorLabels().join(' ')));
        QVERIFY(plot.lastBlocksRead() > 0);

        // Hover: the read-out names the cell and its value.
        hoverAt(qcp, pixelOf(qcp, 17, 33));
        QVERIFY2(plot.readout().contains(QStringLiteral("key 17")) &&
                     plot.readout().contains(QStringLiteral("query 33")) &&
                     plot.readout().contains(QStringLiteral("33017")),
                 qPrintable(plot.readout()));
        // A click (no drag) selects that cell.
        QSignalSpy clicked(&plot, &HeatmapPlot::cellClicked);
        QTest::mouseClick(qcp, Qt::LeftButton, Qt::NoModifier, pixelOf(qcp, 12, 25));
        QCOMPARE(clicked.count(), 1);
        QCOMPARE(clicked.first().at(0).toInt(), 12);
        QCOMPARE(clicked.first().at(1).toInt(), 25);

        // The view never leaves the data: zooming out past everything shows everything.
        wheel(qcp, centre, -30);
        QCOMPARE(qcp->xAxis->range().lower, -0.5);
        QCOMPARE(qcp->xAxis->range().upper, cols - 0.5);
        // Double-click resets.
        plot.zoomTo(5, 9, 5, 9);
        QTest::mouseDClick(qcp, Qt::LeftButton, Qt::NoModifier, centre);
        QCOMPARE(qcp->yAxis->range().upper, rows - 0.5);

        // One row: a single whole-number tick, not -0.4..0.4.
        plot.setData(5, 1, std::vector<float>{1, 2, 3, 4, 5});
        qcp->replot();
        QCOMPARE(qcp->yAxis->tickVector(), QVector<double>{0.0});
        // Empty data: the sentence, not axes.
        plot.setData(0, 0, {});
        QVERIFY(plot.isEmpty());
        QVERIFY(!qcp->isVisible());
        // Back from the empty page with a resize pending: showing the plot paints at once, and
        // it must paint the new data (it once read the raster of the data just freed; an
        // ASan build, -DKVSCOPE_ASAN=ON, reports that as a use after free).
        plot.resize(plot.width() + 40, plot.height() + 20);
        plot.setData(cols, rows, v);
        QVERIFY(!plot.isEmpty() && qcp->isVisible());
        qcp->replot(QCustomPlot::rpImmediateRefresh);
        QCOMPARE(plot.stats().max, double(v.back()));
    }

    // Zoom, pan and hover on the attention view of a real run: the read-out names the query
    // and key tokens, their positions and the probability the engine computed.
    void attentionViewDrivenByMouse() {
        KVSCOPE_REQUIRE_DATA(kModel);
        kvscope::gui::MainWindow window;
        window.resize(1366, 768);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        window.openPath(QString::fromStdString(testdata::path(kModel)));
        QVERIFY(waitDone(done).ok);
        // Nothing cached yet: the empty sentence, no error, no hint line, no request.
        window.selection()->set(1, 1, -1);
        QTest::qWait(300);
        QVERIFY(window.attentionPanel()->plot()->isEmpty());
        QVERIFY(!window.attentionPanel()->view());
        window.sessionPanel()->setPromptText(QStringLiteral("Once upon a time"));
        window.sessionPanel()->runPrompt();
        QVERIFY(waitDone(done).ok);
        const auto state = window.engine()->state();
        window.selection()->set(2, 1, 3);
        AttentionPanel* panel = window.attentionPanel();
        QTRY_VERIFY(panel->view() && panel->view()->layer == 2 &&
                    panel->view()->revision == state->revision);
        const auto view = panel->view();
        QCOMPARE(view->source, QStringLiteral("queries recorded live"));
        HeatmapPlot* plot = panel->plot();
        QCustomPlot* qcp = plot->plot();
        // Make the dock big enough to interact with, as a user would.
        panel->window()->activateWindow();
        qcp->replot();
        plot->zoomTo(0, 12, 0, 12);
        qcp->replot();
        wheel(qcp, pixelOf(qcp, 6, 6), 1);
        qcp->replot();
        QVERIFY(qcp->xAxis->range().size() < 12);
        drag(qcp, pixelOf(qcp, 6, 6), pixelOf(qcp, 6, 6) + QPoint(-20, -20));
        qcp->replot();
        plot->zoomTo(-0.5, 9.5, -0.5, 9.5);
        qcp->replot();
        hoverAt(qcp, pixelOf(qcp, 4, 7));
        const QString text = plot->readout();
        const float p = view->probs()[size_t(7 * view->keys + 4)];
        QVERIFY2(text.contains(QStringLiteral("query 7")) && text.contains(QStringLiteral("key 4")),
                 qPrintable(text));
        QVERIFY2(text.contains(QString::number(double(p), 'g', 4)), qPrintable(text));
        QVERIFY2(text.contains(QString::fromUtf8("“") + state->tokens[4].text.trimmed()) ||
                     text.contains(state->tokens[4].text.trimmed()),
                 qPrintable(text));
        hoverAt(qcp, pixelOf(qcp, 8, 2)); // the future: masked
        QVERIFY2(plot->readout().contains(QStringLiteral("masked")), qPrintable(plot->readout()));
        // Token text on the key axis once zoomed in.
        QVERIFY2(qcp->xAxis->tickVectorLabels().join(' ').contains(
                     state->tokens[3].text.trimmed().left(6)),
                 qPrintable(qcp->xAxis->tickVectorLabels().join('|')));
        window.grab().save(QStringLiteral(KVSCOPE_BINARY_DIR "/screenshots/attention-zoomed.png"));
    }

    // The engine's status messages count in words: "Generated 1 token", not "1 tokens (steps)".
    void engineMessagesCountRight() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        QSignalSpy done(&engine, &EngineController::operationFinished);
        engine.loadModel(QString::fromStdString(testdata::path(kModel)));
        QVERIFY(waitDone(done).ok);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 1;
        engine.runPrompt(r);
        auto d = waitDone(done);
        QCOMPARE(d.message, QStringLiteral("Generated 1 token"));
        engine.generate(2, {});
        d = waitDone(done);
        QCOMPARE(d.message, QStringLiteral("Generated 2 tokens"));
        LedgerController ledger(&engine);
        ledger.request(req::Truncate{1});
        d = waitDone(done);
        QVERIFY2(d.message.startsWith(QStringLiteral("Truncated to 1 token →")),
                 qPrintable(d.message));
    }

    // The one path from a request to its view: a request's busy text while it runs, its answer
    // reaches the views of its type only (callables and member functions alike), and a failed
    // request answers nothing and still ends its operation.
    void requestsAnswerTheirViewsOnly() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        LedgerController ledger(&engine);
        QSignalSpy done(&engine, &EngineController::operationFinished);
        QSignalSpy busy(&engine, &EngineController::busyChanged);
        int diffs = 0, lenses = 0;
        ledger.onAnswer<DiffView>(this, [&](const DiffViewPtr& v) { diffs += v ? 1 : 0; });
        ledger.onAnswer<LensView>(this, [&](const LensViewPtr&) { ++lenses; });
        StatePicker picker; // takes the tree by a member function, as the Survival panel's
        ledger.onAnswer<LedgerView>(&picker, &StatePicker::setLedger);
        QSignalSpy answered(&ledger, &LedgerController::answered);

        // Without a model the lens is refused: no answer, one finished operation.
        ledger.request(req::Lens{QString(), false});
        QCOMPARE(busy.first().value(1).toString(), QStringLiteral("Reading the logit lens"));
        auto d = waitDone(done);
        QCOMPARE(d.kind, QStringLiteral("lens"));
        QVERIFY(!d.ok);
        QCOMPARE(answered.count(), 0);

        d = snapshotOfARun(engine, ledger, done, 4);
        QVERIFY2(d.ok, qPrintable(d.message));
        QVERIFY(ledger.ledger() && ledger.ledger()->nodes.size() == 1);
        ledger.request(req::Diff{d.nodeId, QString()});
        QVERIFY(waitDone(done).ok);
        QCOMPARE(diffs, 1);
        QCOMPARE(lenses, 0);
        QCOMPARE(guitest::answers<DiffView>(answered).size(), size_t(1));
        QCOMPARE(guitest::answers<LensView>(answered).size(), size_t(0));
        QVERIFY(!guitest::answers<LedgerView>(answered).empty());
        QCOMPARE(picker.findData(d.nodeId) >= 0, true);
    }

    // Every panel at realistic size, on a 1366x768 screen: a random-weight model in
    // SmolLM2-135M's shape (30 layers, 9 heads, 3 KV heads, the real SmolLM tokenizer) with
    // 4,096 cached positions. Screenshots go to <build>/screenshots/realistic-*.png.
    void realisticModelScreenshots() {
        KVSCOPE_REQUIRE_DATA(kSmolTokenizer);
        if (!testscreen::inChild()) {
            const auto run = testscreen::runOnScreen(QSize(1366, 768),
                                                     QStringLiteral("realisticModelScreenshots"));
            QVERIFY2(run.ok, qPrintable(run.output.right(3000)));
            return;
        }
        QTemporaryDir dir;
        kvscope::RandomModelOptions o;
        o.shape = "smollm2-135m";
        o.tokenizerPath = testdata::path(kSmolTokenizer);
        const std::string modelDir = dir.filePath(QStringLiteral("smollm2")).toStdString();
        auto made = kvscope::writeRandomModel(modelDir, o);
        QVERIFY2(made.isOk(), made.message().c_str());
        QCOMPARE(made.value().config.nLayers, int64_t(30));
        auto tok = kvscope::tok::Tokenizer::fromFile(modelDir + "/tokenizer.json");
        QVERIFY(tok.isOk());

        kvscope::gui::MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        window.openPath(QString::fromStdString(modelDir));
        QVERIFY(waitDone(done).ok);
        const int64_t positions = 4096;
        PromptRequest prompt;
        prompt.prompt.text = (promptOf(*tok.value(), positions - 8)).toStdString();
        prompt.steps = 0;
        window.sessionPanel()->setPromptText(QString::fromStdString(prompt.prompt.text));
        window.engine()->runPrompt(prompt);
        auto r = waitDone(done, 900000);
        QVERIFY2(r.ok, qPrintable(r.message));
        const int64_t fed = window.engine()->state()->length;
        QVERIFY(fed > positions - 64 && fed <= positions);
        window.engine()->generate(int(positions - fed), {});
        QVERIFY(waitDone(done, 300000).ok);
        const auto state = window.engine()->state();
        QCOMPARE(state->length, positions);
        QCOMPARE(state->layers, 30);
        // The window fits the screen.
        QVERIFY2(window.frameGeometry().width() <= 1366,
                 qPrintable(QString::number(window.frameGeometry().width())));
        window.selection()->set(17, 1, 4000);
        AttentionPanel* attention = window.attentionPanel();
        QTRY_VERIFY_WITH_TIMEOUT(attention->view() && attention->view()->layer == 17 &&
                                     attention->view()->keys == positions,
                                 120000);
        QCOMPARE(window.kvPanel()->positionPlot()->geometry().columns, int(positions));
        QCOMPARE(window.kvPanel()->positionPlot()->geometry().rows, 30);
        QCOMPARE(window.maskPanel()->plot()->geometry().columns, int(positions));

        const QString shots = QStringLiteral(KVSCOPE_BINARY_DIR "/screenshots");
        QDir().mkpath(shots);
        for (QDockWidget* dock : window.docks()) {
            if (dock->isFloating() || !dock->toggleViewAction())
                continue;
            dock->show();
            dock->raise();
            QTest::qWait(150);
            const QString name = dock->objectName().remove(QStringLiteral("dock."));
            QVERIFY(window.grab().save(shots + QStringLiteral("/realistic-") + name +
                                       QStringLiteral(".png")));
        }
        // Zoomed into the attention map's last 40 queries: token text on both axes.
        window.dock(QStringLiteral("dock.attention"))->raise();
        attention->plot()->zoomTo(positions - 40.5, positions - 0.5, positions - 40.5,
                                  positions - 0.5);
        attention->plot()->plot()->replot();
        QTest::qWait(150);
        QVERIFY(window.grab().save(shots + QStringLiteral("/realistic-attention-zoomed.png")));
    }

    // The GUI's pattern is core's (ws::attentionOf), equal to `kvscope-cli attention --json` of
    // the same state; after a restore it is recomputed once, then every (layer, head) is a
    // matrix product.
    void attentionEqualsCliAndRestoreReplaysOnce() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        LedgerController ledger(&engine);
        QSignalSpy done(&engine, &EngineController::operationFinished);
        const OperationResult snap = snapshotOfARun(engine, ledger, done, 12);
        QVERIFY2(snap.ok, qPrintable(snap.message));
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("a.kvsnap"));
        ledger.request(req::Save{snap.nodeId, file});
        QVERIFY(waitDone(done).ok);
        engine.generate(5, {}); // the live session moves on
        QVERIFY(waitDone(done).ok);
        ledger.request(req::Restore{snap.nodeId, false});
        QVERIFY(waitDone(done).ok);

        QSignalSpy ready(&engine, &EngineController::attentionReady);
        engine.requestAttention(3, 5);
        QVERIFY(ready.wait(60000));
        const auto first = ready.takeFirst().first().value<AttentionViewPtr>();
        QVERIFY2(first->error.isEmpty(), qPrintable(first->error));
        QVERIFY2(first->source.contains(QStringLiteral("recomputed")), qPrintable(first->source));
        engine.requestAttention(1, 2);
        QVERIFY(ready.wait(60000));
        const auto second = ready.takeFirst().first().value<AttentionViewPtr>();
        QCOMPARE(second->source, QStringLiteral("queries recorded live")); // no second replay

        QProcess cli;
        cli.start(cliPath(),
                  {QStringLiteral("attention"), file, QStringLiteral("-m"),
                   QString::fromStdString(testdata::path(kModel)), QStringLiteral("--layer"),
                   QStringLiteral("3"), QStringLiteral("--head"), QStringLiteral("5"),
                   QStringLiteral("--json")});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 0);
        const auto j = nlohmann::json::parse(cli.readAllStandardOutput().toStdString());
        QCOMPARE(j["queries"].get<int64_t>(), first->queries);
        QCOMPARE(j["keys"].get<int64_t>(), first->keys);
        QCOMPARE(j["kv_head"].get<int>(), first->kvHead);
        float worst = 0;
        for (const auto& row : j["rows"]) {
            const int64_t q = row["query"].get<int64_t>();
            const auto probs = row["probs"].get<std::vector<float>>();
            for (size_t k = 0; k < probs.size(); ++k)
                worst = std::max(worst,
                                 std::abs(probs[k] - first->probs()[size_t(q) * probs.size() + k]));
        }
        QCOMPARE(worst, 0.0f); // the same function on the same state

        // A bad layer is refused by the CLI with the flag named.
        cli.start(cliPath(),
                  {QStringLiteral("attention"), file, QStringLiteral("-m"),
                   QString::fromStdString(testdata::path(kModel)), QStringLiteral("--layer"),
                   QStringLiteral("99"), QStringLiteral("--head"), QStringLiteral("0")});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 2);
        QVERIFY(cli.readAllStandardError().contains("--layer 99"));
    }
};

QTEST_MAIN(TestViews)
#include "tst_views.moc"
