// tst_gui: the engine controller and the main window on a real model (stories260K, label
// `model`). Async flows are checked with QSignalSpy; the screenshot test writes a PNG of every
// panel to <build>/screenshots for a human to look at.
#include "guitest.h"
#include "testdata.h"

#include "mainwindow.h"

#include "attentionpanel.h"
#include "enginecontroller.h"
#include "heatmapplot.h"
#include "kvheatmappanel.h"
#include "maskpanel.h"
#include "positionmodel.h"
#include "positionpanel.h"
#include "selection.h"
#include "sessionpanel.h"
#include "tokenmodel.h"
#include "diffpanel.h"
#include "driftpanel.h"
#include "inductionpanel.h"
#include "ledgercontroller.h"
#include "snapshotpanel.h"
#include "statefollower.h"
#include "snapshottreemodel.h"
#include "transplantmodel.h"
#include "transplantpanel.h"
#include "validationpanel.h"
#include "violationmodel.h"
#include "util/demomodel.h"

#include <QTableView>
#include <QTemporaryDir>
#include <QAbstractItemModelTester>
#include <QMenu>
#include <QSplitter>
#include <QMessageBox>
#include <QApplication>
#include <QTimer>

#include <QHeaderView>
#include <QMouseEvent>
#include <qcustomplot.h>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QScreen>
#include <QSettings>
#include <QDockWidget>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>
#include <QThread>

using namespace kvscope::widgets;

namespace {

const QString kModel = QStringLiteral("models/stories260K/stories260K.bin");

// Waits for the next operationFinished and returns its typed result ({kind, ok, message,
// nodeId}; ok = false with a "timed out" message when none came).
OperationResult waitDone(QSignalSpy& spy, int timeoutMs = 60000) {
    return guitest::waitDone(spy, timeoutMs);
}

bool loadModel(EngineController& engine) {
    QSignalSpy done(&engine, &EngineController::operationFinished);
    engine.loadModel(QString::fromStdString(testdata::path(kModel)));
    return waitDone(done).ok;
}

using guitest::answers;
using guitest::checkConsistent;

using guitest::screenshotDir;

} // namespace

class TestGui : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_gui"), false); }

    // A file chosen as a state that is none (here: bytes in a .bin, as a tokenizer's .bin
    // would be) is refused by name; it is not handed to the model loader, and the model stays.
    void openStateRefusesOtherFiles() {
        const auto demo = kvscope::findDemoModel();
        QVERIFY2(demo, "the bundled demo model was not found");
        kvscope::gui::MainWindow window;
        window.resize(1366, 768);
        window.show();
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        window.openPath(QString::fromStdString(*demo));
        QVERIFY(waitDone(done).ok);
        const QString model = window.engine()->model().path;
        QTemporaryDir dir;
        const QString notState = dir.filePath(QStringLiteral("tok.bin"));
        QFile f(notState);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(4096, '\x07'));
        f.close();
        QString said;
        QTimer poll;
        QObject::connect(&poll, &QTimer::timeout, &window, [&] {
            if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
                said = box->text();
                box->accept();
            }
        });
        poll.start(50);
        done.clear();
        window.openStatePath(notState);
        poll.stop();
        QVERIFY2(said.contains(notState) && said.contains(QStringLiteral("not opened")),
                 qPrintable(said));
        QTest::qWait(200);
        QVERIFY(done.isEmpty()); // nothing was started
        QCOMPARE(window.engine()->model().path, model);
    }

    void loadRunGreedy() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        QSignalSpy loaded(&engine, &EngineController::modelLoaded);
        QVERIFY(loadModel(engine));
        QCOMPARE(loaded.count(), 1);
        QCOMPARE(engine.model().layers, 5);
        QVERIFY(engine.devices().contains(QStringLiteral("cpu")));

        // run.c: "Once upon a time" -> 1 403 407 261 378, next argmax 432.
        QSignalSpy done(&engine, &EngineController::operationFinished);
        QSignalSpy busy(&engine, &EngineController::busyChanged);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 0;
        engine.runPrompt(r);
        QVERIFY(engine.isBusy());
        auto d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QVERIFY(!engine.isBusy());
        QVERIFY(busy.count() >= 2);
        auto s = engine.state();
        QVERIFY(s);
        std::vector<int32_t> ids;
        for (const auto& t : s->tokens)
            ids.push_back(t.id);
        QCOMPARE(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
        QCOMPARE(s->topIds.front(), 432);
        checkConsistent(*s);

        // Greedy continuation, then one step: the cache grows one column per token.
        engine.generate(10, {});
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QCOMPARE(engine.state()->length, 15);
        QCOMPARE(engine.state()->tokens[5].id, 432);
        QCOMPARE(engine.state()->tokens[5].segment, QStringLiteral("generated"));
        engine.step({});
        d = waitDone(done);
        QVERIFY(d.ok);
        QCOMPARE(engine.state()->length, 16);
        checkConsistent(*engine.state());
        // The reference text: "Once upon a time, there was a little girl named Lily."
        QString text;
        for (const auto& t : engine.state()->tokens)
            if (!t.special)
                text += t.text;
        QVERIFY(engine.state()->tokens[0].special);
        QVERIFY2(text.startsWith(QStringLiteral("Once upon a time, there was a little girl")),
                 qPrintable(text));
    }

    void cancelLeavesConsistentSession() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        QVERIFY(loadModel(engine));
        QSignalSpy done(&engine, &EngineController::operationFinished);
        QSignalSpy progress(&engine, &EngineController::progress);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 100000; // far more than the context: only a stop ends it early
        // Stop as soon as generation reports progress: a direct connection runs stop() on the
        // engine thread (it only bumps an atomic), so the cut lands mid-generation for sure.
        auto stopper = connect(
            &engine, &EngineController::progress, &engine,
            [&engine](qint64, qint64, const QString& what) {
                if (what == QStringLiteral("Generating"))
                    engine.stop();
            },
            Qt::DirectConnection);
        engine.runPrompt(r);
        const auto d = waitDone(done);
        disconnect(stopper);
        QCOMPARE(d.ok, false);
        QVERIFY2(d.message.contains(QStringLiteral("cancelled")) ||
                     d.message.contains(QStringLiteral("context_full")),
                 qPrintable(d.message));
        const auto s = engine.state();
        checkConsistent(*s);
        QVERIFY(s->length > 5);
        // The session keeps working after a stop.
        const int64_t before = s->length;
        if (before < engine.model().maxContext) {
            engine.step({});
            QVERIFY(waitDone(done).ok);
            QCOMPARE(engine.state()->length, before + 1);
            checkConsistent(*engine.state());
        }
    }

    // The panels' StateFollowers during a run apply states one follower per pass of the event
    // loop, and the run's end is announced only once every follower shows its last state.
    void followersSettleBeforeTheEnd() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        QVERIFY(loadModel(engine));
        QObject owner;
        std::vector<int64_t> applied[3];
        std::vector<std::pair<int, int64_t>> order; // (follower, length) as applied
        for (int i = 0; i < 3; ++i)
            new StateFollower(&engine, &owner, [&, i](const CacheViewPtr& s) {
                applied[i].push_back(s ? s->length : -1);
                order.emplace_back(i, s ? s->length : -1);
            });
        QSignalSpy done(&engine, &EngineController::operationFinished);
        bool behind = false;
        connect(&engine, &EngineController::operationFinished, &owner, [&] {
            for (auto& a : applied)
                behind |= a.empty() || a.back() != engine.state()->length;
        });
        bool busyWhileBehind = false;
        connect(&engine, &EngineController::busyChanged, &owner, [&](bool busy) {
            if (!busy)
                for (auto& a : applied)
                    busyWhileBehind |= a.empty() || a.back() != engine.state()->length;
        });
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 24;
        engine.runPrompt(r);
        QVERIFY(engine.isBusy());
        QVERIFY(waitDone(done).ok);
        QCOMPARE(engine.state()->length, 29);
        QVERIFY2(!behind, "operationFinished came before a follower showed the last state");
        QVERIFY(!busyWhileBehind);
        for (auto& a : applied) {
            QVERIFY(!a.empty());
            QCOMPARE(a.back(), 29);
            QVERIFY(std::is_sorted(a.begin(), a.end())); // never an older state after a newer
        }
        // Outside a run a state is applied at once, by every follower.
        order.clear();
        engine.resetSession();
        QTRY_COMPARE(order.size(), size_t(3));
        for (auto& a : applied)
            QCOMPARE(a.back(), int64_t(0));
    }

    void truncateAndContinue() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        QVERIFY(loadModel(engine));
        QSignalSpy done(&engine, &EngineController::operationFinished);
        QSignalSpy state(&engine, &EngineController::stateChanged);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 12;
        engine.runPrompt(r);
        QVERIFY(waitDone(done).ok);
        const auto full = engine.state();
        state.clear();
        // Truncation is the workspace's (core's state::truncate), reached through the ledger.
        LedgerController ledger(&engine);
        ledger.request(req::Truncate{6}); // keep BOS + prompt + first generated token
        const auto t = waitDone(done);
        QVERIFY2(t.ok, qPrintable(t.message));
        QCOMPARE(t.kind, QStringLiteral("truncate"));
        QVERIFY(!t.nodeId.isEmpty());
        QTRY_VERIFY(engine.state()->length == 6);
        checkConsistent(*engine.state());
        // Greedy from the truncated state repeats the original continuation.
        engine.generate(4, {});
        QVERIFY(waitDone(done).ok);
        for (int i = 6; i < 10; ++i)
            QCOMPARE(engine.state()->tokens[size_t(i)].id, full->tokens[size_t(i)].id);
    }

    void attentionRequestsCoalesce() {
        KVSCOPE_REQUIRE_DATA(kModel);
        EngineController engine;
        QVERIFY(loadModel(engine));
        QSignalSpy done(&engine, &EngineController::operationFinished);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 8;
        engine.runPrompt(r);
        QVERIFY(waitDone(done).ok);
        QSignalSpy ready(&engine, &EngineController::attentionReady);
        uint64_t last = 0;
        for (int i = 0; i < 40; ++i) // scrubbing: only the latest request is answered
            last = engine.requestAttention(i % 5, i % 8);
        QVERIFY(ready.wait(10000));
        QTest::qWait(200);
        QCOMPARE(ready.count(), 1);
        const auto v = ready.first().first().value<AttentionViewPtr>();
        QCOMPARE(v->serial, last);
        QCOMPARE(v->layer, 39 % 5);
        QCOMPARE(v->head, 39 % 8);
        QCOMPARE(v->queries, 13);
        QCOMPARE(v->keys, 13);
        QCOMPARE(v->source, QStringLiteral("queries recorded live"));
        for (int64_t q = 0; q < v->queries; ++q) {
            double sum = 0;
            for (int64_t k = 0; k < v->keys; ++k) {
                const float p = v->probs()[size_t(q * v->keys + k)];
                if (k > q)
                    QCOMPARE(p, 0.0f); // causal: no weight on future slots
                sum += p;
            }
            QVERIFY2(std::abs(sum - 1.0) < 1e-4, qPrintable(QString::number(sum)));
        }
        // After a truncation the pattern's rows shrink with the session.
        LedgerController ledger(&engine);
        ledger.request(req::Truncate{7});
        QVERIFY(waitDone(done).ok);
        const uint64_t serial = engine.requestAttention(1, 0);
        QVERIFY(ready.wait(10000));
        const auto w = ready.last().first().value<AttentionViewPtr>();
        QCOMPARE(w->serial, serial);
        QCOMPARE(w->queries, 7);
    }

    void mainWindowScreenshots() {
        KVSCOPE_REQUIRE_DATA(kModel);
        kvscope::gui::MainWindow window;
        window.resize(1600, 1000);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        const QString dir = screenshotDir();
        window.grab().save(dir + QStringLiteral("/welcome.png"));

        auto* engine = window.engine();
        QSignalSpy done(engine, &EngineController::operationFinished);
        window.openPath(QString::fromStdString(testdata::path(kModel)));
        QVERIFY(waitDone(done).ok);
        for (QDockWidget* dock : window.docks())
            QVERIFY2(dock->isVisible(), qPrintable(dock->objectName()));

        window.sessionPanel()->setPromptText(QStringLiteral("Once upon a time"));
        window.sessionPanel()->runPrompt();
        QVERIFY(waitDone(done).ok);
        const auto s = engine->state();
        QCOMPARE(s->length, 37); // 5 prompt tokens + 32 generated (greedy, no early stop)

        // Panels follow the engine state and the one selection.
        window.selection()->set(2, 1, 10);
        QTRY_VERIFY(window.attentionPanel()->view() &&
                    window.attentionPanel()->view()->layer == 2 &&
                    window.attentionPanel()->view()->revision == s->revision);
        QCOMPARE(window.sessionPanel()->tokenModel()->rowCount(), 37);
        QCOMPARE(window.kvPanel()->positionPlot()->geometry().columns, 37);
        QCOMPARE(window.kvPanel()->positionPlot()->geometry().rows, 5);
        QCOMPARE(window.kvPanel()->headPlot()->geometry().columns, s->kvHeads);
        QCOMPARE(window.attentionPanel()->plot()->geometry().rows, 37);
        QCOMPARE(window.positionPanel()->model()->alignment().mismatches, 0);
        QVERIFY2(window.maskPanel()->summary().startsWith(QStringLiteral(
                     "mask shape [37], one entry per cache slot · 37 visible, 0 masked")),
                 qPrintable(window.maskPanel()->summary()));
        QCOMPARE(window.maskPanel()->plot()->geometry().columns, 37);
        QCOMPARE(window.maskPanel()->plot()->plot()->xAxis->range().upper, 36.5);
        QCOMPARE(window.attentionPanel()->view()->head / std::max(1, s->model.heads / s->kvHeads),
                 1);
        {
            // The hover line starts with the probability: elided on a narrow dock, it loses the
            // layer and head (shown in the controls), not the number.
            QCustomPlot* ap = window.attentionPanel()->plot()->plot();
            const QPoint at(int(ap->xAxis->coordToPixel(3)), int(ap->yAxis->coordToPixel(30)));
            QMouseEvent move(QEvent::MouseMove, QPointF(at), ap->mapToGlobal(QPointF(at)),
                             Qt::NoButton, Qt::NoButton, Qt::NoModifier);
            QCoreApplication::sendEvent(ap, &move);
            const QString line = window.attentionPanel()->plot()->readout();
            QVERIFY2(line.startsWith(QStringLiteral("p = ")) ||
                         line.startsWith(QStringLiteral("masked")),
                     qPrintable(line));
        }

        // Clicking a heatmap cell selects it (layer 3, position 20 on the position map).
        auto* plot = window.kvPanel()->positionPlot();
        emit plot->cellClicked(20, 3);
        QCOMPARE(window.selection()->layer(), 3);
        QCOMPARE(window.selection()->position(), 20);

        QTest::qWait(300); // queued replots
        QVERIFY(window.grab().save(dir + QStringLiteral("/mainwindow.png")));
        for (QDockWidget* dock : window.docks()) {
            dock->raise(); // tabbed docks: bring each to the front before grabbing it
            QTest::qWait(100);
            const QString name = dock->objectName().mid(5); // "dock.kv" -> "kv"
            QVERIFY(dock->widget()->grab().save(dir + QStringLiteral("/panel-%1.png").arg(name)));
        }
        QVERIFY(QFileInfo(dir + QStringLiteral("/panel-kv.png")).size() > 1000);

        // CSV exports carry the data.
        QVERIFY(window.kvPanel()->positionPlot()->toCsv().count(QLatin1Char('\n')) == 1 + 37 * 5);
        QVERIFY(window.positionPanel()->model()->toCsv().count(QLatin1Char('\n')) == 1 + 37);

        // Reset layout keeps every panel reachable.
        window.resetLayout();
        for (QDockWidget* dock : window.docks())
            QVERIFY(dock->isVisible());
    }

    // load -> generate -> snapshot -> continue -> restore (verify report first) -> drift flat
    // at zero -> fork and diff two branches -> truncate -> save/open/export; screenshots.
    void ledgerFlow() {
        KVSCOPE_REQUIRE_DATA(kModel);
        kvscope::gui::MainWindow window;
        window.resize(1600, 1000);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto* engine = window.engine();
        auto* ledger = window.ledger();
        QSignalSpy done(engine, &EngineController::operationFinished);
        window.openPath(QString::fromStdString(testdata::path(kModel)));
        QVERIFY(waitDone(done).ok);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 8;
        engine->runPrompt(r);
        QVERIFY(waitDone(done).ok);
        // The live session validates clean once it settles.
        QTRY_VERIFY(ledger->liveValidation() &&
                    ledger->liveValidation()->worst() < SeverityRank::Warning);

        window.snapshotPanel()->takeSnapshot();
        auto d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_COMPARE(ledger->ledger() ? int(ledger->ledger()->nodes.size()) : 0, 1);
        const QString first = ledger->ledger()->nodes[0].id;
        QCOMPARE(ledger->ledger()->currentId, first);
        const auto captured = engine->state();
        QCOMPARE(captured->length, 13);

        engine->generate(10, {});
        QVERIFY(waitDone(done).ok);
        QCOMPARE(engine->state()->length, 23);

        int asked = 0;
        QString equivalence;
        window.snapshotPanel()->setRestoreConfirmation([&](const ValidationView& report) {
            ++asked;
            equivalence = report.equivalenceText;
            return report.worst() == SeverityRank::Error ? 0 : 1;
        });
        window.snapshotPanel()->selectId(first);
        window.snapshotPanel()->restoreSelected();
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QCOMPARE(asked, 1);
        QVERIFY2(equivalence.startsWith(QStringLiteral("equivalent")), qPrintable(equivalence));
        QCOMPARE(engine->state()->length, captured->length);
        for (size_t i = 0; i < captured->tokens.size(); ++i)
            QCOMPARE(engine->state()->tokens[i].id, captured->tokens[i].id);
        QCOMPARE(engine->state()->tokens.back().segment, QStringLiteral("generated"));

        // Restored snapshot vs the live (restored) session: drift is flat at zero.
        window.driftPanel()->setStates(first, QString());
        window.driftPanel()->run();
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_VERIFY(window.driftPanel()->drift());
        const auto drift = window.driftPanel()->drift();
        QCOMPARE(drift->outcome.result.firstDivergingStep, -1);
        QVERIFY(!drift->outcome.result.steps.empty());
        for (const auto& p : drift->outcome.result.steps) {
            QVERIFY(p.logits.kl <= drift->outcome.tolerance.maxKl);
            QVERIFY(p.logits.top1Agree);
        }
        // Short or tall, the three stacked plots keep their left tick labels apart (at 200 px,
        // three ticks in the ~30 px KL plot overlapped); a plot too short for two labels (the
        // minimum height leaves each ~12 px) gets the fewest ticks, two.
        QCustomPlot* driftPlot = window.driftPanel()->plot();
        for (int height : {driftPlot->minimumHeight(), 200, 400}) {
            // No event loop in between (a pending layout could resize the plot back): the
            // first replot lays out and fits the tick counts, the second draws with them.
            driftPlot->resize(std::max(driftPlot->width(), 300), height);
            driftPlot->replot();
            driftPlot->replot();
            QCOMPARE(driftPlot->height(), height);
            // The rotated titles of neighbouring plots do not meet (at 200 px "max |Δlogit|"
            // ran into both of its neighbours'); at 400 px each has its full title.
            for (int i = 0; i < driftPlot->axisRectCount(); ++i) {
                QCPAxis* y = driftPlot->axisRect(i)->axis(QCPAxis::atLeft);
                const QFontMetrics fm(y->labelFont());
                if (height >= 400)
                    QVERIFY2(y->label().size() > 5, qPrintable(y->label()));
                if (i == 0)
                    continue;
                QCPAxis* above = driftPlot->axisRect(i - 1)->axis(QCPAxis::atLeft);
                const int halfWidths =
                    (fm.horizontalAdvance(above->label()) + fm.horizontalAdvance(y->label()) + 1) /
                    2;
                const int apart =
                    driftPlot->axisRect(i)->center().y() - driftPlot->axisRect(i - 1)->center().y();
                QVERIFY2(halfWidths <= apart,
                         qPrintable(QStringLiteral("height %1: titles \"%2\" and \"%3\" "
                                                   "need %4 px, %5 apart")
                                        .arg(height)
                                        .arg(above->label(), y->label())
                                        .arg(halfWidths)
                                        .arg(apart)));
            }
            for (int i = 0; i < driftPlot->axisRectCount(); ++i) {
                QCPAxis* y = driftPlot->axisRect(i)->axis(QCPAxis::atLeft);
                std::vector<double> px;
                for (double t : y->tickVector())
                    if (y->range().contains(t))
                        px.push_back(y->coordToPixel(t));
                QVERIFY2(!px.empty(), qPrintable(QStringLiteral("plot %1: no ticks").arg(i)));
                const double line = QFontMetrics(y->tickLabelFont()).height();
                if (driftPlot->axisRect(i)->height() < 2 * line) {
                    QVERIFY2(px.size() <= 2,
                             qPrintable(QStringLiteral("height %1, plot %2: %3 "
                                                       "ticks in %4 px")
                                            .arg(height)
                                            .arg(i)
                                            .arg(px.size())
                                            .arg(driftPlot->axisRect(i)->height())));
                    continue;
                }
                for (size_t k = 1; k < px.size(); ++k)
                    QVERIFY2(std::abs(px[k] - px[k - 1]) >= line,
                             qPrintable(QStringLiteral("height %1, plot %2 (%3 px, %4 ticks "
                                                       "asked): ticks %5 px apart, labels %6 "
                                                       "px tall")
                                            .arg(height)
                                            .arg(i)
                                            .arg(driftPlot->axisRect(i)->height())
                                            .arg(y->ticker()->tickCount())
                                            .arg(std::abs(px[k] - px[k - 1]))
                                            .arg(line)));
            }
        }

        // Fork, branch with a different sampler, snapshot; back to the fork, branch greedily.
        window.snapshotPanel()->takeSnapshot(); // a branch point
        QVERIFY(waitDone(done).ok);
        QTRY_COMPARE(int(ledger->ledger()->nodes.size()), 2);
        const QString fork = ledger->ledger()->currentId;
        kvscope::SamplerSettings hot;
        hot.temperature = 1.5;
        hot.seed = 7;
        engine->generate(6, hot);
        QVERIFY(waitDone(done).ok);
        window.snapshotPanel()->takeSnapshot();
        QVERIFY(waitDone(done).ok);
        QTRY_COMPARE(int(ledger->ledger()->nodes.size()), 3);
        const QString branchA = ledger->ledger()->currentId;
        window.snapshotPanel()->selectId(fork);
        window.snapshotPanel()->restoreSelected();
        QVERIFY(waitDone(done).ok);
        engine->generate(6, {});
        QVERIFY(waitDone(done).ok);
        window.snapshotPanel()->takeSnapshot();
        QVERIFY(waitDone(done).ok);
        QTRY_COMPARE(int(ledger->ledger()->nodes.size()), 4);
        const QString branchB = ledger->ledger()->currentId;
        // The tree: first -> fork -> {branchA, branchB}.
        auto* tree = window.snapshotPanel()->model();
        const QModelIndex forkIndex = tree->indexOf(fork);
        QCOMPARE(tree->rowCount(forkIndex), 2);
        QCOMPARE(tree->parent(forkIndex), tree->indexOf(first));

        window.diffPanel()->setStates(branchA, branchB);
        window.diffPanel()->compare();
        QVERIFY(waitDone(done).ok);
        QTRY_VERIFY(window.diffPanel()->diff());
        const auto diff = window.diffPanel()->diff();
        const auto& dr = diff->report;
        QVERIFY(dr.cacheMismatch.empty());
        QCOMPARE(diff->layers, 5);
        // Shared prefix: identical caches; the branches differ only after the fork.
        if (dr.firstDivergence >= 0) {
            QVERIFY(dr.firstDivergence >= captured->length);
            QVERIFY(dr.firstDivergingPosition >= dr.firstDivergence);
        }
        for (int l = 0; l < diff->layers; ++l)
            for (int64_t p = 0; p < captured->length; ++p)
                QCOMPARE(dr.layerPositionMaxAbs[size_t(l * dr.comparedPositions + p)], 0.0f);

        // Truncate at the selected position: recorded in the lineage.
        window.selection()->setPosition(9);
        window.snapshotPanel()->truncateAtSelection();
        QVERIFY(waitDone(done).ok);
        QCOMPARE(engine->state()->length, 9);
        checkConsistent(*engine->state());
        QTRY_COMPARE(int(ledger->ledger()->nodes.size()), 5);
        QCOMPARE(ledger->ledger()->nodes.back().operation, QStringLiteral("truncate"));
        QTRY_VERIFY(ledger->liveValidation() &&
                    ledger->liveValidation()->worst() < SeverityRank::Warning);

        // Save, open (verified on the way in) and export.
        QTemporaryDir tmp;
        const QString file = tmp.filePath(QStringLiteral("first.kvsnap"));
        ledger->request(req::Save{first, file});
        QVERIFY(waitDone(done).ok);
        QVERIFY(QFileInfo(file).size() > 0);
        QSignalSpy reports(ledger, &LedgerController::answered);
        window.openPath(file);
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        bool sawFile = false;
        for (const auto& v : answers<ValidationView>(reports)) {
            if (v->subject == QStringLiteral("first.kvsnap")) {
                sawFile = true;
                QVERIFY(v->worst() < SeverityRank::Error);
            }
        }
        QVERIFY(sawFile);
        ledger->request(
            req::ExportSafetensors{first, tmp.filePath(QStringLiteral("first.safetensors"))});
        QVERIFY(waitDone(done).ok);
        QVERIFY(QFileInfo(tmp.filePath(QStringLiteral("first.safetensors"))).size() > 0);

        // Back to the live report for the screenshots.
        ledger->validateLive();
        QTRY_VERIFY(window.validationPanel()->model()->report() == ledger->liveValidation());
        QTest::qWait(300);
        const QString dir = screenshotDir();
        QVERIFY(window.grab().save(dir + QStringLiteral("/mainwindow-ledger.png")));
        for (const QString& name : {QStringLiteral("snapshots"), QStringLiteral("validation"),
                                    QStringLiteral("drift"), QStringLiteral("diff")}) {
            QDockWidget* dock = window.dock(QStringLiteral("dock.") + name);
            QVERIFY(dock);
            dock->raise();
            QTest::qWait(150);
            QVERIFY(dock->widget()->grab().save(dir + QStringLiteral("/panel-%1.png").arg(name)));
        }
    }

    // Surgery and the fault lab from the snapshot panel: fork N ways, patch a layer, inject a
    // fault (its report names the check), and the transplant panel's table.
    void surgeryActions() {
        KVSCOPE_REQUIRE_DATA(kModel);
        kvscope::gui::MainWindow window;
        window.resize(1600, 1000);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto* engine = window.engine();
        auto* ledger = window.ledger();
        QSignalSpy done(engine, &EngineController::operationFinished);
        window.openPath(QString::fromStdString(testdata::path(kModel)));
        QVERIFY(waitDone(done).ok);
        PromptRequest r;
        r.prompt.text = "Once upon a time";
        r.steps = 8;
        engine->runPrompt(r);
        QVERIFY(waitDone(done).ok);
        window.snapshotPanel()->takeSnapshot();
        QVERIFY(waitDone(done).ok);
        QTRY_COMPARE(int(ledger->ledger()->nodes.size()), 1);
        const QString clean = ledger->ledger()->currentId;

        // Fork 3 ways, 6 tokens each: three children of the clean node.
        window.snapshotPanel()->selectId(clean);
        window.snapshotPanel()->forkSelected(3, 6);
        auto d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_COMPARE(int(ledger->ledger()->nodes.size()), 4);
        auto* tree = window.snapshotPanel()->model();
        QCOMPARE(tree->rowCount(tree->indexOf(clean)), 3);
        QStringList forks;
        const qint64 cleanTokens = ledger->ledger()->nodes.front().tokens;
        for (const auto& n : ledger->ledger()->nodes)
            if (n.operation == QStringLiteral("fork")) {
                forks << n.id;
                QVERIFY(n.tokens > cleanTokens); // continued with its own seed
                QVERIFY(n.tokens <= cleanTokens + 6);
            }
        QCOMPARE(forks.size(), 3);

        // Patch layer 2 of the first branch from the second: a new "patch" node.
        window.snapshotPanel()->selectId(forks[0]);
        window.snapshotPanel()->patchSelectedFrom(forks[1], 2, -1);
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_COMPARE(ledger->ledger()->nodes.back().operation, QStringLiteral("patch"));

        // Every fault in the menu; position-offset's report names positions.offset.
        QVERIFY(window.snapshotPanel()->faultMenu()->actions().size() >= 10);
        QSignalSpy reports(ledger, &LedgerController::answered);
        window.snapshotPanel()->selectId(clean);
        window.snapshotPanel()->injectFault(QStringLiteral("position-offset"));
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_COMPARE(ledger->ledger()->nodes.back().operation, QStringLiteral("fault"));
        bool named = false;
        for (const auto& v : answers<ValidationView>(reports)) {
            if (v->subject.startsWith(QStringLiteral("fault position-offset")))
                for (const auto& viol : v->violations())
                    named = named || viol.id == "positions.offset";
        }
        QVERIFY(named);

        // Transplant: the panel's own prompts run as they are (every position); prompts of
        // two lengths are refused in the panel, and the earlier result goes.
        auto* panel = window.transplantPanel();
        panel->run();
        d = waitDone(done, 120000);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_VERIFY(panel->model()->result());
        panel->setPrompts(QStringLiteral("Once upon a time"),
                          QStringLiteral("Once upon a time, there was a dog"));
        panel->run();
        d = waitDone(done, 120000);
        QVERIFY(!d.ok);
        QVERIFY2(panel->summaryText().startsWith(QStringLiteral("Not run: ")) &&
                     panel->summaryText().contains(QStringLiteral("last position only")),
                 qPrintable(panel->summaryText()));
        QVERIFY(!panel->model()->result());
        auto* transplantPlot = panel->findChild<QCustomPlot*>();
        QVERIFY(transplantPlot && !transplantPlot->legend->visible()); // no empty legend box
        // All positions, same-length prompts -> KL to the donor ~ 0.
        panel->setPrompts(QStringLiteral("Once upon a time, there was a cat"),
                          QStringLiteral("Once upon a time, there was a dog"));
        panel->setLayer(2);
        panel->run();
        d = waitDone(done, 120000);
        QVERIFY2(d.ok, qPrintable(d.message));
        QTRY_VERIFY(panel->model()->result());
        const auto t = panel->model()->result();
        QVERIFY2(t->result.vsDonor.kl < 1e-6, qPrintable(QString::number(t->result.vsDonor.kl)));
        QVERIFY(transplantPlot->legend->visible());
        // The plot, not the table, gets the larger share of a tall panel.
        auto* transplantSplit = panel->findChild<QSplitter*>();
        QVERIFY(transplantSplit);
        // A tall panel of its own (floated): inside its tab group the layout may hand the
        // panel back its small docked height before the sizes are read (flaky in CI).
        QDockWidget* transplantDock = window.dock(QStringLiteral("dock.transplant"));
        transplantDock->setFloating(true);
        transplantDock->resize(700, 720);
        transplantDock->show();
        QTRY_VERIFY(transplantSplit->height() >= 400);
        QVERIFY2(transplantSplit->sizes().at(0) > transplantSplit->sizes().at(1),
                 qPrintable(QStringLiteral("plot %1 px, table %2 px")
                                .arg(transplantSplit->sizes().at(0))
                                .arg(transplantSplit->sizes().at(1))));
        QVERIFY(panel->model()->rowCount() > 0);
        QAbstractItemModelTester tester(panel->model(),
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        QVERIFY(panel->model()->toCsv().count(QLatin1Char('\n')) == 1 + panel->model()->rowCount());

        const QString dir = screenshotDir();
        for (const QString& name : {QStringLiteral("transplant"), QStringLiteral("snapshots"),
                                    QStringLiteral("validation")}) {
            QDockWidget* dock = window.dock(QStringLiteral("dock.") + name);
            QVERIFY(dock);
            dock->raise();
            QTest::qWait(200);
            QVERIFY(dock->widget()->grab().save(dir + QStringLiteral("/panel-%1.png").arg(name)));
        }
    }

    // The induction probe through LedgerController and the Induction panel: a random segment
    // gives every layer x head, the table is sorted by induction score, selecting a row selects
    // its layer and shows its query head in the Attention panel; a text fills the recall table.
    void inductionPanel() {
        KVSCOPE_REQUIRE_DATA(kModel);
        kvscope::gui::MainWindow window;
        window.resize(1600, 1000);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto* engine = window.engine();
        auto* ledger = window.ledger();
        auto* panel = window.inductionPanel();
        QVERIFY(panel);
        QVERIFY(window.dock(QStringLiteral("dock.induction")));
        QSignalSpy done(engine, &EngineController::operationFinished);
        QSignalSpy answered(ledger, &LedgerController::answered);

        // No model yet: a clear failure, no report.
        ledger->request(req::Induction{QString(), 16, 1});
        auto d = waitDone(done);
        QCOMPARE(d.kind, QStringLiteral("induction"));
        QCOMPARE(d.ok, false);
        QVERIFY2(d.message.contains(QStringLiteral("model")), qPrintable(d.message));
        QCOMPARE(answers<InductionView>(answered).size(), size_t(0));

        window.openPath(QString::fromStdString(testdata::path(kModel)));
        QVERIFY(waitDone(done).ok);
        const QString text = QStringLiteral(
            "Once upon a time, there was a little fox named Pip. Pip found a red stone. Once "
            "upon a time, there was a little fox named Pip.");
        PromptRequest r;
        r.prompt.text = text.toStdString();
        r.steps = 0;
        engine->runPrompt(r);
        QVERIFY(waitDone(done).ok);
        const auto live = engine->state();

        // The random segment through the controller: every layer x query head.
        ledger->request(req::Induction{QString(), 16, 3});
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        QCOMPARE(d.kind, QStringLiteral("induction"));
        QCOMPARE(answers<InductionView>(answered).size(), size_t(1)); // before the operation ends
        const auto v = answers<InductionView>(answered).front();
        QCOMPARE(int(v->report.heads.size()), engine->model().layers * engine->model().heads);
        QCOMPARE(v->layers, engine->model().layers);
        QCOMPARE(v->queryHeads, engine->model().heads);
        QCOMPARE(v->report.segmentLength, 16);
        QCOMPARE(v->report.tokens.size(), size_t(33)); // BOS + 2 x 16
        QVERIFY(v->text.isEmpty());
        QVERIFY2(v->summary.contains(QStringLiteral("second copy")), qPrintable(v->summary));
        QCOMPARE(int(v->report.recalled.size()), 16); // the second copy's tokens occurred before
        // The probe runs its own session: the live one is untouched.
        QCOMPARE(engine->state()->revision, live->revision);
        QCOMPARE(engine->state()->length, live->length);

        // The panel's table: every head, highest induction score first.
        QCOMPARE(panel->report(), v);
        QCOMPARE(panel->summary(), v->summary);
        auto* heads = panel->headModel();
        QCOMPARE(heads->rowCount(), int(v->report.heads.size()));
        for (int row = 1; row < heads->rowCount(); ++row)
            QVERIFY(heads->head(row - 1).induction >= heads->head(row).induction);
        QCOMPARE(heads->head(0).layer, v->report.strongest().layer);
        QCOMPARE(heads->head(0).head, v->report.strongest().head);
        QCOMPARE(heads->toCsv().count(QLatin1Char('\n')), 1 + heads->rowCount());

        // Selecting a row, as a click does: its layer in the Selection, its query head in the
        // Attention panel (one that differs from what is shown now, so the test can fail).
        const int groups = std::max(1, engine->model().heads / engine->model().kvHeads);
        int row = -1;
        for (int i = 0; i < heads->rowCount() && row < 0; ++i)
            if (heads->head(i).layer != window.selection()->layer() &&
                heads->head(i).head != window.attentionPanel()->queryHead() &&
                heads->head(i).head / groups != window.selection()->head())
                row = i;
        QVERIFY(row >= 0);
        const kvscope::state::HeadScore chosen = heads->head(row);
        panel->headTable()->selectRow(row);
        {
            // Every header fits its column, even in a narrow dock (it read "nductio").
            panel->headTable()->resize(240, panel->headTable()->height()); // a narrow dock
            QHeaderView* header = panel->headTable()->horizontalHeader();
            const QFontMetrics fm(header->font());
            for (int c = 0; c < header->count(); ++c) {
                const QString text =
                    panel->headTable()->model()->headerData(c, Qt::Horizontal).toString();
                QVERIFY2(header->sectionSize(c) >= fm.horizontalAdvance(text),
                         qPrintable(text + " " + QString::number(header->sectionSize(c))));
            }
        }
        QCOMPARE(window.selection()->layer(), chosen.layer);
        QCOMPARE(window.attentionPanel()->queryHead(), chosen.head);
        QCOMPARE(window.selection()->head(), chosen.head / groups);
        QTRY_VERIFY(window.attentionPanel()->view() &&
                    window.attentionPanel()->view()->layer == chosen.layer &&
                    window.attentionPanel()->view()->head == chosen.head);
        QCOMPARE(window.attentionPanel()->view()->queries, live->length);
        // The strongest head, from code (the tour's path).
        QVERIFY(panel->selectStrongest());
        QCOMPARE(window.selection()->layer(), v->report.strongest().layer);
        QCOMPARE(window.attentionPanel()->queryHead(), v->report.strongest().head);

        // The live session's text, probed as a text: the recall table.
        QCOMPARE(panel->liveText(), text);
        panel->useLiveText();
        panel->run();
        d = waitDone(done);
        QVERIFY2(d.ok, qPrintable(d.message));
        const auto t = panel->report();
        QVERIFY(t && t != v);
        QCOMPARE(t->text, text);
        QCOMPARE(t->report.segmentLength, 0);
        QCOMPARE(qint64(t->report.tokens.size()),
                 live->length);                   // the same tokens as the live session
        QVERIFY(t->report.recalled.size() >= 10); // the repeated sentence
        QCOMPARE(panel->recallModel()->rowCount(), int(t->report.recalled.size()));
        for (const auto& rc : t->report.recalled) {
            QVERIFY(rc.earlierPosition < rc.position);
            QVERIFY(rc.rank >= 1);
            QVERIFY(rc.probability >= 0 && rc.probability <= 1);
        }
        QVERIFY2(t->summary.contains(QStringLiteral("occurred earlier")), qPrintable(t->summary));

        // Bad input: an error naming the parameter; the shown report stays.
        ledger->request(req::Induction{QString(), 1, 1});
        d = waitDone(done);
        QCOMPARE(d.ok, false);
        QVERIFY2(d.message.contains(QStringLiteral("--length 1")), qPrintable(d.message));
        QCOMPARE(panel->report(), t);

        QDockWidget* dock = window.dock(QStringLiteral("dock.induction"));
        dock->raise();
        QTest::qWait(200);
        QVERIFY(
            dock->widget()->grab().save(screenshotDir() + QStringLiteral("/panel-induction.png")));
    }
};

QTEST_MAIN(TestGui)
#include "tst_gui.moc"
