// MainWindow: kvscope's QMainWindow. Owns the EngineController (engine thread) and the one
// Selection, puts every panel in a dock (layout saved on exit, restored on start, "Reset
// layout" returns to the default), shows the welcome view until a model is open, accepts
// dropped model files/folders, and keeps the status bar (device, model, cache length).
#pragma once

#include "statedata.h"

#include <QMainWindow>

#include <functional>

#include <memory>

class QLabel;
class QMenu;
class QDockWidget;

namespace kvscope::widgets {
class EngineController;
class Selection;
class SessionPanel;
class KvHeatmapPanel;
class AttentionPanel;
class PositionPanel;
class MaskPanel;
class LedgerController;
class ValidationPanel;
class SnapshotPanel;
class DriftPanel;
class DiffPanel;
class TransplantPanel;
class LensPanel;
class AttributionPanel;
class BranchesPanel;
class InductionPanel;
class InsightsPanel;
class SurvivalPanel;
} // namespace kvscope::widgets

namespace kvscope::gui {

class WelcomeView;
class Tour;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    widgets::EngineController* engine() const { return m_engine; }
    widgets::Selection* selection() const { return m_selection; }
    widgets::SessionPanel* sessionPanel() const { return m_session; }
    widgets::KvHeatmapPanel* kvPanel() const { return m_kv; }
    widgets::AttentionPanel* attentionPanel() const { return m_attention; }
    widgets::PositionPanel* positionPanel() const { return m_positions; }
    widgets::MaskPanel* maskPanel() const { return m_mask; }
    QList<QDockWidget*> docks() const { return m_docks; }
    QDockWidget* dock(const QString& objectName) const;
    widgets::LedgerController* ledger() const { return m_ledger; }
    widgets::ValidationPanel* validationPanel() const { return m_validation; }
    widgets::SnapshotPanel* snapshotPanel() const { return m_snapshots; }
    widgets::DriftPanel* driftPanel() const { return m_drift; }
    widgets::DiffPanel* diffPanel() const { return m_diff; }
    widgets::TransplantPanel* transplantPanel() const { return m_transplant; }
    widgets::LensPanel* lensPanel() const { return m_lens; }
    widgets::AttributionPanel* attributionPanel() const { return m_attribution; }
    widgets::BranchesPanel* branchesPanel() const { return m_branches; }
    widgets::InductionPanel* inductionPanel() const { return m_induction; }
    widgets::InsightsPanel* insightsPanel() const { return m_insights; }
    widgets::SurvivalPanel* survivalPanel() const { return m_survival; }
    // The guided tour (Help ▸ Guided tour), in its own dock.
    Tour* tour() const { return m_tour; }
    // Opens the tour (and remembers that it is wanted at the next start).
    void showTour();
    // Whether a start should open the tour: until the user closes it (its close button or the
    // View menu), remembered in QSettings; showTour() wants it again.
    static bool tourWantedAtStart();

    // Opens a model file/folder (or, once the ledger exists, a snapshot or a llama.cpp state) by
    // path. A llama.cpp state names no model: without one loaded, the user is asked for it and
    // the state opens once it has loaded.
    void openPath(const QString& path, const QString& device = {});
    // Opens a file the user chose as a state (the snapshot panel's Open…, State > Open
    // snapshot file): a .kvsnap or another engine's state as openPath does; anything else is
    // refused by name, never loaded as a model in place of the one the state is meant for.
    void openStatePath(const QString& path);
    void resetLayout();
    // Kept in QSettings between runs. restoreLayout() also places the window on its screen and
    // keeps it there: a first run gets a size that fits the screen's available area, a saved
    // geometry is shrunk to the screen, a saved dock layout that needs more than the screen
    // (saved on a bigger one) gives way to the default layout, and when panels appear later
    // (a model opened, the tour) the window is moved back inside the screen.
    void saveLayout();
    void restoreLayout();

    // ---- the workspace folder (ws::Workspace::openFolder): nothing a user makes is lost ----
    // Makes `folder` the workspace: its states open into the fork tree, and every state made
    // from now on is saved there as it is made. Remembered as the one to reopen at the next
    // start and in File > Recent workspaces.
    void openWorkspaceFolder(const QString& folder);
    // The folder a start opens: the last one used, else defaultWorkspaceFolder().
    static QString startWorkspaceFolder();
    static QString defaultWorkspaceFolder(); // under the user's data directory
    // Before the live session is dropped (Quit, another model): when a workspace folder is
    // open (the app opens one at start; a window without one keeps states in memory only and
    // does not ask) and the live session holds tokens no stored state has, the user chooses
    // Snapshot (it is captured first, then the action goes on), Discard or Cancel. True when the
    // action may go on. `afterSnapshot` runs once the capture has finished (Quit closes the window
    // then); empty: the action goes on at once, its own work queued after the capture.
    enum class LeaveChoice { Snapshot, Discard, Cancel };
    bool confirmLeaveLive(const QString& action, const std::function<void()>& afterSnapshot = {});
    // The one dialog that asks whether to keep the live session before something drops it
    // (Quit, another model, a tour step): `keep` snapshots it first (the default button),
    // `drop` goes on without, Cancel leaves everything as it was.
    static LeaveChoice askKeepSession(QWidget* parent, const QString& title, const QString& text,
                                      const QString& informative, const QString& keep,
                                      const QString& drop);
    // Tests answer the question themselves.
    void setLeaveConfirmation(std::function<LeaveChoice(const QString& action, qint64 tokens)> f) {
        m_confirmLeave = std::move(f);
    }

    // `window` moved and, if it must be, shrunk so that it lies inside `available`.
    static QRect fitRect(const QRect& window, const QRect& available);

protected:
    bool event(QEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    static constexpr int kLayoutVersion = 1; // saveState/restoreState version
    QDockWidget* addPanel(QWidget* panel, const QString& title, const QString& objectName,
                          Qt::DockWidgetArea area);
    void createMenus();
    void createStatusBar();
    void addRecent(const QString& key, const QString& path);
    QStringList recent(const QString& key) const;
    void updateWelcome();
    void showWorkspace(bool show);
    void createStatePanels();
    void createStateMenu(QMenu* state);
    // Opens an experiment's evidence (stored by req::StoreEvidence) in the panel
    // it names, with its states picked and its focus selected.
    void showEvidence(const widgets::EvidenceViewPtr& evidence);
    QRect availableGeometry() const;
    // Whether the docks as they are now (with the workspace shown) fit the screen.
    // The screen's available area less the window's frame (none before it is shown).
    QRect roomForContents() const;
    bool docksFitScreen();
    // Once visible with the default layout: the right column's height half to the KV heatmaps'
    // tab group, half to the Attention row.
    void shareDefaultHeights();
    void fitToScreen();

    widgets::EngineController* m_engine;
    widgets::Selection* m_selection;
    WelcomeView* m_welcome;
    widgets::SessionPanel* m_session;
    widgets::KvHeatmapPanel* m_kv;
    widgets::AttentionPanel* m_attention;
    widgets::PositionPanel* m_positions;
    widgets::MaskPanel* m_mask;
    widgets::LedgerController* m_ledger = nullptr;
    widgets::ValidationPanel* m_validation = nullptr;
    widgets::SnapshotPanel* m_snapshots = nullptr;
    widgets::DriftPanel* m_drift = nullptr;
    widgets::DiffPanel* m_diff = nullptr;
    widgets::TransplantPanel* m_transplant = nullptr;
    widgets::LensPanel* m_lens = nullptr;
    widgets::AttributionPanel* m_attribution = nullptr;
    widgets::BranchesPanel* m_branches = nullptr;
    widgets::InductionPanel* m_induction = nullptr;
    widgets::InsightsPanel* m_insights = nullptr;
    widgets::SurvivalPanel* m_survival = nullptr;
    QLabel* m_light = nullptr;
    Tour* m_tour = nullptr;
    widgets::EvidenceViewPtr m_evidence; // stored, shown when its operation has finished
    QList<QDockWidget*> m_docks;
    QByteArray m_defaultState;
    bool m_keepOnScreen = false; // set by restoreLayout()
    // The default layout is in use and its right column not yet shared out (shareDefaultHeights).
    bool m_shareDefaultHeights = false;
    QLabel* m_deviceLabel;
    QLabel* m_modelLabel;
    QLabel* m_lengthLabel;
    QLabel* m_busyLabel;
    QLabel* m_workspaceLabel;
    QString m_pendingState; // a llama.cpp state waiting for the model the user chose
    std::function<LeaveChoice(const QString&, qint64)> m_confirmLeave;
    std::function<void()> m_afterSnapshot; // confirmLeaveLive's, when its capture finishes
    bool m_leaving = false;                // the user chose; closing without asking again
    QString m_workspaceFolder;             // empty: states live in memory only
};

} // namespace kvscope::gui
