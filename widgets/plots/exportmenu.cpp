#include "exportmenu.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMainWindow>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QMenu>
#include <QMessageBox>
#include <QBuffer>
#include <QWidget>

#include "util/fileio.h"

#include <exception>

namespace kvscope::widgets {

QString writeExportFile(const QString& path, const QByteArray& bytes) {
    try {
        writeFileAtomic(path.toStdString(), bytes.constData(), std::size_t(bytes.size()));
        return {};
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
}

QString exportFolder() {
    const QString saved = QSettings().value(QStringLiteral("export/folder")).toString();
    if (!saved.isEmpty() && QFileInfo(saved).isDir())
        return saved;
    const QString docs = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    return !docs.isEmpty() && QFileInfo(docs).isDir() ? docs : QDir::homePath();
}

void rememberExportFolder(const QString& path) {
    if (!path.isEmpty())
        QSettings().setValue(QStringLiteral("export/folder"), QFileInfo(path).absolutePath());
}

QByteArray pngBytes(const QImage& image) {
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    if (image.isNull() || !image.save(&buffer, "PNG"))
        return {};
    return bytes;
}

void installExportMenu(QWidget* target, ExportHooks hooks) {
    target->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(
        target, &QWidget::customContextMenuRequested, target, [target, hooks](const QPoint& pos) {
            QMenu menu(target);
            menu.addActions(target->actions());
            if (!target->actions().isEmpty())
                menu.addSeparator();
            QAction* png = menu.addAction(QObject::tr("Export PNG…"));
            QAction* csv = menu.addAction(QObject::tr("Export CSV…"));
            png->setEnabled(bool(hooks.image));
            csv->setEnabled(bool(hooks.csv));
            QAction* chosen = menu.exec(target->mapToGlobal(pos));
            if (!chosen || (chosen != png && chosen != csv))
                return;
            const bool isPng = chosen == png;
            const QString path = QFileDialog::getSaveFileName(
                target, isPng ? QObject::tr("Export PNG") : QObject::tr("Export CSV"),
                QDir(exportFolder())
                    .filePath(hooks.baseName +
                              (isPng ? QStringLiteral(".png") : QStringLiteral(".csv"))),
                isPng ? QObject::tr("PNG images (*.png)") : QObject::tr("CSV files (*.csv)"));
            if (path.isEmpty())
                return;
            rememberExportFolder(path);
            const QByteArray bytes = isPng ? pngBytes(hooks.image()) : hooks.csv().toUtf8();
            const QString error = bytes.isEmpty() && isPng
                                      ? QObject::tr("%1: the image could not be encoded").arg(path)
                                      : writeExportFile(path, bytes);
            if (!error.isEmpty())
                QMessageBox::warning(target, QObject::tr("Export failed"), error);
            else if (auto* main = qobject_cast<QMainWindow*>(target->window()))
                main->statusBar()->showMessage(QObject::tr("Exported %1").arg(path), 8000);
        });
}

} // namespace kvscope::widgets
