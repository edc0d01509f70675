// Shared by tst_guiflows and tst_guiuser: the main window on stories260K, driven through its
// controllers, and the CLI's JSON to hold it against.
#pragma once

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

#include <QAbstractItemView>
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

namespace guiflows {

inline const QString kModel = QStringLiteral("models/stories260K/stories260K.bin");
inline const QString kOther = QStringLiteral("models/aidreams260K/aidreams260K.bin");

#define DONE_OK(spy)                                                                               \
    do {                                                                                           \
        const OperationResult r_ = waitDone(spy);                                                  \
        QVERIFY2(r_.ok, qPrintable(r_.kind + QStringLiteral(": ") + r_.message));                  \
    } while (0)

inline nlohmann::json cliJson(const QStringList& args) {
    QProcess p;
    p.start(QStringLiteral(KVSCOPE_CLI), args);
    p.waitForFinished(600000);
    return nlohmann::json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
}

inline QStringList modelArgs() {
    return {QStringLiteral("-m"), QString::fromStdString(testdata::path(kModel))};
}

using guitest::screenshotDir;

// The ids of the ledger's nodes, in creation order.
inline QStringList nodeIds(const LedgerController& ledger) {
    QStringList ids;
    if (ledger.ledger())
        for (const auto& n : ledger.ledger()->nodes)
            ids << n.id;
    return ids;
}

inline const SnapshotNode* node(const LedgerController& ledger, const QString& id) {
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

// Loads `model` into `s` and runs `prompt` (greedy, `steps` tokens).
inline void openAndRun(Session& s, const QString& model, const QString& prompt, int steps) {
    s.window.openPath(QString::fromStdString(testdata::path(model)));
    DONE_OK(s.done);
    PromptRequest r;
    r.prompt.text = prompt.toStdString();
    r.steps = steps;
    s.window.engine()->runPrompt(r);
    DONE_OK(s.done);
}

inline QString snapshot(Session& s) {
    s.ledger()->request(req::Snapshot{});
    const OperationResult r = waitDone(s.done);
    if (!r.ok || r.nodeId.isEmpty())
        qWarning("snapshot failed: %s", qPrintable(r.message));
    return r.nodeId;
}

// A 12-token run on `model` in a 1366x768 window, snapshotted (the clean state), and that
// snapshot with layer 2's K/V corrupted (the fault lab's corrupt-layer, through the Fault
// menu's call): {clean id, faulty id}; a faulty id is empty when the fault failed.
inline std::pair<QString, QString> cleanAndCorrupted(Session& s, const QString& model) {
    s.window.resize(1366, 768);
    s.window.show();
    openAndRun(s, model, QStringLiteral("Once upon a time"), 12);
    const QString clean = snapshot(s);
    s.window.snapshotPanel()->selectId(clean);
    s.window.snapshotPanel()->injectFault(QStringLiteral("corrupt-layer"));
    const OperationResult fault = waitDone(s.done);
    if (!fault.ok)
        qWarning("corrupt-layer failed: %s", qPrintable(fault.message));
    return {clean, fault.ok ? fault.nodeId : QString()};
}

} // namespace guiflows
