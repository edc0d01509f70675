// EngineWorker: the object that lives on the engine thread and owns the Model and the live
// Session. Only EngineController talks to it (by queued calls); it answers with signals.
//
// Every long operation carries the cancel epoch it was posted under and stops at the next
// token/chunk boundary once the controller's epoch has moved on, leaving the session
// consistent (tokens, cache, positions and logits always describe the same fed prefix).
// View requests carry a serial; one that is no longer the latest is skipped unanswered.
#pragma once

#include "attentionrecorder.h"
#include "viewdata.h"

#include <QElapsedTimer>
#include <QObject>

#include <atomic>
#include <memory>
#include <optional>

namespace kvscope {
class Model;
class Session;
class Sampler;
} // namespace kvscope

namespace kvscope::widgets {

class EngineWorker : public QObject {
    Q_OBJECT
public:
    EngineWorker(const std::atomic<uint64_t>* cancelEpoch,
                 const std::atomic<uint64_t>* attentionSerial);
    ~EngineWorker() override;

    // Engine thread only; posted by EngineController.
    void listDevices();
    void load(const QString& path, const QString& device, uint64_t epoch);
    void runPrompt(const PromptRequest& request, uint64_t epoch);
    void generate(int steps, const SamplerOptions& sampler, uint64_t epoch);
    void resetSession();
    void truncate(qint64 length);
    void attention(uint64_t serial, int layer, int head);

    // For the state operations (engine thread only).
    const std::shared_ptr<const kvscope::Model>& model() const { return m_model; }
    kvscope::Session* session() const { return m_session.get(); }
    const kvscope::Sampler* sampler() const { return m_sampler.get(); }
    const std::vector<QString>& segments() const { return m_segments; }
    // Tokens before the first generated one (the prompt).
    int64_t promptLength() const;
    // Makes `session` the live one (a restore): the attention rows are recomputed on demand,
    // the sampler continues from `sampler` when given.
    void adoptSession(const kvscope::Session& session, std::vector<QString> segments,
                      std::unique_ptr<kvscope::Sampler> sampler);
    // Ends an operation posted with EngineController::beginOperation().
    void finishOperation(const QString& operation, bool ok, const QString& message) {
        emit operationDone(operation, ok, message);
    }
    void publish() { publishState(); }
    void reportProgress(qint64 done, qint64 total, const QString& what) {
        throttledProgress(done, total, what);
    }

signals:
    void devicesReady(const QStringList& devices);
    void modelLoaded(const kvscope::widgets::ModelInfo& info);
    void stateReady(const kvscope::widgets::CacheViewPtr& state);
    void attentionReady(const kvscope::widgets::AttentionViewPtr& view);
    void progress(qint64 done, qint64 total, const QString& what);
    // Every posted long operation ends with exactly one of these.
    void operationDone(const QString& operation, bool ok, const QString& message);

private:
    bool cancelled(uint64_t epoch) const { return m_cancelEpoch->load() != epoch; }
    void publishState();
    void throttledProgress(qint64 done, qint64 total, const QString& what);
    QString feedChunked(const std::vector<int32_t>& ids, const std::vector<QString>& segments,
                        uint64_t epoch, bool* wasCancelled);
    QString runGenerate(int steps, const SamplerOptions& options, uint64_t epoch,
                        bool* wasCancelled);
    ModelInfo describeModel(const QString& path) const;

    const std::atomic<uint64_t>* m_cancelEpoch;
    const std::atomic<uint64_t>* m_attentionSerial;
    std::shared_ptr<const kvscope::Model> m_model;
    std::unique_ptr<kvscope::Session> m_session;
    std::unique_ptr<kvscope::Sampler> m_sampler;
    SamplerOptions m_samplerOptions;
    AttentionRecorder m_recorder;
    ModelInfo m_info;
    std::vector<QString> m_segments; // one per token in the session
    uint64_t m_revision = 0;
    QElapsedTimer m_progressClock;
    QElapsedTimer m_stateClock;
};

} // namespace kvscope::widgets
