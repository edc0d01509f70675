#include "workspace/livesession.h"

#include <algorithm>

namespace kvscope::ws {

namespace {

// Replays `tokens` through a fresh session of `model` with `recorder` watching, in chunks so
// that progress is reported and the caller can stop; false when stopped or failed (*error).
bool replayQueries(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                   QueryRecorder& recorder, const ReplayProgress& onProgress, std::string* error) {
    constexpr int64_t kChunk = 256;
    Session replay(model);
    replay.setObserver(&recorder);
    const int64_t total = int64_t(tokens.size());
    for (int64_t begin = 0; begin < total; begin += kChunk) {
        if (onProgress && !onProgress(begin, total)) {
            *error = "attention: stopped while recomputing the queries (" + std::to_string(begin) +
                     " of " + std::to_string(total) + " tokens)";
            return false;
        }
        const int64_t n = std::min(kChunk, total - begin);
        if (auto s = replay.feed(std::span<const int32_t>(tokens.data() + begin, size_t(n))); !s) {
            *error =
                "attention: replaying the tokens to recompute the queries failed: " + s.message();
            return false;
        }
    }
    if (onProgress)
        onProgress(total, total);
    return true;
}

} // namespace

Result<AttentionPattern> attentionOf(const Session& session, QueryRecorder& queries, int layer,
                                     int head, const ReplayProgress& onProgress) {
    const auto& model = session.model();
    const int64_t n = int64_t(session.tokens().size());
    const int layers = int(model->config().nLayers);
    if (layer < 0 || layer >= layers)
        return Result<AttentionPattern>::error("attention: layer " + std::to_string(layer) +
                                               " is outside 0.." + std::to_string(layers - 1));
    if (n != session.cache().length())
        return Result<AttentionPattern>::error(
            "attention: the session holds " + std::to_string(n) + " tokens but " +
            std::to_string(session.cache().length()) + " cache slots");
    queries.truncate(n); // rows of a failed forward pass after the last token do not count
    if (!queries.complete() || queries.rows(layer) < n) {
        queries.clear();
        std::string error;
        if (!replayQueries(model, session.tokens(), queries, onProgress, &error)) {
            queries.clear();
            queries.setComplete(false);
            return Result<AttentionPattern>::error(error);
        }
        if (!queries.complete()) { // every layer does not fit the budget: this one does
            queries.clear();
            queries.setComplete(false);
            QueryRecorder one(int64_t(1) << 40, layer);
            if (!replayQueries(model, session.tokens(), one, onProgress, &error))
                return Result<AttentionPattern>::error(error);
            return attentionPattern(*model, session.cache(), one.queries(layer), n, layer, head);
        }
    }
    return attentionPattern(*model, session.cache(), queries.queries(layer), n, layer, head);
}

// ---- the live session ----

LiveSession::LiveSession(std::shared_ptr<const Model> model) {
    m_session.emplace(std::move(model));
    m_session->setObserver(&m_queries);
}

bool LiveSession::unsaved() const {
    return !m_session->tokens().empty() && (m_parentId.empty() || m_generated > 0);
}

void LiveSession::beginRun(state::PromptMeta meta) {
    m_session->reset();
    m_queries.clear();
    m_queries.setComplete(true);
    m_session->setObserver(&m_queries);
    m_sampler.reset();
    m_prompt = std::move(meta);
    m_parentId.clear(); // a fresh run: its first capture is a root
    m_generated = 0;
}

void LiveSession::dropUnfedQueries() {
    m_queries.truncate(int64_t(m_session->tokens().size()));
}

Status LiveSession::feed(std::span<const int32_t> tokens) {
    Status s = m_session->feed(tokens);
    if (!s)
        dropUnfedQueries(); // the rows of a failed forward pass do not count
    return s;
}

Result<GenerateResult> LiveSession::generate(int steps, const SamplerSettings& settings,
                                             const std::function<bool(int32_t)>& onToken) {
    if (!m_sampler || !(m_sampler->settings() == settings))
        m_sampler.emplace(settings);
    const int64_t before = int64_t(m_session->tokens().size());
    auto r = m_session->generate(steps, *m_sampler, onToken);
    m_generated += std::max<int64_t>(0, int64_t(m_session->tokens().size()) - before);
    if (!r)
        dropUnfedQueries();
    return r;
}

void LiveSession::descendFrom(const std::string& id) {
    m_parentId = id;
    m_generated = 0;
}

void LiveSession::adopt(Session session, const state::Snapshot& from, const std::string& id,
                        int64_t keepQueries) {
    // Recorded queries describe the old session's tokens. A truncation of the live session
    // keeps a prefix of them valid; anything else is replayed on the next attention().
    m_session.emplace(std::move(session));
    if (keepQueries >= 0 && m_queries.complete()) {
        m_queries.truncate(keepQueries);
    } else {
        m_queries.clear();
        m_queries.setComplete(false);
    }
    m_session->setObserver(&m_queries);
    m_prompt = from.prompt;
    if (from.hasSampler) {
        m_sampler.emplace(from.sampler);
        m_sampler->setRngState(from.rngState);
    } else {
        m_sampler.reset();
    }
    descendFrom(id);
}

bool LiveSession::queriesRecorded() const {
    if (!m_queries.complete())
        return false;
    const int64_t n = int64_t(m_session->tokens().size());
    for (int l = 0; l < int(m_session->model()->config().nLayers); ++l)
        if (m_queries.rows(l) < n)
            return false;
    return true;
}

Result<AttentionPattern> LiveSession::attention(int layer, int head,
                                                const ReplayProgress& onProgress) {
    auto r = attentionOf(*m_session, m_queries, layer, head, onProgress);
    if (m_queries.complete())
        m_session->setObserver(&m_queries); // replayed: new tokens are recorded again
    return r;
}

} // namespace kvscope::ws
