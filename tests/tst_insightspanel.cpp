// tst_insightspanel: the Insights panel (widgets/panels/insightspanel.h) on the bundled demo
// model, driven as a user would — select an insight, Run -> LedgerController -> engine thread
// -> Workspace::runInsight — and held against `kvscope-cli insights run N --json`: the same
// verdict and measurements; a definitional claim has no Run; the evidence button raises the
// panel the experiment names; "Show the evidence" opens the experiment's states in the panels
// with its selection; a refusal shows its message.
#include "guitest.h"

#include "mainwindow.h"

#include "attentionpanel.h"
#include "diffpanel.h"
#include "driftpanel.h"
#include "enginecontroller.h"
#include "selection.h"
#include "snapshotpanel.h"
#include "insightspanel.h"
#include "ledgercontroller.h"

#include "insights/registry.h"

#include <QCoreApplication>
#include <QDockWidget>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

using namespace kvscope::widgets;
using guitest::answers;
using guitest::waitDone;
using kvscope::gui::MainWindow;

namespace {

const QString kDemo = QStringLiteral(KVSCOPE_TESTS_DIR "/../resources/demo-model");

nlohmann::json cliRun(int number) {
    QProcess p;
    p.start(QStringLiteral(KVSCOPE_CLI),
            {QStringLiteral("insights"), QStringLiteral("run"), QString::number(number),
             QStringLiteral("-m"), kDemo, QStringLiteral("--json")});
    p.waitForFinished(300000);
    return nlohmann::json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
}

// The next finished operation of `kind` (operations the panels start on their own finish in
// between).
OperationResult waitKind(QSignalSpy& done, const QString& kind) {
    for (;;) {
        const OperationResult r = waitDone(done, 300000);
        if (r.kind == kind || r.message == QStringLiteral("timed out"))
            return r;
    }
}

// The window at 1366x768 with the demo model loaded; false when it did not load.
bool openDemo(MainWindow& window, QSignalSpy& done) {
    window.resize(1366, 768);
    window.show();
    window.openPath(kDemo);
    return waitDone(done).ok;
}

} // namespace

class TestInsightsPanel : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_insightspanel"), true); }

    void guiMatchesCli() {
        MainWindow window;
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        QVERIFY(openDemo(window, done));
        InsightsPanel* p = window.insightsPanel();
        QVERIFY(p);

        // A definitional claim: nothing to run (Run does nothing), no verdict.
        QVERIFY(p->select(3));
        QVERIFY(!kvscope::insights::hasExperiment(3));
        const qsizetype before = done.count();
        p->run();
        QTest::qWait(200);
        QCOMPARE(done.count(), before);
        QVERIFY(p->verdictText().isEmpty());

        for (int number : {2, 12, 47}) {
            QVERIFY(p->select(number));
            p->run();
            const OperationResult r = waitDone(done, 300000);
            QVERIFY2(r.ok, qPrintable(r.message));
            QCOMPARE(r.kind, QStringLiteral("insight"));
            QTRY_VERIFY(p->result(number));
            const nlohmann::json cli = cliRun(number);
            QVERIFY(cli.is_object());
            const nlohmann::json& want = cli["insights"][0];
            const nlohmann::json& got = p->result(number)->json;
            QVERIFY(got["verdict"] == want["verdict"]);
            QCOMPARE(int(got["measurements"].size()), int(want["measurements"].size()));
            for (size_t i = 0; i < got["measurements"].size(); ++i) {
                QVERIFY(got["measurements"][i]["name"] == want["measurements"][i]["name"]);
                // Timings differ from run to run; everything else is deterministic.
                if (want["measurements"][i]["unit"] != "s")
                    QVERIFY2(got["measurements"][i]["value"] == want["measurements"][i]["value"],
                             want["measurements"][i]["name"].dump().c_str());
            }
            QCOMPARE(p->verdictText(), QString::fromStdString(want["verdict"].get<std::string>()));
            QVERIFY(!p->whyText().isEmpty());
            QVERIFY(p->evidenceText().contains(
                QString::fromStdString(want["evidence"].get<std::string>()).toHtmlEscaped()));
        }

        // The evidence: #12 names the positions view, which shows the live session: the button
        // stores the experiment's states and restores the first, and the dock comes forward.
        QVERIFY(p->select(12));
        QCOMPARE(InsightsPanel::evidenceDock(p->result(12)->result.view),
                 QStringLiteral("dock.positions"));
        window.dock(QStringLiteral("dock.drift"))->raise();
        QPushButton* button = nullptr;
        for (QPushButton* b : p->findChildren<QPushButton*>())
            if (b->text().startsWith(QStringLiteral("Show the evidence")))
                button = b;
        QVERIFY(button && button->isVisible());
        QVERIFY(button->toolTip().contains(
            QString::fromStdString(p->result(12)->result.states[0].role)));
        button->click();
        const OperationResult e = waitKind(done, QStringLiteral("evidence"));
        QVERIFY2(e.ok, qPrintable(e.message));
        QTRY_VERIFY(window.engine()->state() &&
                    window.engine()->state()->tokens.size() ==
                        p->result(12)->result.states[0].snapshot.tokens.size());
        QVERIFY(!window.dock(QStringLiteral("dock.positions"))->visibleRegion().isEmpty());

        // Another model load forgets the results.
        window.openPath(kDemo);
        QVERIFY(waitDone(done).ok);
        QTRY_VERIFY(!p->result(12));
    }

    // "Show the evidence": the experiment's states join the fork tree under the lab's standard
    // state and open in the panel the evidence names, with the experiment's selection — a
    // diff (#47: the ablated state against the clean one, at the layer that moved most; the
    // same report as `kvscope-cli diff` of the states `insights run --save-evidence` writes),
    // a drift (#5), a fault (#13: drift and the damaged state's verdict) and the attention
    // view (#68: the patched state becomes the live session, its layer and head selected).
    void evidenceOpensInPanels() {
        MainWindow window;
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        QVERIFY(openDemo(window, done));
        InsightsPanel* p = window.insightsPanel();
        auto runAndShow = [&](int number) -> EvidenceViewPtr {
            QSignalSpy ready(window.ledger(), &LedgerController::answered);
            p->select(number);
            p->run();
            const OperationResult r = waitKind(done, QStringLiteral("insight"));
            if (!r.ok || !p->result(number)) {
                qWarning() << "insight" << number << r.message;
                return nullptr;
            }
            p->showEvidence();
            const OperationResult e = waitKind(done, QStringLiteral("evidence"));
            const auto evidence = answers<EvidenceView>(ready);
            if (!e.ok || evidence.empty()) {
                qWarning() << "evidence" << number << e.message;
                return nullptr;
            }
            return evidence.front();
        };

        // #47, diff.
        const EvidenceViewPtr diff = runAndShow(47);
        QVERIFY(diff);
        const auto& r47 = diff->insight->result;
        QCOMPARE(diff->ids.size(), qsizetype(r47.states.size()));
        QVERIFY(!diff->restored);
        QTRY_VERIFY(window.diffPanel()->diff() && window.diffPanel()->diff()->idA == diff->ids[0] &&
                    window.diffPanel()->diff()->idB == diff->ids[1]);
        QCOMPARE(window.diffPanel()->pickedA(), diff->ids[0]);
        QCOMPARE(window.diffPanel()->pickedB(), diff->ids[1]);
        QVERIFY(r47.focus.layer >= 0);
        QCOMPARE(window.selection()->layer(), r47.focus.layer);
        QVERIFY(!window.dock(QStringLiteral("dock.diff"))->visibleRegion().isEmpty());
        {
            const auto ledger = window.ledger()->ledger();
            QVERIFY(ledger);
            int children = 0;
            QString base;
            for (const auto& n : ledger->nodes)
                if (n.id == diff->ids[0])
                    base = n.parentId;
            QVERIFY(!base.isEmpty());
            for (const auto& n : ledger->nodes)
                children += n.parentId == base;
            QCOMPARE(children, int(diff->ids.size()));
        }
        {
            QTemporaryDir dir;
            QProcess c;
            c.start(QStringLiteral(KVSCOPE_CLI),
                    {QStringLiteral("insights"), QStringLiteral("run"), QStringLiteral("47"),
                     QStringLiteral("-m"), kDemo, QStringLiteral("--json"),
                     QStringLiteral("--save-evidence"), dir.path()});
            QVERIFY(c.waitForFinished(300000));
            QCOMPARE(c.exitCode(), 0);
            const auto j = nlohmann::json::parse(c.readAllStandardOutput().toStdString());
            const auto& states = j["insights"][0]["evidence_states"];
            QCOMPARE(int(states.size()), int(r47.states.size()));
            c.start(QStringLiteral(KVSCOPE_CLI),
                    {QStringLiteral("diff"),
                     QString::fromStdString(states[0]["file"].get<std::string>()),
                     QString::fromStdString(states[1]["file"].get<std::string>()),
                     QStringLiteral("--json")});
            QVERIFY(c.waitForFinished(60000));
            nlohmann::json want = nlohmann::json::parse(c.readAllStandardOutput().toStdString());
            nlohmann::json got = window.diffPanel()->diff()->report.toJson();
            // Lineage: ids, times, the workspace's insight and role (and so their count).
            for (nlohmann::json* x : {&want, &got}) {
                x->erase("fields");
                x->erase("manifest_differences");
            }
            QVERIFY2(got == want, ("gui " + got.dump() + "\ncli " + want.dump()).c_str());
        }

        // #5, drift: the restored file's state against the live one.
        const EvidenceViewPtr drift = runAndShow(5);
        QVERIFY(drift);
        QTRY_VERIFY(window.driftPanel()->drift() &&
                    window.driftPanel()->drift()->idA == drift->ids[0] &&
                    window.driftPanel()->drift()->idB == drift->ids[1]);
        QVERIFY(!window.driftPanel()->drift()->outcome.result.steps.empty());

        // #13, a fault: drift clean -> damaged, and the damaged state's verdict.
        const EvidenceViewPtr fault = runAndShow(13);
        QVERIFY(fault);
        QTRY_VERIFY(window.driftPanel()->drift() &&
                    window.driftPanel()->drift()->idB == fault->ids[1]);
        QCOMPARE(window.snapshotPanel()->selectedId(), fault->ids[1]);

        // #68, attention: the state becomes the live session, the focus selected.
        const EvidenceViewPtr attention = runAndShow(68);
        QVERIFY(attention);
        QVERIFY(attention->restored);
        const auto& r68 = attention->insight->result;
        QTRY_VERIFY(window.engine()->state() && window.engine()->state()->tokens.size() ==
                                                    r68.states[0].snapshot.tokens.size());
        if (r68.focus.layer >= 0)
            QCOMPARE(window.selection()->layer(), r68.focus.layer);
        if (r68.focus.head >= 0)
            QCOMPARE(window.attentionPanel()->queryHead(), r68.focus.head);
        QVERIFY(!window.dock(QStringLiteral("dock.attention"))->visibleRegion().isEmpty());
        QTRY_VERIFY(window.attentionPanel()->view() &&
                    window.attentionPanel()->view()->layer == window.selection()->layer());

        // Evidence of another model's run is refused by name: the results are forgotten on a
        // load, and a stale one kept by a caller is refused by the workspace.
        const InsightViewPtr stale = p->result(47);
        window.openPath(kDemo);
        QVERIFY(waitDone(done).ok);
        QTRY_VERIFY(!p->result(47));
        window.ledger()->request(req::StoreEvidence{stale, false});
        const OperationResult refused = waitDone(done);
        QVERIFY(!refused.ok);
        QVERIFY2(refused.message.contains(QStringLiteral("insight")), qPrintable(refused.message));
    }
};

QTEST_MAIN(TestInsightsPanel)
#include "tst_insightspanel.moc"
