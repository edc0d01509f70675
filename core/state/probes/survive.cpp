#include "state/probes/survive.h"

#include "engine/attention.h"
#include "engine/residual.h"
#include "state/probes/eviction.h"
#include "engine/session.h"
#include "state/probes/compare.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

namespace kvscope::state {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

const std::vector<std::string> kPolicies = {
    "full",       "replay",     "sink-window",     "h2o",
    "tova",       "snapkv",     "knorm",           "random",
    "oracle",     "quant-kivi", "quant-same-axis", "residual-all",
    "residual-at"};

const std::vector<std::string> kEviction = {"sink-window", "h2o",    "tova",  "snapkv",
                                            "knorm",       "random", "oracle"};

// The parameters each policy takes, with their defaults ("" = derived from the budget).
const std::map<std::string, std::map<std::string, std::string>>& knownParams() {
    static const std::map<std::string, std::map<std::string, std::string>> p = {
        {"full", {}},
        {"replay", {}},
        {"sink-window", {{"sinks", "4"}, {"allocation", "uniform"}}},
        {"h2o", {{"recent", ""}, {"allocation", "uniform"}}},
        {"tova", {{"allocation", "uniform"}}},
        {"snapkv", {{"window", "64"}, {"pool", "5"}, {"allocation", "uniform"}}},
        {"knorm", {{"allocation", "uniform"}}},
        {"random", {{"seed", "1"}, {"allocation", "uniform"}}},
        {"oracle", {{"horizon", ""}, {"allocation", "uniform"}}},
        {"quant-kivi", {{"bits", "4"}, {"group", "32"}, {"residual", "16"}, {"kv", "kv"}}},
        {"quant-same-axis", {{"bits", "4"}, {"group", "32"}, {"residual", "16"}, {"kv", "kv"}}},
        {"residual-all", {}},
        {"residual-at", {{"layer", ""}}},
    };
    return p;
}

size_t elementSize(const std::string& dtype) {
    return dtype == "f32" ? 4 : 2;
}

// Quantizes x[i * stride] for i in [0, n) to `bits` with min/max (asymmetric) and writes the
// dequantized values back.
void quantizeGroup(float* x, int64_t n, int64_t stride, int bits) {
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < n; ++i) {
        lo = std::min(lo, x[i * stride]);
        hi = std::max(hi, x[i * stride]);
    }
    const float levels = float((1 << bits) - 1);
    const float scale = (hi - lo) / levels;
    if (!(scale > 0))
        return; // a constant group is exact
    for (int64_t i = 0; i < n; ++i) {
        float& v = x[i * stride];
        const float q = std::clamp(std::nearbyint((v - lo) / scale), 0.0f, levels);
        v = lo + q * scale;
    }
}

// One layer's K or V [kvh, T, D]: tokens [0, T - residual) quantized, per channel (groups of
// `group` tokens along each channel) or per token (groups of `group` channels). Returns the
// bytes a packed store takes.
uint64_t quantize(HostTensor& t, bool perChannel, int bits, int64_t group, int64_t residual,
                  size_t elt) {
    const int64_t H = t.dim(0), T = t.dim(1), D = t.dim(2);
    const int64_t Q = std::max<int64_t>(0, T - residual);
    uint64_t groups = 0;
    for (int64_t h = 0; h < H; ++h) {
        float* base = t.data.data() + h * T * D;
        if (perChannel) {
            for (int64_t d = 0; d < D; ++d)
                for (int64_t g = 0; g < Q; g += group, ++groups)
                    quantizeGroup(base + g * D + d, std::min(group, Q - g), D, bits);
        } else {
            for (int64_t tok = 0; tok < Q; ++tok)
                for (int64_t g = 0; g < D; g += group, ++groups)
                    quantizeGroup(base + tok * D + g, std::min(group, D - g), 1, bits);
        }
    }
    const uint64_t quantBits = uint64_t(H * Q * D) * uint64_t(bits);
    return (quantBits + 7) / 8 + groups * 8 + uint64_t(H * (T - Q) * D) * elt;
}

Result<Compressed> fail(const std::string& m) {
    return Result<Compressed>::error(m);
}

} // namespace

std::string runCurve(const std::string& policy, const nlohmann::json& parameters) {
    const auto a = parameters.find("allocation");
    if (a == parameters.end() || !a->is_string() || *a == "uniform")
        return policy;
    return policy + " " + a->get<std::string>();
}

const std::vector<std::string>& survivalPolicies() {
    return kPolicies;
}

bool isEvictionPolicy(const std::string& policy) {
    return std::find(kEviction.begin(), kEviction.end(), policy) != kEviction.end();
}

std::string runSetting(const std::string& policy, double budget, const nlohmann::json& parameters) {
    auto text = [](const nlohmann::json& v) {
        return v.is_string() ? v.get<std::string>() : v.dump();
    };
    if (isEvictionPolicy(policy)) {
        std::ostringstream b;
        if (budget > 1)
            b << budget << " slots";
        else
            b << budget * 100 << " %";
        return b.str();
    }
    if (parameters.contains("bits"))
        return text(parameters["bits"]) + " bits";
    if (parameters.contains("layer"))
        return "layer " + text(parameters["layer"]);
    return {};
}

Result<Compressed> compress(const Snapshot& source, std::shared_ptr<const Model> model,
                            const SurviveOptions& options) {
    if (!model)
        return fail("survive: no model");
    const auto known = knownParams().find(options.policy);
    if (known == knownParams().end()) {
        std::string names;
        for (const auto& n : kPolicies)
            names += (names.empty() ? "" : ", ") + n;
        return fail("survive: unknown policy '" + options.policy + "' (known: " + names + ")");
    }
    std::map<std::string, std::string> p = known->second;
    for (const auto& [name, value] : options.params) {
        if (!p.count(name)) {
            std::string names;
            for (const auto& [n, v] : known->second)
                names += (names.empty() ? "" : ", ") + n;
            return fail("survive: policy " + options.policy + " takes no parameter '" + name + "'" +
                        (names.empty() ? "" : " (it takes: " + names + ")"));
        }
        p[name] = value;
    }
    const int64_t T = source.cacheLength;
    if (T < 1 || int64_t(source.tokens.size()) != T)
        return fail("survive: the state must cache every token it processed (" + std::to_string(T) +
                    " cached slots, " + std::to_string(source.tokens.size()) + " tokens)");
    for (int64_t i = 0; i < T; ++i)
        if (source.positions[size_t(i)] != i || source.mask[size_t(i)] == 0)
            return fail("survive: the state must hold its tokens at positions 0..n-1 with no "
                        "masked slot (slot " +
                        std::to_string(i) + " is at position " +
                        std::to_string(source.positions[size_t(i)]) +
                        (source.mask[size_t(i)] ? "" : ", masked") +
                        "): compress a state as a session made it");
    const bool eviction = isEvictionPolicy(options.policy);
    if (!(options.budget > 0) || (options.budget > 1 && !eviction) ||
        (options.budget > 1 &&
         (options.budget != std::floor(options.budget) || options.budget > double(T))))
        return fail("survive: budget " + std::to_string(options.budget) +
                    " is neither a fraction in (0, 1] nor a slot count in 1.." + std::to_string(T) +
                    (eviction ? "" : " (a count applies to eviction only)"));
    if (!eviction && options.budget != 1)
        return fail("survive: policy " + options.policy +
                    " keeps every slot: a budget applies to eviction policies only");

    auto restored = restore(source, model);
    if (!restored)
        return fail("survive: " + restored.message());
    const Session& full = restored.value().session;
    auto start = Clock::now();

    Compressed out;
    out.policy = options.policy;
    out.budget = options.budget;
    out.bytesFull = source.cacheBytes();
    KvCache cache = full.cache();
    std::vector<int64_t> kept(static_cast<size_t>(T), 0);
    EvictionPlan plan;
    std::iota(kept.begin(), kept.end(), int64_t(0));
    nlohmann::json params = nlohmann::json::object();

    if (options.policy == "full") {
        out.bytesKept = out.bytesFull;
    } else if (options.policy == "replay") {
        Session rebuilt(model);
        if (Status st = rebuilt.feed(source.tokens); !st)
            return fail("survive: replay: " + st.message());
        cache = rebuilt.cache();
        out.bytesKept = uint64_t(T) * sizeof(int32_t); // the token buffer
    } else if (options.policy == "residual-all" || options.policy == "residual-at") {
        // The checkpoint: the residual stream a run of the token buffer carries (what a
        // session would have kept while it ran; not part of the rebuild time).
        auto stream = residualStream(model, source.tokens);
        if (!stream)
            return fail("survive: recording the residual stream: " + stream.message());
        const int64_t L = cache.layers();
        const uint64_t residualBytes = uint64_t(T) * uint64_t(model->config().dim) * sizeof(float);
        if (options.policy == "residual-all") {
            start = Clock::now();
            auto rebuilt = projectCache(*model, stream.value(), cache.positions());
            if (!rebuilt)
                return fail("survive: " + rebuilt.message());
            cache = std::move(rebuilt.value());
            out.bytesKept = uint64_t(L) * residualBytes;
        } else {
            if (p["layer"].empty())
                p["layer"] = std::to_string(L / 2);
            auto layer = intParam(p, "layer", 0, L - 1);
            if (!layer)
                return fail(layer.message());
            const int from = int(layer.value());
            start = Clock::now();
            auto rebuilt =
                rebuildFromLayer(*model, from, stream.value()[size_t(from)], full.cache());
            if (!rebuilt)
                return fail("survive: " + rebuilt.message());
            cache = std::move(rebuilt.value());
            out.bytesKept = out.bytesFull / uint64_t(L) * uint64_t(from) + residualBytes;
        }
    } else if (eviction) {
        const int64_t k = options.budget > 1
                              ? int64_t(options.budget)
                              : std::clamp<int64_t>(std::llround(options.budget * double(T)), 1, T);
        // The oracle judges slots over the continuation survive() measures, unless told.
        if (options.policy == "oracle" && p["horizon"].empty())
            p["horizon"] = std::to_string(std::clamp(options.steps, 1, 4096));
        auto planned =
            planEviction(options.policy, p, options.params, *model, full, source.tokens, k);
        if (!planned)
            return fail(planned.message());
        plan = std::move(planned.value());
        kept = plan.keptSlots;
        const size_t elt = elementSize(cache.dtype());
        const size_t row = size_t(cache.headDim()) * elt; // one slot of one head
        const int64_t H = cache.kvHeads(), S = int64_t(kept.size());
        std::vector<KvCache::RawLayer> layers(size_t(cache.layers()));
        for (int l = 0; l < int(cache.layers()); ++l) {
            const auto key = cache.rawKey(l), value = cache.rawValue(l);
            auto& dst = layers[size_t(l)];
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < S; ++i) {
                    // A slot this head did not keep holds zeros: the state holds only what the
                    // plan kept (the head mask hides the zeros from attention).
                    const bool keep =
                        plan.headMask.empty() || plan.headMask[size_t((l * H + h) * S + i)] != 0;
                    const size_t at = (size_t(h) * size_t(T) + size_t(kept[size_t(i)])) * row;
                    for (auto [src, out] : {std::pair{&key, &dst.key}, {&value, &dst.value}}) {
                        if (keep)
                            out->insert(out->end(), src->begin() + long(at),
                                        src->begin() + long(at + row));
                        else
                            out->insert(out->end(), row, uint8_t{0});
                    }
                }
        }
        auto evicted = KvCache::fromRaw(cache.dtype(), cache.device(), H, cache.headDim(), kept,
                                        std::vector<uint8_t>(kept.size(), 1), layers);
        if (!evicted)
            return fail("survive: " + evicted.message());
        cache = std::move(evicted.value());
        if (Status st = cache.setHeadMask(plan.headMask); !st)
            return fail("survive: " + st.message());
        if (plan.headMask.empty()) {
            out.bytesKept =
                uint64_t(S) *
                (uint64_t(row) * 2 * uint64_t(H) * uint64_t(cache.layers()) + sizeof(int64_t));
        } else {
            // Each head stores its own slots with a 4-byte slot index; one position per slot.
            const int64_t entries =
                std::accumulate(plan.keptPerHead.begin(), plan.keptPerHead.end(), int64_t(0));
            out.bytesKept = uint64_t(entries) * (uint64_t(row) * 2 + sizeof(int32_t)) +
                            uint64_t(S) * sizeof(int64_t);
        }
    } else {                                   // quantization
        if (!options.params.count("residual")) // the default never exceeds a short state
            p["residual"] = std::to_string(std::min<int64_t>(std::stoll(p["residual"]), T));
        auto bits = intParam(p, "bits", 1, 8);
        auto group = intParam(p, "group", 1, 1 << 16);
        auto residual = intParam(p, "residual", 0, T);
        if (!bits || !group || !residual)
            return fail(!bits ? bits.message() : !group ? group.message() : residual.message());
        if (bits.value() != 2 && bits.value() != 4 && bits.value() != 8)
            return fail("survive: bits=" + p["bits"] + " (2, 4 or 8)");
        const std::string& which = p["kv"];
        if (which != "kv" && which != "k" && which != "v")
            return fail("survive: kv=" + which + " (kv, k or v)");
        const bool kivi = options.policy == "quant-kivi";
        const size_t elt = elementSize(cache.dtype());
        out.bytesKept = 0;
        for (int l = 0; l < int(cache.layers()); ++l) {
            HostTensor k = cache.key(l), v = cache.value(l);
            const uint64_t plain = uint64_t(k.numel()) * elt;
            out.bytesKept += which != "v" ? quantize(k, kivi, int(bits.value()), group.value(),
                                                     residual.value(), elt)
                                          : plain;
            out.bytesKept += which != "k" ? quantize(v, false, int(bits.value()), group.value(),
                                                     residual.value(), elt)
                                          : plain;
            auto next = cache.withLayer(l, k, v);
            if (!next)
                return fail("survive: " + next.message());
            cache = std::move(next.value());
        }
    }
    for (const auto& [name, value] : p)
        params[name] = value;
    if (options.policy == "snapkv") // was the question (the prompt's end) inside the window?
        params["query_aware"] =
            source.prompt.promptTokens > 0 &&
            T - std::stoll(p["window"]) < std::min<int64_t>(source.prompt.promptTokens, T);

    // The compressed state's own last step: logits over the compressed cache.
    Session compressed(model, cache, source.tokens, source.nextPosition, source.lastLogits);
    auto logits = compressed.recomputeLastStep();
    if (!logits)
        return fail("survive: recomputing the last step: " + logits.message());
    out.buildSeconds = secondsSince(start);

    Snapshot& s = out.snapshot;
    s = source;
    s.cacheLength = cache.length();
    s.positions = cache.positions();
    s.mask = cache.mask();
    s.headMask = cache.headMask();
    s.layers.assign(size_t(cache.layers()), {});
    for (int l = 0; l < int(cache.layers()); ++l)
        s.layers[size_t(l)] = {makeBytes(cache.rawKey(l)), makeBytes(cache.rawValue(l))};
    s.lastLogits = logits.value();
    if (!eviction && options.policy.rfind("quant", 0) == 0)
        s.cacheSourceType = "int" + p["bits"];
    nlohmann::json lineageParams = {{"policy", options.policy},    {"budget", options.budget},
                                    {"parameters", params},        {"bytes_kept", out.bytesKept},
                                    {"bytes_full", out.bytesFull}, {"logits", "recomputed"}};
    if (eviction)
        lineageParams["kept_tokens"] = kept;
    if (!plan.headMask.empty()) // which head kept how many (the head mask itself is in the state)
        lineageParams["kept_per_head"] = plan.keptPerHead;
    s.lineage = newLineage(model->device(), source.lineage.id, "survive", lineageParams);
    out.parameters = params;
    out.keptTokens = kept;
    out.budgetSlots = eviction ? plan.budget : T;
    out.keptPerHead = plan.keptPerHead;
    return out;
}

namespace {

// damage (see SurviveResult) of `small` against `full`; kept[i] is the token in small's slot i.
std::vector<float> damageMap(const KvCache& full, const KvCache& small,
                             const std::vector<int64_t>& kept) {
    const int64_t T = full.length(), S = small.length(), L = full.layers();
    std::vector<float> out(size_t(L * T), 1.0f);
    for (int l = 0; l < int(L); ++l) {
        const HostTensor k = full.key(l), v = full.value(l), k2 = small.key(l), v2 = small.value(l);
        const int64_t H = k.dim(0), D = k.dim(2);
        for (int64_t s = 0; s < S && s < int64_t(kept.size()); ++s) {
            const int64_t t = kept[size_t(s)];
            double err = 0, ref = 0;
            for (int64_t h = 0; h < H; ++h)
                for (int64_t d = 0; d < D; ++d) {
                    const size_t a = size_t((h * T + t) * D + d), b = size_t((h * S + s) * D + d);
                    err += std::pow(double(k2.data[b]) - k.data[a], 2) +
                           std::pow(double(v2.data[b]) - v.data[a], 2);
                    ref += double(k.data[a]) * k.data[a] + double(v.data[a]) * v.data[a];
                }
            out[size_t(l * T + t)] =
                ref > 0 ? float(std::sqrt(err / ref)) : (err > 0 ? 1.0f : 0.0f);
        }
    }
    return out;
}

double quantile(std::vector<double> v, double q) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    const double at = q * double(v.size() - 1);
    const size_t lo = size_t(std::floor(at)), hi = size_t(std::ceil(at));
    return v[lo] + (v[hi] - v[lo]) * (at - double(lo));
}

// How a state continues `answer`, fed teacher-forced: the share of its tokens ranked first
// and their mean negative log-likelihood (nats).
struct AnswerScore {
    double top1 = 0, loss = 0;
};
Result<AnswerScore> scoreAnswer(const Snapshot& state, const std::shared_ptr<const Model>& model,
                                const std::vector<int32_t>& answer) {
    auto r = restore(state, model);
    if (!r)
        return Result<AnswerScore>::error(r.message());
    Session& s = r.value().session;
    AnswerScore out;
    for (int32_t want : answer) {
        const auto& logits = s.lastLogits();
        const auto best = std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float x : logits)
            sum += std::exp(double(x) - double(*best));
        out.top1 += best - logits.begin() == want ? 1 : 0;
        out.loss += std::log(sum) - (double(logits[size_t(want)]) - double(*best));
        if (Status st = s.feed(std::span<const int32_t>(&want, 1)); !st)
            return Result<AnswerScore>::error(st.message());
    }
    const double n = double(std::max<size_t>(1, answer.size()));
    out.top1 /= n;
    out.loss /= n;
    return out;
}

constexpr long kNeedle = 16, kCue = 8;

// The recall probes (RecallProbe) for `options`, at the budget `share` of each probe's slots.
Result<std::vector<RecallProbe>> recallProbes(const std::shared_ptr<const Model>& model,
                                              SurviveOptions options, double share) {
    using Out = Result<std::vector<RecallProbe>>;
    const auto& c = model->config();
    const auto tok = model->tokenizer();
    // Ordinary tokens: not special, not BOS/EOS, with text when a tokenizer knows them.
    std::vector<int32_t> pool;
    for (int32_t id = 0; id < int32_t(c.vocabSize); ++id) {
        if (id == c.bosId || id == c.eosId)
            continue;
        if (tok && (id >= tok->vocabSize() || tok->isSpecial(id) || tok->tokenText(id).empty()))
            continue;
        pool.push_back(id);
    }
    const int64_t room = std::min<int64_t>(c.maxContext, 256);
    if (pool.size() < 32 + kNeedle + 1 || room < 1 + 2 * kNeedle + 16)
        return Out::error("survive: the recall probes need " + std::to_string(33 + kNeedle) +
                          " ordinary tokens and a context of " +
                          std::to_string(1 + 2 * kNeedle + 16) + " (the model has " +
                          std::to_string(pool.size()) + " and " + std::to_string(c.maxContext) +
                          ")");
    std::mt19937_64 rng(20261202);
    std::shuffle(pool.begin(), pool.end(), rng);
    const int32_t bos = tok && tok->bosId() ? *tok->bosId() : c.bosId;
    struct Probe {
        RecallProbe info;
        std::vector<int32_t> context, answer;
    };
    std::vector<Probe> probes;
    { // induction: a distinct segment and half of its repeat
        const int64_t n = std::min<int64_t>(32, (room - 2) / 2);
        Probe p;
        p.info.name = "induction";
        if (bos >= 0)
            p.context.push_back(bos);
        p.context.insert(p.context.end(), pool.begin(), pool.begin() + n);
        p.context.insert(p.context.end(), pool.begin(), pool.begin() + n / 2);
        p.answer.assign(pool.begin() + n / 2, pool.begin() + n);
        probes.push_back(std::move(p));
    }
    // The needle: 8 random ordinary tokens; the haystack: the model's own greedy text from
    // BOS (what it finds natural, so the needle stands out as the one thing to copy).
    const std::vector<int32_t> needle(pool.begin() + 32, pool.begin() + 32 + kNeedle);
    const int64_t fillerLength = std::min<int64_t>(96, room - 1 - 2 * kNeedle); // + answer fed
    std::vector<int32_t> filler;
    {
        Session s(model);
        const std::vector<int32_t> start{bos >= 0 ? bos : pool.front()};
        Sampler greedy(SamplerSettings{.temperature = 0.0f});
        if (Status st = s.feed(start); !st)
            return Out::error("survive: recall probe haystack: " + st.message());
        while (int64_t(filler.size()) < fillerLength) {
            const auto& logits = s.lastLogits();
            int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (next == c.eosId || next == bos) // the text ended: go on with a fresh sentence
                next = pool[filler.size() % pool.size()];
            filler.push_back(next);
            if (Status st = s.feed(std::span<const int32_t>(&next, 1)); !st)
                return Out::error("survive: recall probe haystack: " + st.message());
        }
    }
    for (double depth : {0.1, 0.5, 0.9}) {
        Probe p;
        p.info.name = "needle";
        p.info.depth = depth;
        const auto at = long(std::llround(depth * double(fillerLength)));
        if (bos >= 0)
            p.context.push_back(bos);
        p.context.insert(p.context.end(), filler.begin(), filler.begin() + at);
        p.context.insert(p.context.end(), needle.begin(), needle.end());
        p.context.insert(p.context.end(), filler.begin() + at, filler.end());
        p.context.insert(p.context.end(), needle.begin(), needle.begin() + kCue);
        p.answer.assign(needle.begin() + kCue, needle.end());
        probes.push_back(std::move(p));
    }
    options.recall = false;
    std::vector<RecallProbe> out;
    for (Probe& p : probes) {
        Session s(model);
        if (Status st = s.feed(p.context); !st)
            return Out::error("survive: recall probe " + p.info.name + ": " + st.message());
        auto state = capture(s, {});
        if (!state)
            return Out::error("survive: recall probe " + p.info.name + ": " + state.message());
        p.info.contextTokens = int64_t(p.context.size());
        p.info.answerTokens = int64_t(p.answer.size());
        options.budget = options.budget > 1 ? std::min(1.0, share) : options.budget;
        auto small = compress(state.value(), model, options);
        if (!small)
            return Out::error("survive: recall probe " + p.info.name + ": " + small.message());
        auto full = scoreAnswer(state.value(), model, p.answer);
        auto kept = scoreAnswer(small.value().snapshot, model, p.answer);
        if (!full || !kept)
            return Out::error("survive: recall probe " + p.info.name + ": " +
                              (!full ? full.message() : kept.message()));
        p.info.full = full.value().top1;
        p.info.compressed = kept.value().top1;
        p.info.fullLoss = full.value().loss;
        p.info.compressedLoss = kept.value().loss;
        out.push_back(p.info);
    }
    return out;
}

} // namespace

Result<SurviveResult> survive(const Snapshot& source, std::shared_ptr<const Model> model,
                              const SurviveOptions& options, Compressed* compressedOut) {
    if (options.steps < 1 || options.steps > 1 << 16)
        return Result<SurviveResult>::error("survive: steps must be in 1..65536");
    auto c = compress(source, model, options);
    if (!c)
        return Result<SurviveResult>::error(c.message());
    auto full = restore(source, model);
    if (!full)
        return Result<SurviveResult>::error("survive: " + full.message());
    auto small = restore(c.value().snapshot, model);
    if (!small)
        return Result<SurviveResult>::error("survive: the compressed state does not restore: " +
                                            small.message());
    Sampler greedy(SamplerSettings{.temperature = 0.0f});
    // The steps the context leaves: none is an error, not a result over zero steps (which
    // read as "KL 0, no divergence").
    const int64_t room = model->config().maxContext - source.nextPosition;
    if (room < 1)
        return Result<SurviveResult>::error(
            "survive: the state fills the model's context (next position " +
            std::to_string(source.nextPosition) + " of " +
            std::to_string(model->config().maxContext) +
            "): there is no step to continue; truncate it first");
    const int steps = int(std::min<int64_t>(options.steps, room));
    auto d = drift(full.value().session, small.value().session, steps, greedy);
    if (!d)
        return Result<SurviveResult>::error("survive: " + d.message());
    if (d.value().steps.empty())
        return Result<SurviveResult>::error("survive: no step could be compared (the "
                                            "continuation stopped at once: " +
                                            d.value().stopReason + ")");

    SurviveResult r;
    r.policy = c.value().policy;
    r.budget = c.value().budget;
    r.parameters = c.value().parameters;
    r.bytesKept = c.value().bytesKept;
    r.bytesFull = c.value().bytesFull;
    r.buildSeconds = c.value().buildSeconds;
    r.keptTokens = c.value().keptTokens;
    r.keptPerHead = c.value().keptPerHead;
    r.budgetSlots = c.value().budgetSlots;
    r.firstDivergence = d.value().firstDivergingStep;
    std::vector<double> kls;
    double agree = 0, dp = 0, nllA = 0, nllB = 0;
    for (const auto& st : d.value().steps) {
        kls.push_back(st.logits.kl);
        agree += st.logits.top1Agree ? 1 : 0;
        dp += std::exp(st.logProbA) - std::exp(st.logProbB);
        nllA -= st.logProbA;
        nllB -= st.logProbB;
        r.reference.push_back(st.tokenA);
        r.ownTokens.push_back(st.ownTokenB);
    }
    const double n = double(std::max<size_t>(1, kls.size()));
    r.steps = int(kls.size());
    r.kl = {std::accumulate(kls.begin(), kls.end(), 0.0) / n, quantile(kls, 0.5),
            quantile(kls, 0.99), kls.empty() ? 0 : *std::max_element(kls.begin(), kls.end())};
    r.top1Agreement = agree / n;
    r.meanDeltaP = dp / n;
    r.pplRatio = std::exp((nllB - nllA) / n);
    if (options.recall) {
        auto probes = recallProbes(model, options,
                                   double(c.value().budgetSlots) / double(source.cacheLength));
        if (!probes)
            return Result<SurviveResult>::error(probes.message());
        r.recall = std::move(probes.value());
    }
    r.damageLayers = full.value().session.cache().layers();
    r.damage = damageMap(full.value().session.cache(), small.value().session.cache(), r.keptTokens);
    if (compressedOut)
        *compressedOut = std::move(c.value());
    return r;
}

nlohmann::json SurviveResult::toJson(bool withDamage) const {
    auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); };
    auto recallJson = [&]() -> nlohmann::json {
        if (recall.empty())
            return nullptr;
        nlohmann::json needles = nlohmann::json::array(), j = nlohmann::json::object();
        for (const auto& p : recall) {
            nlohmann::json one = {{"full", p.full},
                                  {"compressed", p.compressed},
                                  {"full_loss", num(p.fullLoss)},
                                  {"compressed_loss", num(p.compressedLoss)},
                                  {"context_tokens", p.contextTokens},
                                  {"answer_tokens", p.answerTokens}};
            if (p.name == "needle") {
                one["depth"] = p.depth;
                needles.push_back(one);
            } else {
                j[p.name] = one;
            }
        }
        j["needle"] = needles;
        return j;
    };
    nlohmann::json j = {{"policy", policy},
                        {"budget", budget},
                        {"parameters", parameters},
                        {"bytes_kept", bytesKept},
                        {"bytes_full", bytesFull},
                        {"bytes_ratio", bytesFull ? double(bytesKept) / double(bytesFull) : 0.0},
                        {"build_seconds", buildSeconds},
                        {"steps", steps},
                        {"kl",
                         {{"mean", num(kl.mean)},
                          {"median", num(kl.median)},
                          {"p99", num(kl.p99)},
                          {"max", num(kl.max)}}},
                        {"top1_agreement", top1Agreement},
                        {"delta_p", num(meanDeltaP)},
                        {"first_divergence", firstDivergence},
                        {"ppl_ratio", num(pplRatio)},
                        {"recall", recallJson()},
                        {"kept_tokens", keptTokens},
                        {"reference_tokens", reference},
                        {"own_tokens", ownTokens}};
    if (!keptPerHead.empty())
        j["kept_per_head"] = keptPerHead;
    if (withDamage)
        j["damage"] = {{"layers", damageLayers},
                       {"tokens", damageLayers ? int64_t(damage.size()) / damageLayers : 0},
                       {"values", damage}};
    return j;
}

Result<std::vector<SurviveResult>> sweep(const Snapshot& source, std::shared_ptr<const Model> model,
                                         const SweepOptions& options) {
    // The runs, in order: eviction at every budget, quantization at every bit width, the rest once.
    std::vector<SurviveOptions> runs;
    for (const std::string& policy : kPolicies) {
        if (isEvictionPolicy(policy)) {
            for (const std::string& a : options.allocations) {
                if (a != "uniform" && !scoresPerHead(policy))
                    continue; // the same score in every head: the same choice
                for (double b : options.budgets)
                    runs.push_back({.policy = policy,
                                    .budget = b,
                                    .params = a == "uniform" ? std::map<std::string, std::string>{}
                                                             : std::map<std::string, std::string>{
                                                                   {"allocation", a}}});
            }
        } else if (policy.rfind("quant", 0) == 0) {
            for (int bits : options.bits)
                runs.push_back({.policy = policy, .params = {{"bits", std::to_string(bits)}}});
        } else if (policy == "residual-at") {
            std::vector<int> layers = options.layers;
            if (layers.empty())
                for (int l = 0; l < int(model->config().nLayers); ++l)
                    layers.push_back(l);
            for (int l : layers)
                runs.push_back({.policy = policy, .params = {{"layer", std::to_string(l)}}});
        } else {
            runs.push_back({.policy = policy, .params = {}});
        }
    }
    std::vector<SurviveResult> out;
    for (SurviveOptions& o : runs) {
        nlohmann::json given = nlohmann::json::object();
        for (const auto& [k, v] : o.params)
            given[k] = v;
        const std::string setting = runSetting(o.policy, o.budget, given);
        const std::string what = runCurve(o.policy, given) + (setting.empty() ? "" : " " + setting);
        if (options.progress && !options.progress(int(out.size()), int(runs.size()), what))
            return Result<std::vector<SurviveResult>>::error("survive: sweep stopped");
        o.steps = options.steps;
        o.recall = options.recall;
        auto r = survive(source, model, o);
        if (!r)
            return Result<std::vector<SurviveResult>>::error(r.message());
        out.push_back(std::move(r.value()));
    }
    return out;
}

nlohmann::json sweepToJson(const std::vector<SurviveResult>& results) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : results)
        a.push_back(r.toJson(false));
    return {{"results", a}};
}

std::string sweepToMarkdown(const std::vector<SurviveResult>& results) {
    std::ostringstream o;
    o << "| policy | budget / bits / layer | bytes kept | of full | build ms | KL mean | KL p99 | "
         "KL max | top-1 agree | first divergence | ppl ratio | copy loss | needle loss |\n"
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& r : results) {
        std::string what = runSetting(r.policy, r.budget, r.parameters);
        if (what.empty())
            what = "—";
        // Recall: the compressed probes' mean NLL of the answer (the full state's in brackets).
        std::string copy = "—", needle = "—";
        double needleFull = 0, needleSmall = 0;
        int needles = 0;
        for (const auto& p : r.recall) {
            std::ostringstream x;
            x << std::fixed << std::setprecision(2);
            if (p.name == "induction") {
                x << p.compressedLoss << " (" << p.fullLoss << ")";
                copy = x.str();
            } else {
                needleFull += p.fullLoss;
                needleSmall += p.compressedLoss;
                ++needles;
            }
        }
        if (needles) {
            std::ostringstream x;
            x << std::fixed << std::setprecision(2) << needleSmall / needles << " ("
              << needleFull / needles << ")";
            needle = x.str();
        }
        o << std::defaultfloat << "| " << runCurve(r.policy, r.parameters) << " | " << what << " | "
          << r.bytesKept << " | " << std::fixed << std::setprecision(1)
          << 100.0 * double(r.bytesKept) / double(std::max<uint64_t>(1, r.bytesFull)) << " % | "
          << std::setprecision(2) << r.buildSeconds * 1000 << " | " << std::scientific << r.kl.mean
          << " | " << r.kl.p99 << " | " << r.kl.max << " | " << std::fixed << std::setprecision(2)
          << r.top1Agreement << " | "
          << (r.firstDivergence < 0 ? std::string("none") : std::to_string(r.firstDivergence))
          << " | " << std::setprecision(3) << r.pplRatio << " | " << copy << " | " << needle
          << " |\n";
    }
    return o.str();
}

} // namespace kvscope::state
