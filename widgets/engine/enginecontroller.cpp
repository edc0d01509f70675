#include "enginecontroller.h"

#include "engineworker.h"
#include "statefollower.h"

#include <QTimer>

namespace kvscope::widgets {

EngineController::EngineController(QObject* parent) : QObject(parent) {
    qRegisterMetaType<ModelInfo>();
    qRegisterMetaType<CacheViewPtr>();
    qRegisterMetaType<AttentionViewPtr>();
    qRegisterMetaType<OperationResult>();
    m_thread.setObjectName(QStringLiteral("kvscope-engine"));
    m_worker = new EngineWorker(&m_tags);
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);

    connect(m_worker, &EngineWorker::devicesReady, this, [this](const QStringList& d) {
        m_devices = d;
        emit devicesReady(d);
    });
    connect(m_worker, &EngineWorker::modelLoaded, this, [this](const ModelInfo& info) {
        m_model = info;
        emit modelLoaded(info);
    });
    connect(m_worker, &EngineWorker::stateReady, this, [this](const CacheViewPtr& s) {
        m_state = s;
        emit stateChanged(s);
    });
    connect(m_worker, &EngineWorker::attentionReady, this, [this](const AttentionViewPtr& v) {
        if (v->serial != m_tags.attention.load())
            return; // a newer request is on its way: never paint a stale pattern
        m_attention = v;
        emit attentionReady(v);
    });
    connect(m_worker, &EngineWorker::progress, this, &EngineController::progress);
    connect(m_worker, &EngineWorker::operationDone, this, &EngineController::onOperationDone);
    m_thread.start();
    post([w = m_worker] { w->listDevices(); });
}

EngineController::~EngineController() {
    stop();
    m_thread.quit();
    m_thread.wait();
}

void EngineController::beginOperation(const QString& what) {
    if (m_pending++ == 0)
        emit busyChanged(true, what);
}

// During an operation the panels' StateFollowers apply the states streaming in one per pass
// of the event loop, each pass started by a short timer: a follower's work, the replots and
// the paint it causes run before the next follower's, and timers and input get in between. At
// 4,096 positions and 30 layers all panels together are ~45 ms of UI work per token; done in
// one chain it made kvscope-bench-gui's probe late by that much on every token.
//
// An operation's end is announced (operationFinished, then busyChanged(false) after the last)
// once no follower waits any more, so that what the window shows after an operation is never
// behind it; the operation counts as running until then.
void EngineController::followerWaiting(StateFollower* follower) {
    if (!m_waiting.contains(follower))
        m_waiting.append(follower);
    armPump();
}

void EngineController::armPump() {
    if (m_pumpArmed)
        return;
    m_pumpArmed = true;
    QTimer::singleShot(1, Qt::PreciseTimer, this, &EngineController::pump);
}

void EngineController::pump() {
    m_pumpArmed = false;
    while (!m_waiting.isEmpty()) {
        const QPointer<StateFollower> f = m_waiting.takeFirst();
        if (f && f->isWaiting()) {
            f->flush();
            break;
        }
    }
    if (!m_waiting.isEmpty())
        armPump();
    else
        announce();
}

void EngineController::onOperationDone(const OperationResult& result) {
    m_finished.push_back(result);
    if (!m_pumpArmed)
        announce();
}

void EngineController::announce() {
    while (!m_finished.empty()) {
        if (!m_waiting.isEmpty()) { // a state arrived meanwhile: it is shown first
            armPump();
            return;
        }
        const OperationResult result = m_finished.front();
        m_finished.pop_front();
        m_pending = std::max(0, m_pending - 1);
        emit operationFinished(result);
        if (m_pending == 0)
            emit busyChanged(false, QString());
    }
}

void EngineController::loadModel(const QString& path, const QString& device) {
    if (m_loadGuard && !m_loadGuard())
        return;
    beginOperation(tr("Loading model"));
    const uint64_t epoch = m_tags.cancelEpoch.load();
    post([w = m_worker, path, device, huge = m_hugePages, cache = m_cacheDtype, epoch] {
        w->load(path, device, huge, cache, epoch);
    });
}

void EngineController::setCacheDtype(const QString& dtype) {
    if (dtype == m_cacheDtype)
        return;
    m_cacheDtype = dtype;
    emit cacheDtypeChanged(dtype);
}

void EngineController::setWeightsOnHugePages(bool on) {
    if (on == m_hugePages)
        return;
    m_hugePages = on;
    emit weightsOnHugePagesChanged(on);
}

void EngineController::runPrompt(const PromptRequest& request) {
    beginOperation(tr("Running prompt"));
    const uint64_t epoch = m_tags.cancelEpoch.load();
    post([w = m_worker, request, epoch] { w->runPrompt(request, epoch); });
}

void EngineController::generate(int steps, const kvscope::SamplerSettings& sampler) {
    beginOperation(steps == 1 ? tr("Stepping") : tr("Generating"));
    const uint64_t epoch = m_tags.cancelEpoch.load();
    post([w = m_worker, steps, sampler, epoch] { w->generate(steps, sampler, epoch); });
}

void EngineController::stop() {
    ++m_tags.cancelEpoch;
}

void EngineController::resetSession() {
    post([w = m_worker] { w->resetSession(); });
}

uint64_t EngineController::requestAttention(int layer, int head) {
    const uint64_t serial = ++m_tags.attention;
    postFirst([w = m_worker, serial, layer, head, asked = std::chrono::steady_clock::now()] {
        w->attention(serial, layer, head, asked);
    });
    return serial;
}

} // namespace kvscope::widgets
