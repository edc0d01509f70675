#include "engine/session.h"
#include "engine/modelimpl.h"
#include "engine/tensorconv.h"

#include <algorithm>

namespace kvscope {

namespace {

// Adapts the public Observer to the internal hook: copies only what the observer wants, and
// writes back what it chose to replace (same shape, the original tensor's device and dtype).
class ObserverHook : public ForwardHook {
public:
    explicit ObserverHook(Observer* o) : m_o(o) {}
    bool wants(const char* name, int layer) const override { return m_o->wants(name, layer); }
    void on(const char* name, int layer, at::Tensor& t) override {
        HostTensor h = toHost(t);
        m_o->observe(name, layer, h);
        if (!m_o->replace(name, layer, h))
            return;
        const std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
        if (h.shape != shape || static_cast<int64_t>(h.data.size()) != h.numel())
            throw KvError(std::string("observer: the replacement of '") + name + "' at layer " +
                          std::to_string(layer) + " changed its shape");
        t = fromHost(h).to(t.device(), t.scalar_type());
    }

private:
    Observer* m_o;
};

} // namespace

std::string describeNonFiniteOutput(const Model& model, std::span<const float> logits) {
    const std::string what =
        "the model's output is not finite (" + describeNonFiniteLogits(logits) + ")";
    if (const std::string weight = findNonFiniteWeight(model.impl()); !weight.empty())
        return what + ": " + weight;
    const std::string overflow =
        model.impl().dtype == at::kHalf ? ", or an overflow of the f16 compute dtype," : "";
    return what + " although every weight of " + model.path() + " is finite: the cache" + overflow +
           " or the input is the likely source (`verify` names a damaged cache)";
}

Session::Session(std::shared_ptr<const Model> model) : m_model(std::move(model)) {}

Session::Session(std::shared_ptr<const Model> model, KvCache cache, std::vector<int32_t> tokens,
                 int64_t nextPosition, std::vector<float> lastLogits)
    : m_model(std::move(model)), m_cache(std::move(cache)), m_tokens(std::move(tokens)),
      m_nextPosition(nextPosition), m_lastLogits(std::move(lastLogits)) {}

void Session::reset() {
    m_cache = KvCache();
    m_tokens.clear();
    m_nextPosition = 0;
    m_lastLogits.clear();
}

void Session::reserveFor(int64_t tokens) {
    KvCache::Impl& cache = m_cache.mutableImpl();
    if (tokens <= 0 || cache.appendAside || cache.capacity() - cache.length >= tokens)
        return;
    const Model::Impl& m = m_model->impl();
    const auto& c = m.config;
    // What the run needs plus a quarter, at least 64 and at most 256 slots: repeated short runs
    // (the GUI's steps) copy the cache once per 64-256 tokens, and a long cache (1 GB at an 8B
    // model's 4,096 f32 slots) is not grown by a quarter for a few tokens.
    const int64_t needed = cache.length + tokens;
    const int64_t slack = std::clamp<int64_t>(needed / 4, 64, 256);
    cache.reserve(c.nLayers, c.nKvHeads, c.headDim, tokens + slack, m.cacheDtype(), m.device, 1.0);
}

Status Session::feed(std::span<const int32_t> tokens, HostTensor* allLogits) {
    return catchToStatus([&] {
        if (tokens.empty())
            return;
        const Model::Impl& m = m_model->impl();
        const auto& c = m.config;
        const int64_t T = static_cast<int64_t>(tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] < 0 || tokens[i] >= c.vocabSize)
                throw KvError("token #" + std::to_string(i) + " = " + std::to_string(tokens[i]) +
                              " is outside the vocabulary 0.." + std::to_string(c.vocabSize - 1));
        if (m_nextPosition + T > c.maxContext)
            throw KvError("context full: " + std::to_string(m_nextPosition) + " + " +
                          std::to_string(T) + " positions exceed the " +
                          std::to_string(c.maxContext) + " that " + m.path +
                          " allows (its max_context)");
        std::vector<int64_t> ids(tokens.begin(), tokens.end());

        // A failure leaves the session unchanged: the cache's length, positions and mask are
        // put back (the slots beyond `length` may have been written; nothing reads them).
        KvCache::Impl& cache = m_cache.mutableImpl();
        const int64_t lengthBefore = cache.length;
        const auto positionsBefore = cache.positions.size();
        const auto maskBefore = cache.mask.size();
        ObserverHook hook(m_observer);
        // A long prompt runs in chunks of kPrefillChunk tokens, each attending to the cache
        // the previous ones wrote: the attention scores and logits of one chunk are held at a
        // time ([heads, chunk, past + chunk], not [heads, T, T]: ~2 GB a layer for 4,096
        // tokens on a 32-head model). An observer sees one pass over all tokens, unchunked.
        const int64_t chunk = m_observer ? T : kPrefillChunk;
        // A prompt of several chunks: room for all of it at once, so the cache is not copied
        // into one twice as large at each doubling (an 8B model's 4,096-token cache is 1 GB).
        if (T > chunk)
            reserveFor(T);
        // Every row of logits when the caller or an observer wants them, else the last only
        // (an observer of other tensors leaves the numbers exactly as without it).
        const bool everyRow = allLogits || (m_observer && hook.wants("logits", -1));
        const LogitRows rows = everyRow ? LogitRows::All : LogitRows::Last;
        std::vector<float> all;
        at::Tensor logits;
        try {
            for (int64_t begin = 0; begin < T; begin += chunk) {
                const int64_t n = std::min(chunk, T - begin);
                std::vector<int64_t> positions(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i)
                    positions[static_cast<size_t>(i)] = m_nextPosition + begin + i;
                auto idt = at::from_blob(ids.data() + begin, {n}, at::kLong).to(m.device);
                logits =
                    m.arch->forward(m, idt, positions, cache, m_observer ? &hook : nullptr, rows);
                if (allLogits) {
                    const at::Tensor host = logits.to(at::kCPU).contiguous();
                    all.insert(all.end(), host.data_ptr<float>(),
                               host.data_ptr<float>() + host.numel());
                }
            }
        } catch (...) {
            cache.length = lengthBefore;
            cache.positions.resize(positionsBefore);
            cache.mask.resize(maskBefore);
            throw;
        }
        auto last = logits[logits.size(0) - 1].to(at::kCPU).contiguous();
        m_lastLogits.assign(last.data_ptr<float>(), last.data_ptr<float>() + last.numel());
        if (allLogits) {
            allLogits->shape = {T, logits.size(1)};
            allLogits->data = std::move(all);
        }
        m_tokens.insert(m_tokens.end(), tokens.begin(), tokens.end());
        m_nextPosition += T;
    });
}

Result<std::vector<float>> Session::recomputeLastStep(Observer* observer) const {
    return catchToResult([&]() -> std::vector<float> {
        const KvCache::Impl& full = m_cache.impl();
        const int64_t n = full.length;
        if (n == 0 || m_tokens.empty())
            throw KvError("recompute: the session holds no tokens");
        // A cache may hold fewer slots than tokens (an eviction keeps some of them), its last
        // slot always the last token's.
        if (static_cast<int64_t>(m_tokens.size()) < n ||
            static_cast<int64_t>(full.positions.size()) != n ||
            static_cast<int64_t>(full.mask.size()) != n)
            throw KvError("recompute: cache length " + std::to_string(n) + " does not match " +
                          std::to_string(m_tokens.size()) + " tokens");
        const Model::Impl& m = m_model->impl();
        // A cache over a snapshot's file mapping is not written (each touched page would be a
        // copy-on-write fault): the recomputed K/V are attended to beside the first n-1 slots.
        const bool aside = full.fileBacked;
        // Otherwise the last slot of every layer, to put back afterwards.
        std::vector<at::Tensor> savedK, savedV;
        for (std::size_t l = 0; l < full.k.size() && !aside; ++l) {
            savedK.push_back(full.k[l].narrow(1, n - 1, 1).clone());
            savedV.push_back(full.v[l].narrow(1, n - 1, 1).clone());
        }
        struct PutBack {
            const KvCache::Impl& full;
            const std::vector<at::Tensor>& k;
            const std::vector<at::Tensor>& v;
            int64_t slot;
            ~PutBack() {
                for (std::size_t l = 0; l < k.size(); ++l) {
                    full.k[l].narrow(1, slot, 1).copy_(k[l]);
                    full.v[l].narrow(1, slot, 1).copy_(v[l]);
                }
            }
        } putBack{full, savedK, savedV, n - 1};
        // A view of the first n-1 slots sharing the tensors: the forward appends at slot n-1.
        KvCache::Impl view;
        view.k = full.k;
        view.v = full.v;
        view.length = n - 1;
        view.positions.assign(full.positions.begin(), full.positions.end() - 1);
        view.mask.assign(full.mask.begin(), full.mask.end() - 1);
        view.headMask = full.headMaskPrefix(n - 1);
        view.appendAside = aside;
        int64_t id = m_tokens.back();
        auto idt = at::from_blob(&id, {1}, at::kLong).to(m.device);
        const std::vector<int64_t> positions{full.positions.back()};
        ObserverHook hook(observer);
        at::Tensor logits =
            m.arch->forward(m, idt, positions, view, observer ? &hook : nullptr, LogitRows::Last);
        auto last = logits[0].to(at::kCPU).contiguous();
        return std::vector<float>(last.data_ptr<float>(), last.data_ptr<float>() + last.numel());
    });
}

Result<GenerateResult> Session::generate(int steps, Sampler& sampler,
                                         const std::function<bool(int32_t)>& onToken) {
    GenerateResult out;
    out.stopReason = "steps";
    if (m_lastLogits.empty())
        return Result<GenerateResult>::error("generate: nothing has been fed yet (empty prompt)");
    if (Status st = checkSamplerSettings(sampler.settings(), "generate"); !st)
        return Result<GenerateResult>::error(st.message());
    const auto& c = m_model->config();
    // Room for the whole run up front (at most what the context allows): one copy of a restored
    // or full cache, into a buffer of the size the run needs, not twice the cache.
    if (steps > 0) {
        if (Status st = catchToStatus(
                [&] { reserveFor(std::min<int64_t>(steps, c.maxContext - m_nextPosition)); });
            !st)
            return Result<GenerateResult>::error(st.message());
    }
    for (int i = 0; i < steps; ++i) {
        if (m_nextPosition >= c.maxContext) {
            out.stopReason = "context_full";
            break;
        }
        // NaN weights or a damaged cache: stop with the step and the token, never sample.
        if (firstNonFiniteLogit(m_lastLogits))
            return Result<GenerateResult>::error(
                "generate: step " + std::to_string(i) + " (position " +
                std::to_string(m_nextPosition) +
                "): " + describeNonFiniteOutput(*m_model, m_lastLogits));
        const int32_t next = sampler.sample(m_lastLogits);
        if (c.eosId >= 0 && next == c.eosId) {
            out.stopReason = "eos";
            break;
        }
        if (c.sourceFormat == "llama2c" && next == c.bosId) {
            out.stopReason = "bos";
            break;
        }
        const int32_t one[1] = {next};
        if (Status s = feed(one); !s)
            return Result<GenerateResult>::error(s.message());
        out.tokens.push_back(next);
        if (onToken && !onToken(next)) {
            out.stopReason = "cancelled";
            break;
        }
    }
    return out;
}

} // namespace kvscope
