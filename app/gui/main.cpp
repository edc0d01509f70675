// kvscope: the desktop inspector. `kvscope` opens the bundled demo model (the welcome view
// when it is not installed); `kvscope --model PATH` opens a model (and `--prompt TEXT` runs a
// prompt on it once loaded); `--welcome` starts on the welcome view; `--tour` opens the guided
// tour, which also opens by itself until the user has closed it once.
#include "mainwindow.h"

#include "enginecontroller.h"
#include "sessionpanel.h"
#include "tour.h"
#include "util/demomodel.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("kvscope"));
    QApplication::setApplicationName(QStringLiteral("kvscope"));
    QApplication::setApplicationVersion(QStringLiteral(KVSCOPE_VERSION));
    QGuiApplication::setDesktopFileName(QStringLiteral("org.kvscope.kvscope"));
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/kvscope/icons/kvscope.svg")));

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("kvscope: inspect, snapshot and restore the KV cache of a transformer"));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption model(QStringList{QStringLiteral("m"), QStringLiteral("model")},
                                   QStringLiteral("Model file or folder to open."),
                                   QStringLiteral("path"));
    const QCommandLineOption device(QStringLiteral("device"),
                                    QStringLiteral("Device: cpu, cuda, cuda:N (default cpu)."),
                                    QStringLiteral("device"), QStringLiteral("cpu"));
    const QCommandLineOption prompt(QStringLiteral("prompt"),
                                    QStringLiteral("Run this prompt once the model is loaded."),
                                    QStringLiteral("text"));
    const QCommandLineOption screenshot(
        QStringLiteral("screenshot"),
        QStringLiteral("Save a PNG of the window once the model (and prompt) are done, then quit."),
        QStringLiteral("file"));
    const QCommandLineOption welcome(QStringLiteral("welcome"),
                                     QStringLiteral("Start on the welcome view (no model)."));
    const QCommandLineOption tour(QStringLiteral("tour"),
                                  QStringLiteral("Open the guided tour (Help > Guided tour)."));
    const QCommandLineOption hugePages(
        QStringLiteral("huge-pages"),
        QStringLiteral("Copy the weights out of the file mapping onto huge pages (as the CLI's "
                       "--huge-pages; the Huge pages box of Model and session)."));
    const QCommandLineOption cacheDtype(
        QStringLiteral("cache-dtype"),
        QStringLiteral("KV cache dtype: f32, f16 or bf16 (as the CLI's --cache-dtype; the KV "
                       "cache box of Model and session). Default: the compute dtype, f32 on "
                       "the CPU."),
        QStringLiteral("dtype"));
    const QCommandLineOption workspace(
        QStringLiteral("workspace"),
        QStringLiteral("Workspace folder: its states open into the fork tree and every state "
                       "made is saved there as it is made (default: the last one used, else "
                       "the user's data directory). Not opened for --screenshot unless given."),
        QStringLiteral("folder"));
    parser.addOptions(
        {model, device, prompt, screenshot, welcome, tour, hugePages, cacheDtype, workspace});
    parser.addPositionalArgument(QStringLiteral("path"), QStringLiteral("Model to open."),
                                 QStringLiteral("[path]"));
    parser.process(app);

    kvscope::gui::MainWindow window;
    window.restoreLayout();
    window.show();
    window.engine()->setWeightsOnHugePages(parser.isSet(hugePages));
    // Checked by core when the model loads (a bad value is the load's visible error).
    if (parser.isSet(cacheDtype))
        window.engine()->setCacheDtype(parser.value(cacheDtype));
    QString path = parser.value(model);
    if (path.isEmpty() && !parser.positionalArguments().isEmpty())
        path = parser.positionalArguments().first();
    // No model named: the bundled demo model, so that a newcomer sees kvscope work at once.
    if (path.isEmpty() && !parser.isSet(welcome))
        if (const auto demo = kvscope::findDemoModel())
            path = QString::fromStdString(*demo);
    // The tour greets a new user, and every start after until they close it (Help ▸ Guided
    // tour brings it back). Not on the welcome view or for a scripted screenshot.
    if (parser.isSet(tour) || (!parser.isSet(welcome) && !parser.isSet(screenshot) &&
                               !path.isEmpty() && kvscope::gui::MainWindow::tourWantedAtStart()))
        window.showTour();
    if (parser.isSet(prompt)) {
        window.sessionPanel()->setPromptText(parser.value(prompt));
        QObject::connect(
            window.engine(), &kvscope::widgets::EngineController::modelLoaded, &window,
            [&window] { window.sessionPanel()->runPrompt(); }, Qt::SingleShotConnection);
    }
    if (parser.isSet(screenshot)) {
        // Saved when the engine goes idle after the last posted operation (load, prompt).
        const QString file = parser.value(screenshot);
        QObject::connect(window.engine(), &kvscope::widgets::EngineController::busyChanged, &window,
                         [&window, file](bool busy) {
                             // --prompt is posted from modelLoaded, before the load ends: the first
                             // idle moment comes after both.
                             if (busy)
                                 return;
                             QTimer::singleShot(800, &window, [&window, file] {
                                 const bool ok = window.grab().save(file);
                                 QApplication::exit(ok ? 0 : 1);
                             });
                         });
    }
    if (!path.isEmpty())
        window.openPath(path, parser.value(device));
    // After the load, on the engine thread's queue: the states are verified against the model.
    if (parser.isSet(workspace))
        window.openWorkspaceFolder(parser.value(workspace));
    else if (!parser.isSet(screenshot))
        window.openWorkspaceFolder(kvscope::gui::MainWindow::startWorkspaceFolder());
    else if (parser.isSet(screenshot))
        // Nothing to load, so the engine never goes idle: take the picture of the welcome view.
        QTimer::singleShot(800, &window, [&window, file = parser.value(screenshot)] {
            QApplication::exit(window.grab().save(file) ? 0 : 1);
        });
    return app.exec();
}
