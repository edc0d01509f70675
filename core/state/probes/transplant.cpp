// The residual-stream transplant and its persistence table (transplant.h), built on the
// session's Observer::replace intervention hook.
#include "state/probes/transplant.h"

#include "engine/observer.h"
#include "engine/session.h"

#include <algorithm>
#include <cmath>

namespace kvscope::state {

namespace {

// Records the residual stream after one layer.
class ResidualRecorder : public Observer {
public:
    explicit ResidualRecorder(int layer) : m_layer(layer) {}
    bool wants(std::string_view name, int layer) const override {
        return name == "resid" && layer == m_layer;
    }
    void observe(std::string_view, int, const HostTensor& value) override { resid = value; }
    HostTensor resid; // [T, C]

private:
    int m_layer;
};

// Replaces the residual stream after one layer with the donor's: every row (same length) or
// only the last row (the recipient's last position gets the donor's last position).
class ResidualPatcher : public Observer {
public:
    ResidualPatcher(int layer, const HostTensor& donor, TransplantPositions positions)
        : m_layer(layer), m_donor(donor), m_positions(positions) {}
    bool wants(std::string_view name, int layer) const override {
        return name == "resid" && layer == m_layer;
    }
    void observe(std::string_view, int, const HostTensor&) override {}
    bool replace(std::string_view, int, HostTensor& value) override {
        const int64_t T = value.dim(0), C = value.dim(1);
        const int64_t M = m_donor.dim(0);
        if (m_donor.dim(1) != C)
            throw KvError("transplant: donor residual width differs");
        if (m_positions == TransplantPositions::All) {
            if (M != T)
                throw KvError("transplant: all-position transplant of " + std::to_string(M) +
                              " donor rows into " + std::to_string(T) + " recipient rows");
            value.data = m_donor.data;
        } else {
            std::copy(m_donor.data.end() - C, m_donor.data.end(), value.data.end() - C);
        }
        ++patched;
        return true;
    }
    int patched = 0;

private:
    int m_layer;
    const HostTensor& m_donor;
    TransplantPositions m_positions;
};

// Greedy continuation: the distribution before each of `steps` tokens and the tokens chosen.
// `forcedFirst` >= 0 replaces the first chosen token (token-only intervention).
struct Run {
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> tokens;
};

Run continueGreedy(Session session, int steps, int32_t forcedFirst = -1) {
    Run r;
    const int64_t maxCtx = session.model()->config().maxContext;
    for (int k = 0; k < steps; ++k) {
        r.logits.push_back(session.lastLogits());
        const int32_t tok =
            k == 0 && forcedFirst >= 0 ? forcedFirst : Sampler::argmax(r.logits.back());
        r.tokens.push_back(tok);
        if (k + 1 == steps || session.nextPosition() >= maxCtx)
            break;
        const int32_t one[1] = {tok};
        if (Status st = session.feed(one); !st)
            throw KvError("transplant: decode step " + std::to_string(k) + ": " + st.message());
    }
    return r;
}

Persistence tabulate(std::string name, const Run& x, const Run& donor, const Run& original) {
    Persistence p;
    p.intervention = std::move(name);
    const std::size_t n = std::min({x.logits.size(), donor.logits.size(), original.logits.size()});
    for (std::size_t k = 0; k < n; ++k) {
        PersistenceStep s;
        s.step = static_cast<int>(k);
        s.token = x.tokens[k];
        s.klDonor = compareLogits(donor.logits[k], x.logits[k]).kl;
        s.klOriginal = compareLogits(original.logits[k], x.logits[k]).kl;
        s.matchesDonor = x.tokens[k] == donor.tokens[k];
        s.matchesOriginal = x.tokens[k] == original.tokens[k];
        p.steps.push_back(s);
    }
    return p;
}

Session feedWith(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                 Observer* observer, const char* what) {
    Session s(model);
    s.setObserver(observer);
    if (Status st = s.feed(tokens); !st)
        throw KvError(std::string("transplant: ") + what + ": " + st.message());
    s.setObserver(nullptr);
    return s;
}

nlohmann::json num(double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf");
}

} // namespace

std::string transplantPositionsName(TransplantPositions p) {
    return p == TransplantPositions::All ? "all" : "last";
}

nlohmann::json toJson(const TransplantResult& r) {
    nlohmann::json persistence = nlohmann::json::array();
    for (const auto& p : r.persistence) {
        nlohmann::json steps = nlohmann::json::array();
        for (const auto& s : p.steps)
            steps.push_back({{"step", s.step},
                             {"token", s.token},
                             {"kl_donor", num(s.klDonor)},
                             {"kl_original", num(s.klOriginal)},
                             {"matches_donor", s.matchesDonor},
                             {"matches_original", s.matchesOriginal}});
        nlohmann::json j{{"intervention", p.intervention}, {"steps", steps}};
        if (!p.skipped.empty())
            j["skipped"] = p.skipped;
        persistence.push_back(j);
    }
    return {{"layer", r.layer},
            {"positions", transplantPositionsName(r.positions)},
            {"recipient_tokens", r.recipientTokens},
            {"donor_tokens", r.donorTokens},
            {"kl_vs_donor", num(r.vsDonor.kl)},
            {"kl_vs_original", num(r.vsOriginal.kl)},
            {"kl_donor_vs_original", num(r.donorVsOriginal.kl)},
            {"vs_donor", toJson(r.vsDonor)},
            {"vs_original", toJson(r.vsOriginal)},
            {"donor_continuation", r.donorTokensGenerated},
            {"original_continuation", r.originalTokensGenerated},
            {"persistence", persistence}};
}

Result<TransplantResult> transplant(std::shared_ptr<const Model> model,
                                    const std::vector<int32_t>& recipient,
                                    const std::vector<int32_t>& donor, const TransplantOptions& o) {
    return catchToResult([&]() -> TransplantResult {
        if (!model)
            throw KvError("transplant: no model");
        const auto& c = model->config();
        if (recipient.empty() || donor.empty())
            throw KvError(std::string("transplant: the ") +
                          (recipient.empty() ? "recipient" : "donor") + " prompt is empty");
        if (o.layer < 0 || o.layer >= c.nLayers)
            throw KvError("transplant: layer " + std::to_string(o.layer) + " is outside 0.." +
                          std::to_string(c.nLayers - 1));
        if (o.steps < 0 || o.steps > 4096)
            throw KvError("transplant: steps " + std::to_string(o.steps) + " is outside 0..4096");
        const bool sameLength = recipient.size() == donor.size();
        if (o.positions == TransplantPositions::All && !sameLength)
            throw KvError("transplant: an all-position transplant needs prompts of the same "
                          "length (recipient " +
                          std::to_string(recipient.size()) + " tokens, donor " +
                          std::to_string(donor.size()) +
                          "); transplant the last position only, or use prompts of one length");
        const auto longest = static_cast<int64_t>(std::max(recipient.size(), donor.size()));
        if (longest + o.steps > c.maxContext)
            throw KvError("transplant: " + std::to_string(longest) + " tokens + " +
                          std::to_string(o.steps) + " steps exceed the model's context " +
                          std::to_string(c.maxContext));

        TransplantResult r;
        r.layer = o.layer;
        r.positions = o.positions;
        r.recipientTokens = static_cast<int64_t>(recipient.size());
        r.donorTokens = static_cast<int64_t>(donor.size());

        ResidualRecorder rec(o.layer);
        Session donorSession = feedWith(model, donor, &rec, "the donor prompt");
        Session original = feedWith(model, recipient, nullptr, "the recipient prompt");
        auto patchedRun = [&](TransplantPositions pos) {
            ResidualPatcher patch(o.layer, rec.resid, pos);
            Session s = feedWith(model, recipient, &patch, "the transplanted recipient");
            if (patch.patched != 1)
                throw KvError("transplant: the residual of layer " + std::to_string(o.layer) +
                              " was not reported by the forward pass");
            return s;
        };
        Session patched = patchedRun(o.positions);
        r.vsDonor = compareLogits(donorSession.lastLogits(), patched.lastLogits());
        r.vsOriginal = compareLogits(original.lastLogits(), patched.lastLogits());
        r.donorVsOriginal = compareLogits(donorSession.lastLogits(), original.lastLogits());

        if (o.steps > 0) {
            const Run donorRun = continueGreedy(donorSession, o.steps);
            const Run originalRun = continueGreedy(original, o.steps);
            r.donorTokensGenerated = donorRun.tokens;
            r.originalTokensGenerated = originalRun.tokens;
            const Session last = o.positions == TransplantPositions::Last
                                     ? patched
                                     : patchedRun(TransplantPositions::Last);
            r.persistence.push_back(
                tabulate("residual-only", continueGreedy(last, o.steps), donorRun, originalRun));
            r.persistence.push_back(tabulate("token-only",
                                             continueGreedy(original, o.steps, donorRun.tokens[0]),
                                             donorRun, originalRun));
            if (sameLength) {
                const Session all = o.positions == TransplantPositions::All
                                        ? patched
                                        : patchedRun(TransplantPositions::All);
                r.persistence.push_back(
                    tabulate("residual+kv", continueGreedy(all, o.steps), donorRun, originalRun));
            } else {
                Persistence p;
                p.intervention = "residual+kv";
                p.skipped = "needs prompts of the same length (recipient " +
                            std::to_string(recipient.size()) + ", donor " +
                            std::to_string(donor.size()) + " tokens)";
                r.persistence.push_back(p);
            }
        }
        return r;
    });
}

} // namespace kvscope::state
