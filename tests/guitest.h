// Shared by the GUI suites that drive the engine (tst_gui, tst_guiflows, tst_views).
#pragma once

#include "engineworker.h" // OperationResult

#include <QByteArray>
#include <QSignalSpy>
#include <QThread>

#include <algorithm>

namespace guitest {

// The next operationFinished's typed result ({kind, ok, message, nodeId}); ok = false with a
// "timed out" message when none came.
inline kvscope::widgets::OperationResult waitDone(QSignalSpy& spy, int timeoutMs = 120000) {
    if (spy.isEmpty() && !spy.wait(timeoutMs))
        return {QString(), false, QStringLiteral("timed out"), QString()};
    return spy.takeFirst().first().value<kvscope::widgets::OperationResult>();
}

// The window's engine leaves a core to the UI (cores - 1 threads); the CLI runs a test compares
// it with must use as many, or their sums differ in the last bits.
inline void matchWindowEngineThreads() {
    if (qEnvironmentVariableIsEmpty("KVSCOPE_THREADS"))
        qputenv("KVSCOPE_THREADS",
                QByteArray::number(std::max(1, QThread::idealThreadCount() - 1)));
}

} // namespace guitest
