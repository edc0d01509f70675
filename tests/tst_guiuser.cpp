// tst_guiuser: the main window as a new user meets it (label `model`).
//
// - newUserFlow: at 1366x768 (a child process on an offscreen screen of that size): first
//   launch, run, step, generate, snapshot, fork, truncate, fault + restore attempt, diff and
//   the tour, asserting each panel's state and writing screenshots.
// - hugePagesBoxIsTheCliOption, cacheDtypeBoxIsTheCliOption, smallThingsReadRight, and the
//   tour's two promises: it stays closed once closed, and asks before it replaces a session.
#include "guiflowtest.h"
#include "screenchild.h"

#include <QComboBox>

using namespace guiflows;

class TestGuiUser : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_guiuser"), true); }

    void newUserFlow() {
        KVSCOPE_REQUIRE_DATA(kModel);
        const QSize screen(1366, 768);
        if (QGuiApplication::primaryScreen()->size() != screen) {
            QVERIFY2(!testscreen::inChild(), "the child's screen does not have the size asked for");
            const auto child = testscreen::runOnScreen(screen, QStringLiteral("newUserFlow"));
            QVERIFY2(child.ok, qPrintable(child.output.right(4000)));
            QVERIFY2(child.output.contains(QStringLiteral("PASS   : TestGuiUser::newUserFlow()")),
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
        for (int step = 0; step < tour->stepCount(); ++step) {
            const QString failed = guitest::runTourStep(tour, step);
            QVERIFY2(failed.isEmpty(), qPrintable(failed));
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

    // The KV cache box of Model and session is the CLI's --cache-dtype: the next load makes its
    // sessions' caches in that dtype, the panel says so, and the prompt's top logits are what
    // `kvscope-cli logits --cache-dtype` prints for the same prompt (f16 ones differ from f32).
    void cacheDtypeBoxIsTheCliOption() {
        KVSCOPE_REQUIRE_DATA(kModel);
        Session s;
        auto* box =
            s.window.sessionPanel()->findChild<QComboBox*>(QStringLiteral("session.cacheDtype"));
        QVERIFY(box);
        // Nothing chosen yet: the compute dtype, as the CLI without --cache-dtype (f32 here).
        QCOMPARE(box->currentText(), QStringLiteral("f32"));
        QVERIFY(s.window.engine()->cacheDtype().isEmpty());
        const QString path = QString::fromStdString(testdata::path(kModel));
        const QString prompt = QStringLiteral("Once upon a time");
        std::vector<float> top[2];
        int i = 0;
        for (const QString& dtype : {QStringLiteral("f16"), QStringLiteral("f32")}) {
            box->setCurrentText(dtype);
            QCOMPARE(s.window.engine()->cacheDtype(), dtype);
            openAndRun(s, kModel, prompt, 0);
            QCOMPARE(s.window.engine()->model().cacheDtype, dtype);
            QCOMPARE(box->currentText(), dtype);
            const auto state = s.window.engine()->state();
            QVERIFY(state);
            QCOMPARE(state->cacheDtype, dtype);
            bool said = false; // the session panel's summary names the dtype
            for (const QLabel* l : s.window.sessionPanel()->findChildren<QLabel*>())
                said = said || l->text().contains(QStringLiteral("cache length 5 (%1)").arg(dtype));
            QVERIFY(said);
            const auto cli =
                cliJson({QStringLiteral("logits"), QStringLiteral("-m"), path, QStringLiteral("-p"),
                         prompt, QStringLiteral("--cache-dtype"), dtype, QStringLiteral("--json")});
            QVERIFY(cli.contains("logits"));
            const auto last = cli["logits"].back().get<std::vector<float>>();
            QCOMPARE(state->topIds.size(), size_t(5));
            for (std::size_t k = 0; k < state->topIds.size(); ++k)
                QCOMPARE(state->topLogits[k], last[size_t(state->topIds[k])]);
            top[i++] = state->topLogits;
            const auto info =
                cliJson({QStringLiteral("info"), QStringLiteral("-m"), path,
                         QStringLiteral("--cache-dtype"), dtype, QStringLiteral("--json")});
            QCOMPARE(QString::fromStdString(info["cache_dtype"].get<std::string>()), dtype);
        }
        QVERIFY(top[0] != top[1]); // the option changes the numbers
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
        r.prompt.text.clear();
        r.steps = 0;
        s.window.engine()->runPrompt(r);
        DONE_OK(s.done);
        QCOMPARE(s.window.engine()->state()->tokens.size(), size_t(1));
        QTRY_VERIFY2(panel->summaryText().startsWith(QStringLiteral("1 token ·")),
                     qPrintable(panel->summaryText()));
        r.prompt.text = "Once upon a time";
        s.window.engine()->runPrompt(r);
        DONE_OK(s.done);
        const QString id = snapshot(s);
        QVERIFY(!id.isEmpty());
        s.ledger()->request(req::Drift{id, QString(), 1, QStringLiteral("same-device")});
        DONE_OK(s.done);
        const QString summary = s.window.driftPanel()->summaryText();
        QVERIFY2(summary.contains(QStringLiteral(" · 1 step · ")), qPrintable(summary));
        QVERIFY2(!summary.contains(QStringLiteral("(steps)")), qPrintable(summary));
        s.ledger()->request(req::Drift{id, QString(), 3, QStringLiteral("same-device")});
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

QTEST_MAIN(TestGuiUser)
#include "tst_guiuser.moc"
