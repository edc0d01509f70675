#include "state/probes/induction.h"

#include "engine/observer.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>

namespace kvscope::state {

namespace {

// Accumulates the two head scores from "attn_probs" as the forward pass reports it, without
// keeping the [heads, T, P] tensors (a long text on a large model would not fit).
class ScoreObserver : public Observer {
public:
    ScoreObserver(std::vector<int64_t> inductionKey, int layers, int heads)
        : m_key(std::move(inductionKey)), m_heads(heads),
          m_induction(static_cast<size_t>(layers * heads), 0.0),
          m_previous(static_cast<size_t>(layers * heads), 0.0) {}

    bool wants(std::string_view name, int) const override { return name == "attn_probs"; }

    void observe(std::string_view, int layer, const HostTensor& v) override {
        const int64_t H = v.dim(0), T = v.dim(1), P = v.dim(2);
        for (int64_t h = 0; h < H && h < m_heads; ++h) {
            const auto slot = static_cast<size_t>(layer * m_heads + h);
            for (int64_t r = 0; r < T; ++r) {
                const int64_t t = P - T + r; // the query's position
                const float* row = v.data.data() + (h * T + r) * P;
                if (t >= 1)
                    m_previous[slot] += row[t - 1];
                const int64_t k = t < static_cast<int64_t>(m_key.size()) ? m_key[size_t(t)] : -1;
                if (k >= 0 && k < P)
                    m_induction[slot] += row[k];
            }
        }
    }

    std::vector<HeadScore> scores(int layers, int64_t inductionQueries, int64_t positions) const {
        std::vector<HeadScore> out;
        for (int l = 0; l < layers; ++l)
            for (int h = 0; h < m_heads; ++h) {
                const auto slot = static_cast<size_t>(l * m_heads + h);
                HeadScore s;
                s.layer = l;
                s.head = h;
                s.induction = inductionQueries > 0
                                  ? m_induction[slot] / static_cast<double>(inductionQueries)
                                  : 0.0;
                s.previousToken =
                    positions > 1 ? m_previous[slot] / static_cast<double>(positions - 1) : 0.0;
                out.push_back(s);
            }
        return out;
    }

private:
    std::vector<int64_t> m_key; // per query position: the key an induction head attends, or -1
    int m_heads;
    std::vector<double> m_induction, m_previous;
};

// Rank (1 = top) and probability of `id` in one row of logits.
std::pair<int64_t, double> rankOf(const float* logits, int64_t vocab, int32_t id) {
    const float x = logits[id];
    int64_t above = 0;
    float maxLogit = logits[0];
    for (int64_t i = 0; i < vocab; ++i) {
        above += logits[i] > x ? 1 : 0;
        maxLogit = std::max(maxLogit, logits[i]);
    }
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i)
        z += std::exp(static_cast<double>(logits[i] - maxLogit));
    return {above + 1, std::exp(static_cast<double>(x - maxLogit)) / z};
}

} // namespace

HeadScore InductionReport::strongest() const {
    const std::vector<HeadScore> ranked = byInduction();
    return ranked.empty() ? HeadScore{-1, 0, -1, 0} : ranked.front();
}

std::vector<HeadScore> InductionReport::byInduction() const {
    std::vector<HeadScore> out = heads;
    std::stable_sort(out.begin(), out.end(), [](const HeadScore& a, const HeadScore& b) {
        return a.induction > b.induction;
    });
    return out;
}

Result<InductionReport> probeInduction(const std::shared_ptr<const Model>& model,
                                       const tok::Tokenizer& tokenizer,
                                       const InductionOptions& options) {
    return catchToResult([&]() -> InductionReport {
        const auto& c = model->config();
        const int64_t vocab = c.vocabSize;
        InductionReport rep;
        if (!options.text.empty()) {
            rep.tokens = tokenizer.encode(options.text);
            if (rep.tokens.size() < 2)
                throw KvError("induction: --text gives fewer than 2 tokens");
            if (static_cast<int64_t>(rep.tokens.size()) > c.maxContext)
                throw KvError("induction: --text is " + std::to_string(rep.tokens.size()) +
                              " tokens, more than the model's context (" +
                              std::to_string(c.maxContext) + ")");
        } else {
            const int64_t maxLen = std::min<int64_t>(512, (c.maxContext - 1) / 2);
            if (options.length < 2 || options.length > maxLen)
                throw KvError("induction: --length " + std::to_string(options.length) +
                              ": must be in 2.." + std::to_string(maxLen) +
                              " (BOS and two copies within the model's context)");
            std::vector<int32_t> pool;
            for (int32_t id = 0; id < std::min<int64_t>(vocab, tokenizer.vocabSize()); ++id)
                if (!tokenizer.isSpecial(id) && !tokenizer.tokenText(id).empty())
                    pool.push_back(id);
            if (static_cast<int64_t>(pool.size()) < options.length)
                throw KvError("induction: the vocabulary has fewer than --length ordinary tokens");
            std::mt19937_64 rng(options.seed);
            std::shuffle(pool.begin(), pool.end(), rng); // distinct tokens: one earlier match
            const auto L = static_cast<size_t>(options.length);
            const auto bos = tokenizer.bosId() ? *tokenizer.bosId() : c.bosId;
            rep.tokens.push_back(bos);
            for (int copy = 0; copy < 2; ++copy)
                rep.tokens.insert(rep.tokens.end(), pool.begin(), pool.begin() + long(L));
            rep.segmentLength = options.length;
        }
        for (int32_t id : rep.tokens)
            if (id < 0 || id >= vocab)
                throw KvError("induction: token id " + std::to_string(id) +
                              " is outside the model's vocabulary (" + std::to_string(vocab) +
                              "): the tokenizer does not belong to the model");

        // Per query position, the key an induction head would attend: the token after the
        // latest earlier occurrence of the query's token.
        const auto n = static_cast<int64_t>(rep.tokens.size());
        std::vector<int64_t> key(static_cast<size_t>(n), -1), earlier(static_cast<size_t>(n), -1);
        std::unordered_map<int32_t, int64_t> last;
        int64_t inductionQueries = 0;
        for (int64_t t = 0; t < n; ++t) {
            const int32_t id = rep.tokens[size_t(t)];
            if (auto it = last.find(id); it != last.end() && !tokenizer.isSpecial(id)) {
                earlier[size_t(t)] = it->second;
                if (it->second + 1 < t) {
                    key[size_t(t)] = it->second + 1;
                    ++inductionQueries;
                }
            }
            last[id] = t;
        }

        const int layers = static_cast<int>(c.nLayers), heads = static_cast<int>(c.nHeads);
        ScoreObserver scores(key, layers, heads);
        Session session(model);
        session.setObserver(&scores);
        HostTensor logits;
        if (Status st = session.feed(rep.tokens, &logits); !st)
            throw KvError("induction: " + st.message());
        // NaN/Inf weights would make every loss and score below NaN and still "succeed".
        for (int64_t t = 0; t < n; ++t) {
            const std::span<const float> row(logits.data.data() + t * vocab,
                                             static_cast<std::size_t>(vocab));
            if (firstNonFiniteLogit(row))
                throw KvError("induction: position " + std::to_string(t) + ": " +
                              describeNonFiniteOutput(*model, row));
        }
        rep.heads = scores.scores(layers, inductionQueries, n);

        auto rowFor = [&](int64_t t) { return logits.data.data() + (t - 1) * vocab; };
        if (rep.segmentLength > 0) {
            const int64_t L = rep.segmentLength;
            for (int copy = 0; copy < 2; ++copy) {
                double loss = 0, top1 = 0;
                for (int64_t i = 1; i < L; ++i) {
                    const int64_t t = 1 + copy * L + i;
                    const auto [rank, p] = rankOf(rowFor(t), vocab, rep.tokens[size_t(t)]);
                    loss += -std::log(std::max(p, 1e-300));
                    top1 += rank == 1 ? 1 : 0;
                }
                (copy == 0 ? rep.firstCopyLoss : rep.secondCopyLoss) = loss / double(L - 1);
                (copy == 0 ? rep.firstCopyTop1 : rep.secondCopyTop1) = top1 / double(L - 1);
            }
        }
        double otherRanks = 0;
        int64_t others = 0;
        for (int64_t t = 1; t < n; ++t) {
            const int32_t id = rep.tokens[size_t(t)];
            if (tokenizer.isSpecial(id))
                continue;
            const auto [rank, p] = rankOf(rowFor(t), vocab, id);
            if (earlier[size_t(t)] < 0) {
                otherRanks += static_cast<double>(rank);
                ++others;
                continue;
            }
            RecalledToken r;
            r.position = t;
            r.id = id;
            // As a stream prints it (keeps a SentencePiece word's leading space).
            r.text = tokenizer.decodeNext(rep.tokens[size_t(t - 1)], id);
            r.earlierPosition = earlier[size_t(t)];
            r.rank = rank;
            r.probability = p;
            rep.recalled.push_back(std::move(r));
        }
        if (!rep.recalled.empty()) {
            double sum = 0, top = 0;
            for (const auto& r : rep.recalled) {
                sum += static_cast<double>(r.rank);
                top += r.rank == 1 ? 1 : 0;
            }
            rep.recalledMeanRank = sum / double(rep.recalled.size());
            rep.recalledTop1 = top / double(rep.recalled.size());
        }
        rep.otherMeanRank = others > 0 ? otherRanks / double(others) : 0.0;
        return rep;
    });
}

nlohmann::json toJson(const InductionReport& r) {
    nlohmann::json heads = nlohmann::json::array();
    for (const auto& h : r.heads)
        heads.push_back({{"layer", h.layer},
                         {"head", h.head},
                         {"induction", h.induction},
                         {"previous_token", h.previousToken}});
    nlohmann::json recalled = nlohmann::json::array();
    for (const auto& t : r.recalled)
        recalled.push_back({{"position", t.position},
                            {"id", t.id},
                            {"text", t.text},
                            {"earlier_position", t.earlierPosition},
                            {"rank", t.rank},
                            {"probability", t.probability}});
    nlohmann::json j = {{"tokens", r.tokens.size()},
                        {"heads", heads},
                        {"recalled", recalled},
                        {"recalled_mean_rank", r.recalledMeanRank},
                        {"recalled_top1", r.recalledTop1},
                        {"other_mean_rank", r.otherMeanRank}};
    if (r.segmentLength > 0)
        j["segment"] = {{"length", r.segmentLength},
                        {"first_copy_loss", r.firstCopyLoss},
                        {"second_copy_loss", r.secondCopyLoss},
                        {"first_copy_top1", r.firstCopyTop1},
                        {"second_copy_top1", r.secondCopyTop1}};
    const auto best = r.strongest();
    j["strongest"] = {{"layer", best.layer}, {"head", best.head}, {"induction", best.induction}};
    return j;
}

} // namespace kvscope::state
