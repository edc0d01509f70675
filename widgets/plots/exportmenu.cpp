#include "exportmenu.h"

#include <QFileDialog>
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
                hooks.baseName + (isPng ? QStringLiteral(".png") : QStringLiteral(".csv")),
                isPng ? QObject::tr("PNG images (*.png)") : QObject::tr("CSV files (*.csv)"));
            if (path.isEmpty())
                return;
            const QByteArray bytes = isPng ? pngBytes(hooks.image()) : hooks.csv().toUtf8();
            const QString error = bytes.isEmpty() && isPng
                                      ? QObject::tr("%1: the image could not be encoded").arg(path)
                                      : writeExportFile(path, bytes);
            if (!error.isEmpty())
                QMessageBox::warning(target, QObject::tr("Export failed"), error);
        });
}

} // namespace kvscope::widgets
