// Slot attribution (attribution.h): leave-one-slot-out ablation through the cache's mask, the
// attention x |W_O v| estimate, and the rank correlation between them.
#include "state/probes/attribution.h"

#include "engine/attention.h"
#include "engine/observer.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvscope::state {

namespace {

// The last query row of every layer's attention probabilities: [H, P] per layer.
class LastQueryProbs : public Observer {
public:
    explicit LastQueryProbs(int layers) : rows(size_t(layers)) {}
    bool wants(std::string_view name, int layer) const override {
        return name == "attn_probs" && layer >= 0 && size_t(layer) < rows.size();
    }
    void observe(std::string_view, int layer, const HostTensor& value) override {
        // value: [H, T, P]; T is 1 here (one token fed), but take the last row whatever T is.
        if (value.shape.size() != 3)
            return;
        const int64_t H = value.dim(0), T = value.dim(1), P = value.dim(2);
        HostTensor& out = rows[size_t(layer)];
        out.shape = {H, P};
        out.data.resize(size_t(H * P));
        for (int64_t h = 0; h < H; ++h) {
            const float* src = value.data.data() + (h * T + T - 1) * P;
            std::copy(src, src + P, out.data.begin() + h * P);
        }
    }
    std::vector<HostTensor> rows;
};

void checkSession(const Session& session) {
    if (!session.model())
        throw KvError("attribute: no model");
    if (session.cache().empty() || session.tokens().empty())
        throw KvError("attribute: the state holds no tokens (an empty cache has no slot to "
                      "attribute)");
}

std::vector<float> recomputed(const Session& session, const char* what) {
    auto logits = session.recomputeLastStep();
    if (!logits)
        throw KvError(std::string("attribute: recomputing the last step ") + what + ": " +
                      logits.message());
    return std::move(logits.value());
}

// A NaN or infinite distribution has no top token and no KL to rank slots by: say where it
// comes from instead of ranking NaNs (verify names the slots: cache.nonfinite).
void requireFiniteLogits(const std::vector<float>& logits, const char* who) {
    const auto bad =
        std::find_if(logits.begin(), logits.end(), [](float x) { return !std::isfinite(x); });
    if (bad != logits.end())
        throw KvError(std::string(who) +
                      ": the last step recomputed over the restored cache gives non-finite "
                      "logits (token " +
                      std::to_string(bad - logits.begin()) +
                      " is NaN or Inf): the cache holds non-finite or overflowing values "
                      "(cache.nonfinite in verify); nothing to attribute");
}

// The last step with `slot` hidden: the cache's mask entry set to 0 on a copy (every layer and
// head stops seeing it, exactly as the forward pass treats any masked slot).
std::vector<float> hiddenLastStep(const Session& session, int64_t slot) {
    const KvCache& cache = session.cache();
    std::vector<uint8_t> mask = cache.mask();
    mask[size_t(slot)] = 0;
    auto hidden = cache.withPositions(cache.positions(), std::move(mask));
    if (!hidden)
        throw KvError("attribute: hiding slot " + std::to_string(slot) + ": " + hidden.message());
    const Session s(session.model(), std::move(hidden.value()), session.tokens(),
                    session.nextPosition(), {});
    return recomputed(s, ("without slot " + std::to_string(slot)).c_str());
}

double logSoftmaxAt(const std::vector<float>& logits, int32_t id) {
    const float top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits)
        sum += std::exp(double(x) - double(top));
    return double(logits[size_t(id)]) - double(top) - std::log(sum);
}

// The estimate per slot: the last query's probabilities (the recomputed last step, observed:
// the pass the ablations run, with nothing hidden) times each head's |W_O,h v|.
std::vector<double> estimates(const Session& session) {
    const auto& model = session.model();
    const KvCache& cache = session.cache();
    const int64_t n = cache.length();
    const int layers = int(model->config().nLayers);
    LastQueryProbs probs(layers);
    if (auto st = session.recomputeLastStep(&probs); !st)
        throw KvError("attribute: the last query's attention: " + st.message());
    std::vector<double> out(size_t(n), 0.0);
    for (int l = 0; l < layers; ++l) {
        const HostTensor& p = probs.rows[size_t(l)];
        auto norms = valueOutputNorms(*model, cache, l);
        if (!norms)
            throw KvError("attribute: " + norms.message());
        const HostTensor& w = norms.value(); // [H, n]
        if (p.shape.size() != 2 || p.dim(1) != n || p.dim(0) != w.dim(0))
            throw KvError("attribute: layer " + std::to_string(l) +
                          " reported no attention over the " + std::to_string(n) + " slots");
        const int64_t H = p.dim(0);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < n; ++t)
                out[size_t(t)] += double(p.data[size_t(h * n + t)]) * w.data[size_t(h * n + t)];
    }
    return out;
}

// Ranks with ties given their mean rank (1-based).
std::vector<double> ranks(const std::vector<double>& x) {
    std::vector<size_t> order(x.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < order.size();) {
        size_t j = i;
        while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]])
            ++j;
        const double mean = (double(i) + double(j)) / 2.0 + 1.0;
        for (size_t k = i; k <= j; ++k)
            r[order[k]] = mean;
        i = j + 1;
    }
    return r;
}

nlohmann::json num(double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json();
}

} // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (a.size() != b.size() || a.size() < 2)
        return nan;
    const std::vector<double> ra = ranks(a), rb = ranks(b);
    const double n = double(a.size());
    const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n;
    const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < ra.size(); ++i) {
        sab += (ra[i] - ma) * (rb[i] - mb);
        saa += (ra[i] - ma) * (ra[i] - ma);
        sbb += (rb[i] - mb) * (rb[i] - mb);
    }
    if (saa <= 0 || sbb <= 0)
        return nan;
    return std::clamp(sab / std::sqrt(saa * sbb), -1.0, 1.0);
}

Result<std::vector<float>> ablateSlot(const Session& session, int64_t slot) {
    return catchToResult([&]() -> std::vector<float> {
        checkSession(session);
        const int64_t n = session.cache().length();
        if (slot < 0 || slot >= n - 1)
            throw KvError("attribute: slot " + std::to_string(slot) + " is outside 0.." +
                          std::to_string(n - 2) + " (slot " + std::to_string(n - 1) +
                          ", the last, is the recomputed step's own query: it cannot be hidden "
                          "from it)");
        return hiddenLastStep(session, slot);
    });
}

Result<std::vector<double>> ablationEffects(const Session& session, int horizon) {
    return catchToResult([&]() -> std::vector<double> {
        checkSession(session);
        if (horizon < 1 || horizon > 4096)
            throw KvError("attribute: horizon " + std::to_string(horizon) +
                          " is outside 1..4096 steps");
        const int64_t n = session.cache().length();
        // The full state's distributions: the recomputed last step, then its greedy tokens.
        std::vector<std::vector<float>> reference{recomputed(session, "over the full cache")};
        std::vector<int32_t> continuation;
        {
            Session full = session;
            const int64_t maxContext = session.model()->config().maxContext;
            for (int step = 1; step < horizon && full.nextPosition() < maxContext; ++step) {
                const auto& last = reference.back();
                const int32_t next =
                    int32_t(std::max_element(last.begin(), last.end()) - last.begin());
                if (Status st = full.feed(std::span<const int32_t>(&next, 1)); !st)
                    throw KvError("attribute: continuing the full state: " + st.message());
                continuation.push_back(next);
                reference.push_back(full.lastLogits());
            }
        }
        std::vector<double> effect(size_t(n), 0.0);
        const auto& mask = session.cache().mask();
        for (int64_t s = 0; s + 1 < n; ++s) {
            if (mask[size_t(s)] == 0)
                continue;
            double sum = compareLogits(reference[0], hiddenLastStep(session, s)).kl;
            if (!continuation.empty()) {
                std::vector<uint8_t> hiddenMask = mask;
                hiddenMask[size_t(s)] = 0;
                auto cache = session.cache().withPositions(session.cache().positions(),
                                                           std::move(hiddenMask));
                if (!cache)
                    throw KvError("attribute: hiding slot " + std::to_string(s) + ": " +
                                  cache.message());
                Session hidden(session.model(), std::move(cache.value()), session.tokens(),
                               session.nextPosition(), {});
                hidden.reserveFor(int64_t(continuation.size()));
                for (size_t i = 0; i < continuation.size(); ++i) {
                    if (Status st = hidden.feed(std::span<const int32_t>(&continuation[i], 1)); !st)
                        throw KvError("attribute: continuing without slot " + std::to_string(s) +
                                      ": " + st.message());
                    sum += compareLogits(reference[i + 1], hidden.lastLogits()).kl;
                }
            }
            effect[size_t(s)] = sum / double(reference.size());
        }
        return effect;
    });
}

Result<AttributionResult> attributeSession(const Session& session,
                                           const std::vector<int64_t>& slotTokens,
                                           const AttributionOptions& options) {
    return catchToResult([&]() -> AttributionResult {
        checkSession(session);
        if (options.top < 0)
            throw KvError("attribute: top " + std::to_string(options.top) +
                          " is negative (give 1 or more slots, or 0 for every slot)");
        const KvCache& cache = session.cache();
        const auto& tokens = session.tokens();
        const int64_t n = cache.length(), nTokens = int64_t(tokens.size());
        if (!slotTokens.empty()) {
            if (int64_t(slotTokens.size()) != n)
                throw KvError("attribute: slotTokens holds " + std::to_string(slotTokens.size()) +
                              " token indices for " + std::to_string(n) + " cache slots");
            for (int64_t i : slotTokens)
                if (i < 0 || i >= nTokens)
                    throw KvError("attribute: slotTokens names token " + std::to_string(i) +
                                  " of a state with " + std::to_string(nTokens) + " tokens");
        }
        auto tokenOf = [&](int64_t slot) -> int64_t {
            if (!slotTokens.empty())
                return slotTokens[size_t(slot)];
            if (nTokens == n)
                return slot;
            return slot == n - 1 ? nTokens - 1 : -1; // the last slot is the last token's
        };

        const std::vector<float> full = recomputed(session, "over the full cache");
        requireFiniteLogits(full, "attribute");
        AttributionResult r;
        r.topToken = int32_t(std::max_element(full.begin(), full.end()) - full.begin());
        r.topLogp = logSoftmaxAt(full, r.topToken);
        const std::vector<double> estimate = estimates(session);
        const auto tok = session.model()->tokenizer();
        // Model vocabularies may be padded past the tokenizer's: such an id has no text.
        auto textOf = [&](int32_t prev, int32_t id) {
            return tok && id >= 0 && id < tok->vocabSize() ? tok->decodeNext(prev, id)
                                                           : std::string();
        };
        r.topText = textOf(tokens.back(), r.topToken);
        const auto& mask = cache.mask();
        std::vector<double> kls, ests;
        for (int64_t s = 0; s < n; ++s) {
            SlotAttribution a;
            a.slot = s;
            a.position = cache.positions()[size_t(s)];
            a.tokenIndex = tokenOf(s);
            if (a.tokenIndex >= 0) {
                a.token = tokens[size_t(a.tokenIndex)];
                a.text = textOf(a.tokenIndex > 0 ? tokens[size_t(a.tokenIndex - 1)] : -1, a.token);
            }
            a.estimate = estimate[size_t(s)];
            if (s == n - 1) {
                a.ablatable = false;
                a.why = "query";
            } else if (mask[size_t(s)] == 0) {
                a.ablatable = false;
                a.why = "masked";
            } else {
                const std::vector<float> hidden = hiddenLastStep(session, s);
                a.ablationKl = compareLogits(full, hidden).kl;
                a.deltaLogp = logSoftmaxAt(hidden, r.topToken) - r.topLogp;
                kls.push_back(a.ablationKl);
                ests.push_back(a.estimate);
            }
            r.bySlot.push_back(std::move(a));
        }
        r.ablated = int64_t(kls.size());
        r.rankCorrelation = spearman(kls, ests);
        for (const auto& a : r.bySlot)
            if (a.ablatable)
                r.ranked.push_back(a.slot);
        std::stable_sort(r.ranked.begin(), r.ranked.end(), [&](int64_t x, int64_t y) {
            return r.bySlot[size_t(x)].ablationKl > r.bySlot[size_t(y)].ablationKl;
        });
        if (options.top > 0 && int64_t(r.ranked.size()) > options.top)
            r.ranked.resize(size_t(options.top));
        return r;
    });
}

Result<AttributionResult> attribute(const Snapshot& snapshot, std::shared_ptr<const Model> model,
                                    const AttributionOptions& options, bool force) {
    if (!model)
        return Result<AttributionResult>::error("attribute: no model");
    if (snapshot.cacheLength < 1 || snapshot.tokens.empty())
        return Result<AttributionResult>::error(
            "attribute: the state holds no tokens (cache_length " +
            std::to_string(snapshot.cacheLength) + ", " + std::to_string(snapshot.tokens.size()) +
            " tokens)");
    if (options.top < 0) // before the restore: a bad option costs nothing
        return Result<AttributionResult>::error(
            "attribute: top " + std::to_string(options.top) +
            " is negative (give 1 or more slots, or 0 for every slot)");
    auto restored = restore(snapshot, model, {.force = force});
    if (!restored)
        return Result<AttributionResult>::error("attribute: " + restored.message());
    return attributeSession(restored.value().session, recordedKeptTokens(snapshot), options);
}

nlohmann::json toJson(const AttributionResult& r) {
    nlohmann::json slots = nlohmann::json::array();
    for (const auto& a : r.bySlot)
        slots.push_back({{"slot", a.slot},
                         {"position", a.position},
                         {"token_index", a.tokenIndex},
                         {"token", a.token},
                         {"text", a.text},
                         {"ablatable", a.ablatable},
                         {"why", a.why},
                         {"ablation_kl", num(a.ablationKl)},
                         {"delta_logp", num(a.deltaLogp)},
                         {"estimate", num(a.estimate)}});
    return {{"slots", slots},        {"rank_correlation", num(r.rankCorrelation)},
            {"ablated", r.ablated},  {"top_token", r.topToken},
            {"top_text", r.topText}, {"top_logp", num(r.topLogp)},
            {"ranked", r.ranked},    {"distribution", "recompute-last-step"}};
}

} // namespace kvscope::state
