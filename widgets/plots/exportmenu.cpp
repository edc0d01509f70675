#include "exportmenu.h"

#include <QFileDialog>
#include <QMenu>
#include <QMessageBox>
#include <QSaveFile>
#include <QWidget>

namespace kvscope::widgets {

bool writeTextFile(const QString& path, const QString& text) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text))
        return false;
    f.write(text.toUtf8());
    return f.commit();
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
            png->setEnabled(bool(hooks.png));
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
            const bool ok = isPng ? hooks.png(path) : writeTextFile(path, hooks.csv());
            if (!ok)
                QMessageBox::warning(target, QObject::tr("Export failed"),
                                     QObject::tr("Could not write %1.").arg(path));
        });
}

} // namespace kvscope::widgets
