// LiveSession: the one session a user feeds and generates in — one of the workspace's rooms
// (workspace.h) — with what a capture of it records (the prompt meta, the sampler and its RNG
// state) and its own lineage bookkeeping: the snapshot it descends from and the tokens generated
// since. Feeding and generating go through it, so the bookkeeping needs no caller's help: every
// generated token counts toward the next capture's "continue" (also when generation stops early
// or fails), and the queries a failed forward pass recorded are dropped.
//
// The queries of its tokens are recorded while it runs, so the attention view answers without
// a replay; after a restore they are recomputed once by replaying the token buffer.
//
// Thread-safety: none; one thread owns it (as the Workspace that holds it).
#pragma once

#include "engine/attention.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "state/ledger/snapshot.h"

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace kvscope::ws {

// Called with (tokens fed, tokens to feed) while queries are recorded by a replay; return
// false to stop it.
using ReplayProgress = std::function<bool(int64_t done, int64_t total)>;

// The attention pattern of (layer, query head) over `session`'s cache. The queries come from
// `queries` when it holds a row for every token of the session (recorded while it ran);
// otherwise the token buffer is replayed once through a fresh session that records every
// layer's queries into `queries` (or only `layer`'s when all would not fit its budget), so the
// next (layer, head) costs one matrix product. The keys are always the session's own cache,
// so a damaged cache shows in the pattern. `kvscope-cli attention` and the GUI both call it.
Result<AttentionPattern> attentionOf(const Session& session, QueryRecorder& queries, int layer,
                                     int head, const ReplayProgress& onProgress = {});

class LiveSession {
public:
    // An empty session of `model`: no prompt, no sampler, no parent (a capture is a root).
    explicit LiveSession(std::shared_ptr<const Model> model);
    LiveSession(const LiveSession&) = delete; // the session observes m_queries
    LiveSession& operator=(const LiveSession&) = delete;

    const Session& session() const { return *m_session; }
    const state::PromptMeta& promptMeta() const { return m_prompt; }
    // The sampler generate() used last (restored with its RNG state by adopt()); null before.
    const Sampler* sampler() const { return m_sampler ? &*m_sampler : nullptr; }
    // The stored snapshot it descends from; empty after a fresh run.
    const std::string& parentId() const { return m_parentId; }
    // Tokens generated since parentId() (a capture records them as a "continue" of it).
    int64_t generatedSinceParent() const { return m_generated; }
    // It holds tokens no stored state has: fed or generated since the last capture, restore
    // or truncation (what Quit and a model switch must ask about).
    bool unsaved() const;

    // ---- running it ----
    // A fresh run: the session emptied, `meta` its prompt, no sampler, no parent; the caller
    // then feeds the prompt's tokens.
    void beginRun(state::PromptMeta meta);
    void reset() { beginRun({}); }
    // Feeds `tokens` (a whole prompt or a chunk of one: the caller may stop between chunks).
    // An error leaves the session as it was (Session::feed).
    Status feed(std::span<const int32_t> tokens);
    // Generates up to `steps` tokens (Session::generate) with the sampler for `settings`: the
    // current one while its settings are the same (its RNG stream continues), else a new one
    // (a new seed starts a new stream).
    Result<GenerateResult> generate(int steps, const SamplerSettings& settings,
                                    const std::function<bool(int32_t)>& onToken = {});

    // ---- lineage, as the snapshot store records it ----
    // A capture of it was stored as `id`: it descends from that now.
    void descendFrom(const std::string& id);
    // Makes `session`, restored from (or truncated into) `from`, stored as `id`, the live
    // session: its prompt meta and sampler (with the RNG state) come from `from`. keepQueries
    // >= 0: `session` is this one cut to that many tokens, so the recorded queries of that
    // prefix stay valid; otherwise they are replayed on the next attention().
    void adopt(Session session, const state::Snapshot& from, const std::string& id,
               int64_t keepQueries);

    // ---- attention ----
    // attentionOf() with the queries recorded while it ran (after a restore: one replay, then
    // recorded again).
    Result<AttentionPattern> attention(int layer, int head, const ReplayProgress& onProgress = {});
    // Whether attention() can answer without a replay.
    bool queriesRecorded() const;

private:
    void dropUnfedQueries();

    std::optional<Session> m_session; // always set; optional so that adopt() can replace it
    std::optional<Sampler> m_sampler;
    state::PromptMeta m_prompt;
    std::string m_parentId;
    int64_t m_generated = 0;
    // Queries of the session's tokens [0, rows): recording while complete(); cleared and
    // paused after a restore until attention() replays.
    QueryRecorder m_queries;
};

} // namespace kvscope::ws
