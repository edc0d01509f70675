// tst_guiflows: the main window held against the CLI (label `model`). A new user's flow and the
// small things a user reads are tst_guiuser.
//
// - guiMatchesCli: the verdict the Validation panel shows, the Diff panel's report and the
//   Logit drift panel's result (or its refusal) equal `kvscope-cli verify|diff|drift --json`
//   for the same files — a clean snapshot, every fault of the lab, a fork pair and a
//   truncation, each against the clean state; the fork pair against each other.
// - lensMatchesCli, attributionMatchesCli, branchesMatchCli, transplantMatchesCli,
//   inductionMatchesCli: the Logit lens, Attribution, Branches, Transplant and Induction panels
//   against `kvscope-cli lens|attribute [--heads]|branches|transplant|induction --json`.
// - driftCountIsCoresOnEveryProfile: the drift panel's count of steps outside the tolerance is
//   `kvscope-cli drift --profile P --json`'s for exact, same-device and cross-device.
// - openLlamaCppState: a llama.cpp state file opened in the window.
// - restoreRefusesStructuralMismatch: another model's snapshot restored with "force" is a
//   refusal naming the violation (it used to crash the app), and the real dialog offers no
//   "Restore anyway"; a semantic error offers it, never as the default button.
// - lineageRules: fresh run -> root; restore + continue -> child; model switch -> new root.
// - workspaceSurvivesKill: a window with a workspace folder makes three snapshots and is
//   killed (SIGKILL, in a child process); a new window on the same folder shows the three,
//   each verifying clean with the CLI.
// - leavingAsks: Quit and a model switch with an unsnapshotted live session ask; each answer
//   (Cancel, Snapshot, Discard) does what it says.
#include "guiflowtest.h"
#include "attributionpanel.h"
#include "heatmapplot.h"
#include "inductionpanel.h"
#include "lensmodel.h"
#include "lenspanel.h"
#include "positionmodel.h"
#include "positionpanel.h"
#include "kvheatmappanel.h"
#include "tokenmodel.h"
#include "branchespanel.h"
#include "displaytext.h"
#include "transplantmodel.h"
#include "transplantpanel.h"
#include "engine/model.h"
#include "tokenizer/tokenizer.h"

#include <QMenuBar>
#include <QSet>
#include <QAbstractItemModelTester>
#include <QTableView>
#include <qcustomplot.h>

#include <csignal>
#include <unistd.h>

using namespace guiflows;

class TestGuiFlows : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_guiflows"), true); }

    void guiMatchesCli() {
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
            s.ledger()->request(req::Save{id, path});
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

        for (const QString& id : states) {
            const QString path = save(id);
            QVERIFY(!path.isEmpty());
            const QString what = node(*s.ledger(), id)->operation + QStringLiteral(" ") +
                                 node(*s.ledger(), id)->parameters;
            // The verdict the Validation panel shows.
            s.ledger()->request(req::VerifyNode{id});
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
        s.ledger()->request(req::Diff{forkA, forkB});
        DONE_OK(s.done);
        QCOMPARE(s.window.diffPanel()->pickedA(), forkA);
        QCOMPARE(s.window.diffPanel()->pickedB(), forkB);
    }

    // A llama.cpp state opened like a snapshot (File > Open, drag and drop, the command line):
    // stored as an import node labelled with its source, the Validation panel's verdict equal
    // to `kvscope-cli verify FILE.ggsq --json`, restored and continued exactly as llama.cpp did.
    void openLlamaCppState() {
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
        s.window.engine()->generate(4, kvscope::SamplerSettings{});
        DONE_OK(s.done);
        QTRY_VERIFY(s.window.engine()->state() && s.window.engine()->state()->tokens.size() == 25);
        std::vector<int32_t> tail;
        for (std::size_t i = 21; i < 25; ++i)
            tail.push_back(s.window.engine()->state()->tokens[i].id);
        // llama.cpp's pending token and the first three of its continuation.
        QCOMPARE(tail, (std::vector<int32_t>{346, 391, 266, 267}));

        // The same file on another model (aidreams260K: 4 layers) is refused with core's
        // reasons in the message itself, not only in the Validation panel.
        KVSCOPE_REQUIRE_DATA(kOther);
        Session other;
        other.window.openPath(QString::fromStdString(testdata::path(kOther)));
        DONE_OK(other.done);
        QTRY_VERIFY(!other.window.engine()->isBusy());
        other.window.openPath(path);
        const OperationResult refused = waitDone(other.done);
        QVERIFY(!refused.ok);
        QVERIFY2(refused.message.contains(QStringLiteral("tim-dog.ggsq: not opened: ")) &&
                     refused.message.contains(QStringLiteral("layers")),
                 qPrintable(refused.message));

        // The same state as Hugging Face past_key_values (the panel's safetensors export) opens
        // the same way, with the CLI's verdict.
        QTemporaryDir dir;
        const QString st = dir.filePath(QStringLiteral("pkv.safetensors"));
        s.ledger()->request(req::ExportSafetensors{opened.nodeId, st});
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
        KVSCOPE_REQUIRE_DATA(kModel);
        KVSCOPE_REQUIRE_DATA(kOther);
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 40);
        const QString id = snapshot(s);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("stories.kvsnap"));
        s.ledger()->request(req::Save{id, path});
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
        s.ledger()->request(req::OpenFile{path});
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
        p.prompt.text = "Once upon a time";
        p.steps = 4;
        s.window.engine()->runPrompt(p);
        DONE_OK(s.done);
        QCOMPARE(s.window.engine()->model().layers, 4);
    }

    // Diff marks the first divergence in both strips even past the live session's end (the
    // window's selection stops there: the strips used to stay on the previous slot).
    void diffHighlightsFirstDivergence() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 6);
        const QString a = snapshot(s);
        s.ledger()->request(req::Fork{a, 2, 12, 1.0});
        DONE_OK(s.done);
        const QStringList ids = nodeIds(*s.ledger());
        QCOMPARE(ids.size(), 3);
        // The live session cut to 2 tokens: shorter than where the forks part.
        s.window.selection()->setPosition(2);
        s.window.snapshotPanel()->truncateAtSelection();
        DONE_OK(s.done);
        QCOMPARE(s.window.engine()->state()->length, qint64(2));
        s.window.diffPanel()->setStates(ids[1], ids[2]);
        s.window.diffPanel()->compare();
        DONE_OK(s.done);
        const qint64 first = s.window.diffPanel()->firstDivergence();
        QVERIFY2(first > 2, qPrintable(QString::number(first)));
        auto marksFirst = [&] {
            QCOMPARE(s.window.diffPanel()->highlighted(), first);
            for (const char* name : {"diff.stripA", "diff.stripB"}) {
                auto* strip = s.window.diffPanel()->findChild<QAbstractItemView*>(name);
                QVERIFY2(strip, name);
                QCOMPARE(strip->currentIndex().row(), int(first));
            }
            // The position map marks the same slot (it marked the live session's last).
            const auto mark = s.window.diffPanel()->positionPlot()->marker();
            QVERIFY(mark);
            QCOMPARE(mark->column, int(first));
        };
        marksFirst();
        // Another layer chosen elsewhere (a heatmap click, an experiment's focus) keeps the
        // mark: the tour's fork step ended with the strips on the live session's last slot.
        s.window.selection()->setLayer(s.window.selection()->layer() == 0 ? 1 : 0);
        marksFirst();
        // A position chosen elsewhere moves it.
        s.window.selection()->setPosition(0);
        QCOMPARE(s.window.diffPanel()->highlighted(), qint64(0));
        // max |Δ| cannot be negative: its colour scale starts at zero (not a diverging -m..m).
        for (const auto* plot :
             {s.window.diffPanel()->headPlot(), s.window.diffPanel()->positionPlot()}) {
            QCOMPARE(plot->scale().lo, 0.0);
            QVERIFY(plot->scale().hi > 0);
        }
    }

    // Diff's "What matters?" paints core's localize result, the one `kvscope-cli localize
    // --json` prints, against a picked B and against A's own tokens replayed (B = A); the worst
    // cell, the corrupted layer, is selected.
    void whatMattersMatchesCli() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        const auto [clean, faultId] = cleanAndCorrupted(s, kModel);
        QVERIFY(!faultId.isEmpty());
        QTemporaryDir dir;
        QStringList paths;
        for (const QString& id : {clean, faultId}) {
            paths << dir.filePath(id + QStringLiteral(".kvsnap"));
            s.ledger()->request(req::Save{id, paths.back()});
            DONE_OK(s.done);
        }
        struct Case {
            QString b;
            QStringList cliFiles;
        };
        for (const Case& c : {Case{clean, {paths[1], paths[0]}}, Case{faultId, {paths[1]}}}) {
            s.window.diffPanel()->setStates(faultId, c.b);
            s.window.diffPanel()->localize();
            DONE_OK(s.done);
            const auto view = s.window.diffPanel()->localized();
            QVERIFY(view);
            const nlohmann::json gui = kvscope::state::toJson(view->result);
            const nlohmann::json cli =
                cliJson(QStringList{QStringLiteral("localize")} + c.cliFiles + modelArgs() +
                        QStringList{QStringLiteral("--json")});
            QVERIFY2(gui == cli, qPrintable("gui " + QString::fromStdString(gui.dump()) + "\ncli " +
                                            QString::fromStdString(cli.dump())));
            QCOMPARE(gui["reference"].get<std::string>(),
                     std::string(c.b == clean ? "b" : "replay"));
            QVERIFY(gui["minimal_layers"] == nlohmann::json::array({2}));
            const auto worst = s.window.diffPanel()->worstCell();
            QVERIFY(worst);
            QCOMPARE(worst->row, 2);
            QCOMPARE(s.window.selection()->layer(), 2);
            QVERIFY(!s.window.diffPanel()->mattersPlot()->isEmpty());
            QVERIFY(s.window.diffPanel()->mattersPlot()->isVisible());
        }
    }

    // The Logit lens panel paints core's lens, the one `kvscope-cli lens --json` prints: of a
    // clean state (the restored cache changes nothing) and, forced, of one with layer 2
    // corrupted (its restored column names layer 2, marked); a click selects layer and position.
    void lensMatchesCli() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        const auto [clean, faultId] = cleanAndCorrupted(s, kModel);
        QVERIFY(!faultId.isEmpty());
        QTemporaryDir dir;
        auto* panel = s.window.lensPanel();
        // The tokenizer the CLI reads with -m (the model's own), for the cells' texts.
        auto loaded = kvscope::Model::load(testdata::path(kModel));
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto tok = loaded.value()->tokenizer();
        for (const QString& id : {clean, faultId}) {
            const bool forced = id != clean;
            const QString path = dir.filePath(id + QStringLiteral(".kvsnap"));
            s.ledger()->request(req::Save{id, path});
            DONE_OK(s.done);
            panel->setState(id);
            panel->setForce(forced);
            panel->read();
            DONE_OK(s.done);
            const auto view = panel->lens();
            QVERIFY(view && view->id == id);
            const nlohmann::json gui = kvscope::state::toJson(view->result, tok.get());
            nlohmann::json cli = cliJson(
                QStringList{QStringLiteral("lens"), path, QStringLiteral("--json")} + modelArgs() +
                (forced ? QStringList{QStringLiteral("--force")} : QStringList{}));
            QVERIFY(cli.is_object() && cli.contains("warnings"));
            cli.erase("warnings");
            QVERIFY2(gui == cli,
                     qPrintable("gui " + QString::fromStdString(gui.dump()).left(400) + "\ncli " +
                                QString::fromStdString(cli.dump()).left(400)));
            const auto* model = panel->model();
            QCOMPARE(model->rowCount(), view->result.layers);
            QCOMPARE(model->columnCount(), int(view->result.tokens) + 1); // + the restored column
            const int restoredColumn = model->columnCount() - 1;
            QVERIFY(model->isRestoredColumn(restoredColumn));
            int marked = -1;
            for (int row = 0; row < model->rowCount(); ++row)
                if (model->data(model->index(row, restoredColumn))
                        .toString()
                        .startsWith(QStringLiteral("≠")))
                    marked =
                        std::max(marked, model->cellAt(model->index(row, restoredColumn)).first);
            if (!forced) {
                QCOMPARE(view->result.firstChangedLayer, -1);
                QCOMPARE(marked, -1);
            } else {
                QCOMPARE(view->result.firstChangedLayer, 2);
                QVERIFY(marked >= 2);
                QVERIFY(panel->summaryText().contains(QStringLiteral("layer 2")));
            }
        }
        // A click on (layer 1, position 3) selects them everywhere.
        auto* table = panel->table();
        const QModelIndex cell = panel->model()->indexOf(1, 3);
        QVERIFY(cell.isValid());
        s.window.dock(QStringLiteral("dock.lens"))->raise();
        table->scrollTo(cell);
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, table->visualRect(cell).center());
        QCOMPARE(s.window.selection()->layer(), 1);
        QCOMPARE(s.window.selection()->position(), qint64(3));
    }

    // The Attribution panel paints core's two attributions, the ones `kvscope-cli attribute
    // --json` and `attribute --heads --json` print: of a clean state and, forced, of one with
    // layer 2 corrupted. A click on a slot selects its position; a click on a head's cell
    // selects that layer and head.
    void attributionMatchesCli() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        const auto [clean, faultId] = cleanAndCorrupted(s, kModel);
        QVERIFY(!faultId.isEmpty());
        QTemporaryDir dir;
        auto* panel = s.window.attributionPanel();
        QAbstractItemModelTester tester(panel->layerTable()->model(),
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        auto loaded = kvscope::Model::load(testdata::path(kModel));
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto tok = loaded.value()->tokenizer();
        auto compare = [](nlohmann::json gui, nlohmann::json cli) {
            QVERIFY(cli.is_object());
            cli.erase("warnings"); // the CLI's restore report, beside the result
            QVERIFY2(gui == cli,
                     qPrintable("gui " + QString::fromStdString(gui.dump()).left(400) + "\ncli " +
                                QString::fromStdString(cli.dump()).left(400)));
        };
        for (const QString& id : {clean, faultId}) {
            const bool forced = id != clean;
            const QString path = dir.filePath(id + QStringLiteral(".kvsnap"));
            s.ledger()->request(req::Save{id, path});
            DONE_OK(s.done);
            const QStringList force =
                forced ? QStringList{QStringLiteral("--force")} : QStringList{};
            if (forced) { // refused without "even if verify fails", as the CLI refuses
                panel->setState(id);
                panel->setForce(false);
                panel->run();
                const OperationResult refused = waitDone(s.done);
                QVERIFY2(!refused.ok, qPrintable(refused.message));
            }
            panel->setState(id);
            panel->setForce(forced);
            panel->run();
            DONE_OK(s.done);
            const auto view = panel->attribution();
            QVERIFY(view && view->id == id && view->forced == forced);
            compare(
                kvscope::state::toJson(view->slotResult),
                cliJson(QStringList{QStringLiteral("attribute"), path, QStringLiteral("--json")} +
                        modelArgs() + force));
            compare(kvscope::state::toJson(view->headResult, tok.get()),
                    cliJson(QStringList{QStringLiteral("attribute"), path,
                                        QStringLiteral("--heads"), QStringLiteral("--json")} +
                            modelArgs() + force));
            QCOMPARE(int64_t(view->slotResult.bySlot.size()), s.window.engine()->state()->length);
            QVERIFY(view->slotResult.ablated > 0);
            QCOMPARE(panel->layerTable()->model()->rowCount(),
                     int(view->headResult.parts.mlp.size()));
            QVERIFY(!panel->headPlot()->isEmpty());
            QCOMPARE(panel->headPlot()->geometry().rows, int(view->headResult.parts.heads.size()));
            QVERIFY(panel->summaryText().contains(QStringLiteral("Spearman")));
        }
        // Hover and click on slot 3: its token's text, and the selection moves there.
        s.window.dock(QStringLiteral("dock.attribution"))->raise();
        QCustomPlot* plot = panel->slotPlot();
        plot->replot(QCustomPlot::rpImmediateRefresh);
        const QPoint slot3(
            int(std::lround(plot->xAxis->coordToPixel(3))),
            int(std::lround(plot->yAxis->coordToPixel(plot->yAxis->range().center()))));
        QCOMPARE(panel->slotAt(slot3), int64_t(3));
        const auto& a = panel->attribution()->slotResult.bySlot[3];
        QVERIFY2(panel->describeSlot(3).contains(QStringLiteral("slot 3")),
                 qPrintable(panel->describeSlot(3)));
        QVERIFY2(a.text.empty() ||
                     panel->describeSlot(3).contains(QString::fromStdString(a.text).trimmed()),
                 qPrintable(panel->describeSlot(3) + " / " + QString::fromStdString(a.text)));
        s.window.selection()->set(0, 0, 0);
        QTest::mouseClick(plot, Qt::LeftButton, {}, slot3);
        QCOMPARE(s.window.selection()->position(), qint64(3));
        // A click on the cell of layer 1 and the last query head selects layer 1, that head's
        // KV head (the selection's head) and the attributed position; the cell is marked.
        HeatmapPlot* heads = panel->headPlot();
        QCustomPlot* qcp = heads->plot();
        qcp->replot(QCustomPlot::rpImmediateRefresh);
        const auto view = panel->attribution();
        const int lastHead = view->queryHeads - 1;
        QCOMPARE(heads->geometry().columns, view->queryHeads);
        const QPoint cell(int(std::lround(qcp->xAxis->coordToPixel(lastHead))),
                          int(std::lround(qcp->yAxis->coordToPixel(1))));
        QTest::mouseClick(qcp, Qt::LeftButton, {}, cell);
        QCOMPARE(s.window.selection()->layer(), 1);
        QCOMPARE(s.window.selection()->head(), view->kvHeads - 1);
        QCOMPARE(s.window.selection()->position(), qint64(view->slotResult.bySlot.size()) - 1);
    }

    // The Branches panel paints core's comparison, the one `kvscope-cli branches --json`
    // prints: two forks of one snapshot part in their own tokens, never in their caches.
    void branchesMatchCli() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 8);
        const QString clean = snapshot(s);
        s.window.snapshotPanel()->selectId(clean);
        s.window.snapshotPanel()->forkSelected(2, 10);
        DONE_OK(s.done);
        const QStringList all = nodeIds(*s.ledger());
        const QString forkA = all.at(all.size() - 2), forkB = all.at(all.size() - 1);
        QTemporaryDir dir;
        QStringList paths;
        for (const QString& id : {forkA, forkB}) {
            paths << dir.filePath(id + QStringLiteral(".kvsnap"));
            s.ledger()->request(req::Save{id, paths.back()});
            DONE_OK(s.done);
        }
        auto* panel = s.window.branchesPanel();
        panel->setStates(forkA, forkB);
        panel->compare();
        DONE_OK(s.done);
        const auto view = panel->model()->result();
        QVERIFY(view);
        auto loaded = kvscope::Model::load(testdata::path(kModel));
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const nlohmann::json gui =
            kvscope::state::toJson(view->result, loaded.value()->tokenizer().get());
        const nlohmann::json cli = cliJson(
            QStringList{QStringLiteral("branches"), paths[0], paths[1], QStringLiteral("--json")} +
            modelArgs());
        QVERIFY2(gui == cli, qPrintable("gui " + QString::fromStdString(gui.dump()).left(300) +
                                        "\ncli " + QString::fromStdString(cli.dump()).left(300)));
        QVERIFY(view->result.maxKlOwn > 0);
        QCOMPARE(view->result.maxKlForced, 0.0);
        QCOMPARE(panel->model()->rowCount(), 2);
        QCOMPARE(panel->model()->columnCount(), int(view->result.steps.size()));
        QVERIFY(panel->summaryText().contains(QStringLiteral("changes no step")));
        // A click on a step selects the position of its tokens (the window's selection is
        // bounded by the live session, which ends before the branches do).
        auto* table = panel->table();
        s.window.dock(QStringLiteral("dock.branches"))->raise();
        const QModelIndex cell = panel->model()->index(1, 2);
        table->scrollTo(cell);
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, table->visualRect(cell).center());
        QCOMPARE(s.window.selection()->position(),
                 std::min<qint64>(view->result.steps[2].after + 1,
                                  s.window.engine()->state()->length - 1));
    }

    // The Transplant panel shows core's own result, the one `kvscope-cli transplant --json`
    // prints (it showed a copy made field by field): the same JSON, and the table's rows are
    // its persistence steps with the tokens decoded.
    void transplantMatchesCli() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        s.window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(s.done);
        auto* panel = s.window.transplantPanel();
        const QString recipient = QStringLiteral("Once upon a time, there was a cat");
        const QString donor = QStringLiteral("Once upon a time, there was a dog");
        panel->setPrompts(recipient, donor);
        panel->setLayer(2);
        panel->run();
        DONE_OK(s.done);
        const auto view = panel->model()->result();
        QVERIFY(view);
        const nlohmann::json gui = kvscope::state::toJson(view->result);
        const nlohmann::json cli = cliJson(
            QStringList{QStringLiteral("transplant"), QStringLiteral("--recipient"), recipient,
                        QStringLiteral("--donor"), donor, QStringLiteral("--layer"),
                        QStringLiteral("2"), QStringLiteral("--json")} +
            modelArgs());
        QVERIFY2(gui == cli, qPrintable("gui " + QString::fromStdString(gui.dump()).left(300) +
                                        "\ncli " + QString::fromStdString(cli.dump()).left(300)));
        int steps = 0;
        for (const auto& p : view->result.persistence)
            steps += int(p.steps.size());
        QVERIFY(steps > 0);
        QCOMPARE(panel->model()->rowCount(), steps);
        const auto& first = view->result.persistence.front();
        auto loaded = kvscope::Model::load(testdata::path(kModel));
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const int32_t one[1] = {first.steps.front().token};
        QCOMPARE(panel->model()->data(panel->model()->index(0, 2)).toString(),
                 displayToken(QString::fromStdString(loaded.value()->tokenizer()->decode(one))));
    }

    // The drift panel counts the steps outside the tolerance as core does, on every profile: a
    // cache rounded through bf16 drifts a little, outside the exact and same-device bands on
    // some steps and inside the cross-device band, so the three counts differ.
    void driftCountIsCoresOnEveryProfile() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 8);
        const QString clean = snapshot(s);
        QVERIFY(!clean.isEmpty());
        QTemporaryDir dir;
        const QString cleanPath = dir.filePath(QStringLiteral("clean.kvsnap"));
        s.ledger()->request(req::Save{clean, cleanPath});
        DONE_OK(s.done);
        const QString faultPath = dir.filePath(QStringLiteral("bf16.kvsnap"));
        QProcess inject;
        inject.start(QStringLiteral(KVSCOPE_CLI),
                     QStringList{QStringLiteral("fault"), QStringLiteral("inject"),
                                 QStringLiteral("dtype-roundtrip"), cleanPath, QStringLiteral("-o"),
                                 faultPath, QStringLiteral("--param"), QStringLiteral("via=bf16")} +
                         modelArgs());
        QVERIFY(inject.waitForFinished(600000) && inject.exitCode() == 0);
        s.window.openPath(faultPath);
        const OperationResult opened = waitDone(s.done);
        QVERIFY2(opened.ok, qPrintable(opened.message));
        QSet<int> counts;
        for (const QString profile : {QStringLiteral("exact"), QStringLiteral("same-device"),
                                      QStringLiteral("cross-device")}) {
            DriftPanel* panel = s.window.driftPanel();
            QVERIFY(panel->setProfile(profile));
            panel->setStates(clean, opened.nodeId);
            panel->setSteps(16);
            panel->run();
            DONE_OK(s.done);
            const nlohmann::json cli = cliJson(
                QStringList{QStringLiteral("drift"), cleanPath, faultPath, QStringLiteral("-n"),
                            QStringLiteral("16"), QStringLiteral("--force"),
                            QStringLiteral("--profile"), profile, QStringLiteral("--json")} +
                modelArgs());
            QVERIFY2(panel->drift()->json == cli, qPrintable(profile));
            const int outside = cli["steps_outside_tolerance"].get<int>();
            QCOMPARE(panel->drift()->outcome.stepsOutsideTolerance(), outside);
            const QString said =
                QStringLiteral("%1 outside the %2 tolerance").arg(outside).arg(profile);
            QVERIFY2(panel->summaryText().contains(said),
                     qPrintable(panel->summaryText() + "\nexpected " + said));
            counts.insert(outside);
        }
        QVERIFY2(counts.size() > 1, "the profile never changed the count");
    }

    // The induction probe in the panel is `kvscope-cli induction --json`'s report, for a text
    // (recall) and for a random segment (copy losses), heads in core's ranking.
    void inductionMatchesCli() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        s.window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(s.done);
        auto* panel = s.window.inductionPanel();
        const QString text = QStringLiteral("Tom had a red ball. Tom had a red ball.");
        const QList<QStringList> cases = {{QStringLiteral("--text"), text},
                                          {QStringLiteral("--length"), QStringLiteral("12"),
                                           QStringLiteral("--seed"), QStringLiteral("5")}};
        for (const QStringList& args : cases) {
            if (args.front() == QStringLiteral("--text"))
                s.ledger()->request(req::Induction{text, 0, 0});
            else
                s.ledger()->request(req::Induction{QString(), 12, 5});
            DONE_OK(s.done);
            const auto view = panel->report();
            QVERIFY(view);
            // As the CLI prints it: a byte fragment of a longer character as U+FFFD.
            const nlohmann::json gui = nlohmann::json::parse(
                kvscope::state::toJson(view->report)
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            const nlohmann::json cli = cliJson(QStringList{QStringLiteral("induction")} + args +
                                               QStringList{QStringLiteral("--json")} + modelArgs());
            QVERIFY2(gui == cli,
                     qPrintable(args.front() + "\ngui " +
                                QString::fromStdString(gui.dump()).left(300) + "\ncli " +
                                QString::fromStdString(cli.dump()).left(300)));
            // The table's first row is the strongest head the CLI names.
            QCOMPARE(panel->headModel()->head(0).layer, cli["strongest"]["layer"].get<int>());
            QCOMPARE(panel->headModel()->head(0).head, cli["strongest"]["head"].get<int>());
            QCOMPARE(panel->recallModel()->rowCount(), int(cli["recalled"].size()));
        }
    }

    // State ▸ Diff with nothing picked compares the selected snapshot with the live session
    // (it compared "live session vs live session"); the State menu holds one Fork entry, whose
    // first action keeps Ctrl+K.
    void stateMenuDiffAndFork() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 4);
        const QString id = snapshot(s);
        s.window.engine()->generate(3, {});
        DONE_OK(s.done);
        s.window.snapshotPanel()->selectId(id);
        QMenu* state = nullptr;
        for (QAction* a : s.window.menuBar()->actions())
            if (a->text() == QStringLiteral("S&tate"))
                state = a->menu();
        QVERIFY(state);
        QAction* diff = nullptr;
        int forks = 0;
        for (QAction* a : state->actions()) {
            if (a->text() == QStringLiteral("D&iff"))
                diff = a;
            forks += QString(a->text()).remove(QLatin1Char('&')).startsWith(QStringLiteral("Fork"));
        }
        QCOMPARE(forks, 1);
        QCOMPARE(s.window.snapshotPanel()->forkMenu()->actions().front()->shortcut(),
                 QKeySequence(QStringLiteral("Ctrl+K")));
        QVERIFY(diff);
        diff->trigger();
        DONE_OK(s.done);
        QVERIFY(s.window.diffPanel()->diff());
        QCOMPARE(s.window.diffPanel()->diff()->idA, id);
        QCOMPARE(s.window.diffPanel()->diff()->idB, QString());
        QVERIFY(s.window.diffPanel()->diff()->report.firstDivergence >= 0);
    }

    // A long error in Model and session scrolls in its own two lines: the panel does not grow
    // (a four-line load error pushed the sampler rows over the prompt box at 1366x768).
    void longErrorKeepsTheSessionPanel() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        s.window.resize(1366, 768);
        s.window.show();
        s.window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(s.done);
        QTRY_VERIFY(!s.window.engine()->isBusy());
        auto* panel = s.window.sessionPanel();
        const OperationResult failed = guitest::longFailure();
        emit s.window.engine()->operationFinished(failed);
        QTest::qWait(50);
        // What the message takes of the panel: two lines at most (it took every line it wrapped
        // to, out of the prompt box's and the sampler rows' height); the tooltip has it all.
        QLabel* message = nullptr;
        for (QLabel* l : panel->findChildren<QLabel*>())
            if (l->text() == failed.message)
                message = l;
        QVERIFY(message);
        const int line = message->fontMetrics().lineSpacing();
        const int shown = message->visibleRegion().boundingRect().height();
        QVERIFY2(shown > 0 && shown <= 2 * line + 6, qPrintable(QString::number(shown)));
        QCOMPARE(message->toolTip(), failed.message);
    }

    void workspaceSurvivesKill() {
        KVSCOPE_REQUIRE_DATA(kModel);
        const QString childFolder = qEnvironmentVariable("KVSCOPE_TEST_WORKSPACE_CHILD");
        if (!childFolder.isEmpty()) {
            // The child: three snapshots into the folder, then killed without a chance to
            // save anything on the way out.
            Session s;
            s.window.openWorkspaceFolder(childFolder);
            DONE_OK(s.done);
            openAndRun(s, kModel, QStringLiteral("Once upon a time"), 4);
            for (int i = 0; i < 3; ++i) {
                if (i > 0) {
                    s.window.engine()->generate(2, {});
                    DONE_OK(s.done);
                }
                QVERIFY(!snapshot(s).isEmpty());
            }
            ::kill(::getpid(), SIGKILL);
        }
        QTemporaryDir dir;
        const QString folder = dir.filePath(QStringLiteral("workspace"));
        QProcess child;
        auto env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("KVSCOPE_TEST_WORKSPACE_CHILD"), folder);
        child.setProcessEnvironment(env);
        child.setProcessChannelMode(QProcess::MergedChannels);
        child.start(QCoreApplication::applicationFilePath(),
                    {QStringLiteral("workspaceSurvivesKill")});
        QVERIFY(child.waitForFinished(300000));
        QVERIFY2(child.exitStatus() == QProcess::CrashExit, child.readAll().constData());

        Session s;
        s.window.openPath(QString::fromStdString(testdata::path(kModel)));
        DONE_OK(s.done);
        s.window.openWorkspaceFolder(folder);
        const OperationResult r = waitDone(s.done);
        QVERIFY2(r.ok && r.message.contains(QStringLiteral("3 states")), qPrintable(r.message));
        const QStringList ids = nodeIds(*s.ledger());
        QCOMPARE(ids.size(), 3);
        QVERIFY(node(*s.ledger(), ids[0])->parentId.isEmpty());
        QCOMPARE(node(*s.ledger(), ids[1])->parentId, ids[0]);
        QCOMPARE(node(*s.ledger(), ids[2])->parentId, ids[1]);
        for (const QString& id : ids) {
            const QString file = node(*s.ledger(), id)->file;
            QVERIFY2(file.startsWith(folder), qPrintable(file));
            const auto v =
                cliJson(QStringList{QStringLiteral("verify"), file, "--json"} + modelArgs());
            QVERIFY2(v.value("ok", false), v.dump().c_str());
        }
    }

    void leavingAsks() {
        KVSCOPE_REQUIRE_DATA(kModel);
        KVSCOPE_REQUIRE_DATA(kOther);
        using Choice = MainWindow::LeaveChoice;
        QStringList asked;
        auto answer = [&asked](Choice c) {
            return [&asked, c](const QString& action, qint64) {
                asked << action;
                return c;
            };
        };
        QTemporaryDir dir;
        auto openWorkspace = [&dir](Session& s, const QString& name) {
            s.window.openWorkspaceFolder(dir.filePath(name));
            DONE_OK(s.done);
        };
        {
            Session s;
            s.window.show();
            openWorkspace(s, QStringLiteral("a"));
            openAndRun(s, kModel, QStringLiteral("Once upon a time"), 4);
            // Cancel: the window stays, nothing is captured.
            s.window.setLeaveConfirmation(answer(Choice::Cancel));
            QVERIFY(!s.window.close());
            QVERIFY(s.window.isVisible());
            QCOMPARE(asked.size(), 1);
            QVERIFY(nodeIds(*s.ledger()).isEmpty());
            // Another model, Snapshot: the capture comes first, then the load.
            s.window.setLeaveConfirmation(answer(Choice::Snapshot));
            s.window.openPath(QString::fromStdString(testdata::path(kOther)));
            DONE_OK(s.done); // the snapshot
            DONE_OK(s.done); // the load
            QCOMPARE(asked.size(), 2);
            QCOMPARE(nodeIds(*s.ledger()).size(), 1);
            QCOMPARE(s.window.engine()->model().name, QStringLiteral("aidreams260K.bin"));
            // A fresh run on it, then Quit with Snapshot: captured, then closed.
            PromptRequest r;
            r.prompt.text = "Once upon a time";
            r.steps = 3;
            s.window.engine()->runPrompt(r);
            DONE_OK(s.done);
            QVERIFY(!s.window.close()); // not yet: the capture runs first
            DONE_OK(s.done);
            QTRY_VERIFY(!s.window.isVisible());
            QCOMPARE(asked.size(), 3);
            QCOMPARE(nodeIds(*s.ledger()).size(), 2);
        }
        {
            Session s;
            s.window.show();
            openWorkspace(s, QStringLiteral("b"));
            openAndRun(s, kModel, QStringLiteral("Once upon a time"), 4);
            // Discard: closed at once, nothing captured.
            s.window.setLeaveConfirmation(answer(Choice::Discard));
            QVERIFY(s.window.close());
            QCOMPARE(asked.size(), 4);
            QVERIFY(nodeIds(*s.ledger()).isEmpty());
        }
        {
            // Nothing unsaved: no question; without a workspace folder, none either.
            Session s;
            s.window.show();
            openWorkspace(s, QStringLiteral("c"));
            openAndRun(s, kModel, QStringLiteral("Once upon a time"), 4);
            QVERIFY(!snapshot(s).isEmpty());
            s.window.setLeaveConfirmation(answer(Choice::Cancel));
            QVERIFY(s.window.close());
            Session t;
            t.window.show();
            openAndRun(t, kModel, QStringLiteral("Once upon a time"), 4);
            t.window.setLeaveConfirmation(answer(Choice::Cancel));
            QVERIFY(t.window.close());
            QCOMPARE(asked.size(), 4);
        }
    }

    void lineageRules() {
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
        r.prompt.text = "The little dog";
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

        // The first model's rows name their model and are another model's now; their tokens
        // are decoded with their own tokenizer (found beside their model file), not with the
        // loaded one's. D is the loaded model's.
        const SnapshotNode* na = node(*s.ledger(), a);
        QVERIFY(na->otherModel);
        QCOMPARE(na->modelName,
                 QFileInfo(QString::fromStdString(testdata::path(kModel))).fileName());
        QVERIFY(na->ownTokenizerFound);
        QVERIFY2(na->preview.contains(QStringLiteral("time")), qPrintable(na->preview));
        QVERIFY(!node(*s.ledger(), d)->otherModel);
        const QModelIndex ai = s.window.snapshotPanel()->model()->indexOf(a).siblingAtColumn(
            SnapshotTreeModel::ModelColumn);
        QCOMPARE(ai.data().toString(), na->modelName);
        QVERIFY(ai.data(Qt::ForegroundRole).isValid());
        // Diff of A and D says first that they are two models' states, as the CLI's "models".
        s.window.diffPanel()->setStates(a, d);
        s.window.diffPanel()->compare();
        DONE_OK(s.done);
        const auto& report = s.window.diffPanel()->diff()->report;
        QVERIFY(!report.sameModel);
        QVERIFY2(s.window.diffPanel()->summary().startsWith(QStringLiteral("<span")) &&
                     s.window.diffPanel()->summary().contains(QStringLiteral("two models")),
                 qPrintable(s.window.diffPanel()->summary()));
        // A's strip decodes A's ids with A's tokenizer: its text is A's prompt.
        QString textA;
        for (const auto& t : s.window.diffPanel()->diff()->tokensA)
            textA += t.text;
        QVERIFY2(textA.contains(QStringLiteral("Once upon a time")), qPrintable(textA));
    }

    // An evicted state restored as the live session: the Positions panel follows core's
    // alignment, which knows the recorded eviction (kept_tokens): no red slot where Validation
    // reports the state clean; the dropped tokens are "evicted (recorded)".
    void evictedStateAligns() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        openAndRun(s, kModel, QStringLiteral("Once upon a time"), 16);
        const QString full = snapshot(s);
        kvscope::state::SurviveOptions o;
        o.policy = "sink-window";
        o.budget = 0.5;
        o.steps = 2;
        o.recall = false;
        s.ledger()->request(req::Survive{full, o});
        const OperationResult r = waitDone(s.done);
        QVERIFY2(r.ok && !r.nodeId.isEmpty(), qPrintable(r.message));
        s.window.snapshotPanel()->setRestoreConfirmation([](const ValidationView&) { return 1; });
        s.window.snapshotPanel()->selectId(r.nodeId);
        s.window.snapshotPanel()->restoreSelected();
        DONE_OK(s.done);
        QTRY_VERIFY(s.window.engine()->state() &&
                    s.window.engine()->state()->length <
                        qint64(s.window.engine()->state()->tokens.size()));
        const auto& a = s.window.positionPanel()->model()->alignment();
        QTRY_VERIFY(s.window.positionPanel()->model()->alignment().evictionRecorded);
        QVERIFY2(a.aligned(), qPrintable(s.window.positionPanel()->summary()));
        QVERIFY(a.tokens > a.cacheLength);
        int evicted = 0;
        for (const auto& row : a.rows)
            evicted += row.evicted;
        QCOMPARE(qint64(evicted), a.tokens - a.cacheLength);
        QVERIFY(
            s.window.positionPanel()->summary().contains(QStringLiteral("evicted as recorded")));
        // The token strip's positions are the slots' (-1 for an evicted token), and the KV
        // heatmap labels each slot with the token it holds, not with token `slot`.
        const auto state = s.window.engine()->state();
        for (const auto& row : a.rows)
            QCOMPARE(state->tokens[size_t(row.token)].position, row.stored);
        QCOMPARE(qint64(state->keptTokens.size()), a.cacheLength);
        QTRY_COMPARE(s.window.kvPanel()->positionPlot()->axisTokens(Qt::Horizontal).size(),
                     int(a.cacheLength));
        const QStringList slotLabels =
            s.window.kvPanel()->positionPlot()->axisTokens(Qt::Horizontal);
        bool gapSeen = false;
        for (int i = 0; i < slotLabels.size(); ++i) {
            const int64_t t = state->keptTokens[size_t(i)];
            gapSeen = gapSeen || t != i;
            QCOMPARE(slotLabels[i], TokenModel::visibleText(state->tokens[size_t(t)]));
        }
        QVERIFY(gapSeen);
        // Validation agrees: the evicted state is clean.
        s.ledger()->request(req::VerifyNode{r.nodeId});
        QTRY_VERIFY(
            s.window.validationPanel()->model()->report() &&
            s.window.validationPanel()->model()->report()->subject.contains(r.nodeId.left(8)));
        QVERIFY(s.window.validationPanel()->model()->report()->report.ok());
    }
};

QTEST_MAIN(TestGuiFlows)
#include "tst_guiflows.moc"
