#include "mainwindow.h"

#include "tour.h"
#include "welcomeview.h"

#include "attentionpanel.h"
#include "enginecontroller.h"
#include "kvheatmappanel.h"
#include "maskpanel.h"
#include "positionpanel.h"
#include "selection.h"
#include "sessionpanel.h"
#include "diffpanel.h"
#include "driftpanel.h"
#include "inductionpanel.h"
#include "insightspanel.h"
#include "ledgercontroller.h"
#include "snapshotpanel.h"
#include "survivalpanel.h"
#include "transplantpanel.h"
#include "lenspanel.h"
#include "attributionpanel.h"
#include "branchespanel.h"
#include "validationpanel.h"
#include "violationmodel.h"

#include "formats/llamacppstate.h"
#include "state/interop/hfstate.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QLayout>
#include <QDragEnterEvent>
#include <QDir>
#include <QFileDialog>
#include <QTabBar>
#include <QPushButton>
#include <QStandardPaths>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QScreen>
#include <QSettings>
#include <QStatusBar>
#include <QTimer>

#include <algorithm>

namespace kvscope::gui {

namespace {
const QString kRecentModels = QStringLiteral("recent/models");
const QString kRecentSnapshots = QStringLiteral("recent/snapshots");
const QString kRecentWorkspaces = QStringLiteral("recent/workspaces");
// Set when the user closes the guided tour; cleared when they start it again.
const QString kTourClosed = QStringLiteral("tour/closed");

bool looksLikeModel(const QFileInfo& info) {
    if (info.isDir())
        return true;
    const QString suffix = info.suffix().toLower();
    return suffix == QLatin1String("bin") || suffix == QLatin1String("gguf") ||
           suffix == QLatin1String("safetensors") ||
           info.fileName() == QLatin1String("config.json");
}
} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_engine(new widgets::EngineController(this)),
      m_selection(new widgets::Selection(this)) {
    setWindowTitle(tr("kvscope"));
    setWindowIcon(QIcon(QStringLiteral(":/kvscope/icons/kvscope.svg")));
    setAcceptDrops(true);
    setDockNestingEnabled(true);
    setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);

    m_welcome = new WelcomeView(this);
    setCentralWidget(m_welcome);

    m_session = new widgets::SessionPanel(m_engine, m_selection, this);
    m_kv = new widgets::KvHeatmapPanel(m_engine, m_selection, this);
    m_attention = new widgets::AttentionPanel(m_engine, m_selection, this);
    m_positions = new widgets::PositionPanel(m_engine, m_selection, this);
    m_mask = new widgets::MaskPanel(m_engine, m_selection, this);
    // Default layout: session on the left; KV heatmaps over attention | positions+mask.
    auto* session = addPanel(m_session, tr("Model and session"), QStringLiteral("dock.session"),
                             Qt::LeftDockWidgetArea);
    auto* kv =
        addPanel(m_kv, tr("KV heatmaps"), QStringLiteral("dock.kv"), Qt::RightDockWidgetArea);
    auto* attention = addPanel(m_attention, tr("Attention"), QStringLiteral("dock.attention"),
                               Qt::RightDockWidgetArea);
    auto* positions = addPanel(m_positions, tr("Position alignment"),
                               QStringLiteral("dock.positions"), Qt::RightDockWidgetArea);
    auto* mask = addPanel(m_mask, tr("Mask"), QStringLiteral("dock.mask"), Qt::RightDockWidgetArea);
    splitDockWidget(kv, attention, Qt::Vertical);
    splitDockWidget(attention, positions, Qt::Horizontal);
    tabifyDockWidget(positions, mask);
    positions->raise();
    resizeDocks({session, kv}, {560, 1040}, Qt::Horizontal);
    resizeDocks({kv, attention}, {430, 520}, Qt::Vertical);
    createStatePanels();

    createMenus();
    createStatusBar();
    m_defaultState = saveState(kLayoutVersion);
    showWorkspace(false);

    connect(m_welcome, &WelcomeView::openModelRequested, m_session,
            &widgets::SessionPanel::openModelDialog);
    connect(m_welcome, &WelcomeView::openFolderRequested, m_session,
            &widgets::SessionPanel::openFolderDialog);
    connect(m_welcome, &WelcomeView::openPathRequested, this,
            [this](const QString& p) { openPath(p); });
    connect(
        m_engine, &widgets::EngineController::modelLoaded, this,
        [this](const widgets::ModelInfo& info) {
            addRecent(kRecentModels, info.path);
            setWindowTitle(tr("%1 — kvscope").arg(info.name));
            m_deviceLabel->setText(
                tr("Device: %1 (%2, KV cache %3)").arg(info.device, info.dtype, info.cacheDtype));
            m_modelLabel->setText(tr("Model: %1").arg(info.name));
            m_modelLabel->setToolTip(info.path);
            showWorkspace(true);
        });
    // A llama.cpp state waiting for its model opens once the load has settled, after the new
    // live session's own validation, so that the Validation panel ends on the state's verdict.
    connect(m_engine, &widgets::EngineController::busyChanged, this, [this](bool busy) {
        if (busy || m_pendingState.isEmpty() || !m_ledger || !m_engine->hasModel())
            return;
        QTimer::singleShot(0, this, [this] {
            if (m_pendingState.isEmpty())
                return;
            m_ledger->request(widgets::req::OpenFile{std::exchange(m_pendingState, QString())});
            dock(QStringLiteral("dock.validation"))->raise();
        });
    });
    // A model that failed to load takes the llama.cpp state waiting for it along.
    connect(m_engine, &widgets::EngineController::operationFinished, this,
            [this](const widgets::OperationResult& r) {
                if (r.kind == QLatin1String("load") && !r.ok)
                    m_pendingState.clear();
            });
    connect(m_engine, &widgets::EngineController::stateChanged, this,
            [this](const widgets::CacheViewPtr& s) {
                m_selection->setBounds(s ? s->layers : 0, s ? s->kvHeads : 0, s ? s->length : 0);
                m_lengthLabel->setText(
                    s ? tr("Cache: %1 / %2").arg(s->length).arg(s->model.maxContext) : QString());
            });
    connect(m_engine, &widgets::EngineController::busyChanged, this,
            [this](bool busy, const QString& what) {
                m_busyLabel->setText(busy ? what + QStringLiteral("…") : QString());
            });
    // Asked before any model load drops the live session (menus, recent models, the session
    // panel): the capture, when chosen, is queued ahead of the load.
    m_engine->setLoadGuard([this] { return confirmLeaveLive(tr("Open another model")); });
    connect(m_engine, &widgets::EngineController::operationFinished, this,
            [this](const widgets::OperationResult& r) {
                if (r.kind == QLatin1String("snapshot") && m_afterSnapshot) {
                    const auto next = std::exchange(m_afterSnapshot, {});
                    if (r.ok)
                        QTimer::singleShot(0, this, next);
                    else
                        QMessageBox::warning(this, tr("Snapshot failed"),
                                             tr("%1\nNothing was closed.").arg(r.message));
                }
                // A state not saved to the workspace folder, or a workspace that did not open
                // whole: said where it cannot be missed.
                if (!r.ok && (r.kind == QLatin1String("workspace") ||
                              r.message.contains(tr("not saved to the workspace folder"))))
                    QMessageBox::warning(this, tr("Workspace"), r.message);
                statusBar()->showMessage(r.message, 8000);
                if (!r.ok && r.kind == QLatin1String("load"))
                    QMessageBox::warning(this, tr("Could not load the model"), r.message);
            });
    updateWelcome();
    // The docks are polished now, while the welcome view shows: on the first model load,
    // showing a workspace never polished was ~25 ms of the UI thread (kvscope-bench-gui).
    for (QDockWidget* dock : m_docks)
        dock->ensurePolished();
}

MainWindow::~MainWindow() = default;

QDockWidget* MainWindow::addPanel(QWidget* panel, const QString& title, const QString& objectName,
                                  Qt::DockWidgetArea area) {
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(objectName);
    dock->setWidget(panel);
    // The View menu lists the dock by its title, where "&" would mark a mnemonic ("Model &
    // session" read "Model _session"): a literal ampersand there, also after a retitle
    // (QDockWidget sets the action's text first, then emits windowTitleChanged).
    auto literalTitle = [dock](const QString& t) {
        dock->toggleViewAction()->setText(QString(t).replace(QLatin1Char('&'), "&&"));
    };
    literalTitle(title);
    connect(dock, &QWidget::windowTitleChanged, dock, literalTitle);
    dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable |
                      QDockWidget::DockWidgetClosable);
    addDockWidget(area, dock);
    m_docks << dock;
    return dock;
}

void MainWindow::createMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open model file…"), QKeySequence::Open, m_session,
                    &widgets::SessionPanel::openModelDialog);
    file->addAction(tr("Open model &folder…"), QKeySequence(tr("Ctrl+Shift+O")), m_session,
                    &widgets::SessionPanel::openFolderDialog);
    QMenu* recentMenu = file->addMenu(tr("Recent models"));
    connect(recentMenu, &QMenu::aboutToShow, this, [this, recentMenu] {
        recentMenu->clear();
        for (const QString& p : recent(kRecentModels))
            recentMenu->addAction(p, this, [this, p] { openPath(p); });
        if (recentMenu->isEmpty())
            recentMenu->addAction(tr("(none)"))->setEnabled(false);
    });
    file->addSeparator();
    // Workspaces: the folder every state is saved into as it is made.
    file->addAction(tr("&New workspace…"), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(
            this, tr("New workspace: choose or create an empty folder"),
            QFileInfo(startWorkspaceFolder()).absolutePath());
        if (dir.isEmpty())
            return;
        if (!QDir(dir).isEmpty()) {
            QMessageBox::warning(this, tr("Not an empty folder"),
                                 tr("%1 is not empty. A new workspace needs an empty folder; "
                                    "to open an existing one, use File > Open workspace.")
                                     .arg(dir));
            return;
        }
        openWorkspaceFolder(dir);
    });
    file->addAction(tr("Open &workspace…"), this, [this] {
        const QString dir =
            QFileDialog::getExistingDirectory(this, tr("Open workspace"), startWorkspaceFolder());
        if (!dir.isEmpty())
            openWorkspaceFolder(dir);
    });
    QMenu* recentWorkspaces = file->addMenu(tr("Recent workspaces"));
    connect(recentWorkspaces, &QMenu::aboutToShow, this, [this, recentWorkspaces] {
        recentWorkspaces->clear();
        for (const QString& p : recent(kRecentWorkspaces))
            recentWorkspaces->addAction(p, this, [this, p] { openWorkspaceFolder(p); });
        if (recentWorkspaces->isEmpty())
            recentWorkspaces->addAction(tr("(none)"))->setEnabled(false);
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* session = menuBar()->addMenu(tr("&Session"));
    session->addAction(tr("&Run prompt"), QKeySequence(tr("Ctrl+Return")), m_session,
                       &widgets::SessionPanel::runPrompt);
    session->addAction(tr("&Step one token"), QKeySequence(Qt::Key_F10), m_session,
                       &widgets::SessionPanel::step);
    session->addAction(tr("&Generate"), QKeySequence(Qt::Key_F5), m_session,
                       &widgets::SessionPanel::generateMore);
    session->addAction(tr("S&top"), QKeySequence(Qt::Key_Escape), m_session,
                       &widgets::SessionPanel::stop);
    session->addSeparator();
    session->addAction(tr("&Reset session"), QKeySequence(tr("Ctrl+Shift+R")), this,
                       [this] { m_engine->resetSession(); });

    QMenu* state = menuBar()->addMenu(tr("S&tate"));
    state->setObjectName(QStringLiteral("menu.state"));
    createStateMenu(state);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    for (QDockWidget* dock : m_docks)
        view->addAction(dock->toggleViewAction());
    view->addSeparator();
    view->addAction(tr("&Reset layout"), QKeySequence(tr("Ctrl+Shift+L")), this,
                    &MainWindow::resetLayout);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->setObjectName(QStringLiteral("menu.help"));
    help->addAction(tr("Guided &tour"), QKeySequence(Qt::Key_F1), this, &MainWindow::showTour);
    help->addAction(tr("&About kvscope"), this, [this] {
        QMessageBox::about(this, tr("About kvscope"),
                           tr("<b>kvscope</b> %1<br>RenderDoc for the KV cache: inspect, snapshot "
                              "and restore the state a transformer needs to continue a generation.")
                               .arg(QApplication::applicationVersion()));
    });
}

QDockWidget* MainWindow::dock(const QString& objectName) const {
    for (QDockWidget* d : m_docks)
        if (d->objectName() == objectName)
            return d;
    return nullptr;
}

void MainWindow::createStatePanels() {
    m_ledger = new widgets::LedgerController(m_engine, this);
    m_validation = new widgets::ValidationPanel(m_ledger, m_selection, this);
    m_snapshots = new widgets::SnapshotPanel(m_engine, m_ledger, m_selection, this);
    connect(m_snapshots, &widgets::SnapshotPanel::openRequested, this,
            [this](const QString& p) { openStatePath(p); });
    m_drift = new widgets::DriftPanel(m_ledger, this);
    m_diff = new widgets::DiffPanel(m_ledger, m_selection, this);
    auto* snapshots = addPanel(m_snapshots, tr("Snapshots · fork tree"),
                               QStringLiteral("dock.snapshots"), Qt::LeftDockWidgetArea);
    auto* validation = addPanel(m_validation, tr("Validation"), QStringLiteral("dock.validation"),
                                Qt::LeftDockWidgetArea);
    auto* drift =
        addPanel(m_drift, tr("Logit drift"), QStringLiteral("dock.drift"), Qt::RightDockWidgetArea);
    auto* diff = addPanel(m_diff, tr("Diff"), QStringLiteral("dock.diff"), Qt::RightDockWidgetArea);
    m_lens = new widgets::LensPanel(m_ledger, m_selection, this);
    auto* lens =
        addPanel(m_lens, tr("Logit lens"), QStringLiteral("dock.lens"), Qt::RightDockWidgetArea);
    m_attribution = new widgets::AttributionPanel(m_ledger, m_selection, this);
    auto* attribution = addPanel(m_attribution, tr("Attribution"),
                                 QStringLiteral("dock.attribution"), Qt::RightDockWidgetArea);
    m_branches = new widgets::BranchesPanel(m_ledger, m_selection, this);
    auto* branches = addPanel(m_branches, tr("Branches"), QStringLiteral("dock.branches"),
                              Qt::RightDockWidgetArea);
    m_transplant = new widgets::TransplantPanel(m_engine, m_ledger, this);
    auto* transplant = addPanel(m_transplant, tr("Transplant"), QStringLiteral("dock.transplant"),
                                Qt::RightDockWidgetArea);
    m_induction = new widgets::InductionPanel(m_engine, m_ledger, m_selection, this);
    auto* induction = addPanel(m_induction, tr("Induction"), QStringLiteral("dock.induction"),
                               Qt::RightDockWidgetArea);
    m_survival = new widgets::SurvivalPanel(m_engine, m_ledger, this);
    auto* survival = addPanel(m_survival, tr("Survival"), QStringLiteral("dock.survival"),
                              Qt::RightDockWidgetArea);
    // The insights browser: a tab beside the model and session (the tallest slot on the left,
    // where the guided tour also goes).
    m_insights = new widgets::InsightsPanel(m_engine, m_ledger, this);
    auto* insights = addPanel(m_insights, tr("Insights"), QStringLiteral("dock.insights"),
                              Qt::LeftDockWidgetArea);
    connect(m_insights, &widgets::InsightsPanel::evidenceRequested, this,
            [this](const QString& id) {
                if (QDockWidget* d = dock(id)) {
                    d->show();
                    d->raise();
                }
            });
    connect(m_engine, &widgets::EngineController::modelLoaded, m_insights,
            &widgets::InsightsPanel::clearResults);
    // Comparisons shown were made with the model before: not this one's.
    connect(m_engine, &widgets::EngineController::modelLoaded, m_diff, &widgets::DiffPanel::clear);
    connect(m_engine, &widgets::EngineController::modelLoaded, m_drift,
            &widgets::DriftPanel::clear);
    connect(m_engine, &widgets::EngineController::modelLoaded, m_lens, &widgets::LensPanel::clear);
    connect(m_engine, &widgets::EngineController::modelLoaded, m_attribution,
            &widgets::AttributionPanel::clear);
    connect(m_engine, &widgets::EngineController::modelLoaded, m_branches,
            &widgets::BranchesPanel::clear);
    // The evidence is shown once its operation has finished: by then every panel follows the
    // restored state and the fork tree lists the stored ones.
    m_ledger->onAnswer<widgets::EvidenceView>(
        this, [this](const widgets::EvidenceViewPtr& e) { m_evidence = e; });
    connect(m_engine, &widgets::EngineController::operationFinished, this,
            [this](const widgets::OperationResult& r) {
                if (r.kind == QLatin1String("evidence") && m_evidence)
                    showEvidence(std::exchange(m_evidence, nullptr));
            });
    splitDockWidget(dock(QStringLiteral("dock.session")), snapshots, Qt::Vertical);
    tabifyDockWidget(dock(QStringLiteral("dock.session")), insights);
    dock(QStringLiteral("dock.session"))->raise();
    tabifyDockWidget(snapshots, validation);
    snapshots->raise();
    QDockWidget* positions = dock(QStringLiteral("dock.positions"));
    tabifyDockWidget(positions, drift);
    // Diff paints two heatmaps side by side like the KV panel: it shares the KV panel's width
    // (a tab there) rather than widening the tab group beside Attention past a laptop screen.
    tabifyDockWidget(dock(QStringLiteral("dock.kv")), diff);
    tabifyDockWidget(dock(QStringLiteral("dock.kv")), lens);
    tabifyDockWidget(dock(QStringLiteral("dock.kv")), attribution);
    tabifyDockWidget(dock(QStringLiteral("dock.kv")), branches);
    dock(QStringLiteral("dock.kv"))->raise();
    tabifyDockWidget(positions, transplant);
    tabifyDockWidget(positions, induction);
    tabifyDockWidget(positions, survival);
    positions->raise();
    resizeDocks({dock(QStringLiteral("dock.session")), snapshots}, {600, 340}, Qt::Vertical);

    // A head chosen in the Induction panel: its layer is already the selection's; the
    // Attention panel (beside this tab group) shows that query head.
    connect(m_induction, &widgets::InductionPanel::headSelected, this, [this](int, int queryHead) {
        m_attention->setQueryHead(queryHead);
        dock(QStringLiteral("dock.attention"))->show();
    });
    m_ledger->onAnswer<widgets::ValidationView>(
        this, [this](const widgets::ValidationViewPtr& report) {
            if (report != m_ledger->liveValidation())
                return; // the light shows the live session only
            // The live session's verdict: the same report as its Validation panel entry and
            // `kvscope-cli verify` of a snapshot of it.
            const auto worst = report->worst();
            const int errors = report->count(kvscope::state::Severity::Error);
            const int warnings = report->count(kvscope::state::Severity::Warning);
            m_light->setText(
                QStringLiteral("<span style='color:%1; font-size:14pt'>●</span> %2")
                    .arg(widgets::ViolationModel::severityColor(worst).name(),
                         worst == widgets::SeverityRank::None
                             ? tr("valid")
                             : QStringLiteral("%1, %2").arg(
                                   widgets::countOf(errors, tr("error"), tr("errors")),
                                   widgets::countOf(warnings, tr("warning"), tr("warnings")))));
            m_light->setToolTip(tr("Worst open violation of the live session: %1")
                                    .arg(widgets::severityText(worst)));
        });
    m_ledger->onAnswer<widgets::LedgerView>(this, [this](const widgets::LedgerViewPtr& l) {
        for (const auto& n : l->nodes)
            if (!n.file.isEmpty() && !recent(kRecentSnapshots).contains(n.file))
                addRecent(kRecentSnapshots, n.file);
    });
}

void MainWindow::showEvidence(const widgets::EvidenceViewPtr& e) {
    const insights::ExperimentResult& r = e->insight->result;
    using V = insights::EvidenceView;
    const V view = r.view;
    const insights::Focus& f = r.focus;
    const QString a = e->ids.value(0), b = e->ids.size() > 1 ? e->ids.value(1) : QString();
    auto raise = [this](const QString& id) {
        if (QDockWidget* d = dock(id)) {
            d->show();
            d->raise();
        }
    };
    // The selection first: the diff and the heatmaps read the layer, the positions and the
    // attention the slot and the row.
    if (f.layer >= 0 || f.position >= 0 || (f.head >= 0 && view != V::Attention))
        m_selection->set(f.layer, view == V::Attention ? -1 : f.head, f.position);
    if (view == V::Drift || view == V::Faults) {
        // B against A (the live session when the experiment kept one state), over the steps
        // the experiment measured, so that the panel shows its numbers.
        m_drift->setStates(a, b);
        if (f.steps > 0)
            m_drift->setSteps(f.steps);
        m_drift->run();
        raise(QStringLiteral("dock.drift"));
        if (view == V::Faults) {
            // The damaged state's verdict beside its drift.
            m_snapshots->selectId(b.isEmpty() ? a : b);
            m_ledger->request(widgets::req::VerifyNode{b.isEmpty() ? a : b});
            raise(QStringLiteral("dock.validation"));
        }
    } else if (view == V::Diff) {
        m_diff->setStates(a, b);
        m_diff->compare();
        raise(QStringLiteral("dock.diff"));
    } else if (view == V::Attention) {
        raise(QStringLiteral("dock.attention"));
        if (f.head >= 0)
            m_attention->setQueryHead(f.head);
    } else if (view == V::Positions) {
        raise(QStringLiteral("dock.positions"));
    } else if (view == V::Heatmap) {
        raise(QStringLiteral("dock.kv"));
    } else if (view == V::Induction) {
        raise(QStringLiteral("dock.induction"));
        if (f.layer >= 0 && f.head >= 0) {
            // The experiment's head, selected in the probe's table once it is there.
            auto once = std::make_shared<QMetaObject::Connection>();
            *once = m_ledger->onAnswer<widgets::InductionView>(
                this, [this, once, f](const widgets::InductionViewPtr&) {
                    disconnect(*once);
                    QTimer::singleShot(0, this,
                                       [this, f] { m_induction->selectHead(f.layer, f.head); });
                });
        }
        m_induction->run();
    }
    if (!e->restored && !a.isEmpty() && view != V::Faults)
        m_snapshots->selectId(b.isEmpty() ? a : b);
}

void MainWindow::createStateMenu(QMenu* state) {
    state->addAction(tr("&Snapshot"), QKeySequence(tr("Ctrl+S")), m_snapshots,
                     &widgets::SnapshotPanel::takeSnapshot);
    state->addAction(tr("&Restore selected snapshot…"), QKeySequence(tr("Ctrl+R")), m_snapshots,
                     &widgets::SnapshotPanel::restoreSelected);
    state->addAction(
        tr("&Truncate at selected position"), QKeySequence(tr("Ctrl+T")), this, [this] {
            if (m_selection->position() >= 0)
                m_snapshots->truncateAtSelection();
            else
                statusBar()->showMessage(
                    tr("Select a position first (click a token or a heatmap cell)"), 5000);
        });
    state->addSeparator();
    state->addAction(tr("Sa&ve selected snapshot…"), QKeySequence(tr("Ctrl+Shift+S")), m_snapshots,
                     &widgets::SnapshotPanel::saveSelected);
    state->addAction(tr("&Open snapshot file…"), QKeySequence(tr("Ctrl+Alt+O")), m_snapshots,
                     &widgets::SnapshotPanel::openFileDialog);
    state->addAction(tr("&Export selected to safetensors…"), QKeySequence(tr("Ctrl+E")),
                     m_snapshots, &widgets::SnapshotPanel::exportSelected);
    state->addSeparator();
    state->addAction(tr("Measure &drift"), QKeySequence(tr("Ctrl+D")), this, [this] {
        // What the user selected: the selected snapshot (else the one the live session
        // descends from) against the live session.
        QString a = m_snapshots->selectedId();
        if (a.isEmpty() && m_ledger->ledger())
            a = m_ledger->ledger()->currentId;
        if (a.isEmpty()) {
            statusBar()->showMessage(
                tr("Select a snapshot to measure the live session's drift against"), 5000);
            return;
        }
        m_drift->setStates(a, QString());
        dock(QStringLiteral("dock.drift"))->raise();
        m_drift->run();
    });
    state->addAction(tr("D&iff"), QKeySequence(tr("Ctrl+Shift+D")), this, [this] {
        // As Measure drift: the selected snapshot (else the one the live session descends
        // from) against the live session, unless the Diff panel already names two states.
        if (m_diff->pickedA() == m_diff->pickedB()) {
            QString a = m_snapshots->selectedId();
            if (a.isEmpty() && m_ledger->ledger())
                a = m_ledger->ledger()->currentId;
            if (a.isEmpty()) {
                statusBar()->showMessage(tr("Select a snapshot to compare the live session with"),
                                         5000);
                return;
            }
            m_diff->setStates(a, QString());
        }
        dock(QStringLiteral("dock.diff"))->raise();
        m_diff->compare();
    });
    state->addSeparator();
    state->addMenu(m_snapshots->forkMenu());
    state->addAction(tr("&Patch layer from another snapshot…"), QKeySequence(tr("Ctrl+Shift+P")),
                     m_snapshots, &widgets::SnapshotPanel::patchDialog);
    state->addMenu(m_snapshots->faultMenu());
    state->addAction(tr("T&ransplant residual stream…"), this, [this] {
        dock(QStringLiteral("dock.transplant"))->show();
        dock(QStringLiteral("dock.transplant"))->raise();
    });
    state->addAction(tr("&Logit lens…"), this, [this] {
        dock(QStringLiteral("dock.lens"))->show();
        dock(QStringLiteral("dock.lens"))->raise();
    });
    state->addAction(tr("A&ttribution…"), this, [this] {
        dock(QStringLiteral("dock.attribution"))->show();
        dock(QStringLiteral("dock.attribution"))->raise();
    });
    state->addAction(tr("&Branches side by side…"), this, [this] {
        dock(QStringLiteral("dock.branches"))->show();
        dock(QStringLiteral("dock.branches"))->raise();
    });
    state->addAction(tr("I&nduction heads…"), this, [this] {
        dock(QStringLiteral("dock.induction"))->show();
        dock(QStringLiteral("dock.induction"))->raise();
    });
}

void MainWindow::createStatusBar() {
    m_busyLabel = new QLabel(this);
    m_deviceLabel = new QLabel(tr("Device: —"), this);
    m_modelLabel = new QLabel(tr("Model: none"), this);
    m_lengthLabel = new QLabel(this);
    m_workspaceLabel = new QLabel(tr("Workspace: in memory"), this);
    m_workspaceLabel->setToolTip(tr("States are kept in memory only until a workspace folder "
                                    "is opened (File > Open workspace)"));
    statusBar()->addWidget(m_busyLabel, 1);
    statusBar()->addPermanentWidget(m_workspaceLabel);
    statusBar()->addPermanentWidget(m_deviceLabel);
    statusBar()->addPermanentWidget(m_modelLabel);
    statusBar()->addPermanentWidget(m_lengthLabel);
    m_light = new QLabel(tr("no state"), this);
    m_light->setObjectName(QStringLiteral("validationLight"));
    statusBar()->addPermanentWidget(m_light);
}

namespace {
// Another engine's state file (llama.cpp, Hugging Face past_key_values), by its contents.
bool isForeignState(const QFileInfo& info) {
    const std::string file = info.absoluteFilePath().toStdString();
    return llamacpp::isStateFile(file) || state::hf::isPastKeyValuesFile(file);
}
bool isSnapshotName(const QFileInfo& info) {
    return info.suffix().toLower() == QLatin1String("kvsnap");
}
} // namespace

void MainWindow::openStatePath(const QString& path) {
    const QFileInfo info(path);
    if (info.exists() && !isSnapshotName(info) && !isForeignState(info)) {
        // A tokenizer's or a checkpoint's .bin went to the model loader from here and failed
        // with the loader's words ("header field hidden_dim = 0 ...").
        QMessageBox::warning(
            this, tr("Not a state file"),
            tr("%1 is not a kvscope snapshot (.kvsnap) nor a llama.cpp or Hugging Face "
               "past_key_values state that kvscope reads, so it was not opened. To open a "
               "model, use File > Open model file.")
                .arg(info.absoluteFilePath()));
        return;
    }
    openPath(path);
}

void MainWindow::openPath(const QString& path, const QString& device) {
    const QFileInfo info(path);
    if (!info.exists()) {
        QMessageBox::warning(this, tr("Not found"), tr("%1 does not exist.").arg(path));
        return;
    }
    const bool foreignState = isForeignState(info);
    if (foreignState && !m_engine->hasModel()) {
        // The file records no model: ask for the one it was made with, open it afterwards.
        QMessageBox::information(
            this, tr("Choose the model"),
            tr("%1 is another engine's state (llama.cpp or Hugging Face past_key_values). It "
               "records no model, so choose the model it was made with (a .gguf, or the same "
               "weights in another format); kvscope then checks the cached keys against it.")
                .arg(info.fileName()));
        const QString model = QFileDialog::getOpenFileName(
            this, tr("Model of %1").arg(info.fileName()), info.absolutePath(),
            tr("Models (*.gguf *.bin config.json);;All files (*)"));
        if (model.isEmpty())
            return;
        m_pendingState = info.absoluteFilePath();
        const QFileInfo mi(model);
        m_engine->loadModel(mi.fileName() == QLatin1String("config.json") ? mi.absolutePath()
                                                                          : mi.absoluteFilePath(),
                            device.isEmpty() ? m_session->selectedDevice() : device);
        return;
    }
    if (foreignState || isSnapshotName(info)) {
        if (!m_engine->hasModel()) {
            QMessageBox::information(
                this, tr("Open a model first"),
                tr("A snapshot is verified against the model it will be restored "
                   "on: open that model first, then the snapshot."));
            return;
        }
        m_ledger->request(widgets::req::OpenFile{info.absoluteFilePath()});
        dock(QStringLiteral("dock.validation"))->raise();
        return;
    }
    if (looksLikeModel(info)) {
        m_engine->loadModel(info.absoluteFilePath(),
                            device.isEmpty() ? m_session->selectedDevice() : device);
        return;
    }
    QMessageBox::warning(this, tr("Unknown file"),
                         tr("%1 is not a model kvscope can open (llama2.c .bin, .gguf, "
                            "Hugging Face folder).")
                             .arg(path));
}

void MainWindow::addRecent(const QString& key, const QString& path) {
    QStringList list = recent(key);
    list.removeAll(path);
    list.prepend(path);
    while (list.size() > 8)
        list.removeLast();
    QSettings().setValue(key, list);
    updateWelcome();
}

QStringList MainWindow::recent(const QString& key) const {
    return QSettings().value(key).toStringList();
}

void MainWindow::updateWelcome() {
    m_welcome->setRecent(recent(kRecentModels), recent(kRecentSnapshots));
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
    if (event->type() == QEvent::Close && watched == dock(QStringLiteral("dock.tour")))
        QSettings().setValue(kTourClosed, true);
    return QMainWindow::eventFilter(watched, event);
}

QString MainWindow::defaultWorkspaceFolder() {
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
           QStringLiteral("/workspace");
}

QString MainWindow::startWorkspaceFolder() {
    const QStringList list = QSettings().value(kRecentWorkspaces).toStringList();
    return list.isEmpty() ? defaultWorkspaceFolder() : list.first();
}

void MainWindow::openWorkspaceFolder(const QString& folder) {
    const QString dir = QFileInfo(folder).absoluteFilePath();
    m_ledger->request(widgets::req::OpenWorkspace{dir});
    m_workspaceFolder = dir;
    addRecent(kRecentWorkspaces, dir);
    m_workspaceLabel->setText(tr("Workspace: %1").arg(QFileInfo(dir).fileName()));
    m_workspaceLabel->setToolTip(dir);
}

MainWindow::LeaveChoice MainWindow::askKeepSession(QWidget* parent, const QString& title,
                                                   const QString& text, const QString& informative,
                                                   const QString& keep, const QString& drop) {
    QMessageBox box(parent);
    box.setIcon(QMessageBox::Question);
    box.setWindowTitle(title);
    box.setText(text);
    box.setInformativeText(informative);
    QPushButton* keepButton = box.addButton(keep, QMessageBox::AcceptRole);
    QPushButton* dropButton = box.addButton(drop, QMessageBox::DestructiveRole);
    box.addButton(QMessageBox::Cancel);
    box.setDefaultButton(keepButton);
    box.exec();
    return box.clickedButton() == keepButton   ? LeaveChoice::Snapshot
           : box.clickedButton() == dropButton ? LeaveChoice::Discard
                                               : LeaveChoice::Cancel;
}

bool MainWindow::confirmLeaveLive(const QString& action,
                                  const std::function<void()>& afterSnapshot) {
    // Without a workspace folder (a window embedded in a test) the store lives in memory
    // only and nothing is asked; the app always opens one at start.
    if (m_workspaceFolder.isEmpty())
        return true;
    const auto st = m_engine->state();
    const qint64 tokens = st ? qint64(st->tokens.size()) : 0;
    // While an operation runs the flag may lag behind it: ask whenever there are tokens.
    const bool unsaved = tokens > 0 && (m_engine->tags().liveUnsaved.load() || m_engine->isBusy());
    if (!unsaved)
        return true;
    LeaveChoice choice;
    if (m_confirmLeave) {
        choice = m_confirmLeave(action, tokens);
    } else {
        choice = askKeepSession(
            this, action,
            tr("The live session holds %1 that no snapshot has.")
                .arg(widgets::countOf(int(tokens), tr("token"), tr("tokens"))),
            tr("Snapshot it first? The snapshot is saved in the workspace and stays in the "
               "fork tree."),
            tr("Snapshot"), tr("Discard"));
    }
    if (choice == LeaveChoice::Cancel)
        return false;
    if (choice == LeaveChoice::Snapshot) {
        m_engine->stop(); // a running generation ends; its tokens are captured
        m_afterSnapshot = afterSnapshot;
        m_ledger->request(widgets::req::Snapshot{});
        return !afterSnapshot;
    }
    return true;
}

void MainWindow::closeEvent(QCloseEvent* event) {
    if (!m_leaving && !confirmLeaveLive(tr("Quit kvscope"), [this] {
            m_leaving = true;
            close();
        })) {
        event->ignore();
        return;
    }
    if (m_engine->hasModel())
        saveLayout();
    m_engine->stop();
    QMainWindow::closeEvent(event);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const auto urls = event->mimeData()->urls();
    if (urls.isEmpty() || !urls.first().isLocalFile())
        return;
    openPath(urls.first().toLocalFile());
    event->acceptProposedAction();
}

bool MainWindow::tourWantedAtStart() {
    return !QSettings().value(kTourClosed, false).toBool();
}

void MainWindow::showTour() {
    // Asked for (Help ▸ Guided tour, --tour): it comes back at the next start too, until the
    // user closes it.
    QSettings().setValue(kTourClosed, false);
    QDockWidget* d = dock(QStringLiteral("dock.tour"));
    if (!d) {
        m_tour = new Tour(this, this);
        d = addPanel(m_tour, tr("Guided tour"), QStringLiteral("dock.tour"),
                     Qt::LeftDockWidgetArea);
        // Closed by the user (its close button, or unticked in the View menu): it stays closed,
        // also at the next start. Hiding it with the workspace is not closing it.
        d->installEventFilter(this);
        connect(d->toggleViewAction(), &QAction::triggered, this,
                [](bool shown) { QSettings().setValue(kTourClosed, !shown); });
        // A tab in front of the session panel, which no step raises: the panels a step raises
        // never hide the explanation. (Split below the session panel it would have become a
        // tab all the same: Qt adds a dock split from a tabbed one — the session shares its
        // group with Insights — as one more tab.)
        if (QDockWidget* session = dock(QStringLiteral("dock.session")))
            tabifyDockWidget(session, d);
    }
    showWorkspace(true);
    d->show();
    d->raise();
}

} // namespace kvscope::gui
