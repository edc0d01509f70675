// tst_layout: the main window fits a normal screen (issue 11, item 7). Each data row re-runs
// this binary on an offscreen screen of that size (screenchild.h): the first launch, a model
// opened, every tour step, every dock shown and raised, the layout saved and restored, and a
// layout saved on a much bigger screen restored — after each, the window's minimum size and
// frame stay within the screen and no two visible docks overlap. Screenshots go to
// <build>/screenshots/fit-*.png.
#include "screenchild.h"
#include "testdata.h"

#include "enginecontroller.h"
#include "guitest.h"
#include "mainwindow.h"
#include "tour.h"

#include <QAbstractButton>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QDir>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QDockWidget>
#include <QGuiApplication>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTabBar>
#include <QTest>

using namespace kvscope::widgets;

namespace {

const QString kModel = QStringLiteral("models/stories260K/stories260K.bin");

using guitest::screenshotDir;

// Item 7 of issue 11: what keeps `window` from fitting on `available` (the screen's available
// geometry): a minimum size past the screen, a frame outside it, a dock outside the window or
// squeezed below its own minimum, two visible docks that overlap (docks tabbed together share
// a place: only the one in front counts). Empty when it fits.
// The offscreen screen has no desktop around the window; a real one takes height from it: a
// top bar (GNOME: 27-32 px) and the window's title bar (openbox: 20 px, GNOME: ~37 px). Under
// openbox on 1366x768 the window had 748 px and grew to 762 after the tour's first step while
// this test, granting it all 768, passed.
constexpr int kDesktopHeight = 64;

QStringList layoutProblems(const kvscope::gui::MainWindow& window, const QRect& available) {
    QStringList problems;
    const QSize minimum = window.minimumSizeHint().expandedTo(window.minimumSize());
    if (minimum.width() > available.width() ||
        minimum.height() + kDesktopHeight > available.height())
        problems << QStringLiteral("minimum size %1x%2 > screen %3x%4 less %5 px of desktop")
                        .arg(minimum.width())
                        .arg(minimum.height())
                        .arg(available.width())
                        .arg(available.height())
                        .arg(kDesktopHeight);
    if (!available.contains(window.frameGeometry()))
        problems << QStringLiteral("frame %1,%2 %3x%4 leaves the screen")
                        .arg(window.frameGeometry().x())
                        .arg(window.frameGeometry().y())
                        .arg(window.frameGeometry().width())
                        .arg(window.frameGeometry().height());
    QList<QDockWidget*> shown;
    for (QDockWidget* d : window.findChildren<QDockWidget*>()) {
        // The docks behind the front tab of their group keep a stale geometry; nothing of
        // them is on screen.
        const bool behindTab =
            !window.tabifiedDockWidgets(d).isEmpty() && d->visibleRegion().isEmpty();
        if (d->isVisible() && !d->isFloating() && !behindTab)
            shown << d;
    }
    for (QDockWidget* d : shown) {
        // A panel that scrolls inside its dock does so downwards: sideways, its controls are
        // cut at the right edge (Survival's policy combo was).
        for (const QScrollArea* area : d->findChildren<QScrollArea*>())
            if (area->isVisible() && area->widgetResizable() &&
                area->horizontalScrollBarPolicy() != Qt::ScrollBarAlwaysOff &&
                area->horizontalScrollBar()->maximum() > 0)
                problems << QStringLiteral("%1 scrolls sideways by %2 px")
                                .arg(d->objectName())
                                .arg(area->horizontalScrollBar()->maximum());
        if (!window.rect().contains(d->geometry()))
            problems << QStringLiteral("%1 lies outside the window").arg(d->objectName());
        const QSize need = d->minimumSizeHint().expandedTo(d->minimumSize());
        if (d->width() < need.width() || d->height() < need.height())
            problems << QStringLiteral("%1 squeezed to %2x%3 < its minimum %4x%5")
                            .arg(d->objectName())
                            .arg(d->width())
                            .arg(d->height())
                            .arg(need.width())
                            .arg(need.height());
    }
    for (int i = 0; i < shown.size(); ++i)
        for (int j = i + 1; j < shown.size(); ++j)
            if (shown[i]->geometry().intersects(shown[j]->geometry()) &&
                !window.tabifiedDockWidgets(shown[i]).contains(shown[j]))
                problems << QStringLiteral("%1 overlaps %2")
                                .arg(shown[i]->objectName(), shown[j]->objectName());
    return problems;
}

// The controls a user must reach (buttons, combos, spin boxes, text fields), as far as they are
// on screen: none squeezed below its minimum height, none drawn over another (the Run and
// Step buttons over the prompt box, the sampler rows over it). A control inside a scroll area
// counts by the part its viewport shows.
QStringList controlProblems(const kvscope::gui::MainWindow& window) {
    struct Shown {
        const QWidget* widget;
        QRect rect; // in window coordinates, the visible part
    };
    std::vector<Shown> shown;
    for (const QWidget* w : window.findChildren<QWidget*>()) {
        const bool control =
            qobject_cast<const QAbstractButton*>(w) || qobject_cast<const QComboBox*>(w) ||
            qobject_cast<const QAbstractSpinBox*>(w) || qobject_cast<const QLineEdit*>(w) ||
            qobject_cast<const QPlainTextEdit*>(w);
        if (!control || !w->isVisible())
            continue;
        // A spin box's or a combo's own line edit and a line edit's clear button are part of
        // it; Qt sizes its own title buttons and tab scroll arrows (qt_dockwidget_*, a tab
        // bar's children) by its style.
        if (qobject_cast<const QAbstractSpinBox*>(w->parentWidget()) ||
            qobject_cast<const QComboBox*>(w->parentWidget()) ||
            qobject_cast<const QTabBar*>(w->parentWidget()) ||
            qobject_cast<const QLineEdit*>(w->parentWidget()) ||
            w->objectName().startsWith(QLatin1String("qt_")))
            continue;
        const QRect visible = w->visibleRegion().boundingRect();
        if (visible.isEmpty())
            continue;
        shown.push_back({w, visible.translated(w->mapTo(&window, QPoint(0, 0)))});
    }
    QStringList problems;
    auto name = [](const QWidget* w) {
        QString text;
        if (auto* b = qobject_cast<const QAbstractButton*>(w))
            text = b->text();
        return QStringLiteral("%1 '%2' (%3)")
            .arg(QString::fromLatin1(w->metaObject()->className()), text, w->objectName());
    };
    for (const Shown& s : shown)
        if (!qobject_cast<const QPlainTextEdit*>(s.widget) && // a text box scrolls
            s.widget->height() < s.widget->minimumSizeHint().height())
            problems << QStringLiteral("%1 squeezed to %2 px high < %3")
                            .arg(name(s.widget))
                            .arg(s.widget->height())
                            .arg(s.widget->minimumSizeHint().height());
    for (size_t i = 0; i < shown.size(); ++i)
        for (size_t j = i + 1; j < shown.size(); ++j)
            if (shown[i].rect.intersects(shown[j].rect) &&
                !shown[i].widget->isAncestorOf(shown[j].widget) &&
                !shown[j].widget->isAncestorOf(shown[i].widget))
                problems << QStringLiteral("%1 overlaps %2")
                                .arg(name(shown[i].widget), name(shown[j].widget));
    return problems;
}

// Opens stories260K in `window` and waits until it is loaded.
bool openModel(kvscope::gui::MainWindow& window) {
    QSignalSpy loaded(window.engine(), &EngineController::modelLoaded);
    window.openPath(QString::fromStdString(testdata::path(kModel)));
    return loaded.wait(60000) || !loaded.isEmpty();
}

QString describeSizes(const kvscope::gui::MainWindow& window) {
    QString out = QStringLiteral("window %1x%2, minimum %3x%4;")
                      .arg(window.width())
                      .arg(window.height())
                      .arg(window.minimumSizeHint().width())
                      .arg(window.minimumSizeHint().height());
    for (QDockWidget* d : window.findChildren<QDockWidget*>())
        if (d->isVisible())
            out += QStringLiteral(" %1 %2x%3 (min %4x%5)")
                       .arg(d->objectName().mid(5))
                       .arg(d->width())
                       .arg(d->height())
                       .arg(d->minimumSizeHint().width())
                       .arg(d->minimumSizeHint().height());
    return out;
}

} // namespace

class TestLayout : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { guitest::setUpApplication(QStringLiteral("tst_layout"), false); }

    void windowFitsSmallScreen_data() {
        QTest::addColumn<QSize>("screen");
        QTest::newRow("1366x768") << QSize(1366, 768);
        QTest::newRow("1600x1000") << QSize(1600, 1000);
    }

    void windowFitsSmallScreen() {
        QFETCH(QSize, screen);
        // The placement rule itself: moved inside first, shrunk only when bigger.
        using kvscope::gui::MainWindow;
        const QRect small(0, 0, 1366, 768);
        QCOMPARE(MainWindow::fitRect(QRect(100, 50, 800, 600), small), QRect(100, 50, 800, 600));
        QCOMPARE(MainWindow::fitRect(QRect(900, 400, 800, 600), small), QRect(566, 168, 800, 600));
        QCOMPARE(MainWindow::fitRect(QRect(-40, -10, 3086, 1738), small), small);
        QCOMPARE(MainWindow::fitRect(QRect(0, 0, 1600, 1000), QRect(1366, 0, 1366, 738)),
                 QRect(1366, 0, 1366, 738));
        KVSCOPE_REQUIRE_DATA(kModel);
        const QString tag = QString::fromLatin1(QTest::currentDataTag());
        if (QGuiApplication::primaryScreen()->size() != screen) {
            QVERIFY2(!testscreen::inChild(), "the child's screen does not have the size asked for");
            const auto child =
                testscreen::runOnScreen(screen, QStringLiteral("windowFitsSmallScreen:") + tag);
            qInfo().noquote() << child.output;
            QVERIFY2(child.ok, qPrintable(child.output.right(3000)));
            QVERIFY2(!child.output.contains(QStringLiteral("SKIP")), "the child skipped");
            return;
        }
        const QRect available = QGuiApplication::primaryScreen()->availableGeometry();
        const QString shots = screenshotDir();
        QSettings().remove(QStringLiteral("layout")); // the first run: no saved layout

        // As main.cpp starts it: the saved layout (none), shown, then the model opened.
        kvscope::gui::MainWindow window;
        window.restoreLayout();
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY2(layoutProblems(window, available).isEmpty(),
                 qPrintable(layoutProblems(window, available).join(QStringLiteral("; "))));
        QVERIFY(openModel(window));
        QTest::qWait(200);
        qInfo().noquote() << tag << "model open:" << describeSizes(window);
        // The right column shared out: the Attention row (Logit drift, Transplant, Survival
        // tabbed beside it) is not left at its minimum while the KV heatmaps take the rest
        // (it was 276 px against 615 px at 1600x1000).
        {
            const auto* kv = window.findChild<QDockWidget*>(QStringLiteral("dock.kv"));
            const auto* attention =
                window.findChild<QDockWidget*>(QStringLiteral("dock.attention"));
            QVERIFY(kv && attention);
            QVERIFY2(attention->height() >= kv->height() * 9 / 10,
                     qPrintable(describeSizes(window)));
        }
        // Tabbed docks show whole labels (scroll arrows when they do not fit), not "Ma…".
        int bars = 0;
        for (auto* bar : window.findChildren<QTabBar*>()) {
            if (bar->parentWidget() != &window)
                continue; // a panel's own tabs
            ++bars;
            QCOMPARE(bar->elideMode(), Qt::ElideNone);
            QVERIFY(bar->usesScrollButtons());
        }
        QVERIFY(bars >= 2);
        QVERIFY2(layoutProblems(window, available).isEmpty(),
                 qPrintable(layoutProblems(window, available).join(QStringLiteral("; "))));

        // The tour: its own dock, then every step (each raises the panels it talks about).
        window.showTour();
        kvscope::gui::Tour* tour = window.tour();
        for (int step = 0; step < tour->stepCount(); ++step) {
            const QString failed = guitest::runTourStep(tour, step);
            QVERIFY2(failed.isEmpty(), qPrintable(failed));
            QTest::qWait(100);
            const QStringList problems =
                layoutProblems(window, available) + controlProblems(window);
            QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("step %1: %2")
                                                        .arg(step + 1)
                                                        .arg(problems.join(QStringLiteral("; ")))));
        }
        // Every panel shown (View menu) and brought to the front in turn.
        for (QDockWidget* d : window.docks()) {
            d->show();
            d->raise();
            QTest::qWait(20);
            const QStringList problems =
                layoutProblems(window, available) + controlProblems(window);
            QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("%1 raised: %2")
                                                        .arg(d->objectName())
                                                        .arg(problems.join(QStringLiteral("; ")))));
        }
        // A long error in Model and session (a load error naming a long path, three times) and
        // the window at its minimum size: every control still whole and apart (Run and Step
        // over the prompt box at the minimum width; sampler rows over it under a long error).
        {
            emit window.engine()->operationFinished(guitest::longFailure());
            window.findChild<QDockWidget*>(QStringLiteral("dock.session"))->raise();
            const QSize before = window.size();
            window.resize(window.minimumSizeHint());
            QTest::qWait(100);
            const QStringList problems = controlProblems(window);
            QVERIFY2(problems.isEmpty(),
                     qPrintable(QStringLiteral("at the minimum %1x%2 with a long error: %3")
                                    .arg(window.width())
                                    .arg(window.height())
                                    .arg(problems.join(QStringLiteral("; ")))));
            QVERIFY(window.grab().save(shots + QStringLiteral("/fit-%1-minimum.png").arg(tag)));
            window.resize(before);
            QTest::qWait(50);
        }
        qInfo().noquote() << tag << "after the tour:" << describeSizes(window);
        QTest::qWait(200);
        QVERIFY(window.grab().save(shots + QStringLiteral("/fit-%1-tour.png").arg(tag)));

        // The layout as saved on exit comes back within the screen.
        window.saveLayout();
        {
            kvscope::gui::MainWindow again;
            again.restoreLayout();
            again.show();
            QVERIFY(QTest::qWaitForWindowExposed(&again));
            QVERIFY(openModel(again));
            QTest::qWait(100);
            QVERIFY2(layoutProblems(again, available).isEmpty(),
                     qPrintable(layoutProblems(again, available).join(QStringLiteral("; "))));
        }

        // A layout saved on a much bigger screen: every dock side by side in a window twice the
        // screen's size. Restoring it never grows the window past this screen.
        for (QDockWidget* d : window.docks()) {
            window.removeDockWidget(d);
            window.addDockWidget(Qt::RightDockWidgetArea, d, Qt::Horizontal);
            d->show();
        }
        window.resize(available.size() * 2);
        QTest::qWait(50);
        QVERIFY2(window.minimumSizeHint().width() > available.width(),
                 "the oversized layout is not oversized");
        window.saveLayout();
        kvscope::gui::MainWindow restored;
        restored.restoreLayout();
        restored.show();
        QVERIFY(QTest::qWaitForWindowExposed(&restored));
        QVERIFY(openModel(restored));
        QTest::qWait(200);
        qInfo().noquote() << tag << "oversized layout restored:" << describeSizes(restored);
        QVERIFY2(layoutProblems(restored, available).isEmpty(),
                 qPrintable(layoutProblems(restored, available).join(QStringLiteral("; "))));
        QVERIFY(restored.grab().save(shots + QStringLiteral("/fit-%1-restored.png").arg(tag)));
        QSettings().remove(QStringLiteral("layout"));
    }
};

QTEST_MAIN(TestLayout)
#include "tst_layout.moc"
