// tst_insightspanel: the Insights panel (widgets/panels/insightspanel.h) on the bundled demo
// model, driven as a user would — select an insight, Run -> LedgerController -> engine thread
// -> Workspace::runInsight — and held against `kvscope-cli insights run N --json`: the same
// verdict and measurements; a definitional claim has no Run; the evidence button raises the
// panel the experiment names; a refusal shows its message.
#include "guitest.h"

#include "mainwindow.h"

#include "enginecontroller.h"
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
#include <QTest>

#include <nlohmann/json.hpp>

using namespace kvscope::widgets;
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

} // namespace

class TestInsightsPanel : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_insightspanel"), true); }

    void guiMatchesCli() {
        MainWindow window;
        QSignalSpy done(window.engine(), &EngineController::operationFinished);
        window.resize(1366, 768);
        window.show();
        window.openPath(kDemo);
        QVERIFY(waitDone(done).ok);
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

        // The evidence: #12 names the positions view; its button raises that dock.
        QVERIFY(p->select(12));
        QCOMPARE(
            InsightsPanel::evidenceDock(QString::fromStdString(p->result(12)->result.evidence)),
            QStringLiteral("dock.positions"));
        window.dock(QStringLiteral("dock.drift"))->raise();
        QSignalSpy evidence(p, &InsightsPanel::evidenceRequested);
        for (QPushButton* b : p->findChildren<QPushButton*>())
            if (b->text().startsWith(QStringLiteral("Show the")))
                b->click();
        QCOMPARE(evidence.count(), 1);
        QCOMPARE(evidence.front().front().toString(), QStringLiteral("dock.positions"));

        // Another model load forgets the results.
        window.openPath(kDemo);
        QVERIFY(waitDone(done).ok);
        QTRY_VERIFY(!p->result(12));
    }
};

QTEST_MAIN(TestInsightsPanel)
#include "tst_insightspanel.moc"
