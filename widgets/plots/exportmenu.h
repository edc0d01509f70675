// Export actions shared by every panel: a context menu with "Export PNG…" and "Export CSV…".
// The panel supplies how to render (a PNG writer) and what to write (CSV text); this only
// asks for a file name and reports failures in a message box.
#pragma once

#include <QString>

#include <functional>

class QWidget;

namespace kvscope::widgets {

struct ExportHooks {
    QString baseName;                             // suggested file name without suffix
    std::function<bool(const QString& path)> png; // writes a PNG; false on failure
    std::function<QString()> csv;                 // the CSV text
};

// Gives `target` a custom context menu with the export actions (and any actions already added
// to `target` with QWidget::addAction, listed first).
void installExportMenu(QWidget* target, ExportHooks hooks);
// Writes text to a file atomically enough for an export (QSaveFile). False on failure.
bool writeTextFile(const QString& path, const QString& text);

} // namespace kvscope::widgets
