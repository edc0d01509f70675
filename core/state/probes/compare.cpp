#include "state/probes/compare.h"

#include <cmath>

namespace kvscope::state {

namespace {

struct TensorDelta {
    double maxAbs = 0, cosine = 1;
    int64_t firstPos = -1;
    int firstHead = -1;
};

// a, b: [heads, len, dim] float32.
TensorDelta deltaOf(const HostTensor& a, const HostTensor& b, double threshold) {
    TensorDelta d;
    const int64_t H = a.dim(0), L = a.dim(1), D = a.dim(2);
    double dot = 0, na = 0, nb = 0;
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t p = 0; p < L; ++p) {
            const std::size_t base = static_cast<std::size_t>((h * L + p) * D);
            for (int64_t i = 0; i < D; ++i) {
                const double x = a.data[base + static_cast<std::size_t>(i)];
                const double y = b.data[base + static_cast<std::size_t>(i)];
                const double diff = std::abs(x - y);
                if (!(diff <= d.maxAbs)) // also catches NaN
                    d.maxAbs = std::isnan(diff) ? INFINITY : diff;
                if (!(diff <= threshold) && (d.firstPos < 0 || p < d.firstPos)) {
                    d.firstPos = p;
                    d.firstHead = static_cast<int>(h);
                }
                dot += x * y;
                na += x * x;
                nb += y * y;
            }
        }
    }
    d.cosine = (na == 0 && nb == 0) ? 1.0 : (na == 0 || nb == 0) ? 0.0 : dot / std::sqrt(na * nb);
    return d;
}

nlohmann::json num(double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf");
}

} // namespace

CacheComparison compareCaches(const KvCache& a, const KvCache& b, double threshold) {
    CacheComparison c;
    c.threshold = threshold;
    if (a.layers() != b.layers() || a.length() != b.length() || a.kvHeads() != b.kvHeads() ||
        a.headDim() != b.headDim()) {
        c.mismatch = "shapes differ: " + std::to_string(a.layers()) + " x [" +
                     std::to_string(a.kvHeads()) + ", " + std::to_string(a.length()) + ", " +
                     std::to_string(a.headDim()) + "] vs " + std::to_string(b.layers()) + " x [" +
                     std::to_string(b.kvHeads()) + ", " + std::to_string(b.length()) + ", " +
                     std::to_string(b.headDim()) + "]";
        return c;
    }
    for (int l = 0; l < a.layers(); ++l) {
        const auto k = deltaOf(a.key(l), b.key(l), threshold);
        const auto v = deltaOf(a.value(l), b.value(l), threshold);
        LayerDelta d{l, k.maxAbs, v.maxAbs, k.cosine, v.cosine, -1, -1};
        if (k.firstPos >= 0 && (v.firstPos < 0 || k.firstPos <= v.firstPos)) {
            d.firstDivergingPosition = k.firstPos;
            d.firstDivergingHead = k.firstHead;
        } else if (v.firstPos >= 0) {
            d.firstDivergingPosition = v.firstPos;
            d.firstDivergingHead = v.firstHead;
        }
        if (d.firstDivergingPosition >= 0) {
            if (c.firstDivergingLayer < 0)
                c.firstDivergingLayer = l;
            if (c.firstDivergingPosition < 0 || d.firstDivergingPosition < c.firstDivergingPosition)
                c.firstDivergingPosition = d.firstDivergingPosition;
        }
        c.layers.push_back(d);
    }
    return c;
}

nlohmann::json toJson(const CacheComparison& c) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& d : c.layers)
        layers.push_back({{"layer", d.layer},
                          {"key_max_abs", num(d.keyMaxAbs)},
                          {"value_max_abs", num(d.valueMaxAbs)},
                          {"key_cosine", d.keyCosine},
                          {"value_cosine", d.valueCosine},
                          {"first_diverging_position", d.firstDivergingPosition},
                          {"first_diverging_head", d.firstDivergingHead}});
    nlohmann::json j{{"threshold", c.threshold},
                     {"first_diverging_layer", c.firstDivergingLayer},
                     {"first_diverging_position", c.firstDivergingPosition},
                     {"layers", layers}};
    if (!c.mismatch.empty())
        j["mismatch"] = c.mismatch;
    return j;
}

nlohmann::json toJson(const ReplayResult& r) {
    return {{"cache", toJson(r.cache)},
            {"logits", toJson(r.logits)},
            {"positions_match", r.positionsMatch},
            {"identical", r.cache.mismatch.empty() && r.cache.firstDivergingLayer < 0}};
}

Result<ReplayResult> replay(const Snapshot& s, std::shared_ptr<const Model> model,
                            double threshold) {
    if (!model)
        return Result<ReplayResult>::error("replay: no model");
    if (threshold <= 0)
        threshold = s.cacheDtype == "bf16" ? 1e-1 : s.cacheDtype == "f16" ? 2e-2 : 1e-3;
    auto restored = restore(s, model, {.force = true, .validate = {.checkFinite = false}});
    if (!restored)
        return restored.status();
    Session fresh(model);
    if (Status st = fresh.feed(s.tokens); !st)
        return Result<ReplayResult>::error("replay: feeding the token buffer failed: " +
                                           st.message());
    ReplayResult r;
    r.cache = compareCaches(restored.value().session.cache(), fresh.cache(), threshold);
    r.logits = compareLogits(s.lastLogits, fresh.lastLogits());
    r.restoredPositions = s.positions;
    for (std::size_t i = 0; i < s.positions.size(); ++i)
        if (s.positions[i] != static_cast<int64_t>(i))
            r.positionsMatch = false;
    return r;
}

nlohmann::json toJson(const DriftResult& d) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : d.steps)
        steps.push_back({{"step", s.step},
                         {"token_a", s.tokenA},
                         {"own_token_b", s.ownTokenB},
                         {"kl", num(s.logits.kl)},
                         {"max_abs_logit", num(s.logits.maxAbs)},
                         {"top1_agree", s.logits.top1Agree},
                         {"topk_overlap", s.logits.topKOverlap},
                         {"log_p_a", num(s.logProbA)},
                         {"log_p_b", num(s.logProbB)}});
    return {{"tokens", d.tokens},          {"first_diverging_step", d.firstDivergingStep},
            {"max_kl", num(d.maxKl)},      {"max_abs_logit", num(d.maxAbs)},
            {"stop_reason", d.stopReason}, {"steps", steps}};
}

namespace {
double logSoftmaxAt(std::span<const float> logits, int32_t token) {
    if (token < 0 || size_t(token) >= logits.size())
        return -INFINITY;
    double m = -INFINITY;
    for (float x : logits)
        m = std::max(m, double(x));
    double sum = 0;
    for (float x : logits)
        sum += std::exp(double(x) - m);
    return double(logits[size_t(token)]) - m - std::log(sum);
}
} // namespace

Result<DriftResult> drift(const Session& a0, const Session& b0, int steps, const Sampler& sampler0,
                          int topK) {
    if (!a0.model() || !b0.model())
        return Result<DriftResult>::error("drift: a session has no model");
    if (a0.lastLogits().empty() || b0.lastLogits().empty())
        return Result<DriftResult>::error(
            "drift: both states need last-step logits (feed a prompt first)");
    if (Status st = checkSamplerSettings(sampler0.settings(), "drift"); !st)
        return Result<DriftResult>::error(st.message());
    Session a = a0, b = b0; // forks: the caller's sessions stay as they are
    Sampler sampler = sampler0;
    DriftResult d;
    d.stopReason = "steps";
    const auto& c = a.model()->config();
    for (int i = 0; i < steps; ++i) {
        if (a.nextPosition() >= c.maxContext ||
            b.nextPosition() >= b.model()->config().maxContext) {
            d.stopReason = "context_full";
            break;
        }
        for (const auto& [name, session] :
             {std::pair<const char*, const Session*>{"A", &a}, {"B", &b}})
            if (firstNonFiniteLogit(session->lastLogits()))
                return Result<DriftResult>::error(
                    std::string("drift: ") + name + ": step " + std::to_string(i) + ": " +
                    describeNonFiniteOutput(*session->model(), session->lastLogits()));
        Sampler forB = sampler; // the same RNG state applied to B's logits
        const int32_t tokA = sampler.sample(a.lastLogits());
        const int32_t tokB = forB.sample(b.lastLogits());
        DriftStep st{i,
                     tokA,
                     tokB,
                     compareLogits(a.lastLogits(), b.lastLogits(), topK),
                     logSoftmaxAt(a.lastLogits(), tokA),
                     logSoftmaxAt(b.lastLogits(), tokA)};
        d.maxKl = std::max(d.maxKl, st.logits.kl);
        d.maxAbs = std::max(d.maxAbs, st.logits.maxAbs);
        if (d.firstDivergingStep < 0 && tokA != tokB)
            d.firstDivergingStep = i;
        d.steps.push_back(st);
        if (c.eosId >= 0 && tokA == c.eosId) {
            d.stopReason = "eos";
            break;
        }
        if (c.sourceFormat == "llama2c" && tokA == c.bosId) {
            d.stopReason = "bos";
            break;
        }
        const int32_t one[1] = {tokA};
        if (Status s = a.feed(one); !s)
            return Result<DriftResult>::error("drift: A: " + s.message());
        if (Status s = b.feed(one); !s)
            return Result<DriftResult>::error("drift: B: " + s.message());
        d.tokens.push_back(tokA);
    }
    return d;
}

} // namespace kvscope::state
