#include "engineworker.h"

#include "displaytext.h"
#include "viewadapter.h"

#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"
#include "util/topk.h"
#include "workspace/modelcard.h"

#include <QFileInfo>
#include <QThread>

#include <algorithm>
#include <numeric>

namespace kvscope::widgets {

namespace {
// Prefill is fed in chunks so that long prompts report progress and can be stopped between
// chunks; the session is consistent after every chunk.
constexpr int64_t kPrefillChunk = 64;
constexpr int kProgressIntervalMs = 50;
constexpr int kStateIntervalMs = 120;
} // namespace

EngineWorker::EngineWorker(const RequestTags* tags) : m_tags(tags) {
    m_progressClock.start();
    m_stateClock.start();
}

EngineWorker::~EngineWorker() = default;

void EngineWorker::done(const QString& kind, bool ok, const QString& message,
                        const QString& nodeId) {
    m_tags->liveUnsaved = m_ws.liveSession() && m_ws.liveSession()->unsaved();
    // A state that could not be written into the workspace folder lives in memory only: the
    // user must know before it can be lost.
    const auto problems = m_ws.takeSaveProblems();
    if (problems.empty()) {
        emit operationDone({kind, ok, message, nodeId});
        return;
    }
    QString why = QString::fromStdString(problems.front());
    if (problems.size() > 1)
        why += tr(" (and %1 more)").arg(problems.size() - 1);
    emit operationDone(
        {kind, false, tr("%1 — not saved to the workspace folder: %2").arg(message, why), nodeId});
}

void EngineWorker::listDevices() {
    QStringList devices;
    for (const auto& d : kvscope::Model::availableDevices())
        devices << QString::fromStdString(d);
    emit devicesReady(devices);
}

ModelInfo EngineWorker::describeModel(const QString& path) const {
    ModelInfo info;
    const auto& model = m_ws.model();
    const auto& c = model->config();
    info.path = path;
    info.name = QFileInfo(path).fileName();
    info.device = QString::fromStdString(model->device());
    info.dtype = QString::fromStdString(model->computeDtype());
    info.cacheDtype = QString::fromStdString(model->cacheDtype());
    info.weightDtype = QString::fromStdString(model->config().weightDtype);
    info.architecture =
        QString::fromStdString(c.hfArchitecture.empty() ? c.architecture : c.hfArchitecture);
    info.sourceFormat = QString::fromStdString(c.sourceFormat);
    info.fingerprint = QString::fromStdString(model->fingerprint());
    if (auto tok = model->tokenizer()) {
        info.tokenizerKind = QString::fromStdString(tok->kind());
        info.hasChatTemplate = tok->chatTemplate().has_value();
    }
    info.layers = int(c.nLayers);
    info.heads = int(c.nHeads);
    info.kvHeads = int(c.nKvHeads);
    info.headDim = int(c.headDim);
    info.vocabSize = int(c.vocabSize);
    info.maxContext = c.maxContext;
    info.parameters = model->parameterCount();
    info.mappedWeightBytes = model->mappedWeightBytes();
    for (const auto& v : kvscope::configVariations(c))
        info.variations << QString::fromStdString(v);
    // Read here, on the engine thread: the card is a file (a README, a generation config).
    if (const auto example = kvscope::ws::examplePrompt(path.toStdString()))
        info.examplePrompt = QString::fromStdString(*example);
    return info;
}

void EngineWorker::load(const QString& path, const QString& device, bool hugePages,
                        const QString& cacheDtype, uint64_t epoch) {
    // One core stays with the window: libtorch's threads busy-wait between parallel regions,
    // and on a 2-core machine two of them beside the UI thread left it seconds late during a
    // run (kvscope-bench-gui). KVSCOPE_THREADS still decides when set.
    static const bool threadsSet = [] {
        kvscope::Model::configureThreads();
        if (qEnvironmentVariableIsEmpty("KVSCOPE_THREADS"))
            kvscope::Model::setThreads(std::max(1, QThread::idealThreadCount() - 1));
        return true;
    }();
    (void)threadsSet;
    emit progress(0, 0, tr("Loading %1").arg(QFileInfo(path).fileName()));
    kvscope::LoadOptions options;
    options.device = device.isEmpty() ? std::string("cpu") : device.toStdString();
    options.weightsOnHugePages = hugePages;
    options.cacheDtype = cacheDtype.toStdString();
    auto loaded = kvscope::Model::load(path.toStdString(), options);
    if (!loaded) {
        done(QStringLiteral("load"), false, QString::fromStdString(loaded.message()));
        return;
    }
    if (cancelled(epoch)) { // loading itself cannot be interrupted; its result is dropped
        done(QStringLiteral("load"), false, tr("Loading cancelled"));
        return;
    }
    m_ws.setModel(loaded.value()); // another model: the lineage starts a new root
    m_info = describeModel(path);
    m_info.weightsOnHugePages = hugePages;
    emit modelLoaded(m_info);
    publishState();
    publishLedger();
    done(QStringLiteral("load"), true, tr("Loaded %1 on %2").arg(m_info.name, m_info.device));
}

void EngineWorker::throttledProgress(qint64 done, qint64 total, const QString& what) {
    if (done == total || m_progressClock.elapsed() >= kProgressIntervalMs) {
        m_progressClock.restart();
        emit progress(done, total, what);
    }
}

bool EngineWorker::feedChunked(const std::vector<int32_t>& ids, uint64_t epoch, bool* wasCancelled,
                               QString* error) {
    ws::LiveSession& live = *m_ws.liveSession();
    const int64_t total = int64_t(ids.size());
    for (int64_t begin = 0; begin < total; begin += kPrefillChunk) {
        if (cancelled(epoch)) {
            *wasCancelled = true;
            *error = tr("Prefill stopped after %1 of %2")
                         .arg(begin)
                         .arg(countOf(int(total), tr("token"), tr("tokens")));
            return false;
        }
        const int64_t n = std::min(kPrefillChunk, total - begin);
        const std::span<const int32_t> chunk(ids.data() + begin, size_t(n));
        if (auto s = live.feed(chunk); !s) {
            *error = QString::fromStdString(s.message());
            return false;
        }
        throttledProgress(begin + n, total, tr("Prefill"));
    }
    return true;
}

EngineWorker::Generated
EngineWorker::runGenerate(int steps, const kvscope::SamplerSettings& options, uint64_t epoch) {
    Generated out;
    ws::LiveSession& live = *m_ws.liveSession();
    if (live.session().lastLogits().empty()) {
        out.message = tr("Nothing has been fed yet: run a prompt first");
        return out;
    }
    int count = 0;
    auto onToken = [&](int32_t) {
        ++count;
        throttledProgress(count, steps, tr("Generating"));
        if (m_stateClock.elapsed() >= kStateIntervalMs)
            publishState(); // the views grow while generating, at a bounded rate
        return !cancelled(epoch);
    };
    const int64_t before = int64_t(live.session().tokens().size());
    auto result = live.generate(steps, options, onToken);
    out.tokens = int64_t(live.session().tokens().size()) - before;
    if (!result) {
        out.message = QString::fromStdString(result.message());
        return out;
    }
    out.cancelled = result.value().stopReason == "cancelled";
    out.ok = !out.cancelled;
    const QString why = stopReasonText(QString::fromStdString(result.value().stopReason));
    out.message = tr("Generated %1").arg(countOf(int(out.tokens), tr("token"), tr("tokens"))) +
                  (why.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(why));
    return out;
}

void EngineWorker::runPrompt(const PromptRequest& request, uint64_t epoch) {
    const QString kind = QStringLiteral("prompt");
    if (!m_ws.hasModel()) {
        done(kind, false, tr("No model loaded"));
        return;
    }
    auto prompt = ws::preparePrompt(request.prompt, *m_ws.model());
    if (!prompt) {
        done(kind, false, QString::fromStdString(prompt.message()));
        return;
    }
    // A fresh run: the live session no longer descends from any snapshot.
    m_ws.liveSession()->beginRun(prompt.value().meta);
    publishLedger();
    bool wasCancelled = false;
    QString message;
    bool ok = feedChunked(prompt.value().tokens, epoch, &wasCancelled, &message);
    if (ok) {
        message = tr("Prefilled %1")
                      .arg(countOf(int(prompt.value().tokens.size()), tr("token"), tr("tokens")));
        if (request.steps > 0) {
            const Generated g = runGenerate(request.steps, request.sampler, epoch);
            ok = g.ok;
            message = g.message;
        }
    }
    publishState();
    done(kind, ok, message);
}

void EngineWorker::generate(int steps, const kvscope::SamplerSettings& sampler, uint64_t epoch) {
    const QString kind = steps == 1 ? QStringLiteral("step") : QStringLiteral("generate");
    if (!m_ws.live()) {
        done(kind, false, tr("No model loaded"));
        return;
    }
    const Generated g = runGenerate(steps, sampler, epoch);
    publishState();
    done(kind, g.ok, g.message);
}

void EngineWorker::resetSession() {
    if (!m_ws.live())
        return;
    m_ws.liveSession()->reset();
    publishState();
    publishLedger();
}

void EngineWorker::liveReplaced() {
    publishState();
    publishLedger();
}

bool EngineWorker::event(QEvent* e) {
    if (e->type() == FirstCall::type()) {
        static_cast<FirstCall*>(e)->run();
        return true;
    }
    return QObject::event(e);
}

void EngineWorker::attention(uint64_t serial, int layer, int head,
                             std::chrono::steady_clock::time_point asked, bool inTurn) {
    if (serial != m_tags->attention.load() || !m_ws.live())
        return; // superseded by a newer request (slider scrubbing): skip the work
    const bool recorded = m_ws.liveSession()->queriesRecorded();
    if (!recorded && !inTurn) {
        // A replay of the whole prefix comes first: that is long, so it waits its turn behind
        // the work queued before it (the verdict after a restore shows at once).
        QMetaObject::invokeMethod(
            this, [=, this] { attention(serial, layer, head, asked, true); }, Qt::QueuedConnection);
        return;
    }
    const uint64_t epoch = m_tags->cancelEpoch.load();
    const int64_t tokens = int64_t(m_ws.live()->tokens().size());
    QElapsedTimer clock;
    clock.start();
    auto pattern = m_ws.liveSession()->attention(layer, head, [&](int64_t fed, int64_t total) {
        throttledProgress(fed, total, tr("Recomputing the queries for the attention view"));
        return !cancelled(epoch);
    });
    auto view = std::make_shared<AttentionView>();
    view->serial = serial;
    view->revision = m_revision;
    view->layer = layer;
    view->head = head;
    view->patternMs = double(clock.nsecsElapsed()) / 1e6;
    view->waitedMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - asked)
            .count() -
        view->patternMs;
    if (!pattern) {
        view->error = QString::fromStdString(pattern.message());
    } else {
        adapt::attention(*view, std::move(pattern.value()));
        view->milliseconds = double(clock.nsecsElapsed()) / 1e6;
        view->source =
            recorded ? tr("queries recorded live")
                     : tr("queries recomputed once from the %n token(s)", nullptr, int(tokens));
    }
    if (serial == m_tags->attention.load())
        emit attentionReady(view);
}

void EngineWorker::publishState() {
    m_stateClock.restart();
    auto view = std::make_shared<CacheView>();
    view->revision = ++m_revision;
    view->model = m_info;
    if (!m_ws.live()) {
        emit stateReady(view);
        return;
    }
    const auto& s = *m_ws.live();
    const auto& model = m_ws.model();
    const auto& cache = s.cache();
    const auto tok = model->tokenizer();
    const auto& ids = s.tokens();
    view->layers = int(model->config().nLayers);
    view->kvHeads = int(model->config().nKvHeads);
    view->headDim = int(model->config().headDim);
    view->length = cache.length();
    view->nextPosition = s.nextPosition();
    view->cacheDtype = cache.empty() ? m_info.cacheDtype : QString::fromStdString(cache.dtype());
    view->positions = cache.positions();
    view->keptTokens = m_ws.liveKeptTokens();
    view->mask = cache.mask();
    view->visibleSlots = cache.visibleSlots();
    view->tokens = adapt::tokenInfos(
        ids, view->positions, adapt::segmentLabels(m_ws.liveSession()->promptMeta(), ids.size()),
        tok.get(), view->keptTokens);
    if (!cache.empty()) {
        view->keyNorms.reserve(size_t(view->layers));
        for (int l = 0; l < view->layers; ++l) {
            view->keyNorms.push_back(cache.keyNorms(l).data);
            view->valueNorms.push_back(cache.valueNorms(l).data);
        }
    }
    const auto& logits = s.lastLogits();
    if (!logits.empty()) {
        for (int64_t i : topKIndices(logits, 5)) {
            const auto id = static_cast<int32_t>(i);
            view->topIds.push_back(id);
            view->topLogits.push_back(logits[size_t(id)]);
            view->topTexts.push_back(
                tok ? QString::fromUtf8(tok->decodeNext(ids.empty() ? -1 : ids.back(), id))
                    : QString::number(id));
        }
    }
    emit stateReady(view);
}

} // namespace kvscope::widgets
