// diff of two snapshots (diff.h).
#include "state/surgery/diff.h"

#include "formats/halffloat.h"
#include "state/ledger/manifest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

namespace kvscope::state {

namespace {

using Json = nlohmann::json;

double element(const uint8_t* p, const std::string& dtype) {
    if (dtype == "f32") {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return dtype == "f16" ? fp16ToFloat(h) : bf16ToFloat(h);
}

struct Accum {
    double maxAbs = 0, dot = 0, aa = 0, bb = 0, dd = 0;
    void add(double x, double y) {
        const double d = x - y;
        maxAbs = std::max(maxAbs, std::abs(d));
        if (std::isnan(d))
            maxAbs = std::numeric_limits<double>::quiet_NaN();
        dot += x * y;
        aa += x * x;
        bb += y * y;
        dd += d * d;
    }
    void merge(const Accum& o) {
        maxAbs = std::isnan(o.maxAbs) ? o.maxAbs : std::max(maxAbs, o.maxAbs);
        dot += o.dot;
        aa += o.aa;
        bb += o.bb;
        dd += o.dd;
    }
    KvDelta delta() const {
        KvDelta d;
        d.maxAbs = maxAbs;
        d.relL2 = aa > 0 ? std::sqrt(dd / aa) : (dd > 0 ? INFINITY : 0.0);
        d.cosine = (aa > 0 && bb > 0) ? dot / std::sqrt(aa * bb) : (aa == 0 && bb == 0 ? 1.0 : 0.0);
        return d;
    }
};

Json deltaJson(const KvDelta& d) {
    auto num = [](double v) -> Json {
        if (std::isfinite(v))
            return v;
        return std::isnan(v) ? Json("nan") : Json(v > 0 ? "inf" : "-inf");
    };
    return {{"max_abs", num(d.maxAbs)}, {"rel_l2", num(d.relL2)}, {"cosine", num(d.cosine)}};
}

// Leaf-by-leaf comparison of two manifests. Objects recurse by key, lists of named objects by
// name, other arrays of equal length by index; anything else is compared as a value.
void compareJson(const Json& a, const Json& b, const std::string& path,
                 std::vector<FieldDifference>& out) {
    if (a.is_object() && b.is_object()) {
        for (auto it = a.begin(); it != a.end(); ++it) {
            const std::string p = path.empty() ? it.key() : path + "." + it.key();
            if (b.contains(it.key()))
                compareJson(it.value(), b.at(it.key()), p, out);
            else
                out.push_back({p, it.value(), nullptr});
        }
        for (auto it = b.begin(); it != b.end(); ++it)
            if (!a.contains(it.key()))
                out.push_back(
                    {path.empty() ? it.key() : path + "." + it.key(), nullptr, it.value()});
        return;
    }
    if (a.is_array() && b.is_array() && a != b) {
        // Lists of named entries (the weight fingerprints) are matched by name, so one
        // missing tensor does not make every later entry differ.
        auto named = [](const Json& arr) {
            for (const auto& e : arr)
                if (!e.is_object() || !e.contains("name") || !e["name"].is_string())
                    return false;
            return !arr.empty();
        };
        if (named(a) && named(b)) {
            std::map<std::string, const Json*> inB;
            for (const auto& e : b)
                inB.emplace(e["name"].get<std::string>(), &e);
            std::set<std::string> seen;
            for (const auto& e : a) {
                const std::string n = e["name"].get<std::string>();
                seen.insert(n);
                const auto it = inB.find(n);
                if (it == inB.end())
                    out.push_back({path + "[" + n + "]", e, nullptr});
                else
                    compareJson(e, *it->second, path + "[" + n + "]", out);
            }
            for (const auto& e : b)
                if (!seen.count(e["name"].get<std::string>()))
                    out.push_back({path + "[" + e["name"].get<std::string>() + "]", nullptr, e});
            return;
        }
        if (a.size() == b.size()) {
            for (std::size_t i = 0; i < a.size(); ++i)
                compareJson(a[i], b[i], path + "[" + std::to_string(i) + "]", out);
            return;
        }
    }
    if (a != b)
        out.push_back({path, a, b});
}

std::string layerProblem(const Snapshot& s, const char* name) {
    const uint64_t expected = s.expectedLayerBytes();
    for (std::size_t l = 0; l < s.layers.size(); ++l)
        for (int kv = 0; kv < 2; ++kv) {
            const Bytes& b = kv == 0 ? s.layers[l].key : s.layers[l].value;
            if (!b || b->size() != expected)
                return std::string(name) + ": layers." + std::to_string(l) +
                       (kv == 0 ? ".k" : ".v") + " holds " + std::to_string(b ? b->size() : 0) +
                       " bytes, expected " + std::to_string(expected);
        }
    return {};
}

template <typename T>
SequenceDiff compareSequences(const std::vector<T>& a, const std::vector<T>& b) {
    SequenceDiff d;
    d.lengthA = static_cast<int64_t>(a.size());
    d.lengthB = static_cast<int64_t>(b.size());
    d.compared = std::min(d.lengthA, d.lengthB);
    bool sameShift = d.compared > 0;
    const int64_t shift =
        d.compared > 0 ? static_cast<int64_t>(b[0]) - static_cast<int64_t>(a[0]) : 0;
    for (int64_t i = 0; i < d.compared; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const int64_t delta = static_cast<int64_t>(b[k]) - static_cast<int64_t>(a[k]);
        if (delta != shift)
            sameShift = false;
        if (delta != 0) {
            ++d.differ;
            if (d.firstDifferingIndex < 0)
                d.firstDifferingIndex = i;
        }
    }
    if (sameShift && shift != 0)
        d.offset = shift;
    return d;
}

// The checks that leave a head mask without a (layer, head, slot) for its entries (diff.h).
void collectInvalid(const Snapshot& s, const char* side, std::vector<InvalidInput>& out) {
    if (s.headMask.empty())
        return;
    // Shapes and values only: finiteness is not the head mask's business.
    for (auto& v : validateSnapshot(s, {.checkFinite = false}))
        if (v.structural && (v.id == "head_mask.shape" || v.id == "head_mask.values"))
            out.push_back({side, std::move(v)});
}

// The head masks compared at each (layer, KV head, slot) both states hold. Comparing the
// flattened arrays index by index, as diff once did, lines up another layer's or head's
// entries as soon as the cache lengths differ (a truncated or continued state).
SequenceDiff compareHeadMasks(const Snapshot& a, const Snapshot& b) {
    auto rows = [](const Snapshot& s) {
        return static_cast<int64_t>(s.layers.size()) * std::max<int64_t>(0, s.kvHeads);
    };
    auto slots = [](const Snapshot& s) { return std::max<int64_t>(0, s.cacheLength); };
    auto entries = [&](const Snapshot& s) {
        return s.headMask.empty() ? rows(s) * slots(s) : static_cast<int64_t>(s.headMask.size());
    };
    SequenceDiff d;
    d.lengthA = entries(a);
    d.lengthB = entries(b);
    const bool sound = entries(a) == rows(a) * slots(a) && entries(b) == rows(b) * slots(b);
    if (!sound)
        return d; // an invalid input (head_mask.shape): nothing to compare at
    const int64_t layers = std::min<int64_t>(a.layers.size(), b.layers.size());
    const int64_t heads =
        std::min(std::max<int64_t>(0, a.kvHeads), std::max<int64_t>(0, b.kvHeads));
    const int64_t n = std::min(slots(a), slots(b));
    auto at = [](const Snapshot& s, int64_t l, int64_t h, int64_t i) -> int64_t {
        return s.headMask.empty()
                   ? 1
                   : s.headMask[static_cast<std::size_t>((l * s.kvHeads + h) * s.cacheLength + i)];
    };
    d.compared = layers * heads * n;
    bool sameShift = d.compared > 0;
    int64_t shift = 0;
    for (int64_t l = 0; l < layers; ++l)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < n; ++i) {
                const int64_t delta = at(b, l, h, i) - at(a, l, h, i);
                if (l == 0 && h == 0 && i == 0)
                    shift = delta;
                if (delta != shift)
                    sameShift = false;
                if (delta != 0 && d.differ++ == 0)
                    d.firstDifferingIndex = (l * a.kvHeads + h) * a.cacheLength + i;
            }
    if (sameShift && shift != 0)
        d.offset = shift;
    return d;
}

} // namespace

double cacheDiffTolerance(const std::string& dtype) {
    return dtype == "f16" ? 2e-2 : dtype == "bf16" ? 1e-1 : 1e-3;
}

Json SequenceDiff::toJson() const {
    return {{"a", lengthA},
            {"b", lengthB},
            {"compared", compared},
            {"differ", differ},
            {"first_differing_index", firstDifferingIndex},
            {"offset", offset ? Json(*offset) : Json(nullptr)}};
}

bool DiffReport::identicalState() const {
    if (!invalid.empty())
        return false;
    if (firstDivergence >= 0 || !cacheMismatch.empty() || maxAbs != 0 || logitsMaxAbs != 0)
        return false;
    if (!positions.equal() || !mask.equal() || !headMask.equal() || nextPositionA != nextPositionB)
        return false;
    for (const auto& f : fields)
        if (f.field != "lineage.id" && f.field != "lineage.created_at")
            return false;
    return true;
}

int DiffReport::manifestDifferences() const {
    int n = 0;
    for (const auto& f : fields)
        n += f.field != "lineage.id" && f.field != "lineage.created_at";
    return n;
}

int64_t DiffReport::firstDifference() const {
    int64_t first = -1;
    for (int64_t i : {firstDivergence, positions.firstDifferingIndex, mask.firstDifferingIndex,
                      firstDivergingPosition})
        if (i >= 0 && (first < 0 || i < first))
            first = i;
    return first;
}

std::string DiffReport::verdict() const {
    if (identicalState())
        return "identical";
    const bool same = invalid.empty() && firstDivergence < 0 && tokensA == tokensB &&
                      cacheMismatch.empty() && firstDivergingLayer < 0 && positions.equal() &&
                      mask.equal() && headMask.equal() && nextPositionA == nextPositionB &&
                      logitsMaxAbs >= 0 && logitsMaxAbs <= tolerance;
    return same ? "same" : "different";
}

Json DiffReport::toJson() const {
    Json ls = Json::array();
    for (const auto& l : layers) {
        Json hs = Json::array();
        for (const auto& h : l.heads)
            hs.push_back(
                {{"head", h.head}, {"key", deltaJson(h.key)}, {"value", deltaJson(h.value)}});
        ls.push_back({{"layer", l.layer},
                      {"key", deltaJson(l.key)},
                      {"value", deltaJson(l.value)},
                      {"heads", hs}});
    }
    Json fs = Json::array();
    for (const auto& f : fields)
        fs.push_back({{"field", f.field}, {"a", f.a}, {"b", f.b}});
    Json bad = Json::array();
    for (const auto& i : invalid)
        bad.push_back(
            {{"side", i.side}, {"check", i.violation.id}, {"message", i.violation.message}});
    return {{"tokens",
             {{"a", tokensA},
              {"b", tokensB},
              {"common_prefix", commonPrefix},
              {"first_divergence", firstDivergence},
              {"token_a", tokenA},
              {"token_b", tokenB}}},
            {"positions", positions.toJson()},
            {"next_position", {{"a", nextPositionA}, {"b", nextPositionB}}},
            {"mask", mask.toJson()},
            {"head_mask", headMask.toJson()},
            {"cache",
             {{"compared_positions", comparedPositions},
              {"mismatch", cacheMismatch},
              {"max_abs", std::isfinite(maxAbs) ? Json(maxAbs) : Json("nan")},
              {"tolerance", tolerance},
              {"first_diverging_layer", firstDivergingLayer},
              {"first_diverging_position", firstDivergingPosition},
              {"layers", ls}}},
            {"logits_max_abs", std::isfinite(logitsMaxAbs) ? Json(logitsMaxAbs) : Json("nan")},
            {"fields", fs},
            {"invalid", bad},
            {"identical_state", identicalState()},
            {"manifest_differences", manifestDifferences()},
            {"first_difference", firstDifference()},
            {"verdict", verdict()},
            {"models", {{"a", modelA}, {"b", modelB}, {"same", sameModel}}}};
}

DiffReport diff(const Snapshot& a, const Snapshot& b) {
    DiffReport r;
    r.modelA = modelName(a);
    r.modelB = modelName(b);
    r.sameModel = a.fingerprints.model == b.fingerprints.model;
    collectInvalid(a, "a", r.invalid);
    collectInvalid(b, "b", r.invalid);
    r.tokensA = static_cast<int64_t>(a.tokens.size());
    r.tokensB = static_cast<int64_t>(b.tokens.size());
    const int64_t common = std::min(r.tokensA, r.tokensB);
    int64_t i = 0;
    while (i < common &&
           a.tokens[static_cast<std::size_t>(i)] == b.tokens[static_cast<std::size_t>(i)])
        ++i;
    r.commonPrefix = i;
    if (i < common || r.tokensA != r.tokensB) {
        r.firstDivergence = i;
        r.tokenA = i < r.tokensA ? a.tokens[static_cast<std::size_t>(i)] : -1;
        r.tokenB = i < r.tokensB ? b.tokens[static_cast<std::size_t>(i)] : -1;
    }

    r.positions = compareSequences(a.positions, b.positions);
    r.nextPositionA = a.nextPosition;
    r.nextPositionB = b.nextPosition;
    r.mask = compareSequences(a.mask, b.mask);
    r.headMask = compareHeadMasks(a, b);

    // Cache deltas over the slots both hold.
    auto mismatch = [&](const std::string& field, const std::string& va, const std::string& vb) {
        if (r.cacheMismatch.empty() && va != vb)
            r.cacheMismatch = field + " differs (a " + va + ", b " + vb + ")";
    };
    mismatch("cache.layers", std::to_string(a.layers.size()), std::to_string(b.layers.size()));
    mismatch("cache.kv_heads", std::to_string(a.kvHeads), std::to_string(b.kvHeads));
    mismatch("cache.head_dim", std::to_string(a.headDim), std::to_string(b.headDim));
    mismatch("cache.dtype", a.cacheDtype, b.cacheDtype);
    if (r.cacheMismatch.empty() && a.cacheDtype != "f32" && a.cacheDtype != "f16" &&
        a.cacheDtype != "bf16")
        r.cacheMismatch = "cache.dtype '" + a.cacheDtype + "' is not f32, f16 or bf16";
    if (r.cacheMismatch.empty())
        r.cacheMismatch = layerProblem(a, "a");
    if (r.cacheMismatch.empty())
        r.cacheMismatch = layerProblem(b, "b");
    if (r.cacheMismatch.empty()) {
        const int64_t la = a.cacheLength, lb = b.cacheLength;
        const int64_t n = std::min(la, lb), hd = a.headDim;
        r.comparedPositions = n;
        r.tolerance = cacheDiffTolerance(a.cacheDtype);
        r.layerPositionMaxAbs.assign(a.layers.size() * static_cast<std::size_t>(n), 0.0f);
        const std::size_t es = a.cacheDtype == "f32" ? 4 : 2;
        for (std::size_t l = 0; l < a.layers.size(); ++l) {
            LayerDiff ld;
            ld.layer = static_cast<int>(l);
            Accum layerAcc[2];
            float* slotMax = r.layerPositionMaxAbs.data() + l * static_cast<std::size_t>(n);
            for (int64_t h = 0; h < a.kvHeads; ++h) {
                Accum acc[2];
                for (int kv = 0; kv < 2; ++kv) {
                    const auto& ab = kv == 0 ? *a.layers[l].key : *a.layers[l].value;
                    const auto& bb = kv == 0 ? *b.layers[l].key : *b.layers[l].value;
                    const uint8_t* pa = ab.data() + static_cast<std::size_t>(h * la * hd) * es;
                    const uint8_t* pb = bb.data() + static_cast<std::size_t>(h * lb * hd) * es;
                    for (int64_t p = 0; p < n; ++p) {
                        Accum slot;
                        for (int64_t d = 0; d < hd; ++d) {
                            const auto e = static_cast<std::size_t>(p * hd + d) * es;
                            slot.add(element(pa + e, a.cacheDtype), element(pb + e, a.cacheDtype));
                        }
                        acc[kv].merge(slot);
                        float& m = slotMax[p];
                        m = std::isnan(slot.maxAbs) || std::isnan(m)
                                ? NAN
                                : std::max(m, static_cast<float>(slot.maxAbs));
                    }
                    layerAcc[kv].merge(acc[kv]);
                }
                ld.heads.push_back({static_cast<int>(h), acc[0].delta(), acc[1].delta()});
            }
            for (int64_t p = 0; p < n; ++p) {
                if (!(slotMax[p] <= r.tolerance)) { // NaN diverges too
                    if (r.firstDivergingLayer < 0)
                        r.firstDivergingLayer = static_cast<int>(l);
                    if (r.firstDivergingPosition < 0 || p < r.firstDivergingPosition)
                        r.firstDivergingPosition = p;
                    break;
                }
            }
            ld.key = layerAcc[0].delta();
            ld.value = layerAcc[1].delta();
            for (double m : {ld.key.maxAbs, ld.value.maxAbs})
                r.maxAbs = std::isnan(m) || std::isnan(r.maxAbs) ? NAN : std::max(r.maxAbs, m);
            r.layers.push_back(std::move(ld));
        }
    }

    if (a.lastLogits.size() != b.lastLogits.size()) {
        r.logitsMaxAbs = -1;
    } else {
        Accum acc;
        for (std::size_t k = 0; k < a.lastLogits.size(); ++k)
            acc.add(a.lastLogits[k], b.lastLogits[k]);
        r.logitsMaxAbs = acc.maxAbs;
    }

    // Manifest fields; the weight list is compared per entry by the recursion.
    compareJson(toManifest(a), toManifest(b), "", r.fields);
    return r;
}

} // namespace kvscope::state
