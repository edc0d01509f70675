// Running a GUI test on a screen of a chosen size: the offscreen platform takes its screens
// from a JSON file, so a test that needs, say, 1366x768 re-runs its own binary (that one test
// function, that data row) with such a file and reads the child's verdict. Shared by
// tst_layout and tst_guiuser.
#pragma once

#include <QCoreApplication>
#include <QFile>
#include <QProcess>
#include <QSize>
#include <QString>
#include <QTemporaryDir>

namespace testscreen {

struct ChildRun {
    bool ok = false; // exited normally with 0
    QString output;  // stdout and stderr together
};

// Runs `testFunction` (with ":tag" for a data row) of this binary on one offscreen screen of
// `size`; the child sees KVSCOPE_CHILD_SCREEN set, so it never re-launches itself.
inline ChildRun runOnScreen(QSize size, const QString& testFunction) {
    QTemporaryDir dir;
    QFile config(dir.filePath(QStringLiteral("screen.json")));
    if (!config.open(QIODevice::WriteOnly))
        return {false, QStringLiteral("cannot write ") + config.fileName()};
    config.write(QStringLiteral(R"({"screens": [{"name": "test", "x": 0, "y": 0,
        "width": %1, "height": %2, "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})")
                     .arg(size.width())
                     .arg(size.height())
                     .toUtf8());
    config.close();
    QProcess child;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"),
               QStringLiteral("offscreen:configfile=") + config.fileName());
    env.insert(QStringLiteral("KVSCOPE_CHILD_SCREEN"),
               QStringLiteral("%1x%2").arg(size.width()).arg(size.height()));
    child.setProcessEnvironment(env);
    child.setProcessChannelMode(QProcess::MergedChannels);
    child.start(QCoreApplication::applicationFilePath(), {testFunction});
    if (!child.waitForFinished(900000))
        return {false, QStringLiteral("the child did not finish")};
    return {child.exitStatus() == QProcess::NormalExit && child.exitCode() == 0,
            QString::fromUtf8(child.readAll())};
}

// True inside such a child.
inline bool inChild() {
    return !qEnvironmentVariableIsEmpty("KVSCOPE_CHILD_SCREEN");
}

} // namespace testscreen
