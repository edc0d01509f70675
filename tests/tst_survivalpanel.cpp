// tst_survivalpanel: the Survival panel (widgets/panels/survivalpanel.h) on the bundled demo
// model, driven as a user would — panel -> LedgerController -> engine thread -> Workspace.
//
// - frontierFromSweepJson: the frontier groups a sweep's runs by policy in order and puts a
//   KL of 0 (the full state) at a floor a decade under the smallest positive KL.
// - guiMatchesCli: h2o at 25 % over 8 steps on a snapshot equals `kvscope-cli survive
//   <saved snapshot> --policy h2o --budget 0.25 -n 8 --json` (bytes kept, KL mean within
//   1e-9, first divergence, kept tokens); the compressed state is stored as a "survive" child
//   of its source; the strip strikes out exactly the evicted tokens; the live session
//   compresses too: as its parent snapshot when unchanged, else captured first (a "continue"
//   child), so the result always has a parent in the tree.
// - sweepFillsFrontier: a sweep draws one curve per policy of survivalPolicies(), plus the
//   current run's point.
// - refusalsShowMessages: compressing an already-evicted state, an unknown parameter and a
//   malformed one show their message in the panel; nothing is stored, nothing crashes; a
//   stopped sweep says so and leaves the frontier empty.
#include "guitest.h"

#include "mainwindow.h"

#include "enginecontroller.h"
#include "heatmapplot.h"
#include "ledgercontroller.h"
#include "survivalpanel.h"
#include "survivaltokenmodel.h"

#include "state/probes/survive.h"

#include <QCoreApplication>
#include <QDir>
#include <QDockWidget>
#include <QProcess>
#include <QScrollArea>
#include <QScrollBar>
#include <QWheelEvent>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <qcustomplot.h>

#include <nlohmann/json.hpp>

#include <set>

using namespace kvscope::widgets;
using guitest::waitDone;
using kvscope::gui::MainWindow;

namespace {

const QString kDemo = QStringLiteral(KVSCOPE_TESTS_DIR "/../resources/demo-model");

#define DONE_OK(spy)                                                                               \
    do {                                                                                           \
        const OperationResult r_ = waitDone(spy);                                                  \
        QVERIFY2(r_.ok, qPrintable(r_.kind + QStringLiteral(": ") + r_.message));                  \
    } while (0)

nlohmann::json cliJson(const QStringList& args, QString* err = nullptr) {
    QProcess p;
    p.start(QStringLiteral(KVSCOPE_CLI), args);
    p.waitForFinished(600000);
    if (err)
        *err = QString::fromLocal8Bit(p.readAllStandardError());
    return nlohmann::json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
}

const SnapshotNode* node(const LedgerController& ledger, const QString& id) {
    if (ledger.ledger())
        for (const auto& n : ledger.ledger()->nodes)
            if (n.id == id)
                return &n;
    return nullptr;
}

int nodeCount(const LedgerController& ledger) {
    return ledger.ledger() ? int(ledger.ledger()->nodes.size()) : 0;
}

// A window on the demo model with a greedy run and a snapshot of it.
struct Fixture {
    MainWindow window;
    QSignalSpy done{window.engine(), &EngineController::operationFinished};
    QString snapshot;
    LedgerController* ledger() { return window.ledger(); }
    SurvivalPanel* panel() { return window.survivalPanel(); }
};

} // namespace

class TestSurvivalPanel : public QObject {
    Q_OBJECT

    void open(Fixture& f) {
        if (!QFileInfo::exists(kDemo + QStringLiteral("/config.json")))
            QFAIL("the bundled demo model (resources/demo-model) was not found");
        f.window.resize(1366, 768);
        f.window.show();
        f.window.openPath(kDemo);
        DONE_OK(f.done);
        PromptRequest r;
        r.prompt.text = "Blessed is he that readeth, and they that hear the words";
        r.steps = 12;
        f.window.engine()->runPrompt(r);
        DONE_OK(f.done);
        f.ledger()->request(req::Snapshot{});
        const OperationResult s = waitDone(f.done);
        QVERIFY2(s.ok && !s.nodeId.isEmpty(), qPrintable(s.message));
        f.snapshot = s.nodeId;
    }

    // Runs the panel's Run; the typed completion.
    OperationResult runPanel(Fixture& f) {
        f.panel()->run();
        return waitDone(f.done);
    }

private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_survivalpanel"), true); }

    void frontierFromSweepJson() {
        const auto sweep = nlohmann::json::parse(R"({"results": [
            {"policy": "full", "budget": 1, "parameters": {}, "bytes_ratio": 1.0,
             "kl": {"mean": 0}},
            {"policy": "h2o", "budget": 0.25, "parameters": {}, "bytes_ratio": 0.26,
             "kl": {"mean": 0.5}},
            {"policy": "h2o", "budget": 0.5, "parameters": {}, "bytes_ratio": 0.51,
             "kl": {"mean": 0.02}},
            {"policy": "quant-kivi", "budget": 1, "parameters": {"bits": "4"},
             "bytes_ratio": 0.2, "kl": {"mean": 0.001}},
            {"policy": "h2o", "budget": 0.25, "parameters": {"allocation": "pyramid"},
             "bytes_ratio": 0.3, "kl": {"mean": 0.3}}]})");
        const Frontier f = Frontier::fromSweep(sweep);
        QCOMPARE(int(f.curves.size()), 4);
        QCOMPARE(f.curves[3].name, QStringLiteral("h2o pyramid"));
        QCOMPARE(f.curves[3].policy, QStringLiteral("h2o"));
        QCOMPARE(f.curves[3].allocation, QStringLiteral("pyramid"));
        QVERIFY(f.curves[1].allocation.isEmpty());
        QCOMPARE(f.curves[0].policy, QStringLiteral("full"));
        QCOMPARE(f.curves[1].policy, QStringLiteral("h2o"));
        QCOMPARE(f.curves[1].x, (QVector<double>{0.26, 0.51}));
        QCOMPARE(f.curves[1].labels, (QStringList{QStringLiteral("25 %"), QStringLiteral("50 %")}));
        QCOMPARE(f.curves[2].labels.front(), QStringLiteral("4 bits"));
        QCOMPARE(f.floor, 0.0001);
        QCOMPARE(f.curves[0].y.front(), 0.0001); // KL 0 drawn at the floor
        QCOMPARE(f.curves[0].kl.front(), 0.0);   // and reported as 0
        QVERIFY(f.curves[0].labels.front().contains(QStringLiteral("floor")));
        QCOMPARE(f.maxY, 0.5);
        const QString csv = Frontier::toCsv(sweep);
        QCOMPARE(csv.count(QLatin1Char('\n')), 6);
        QVERIFY(csv.startsWith(QStringLiteral("policy,allocation,run,")));
        QVERIFY(csv.contains(QStringLiteral("h2o,pyramid,25 %")));
    }

    void guiMatchesCli() {
        Fixture f;
        open(f);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("source.kvsnap"));
        f.ledger()->request(req::Save{f.snapshot, path});
        DONE_OK(f.done);

        SurvivalPanel* p = f.panel();
        p->setState(f.snapshot);
        QCOMPARE(p->stateId(), f.snapshot);
        QVERIFY(p->setPolicy(QStringLiteral("h2o")));
        p->setBudget(0.25);
        p->setSteps(8);
        const int before = nodeCount(*f.ledger());
        const OperationResult r = runPanel(f);
        QVERIFY2(r.ok, qPrintable(r.message));
        QCOMPARE(r.kind, QStringLiteral("survive"));
        QTRY_VERIFY(p->result() && p->result()->id == r.nodeId);
        const SurvivalViewPtr view = p->result();

        QString err;
        const nlohmann::json cli =
            cliJson({QStringLiteral("survive"), path, QStringLiteral("-m"), kDemo,
                     QStringLiteral("--policy"), QStringLiteral("h2o"), QStringLiteral("--budget"),
                     QStringLiteral("0.25"), QStringLiteral("-n"), QStringLiteral("8"),
                     QStringLiteral("--json")},
                    &err);
        QVERIFY2(cli.is_object(), qPrintable(err));
        const nlohmann::json& gui = view->json;
        QCOMPARE(gui["bytes_kept"].get<uint64_t>(), cli["bytes_kept"].get<uint64_t>());
        QCOMPARE(gui["bytes_full"].get<uint64_t>(), cli["bytes_full"].get<uint64_t>());
        const double klGui = gui["kl"]["mean"].get<double>(),
                     klCli = cli["kl"]["mean"].get<double>();
        qInfo("KL mean: GUI %.17g, CLI %.17g, |difference| %.3g", klGui, klCli,
              std::abs(klGui - klCli));
        QVERIFY(std::abs(klGui - klCli) <= 1e-9);
        QCOMPARE(gui["first_divergence"].get<int>(), cli["first_divergence"].get<int>());
        QCOMPARE(gui["kept_tokens"], cli["kept_tokens"]);
        QCOMPARE(gui["reference_tokens"], cli["reference_tokens"]);
        QVERIFY(gui["bytes_kept"].get<uint64_t>() < gui["bytes_full"].get<uint64_t>());

        // Stored, as a child of its source in the lineage.
        QTRY_COMPARE(nodeCount(*f.ledger()), before + 1);
        const SnapshotNode* made = node(*f.ledger(), r.nodeId);
        QVERIFY(made);
        QCOMPARE(made->operation, QStringLiteral("survive"));
        QCOMPARE(made->parentId, f.snapshot);
        QVERIFY(made->parent >= 0 &&
                f.ledger()->ledger()->nodes[size_t(made->parent)].id == f.snapshot);
        QVERIFY(p->summary().contains(r.nodeId.left(8)));
        QVERIFY(p->summary().contains(QStringLiteral("KL mean")));

        // The strip strikes out exactly the evicted tokens; the damage map is layers x tokens.
        const auto kept = cli["kept_tokens"].get<std::vector<int64_t>>();
        SurvivalTokenModel* tokens = p->tokenModel();
        QCOMPARE(tokens->rowCount(), int(view->tokens.size()));
        int dimmed = 0;
        for (int row = 0; row < tokens->rowCount(); ++row)
            dimmed += tokens->index(row, 0).data(TokenModel::DimmedRole).toBool();
        QCOMPARE(dimmed, tokens->rowCount() - int(kept.size()));
        QCOMPARE(p->damagePlot()->geometry().rows, 4);
        QCOMPARE(p->damagePlot()->geometry().columns, tokens->rowCount());
        // The continuations, the divergence marked when there is one.
        QCOMPARE(view->reference.size(), 8);
        if (view->result.firstDivergence >= 0)
            QVERIFY(p->continuationHtml().contains(QStringLiteral("#b00000")));
        // This run's point on the frontier.
        QVERIFY(p->frontierPlot()->graphCount() >= 1);

        // A pyramid allocation: the GUI's run equals the CLI's, head by head.
        QVERIFY(p->setAllocation(QStringLiteral("pyramid")));
        const OperationResult pyr = runPanel(f);
        QVERIFY2(pyr.ok, qPrintable(pyr.message));
        QTRY_VERIFY(p->result() && p->result()->id == pyr.nodeId);
        const nlohmann::json cliPyramid =
            cliJson({QStringLiteral("survive"), path, QStringLiteral("-m"), kDemo,
                     QStringLiteral("--policy"), QStringLiteral("h2o"), QStringLiteral("--budget"),
                     QStringLiteral("0.25"), QStringLiteral("--param"),
                     QStringLiteral("allocation=pyramid"), QStringLiteral("-n"),
                     QStringLiteral("8"), QStringLiteral("--json")},
                    &err);
        QVERIFY2(cliPyramid.is_object(), qPrintable(err));
        const nlohmann::json& guiPyramid = p->result()->json;
        QCOMPARE(guiPyramid["kept_per_head"], cliPyramid["kept_per_head"]);
        QCOMPARE(guiPyramid["kept_tokens"], cliPyramid["kept_tokens"]);
        QCOMPARE(guiPyramid["bytes_kept"], cliPyramid["bytes_kept"]);
        QVERIFY(std::abs(guiPyramid["kl"]["mean"].get<double>() -
                         cliPyramid["kl"]["mean"].get<double>()) <= 1e-9);
        QVERIFY(p->summary().contains(QStringLiteral("per head")));
        QVERIFY(p->setAllocation(QStringLiteral("uniform")));

        // The live session as it was snapshotted: compressed as that snapshot (no second copy).
        p->setState(QString());
        p->setPolicy(QStringLiteral("quant-kivi"));
        p->setBits(4);
        int n = nodeCount(*f.ledger());
        const OperationResult live = runPanel(f);
        QVERIFY2(live.ok, qPrintable(live.message));
        QTRY_COMPARE(nodeCount(*f.ledger()), n + 1);
        const SnapshotNode* quant = node(*f.ledger(), live.nodeId);
        QVERIFY(quant && quant->operation == QStringLiteral("survive"));
        QCOMPARE(quant->parentId, f.snapshot);
        QCOMPARE(p->result()->json["parameters"]["bits"], nlohmann::json("4"));

        // After generating more: captured into the store ("continue" of the snapshot), then
        // compressed as its child.
        f.window.engine()->generate(3, kvscope::SamplerSettings{});
        DONE_OK(f.done);
        n = nodeCount(*f.ledger());
        const OperationResult grown = runPanel(f);
        QVERIFY2(grown.ok, qPrintable(grown.message));
        QTRY_COMPARE(nodeCount(*f.ledger()), n + 2);
        const SnapshotNode* q2 = node(*f.ledger(), grown.nodeId);
        QVERIFY(q2 && q2->operation == QStringLiteral("survive"));
        const SnapshotNode* capture = node(*f.ledger(), q2->parentId);
        QVERIFY(capture);
        QCOMPARE(capture->operation, QStringLiteral("continue"));
        QCOMPARE(capture->parentId, f.snapshot);
        QCOMPARE(p->result()->sourceId, capture->id);

        QTest::qWait(200);
        QDir().mkpath(QStringLiteral(KVSCOPE_BINARY_DIR "/screenshots"));
        f.window.dock(QStringLiteral("dock.survival"))->raise();
        QTest::qWait(200);
        QVERIFY(f.window.grab().save(
            QStringLiteral(KVSCOPE_BINARY_DIR "/screenshots/survival-run.png")));
    }

    // The damage map sits in the panel's scroll area: the plain wheel scrolls the panel (it
    // zoomed the map) and leaves the map's view alone; Ctrl+wheel is the map's.
    void wheelScrollsThePanel() {
        Fixture f;
        open(f);
        SurvivalPanel* p = f.panel();
        p->setState(f.snapshot);
        QVERIFY(p->setPolicy(QStringLiteral("h2o")));
        p->setBudget(0.25);
        p->setSteps(4);
        const OperationResult r = runPanel(f);
        QVERIFY2(r.ok, qPrintable(r.message));
        QTRY_VERIFY(p->result());
        HeatmapPlot* map = p->damagePlot();
        QVERIFY(!map->isEmpty());
        QScrollArea* scroll = nullptr;
        for (QWidget* w = map; w && !scroll; w = w->parentWidget())
            scroll = qobject_cast<QScrollArea*>(w);
        QVERIFY(scroll);
        for (QDockWidget* d : f.window.docks())
            if (d->objectName() == QStringLiteral("dock.survival")) {
                d->setFloating(true);
                d->resize(420, 260); // small enough to scroll
                d->show();
            }
        QTRY_VERIFY(scroll->verticalScrollBar()->maximum() > 0);
        scroll->verticalScrollBar()->setValue(0);
        QCustomPlot* plot = map->plot();
        const QCPRange before = plot->xAxis->range();
        const QPointF at(plot->width() / 2.0, plot->height() / 2.0);
        auto wheel = [&](Qt::KeyboardModifiers mods) {
            QWheelEvent e(at, plot->mapToGlobal(at), QPoint(), QPoint(0, -120), Qt::NoButton, mods,
                          Qt::NoScrollPhase, false);
            QCoreApplication::sendEvent(plot, &e);
        };
        wheel(Qt::NoModifier);
        QVERIFY(scroll->verticalScrollBar()->value() > 0);
        QCOMPARE(plot->xAxis->range().lower, before.lower);
        QCOMPARE(plot->xAxis->range().upper, before.upper);
        const int scrolled = scroll->verticalScrollBar()->value();
        wheel(Qt::ControlModifier); // left to the plot (its zoom): the panel does not move
        QCOMPARE(scroll->verticalScrollBar()->value(), scrolled);
        // The frontier has no zoom: the wheel over it scrolls the panel too (QCustomPlot
        // accepted the event, so the panel stood still under the mouse).
        scroll->verticalScrollBar()->setValue(0);
        QCustomPlot* frontier = p->frontierPlot();
        const QPointF mid(frontier->width() / 2.0, frontier->height() / 2.0);
        QWheelEvent e(mid, frontier->mapToGlobal(mid), QPoint(), QPoint(0, -120), Qt::NoButton,
                      Qt::NoModifier, Qt::NoScrollPhase, false);
        QCoreApplication::sendEvent(frontier, &e);
        QVERIFY(scroll->verticalScrollBar()->value() > 0);
    }

    void sweepFillsFrontier() {
        Fixture f;
        open(f);
        SurvivalPanel* p = f.panel();
        p->setState(f.snapshot);
        p->setSteps(4);
        QSignalSpy progress(f.window.engine(), &EngineController::progress);
        p->sweep();
        const OperationResult r = waitDone(f.done, 600000);
        QVERIFY2(r.ok, qPrintable(r.message));
        QCOMPARE(r.kind, QStringLiteral("survival-sweep"));
        QTRY_VERIFY(p->sweepResult());
        QVERIFY(!progress.isEmpty());

        std::set<QString> policies;
        for (const auto& name : kvscope::state::survivalPolicies())
            policies.insert(QString::fromStdString(name));
        const Frontier& fr = p->frontier();
        // One curve per policy, and one per non-uniform allocation of the four policies whose
        // scores differ per head.
        const int curves = int(policies.size()) + 4 * 2;
        QCOMPARE(int(fr.curves.size()), curves);
        std::set<QString> names;
        for (const FrontierCurve& c : fr.curves) {
            QVERIFY2(policies.count(c.policy), qPrintable(c.policy));
            QVERIFY(c.allocation.isEmpty() || c.allocation == QStringLiteral("pyramid") ||
                    c.allocation == QStringLiteral("head-adaptive"));
            names.insert(c.name);
            QVERIFY(!c.x.isEmpty());
            for (double y : c.y)
                QVERIFY(y > 0); // drawable on the log axis
        }
        QCOMPARE(int(names.size()), curves);
        QCustomPlot* plot = p->frontierPlot();
        QCOMPARE(plot->graphCount(), curves);
        for (int i = 0; i < plot->graphCount(); ++i)
            QCOMPARE(plot->graph(i)->name(), fr.curves[size_t(i)].name);
        QCOMPARE(plot->yAxis->scaleType(), QCPAxis::stLogarithmic);

        // A run afterwards adds its marked point on top of the curves.
        p->setPolicy(QStringLiteral("sink-window"));
        p->setBudget(0.5);
        const OperationResult run = runPanel(f);
        QVERIFY2(run.ok, qPrintable(run.message));
        QTRY_COMPARE(plot->graphCount(), curves + 1);

        f.window.dock(QStringLiteral("dock.survival"))->raise();
        QTest::qWait(300);
        QVERIFY(f.window.grab().save(
            QStringLiteral(KVSCOPE_BINARY_DIR "/screenshots/survival-sweep.png")));
    }

    void refusalsShowMessages() {
        Fixture f;
        open(f);
        SurvivalPanel* p = f.panel();
        p->setState(f.snapshot);
        p->setPolicy(QStringLiteral("h2o"));
        p->setBudget(0.5);
        p->setSteps(4);
        const OperationResult first = runPanel(f);
        QVERIFY2(first.ok, qPrintable(first.message));
        QTRY_VERIFY(node(*f.ledger(), first.nodeId));

        // Compressing the evicted state again: core refuses, the panel says why.
        p->setState(first.nodeId);
        QCOMPARE(p->stateId(), first.nodeId);
        const int n = nodeCount(*f.ledger());
        const OperationResult again = runPanel(f);
        QVERIFY(!again.ok);
        qInfo("refused: %s", qPrintable(again.message));
        QCOMPARE(again.kind, QStringLiteral("survive"));
        QVERIFY(!again.message.isEmpty());
        QTRY_VERIFY(p->summary().contains(again.message.toHtmlEscaped()));
        QVERIFY(p->summary().contains(QStringLiteral("#c00000")));
        QCOMPARE(nodeCount(*f.ledger()), n);
        QCOMPARE(p->result()->id, first.nodeId); // the last good result stays

        // An unknown parameter: refused by name.
        p->setState(f.snapshot);
        p->setParameters(QStringLiteral("nonsense=3"));
        const OperationResult unknown = runPanel(f);
        QVERIFY(!unknown.ok);
        QVERIFY2(unknown.message.contains(QStringLiteral("nonsense")), qPrintable(unknown.message));
        QTRY_VERIFY(p->summary().contains(QStringLiteral("nonsense")));

        // A malformed one never reaches the engine.
        p->setParameters(QStringLiteral("sinks"));
        p->run();
        QVERIFY(p->summary().contains(QStringLiteral("not name=value")));
        QVERIFY(!f.window.engine()->isBusy());
        QTest::qWait(100);
        QVERIFY(f.done.isEmpty());
        QCOMPARE(nodeCount(*f.ledger()), n);

        // A sweep stopped at once: a message, no frontier, the panel still usable.
        p->setParameters(QString());
        p->sweep();
        f.window.engine()->stop();
        const OperationResult stopped = waitDone(f.done);
        QVERIFY(!stopped.ok);
        QCOMPARE(stopped.kind, QStringLiteral("survival-sweep"));
        QVERIFY2(stopped.message.contains(QStringLiteral("stopped")), qPrintable(stopped.message));
        QTRY_VERIFY(p->summary().contains(QStringLiteral("stopped")));
        QVERIFY(!p->sweepResult());
        QVERIFY(p->frontier().curves.empty());
        const OperationResult after = runPanel(f);
        QVERIFY2(after.ok, qPrintable(after.message));
    }
};

QTEST_MAIN(TestSurvivalPanel)
#include "tst_survivalpanel.moc"
