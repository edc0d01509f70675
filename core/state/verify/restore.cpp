#include "state/verify/restore.h"

#include "util/topk.h"

#include "engine/kvcacheraw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvscope::state {

namespace {

std::vector<double> logSoftmax(std::span<const float> x) {
    double mx = -std::numeric_limits<double>::infinity();
    for (float v : x)
        mx = std::max(mx, static_cast<double>(v));
    double sum = 0;
    for (float v : x)
        sum += std::exp(static_cast<double>(v) - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
        out[i] = static_cast<double>(x[i]) - lse;
    return out;
}

std::vector<int32_t> topKIds(std::span<const float> x, int k) {
    std::vector<int32_t> ids;
    for (int64_t i : topKIndices(x, static_cast<std::size_t>(std::max(0, k))))
        ids.push_back(static_cast<int32_t>(i));
    return ids;
}

} // namespace

std::string describeErrors(const Report& r) {
    std::string out;
    int n = 0;
    for (const auto& v : r.violations) {
        if (v.severity != Severity::Error)
            continue;
        if (++n > 5) {
            out += "; ...";
            break;
        }
        out += (out.empty() ? "" : "; ") + v.id + ": " + v.message;
    }
    return out;
}

std::string profileName(ToleranceProfile p) {
    switch (p) {
    case ToleranceProfile::Exact:
        return "exact";
    case ToleranceProfile::SameDevice:
        return "same-device";
    case ToleranceProfile::CrossDevice:
        return "cross-device";
    }
    return "same-device";
}

std::optional<ToleranceProfile> parseProfile(std::string_view name) {
    if (name == "exact")
        return ToleranceProfile::Exact;
    if (name == "same-device")
        return ToleranceProfile::SameDevice;
    if (name == "cross-device")
        return ToleranceProfile::CrossDevice;
    return std::nullopt;
}

Tolerance toleranceFor(ToleranceProfile p, const std::string& dtype, double logitScale) {
    const double scale = std::max(1.0, logitScale);
    const double loose = dtype == "bf16" ? 1000.0 : dtype == "f16" ? 100.0 : 1.0;
    switch (p) {
    case ToleranceProfile::Exact:
        return {0.0, 0.0, true, 0};
    case ToleranceProfile::SameDevice:
        return {1e-5 * loose, 1e-3 * scale * loose, true, 0};
    case ToleranceProfile::CrossDevice:
        return {1e-3 * loose, 5e-2 * scale * loose, true, 4};
    }
    return {};
}

std::string toleranceDtype(const std::string& computeDtype,
                           std::initializer_list<std::string> cacheDtypes) {
    if (computeDtype != "f32")
        return computeDtype;
    auto rank = [](const std::string& d) { return d == "bf16" ? 2 : d == "f16" ? 1 : 0; };
    std::string loosest = "f32";
    for (const auto& d : cacheDtypes)
        if (rank(d) > rank(loosest))
            loosest = d;
    return loosest;
}

LogitComparison compareLogits(std::span<const float> a, std::span<const float> b, int topK) {
    LogitComparison c;
    c.topK = topK;
    if (a.size() != b.size() || a.empty()) {
        c.maxAbs = std::numeric_limits<double>::infinity();
        c.kl = std::numeric_limits<double>::infinity();
        return c;
    }
    // std::max drops a NaN operand: a NaN logit is remembered apart, or it would compare as a
    // perfect match (KL 0) and a cache holding NaN would look clean to every probe.
    bool nan = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = std::abs(static_cast<double>(a[i]) - b[i]);
        nan = nan || std::isnan(d);
        c.maxAbs = std::max(c.maxAbs, d);
    }
    const auto la = logSoftmax(a);
    const auto lb = logSoftmax(b);
    double kl = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double p = std::exp(la[i]);
        if (p > 0)
            kl += p * (la[i] - lb[i]);
    }
    nan = nan || std::isnan(kl);
    c.kl = std::max(0.0, kl); // rounding can make an exact match slightly negative
    const auto ta = topKIds(a, topK), tb = topKIds(b, topK);
    c.top1Reference = ta.empty() ? -1 : ta[0];
    c.top1Candidate = tb.empty() ? -1 : tb[0];
    c.top1Agree = c.top1Reference == c.top1Candidate;
    for (int32_t id : ta)
        c.topKOverlap += std::count(tb.begin(), tb.end(), id) > 0 ? 1 : 0;
    if (nan || std::isnan(c.maxAbs) || std::isnan(c.kl))
        c.maxAbs = c.kl = std::numeric_limits<double>::infinity();
    return c;
}

bool within(const LogitComparison& c, const Tolerance& t) {
    if (!(c.kl <= t.maxKl) && !(t.maxKl == 0 && c.maxAbs == 0))
        return false;
    if (!(c.maxAbs <= t.maxAbsLogit))
        return false;
    if (t.requireTop1 && !c.top1Agree)
        return false;
    return c.topKOverlap >= t.minTop5Overlap;
}

nlohmann::json toJson(const LogitComparison& c) {
    auto num = [](double x) {
        return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf");
    };
    return {{"kl", num(c.kl)},
            {"max_abs_logit", num(c.maxAbs)},
            {"top1_reference", c.top1Reference},
            {"top1_candidate", c.top1Candidate},
            {"top1_agree", c.top1Agree},
            {"topk_overlap", c.topKOverlap},
            {"topk", c.topK}};
}

nlohmann::json toJson(const Equivalence& e) {
    return {{"equivalent", e.equivalent},
            {"profile", profileName(e.profile)},
            {"comparison", toJson(e.comparison)},
            {"tolerance",
             {{"max_kl", e.tolerance.maxKl},
              {"max_abs_logit", e.tolerance.maxAbsLogit},
              {"require_top1", e.tolerance.requireTop1},
              {"min_top5_overlap", e.tolerance.minTop5Overlap}}}};
}

Result<Equivalence> checkEquivalence(const Session& restored, std::span<const float> stored,
                                     ToleranceProfile profile) {
    return catchToResult([&]() -> Equivalence {
        const auto& tokens = restored.tokens();
        const KvCache& cache = restored.cache();
        const auto n = static_cast<int64_t>(tokens.size());
        if (n == 0)
            throw KvError("equivalence: the state holds no tokens");
        // Fewer slots than tokens: an eviction (validation decides whether it was recorded).
        if (cache.length() > n || cache.length() == 0 ||
            static_cast<int64_t>(cache.positions().size()) != cache.length())
            throw KvError("equivalence: cache length " + std::to_string(cache.length()) +
                          " does not match " + std::to_string(n) + " tokens");
        // The state before the last token, then the last token again at its recorded position
        // (in place: no copy of the cache).
        auto recomputed = restored.recomputeLastStep();
        if (!recomputed)
            throw KvError("equivalence: recomputing the last step failed: " + recomputed.message());
        Equivalence e;
        e.profile = profile;
        e.comparison = compareLogits(stored, recomputed.value());
        double scale = 0;
        for (float v : stored)
            scale = std::max(scale, static_cast<double>(std::abs(v)));
        const std::string dt = restored.model()->computeDtype() != "f32"
                                   ? restored.model()->computeDtype()
                                   : cache.dtype();
        e.tolerance = toleranceFor(profile, dt, scale);
        e.equivalent = within(e.comparison, e.tolerance);
        return e;
    });
}

std::string describeMismatch(const Equivalence& e) {
    const auto& c = e.comparison;
    return "recomputed last-step logits differ (" + profileName(e.profile) + "): KL " +
           std::to_string(c.kl) + ", max |dlogit| " + std::to_string(c.maxAbs) + ", top-1 " +
           (c.top1Agree ? "agrees" : "differs");
}

Result<KvCache> cacheFromSnapshot(const Snapshot& s, const std::string& device, int64_t room) {
    if (s.layers.empty())
        return KvCache();
    // Borrowed views: each layer is copied once, straight into the cache's tensors, or not at
    // all when it lies in a loaded file's mapping (both K and V in the same one).
    std::vector<RawLayerView> views(s.layers.size());
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
        const Bytes& k = s.layers[l].key;
        const Bytes& v = s.layers[l].value;
        if (k)
            views[l].key = *k;
        if (v)
            views[l].value = *v;
        if (k && v && k->file() && k->file() == v->file())
            views[l].file = k->file();
    }
    auto cache = kvCacheFromViews(s.cacheDtype, device, s.kvHeads, s.headDim, s.positions, s.mask,
                                  views, std::max<int64_t>(64, room), room <= 0);
    if (cache && !s.headMask.empty())
        if (Status st = cache.value().setHeadMask(s.headMask); !st)
            return Result<KvCache>::error(st.message());
    return cache;
}

Result<Restored> restore(const Snapshot& s, std::shared_ptr<const Model> model,
                         const RestoreOptions& options) {
    if (!model)
        return Result<Restored>::error("restore: no model");
    Report report = validate(s, model.get(), options.validate);
    if (report.hasStructural()) {
        // Structural violations are refused even when forced: a cache of other shapes or
        // byte sizes than the model's would only crash or corrupt the forward pass.
        Report structural;
        for (const auto& v : report.violations)
            if (v.structural)
                structural.violations.push_back(v);
        return Result<Restored>::error("restore refused, structural mismatch (cannot be forced): " +
                                       describeErrors(structural));
    }
    if (report.hasErrors() && !options.force)
        return Result<Restored>::error("restore refused (" + describeErrors(report) +
                                       "); force it to restore anyway");
    auto cache = cacheFromSnapshot(s, model->device(), options.room);
    if (!cache)
        return Result<Restored>::error("restore: " + cache.message());
    Sampler sampler(s.hasSampler ? s.sampler : SamplerSettings{});
    if (s.hasSampler)
        sampler.setRngState(s.rngState);
    Session session(model, std::move(cache.value()), s.tokens, s.nextPosition, s.lastLogits);
    if (!options.force && options.equivalence && !s.tokens.empty() && !s.lastLogits.empty()) {
        auto eq = checkEquivalence(session, s.lastLogits, options.profile);
        if (!eq)
            return Result<Restored>::error("restore refused (logits.equivalence: " + eq.message() +
                                           "); force it to restore anyway");
        if (!eq.value().equivalent)
            return Result<Restored>::error(
                "restore refused (logits.equivalence: " + describeMismatch(eq.value()) +
                "); force it to restore anyway");
    }
    return Restored{std::move(session), sampler, std::move(report)};
}

} // namespace kvscope::state
