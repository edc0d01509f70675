// kvscope-bench-gui: the main window on a realistic model, offscreen, measured.
//
// Builds (or takes) a random-weight SmolLM2-135M-shape model (30 layers, 9 heads, 3 KV heads,
// the real SmolLM tokenizer when ../shared has it), runs a prompt and a generation up to
// --positions cached tokens in the real MainWindow at 1366x768, and measures:
//   - the UI thread's event-loop latency (a 10 ms probe timer: how late it fires) during load,
//     prefill, generation, snapshot, restore, the replay after it, and verify;
//   - every view's repaint (each heatmap, the token strip, the position plot);
//   - selection changes (layer, head, position) until every panel has repainted;
//   - attention for a new (layer, query head): request to painted;
//   - the view memory (raster bytes; no per-cell items).
// Prints a table and, with --json, {"repaint_ms_max", "selection_ms_max", "attention_ms_max",
// "ui_latency_ms_max", "layers", "positions", ...}. Not a test: speed is not pass/fail here; the
// README quotes its numbers.
#include "benchutil.h"

#include "attentionpanel.h"
#include "diffpanel.h"
#include "enginecontroller.h"
#include "heatmapplot.h"
#include "kvheatmappanel.h"
#include "ledgercontroller.h"
#include "mainwindow.h"
#include "maskpanel.h"
#include "positionpanel.h"
#include "selection.h"
#include "sessionpanel.h"

#include "engine/randommodel.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>

#include <qcustomplot.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

using namespace kvscope::widgets;

namespace {

// How late a 10 ms timer fires, per phase: the event loop's responsiveness.
class LatencyProbe : public QObject {
public:
    LatencyProbe() {
        m_timer.setTimerType(Qt::PreciseTimer);
        m_timer.setInterval(10);
        connect(&m_timer, &QTimer::timeout, this, [this] {
            const double ms = double(m_clock.nsecsElapsed()) / 1e6;
            m_clock.restart();
            auto& worst = m_worst[m_phase];
            worst = std::max(worst, ms - 10.0);
            m_late[m_phase].push_back(ms - 10.0);
            if (onTick)
                onTick(m_phase, ms - 10.0);
        });
    }
    void start(const std::string& phase) {
        m_phase = phase;
        m_worst[phase] = 0;
        m_late[phase].clear();
        m_clock.restart();
        m_timer.start();
    }
    void stop() { m_timer.stop(); }
    const std::map<std::string, double>& worst() const { return m_worst; }
    std::function<void(const std::string& phase, double lateMs)> onTick;
    // The share of probe ticks of a phase later than `ms`.
    double shareLaterThan(const std::string& phase, double ms) const {
        const auto it = m_late.find(phase);
        if (it == m_late.end() || it->second.empty())
            return 0.0;
        return double(std::count_if(it->second.begin(), it->second.end(),
                                    [ms](double late) { return late > ms; })) /
               double(it->second.size());
    }

private:
    QTimer m_timer;
    QElapsedTimer m_clock;
    std::string m_phase;
    std::map<std::string, double> m_worst;
    std::map<std::string, std::vector<double>> m_late;
};

// Times every event the UI thread delivers; the slowest ones (by receiver class and event type)
// say what made the event loop late.
class TimedApplication : public QApplication {
public:
    using QApplication::QApplication;
    bool notify(QObject* receiver, QEvent* event) override {
        if (QThread::currentThread() != thread()) // the engine thread's events are not the UI's
            return QApplication::notify(receiver, event);
        if (m_depth++ > 0) { // nested deliveries count in their outermost event
            const bool r = QApplication::notify(receiver, event);
            --m_depth;
            return r;
        }
        // Read before delivery: the event may delete its receiver (DeferredDelete).
        const char* className = receiver->metaObject()->className();
        const int type = int(event->type());
        QElapsedTimer t;
        t.start();
        const bool r = QApplication::notify(receiver, event);
        --m_depth;
        const double ms = double(t.nsecsElapsed()) / 1e6;
        if (ms > 2 && sinceTick.size() < 64)
            sinceTick.emplace_back(std::string(className) + " / " + std::to_string(type), ms);
        if (ms > 20) {
            const std::string key = std::string(className) + " / " + std::to_string(type);
            auto& worst = slowest[key];
            worst.first = std::max(worst.first, ms);
            ++worst.second;
        }
        return r;
    }
    std::map<std::string, std::pair<double, int>> slowest; // key -> (max ms, count > 20 ms)
    // Events over 2 ms since the probe's last tick: what a late tick waited for.
    std::vector<std::pair<std::string, double>> sinceTick;

private:
    int m_depth = 0;
};

// Waits (running the event loop) for the next operationFinished; false on failure/timeout.
bool waitDone(EngineController* engine, int timeoutMs, QString* message = nullptr) {
    QEventLoop loop;
    bool ok = false;
    auto c = QObject::connect(engine, &EngineController::operationFinished, &loop,
                              [&](const OperationResult& r) {
                                  ok = r.ok;
                                  if (message)
                                      *message = r.message;
                                  loop.quit();
                              });
    QTimer::singleShot(timeoutMs, &loop, &QEventLoop::quit);
    loop.exec();
    QObject::disconnect(c);
    return ok;
}

void settle(int ms = 50) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < ms)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
}

double repaintMs(QWidget* w) {
    QElapsedTimer t;
    t.start();
    if (auto* plot = qobject_cast<QCustomPlot*>(w))
        plot->replot(QCustomPlot::rpImmediateRefresh);
    w->repaint();
    return double(t.nsecsElapsed()) / 1e6;
}

std::string prompTextOf(const kvscope::tok::Tokenizer& tok, int64_t tokens) {
    static const char* kSentences[] = {
        "The keeper of the lighthouse wrote every ship's name in a blue book. ",
        "When the fog came in, she counted the seconds between the horns. ",
        "A cache remembers what the model has already read, one column per token. ",
        "Nobody in the village knew why the clock struck thirteen on Tuesdays. ",
        "Rain fell on the tin roof while the children argued about the stars. "};
    std::string text;
    int i = 0;
    while (true) {
        std::string more = text + kSentences[i++ % 5];
        if (int64_t(tok.encode(more).size()) > tokens)
            return text;
        text = std::move(more);
    }
}

} // namespace

int main(int argc, char** argv) {
    // An offscreen screen of 1366x768 (the platform reads its screens from a JSON file).
    QTemporaryDir screenDir;
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        const QString config = screenDir.filePath(QStringLiteral("screen.json"));
        std::ofstream(config.toStdString())
            << R"({"screens": [{"name": "bench", "x": 0, "y": 0, "width": 1366, "height": 768,)"
               R"( "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})";
        qputenv("QT_QPA_PLATFORM", ("offscreen:configfile=" + config).toUtf8());
    }
    std::string modelDir;
    int64_t positions = 4096;
    bool json = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--model") && i + 1 < argc)
            modelDir = argv[++i];
        else if (!std::strcmp(argv[i], "--positions") && i + 1 < argc)
            positions = std::max<int64_t>(64, std::atoll(argv[++i]));
        else if (!std::strcmp(argv[i], "--json"))
            json = true;
        else {
            std::fprintf(stderr, "usage: kvscope-bench-gui [--model DIR] [--positions N] [--json]\n"
                                 "  without --model, a random-weight SmolLM2-135M-shape model (30 "
                                 "layers) is written to a temporary folder\n");
            return 2;
        }
    }
    TimedApplication app(argc, argv);
    QCoreApplication::setOrganizationName(QStringLiteral("kvscope-bench"));
    QCoreApplication::setApplicationName(QStringLiteral("kvscope-bench-gui"));
    QTemporaryDir scratch;
    if (modelDir.empty()) {
        kvscope::RandomModelOptions o;
        o.shape = "smollm2-135m";
        const std::string tok = bench::testDataRoot() + "/tokenizers/hf/smollm";
        if (QDir(QString::fromStdString(tok)).exists())
            o.tokenizerPath = tok;
        modelDir = (scratch.path() + QStringLiteral("/smollm2-135m")).toStdString();
        const double t0 = bench::now();
        auto made = kvscope::writeRandomModel(modelDir, o);
        if (!made) {
            std::fprintf(stderr, "random model: %s\n", made.message().c_str());
            return 1;
        }
        std::fprintf(stderr, "wrote %s (%lld parameters) in %.1f s\n", modelDir.c_str(),
                     static_cast<long long>(made.value().parameters), bench::now() - t0);
    }
    auto tok = kvscope::tok::Tokenizer::fromFile(modelDir + "/tokenizer.json");

    kvscope::gui::MainWindow window;
    window.resize(1366, 768);
    window.show();
    settle(200);
    EngineController* engine = window.engine();
    LatencyProbe probe;
    // The first late ticks name the events they waited for (stderr).
    int lateReports = 0;
    probe.onTick = [&](const std::string& phase, double late) {
        if (late > 50 && lateReports < 6) {
            ++lateReports;
            std::string events;
            double sum = 0;
            for (auto& [key, ms] : app.sinceTick) {
                events += "  " + key + " " + std::to_string(int(ms)) + " ms;";
                sum += ms;
            }
            std::fprintf(stderr,
                         "late tick in %s: %.0f ms; events over 2 ms since the last (%.0f ms):%s\n",
                         phase.c_str(), late, sum, events.c_str());
        }
        app.sinceTick.clear();
    };
    std::map<std::string, double> seconds;
    auto phase = [&](const std::string& name, const std::function<void()>& post, int timeoutS) {
        const double t0 = bench::now();
        probe.start(name);
        post();
        QString message;
        const bool ok = waitDone(engine, timeoutS * 1000, &message);
        probe.stop();
        seconds[name] = bench::now() - t0;
        std::fprintf(stderr, "%-10s %6.1f s  %s\n", name.c_str(), seconds[name],
                     qPrintable(message));
        if (!ok) {
            std::fprintf(stderr, "%s failed: %s\n", name.c_str(), qPrintable(message));
            std::exit(1);
        }
    };

    phase(
        "load", [&] { window.openPath(QString::fromStdString(modelDir)); }, 600);
    const int layers = engine->model().layers, heads = engine->model().heads;
    const int64_t promptTokens = positions - 64;
    PromptRequest prompt;
    if (tok)
        prompt.prompt.text = prompTextOf(*tok.value(), promptTokens);
    else
        for (int64_t i = 0; i < promptTokens; ++i)
            prompt.prompt.text += std::to_string(100 + (i * 7919) % 40000) + ' ';
    prompt.steps = 0;
    phase(
        "prefill", [&] { engine->runPrompt(prompt); }, 3600);
    const int64_t fed = engine->state()->length;
    kvscope::SamplerSettings greedy;
    phase(
        "generate", [&] { engine->generate(int(positions - fed), greedy); }, 3600);
    settle(300);
    const int64_t cached = engine->state()->length;

    // Every view's repaint, several times each (the worst counts).
    std::map<std::string, QWidget*> views = {
        {"kv layer x head", window.kvPanel()->headPlot()->plot()},
        {"kv layer x position", window.kvPanel()->positionPlot()->plot()},
        {"attention", window.attentionPanel()->plot()->plot()},
        {"mask", window.maskPanel()->plot()->plot()},
        {"positions", window.positionPanel()},
        {"session (token strip)", window.sessionPanel()},
        {"whole window", &window},
    };
    // Wait for the first attention pattern of the finished run.
    QElapsedTimer wait;
    wait.start();
    while ((!window.attentionPanel()->view() || window.attentionPanel()->view()->keys != cached) &&
           wait.elapsed() < 600000)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    std::map<std::string, double> repaint;
    for (int round = 0; round < 3; ++round)
        for (auto& [name, w] : views)
            repaint[name] = std::max(repaint[name], repaintMs(w));

    // Selection changes: layer, KV head, position; until every panel repainted.
    double selectionMax = 0;
    const int kvHeads = engine->state()->kvHeads;
    for (int i = 0; i < 12; ++i) {
        QElapsedTimer t;
        t.start();
        window.selection()->set((i * 7) % layers, i % kvHeads, (i * 997) % cached);
        QCoreApplication::processEvents(QEventLoop::ExcludeUserInputEvents);
        for (auto& [name, w] : views)
            if (name != "whole window")
                repaintMs(w);
        selectionMax = std::max(selectionMax, double(t.nsecsElapsed()) / 1e6);
        settle(20);
        // Let the attention request the selection made finish before the next change.
        while (engine->isBusy() ||
               window.attentionPanel()->pendingSerial() !=
                   (window.attentionPanel()->view() ? window.attentionPanel()->view()->serial : 0))
            QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    }

    // Attention for a new (layer, query head): request to painted.
    double attentionMax = 0, attentionEngineMax = 0, attentionWorkerMax = 0;
    // One selection change (layer and KV head) asks for one pattern: the group's first
    // query head.
    const int groups = std::max(1, heads / kvHeads);
    double attentionGuiMax = 0;  // from the engine's answer to painted
    double attentionWaitMax = 0; // from the request to the engine thread starting on it
    QElapsedTimer answered;
    QObject::connect(engine, &EngineController::attentionReady, [&] { answered.start(); });
    auto attentionOnce = [&](int layer, int kvHead) {
        const int head = kvHead * groups;
        QElapsedTimer t;
        t.start();
        window.selection()->set(layer, kvHead, -1);
        while (!window.attentionPanel()->view() ||
               window.attentionPanel()->view()->layer != layer ||
               window.attentionPanel()->view()->head != head)
            QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
        window.attentionPanel()->plot()->plot()->replot(QCustomPlot::rpImmediateRefresh);
        const double ms = double(t.nsecsElapsed()) / 1e6;
        attentionGuiMax = std::max(attentionGuiMax, double(answered.nsecsElapsed()) / 1e6);
        attentionEngineMax =
            std::max(attentionEngineMax, window.attentionPanel()->view()->patternMs);
        attentionWorkerMax =
            std::max(attentionWorkerMax, window.attentionPanel()->view()->milliseconds);
        attentionWaitMax = std::max(attentionWaitMax, window.attentionPanel()->view()->waitedMs);
        return ms;
    };
    std::vector<double> attentionEach; // request to painted, in order
    for (int i = 0; i < 8; ++i) {
        attentionEach.push_back(attentionOnce((i * 11 + 3) % layers, (i + 1) % kvHeads));
        attentionMax = std::max(attentionMax, attentionEach.back());
    }

    // Ledger operations with the probe on: snapshot, restore (and the one replay the attention
    // view then needs), verify.
    auto* ledger = window.ledger();
    QString snapId;
    {
        QMetaObject::Connection c = QObject::connect(engine, &EngineController::operationFinished,
                                                     [&](const OperationResult& r) {
                                                         if (r.kind == QStringLiteral("snapshot"))
                                                             snapId = r.nodeId;
                                                     });
        phase(
            "snapshot", [&] { ledger->request(req::Snapshot{}); }, 600);
        QObject::disconnect(c);
    }
    phase(
        "restore",
        [&] {
            ledger->request(req::Restore{snapId, false});
        },
        600);
    // The attention view asks right after the restore: one replay of the tokens.
    {
        const double t0 = bench::now();
        probe.start("replay");
        wait.restart();
        while ((!window.attentionPanel()->view() ||
                !window.attentionPanel()->view()->source.contains(QStringLiteral("recomputed"))) &&
               wait.elapsed() < 1800000)
            QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
        probe.stop();
        seconds["replay"] = bench::now() - t0;
    }
    const double afterReplay = attentionOnce(layers - 1, kvHeads - 1);
    attentionMax = std::max(attentionMax, afterReplay);
    attentionEach.push_back(afterReplay);
    {
        // req::VerifyNode answers with a ValidationView (it is not a busy operation).
        const double t0 = bench::now();
        probe.start("verify");
        QEventLoop loop;
        auto c = ledger->onAnswer<ValidationView>(
            &loop, [&loop](const ValidationViewPtr&) { loop.quit(); });
        QTimer::singleShot(600000, &loop, &QEventLoop::quit);
        ledger->request(req::VerifyNode{snapId});
        loop.exec();
        QObject::disconnect(c);
        probe.stop();
        seconds["verify"] = bench::now() - t0;
    }

    double repaintMax = 0;
    for (auto& [name, ms] : repaint)
        if (name != "whole window")
            repaintMax = std::max(repaintMax, ms);
    double latencyMax = 0;
    for (auto& [name, ms] : probe.worst())
        latencyMax = std::max(latencyMax, ms);
    const int64_t rasterBytes = window.attentionPanel()->plot()->rasterBytes() +
                                window.kvPanel()->positionPlot()->rasterBytes() +
                                window.maskPanel()->plot()->rasterBytes();

    std::printf("kvscope-bench-gui: %d layers, %d heads (%d KV), %lld cached positions, 1366x768 "
                "offscreen\n\n",
                layers, heads, kvHeads, static_cast<long long>(cached));
    std::printf("%-28s %10s\n", "view repaint", "ms (max)");
    for (auto& [name, ms] : repaint)
        std::printf("%-28s %10.1f\n", name.c_str(), ms);
    std::printf("\n%-28s %10.1f   (target <= 100)\n", "selection change", selectionMax);
    std::printf("%-28s %10.1f   (target <= 300, request to painted)\n", "attention, new layer/head",
                attentionMax);
    std::printf("%-28s", "  each request");
    for (double ms : attentionEach)
        std::printf(" %.0f", ms);
    std::printf("\n");
    std::printf("%-28s %10.1f   (request to the engine thread starting on it)\n",
                "  waiting for the engine", attentionWaitMax);
    std::printf("%-28s %10.1f   (the pattern from the cache)\n", "  of which the pattern",
                attentionEngineMax);
    std::printf("%-28s %10.1f   (pattern + paint-ready raster, engine thread)\n",
                "  engine thread in all", attentionWorkerMax);
    std::printf("%-28s %10.1f   (answer received to painted, UI thread)\n", "  window",
                attentionGuiMax);
    std::printf("\n%-28s %10s %10s %12s\n", "phase", "seconds", "UI late ms", "ticks > 50");
    for (auto& [name, s] : seconds)
        std::printf("%-28s %10.1f %10.1f %11.1f%%\n", name.c_str(), s,
                    probe.worst().count(name) ? probe.worst().at(name) : 0.0,
                    100.0 * probe.shareLaterThan(name, 50.0));
    std::printf("%-28s %10s %10.1f   (target <= 50)\n", "UI latency, worst", "", latencyMax);
    std::vector<std::pair<double, std::string>> slow;
    for (auto& [key, v] : app.slowest)
        slow.emplace_back(v.first, key + " (" + std::to_string(v.second) + " over 20 ms)");
    std::sort(slow.rbegin(), slow.rend());
    std::printf("\nslowest UI-thread events (receiver / QEvent type):\n");
    for (size_t i = 0; i < slow.size() && i < 8; ++i)
        std::printf("  %8.1f ms  %s\n", slow[i].first, slow[i].second.c_str());
    std::printf("\nview memory: %.1f MB of rasters (data + pyramid), no per-cell items\n",
                double(rasterBytes) / 1e6);
    if (json) {
        nlohmann::json j = {{"repaint_ms_max", repaintMax},
                            {"selection_ms_max", selectionMax},
                            {"attention_ms_max", attentionMax},
                            {"attention_pattern_ms_max", attentionEngineMax},
                            {"attention_engine_thread_ms_max", attentionWorkerMax},
                            {"attention_window_ms_max", attentionGuiMax},
                            {"attention_wait_ms_max", attentionWaitMax},
                            {"ui_latency_ms_max", latencyMax},
                            {"layers", layers},
                            {"positions", cached},
                            {"raster_bytes", rasterBytes}};
        for (auto& [name, s] : seconds)
            j["seconds"][name] = s;
        for (auto& [name, ms] : probe.worst())
            j["ui_latency_ms"][name] = ms;
        for (auto& [name, ms] : repaint)
            j["repaint_ms"][name] = ms;
        std::printf("%s\n", j.dump(2).c_str());
    }
    return 0;
}
