// Shared by the GUI suites (tst_gui, tst_tour, tst_guiflows, tst_guiuser, tst_layout, tst_views,
// tst_survivalpanel, tst_insightspanel).
#pragma once

#include "answer.h"
#include "engineworker.h" // OperationResult
#include "viewdata.h"     // CacheView

#include <QByteArray>
#include <QCoreApplication>
#include <QDir>
#include <QTest>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QThread>

#include <algorithm>
#include <memory>
#include <vector>

namespace guitest {

// The answers of type View that a spy on LedgerController::answered caught, in order.
template <class View> std::vector<std::shared_ptr<const View>> answers(const QSignalSpy& spy) {
    std::vector<std::shared_ptr<const View>> out;
    for (const QList<QVariant>& args : spy)
        if (auto v = args.first().value<kvscope::widgets::Answer>().as<View>())
            out.push_back(std::move(v));
    return out;
}

// The next operationFinished's typed result ({kind, ok, message, nodeId}); ok = false with a
// "timed out" message when none came.
inline kvscope::widgets::OperationResult waitDone(QSignalSpy& spy, int timeoutMs = 120000) {
    if (spy.isEmpty() && !spy.wait(timeoutMs))
        return {QString(), false, QStringLiteral("timed out"), QString()};
    return spy.takeFirst().first().value<kvscope::widgets::OperationResult>();
}

// Runs step `step` of the guided tour (kvscope::gui::Tour; a template, so that suites without
// the app need not include it) and waits up to three minutes for its stepFinished. Empty when
// step `step` finished well; else what went wrong, named by the step's title.
template <class Tour> QString runTourStep(Tour* tour, int step) {
    QSignalSpy finished(tour, &Tour::stepFinished);
    tour->runStep(step);
    const QString title = QStringLiteral("step %1 (%2)").arg(step + 1).arg(tour->stepTitle(step));
    if (finished.isEmpty() && !finished.wait(180000))
        return title + QStringLiteral(" did not finish in 3 minutes");
    const QList<QVariant> args = finished.first();
    if (args.value(0).toInt() != step)
        return title + QStringLiteral(" reported step %1").arg(args.value(0).toInt() + 1);
    if (!args.value(1).toBool())
        return title + QStringLiteral(" failed");
    return {};
}

// The window's engine leaves a core to the UI (cores - 1 threads); the CLI runs a test compares
// it with must use as many, or their sums differ in the last bits.
inline void matchWindowEngineThreads() {
    if (qEnvironmentVariableIsEmpty("KVSCOPE_THREADS"))
        qputenv("KVSCOPE_THREADS",
                QByteArray::number(std::max(1, QThread::idealThreadCount() - 1)));
}

// What every window suite's initTestCase does: the engine's threads matched to the CLI's
// (matchWindowEngineThreads), QSettings in a test location under the suite's `name`, and with
// `clearSettings` emptied (a layout or tour state saved by an earlier run would leak in).
inline void setUpApplication(const QString& name, bool clearSettings) {
    matchWindowEngineThreads();
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("kvscope-test"));
    QCoreApplication::setApplicationName(name);
    if (clearSettings)
        QSettings().clear();
}

// Where the suites write the screenshots a human looks at: <build>/screenshots.
inline QString screenshotDir() {
    const QString dir = QStringLiteral(KVSCOPE_BINARY_DIR "/screenshots");
    QDir().mkpath(dir);
    return dir;
}

// A live session's view is self-consistent: one token, position and mask entry per cached
// slot, positions 0..n-1, the next position after the last, key norms for every layer.
inline void checkConsistent(const kvscope::widgets::CacheView& s) {
    QCOMPARE(int64_t(s.tokens.size()), s.length);
    QCOMPARE(s.nextPosition, s.length);
    QCOMPARE(int64_t(s.positions.size()), s.length);
    for (int64_t i = 0; i < s.length; ++i)
        QCOMPARE(s.positions[size_t(i)], i);
    QCOMPARE(int64_t(s.mask.size()), s.length);
    QCOMPARE(int(s.keyNorms.size()), s.length ? s.layers : 0);
}

// What a failed operation reports, as long as a load error naming a long path (three times):
// the message a panel must show without growing (Model and session at 1366x768).
inline kvscope::widgets::OperationResult longFailure() {
    kvscope::widgets::OperationResult failed;
    failed.kind = QStringLiteral("generate");
    failed.ok = false;
    failed.message = QStringLiteral("/some/folder/%1.gguf: header field dim = 1574218895 is "
                                    "outside 1..65536; ")
                         .arg(QString(300, QLatin1Char('x')))
                         .repeated(3);
    return failed;
}

} // namespace guitest
