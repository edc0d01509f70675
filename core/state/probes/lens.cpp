// The logit lens and the direct logit attribution of a state (lens.h): observers on a fresh
// run and on the restored cache's last step, the rows read through engine/unembed.h.
#include "state/probes/lens.h"

#include "engine/observer.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"
#include "util/topk.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <numeric>
#include <span>

namespace kvscope::state {

namespace {

// Rows [first, first + n) of a [T, W] tensor.
HostTensor rowsOf(const HostTensor& t, int64_t first, int64_t n) {
    const int64_t w = t.dim(1);
    HostTensor r;
    r.shape = {n, w};
    r.data.assign(t.data.begin() + first * w, t.data.begin() + (first + n) * w);
    return r;
}

// The fresh run, fed in chunks (setChunk before each): every layer's residual and the logits,
// rows [from, to) of the whole run and its last row.
class GridRecorder : public Observer {
public:
    GridRecorder(int layers, int64_t from, int64_t to, int64_t tokens)
        : resid(static_cast<size_t>(layers)), lastResid(static_cast<size_t>(layers)), m_from(from),
          m_to(to), m_tokens(tokens) {}
    // The chunk about to be fed starts at token `offset`.
    void setChunk(int64_t offset) { m_offset = offset; }
    bool wants(std::string_view name, int) const override {
        return name == "resid" || name == "logits";
    }
    void observe(std::string_view name, int layer, const HostTensor& value) override {
        if (name == "logits")
            keep(value, logits, lastLogits);
        else if (layer >= 0 && layer < static_cast<int>(resid.size()))
            keep(value, resid[size_t(layer)], lastResid[size_t(layer)]);
    }
    std::vector<HostTensor> resid, lastResid; // per layer [n, C], [1, C]
    HostTensor logits, lastLogits;            // [n, vocab], [1, vocab]

private:
    // Appends this chunk's rows within [from, to) to `rows`; the run's last row to `last`.
    void keep(const HostTensor& value, HostTensor& rows, HostTensor& last) const {
        const int64_t T = value.dim(0), W = value.dim(1);
        const int64_t first = std::max(m_from, m_offset), end = std::min(m_to, m_offset + T);
        if (rows.shape.empty())
            rows.shape = {0, W};
        if (first < end) {
            const HostTensor r = rowsOf(value, first - m_offset, end - first);
            rows.data.insert(rows.data.end(), r.data.begin(), r.data.end());
            rows.shape[0] += end - first;
        }
        if (m_offset + T == m_tokens)
            last = rowsOf(value, T - 1, 1);
    }
    int64_t m_from, m_to, m_tokens, m_offset = 0;
};

// The restored cache's last step: one row of every part the decomposition needs.
class StepRecorder : public Observer {
public:
    explicit StepRecorder(int layers) {
        parts.heads.resize(size_t(layers));
        parts.mlp.resize(size_t(layers));
        resid.resize(size_t(layers));
    }
    bool wants(std::string_view name, int) const override {
        return name == "embed" || name == "attn_heads" || name == "ffn_out" || name == "resid";
    }
    void observe(std::string_view name, int layer, const HostTensor& value) override {
        const auto& row = value.data; // T = 1
        if (name == "embed")
            parts.embed = row;
        else if (layer < 0 || layer >= static_cast<int>(resid.size()))
            return;
        else if (name == "attn_heads")
            parts.heads[size_t(layer)] = row;
        else if (name == "ffn_out")
            parts.mlp[size_t(layer)] = row;
        else if (name == "resid")
            resid[size_t(layer)] = row;
    }
    ResidualParts parts;                   // final filled by recordLastStep
    std::vector<std::vector<float>> resid; // per layer [C]
};

struct LastStep {
    ResidualParts parts;
    HostTensor resid;          // [layers, C]
    std::vector<float> logits; // the recomputed step's
};

LastStep recordLastStep(const Session& session) {
    const auto& c = session.model()->config();
    const int L = static_cast<int>(c.nLayers);
    StepRecorder rec(L);
    auto logits = session.recomputeLastStep(&rec);
    if (!logits)
        throw KvError("the last step over the restored cache: " + logits.message());
    LastStep s;
    s.logits = std::move(logits).value();
    s.resid.shape = {L, c.dim};
    for (int l = 0; l < L; ++l) {
        if (static_cast<int64_t>(rec.resid[size_t(l)].size()) != c.dim)
            throw KvError("the forward pass did not report the residual of layer " +
                          std::to_string(l));
        s.resid.data.insert(s.resid.data.end(), rec.resid[size_t(l)].begin(),
                            rec.resid[size_t(l)].end());
    }
    s.parts = std::move(rec.parts);
    s.parts.final = rec.resid.back();
    return s;
}

// log softmax of one row, in double.
std::vector<double> logSoftmax(const float* x, int64_t n) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
        mx = std::max(mx, double(x[i]));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
        sum += std::exp(double(x[i]) - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> r(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        r[size_t(i)] = double(x[i]) - lse;
    return r;
}

// KL(p || q) from log-probabilities; +inf when either holds NaN (a row computed over a cache
// holding NaN), which std::max would otherwise turn into a perfect match.
double kl(const std::vector<double>& logP, const std::vector<double>& logQ) {
    double s = 0;
    for (size_t i = 0; i < logP.size(); ++i) {
        if (std::isnan(logP[i]) || std::isnan(logQ[i]))
            return INFINITY;
        if (std::isfinite(logP[i]))
            s += std::exp(logP[i]) * (logP[i] - logQ[i]);
    }
    return std::isnan(s) ? INFINITY : std::max(0.0, s);
}

LensCell makeCell(int layer, int64_t position, const std::vector<double>& logP,
                  const std::vector<double>& finalLogP, int top) {
    LensCell cell;
    cell.layer = layer;
    cell.position = position;
    // A row that is not a distribution (NaN from a damaged cache): no entropy, no top tokens,
    // not "certain" with arbitrary ids.
    if (std::any_of(logP.begin(), logP.end(), [](double lp) { return std::isnan(lp); })) {
        cell.entropy = std::numeric_limits<double>::quiet_NaN();
        cell.klToFinal = std::numeric_limits<double>::infinity();
        return cell;
    }
    for (double lp : logP)
        if (std::isfinite(lp))
            cell.entropy -= std::exp(lp) * lp;
    cell.klToFinal = kl(finalLogP, logP);
    for (int64_t id : topKIndices(logP, static_cast<size_t>(std::max(0, top))))
        cell.top.push_back({static_cast<int32_t>(id), std::exp(logP[size_t(id)])});
    return cell;
}

HostTensor unembedOrThrow(const Model& model, const HostTensor& rows) {
    auto r = unembedResidual(model, rows);
    if (!r)
        throw KvError(r.message());
    return std::move(r).value();
}

std::string textOf(const tok::Tokenizer* tokenizer, int32_t id) {
    if (!tokenizer)
        return std::to_string(id);
    const int32_t one[1] = {id};
    return tokenizer->decode(one);
}

nlohmann::json cellJson(const LensCell& c, const tok::Tokenizer* tokenizer) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& t : c.top)
        top.push_back({{"id", t.id}, {"text", textOf(tokenizer, t.id)}, {"p", t.p}});
    return {{"layer", c.layer},
            {"position", c.position},
            {"top", top},
            {"entropy", c.entropy},
            {"kl_to_final", c.klToFinal}};
}

void checkSession(const Session& session) {
    if (!session.model())
        throw KvError("logit lens: no model");
    if (session.tokens().empty() || session.cache().length() == 0)
        throw KvError("logit lens: the state holds no tokens");
}

} // namespace

nlohmann::json toJson(const LensResult& r, const tok::Tokenizer* tokenizer) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : r.cells)
        cells.push_back(cellJson(c, tokenizer));
    nlohmann::json restored = nlohmann::json::array();
    for (size_t l = 0; l < r.restored.size(); ++l) {
        nlohmann::json j = cellJson(r.restored[l], tokenizer);
        j["kl_to_fresh"] = r.klToFresh[l];
        restored.push_back(j);
    }
    return {{"layers", r.layers},
            {"tokens", r.tokens},
            {"positions", {r.from, r.to}},
            {"cells", cells},
            {"restored",
             {{"position", r.tokens - 1},
              {"recorded_position", r.restoredPosition},
              {"cells", restored},
              {"kl_final_to_fresh", r.klFinalToFresh},
              {"tolerance", r.tolerance},
              {"first_changed_layer",
               r.firstChangedLayer >= 0 ? nlohmann::json(r.firstChangedLayer) : nullptr}}},
            {"last_layer_max_abs_logit_diff", r.lastLayerMaxAbs}};
}

Result<LensResult> logitLens(const Session& session, const LensOptions& o) {
    return catchToResult([&]() -> LensResult {
        checkSession(session);
        const Model& model = *session.model();
        const auto& c = model.config();
        const int L = static_cast<int>(c.nLayers);
        const int64_t V = c.vocabSize;
        const auto T = static_cast<int64_t>(session.tokens().size());
        const int64_t to = o.to < 0 ? T : o.to;
        if (o.top < 1)
            throw KvError("logit lens: top " + std::to_string(o.top) + " lists no token");
        if (o.from < 0 || o.from >= to || to > T)
            throw KvError("logit lens: positions [" + std::to_string(o.from) + ", " +
                          std::to_string(to) + ") are not a range within the state's " +
                          std::to_string(T) + " tokens");
        LensResult r;
        r.layers = L;
        r.tokens = T;
        r.from = o.from;
        r.to = to;
        const int64_t n = to - o.from;

        // The fresh run of the tokens, every layer's residual recorded; fed in the chunks a
        // prefill without an observer runs (feed() with an observer would run one pass, holding
        // [heads, T, T] scores and [T, vocab] logits for the whole state).
        GridRecorder grid(L, o.from, to, T);
        {
            Session fresh(session.model());
            fresh.setObserver(&grid);
            fresh.reserveFor(T);
            const std::span<const int32_t> tokens(session.tokens());
            for (int64_t begin = 0; begin < T; begin += Session::kPrefillChunk) {
                grid.setChunk(begin);
                const auto count = std::min(Session::kPrefillChunk, T - begin);
                if (Status st = fresh.feed(tokens.subspan(size_t(begin), size_t(count))); !st)
                    throw KvError("logit lens: running the state's tokens: " + st.message());
            }
        }
        std::vector<std::vector<double>> finalLogP;
        for (int64_t t = 0; t < n; ++t)
            finalLogP.push_back(logSoftmax(grid.logits.data.data() + t * V, V));

        // The grid, layer by layer, in blocks of rows (a block's logits are rows x vocab).
        const int64_t block = std::max<int64_t>(1, std::min<int64_t>(n, (int64_t{1} << 24) / V));
        r.cells.reserve(static_cast<size_t>(L * n));
        for (int l = 0; l < L; ++l)
            for (int64_t b = 0; b < n; b += block) {
                const int64_t m = std::min(block, n - b);
                const HostTensor logits = unembedOrThrow(
                    model, m == n ? grid.resid[size_t(l)] : rowsOf(grid.resid[size_t(l)], b, m));
                for (int64_t i = 0; i < m; ++i) {
                    const float* row = logits.data.data() + i * V;
                    const int64_t t = b + i;
                    r.cells.push_back(
                        makeCell(l, o.from + t, logSoftmax(row, V), finalLogP[size_t(t)], o.top));
                    if (l == L - 1) {
                        const float* own = grid.logits.data.data() + t * V;
                        for (int64_t v = 0; v < V; ++v)
                            r.lastLayerMaxAbs =
                                std::max(r.lastLayerMaxAbs, double(std::abs(row[v] - own[v])));
                    }
                }
            }

        // The restored cache's last step, and the fresh run's last row beside it.
        const LastStep step = recordLastStep(session);
        r.restoredPosition = session.cache().positions().back();
        const HostTensor restoredLens = unembedOrThrow(model, step.resid);
        HostTensor freshRows;
        freshRows.shape = {L, c.dim};
        for (const auto& row : grid.lastResid)
            freshRows.data.insert(freshRows.data.end(), row.data.begin(), row.data.end());
        const HostTensor freshLens = unembedOrThrow(model, freshRows);
        const auto restoredFinal = logSoftmax(step.logits.data(), V);
        const auto freshFinal = logSoftmax(grid.lastLogits.data.data(), V);
        const std::string dtype = toleranceDtype(model.computeDtype(), {session.cache().dtype()});
        r.tolerance = toleranceFor(ToleranceProfile::SameDevice, dtype).maxKl;
        for (int l = 0; l < L; ++l) {
            const auto restored = logSoftmax(restoredLens.data.data() + l * V, V);
            const auto fresh = logSoftmax(freshLens.data.data() + l * V, V);
            r.restored.push_back(makeCell(l, T - 1, restored, restoredFinal, o.top));
            r.klToFresh.push_back(kl(fresh, restored));
            if (r.firstChangedLayer < 0 && r.changedByCache(l))
                r.firstChangedLayer = l;
        }
        r.klFinalToFresh = kl(freshFinal, restoredFinal);
        return r;
    });
}

nlohmann::json toJson(const HeadAttribution& a, const tok::Tokenizer* tokenizer) {
    const auto& p = a.parts;
    nlohmann::json layers = nlohmann::json::array();
    for (size_t l = 0; l < p.heads.size(); ++l)
        layers.push_back(
            {{"layer", l}, {"heads", p.heads[l]}, {"attn_bias", p.attnBias[l]}, {"mlp", p.mlp[l]}});
    return {{"position", a.position},
            {"token", {{"id", p.token}, {"text", textOf(tokenizer, p.token)}}},
            {"logit", a.modelLogit},
            {"pre_cap_logit", p.preCapLogit},
            {"sum", p.sum()},
            {"error", a.error},
            {"norm_scale", p.normScale},
            {"embedding", p.embedding},
            {"norm_bias", p.normBias},
            {"layers", layers},
            {"residual_error", p.residualError}};
}

Result<HeadAttribution> attributeHeads(const Session& session, int32_t token) {
    return catchToResult([&]() -> HeadAttribution {
        checkSession(session);
        const Model& model = *session.model();
        const LastStep step = recordLastStep(session);
        // NaN parts sum to NaN whichever head wrote them: refuse as attribute's slots do.
        const auto bad = std::find_if(step.logits.begin(), step.logits.end(),
                                      [](float x) { return !std::isfinite(x); });
        if (bad != step.logits.end())
            throw KvError("head attribution: the last step recomputed over the restored cache "
                          "gives non-finite logits (token " +
                          std::to_string(bad - step.logits.begin()) +
                          " is NaN or Inf): the cache holds non-finite or overflowing values "
                          "(cache.nonfinite in verify); nothing to attribute");
        if (token < 0)
            token = static_cast<int32_t>(std::max_element(step.logits.begin(), step.logits.end()) -
                                         step.logits.begin());
        auto parts = attributeLogit(model, step.parts, token);
        if (!parts)
            throw KvError(parts.message());
        HeadAttribution a;
        a.position = static_cast<int64_t>(session.tokens().size()) - 1;
        a.parts = std::move(parts).value();
        a.modelLogit = step.logits[size_t(token)];
        a.error = a.parts.sum() - a.parts.preCapLogit;
        return a;
    });
}

} // namespace kvscope::state
