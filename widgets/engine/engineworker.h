// EngineWorker: the one object on the engine thread. It owns the core Workspace (the model,
// the live session, the snapshot store — core/workspace/workspace.h) and runs every operation
// the GUI offers on it; results reach the GUI thread by signal, as view values adapted by
// viewadapter.h. It computes nothing of its own: verdicts, diffs, drifts, truncations and
// lineage are the workspace's.
//
// Only EngineController and LedgerController post to it (queued calls, in order): the
// session's own operations (load, prompt, generate, attention) are its methods; every other
// operation is a request type (requests.h) whose run() uses the helpers below and sends its
// result as an Answer. Every long
// operation carries the cancel epoch it was posted under and stops at the next token/chunk
// boundary once the controller's epoch has moved on, leaving the session consistent. Tagged
// requests (attention, live validation) carry a serial; one that is no longer the latest is
// skipped unanswered. Every posted operation ends with exactly one operationDone().
#pragma once

#include "answer.h"
#include "statedata.h"
#include "viewdata.h"

#include "workspace/snapshotmodel.h"
#include "workspace/workspace.h"

#include <QElapsedTimer>
#include <QEvent>
#include <QObject>

#include <optional>
#include <utility>

#include <atomic>
#include <chrono>
#include <functional>

namespace kvscope::widgets {

// The typed completion of a posted operation.
struct OperationResult {
    QString kind; // load | prompt | step | generate | snapshot | truncate | restore | ...
    bool ok = false;
    QString message; // for the status bar (translated); never parsed
    QString nodeId;  // the snapshot the operation made or acted on; empty when none
};

// Serials of tagged requests: a newer request of a tag makes the queued older ones stale.
struct RequestTags {
    std::atomic<uint64_t> cancelEpoch{0};
    std::atomic<uint64_t> attention{0};
    std::atomic<uint64_t> validation{0};
    // Set by the worker at the end of every operation: the live session holds tokens no
    // stored state has (ws::Workspace::liveUnsaved), what Quit and a model switch ask about.
    mutable std::atomic<bool> liveUnsaved{false};
};

// A function for the engine thread that goes ahead of the work already queued there
// (EngineController::postFirst): posted with high event priority, run by EngineWorker::event().
class FirstCall : public QEvent {
public:
    explicit FirstCall(std::function<void()> fn) : QEvent(type()), m_fn(std::move(fn)) {}
    static QEvent::Type type() {
        static const auto t = QEvent::Type(QEvent::registerEventType());
        return t;
    }
    void run() { m_fn(); }

private:
    std::function<void()> m_fn;
};

class EngineWorker : public QObject {
    Q_OBJECT
public:
    explicit EngineWorker(const RequestTags* tags);
    ~EngineWorker() override;
    bool event(QEvent* e) override;

    // ---- session (posted by EngineController) ----
    void listDevices();
    // `cacheDtype`: LoadOptions::cacheDtype ("" = the compute dtype).
    void load(const QString& path, const QString& device, bool hugePages, const QString& cacheDtype,
              uint64_t epoch);
    void runPrompt(const PromptRequest& request, uint64_t epoch);
    void generate(int steps, const kvscope::SamplerSettings& sampler, uint64_t epoch);
    void resetSession();
    // Goes ahead of queued work (EngineController::postFirst) unless it needs a replay first.
    // `asked`: when the window asked (the view reports how long the request waited).
    void attention(uint64_t serial, int layer, int head,
                   std::chrono::steady_clock::time_point asked, bool inTurn = false);

    // Read-only, engine thread only (tests).
    const ws::Workspace& workspace() const { return m_ws; }

    // ---- for the requests' run() (requests.h), on the engine thread ----
    ws::Workspace& ws() { return m_ws; }
    // Each stored state's own tokenizer (the tree, Diff's strips).
    ws::TokenizerFinder& tokenizers() { return m_tokenizers; }
    const RequestTags& tags() const { return *m_tags; }
    bool cancelled(uint64_t epoch) const { return m_tags->cancelEpoch.load() != epoch; }
    // A request's result, for the views that show its type (LedgerController::onAnswer).
    template <class View> void answer(std::shared_ptr<View> view) {
        emit answered(Answer::of(std::move(view)));
    }
    // The one operationDone() of an operation (a state the workspace folder could not take
    // turns it into a failure that says so).
    void done(const QString& kind, bool ok, const QString& message, const QString& nodeId = {});
    // The window's name of a state id.
    QString label(const QString& id) const;
    void publishLedger();
    // After the live session was replaced (restore, truncate): the views and the lineage
    // change (the workspace knows which recorded queries still hold).
    void liveReplaced();
    // Progress at most every 50 ms (and the last step).
    void throttledProgress(qint64 done, qint64 total, const QString& what);
    void restartProgressClock() { m_progressClock.restart(); }
    // The two states an operation on a pair compares; std::nullopt after done(kind, false, ...)
    // said why (a state that is not there, or, when `needsModel` is not empty, no model
    // loaded: its text is the message).
    using StatePair = std::pair<std::shared_ptr<const kvscope::state::Snapshot>,
                                std::shared_ptr<const kvscope::state::Snapshot>>;
    std::optional<StatePair> statePair(const QString& kind, const QString& a, const QString& b,
                                       const QString& needsModel = {});

signals:
    void devicesReady(const QStringList& devices);
    void modelLoaded(const kvscope::widgets::ModelInfo& info);
    void stateReady(const kvscope::widgets::CacheViewPtr& state);
    void attentionReady(const kvscope::widgets::AttentionViewPtr& view);
    void progress(qint64 done, qint64 total, const QString& what);
    void operationDone(const kvscope::widgets::OperationResult& result);

    // Every result of a request (requests.h), whatever its view type.
    void answered(const kvscope::widgets::Answer& answer);

private:
    void publishState();
    // Feeds `ids` in chunks; false with *error set, or with *wasCancelled.
    bool feedChunked(const std::vector<int32_t>& ids, uint64_t epoch, bool* wasCancelled,
                     QString* error);
    struct Generated {
        bool ok = false;
        bool cancelled = false;
        int64_t tokens = 0;
        QString message;
    };
    Generated runGenerate(int steps, const kvscope::SamplerSettings& options, uint64_t epoch);
    ModelInfo describeModel(const QString& path) const;

    const RequestTags* m_tags;
    ws::Workspace m_ws;
    ws::TokenizerFinder m_tokenizers; // each stored state's own tokenizer (tree, Diff strips)
    ModelInfo m_info;
    uint64_t m_revision = 0;
    QElapsedTimer m_progressClock;
    QElapsedTimer m_stateClock;
};

} // namespace kvscope::widgets

Q_DECLARE_METATYPE(kvscope::widgets::OperationResult)
