// localize (localize.h): the patch search over two states' K/V.
#include "state/probes/localize.h"

#include "state/surgery/faults.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace kvscope::state {

namespace {

// One patch as the search handles it: B's K/V over (layer, head or all, [first, end)).
struct Span {
    int layer = 0;
    int head = -1;
    int64_t first = 0, end = 0;
};

int32_t argmax(const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The KL a patch removes: before - after, with "nothing removed" where both are infinite (a
// NaN cache left as it was: inf - inf would be NaN) and +inf where the patch makes it finite.
double removed(double before, double after) {
    if (std::isinf(before) && std::isinf(after))
        return 0;
    return before - after;
}

// NaN (a distribution that is none) sorts last.
double sortKey(double x) {
    return std::isnan(x) ? -std::numeric_limits<double>::infinity() : x;
}

std::string describeFirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i)
        if (a[i] != b[i])
            return "they differ at token " + std::to_string(i) + " (" + std::to_string(a[i]) +
                   " vs " + std::to_string(b[i]) + ")";
    return "A holds " + std::to_string(a.size()) + " tokens, B " + std::to_string(b.size());
}

// Runs the next step of A with patches from B and compares it with B's next step.
class Search {
public:
    Search(const Session& a, const Session& b, int32_t probe, std::vector<float> reference)
        : m_a(a), m_b(b), m_probe(probe), m_reference(std::move(reference)),
          m_kvHeads(a.cache().kvHeads()), m_length(a.cache().length()),
          m_headDim(a.cache().headDim()) {}

    int evaluations = 0;

    double kl(const std::vector<Span>& patches) {
        ++evaluations;
        KvCache cache = m_a.cache();
        std::map<int, std::vector<const Span*>> byLayer;
        for (const Span& p : patches)
            byLayer[p.layer].push_back(&p);
        for (const auto& [layer, spans] : byLayer) {
            HostTensor k = side(m_keyA, layer, true, m_a), v = side(m_valueA, layer, false, m_a);
            const HostTensor& kb = side(m_keyB, layer, true, m_b);
            const HostTensor& vb = side(m_valueB, layer, false, m_b);
            for (const Span* p : spans) {
                const int64_t h0 = p->head < 0 ? 0 : p->head;
                const int64_t h1 = p->head < 0 ? m_kvHeads : p->head + 1;
                for (int64_t h = h0; h < h1; ++h) {
                    const int64_t off = (h * m_length + p->first) * m_headDim;
                    const int64_t count = (p->end - p->first) * m_headDim;
                    std::copy_n(kb.data.begin() + off, count, k.data.begin() + off);
                    std::copy_n(vb.data.begin() + off, count, v.data.begin() + off);
                }
            }
            auto patched = cache.withLayer(layer, k, v);
            if (!patched)
                throw KvError("localize: patching layer " + std::to_string(layer) + ": " +
                              patched.message());
            cache = std::move(patched.value());
        }
        Session s(m_a.model(), std::move(cache), m_a.tokens(), m_a.nextPosition(),
                  m_a.lastLogits());
        if (Status st = s.feed(std::span<const int32_t>(&m_probe, 1)); !st)
            throw KvError("localize: the next step of A: " + st.message());
        return compareLogits(m_reference, s.lastLogits()).kl;
    }

private:
    const HostTensor& side(std::map<int, HostTensor>& memo, int layer, bool key, const Session& s) {
        auto it = memo.find(layer);
        if (it == memo.end())
            it = memo.emplace(layer, key ? s.cache().key(layer) : s.cache().value(layer)).first;
        return it->second;
    }

    const Session& m_a;
    const Session& m_b;
    int32_t m_probe;
    std::vector<float> m_reference;
    int64_t m_kvHeads, m_length, m_headDim;
    std::map<int, HostTensor> m_keyA, m_valueA, m_keyB, m_valueB;
};

std::vector<Span> joined(std::vector<Span> a, const std::vector<Span>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Adjacent ranges of the same layer and head become one.
std::vector<Span> merged(std::vector<Span> spans) {
    std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) {
        return std::tie(x.layer, x.head, x.first) < std::tie(y.layer, y.head, y.first);
    });
    std::vector<Span> out;
    for (const Span& s : spans) {
        if (!out.empty() && out.back().layer == s.layer && out.back().head == s.head &&
            out.back().end == s.first)
            out.back().end = s.end;
        else
            out.push_back(s);
    }
    return out;
}

class Refiner {
public:
    Refiner(Search& search, double tolerance, int budget)
        : m_search(search), m_tolerance(tolerance), m_budget(budget) {}

    bool fits(const std::vector<Span>& patches) { return m_search.kl(patches) <= m_tolerance; }
    bool budgetLeft() const { return m_search.evaluations < m_budget; }

    // The narrowest ranges within `range` (of one layer, all heads) that, together with
    // `context` (everything else patched), keep KL under the tolerance. On entry context +
    // range fits; so does context + the result.
    std::vector<Span> refine(const std::vector<Span>& context, const Span& range) {
        if (range.end - range.first <= 1 || !budgetLeft())
            return {range};
        const int64_t mid = range.first + (range.end - range.first) / 2;
        Span left = range, right = range;
        left.end = mid;
        right.first = mid;
        if (fits(joined(context, {left})))
            return refine(context, left);
        if (!budgetLeft())
            return {range};
        if (fits(joined(context, {right})))
            return refine(context, right);
        auto l = refine(joined(context, {right}), left);
        auto r = refine(joined(context, l), right);
        return joined(l, r);
    }

private:
    Search& m_search;
    double m_tolerance;
    int m_budget;
};

std::vector<std::string> otherDifferences(const Session& a, const Session& b) {
    std::vector<std::string> out;
    const KvCache& ca = a.cache();
    const KvCache& cb = b.cache();
    if (ca.positions() != cb.positions())
        out.push_back("positions");
    if (a.nextPosition() != b.nextPosition())
        out.push_back("next_position");
    if (ca.mask() != cb.mask())
        out.push_back("mask");
    if (ca.headMask() != cb.headMask())
        out.push_back("head_mask");
    return out;
}

std::string layerList(const std::vector<int>& layers) {
    std::string s;
    for (std::size_t i = 0; i < layers.size(); ++i)
        s += (i ? ", " : "") + std::to_string(layers[i]);
    return s;
}

std::string summaryOf(const LocalizeResult& r) {
    char kl[64];
    std::snprintf(kl, sizeof kl, "KL %.3g", r.klBefore);
    if (r.verdict == "clean")
        return std::string("nothing that matters: A's next step is within the tolerance of B's (") +
               kl + ")";
    if (r.verdict == "not-kv") {
        std::string what;
        for (const auto& d : r.otherDifferences)
            what += (what.empty() ? "" : ", ") + d;
        char after[64];
        std::snprintf(after, sizeof after, "%.3g", r.klAllLayers);
        return std::string("not the K/V: with every layer patched from B, KL is still ") + after +
               " (" + kl + " before)" +
               (what.empty() ? std::string() : "; A and B also differ in " + what);
    }
    const auto layers = r.minimalLayers();
    int64_t patchedSlots = 0;
    for (int i : r.minimal)
        patchedSlots += r.patches[static_cast<std::size_t>(i)].end -
                        r.patches[static_cast<std::size_t>(i)].first;
    return std::string(layers.size() == 1 ? "the damage that matters is in layer "
                                          : "the damage that matters is in layers ") +
           layerList(layers) + ": " + std::to_string(r.minimal.size()) +
           (r.minimal.size() == 1 ? " patch" : " patches") + " over " +
           std::to_string(patchedSlots) + " slot(s) bring " + kl + " under the tolerance";
}

} // namespace

std::vector<int> LocalizeResult::minimalLayers() const {
    std::vector<int> layersOut;
    for (int i : minimal)
        layersOut.push_back(patches[static_cast<std::size_t>(i)].layer);
    std::sort(layersOut.begin(), layersOut.end());
    layersOut.erase(std::unique(layersOut.begin(), layersOut.end()), layersOut.end());
    return layersOut;
}

Result<LocalizeResult> localize(const Session& a, const Session* b,
                                const LocalizeOptions& options) {
    return catchToResult([&]() -> LocalizeResult {
        const auto& model = a.model();
        if (!model)
            throw KvError("localize: no model");
        const KvCache& ca = a.cache();
        if (ca.empty() || a.tokens().empty())
            throw KvError("localize: A holds no tokens: there is nothing to localize");
        if (options.mapBlocks < 0)
            throw KvError("localize: map blocks " + std::to_string(options.mapBlocks) +
                          " is negative (0 draws no map)");
        if (options.maxEvaluations < 1)
            throw KvError("localize: the search needs at least 1 evaluation");
        const auto tokens = static_cast<int64_t>(a.tokens().size());
        std::optional<Session> replay;
        if (!b) {
            if (ca.length() != tokens)
                throw KvError("localize: A's cache holds " + std::to_string(ca.length()) +
                              " slots for " + std::to_string(tokens) +
                              " tokens (an eviction or a cut): a replay of its tokens holds other "
                              "slots; give B, a state with the same slots");
            replay.emplace(model);
            replay->reserveFor(tokens + 1);
            if (Status st = replay->feed(a.tokens()); !st)
                throw KvError("localize: replaying A's tokens: " + st.message());
            b = &*replay;
        }
        const KvCache& cb = b->cache();
        if (b->tokens() != a.tokens())
            throw KvError("localize: A and B must hold the same tokens; " +
                          describeFirstDifference(a.tokens(), b->tokens()));
        if (cb.layers() != ca.layers() || cb.kvHeads() != ca.kvHeads() ||
            cb.headDim() != ca.headDim() || cb.length() != ca.length())
            throw KvError(
                "localize: the caches differ in shape: A has " + std::to_string(ca.layers()) +
                " layers x " + std::to_string(ca.kvHeads()) + " kv heads x " +
                std::to_string(ca.length()) + " slots x head_dim " + std::to_string(ca.headDim()) +
                ", B " + std::to_string(cb.layers()) + " x " + std::to_string(cb.kvHeads()) +
                " x " + std::to_string(cb.length()) + " x " + std::to_string(cb.headDim()));
        if (b->lastLogits().empty())
            throw KvError("localize: B holds no next-token logits to choose the next token from");

        LocalizeResult r;
        r.reference = replay ? "replay" : "b";
        r.profile = options.profile;
        r.cacheSlots = ca.length();
        r.layers = static_cast<int>(ca.layers());
        r.kvHeads = static_cast<int>(ca.kvHeads());
        r.otherDifferences = otherDifferences(a, *b);
        r.probeToken = argmax(b->lastLogits());

        Session nextB = *b;
        if (Status st = nextB.feed(std::span<const int32_t>(&r.probeToken, 1)); !st)
            throw KvError("localize: the next step of B: " + st.message());
        const std::vector<float>& reference = nextB.lastLogits();
        // Every KL to a NaN reference is inf: the search would call any A "not the K/V".
        if (std::any_of(reference.begin(), reference.end(),
                        [](float x) { return !std::isfinite(x); }))
            throw KvError(std::string("localize: ") + (replay ? "the replay of A's tokens" : "B") +
                          " gives non-finite next-step logits (NaN or Inf): its cache holds "
                          "non-finite or overflowing values (cache.nonfinite in verify), so it "
                          "cannot be the reference");
        double scale = 0;
        for (float v : reference)
            scale = std::max(scale, static_cast<double>(std::abs(v)));
        const std::string dtype = toleranceDtype(model->computeDtype(), {ca.dtype(), cb.dtype()});
        r.tolerance = toleranceFor(options.profile, dtype, scale).maxKl;

        Search search(a, *b, r.probeToken, reference);
        Refiner refiner(search, r.tolerance, options.maxEvaluations);
        r.klBefore = search.kl({});
        const int L = r.layers;
        const int64_t n = r.cacheSlots;
        std::vector<LocalizePatch> patches;
        std::vector<double> layerKl(static_cast<std::size_t>(L));
        for (int l = 0; l < L; ++l) {
            layerKl[static_cast<std::size_t>(l)] = search.kl({{l, -1, 0, n}});
            patches.push_back({l, -1, 0, n, layerKl[static_cast<std::size_t>(l)],
                               removed(r.klBefore, layerKl[static_cast<std::size_t>(l)]), "layer"});
        }
        std::vector<Span> all;
        for (int l = 0; l < L; ++l)
            all.push_back({l, -1, 0, n});
        r.klAllLayers = search.kl(all);

        std::vector<Span> minimal;
        if (r.klBefore <= r.tolerance) {
            r.verdict = "clean";
            r.klAfter = r.klBefore;
        } else if (r.klAllLayers > r.tolerance) {
            r.verdict = "not-kv";
            r.klAfter = r.klAllLayers;
        } else {
            r.verdict = "localized";
            // 2. Layers, largest effect first, until KL is under the tolerance.
            std::vector<int> order(static_cast<std::size_t>(L));
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
                return layerKl[static_cast<std::size_t>(x)] < layerKl[static_cast<std::size_t>(y)];
            });
            std::vector<int> chosen;
            for (int l : order) {
                chosen.push_back(l);
                std::vector<Span> set;
                for (int c : chosen)
                    set.push_back({c, -1, 0, n});
                const double kl =
                    chosen.size() == static_cast<std::size_t>(L) ? r.klAllLayers : search.kl(set);
                r.layerSearch.push_back({chosen, kl});
                if (kl <= r.tolerance)
                    break;
            }
            // 3. Slots within each chosen layer, then one head for all.
            for (int l : chosen)
                minimal.push_back({l, -1, 0, n});
            for (int l : chosen) {
                std::vector<Span> context;
                for (const Span& s : minimal)
                    if (s.layer != l)
                        context.push_back(s);
                auto ranges = merged(refiner.refine(context, {l, -1, 0, n}));
                if (r.kvHeads > 1)
                    for (Span& range : ranges) {
                        for (int h = 0; h < r.kvHeads && refiner.budgetLeft(); ++h) {
                            std::vector<Span> trial = context;
                            for (const Span& other : ranges)
                                if (&other != &range)
                                    trial.push_back(other);
                            Span one = range;
                            one.head = h;
                            trial.push_back(one);
                            if (refiner.fits(trial)) {
                                range.head = h;
                                break;
                            }
                        }
                    }
                minimal = joined(context, ranges);
            }
            // 4. Drop what is not needed.
            for (std::size_t i = 0; i < minimal.size() && minimal.size() > 1;) {
                std::vector<Span> without = minimal;
                without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
                if (refiner.fits(without))
                    minimal = std::move(without);
                else
                    ++i;
            }
            minimal = merged(minimal);
            r.klAfter = search.kl(minimal);
            for (const Span& s : minimal) {
                const double kl = search.kl({s});
                patches.push_back(
                    {s.layer, s.head, s.first, s.end, kl, removed(r.klBefore, kl), "minimal"});
            }
        }
        // Largest first; the minimal patches keep their layer/slot order in `minimal`.
        std::vector<int> idx(patches.size());
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) {
            return sortKey(patches[static_cast<std::size_t>(x)].klRemoved) >
                   sortKey(patches[static_cast<std::size_t>(y)].klRemoved);
        });
        for (std::size_t k = 0; k < idx.size(); ++k) {
            r.patches.push_back(patches[static_cast<std::size_t>(idx[k])]);
            if (r.patches.back().stage == "minimal")
                r.minimal.push_back(static_cast<int>(k));
        }
        std::sort(r.minimal.begin(), r.minimal.end(), [&](int x, int y) {
            const auto& p = r.patches[static_cast<std::size_t>(x)];
            const auto& q = r.patches[static_cast<std::size_t>(y)];
            return std::tie(p.layer, p.first, p.head) < std::tie(q.layer, q.first, q.head);
        });

        if (options.mapBlocks > 0) {
            LocalizeMap map;
            const int64_t blocks = std::min<int64_t>(options.mapBlocks, n);
            map.block = (n + blocks - 1) / blocks;
            for (int l = 0; l < L; ++l) {
                std::vector<double> row;
                for (int64_t first = 0; first < n; first += map.block)
                    row.push_back(removed(
                        r.klBefore, search.kl({{l, -1, first, std::min(n, first + map.block)}})));
                map.klRemoved.push_back(std::move(row));
            }
            r.map = std::move(map);
        }
        r.evaluations = search.evaluations;
        r.summary = summaryOf(r);
        return r;
    });
}

Result<LocalizeResult> localize(const Snapshot& a, const Snapshot* b,
                                std::shared_ptr<const Model> model,
                                const LocalizeOptions& options) {
    auto sa = forcedSession(a, model);
    if (!sa)
        return Result<LocalizeResult>::error("A: " + sa.message());
    if (!b)
        return localize(sa.value(), nullptr, options);
    auto sb = forcedSession(*b, model);
    if (!sb)
        return Result<LocalizeResult>::error("B: " + sb.message());
    return localize(sa.value(), &sb.value(), options);
}

nlohmann::json toJson(const LocalizeResult& r) {
    auto num = [](double x) {
        if (std::isnan(x))
            return nlohmann::json("nan");
        return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(x > 0 ? "inf" : "-inf");
    };
    nlohmann::json patches = nlohmann::json::array();
    for (const auto& p : r.patches)
        patches.push_back({{"layer", p.layer},
                           {"head", p.head < 0 ? nlohmann::json() : nlohmann::json(p.head)},
                           {"slots", {p.first, p.end}},
                           {"kl_after", num(p.klAfter)},
                           {"kl_removed", num(p.klRemoved)},
                           {"stage", p.stage}});
    nlohmann::json search = nlohmann::json::array();
    for (const auto& t : r.layerSearch)
        search.push_back({{"layers", t.layers}, {"kl", num(t.kl)}});
    nlohmann::json j{{"verdict", r.verdict},
                     {"summary", r.summary},
                     {"reference", r.reference},
                     {"probe_token", r.probeToken},
                     {"slots", r.cacheSlots},
                     {"layers", r.layers},
                     {"kv_heads", r.kvHeads},
                     {"profile", profileName(r.profile)},
                     {"kl_before", num(r.klBefore)},
                     {"kl_after", num(r.klAfter)},
                     {"kl_all_layers", num(r.klAllLayers)},
                     {"tolerance", r.tolerance},
                     {"patches", patches},
                     {"minimal", r.minimal},
                     {"minimal_layers", r.minimalLayers()},
                     {"layer_search", search},
                     {"other_differences", r.otherDifferences},
                     {"evaluations", r.evaluations}};
    if (r.map) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& row : r.map->klRemoved) {
            nlohmann::json cells = nlohmann::json::array();
            for (double x : row)
                cells.push_back(num(x));
            rows.push_back(cells);
        }
        j["map"] = {{"block", r.map->block}, {"kl_removed", rows}};
    }
    return j;
}

} // namespace kvscope::state
