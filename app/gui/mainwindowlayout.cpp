// MainWindow's layout on the screen (mainwindow.h): the default layout and a saved one, the
// window kept inside the screen's available area less its frame, the right column shared out
// once the default layout is on screen, whole tab labels.
#include "mainwindow.h"

#include "enginecontroller.h"
#include "welcomeview.h"

#include <QChildEvent>
#include <QDockWidget>
#include <QGuiApplication>
#include <QLayout>
#include <QScreen>
#include <QSettings>
#include <QTabBar>
#include <QTimer>

#include <algorithm>

namespace kvscope::gui {

void MainWindow::showWorkspace(bool show) {
    m_welcome->setVisible(!show);
    for (QDockWidget* dock : m_docks)
        if (dock->objectName() != QLatin1String("dock.session"))
            dock->setVisible(show);
    if (show)
        shareDefaultHeights();
}

void MainWindow::shareDefaultHeights() {
    if (!m_shareDefaultHeights || !isVisible())
        return;
    m_shareDefaultHeights = false;
    // The sizes asked for while building the layout are lost once the window takes the
    // screen's size: the KV heatmaps' group took every extra pixel (615 px of a 1600x1000
    // window) and left the group beside Attention (Logit drift, Transplant, Survival) at its
    // minimum, 276 px. Half each, once the docks are laid out.
    QTimer::singleShot(0, this, [this] {
        resizeDocks({dock(QStringLiteral("dock.kv")), dock(QStringLiteral("dock.attention"))},
                    {1, 1}, Qt::Vertical);
    });
}

void MainWindow::resetLayout() {
    restoreState(m_defaultState, kLayoutVersion);
    m_shareDefaultHeights = true;
    showWorkspace(m_engine->hasModel());
}

void MainWindow::saveLayout() {
    QSettings s;
    s.setValue(QStringLiteral("layout/geometry"), saveGeometry());
    s.setValue(QStringLiteral("layout/state"), saveState(kLayoutVersion));
}

void MainWindow::restoreLayout() {
    QSettings s;
    if (!restoreGeometry(s.value(QStringLiteral("layout/geometry")).toByteArray())) {
        // First run: most of the screen, centred, at most 1600x1000.
        const QRect available = availableGeometry();
        QRect r(QPoint(), QSize(std::min(1600, available.width() * 9 / 10),
                                std::min(1000, available.height() * 9 / 10)));
        r.moveCenter(available.center());
        setGeometry(r);
    }
    const QByteArray state = s.value(QStringLiteral("layout/state")).toByteArray();
    // A layout saved on a bigger screen (panels side by side) would force the window past
    // this one: the default layout, which fits, instead.
    bool restored = !state.isEmpty() && restoreState(state, kLayoutVersion);
    if (restored && !docksFitScreen()) {
        restoreState(m_defaultState, kLayoutVersion);
        restored = false;
    }
    m_shareDefaultHeights = !restored;
    showWorkspace(m_engine->hasModel());
    m_keepOnScreen = true;
    fitToScreen();
}

QRect MainWindow::fitRect(const QRect& window, const QRect& available) {
    const QSize size = window.size().boundedTo(available.size());
    const int x = std::clamp(window.x(), available.left(), available.right() + 1 - size.width());
    const int y = std::clamp(window.y(), available.top(), available.bottom() + 1 - size.height());
    return QRect(QPoint(x, y), size);
}

QRect MainWindow::availableGeometry() const {
    const QScreen* s = screen() ? screen() : QGuiApplication::primaryScreen();
    return s ? s->availableGeometry() : QRect(0, 0, 1600, 1000);
}

QRect MainWindow::roomForContents() const {
    // The frame (title bar, borders) is known once the window system has shown the window;
    // before that it counts as none.
    const QRect frame = frameGeometry();
    const QRect inner = geometry();
    const QMargins margins(inner.left() - frame.left(), inner.top() - frame.top(),
                           frame.right() - inner.right(), frame.bottom() - inner.bottom());
    return availableGeometry().marginsRemoved(margins);
}

bool MainWindow::docksFitScreen() {
    // Measured as the workspace will be once a model is open (every panel shown), against the
    // room inside the window's frame: openbox's 20-px title bar left 748 px of a 1366x768
    // screen, where a minimum of 762 px "fit" the whole 768.
    showWorkspace(true);
    layout()->invalidate();
    const QSize minimum = layout()->totalMinimumSize();
    const QSize available = roomForContents().size();
    return minimum.width() <= available.width() && minimum.height() <= available.height();
}

void MainWindow::fitToScreen() {
    if (isMaximized() || isFullScreen())
        return;
    const QRect inner = geometry();
    const QRect fitted = fitRect(inner, roomForContents());
    if (fitted != inner)
        setGeometry(fitted);
}

bool MainWindow::event(QEvent* event) {
    // The tab bars of tabbed docks are made (and remade) by the layout: each whole label, with
    // scroll arrows when the labels do not fit, instead of "Ma…", "Logi…", "Trans…".
    if (event->type() == QEvent::ChildPolished)
        if (auto* bar = qobject_cast<QTabBar*>(static_cast<QChildEvent*>(event)->child())) {
            bar->setElideMode(Qt::ElideNone);
            bar->setUsesScrollButtons(true);
        }
    const bool done = QMainWindow::event(event);
    if (event->type() == QEvent::Show && m_engine->hasModel())
        shareDefaultHeights();
    // Panels shown later (a model opened, the tour) can raise the minimum size: the layout has
    // grown the window by now, to the right and down; move it back inside the screen.
    if (event->type() == QEvent::LayoutRequest && m_keepOnScreen && isVisible())
        fitToScreen();
    return done;
}

} // namespace kvscope::gui
