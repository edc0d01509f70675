// Export actions shared by every panel: a context menu with "Export PNG…" and "Export CSV…".
// The panel supplies what to draw (an image) and what to write (CSV text); this asks for a
// file name and writes through core's one output-path policy (writeFileAtomic: a regular file
// replaced atomically, a symlink's target written, a device/FIFO/folder refused), reporting
// failures in a message box.
#pragma once

#include <QImage>
#include <QString>

#include <functional>

class QWidget;

namespace kvscope::widgets {

struct ExportHooks {
    QString baseName;              // suggested file name without suffix
    std::function<QImage()> image; // what "Export PNG…" writes
    std::function<QString()> csv;  // the CSV text
};

// Gives `target` a custom context menu with the export actions (and any actions already added
// to `target` with QWidget::addAction, listed first).
void installExportMenu(QWidget* target, ExportHooks hooks);
// Writes bytes through core's writeFileAtomic. Returns an empty string, or the error (which
// names the path and why, e.g. "it is a character device").
QString writeExportFile(const QString& path, const QByteArray& bytes);
// The PNG encoding of `image` (empty when it cannot be encoded).
QByteArray pngBytes(const QImage& image);
// Where save/export dialogs start: the folder of the last file exported or saved (settings key
// "export/folder"), else the user's documents folder, else home — never the folder the program
// was started from. rememberExportFolder() records the folder of a chosen path.
QString exportFolder();
void rememberExportFolder(const QString& path);

} // namespace kvscope::widgets
