// Session: one live sequence on a model — token buffer, positions, KV cache, last logits.
//
// The unit that snapshots capture and restores rebuild. Invariants the session keeps (and
// the validation core checks on restored state): cache length == tokens fed; the cache
// holds one position per token; lastLogits() are the logits after the last fed token;
// nextPosition() is where the next token goes (normally == cache length).
// Not thread-safe: one thread drives a session (the engine thread in the GUI). Copying a
// Session forks it cheaply (the cache is copy-on-write).
#pragma once

#include "engine/kvcache.h"
#include "engine/model.h"
#include "engine/observer.h"
#include "engine/sampler.h"

#include <functional>
#include <span>

namespace kvscope {

struct GenerateResult {
    std::vector<int32_t> tokens; // newly generated ids (the stop token is not included)
    std::string stopReason;      // "steps" | "eos" | "bos" | "context_full" | "cancelled"
};

// Why a model's output is not finite, for the error that stops a generation or a probe:
// "the model's output is not finite (the logit of token 506 is nan): stories260K.bin: tensor
// 'wq (layer 0)' holds NaN at element 123 (byte 129604 of the file)", or, when every weight
// is finite, that the cache or the input is the likely source. Always names the model file.
// Scans every weight: call it on the failure path only, never per step.
std::string describeNonFiniteOutput(const Model& model, std::span<const float> logits);

class Session {
public:
    explicit Session(std::shared_ptr<const Model> model);
    // A session over existing state (restore): the caller vouches for consistency or
    // validates first.
    Session(std::shared_ptr<const Model> model, KvCache cache, std::vector<int32_t> tokens,
            int64_t nextPosition, std::vector<float> lastLogits);

    const std::shared_ptr<const Model>& model() const { return m_model; }
    const std::vector<int32_t>& tokens() const { return m_tokens; }
    int64_t nextPosition() const { return m_nextPosition; }
    const std::vector<float>& lastLogits() const { return m_lastLogits; }
    const KvCache& cache() const { return m_cache; }
    // Where the next token goes (validation probes feed one token at a chosen position).
    void setNextPosition(int64_t p) { m_nextPosition = p; }
    // Not owned; must outlive the calls that use it. nullptr removes it. The observer may
    // also replace intermediates (Observer::replace, observer.h): interventions.
    void setObserver(Observer* observer) { m_observer = observer; }

    // Tokens per forward pass when feed() is given more (a long prompt).
    static constexpr int64_t kPrefillChunk = 512;

    // Runs the model over `tokens` at positions nextPosition().., appending to the cache, in
    // chunks of kPrefillChunk tokens (one pass when an observer is set). allLogits, when
    // given, receives [tokens, vocab]. Errors (bad id, context full) leave the session
    // unchanged.
    Status feed(std::span<const int32_t> tokens, HostTensor* allLogits = nullptr);

    // Samples from lastLogits(), feeds the token, repeats. Stops after `steps` tokens, at
    // EOS, at BOS for llama2.c models (as run.c does), at the context limit, or when
    // onToken returns false.
    Result<GenerateResult> generate(int steps, Sampler& sampler,
                                    const std::function<bool(int32_t)>& onToken = {});

    void reset();

    // The last token's logits recomputed over the cache of the tokens before it, at its
    // recorded position: the equivalence probe of a restore. No copy of the cache is made —
    // the forward pass writes the last slot of every layer in place and the original values
    // are put back before returning (also on error), so the session is unchanged afterwards;
    // while it runs, no other thread may read this session's cache. The last slot must hold
    // the last token (a cache with fewer slots than tokens — an eviction — keeps it).
    // `observer` (not the session's own, which this pass never calls) sees the pass's
    // intermediates, T = 1 and P = the cache's slots: the logit lens reads the restored
    // cache's last position through it. It may replace intermediates as in feed().
    Result<std::vector<float>> recomputeLastStep(Observer* observer = nullptr) const;

    // Room in the cache for `tokens` more slots before a run appends them, so that the cache
    // is not copied to grow in the middle of it. feed() and generate() reserve what they append;
    // a caller that feeds a prompt and then generates N tokens reserves both at once (a copy
    // to grow holds the old and new cache together: 2 GB at an 8B model's 4,096 f32 slots).
    void reserveFor(int64_t tokens);

private:
    std::shared_ptr<const Model> m_model;
    KvCache m_cache;
    std::vector<int32_t> m_tokens;
    int64_t m_nextPosition = 0;
    std::vector<float> m_lastLogits;
    Observer* m_observer = nullptr;
};

} // namespace kvscope
