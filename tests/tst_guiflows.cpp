// tst_guiflows: the main window as a user drives it, held against the CLI (label `model`).
//
// - guiMatchesCli: the verdict the Validation panel shows, the Diff panel's report and the
//   Logit drift panel's result (or its refusal) equal `kvscope-cli verify|diff|drift --json`
//   for the same files — a clean snapshot, every fault of the lab, a fork pair and a
//   truncation, each against the clean state; the fork pair against each other.
// - restoreRefusesStructuralMismatch: another model's snapshot restored with "force" is a
//   refusal naming the violation (it used to crash the app), and the real dialog offers no
//   "Restore anyway"; a semantic error offers it, never as the default button.
// - lineageRules: fresh run -> root; restore + continue -> child; model switch -> new root.
// - newUserFlow: at 1366x768 (a child process on an offscreen screen of that size): first
//   launch, run, step, generate, snapshot, fork, truncate, fault + restore attempt, diff and
//   the tour, asserting each panel's state and writing screenshots.
#include "screenchild.h"
#include "guitest.h"
#include "testdata.h"

#include "mainwindow.h"

#include "diffpanel.h"
#include "driftpanel.h"
#include "enginecontroller.h"
#include "ledgercontroller.h"
#include "selection.h"
#include "sessionpanel.h"
#include "snapshotpanel.h"
#include "snapshottreemodel.h"
#include "tokenstrip.h"
#include "tour.h"
#include "util/demomodel.h"
#include "validationpanel.h"
#include "violationmodel.h"

#include <QApplication>
#include <QDir>
#include <QLabel>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QMenu>
#include <QMessageBox>
#include <QProcess>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QCheckBox>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>
#include <QTimer>
#include <QTreeView>

#include <nlohmann/json.hpp>

using namespace kvscope::widgets;
using guitest::waitDone;
using kvscope::gui::MainWindow;

namespace {

const QString kModel = QStringLiteral("models/stories260K/stories260K.bin");
const QString kOther = QStringLiteral("models/aidreams260K/aidreams260K.bin");

#define DONE_OK(spy)                                                                               \
    do {                                                                                           \
        const OperationResult r_ = waitDone(spy);                                                  \
        QVERIFY2(r_.ok, qPrintable(r_.kind + QStringLiteral(": ") + r_.message));                  \
    } while (0)

nlohmann::json cliJson(const QStringList& args) {
    QProcess p;
    p.start(QStringLiteral(KVSCOPE_CLI), args);
    p.waitForFinished(600000);
    return nlohmann::json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
}

QStringList modelArgs() {
    return {QStringLiteral("-m"), QString::fromStdString(testdata::path(kModel))};
}

using guitest::screenshotDir;

// The ids of the ledger's nodes, in creation order.
QStringList nodeIds(const LedgerController& ledger) {
    QStringList ids;
    if (ledger.ledger())
        for (const auto& n : ledger.ledger()->nodes)
            ids << n.id;
    return ids;
}

const SnapshotNode* node(const LedgerController& ledger, const QString& id) {
    if (ledger.ledger())
        for (const auto& n : ledger.ledger()->nodes)
            if (n.id == id)
                return &n;
    return nullptr;
}

// A window with the model open and a greedy run of `steps` tokens after `prompt`.
struct Session {
    MainWindow window;
    QSignalSpy done{window.engine(), &EngineController::operationFinished};
    LedgerController* ledger() { return window.ledger(); }
};

} // namespace

class TestGuiFlows : public QObject {
    Q_OBJECT

    // Loads `model` into `s` and runs `prompt` (greedy, `steps` tokens).
    void openAndRun(Session& s, const QString& model, const QString& prompt, int steps) {
        s.window.openPath(QString::fromStdString(testdata::path(model)));
        DONE_OK(s.done);
        PromptRequest r;
        r.text = prompt;
        r.steps = steps;
        s.window.engine()->runPrompt(r);
        DONE_OK(s.done);
    }

    QString snapshot(Session& s) {
        s.ledger()->snapshot();
        const OperationResult r = waitDone(s.done);
        if (!r.ok || r.nodeId.isEmpty())
            qWarning("snapshot failed: %s", qPrintable(r.message));
        return r.nodeId;
    }

private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_guiflows"), true); }

    void guiMatchesCli() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 12);
        const QString clean = snapshot(s);
        QVERIFY(!clean.isEmpty());
        QTemporaryDir dir;
        auto save = [&](const QString& id) {
            const QString path = dir.filePath(id + QStringLiteral(".kvsnap"));
            s.ledger()->save(id, path);
            const OperationResult r = waitDone(s.done);
            return r.ok ? path : QString();
        };
        const QString cleanPath = save(clean);
        QVERIFY(!cleanPath.isEmpty());

        // Every fault of the lab, through the Fault menu's action.
        QStringList states{clean};
        for (QAction* a : s.window.snapshotPanel()->faultMenu()->actions()) {
            s.window.snapshotPanel()->selectId(clean);
            a->trigger();
            const OperationResult r = waitDone(s.done);
            QVERIFY2(r.ok && !r.nodeId.isEmpty(), qPrintable(a->text() + ": " + r.message));
            states << r.nodeId;
        }
        QCOMPARE(states.size(), 11);

        // A fork pair and a truncation.
        s.window.snapshotPanel()->selectId(clean);
        s.window.snapshotPanel()->forkSelected(2, 6);
        const OperationResult f = waitDone(s.done);
        QVERIFY2(f.ok, qPrintable(f.message));
        const QStringList all = nodeIds(*s.ledger());
        const QString forkA = all.at(all.size() - 2), forkB = all.at(all.size() - 1);
        QCOMPARE(node(*s.ledger(), forkA)->operation, QStringLiteral("fork"));
        s.window.selection()->setPosition(8);
        s.window.snapshotPanel()->truncateAtSelection();
        const OperationResult t = waitDone(s.done);
        QVERIFY2(t.ok, qPrintable(t.message));
        states << forkA << forkB << t.nodeId;

        QSignalSpy reports(s.ledger(), &LedgerController::validationReady);
        for (const QString& id : states) {
            const QString path = save(id);
            QVERIFY(!path.isEmpty());
            const QString what = node(*s.ledger(), id)->operation + QStringLiteral(" ") +
                                 node(*s.ledger(), id)->parameters;
            // The verdict the Validation panel shows.
            s.ledger()->verifyNode(id);
            QTRY_VERIFY(
                s.window.validationPanel()->model()->report() &&
                s.window.validationPanel()->model()->report()->subject.contains(id.left(8)));
            const nlohmann::json gui = s.window.validationPanel()->model()->report()->json;
            const nlohmann::json cli =
                cliJson(QStringList{QStringLiteral("verify"), path, QStringLiteral("--json")} +
                        modelArgs());
            QVERIFY2(gui == cli, qPrintable(what + "\ngui " + QString::fromStdString(gui.dump()) +
                                            "\ncli " + QString::fromStdString(cli.dump())));
            // The Diff panel's report against the clean state.
            s.window.diffPanel()->setStates(clean, id);
            s.window.diffPanel()->compare();
            DONE_OK(s.done);
            const nlohmann::json guiDiff = s.window.diffPanel()->diff()->report.toJson();
            const nlohmann::json cliDiff =
                cliJson({QStringLiteral("diff"), cleanPath, path, QStringLiteral("--json")});
            QVERIFY2(guiDiff == cliDiff, qPrintable(what));
            // The drift panel against the clean state (16 steps), or the same refusal: a state
            // with a structural violation cannot be continued by either.
            if (id == clean)
                continue;
            s.window.driftPanel()->setStates(clean, id);
            s.window.driftPanel()->run();
            const OperationResult dr = waitDone(s.done);
            QProcess p;
            p.start(QStringLiteral(KVSCOPE_CLI),
                    QStringList{QStringLiteral("drift"), cleanPath, path, QStringLiteral("-n"),
                                QStringLiteral("32"), QStringLiteral("--force"),
                                QStringLiteral("--json")} +
                        modelArgs());
            p.waitForFinished(600000);
            if (dr.ok) {
                QCOMPARE(p.exitCode(), 0);
                const auto cliDrift =
                    nlohmann::json::parse(p.readAllStandardOutput().toStdString());
                QVERIFY2(s.window.driftPanel()->drift()->json == cliDrift, qPrintable(what));
            } else {
                QCOMPARE(p.exitCode(), 1);
                const QString err = QString::fromUtf8(p.readAllStandardError()).trimmed();
                QVERIFY2(err == QStringLiteral("kvscope-cli: ") + dr.message,
                         qPrintable(what + "\ngui " + dr.message + "\ncli " + err));
                QVERIFY2(dr.message.contains(QStringLiteral("cannot be forced")),
                         qPrintable(dr.message));
            }
        }

        // The drift panel between the two forks, forced like the GUI always is.
        s.window.driftPanel()->setStates(forkA, forkB);
        s.window.driftPanel()->run();
        DONE_OK(s.done);
        const nlohmann::json guiDrift = s.window.driftPanel()->drift()->json;
        const nlohmann::json cliDrift = cliJson(
            QStringList{QStringLiteral("drift"), dir.filePath(forkA + ".kvsnap"),
                        dir.filePath(forkB + ".kvsnap"), QStringLiteral("-n"), QStringLiteral("32"),
                        QStringLiteral("--force"), QStringLiteral("--json")} +
            modelArgs());
        QVERIFY2(guiDrift == cliDrift, qPrintable(QString::fromStdString(guiDrift.dump()) + "\n" +
                                                  QString::fromStdString(cliDrift.dump())));

        // The position offset: the Diff panel says so (it used to call it identical).
        const QString offset = states.at(1 + [] {
            int i = 0;
            for (const auto& f : kvscope::state::allFaults()) {
                if (f.name == "position-offset")
                    return i;
                ++i;
            }
            return -1;
        }());
        s.window.diffPanel()->setStates(clean, offset);
        s.window.diffPanel()->compare();
        DONE_OK(s.done);
        const auto dv = s.window.diffPanel()->diff();
        QVERIFY(dv->report.positions.offset && *dv->report.positions.offset == 1);
        QVERIFY(!dv->report.identicalState());
        QCOMPARE(s.window.diffPanel()->firstDivergence(), qint64(0));
        QCOMPARE(s.window.selection()->position(), qint64(0));

        // Ctrl+D: the selected snapshot against the live session (not the live one twice).
        s.window.snapshotPanel()->selectId(offset);
        QAction* driftAction = nullptr;
        for (QAction* a : s.window.findChildren<QAction*>())
            if (a->shortcut() == QKeySequence(QStringLiteral("Ctrl+D")))
                driftAction = a;
        QVERIFY(driftAction);
        driftAction->trigger();
        DONE_OK(s.done);
        QCOMPARE(s.window.driftPanel()->drift()->labelA,
                 QStringLiteral("fault %1").arg(offset.left(8)));
        QCOMPARE(s.window.driftPanel()->drift()->labelB, QStringLiteral("live session"));
        // The pickers name what is shown, also when the request came from elsewhere.
        QCOMPARE(s.window.driftPanel()->pickedA(), offset);
        QCOMPARE(s.window.driftPanel()->pickedB(), QString());
        s.ledger()->diff(forkA, forkB);
        DONE_OK(s.done);
        QCOMPARE(s.window.diffPanel()->pickedA(), forkA);
        QCOMPARE(s.window.diffPanel()->pickedB(), forkB);
    }

    // A llama.cpp state opened like a snapshot (File > Open, drag and drop, the command line):
    // stored as an import node labelled with its source, the Validation panel's verdict equal
    // to `kvscope-cli verify FILE.ggsq --json`, restored and continued exactly as llama.cpp did.
    void openLlamaCppState() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        const QString ggsq = QStringLiteral("llamacpp/stories260K/tim-dog.ggsq");
        const QString gguf = QStringLiteral("models/stories260K/stories260K.gguf");
        KVSCOPE_REQUIRE_DATA(ggsq);
        KVSCOPE_REQUIRE_DATA(gguf);
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        s.window.openPath(QString::fromStdString(testdata::path(gguf)));
        DONE_OK(s.done);
        QTRY_VERIFY(!s.window.engine()->isBusy());
        const QString path = QString::fromStdString(testdata::path(ggsq));
        s.window.openPath(path);
        const OperationResult opened = waitDone(s.done);
        QVERIFY2(opened.ok && !opened.nodeId.isEmpty(), qPrintable(opened.message));
        const SnapshotNode* n = node(*s.ledger(), opened.nodeId);
        QVERIFY(n);
        QCOMPARE(n->operation, QStringLiteral("import"));
        QCOMPARE(n->tokens, 21);
        auto* tree = s.window.findChild<QTreeView*>();
        QVERIFY(tree);
        bool labelled = false;
        for (int r = 0; r < tree->model()->rowCount(); ++r)
            labelled = labelled || tree->model()->index(r, 0).data().toString().startsWith(
                                       QStringLiteral("import ← llama.cpp ggsq"));
        QVERIFY(labelled);

        QTRY_VERIFY(s.window.validationPanel()->model()->report() &&
                    s.window.validationPanel()->model()->report()->subject.contains(
                        QStringLiteral("tim-dog.ggsq")));
        const nlohmann::json gui = s.window.validationPanel()->model()->report()->json;
        const nlohmann::json cli =
            cliJson({QStringLiteral("verify"), path, QStringLiteral("--json"), QStringLiteral("-m"),
                     QString::fromStdString(testdata::path(gguf))});
        QVERIFY2(gui["violations"] == cli["violations"] && gui["ok"] == cli["ok"],
                 qPrintable("gui " + QString::fromStdString(gui.dump()) + "\ncli " +
                            QString::fromStdString(cli.dump())));

        s.window.snapshotPanel()->setRestoreConfirmation([](const ValidationView&) { return 1; });
        s.window.snapshotPanel()->selectId(opened.nodeId);
        s.window.snapshotPanel()->restoreSelected();
        DONE_OK(s.done);
        s.window.engine()->generate(4, SamplerOptions{});
        DONE_OK(s.done);
        QTRY_VERIFY(s.window.engine()->state() && s.window.engine()->state()->tokens.size() == 25);
        std::vector<int32_t> tail;
        for (std::size_t i = 21; i < 25; ++i)
            tail.push_back(s.window.engine()->state()->tokens[i].id);
        // llama.cpp's pending token and the first three of its continuation.
        QCOMPARE(tail, (std::vector<int32_t>{346, 391, 266, 267}));

        // The same state as Hugging Face past_key_values (the panel's safetensors export) opens
        // the same way, with the CLI's verdict.
        QTemporaryDir dir;
        const QString st = dir.filePath(QStringLiteral("pkv.safetensors"));
        s.ledger()->exportSafetensors(opened.nodeId, st);
        DONE_OK(s.done);
        s.window.openPath(st);
        const OperationResult hf = waitDone(s.done);
        QVERIFY2(hf.ok && !hf.nodeId.isEmpty(), qPrintable(hf.message));
        QCOMPARE(node(*s.ledger(), hf.nodeId)->operation, QStringLiteral("import"));
        QTRY_VERIFY(s.window.validationPanel()->model()->report() &&
                    s.window.validationPanel()->model()->report()->subject.contains(
                        QStringLiteral("pkv.safetensors")));
        const nlohmann::json guiHf = s.window.validationPanel()->model()->report()->json;
        const nlohmann::json cliHf =
            cliJson({QStringLiteral("verify"), st, QStringLiteral("--json"), QStringLiteral("-m"),
                     QString::fromStdString(testdata::path(gguf))});
        QVERIFY2(guiHf["violations"] == cliHf["violations"] && guiHf["ok"] == cliHf["ok"],
                 qPrintable("gui " + QString::fromStdString(guiHf.dump()) + "\ncli " +
                            QString::fromStdString(cliHf.dump())));
    }

    void restoreRefusesStructuralMismatch() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        KVSCOPE_REQUIRE_DATA(kModel);
        KVSCOPE_REQUIRE_DATA(kOther);
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 40);
        const QString id = snapshot(s);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("stories.kvsnap"));
        s.ledger()->save(id, path);
        DONE_OK(s.done);
        // A fault that can be forced (semantic): the real dialog shows the verdict inline,
        // offers "Restore anyway", and its default button is not that.
        s.window.snapshotPanel()->selectId(id);
        s.window.snapshotPanel()->injectFault(QStringLiteral("position-offset"));
        const OperationResult fault = waitDone(s.done);
        QVERIFY(fault.ok);
        QString dialogText, defaultButton;
        QStringList buttons;
        auto inspect = [&] {
            auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
            if (!box)
                return;
            dialogText = box->text() + box->detailedText();
            QVERIFY(box->detailedText().isEmpty()); // inline, not behind "Show Details"
            for (QAbstractButton* b : box->buttons())
                buttons << b->text();
            defaultButton = box->defaultButton() ? box->defaultButton()->text() : QString();
            box->reject();
        };
        s.window.snapshotPanel()->setRestoreConfirmation({}); // the real dialog
        s.window.snapshotPanel()->selectId(fault.nodeId);
        QTimer::singleShot(0, &s.window, [] {}); // keep the loop turning
        QTimer poll;
        QObject::connect(&poll, &QTimer::timeout, &s.window, inspect);
        poll.start(50);
        s.window.snapshotPanel()->restoreSelected();
        QTRY_VERIFY_WITH_TIMEOUT(!buttons.isEmpty(), 30000);
        poll.stop();
        QVERIFY2(dialogText.contains(QStringLiteral("positions.offset")), qPrintable(dialogText));
        QVERIFY2(buttons.contains(QStringLiteral("Restore anyway")), qPrintable(buttons.join(",")));
        QVERIFY2(defaultButton != QStringLiteral("Restore anyway"), qPrintable(defaultButton));

        // Another geometry (aidreams260K: 4 layers MHA), the stories snapshot opened and
        // restored with "Restore anyway" forced by the test: refused, named, the app alive.
        s.window.openPath(QString::fromStdString(testdata::path(kOther)));
        DONE_OK(s.done);
        s.ledger()->openFile(path);
        waitDone(s.done); // opened (its verdict names the mismatch)
        s.window.snapshotPanel()->selectId(id);
        buttons.clear();
        poll.start(50);
        s.window.snapshotPanel()->restoreSelected();
        QTRY_VERIFY_WITH_TIMEOUT(!buttons.isEmpty(), 30000);
        poll.stop();
        QVERIFY2(!buttons.contains(QStringLiteral("Restore anyway")),
                 qPrintable(buttons.join(",")));
        QVERIFY2(dialogText.contains(QStringLiteral("cache.shape")), qPrintable(dialogText));
        int asked = 0;
        bool forceable = true;
        s.window.snapshotPanel()->setRestoreConfirmation([&](const ValidationView& v) {
            ++asked;
            forceable = v.report.forceable();
            return 2; // what a click on a (never offered) "Restore anyway" would ask
        });
        s.window.snapshotPanel()->restoreSelected();
        const OperationResult r = waitDone(s.done);
        QCOMPARE(asked, 1);
        QVERIFY(!forceable);
        QCOMPARE(r.kind, QStringLiteral("restore"));
        QVERIFY(!r.ok);
        QVERIFY2(r.message.contains(QStringLiteral("cache.shape")) &&
                     r.message.contains(QStringLiteral("cannot be forced")),
                 qPrintable(r.message));
        // The engine still works on the new model.
        PromptRequest p;
        p.text = QStringLiteral("Once upon a time");
        p.steps = 4;
        s.window.engine()->runPrompt(p);
        DONE_OK(s.done);
        QCOMPARE(s.window.engine()->model().layers, 4);
    }

    void lineageRules() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        KVSCOPE_REQUIRE_DATA(kModel);
        KVSCOPE_REQUIRE_DATA(kOther);
        Session s;
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 6);
        const QString a = snapshot(s);
        QVERIFY(node(*s.ledger(), a)->parentId.isEmpty()); // fresh run: a root
        // A truncation, then a fresh run: the next capture is a root, not the truncation's
        // child (the GUI used to attach it to whatever was restored or truncated last).
        s.window.selection()->setPosition(4);
        s.window.snapshotPanel()->truncateAtSelection();
        const OperationResult t = waitDone(s.done);
        QVERIFY(t.ok);
        QCOMPARE(node(*s.ledger(), t.nodeId)->parentId, a);
        PromptRequest r;
        r.text = QStringLiteral("The little dog");
        r.steps = 4;
        s.window.engine()->runPrompt(r);
        DONE_OK(s.done);
        const QString b = snapshot(s);
        QVERIFY(node(*s.ledger(), b)->parentId.isEmpty());
        QVERIFY(s.ledger()->ledger()->currentId == b);
        // Restore A, continue, capture: a child of A, the continuation recorded.
        s.window.snapshotPanel()->setRestoreConfirmation([](const ValidationView&) { return 1; });
        s.window.snapshotPanel()->selectId(a);
        s.window.snapshotPanel()->restoreSelected();
        DONE_OK(s.done);
        s.window.engine()->generate(3, {});
        DONE_OK(s.done);
        const QString c = snapshot(s);
        QCOMPARE(node(*s.ledger(), c)->parentId, a);
        QCOMPARE(node(*s.ledger(), c)->operation, QStringLiteral("continue"));
        const QModelIndex ci = s.window.snapshotPanel()->model()->indexOf(c);
        QCOMPARE(s.window.snapshotPanel()->model()->parent(ci),
                 s.window.snapshotPanel()->model()->indexOf(a));
        // Another model: a new root, although A was the last restored node.
        openAndRun(s, kOther, QStringLiteral("Once upon a time"), 4);
        QVERIFY(s.ledger()->ledger()->currentId.isEmpty());
        const QString d = snapshot(s);
        QVERIFY(node(*s.ledger(), d)->parentId.isEmpty());
        QVERIFY(!s.window.snapshotPanel()
                     ->model()
                     ->parent(s.window.snapshotPanel()->model()->indexOf(d))
                     .isValid());
    }

    void newUserFlow() {
        KVSCOPE_REQUIRE_DATA(kModel);
        const QSize screen(1366, 768);
        if (QGuiApplication::primaryScreen()->size() != screen) {
            QVERIFY2(!testscreen::inChild(), "the child's screen does not have the size asked for");
            const auto child = testscreen::runOnScreen(screen, QStringLiteral("newUserFlow"));
            QVERIFY2(child.ok, qPrintable(child.output.right(4000)));
            QVERIFY2(child.output.contains(QStringLiteral("PASS   : TestGuiFlows::newUserFlow()")),
                     qPrintable(child.output.right(2000)));
            return;
        }
        const QString shots = screenshotDir() + QStringLiteral("/flow-1366x768-");
        const QRect available = QGuiApplication::primaryScreen()->availableGeometry();
        MainWindow window;
        window.restoreLayout();
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto fits = [&] {
            const QSize minimum = window.minimumSizeHint().expandedTo(window.minimumSize());
            return available.contains(window.frameGeometry()) &&
                   minimum.width() <= available.width() && minimum.height() <= available.height();
        };
        QVERIFY2(fits(), "the first window does not fit 1366x768");
        QVERIFY(window.grab().save(shots + QStringLiteral("01-first-launch.png")));
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        auto* ledger = window.ledger();

        // Run.
        window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(done);
        window.sessionPanel()->setPromptText(QStringLiteral("Once upon a time"));
        window.sessionPanel()->runPrompt();
        DONE_OK(done);
        QCOMPARE(window.engine()->state()->length, 37);
        QTRY_VERIFY(ledger->liveValidation() &&
                    ledger->liveValidation()->worst() < SeverityRank::Warning);
        QVERIFY(window.grab().save(shots + QStringLiteral("02-run.png")));
        // Step and generate.
        window.engine()->step({});
        DONE_OK(done);
        QCOMPARE(window.engine()->state()->length, 38);
        window.engine()->generate(4, {});
        DONE_OK(done);
        QCOMPARE(window.engine()->state()->length, 42);
        // Snapshot: a root in the tree.
        window.snapshotPanel()->takeSnapshot();
        DONE_OK(done);
        QTRY_COMPARE(window.snapshotPanel()->model()->rowCount(), 1);
        const QString first = ledger->ledger()->nodes.front().id;
        // Fork two branches of 8 tokens each: children of the snapshot.
        window.snapshotPanel()->selectId(first);
        window.snapshotPanel()->forkSelected(2, 8);
        DONE_OK(done);
        QTRY_COMPARE(window.snapshotPanel()->model()->rowCount(
                         window.snapshotPanel()->model()->indexOf(first)),
                     2);
        QVERIFY(window.grab().save(shots + QStringLiteral("03-fork.png")));
        // Truncate the live session at the selected position.
        window.selection()->setPosition(20);
        window.snapshotPanel()->truncateAtSelection();
        DONE_OK(done);
        QCOMPARE(window.engine()->state()->length, 20);
        QTRY_VERIFY(ledger->liveValidation() &&
                    ledger->liveValidation()->worst() < SeverityRank::Warning);
        // A fault, and an attempt to restore it: the verdict names it; the user cancels.
        window.snapshotPanel()->selectId(first);
        window.snapshotPanel()->injectFault(QStringLiteral("position-offset"));
        const OperationResult fault = waitDone(done);
        QVERIFY2(fault.ok, qPrintable(fault.message));
        QTRY_VERIFY(window.validationPanel()->model()->report() &&
                    window.validationPanel()->model()->report()->report.has("positions.offset"));
        const nlohmann::json panelVerdict = window.validationPanel()->model()->report()->json;
        int asked = 0;
        bool sameVerdict = false;
        window.snapshotPanel()->setRestoreConfirmation([&](const ValidationView& v) {
            ++asked;
            sameVerdict = v.json == panelVerdict; // the dialog's verdict is the panel's
            return 0;
        });
        window.snapshotPanel()->selectId(fault.nodeId);
        window.snapshotPanel()->restoreSelected();
        QTRY_COMPARE(asked, 1);
        QVERIFY(sameVerdict);
        // The Validation panel still shows the fault's verdict (no live re-check replaced it).
        QVERIFY(window.validationPanel()->model()->report()->json == panelVerdict);
        QCOMPARE(window.engine()->state()->length, 20); // nothing restored
        QVERIFY(window.grab().save(shots + QStringLiteral("04-fault.png")));
        // Diff the clean snapshot and the fault: positions differ by one everywhere.
        for (QDockWidget* d : window.docks())
            if (d->objectName() == QStringLiteral("dock.diff")) {
                d->show();
                d->raise();
            }
        window.diffPanel()->setStates(first, fault.nodeId);
        window.diffPanel()->compare();
        DONE_OK(done);
        QVERIFY(window.diffPanel()->diff()->report.positions.offset);
        QTest::qWait(200);
        QVERIFY(fits());
        QVERIFY(window.grab().save(shots + QStringLiteral("05-diff.png")));
        // The tour, every step. The session is the user's: the tour asks once (step 1) before
        // it runs its own prompt; the user keeps a snapshot of it.
        window.showTour();
        kvscope::gui::Tour* tour = window.tour();
        int askedToReplace = 0;
        tour->setReplaceConfirmation([&](qint64) {
            ++askedToReplace;
            return kvscope::gui::Tour::ReplaceChoice::SnapshotFirst;
        });
        QSignalSpy finished(tour, &kvscope::gui::Tour::stepFinished);
        for (int step = 0; step < tour->stepCount(); ++step) {
            finished.clear();
            tour->runStep(step);
            QVERIFY2(finished.wait(180000) || !finished.isEmpty(),
                     qPrintable(tour->stepTitle(step)));
            QVERIFY2(finished.first().value(1).toBool(), qPrintable(tour->stepTitle(step)));
        }
        QCOMPARE(askedToReplace, 1);
        QTest::qWait(200);
        QVERIFY2(fits(), "the window grew past 1366x768 during the tour");
        QVERIFY(window.grab().save(shots + QStringLiteral("06-tour.png")));
    }
    // Issue 12, the small things a new user tripped over: counts read "1 token", "1 step"; a
    // drift that ran all its steps does not add "(steps)"; dock titles read as written in the
    // View menu and on tabs (the session dock showed "Model _session"); the prompt box starts
    // with the model's own example prompt (a neutral one without) and keeps what the user
    // wrote; the token strip has a legend.
    // The Huge pages box of Model and session is the CLI's --huge-pages: the next load copies
    // the weights out of the file, and what stays in place is what `kvscope-cli info --json`
    // reports for the same option.
    void hugePagesBoxIsTheCliOption() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        auto* box =
            s.window.sessionPanel()->findChild<QCheckBox*>(QStringLiteral("session.hugePages"));
        QVERIFY(box);
        QVERIFY(!box->isChecked());
        const QString path = QString::fromStdString(testdata::path(kModel));
        int64_t inPlace[2] = {};
        for (const bool huge : {false, true}) {
            box->setChecked(huge);
            QCOMPARE(s.window.engine()->weightsOnHugePages(), huge);
            s.window.openPath(path);
            DONE_OK(s.done);
            const ModelInfo& info = s.window.engine()->model();
            QCOMPARE(info.weightsOnHugePages, huge);
            QStringList args{QStringLiteral("info"), QStringLiteral("-m"), path,
                             QStringLiteral("--json")};
            if (huge)
                args << QStringLiteral("--huge-pages");
            const auto cli = cliJson(args);
            QVERIFY(cli.contains("mapped_weight_bytes"));
            QCOMPARE(info.mappedWeightBytes, cli["mapped_weight_bytes"].get<int64_t>());
            inPlace[huge] = info.mappedWeightBytes;
            bool said = false; // the model's tooltip says where the weights are
            for (const QLabel* l : s.window.sessionPanel()->findChildren<QLabel*>())
                said = said || l->toolTip().contains(huge ? QStringLiteral("huge pages")
                                                          : QStringLiteral("in place"));
            QVERIFY(said);
        }
        QVERIFY(inPlace[1] < inPlace[0]); // stories260K's 128 KB embedding was copied
    }

    void smallThingsReadRight() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        KVSCOPE_REQUIRE_DATA(kModel);
        const auto demo = kvscope::findDemoModel();
        QVERIFY2(demo, "the bundled demo model was not found");
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        for (QDockWidget* d : s.window.docks()) {
            // A tab of tabified docks shows "&" as a mnemonic whatever is done: no titles with it.
            QVERIFY2(!d->windowTitle().contains(QLatin1Char('&')), qPrintable(d->windowTitle()));
            const QString text = d->toggleViewAction()->text();
            QVERIFY2(!QString(text).remove(QStringLiteral("&&")).contains(QLatin1Char('&')),
                     qPrintable(d->objectName() + ": " + text));
            QCOMPARE(QString(text).replace(QStringLiteral("&&"), QStringLiteral("&")),
                     d->windowTitle());
        }

        SessionPanel* panel = s.window.sessionPanel();
        s.window.openPath(QString::fromStdString(*demo));
        DONE_OK(s.done);
        QCOMPARE(panel->promptText(), QStringLiteral("And it came to pass"));
        s.window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(s.done);
        QCOMPARE(panel->promptText(), SessionPanel::neutralPrompt());
        panel->setPromptText(QStringLiteral("Once upon a time"));
        s.window.openPath(QString::fromStdString(*demo));
        DONE_OK(s.done);
        QCOMPARE(panel->promptText(), QStringLiteral("Once upon a time"));
        s.window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(s.done);

        // One token (BOS only), then a drift of one step.
        PromptRequest r;
        r.text = QString();
        r.steps = 0;
        s.window.engine()->runPrompt(r);
        DONE_OK(s.done);
        QCOMPARE(s.window.engine()->state()->tokens.size(), size_t(1));
        QTRY_VERIFY2(panel->summaryText().startsWith(QStringLiteral("1 token ·")),
                     qPrintable(panel->summaryText()));
        r.text = QStringLiteral("Once upon a time");
        s.window.engine()->runPrompt(r);
        DONE_OK(s.done);
        const QString id = snapshot(s);
        QVERIFY(!id.isEmpty());
        s.ledger()->drift(id, QString(), 1, QStringLiteral("same-device"));
        DONE_OK(s.done);
        const QString summary = s.window.driftPanel()->summaryText();
        QVERIFY2(summary.contains(QStringLiteral(" · 1 step · ")), qPrintable(summary));
        QVERIFY2(!summary.contains(QStringLiteral("(steps)")), qPrintable(summary));
        s.ledger()->drift(id, QString(), 3, QStringLiteral("same-device"));
        DONE_OK(s.done);
        QVERIFY2(s.window.driftPanel()->summaryText().contains(QStringLiteral(" · 3 steps · ")),
                 qPrintable(s.window.driftPanel()->summaryText()));
        // The token strip's colours have a legend.
        QCOMPARE(panel->tokenLegend()->segments(), (QStringList{QStringLiteral("prompt")}));
        s.window.engine()->step({});
        DONE_OK(s.done);
        QTRY_COMPARE(panel->tokenLegend()->segments(),
                     (QStringList{QStringLiteral("prompt"), QStringLiteral("generated")}));
    }

    // Issue 12: a user who closes the tour does not get it again at the next start; Help ▸
    // Guided tour starts it again (and then it is wanted again).
    void tourStaysClosed() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        QSettings().remove(QStringLiteral("tour"));
        QVERIFY(MainWindow::tourWantedAtStart()); // a new user is greeted by it
        {
            MainWindow w;
            w.resize(1366, 768);
            w.show();
            w.showTour();
            QDockWidget* d = w.dock(QStringLiteral("dock.tour"));
            QVERIFY(d && d->isVisible());
            w.resetLayout(); // hidden with the workspace: not closed by the user
            QVERIFY(MainWindow::tourWantedAtStart());
            w.showTour();
            QVERIFY(d->close()); // its close button
            QVERIFY(!d->isVisible());
            QVERIFY(!MainWindow::tourWantedAtStart());
        }
        QVERIFY(!MainWindow::tourWantedAtStart()); // the next start leaves it closed
        MainWindow w;
        w.resize(1366, 768);
        w.show();
        QVERIFY(!w.dock(QStringLiteral("dock.tour")));
        QAction* start = nullptr;
        for (QAction* a : w.findChild<QMenu*>(QStringLiteral("menu.help"))->actions())
            if (a->text().contains(QStringLiteral("tour")))
                start = a;
        QVERIFY(start);
        start->trigger();
        QVERIFY(w.dock(QStringLiteral("dock.tour")) &&
                w.dock(QStringLiteral("dock.tour"))->isVisible());
        QVERIFY(MainWindow::tourWantedAtStart());
        // Unticked in the View menu: closed as well.
        w.dock(QStringLiteral("dock.tour"))->toggleViewAction()->trigger();
        QVERIFY(!w.dock(QStringLiteral("dock.tour"))->isVisible());
        QVERIFY(!MainWindow::tourWantedAtStart());
    }

    // Issue 12: the tour never replaces the user's session without asking (cancel leaves it
    // as it was; "snapshot first" keeps it in the fork tree); a session the tour made itself
    // is replaced without asking; "watch the cache grow" adds one column per token at a pace
    // one can follow.
    void tourAsksBeforeReplacingTheSession() {
        if (testscreen::inChild())
            QSKIP("runs in the parent process");
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        s.window.resize(1600, 1000);
        s.window.show();
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 4);
        const CacheViewPtr before = s.window.engine()->state();
        s.window.showTour();
        kvscope::gui::Tour* tour = s.window.tour();
        using Choice = kvscope::gui::Tour::ReplaceChoice;
        int asked = 0;
        qint64 askedTokens = 0;
        Choice answer = Choice::Cancel;
        tour->setReplaceConfirmation([&](qint64 tokens) {
            ++asked;
            askedTokens = tokens;
            return answer;
        });
        QSignalSpy finished(tour, &kvscope::gui::Tour::stepFinished);
        QVERIFY(tour->stepReplacesSession(0) && tour->stepReplacesSession(1));
        QVERIFY(!tour->stepReplacesSession(2));
        tour->runStep(0);
        QCOMPARE(asked, 1);
        QCOMPARE(askedTokens, qint64(before->tokens.size()));
        QCOMPARE(finished.size(), 1);
        QVERIFY(!finished.first().value(1).toBool());
        QTest::qWait(300);
        QCOMPARE(s.window.engine()->state(), before); // untouched
        QVERIFY(nodeIds(*s.ledger()).isEmpty());

        // Snapshot first; then the step runs, token by token.
        answer = Choice::SnapshotFirst;
        finished.clear();
        QElapsedTimer clock;
        clock.start();
        std::vector<std::pair<qint64, qint64>> growth; // (cache length, ms)
        QMetaObject::Connection watch = connect(
            s.window.engine(), &EngineController::stateChanged, this, [&](const CacheViewPtr& st) {
                if (st)
                    growth.emplace_back(st->length, clock.elapsed());
            });
        tour->runStep(0);
        QVERIFY(finished.wait(120000) || !finished.isEmpty());
        disconnect(watch);
        QVERIFY(finished.first().value(1).toBool());
        QCOMPARE(asked, 2);
        const QStringList ids = nodeIds(*s.ledger());
        QVERIFY(!ids.isEmpty());
        QCOMPARE(node(*s.ledger(), ids.first())->tokens, qint64(before->tokens.size()));
        // The last eight lengths seen grow by one each, at least ~150 ms apart.
        QVERIFY(growth.size() >= 9);
        const qint64 end = growth.back().first;
        std::vector<qint64> at(9, -1); // when length end-8+i first appeared
        for (const auto& [length, ms] : growth)
            if (length >= end - 8 && at[size_t(length - (end - 8))] < 0)
                at[size_t(length - (end - 8))] = ms;
        for (size_t i = 1; i < at.size(); ++i) {
            QVERIFY2(at[i] >= 0 && at[i - 1] >= 0, "a token's column was never shown");
            QVERIFY2(at[i] - at[i - 1] >= kvscope::gui::Tour::kPaceMs * 3 / 4,
                     qPrintable(QStringLiteral("token %1 came %2 ms after the one before")
                                    .arg(i)
                                    .arg(at[i] - at[i - 1])));
        }

        // The tour's own session: replaced without asking.
        finished.clear();
        tour->runStep(1);
        QVERIFY(finished.wait(180000) || !finished.isEmpty());
        QVERIFY(finished.first().value(1).toBool());
        QCOMPARE(asked, 2);
        // The user goes on from it: it is theirs now.
        s.done.clear();
        s.window.engine()->step({});
        DONE_OK(s.done);
        answer = Choice::Cancel;
        finished.clear();
        tour->runStep(0);
        QCOMPARE(asked, 3);
    }
};

QTEST_MAIN(TestGuiFlows)
#include "tst_guiflows.moc"
