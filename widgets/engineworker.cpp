#include "engineworker.h"

#include "promptbuilder.h"

#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

#include <QFileInfo>

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

EngineWorker::EngineWorker(const std::atomic<uint64_t>* cancelEpoch,
                           const std::atomic<uint64_t>* attentionSerial)
    : m_cancelEpoch(cancelEpoch), m_attentionSerial(attentionSerial) {
    m_progressClock.start();
    m_stateClock.start();
}

EngineWorker::~EngineWorker() = default;

void EngineWorker::listDevices() {
    QStringList devices;
    for (const auto& d : kvscope::Model::availableDevices())
        devices << QString::fromStdString(d);
    emit devicesReady(devices);
}

ModelInfo EngineWorker::describeModel(const QString& path) const {
    ModelInfo info;
    const auto& c = m_model->config();
    info.path = path;
    info.name = QFileInfo(path).fileName();
    info.device = QString::fromStdString(m_model->device());
    info.dtype = QString::fromStdString(m_model->computeDtype());
    info.architecture =
        QString::fromStdString(c.hfArchitecture.empty() ? c.architecture : c.hfArchitecture);
    info.sourceFormat = QString::fromStdString(c.sourceFormat);
    info.fingerprint = QString::fromStdString(m_model->fingerprint());
    if (auto tok = m_model->tokenizer()) {
        info.tokenizerKind = QString::fromStdString(tok->kind());
        info.hasChatTemplate = tok->chatTemplate().has_value();
    }
    info.layers = int(c.nLayers);
    info.heads = int(c.nHeads);
    info.kvHeads = int(c.nKvHeads);
    info.headDim = int(c.headDim);
    info.vocabSize = int(c.vocabSize);
    info.maxContext = c.maxContext;
    info.parameters = m_model->parameterCount();
    return info;
}

void EngineWorker::load(const QString& path, const QString& device, uint64_t epoch) {
    emit progress(0, 0, tr("Loading %1").arg(QFileInfo(path).fileName()));
    kvscope::LoadOptions options;
    options.device = device.isEmpty() ? std::string("cpu") : device.toStdString();
    auto loaded = kvscope::Model::load(path.toStdString(), options);
    if (!loaded) {
        emit operationDone(QStringLiteral("load"), false, QString::fromStdString(loaded.message()));
        return;
    }
    if (cancelled(epoch)) { // loading itself cannot be interrupted; its result is dropped
        emit operationDone(QStringLiteral("load"), false, tr("Loading cancelled"));
        return;
    }
    m_model = loaded.value();
    m_session = std::make_unique<kvscope::Session>(m_model);
    m_session->setObserver(&m_recorder);
    m_recorder.clear();
    m_segments.clear();
    m_sampler.reset();
    m_info = describeModel(path);
    emit modelLoaded(m_info);
    publishState();
    emit operationDone(QStringLiteral("load"), true,
                       tr("Loaded %1 on %2").arg(m_info.name, m_info.device));
}

void EngineWorker::throttledProgress(qint64 done, qint64 total, const QString& what) {
    if (done == total || m_progressClock.elapsed() >= kProgressIntervalMs) {
        m_progressClock.restart();
        emit progress(done, total, what);
    }
}

QString EngineWorker::feedChunked(const std::vector<int32_t>& ids,
                                  const std::vector<QString>& segments, uint64_t epoch,
                                  bool* wasCancelled) {
    const int64_t total = int64_t(ids.size());
    for (int64_t begin = 0; begin < total; begin += kPrefillChunk) {
        if (cancelled(epoch)) {
            *wasCancelled = true;
            return tr("Prefill stopped after %1 of %2 tokens").arg(begin).arg(total);
        }
        const int64_t n = std::min(kPrefillChunk, total - begin);
        const std::span<const int32_t> chunk(ids.data() + begin, size_t(n));
        const int64_t before = int64_t(m_session->tokens().size());
        if (auto s = m_session->feed(chunk); !s) {
            m_recorder.truncate(before); // rows of a failed forward pass do not count
            return QString::fromStdString(s.message());
        }
        m_segments.insert(m_segments.end(), segments.begin() + begin, segments.begin() + begin + n);
        throttledProgress(begin + n, total, tr("Prefill"));
    }
    return {};
}

QString EngineWorker::runGenerate(int steps, const SamplerOptions& options, uint64_t epoch,
                                  bool* wasCancelled) {
    if (m_session->lastLogits().empty())
        return tr("Nothing has been fed yet: run a prompt first");
    const bool sameSettings = m_sampler && options.temperature == m_samplerOptions.temperature &&
                              options.topP == m_samplerOptions.topP &&
                              options.topK == m_samplerOptions.topK &&
                              options.seed == m_samplerOptions.seed;
    if (!sameSettings) {
        kvscope::SamplerSettings s;
        s.temperature = float(options.temperature);
        s.topP = float(options.topP);
        s.topK = options.topK;
        s.seed = options.seed;
        m_sampler = std::make_unique<kvscope::Sampler>(s);
        m_samplerOptions = options;
    }
    int done = 0;
    auto onToken = [&](int32_t) {
        m_segments.push_back(QStringLiteral("generated"));
        ++done;
        throttledProgress(done, steps, tr("Generating"));
        if (m_stateClock.elapsed() >= kStateIntervalMs)
            publishState(); // the views grow while generating, at a bounded rate
        return !cancelled(epoch);
    };
    const int64_t before = int64_t(m_session->tokens().size());
    auto result = m_session->generate(steps, *m_sampler, onToken);
    if (!result) {
        m_recorder.truncate(int64_t(m_session->tokens().size()));
        m_segments.resize(m_session->tokens().size());
        return QString::fromStdString(result.message());
    }
    *wasCancelled = result.value().stopReason == "cancelled";
    return tr("Generated %1 tokens (%2)")
        .arg(int64_t(m_session->tokens().size()) - before)
        .arg(QString::fromStdString(result.value().stopReason));
}

void EngineWorker::runPrompt(const PromptRequest& request, uint64_t epoch) {
    const QString op = QStringLiteral("prompt");
    if (!m_model) {
        emit operationDone(op, false, tr("No model loaded"));
        return;
    }
    BuiltPrompt prompt = buildPrompt(request, m_model->tokenizer());
    if (!prompt.error.isEmpty() || prompt.ids.empty()) {
        emit operationDone(op, false,
                           prompt.error.isEmpty() ? tr("The prompt is empty") : prompt.error);
        return;
    }
    resetSession();
    bool wasCancelled = false;
    QString error = feedChunked(prompt.ids, prompt.segments, epoch, &wasCancelled);
    if (error.isEmpty() && !wasCancelled && request.steps > 0)
        error = runGenerate(request.steps, request.sampler, epoch, &wasCancelled);
    publishState();
    const bool ok = !wasCancelled && (error.isEmpty() || error.startsWith(tr("Generated")));
    emit operationDone(op, ok,
                       error.isEmpty() ? tr("Prefilled %1 tokens").arg(prompt.ids.size()) : error);
}

void EngineWorker::generate(int steps, const SamplerOptions& sampler, uint64_t epoch) {
    const QString op = steps == 1 ? QStringLiteral("step") : QStringLiteral("generate");
    if (!m_session) {
        emit operationDone(op, false, tr("No model loaded"));
        return;
    }
    bool wasCancelled = false;
    const QString message = runGenerate(steps, sampler, epoch, &wasCancelled);
    publishState();
    emit operationDone(op, !wasCancelled && message.startsWith(tr("Generated")), message);
}

void EngineWorker::resetSession() {
    if (!m_session)
        return;
    m_session->reset();
    m_recorder.clear();
    m_segments.clear();
    m_sampler.reset();
    publishState();
}

void EngineWorker::truncate(qint64 length) {
    if (!m_session)
        return;
    const auto& s = *m_session;
    length = std::clamp<qint64>(length, 0, qint64(s.tokens().size()));
    if (length == qint64(s.tokens().size()))
        return;
    // Tokens, cache (positions and mask with it), next position and segments move together.
    // The logits after a truncation are unknown without a forward pass: recompute them by
    // re-feeding the last kept token on a copy truncated one further.
    std::vector<int32_t> tokens(s.tokens().begin(), s.tokens().begin() + length);
    const qint64 keep = std::max<qint64>(0, length - 1);
    const auto& positions = s.cache().positions();
    const int64_t next =
        keep > 0 && size_t(keep) <= positions.size() ? positions[size_t(keep - 1)] + 1 : 0;
    kvscope::Session fresh(m_model, s.cache().truncated(keep),
                           std::vector<int32_t>(tokens.begin(), tokens.begin() + keep), next, {});
    if (length > 0) {
        const int32_t last[1] = {tokens.back()};
        kvscope::Session probe = fresh;
        if (probe.feed(last))
            fresh = probe;
    }
    *m_session = fresh;
    m_session->setObserver(&m_recorder);
    m_recorder.truncate(length);
    m_segments.resize(size_t(length));
    publishState();
}

int64_t EngineWorker::promptLength() const {
    int64_t n = 0;
    while (size_t(n) < m_segments.size() && m_segments[size_t(n)] != QLatin1String("generated"))
        ++n;
    return n;
}

void EngineWorker::adoptSession(const kvscope::Session& session, std::vector<QString> segments,
                                std::unique_ptr<kvscope::Sampler> sampler) {
    if (!m_session)
        return;
    *m_session = session;
    m_session->setObserver(&m_recorder);
    m_recorder.clear();
    m_recorder.setComplete(false); // rows no longer describe this cache: recompute on demand
    segments.resize(m_session->tokens().size(), QStringLiteral("generated"));
    m_segments = std::move(segments);
    if (sampler) {
        m_sampler = std::move(sampler);
        const auto& st = m_sampler->settings();
        m_samplerOptions = {st.temperature, st.topP, st.topK, st.seed};
    } else {
        m_sampler.reset();
    }
    publishState();
}

void EngineWorker::attention(uint64_t serial, int layer, int head) {
    if (serial != m_attentionSerial->load() || !m_session)
        return; // superseded by a newer request (slider scrubbing): skip the work
    auto view = std::make_shared<AttentionView>();
    view->serial = serial;
    view->revision = m_revision;
    const auto& cache = m_session->cache();
    const int heads = int(m_model->config().nHeads);
    view->layer = std::clamp(layer, 0, int(m_model->config().nLayers) - 1);
    view->head = std::clamp(head, 0, std::max(0, heads - 1));
    view->keys = cache.length();
    view->queries = int64_t(m_session->tokens().size());
    view->mask = cache.mask();
    view->probs.assign(size_t(view->queries * view->keys), 0.0f);

    const AttentionRecorder* source = &m_recorder;
    AttentionRecorder recomputed(int64_t(1) << 40, view->layer);
    const bool live =
        m_recorder.complete() && int64_t(m_recorder.rows(view->layer).size()) == view->queries;
    if (live) {
        view->source = tr("recorded live");
    } else {
        // The live rows do not cover this cache (restored, or over the recording budget):
        // rebuild the pattern by running the token buffer through a fresh session.
        kvscope::Session replay(m_model);
        replay.setObserver(&recomputed);
        const auto& t = m_session->tokens();
        if (!t.empty() && !replay.feed(std::span<const int32_t>(t.data(), t.size())))
            return;
        source = &recomputed;
        view->source = tr("recomputed from tokens");
    }
    const auto& rows = source->rows(view->layer);
    for (int64_t q = 0; q < view->queries && q < int64_t(rows.size()); ++q) {
        const auto& row = rows[size_t(q)];
        const int64_t n = std::min(row.keys, view->keys);
        const float* src = row.data.data() + int64_t(view->head) * row.keys;
        std::copy(src, src + n, view->probs.begin() + q * view->keys);
    }
    if (serial == m_attentionSerial->load())
        emit attentionReady(view);
}

void EngineWorker::publishState() {
    m_stateClock.restart();
    auto view = std::make_shared<CacheView>();
    view->revision = ++m_revision;
    view->model = m_info;
    if (!m_session) {
        emit stateReady(view);
        return;
    }
    const auto& s = *m_session;
    const auto& cache = s.cache();
    const auto tok = m_model->tokenizer();
    const auto& ids = s.tokens();
    view->layers = int(m_model->config().nLayers);
    view->kvHeads = int(m_model->config().nKvHeads);
    view->headDim = int(m_model->config().headDim);
    view->length = cache.length();
    view->nextPosition = s.nextPosition();
    view->cacheDtype = cache.empty() ? m_info.dtype : QString::fromStdString(cache.dtype());
    view->positions = cache.positions();
    view->mask = cache.mask();
    view->tokens.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        TokenInfo t;
        t.id = ids[i];
        t.position = int64_t(i) < cache.length() ? view->positions[i] : -1;
        t.segment = i < m_segments.size() ? m_segments[i] : QStringLiteral("prompt");
        if (tok) {
            t.piece = QString::fromStdString(tok->tokenText(ids[i]));
            t.special = tok->isSpecial(ids[i]);
            // Special tokens print as their piece ("<s>"), not as what a decoder emits.
            t.text = t.special ? t.piece
                               : QString::fromUtf8(tok->decodeNext(i ? ids[i - 1] : -1, ids[i]));
        } else {
            t.text = QString::number(ids[i]);
        }
        view->tokens.push_back(std::move(t));
    }
    if (!cache.empty()) {
        view->keyNorms.reserve(size_t(view->layers));
        for (int l = 0; l < view->layers; ++l) {
            view->keyNorms.push_back(cache.keyNorms(l).data);
            view->valueNorms.push_back(cache.valueNorms(l).data);
        }
    }
    const auto& logits = s.lastLogits();
    if (!logits.empty()) {
        std::vector<int32_t> order(logits.size());
        std::iota(order.begin(), order.end(), 0);
        const size_t k = std::min<size_t>(5, order.size());
        std::partial_sort(
            order.begin(), order.begin() + long(k), order.end(),
            [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
        for (size_t i = 0; i < k; ++i) {
            view->topIds.push_back(order[i]);
            view->topLogits.push_back(logits[size_t(order[i])]);
            view->topTexts.push_back(
                tok ? QString::fromUtf8(tok->decodeNext(ids.empty() ? -1 : ids.back(), order[i]))
                    : QString::number(order[i]));
        }
    }
    emit stateReady(view);
}

} // namespace kvscope::widgets
