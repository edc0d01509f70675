// EngineController: the GUI thread's handle on the engine thread.
//
// Owns a QThread with the one EngineWorker on it (which owns the core Workspace: the model, the
// live session and the snapshot store). The GUI posts requests here (and through
// LedgerController); they run one at a time, in order, on the engine thread, and their results
// arrive by signal; every operation ends with one typed operationFinished(). Nothing here blocks
// the GUI thread except the destructor, which cancels outstanding work and waits for the thread to
// finish.
//
// - stop() cancels every long operation already posted (prefill and generation stop at the
//   next chunk/token boundary with a consistent session; a model load finishes but its
//   result is dropped).
// - requestAttention() is tagged: a newer request makes older ones stale, so scrubbing a
//   slider runs only the latest one and attentionReady() never delivers an outdated answer.
//   It is the one request that goes ahead of queued work (postFirst): it only reads, and the
//   user is waiting on it.
#pragma once

#include "engineworker.h"
#include "viewdata.h"

#include <QCoreApplication>
#include <QObject>

#include <functional>
#include <QStringList>
#include <QThread>

#include <QPointer>

#include <atomic>
#include <deque>

namespace kvscope::widgets {

class StateFollower;

class EngineController : public QObject {
    Q_OBJECT
public:
    explicit EngineController(QObject* parent = nullptr);
    ~EngineController() override;

    // Asks the load guard first (setLoadGuard); nothing happens when it says no.
    void loadModel(const QString& path, const QString& device = QStringLiteral("cpu"));
    // Consulted before every model load, wherever it is asked for (menus, the session panel,
    // recent models): the window asks there whether to keep an unsaved live session.
    void setLoadGuard(std::function<bool()> guard) { m_loadGuard = std::move(guard); }
    // The CLI's --huge-pages for every later load (LoadOptions::weightsOnHugePages): the
    // weights copied out of the file mapping onto huge pages. Off by default.
    void setWeightsOnHugePages(bool on);
    bool weightsOnHugePages() const { return m_hugePages; }
    // The CLI's --cache-dtype for every later load (LoadOptions::cacheDtype): "f32", "f16" or
    // "bf16"; empty (the default, as in the CLI): the compute dtype, f32 on the CPU. Core
    // checks the value when it loads.
    void setCacheDtype(const QString& dtype);
    const QString& cacheDtype() const { return m_cacheDtype; }
    // Resets the session, feeds the prompt, then generates request.steps tokens.
    void runPrompt(const PromptRequest& request);
    void generate(int steps, const kvscope::SamplerSettings& sampler);
    void step(const kvscope::SamplerSettings& sampler) { generate(1, sampler); }
    void stop();
    void resetSession();
    // Returns the request's tag; attentionReady() carries it.
    uint64_t requestAttention(int layer, int head);

    bool isBusy() const { return m_pending > 0; }
    bool hasModel() const { return !m_model.path.isEmpty(); }
    const ModelInfo& model() const { return m_model; }
    const QStringList& devices() const { return m_devices; }
    CacheViewPtr state() const { return m_state; }
    AttentionViewPtr attention() const { return m_attention; }

    // The worker, for LedgerController, which posts the state-ledger operations to it. Use
    // post() for that; never call it from the GUI thread directly.
    EngineWorker* worker() const { return m_worker; }
    RequestTags& tags() { return m_tags; }
    // Runs fn on the engine thread (after everything posted before it). A long operation
    // should call beginOperation() first so that busy state and operationDone() pair up.
    template <typename Fn> void post(Fn&& fn) {
        QMetaObject::invokeMethod(m_worker, std::forward<Fn>(fn), Qt::QueuedConnection);
    }
    // Runs fn on the engine thread before the work already posted and not yet started: for a
    // read-only request the user is waiting on (an attention pattern), which would otherwise
    // queue behind a validation or a diff. It still waits for the operation running now.
    void postFirst(std::function<void()> fn) {
        QCoreApplication::postEvent(m_worker, new FirstCall(std::move(fn)), Qt::HighEventPriority);
    }
    void beginOperation(const QString& what);
    // A panel's StateFollower has a state to apply during an operation: it is applied in a
    // later pass of the event loop, one follower per pass (see pump()).
    void followerWaiting(StateFollower* follower);
    uint64_t cancelEpoch() const { return m_tags.cancelEpoch.load(); }

signals:
    void devicesReady(const QStringList& devices);
    void weightsOnHugePagesChanged(bool on);
    void cacheDtypeChanged(const QString& dtype);
    void modelLoaded(const kvscope::widgets::ModelInfo& info);
    void stateChanged(const kvscope::widgets::CacheViewPtr& state);
    void attentionReady(const kvscope::widgets::AttentionViewPtr& view);
    void busyChanged(bool busy, const QString& what);
    void progress(qint64 done, qint64 total, const QString& what);
    void operationFinished(const kvscope::widgets::OperationResult& result);

private:
    std::function<bool()> m_loadGuard;
    void onOperationDone(const OperationResult& result);
    void pump();
    void armPump();
    void announce();

    QThread m_thread;
    EngineWorker* m_worker = nullptr;
    RequestTags m_tags;
    int m_pending = 0;
    std::deque<OperationResult> m_finished;   // done on the engine thread, not yet announced
    QList<QPointer<StateFollower>> m_waiting; // followers with a state to apply, in order
    bool m_pumpArmed = false;
    ModelInfo m_model;
    QStringList m_devices;
    bool m_hugePages = false;
    QString m_cacheDtype; // empty: the compute dtype, as the CLI without --cache-dtype
    CacheViewPtr m_state;
    AttentionViewPtr m_attention;
};

} // namespace kvscope::widgets
