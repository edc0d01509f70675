// WelcomeView: what the main window shows before a model is open — open buttons, the recent
// models (double-click to open) and a hint that model files, folders and snapshots can be
// dropped on the window.
#pragma once

#include <QWidget>

class QListWidget;

namespace kvscope::gui {

class WelcomeView : public QWidget {
    Q_OBJECT
public:
    explicit WelcomeView(QWidget* parent = nullptr);
    void setRecent(const QStringList& models, const QStringList& snapshots);

signals:
    void openModelRequested();
    void openFolderRequested();
    void openPathRequested(const QString& path);

private:
    QListWidget* m_models;
    QListWidget* m_snapshots;
};

} // namespace kvscope::gui
