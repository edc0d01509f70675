// The survival lab (state/probes/survive.h) on the demo model and on stories260K: each policy's
// defining property (sinks and window kept, H2O's heavy hitters, quantization error within its
// bound, a 100 % budget equal to the full state), the ledger semantics of an evicted state
// (recorded gaps verify clean, the same gaps unrecorded are corruption, a continued state keeps
// the record), the measurements, the sweep, and the CLI's JSON.
#include "engine/attention.h"
#include "engine/model.h"
#include "engine/session.h"
#include "state/ledger/snapshotio.h"
#include "state/probes/survive.h"
#include "state/verify/restore.h"
#include "state/verify/verifyfile.h"
#include "generatedreport.h"
#include "surgeryfixture.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"
#include "workspace/workspace.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

using namespace kvscope;
using namespace kvscope::state;

namespace {

const char* kDemo = KVSCOPE_TESTS_DIR "/../resources/demo-model";

// Attention each slot of `tokens`' cache receives from the last `rows` queries, summed over
// every layer and query head (from a replay with a query recorder; the test's own sums).
std::vector<double> attentionReceived(const std::shared_ptr<const Model>& model,
                                      const std::vector<int32_t>& tokens, int64_t rows) {
    Session replay(model);
    QueryRecorder rec(int64_t(1) << 40);
    replay.setObserver(&rec);
    if (Status st = replay.feed(tokens); !st)
        qFatal("replay: %s", st.message().c_str());
    const int64_t T = int64_t(tokens.size());
    const auto& mc = model->config();
    const int64_t stride = int64_t(mc.nHeads) * mc.headDim;
    std::vector<double> acc(size_t(T), 0.0);
    for (int l = 0; l < int(mc.nLayers); ++l)
        for (int h = 0; h < int(mc.nHeads); ++h) {
            const auto last = rec.queries(l).subspan(size_t((T - rows) * stride));
            auto p = attentionPattern(*model, replay.cache(), last, rows, l, h);
            if (!p)
                qFatal("attention: %s", p.message().c_str());
            for (int64_t q = 0; q < rows; ++q)
                for (int64_t j = 0; j < T; ++j)
                    acc[size_t(j)] += p.value().probs[size_t(q * T + j)];
        }
    return acc;
}

// Among the slots a policy chose by score (all but `fixed`), the lowest kept score and the
// highest evicted one: a policy that keeps the best has first >= second.
std::pair<double, double> keptVersusEvicted(const std::vector<double>& score,
                                            const std::vector<int64_t>& kept,
                                            const std::set<int64_t>& fixed) {
    const std::set<int64_t> keptSet(kept.begin(), kept.end());
    double minKept = INFINITY, maxEvicted = -INFINITY;
    for (int64_t t = 0; t < int64_t(score.size()); ++t) {
        if (fixed.count(t))
            continue;
        if (keptSet.count(t))
            minKept = std::min(minKept, score[size_t(t)]);
        else
            maxEvicted = std::max(maxEvicted, score[size_t(t)]);
    }
    return {minKept, maxEvicted};
}

QString cliPath() {
    return QStringLiteral(KVSCOPE_CLI);
}

// Whether two cells of column `column` agree: build times are not compared; KL and
// perplexity within rounding and thread-count noise; losses within 0.02 nats or 0.5 %; bytes
// kept and their share within 1 %; the rest exact. The report is made on one machine and
// checked on others, and the decode kernels sum in another order on another instruction set
// (AVX-512, AVX2, plain: the last bits of every key differ), which can flip a near-tie in a
// policy's ranking: on an AVX2 machine knorm head-adaptive at 25 % kept 17,024 bytes of the
// demo model's state where the AVX-512 one that wrote the report kept 17,016.
bool sameCell(const QStringList& row, int column, const QString& a, const QString& b) {
    static const QRegularExpression num(R"(-?[0-9.]+(e[-+][0-9]+)?)");
    auto numbers = [](const QString& cell) {
        std::vector<double> v;
        for (auto m = num.globalMatch(cell); m.hasNext();)
            v.push_back(m.next().captured().toDouble());
        return v;
    };
    // Every number of a within `relative` of b's (or `absolute`, plus the last printed digit's
    // rounding), as many numbers in each.
    auto near = [&](double relative, double absolute) {
        const auto x = numbers(a), y = numbers(b);
        if (x.size() != y.size())
            return false;
        for (size_t i = 0; i < x.size(); ++i)
            if (std::abs(x[i] - y[i]) >
                std::max(absolute, relative * std::max(std::abs(x[i]), std::abs(y[i]))) + 1e-9)
                return false;
        return true;
    };
    if (column == 4)
        return true; // build ms
    if (column == 2 || column == 3)
        return near(0.01, 0);
    // Key-norm selection (knorm and its pyramid / head-adaptive budgets) ranks slots whose
    // norms can tie to the last bits: two CPUs' libtorch kernels (AVX-512 or AVX2 paths) put a
    // near-tied slot on either side of the budget, and the demo model's pyramid and
    // head-adaptive rows then read KL 0.437 on one machine and 0.452 on the other (the report
    // was regenerated back and forth twice). Within 5 % there; 2 % everywhere else.
    const bool nearTies =
        !row.isEmpty() && row.front().trimmed().startsWith(QLatin1String("knorm"));
    if ((column >= 5 && column <= 7) || column == 10)
        return near(nearTies ? 0.05 : 0.02, 1e-9);
    if (column >= 11)
        return near(0.005, 0.02);
    return a == b;
}

} // namespace

class TestSurvive : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_demo, m_stories;
    Snapshot m_demoState, m_storiesState;

    // Both models' states, for the properties that must hold on each.
    std::vector<std::pair<std::shared_ptr<const Model>, const Snapshot*>> both() const {
        return {{m_demo, &m_demoState}, {m_stories, &m_storiesState}};
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        auto demo = Model::load(kDemo);
        QVERIFY2(demo, demo.message().c_str());
        m_demo = demo.value();
        m_demoState = generated(m_demo,
                                "And God said, Let there be light: and there was light. And God "
                                "saw the light, that it was good",
                                40);
        KVSCOPE_REQUIRE_DATA(kStories);
        m_stories = testdata::loadModel(kStories);
        m_storiesState = generated(m_stories,
                                   "Once upon a time, there was a little girl named Lily. She "
                                   "loved to play outside",
                                   40);
    }

    // Budget 100 % is the full state, exactly: every byte of K and V, every position.
    void fullBudgetIsFull() {
        for (const auto& [model, state] : both()) {
            for (const auto& policy :
                 {"sink-window", "h2o", "tova", "snapkv", "knorm", "random", "oracle"}) {
                auto c = compress(*state, model, {.policy = policy, .budget = 1.0, .params = {}});
                QVERIFY2(c, c.message().c_str());
                const Snapshot& s = c.value().snapshot;
                QCOMPARE(s.cacheLength, state->cacheLength);
                QCOMPARE(s.positions, state->positions);
                for (size_t l = 0; l < s.layers.size(); ++l) {
                    QVERIFY(*s.layers[l].key == *state->layers[l].key);
                    QVERIFY(*s.layers[l].value == *state->layers[l].value);
                }
                QCOMPARE(s.lastLogits, state->lastLogits);
            }
            auto r = survive(*state, model, {.policy = "full", .params = {}, .steps = 8});
            QVERIFY2(r, r.message().c_str());
            QCOMPARE(r.value().kl.max, 0.0);
            QCOMPARE(r.value().top1Agreement, 1.0);
            QCOMPARE(r.value().firstDivergence, -1);
            QCOMPARE(r.value().bytesKept, r.value().bytesFull);
        }
    }

    // sink-window keeps the first `sinks` slots and the most recent ones, nothing else.
    void sinkWindowKeepsSinksAndWindow() {
        for (const auto& [model, state] : both()) {
            const int64_t T = state->cacheLength;
            for (int64_t k : {8, 16, 30}) {
                auto c = compress(*state, model,
                                  {.policy = "sink-window", .budget = double(k), .params = {}});
                QVERIFY2(c, c.message().c_str());
                std::vector<int64_t> want = {0, 1, 2, 3};
                for (int64_t t = T - (k - 4); t < T; ++t)
                    want.push_back(t);
                QCOMPARE(c.value().keptTokens, want);
                QCOMPARE(c.value().snapshot.positions, want);
                QCOMPARE(c.value().snapshot.cacheLength, k);
            }
            // The damage map: 1 for every evicted token at every layer, 0 for the kept ones.
            auto r = survive(*state, model,
                             {.policy = "sink-window", .budget = 8.0, .params = {}, .steps = 2});
            QVERIFY2(r, r.message().c_str());
            const auto& d = r.value().damage;
            QCOMPARE(r.value().damageLayers, int64_t(state->layers.size()));
            QCOMPARE(int64_t(d.size()), r.value().damageLayers * T);
            const std::set<int64_t> kept(r.value().keptTokens.begin(), r.value().keptTokens.end());
            for (int64_t l = 0; l < r.value().damageLayers; ++l)
                for (int64_t t = 0; t < T; ++t)
                    QCOMPARE(d[size_t(l * T + t)], kept.count(t) ? 0.0f : 1.0f);
        }
    }

    // H2O: besides its recent window, every kept slot has at least the accumulated attention
    // of every evicted one (recomputed here from the attention patterns of every layer/head).
    void h2oKeepsHeavyHitters() {
        for (const auto& [model, state] : both()) {
            const int64_t T = state->cacheLength, k = T / 3;
            auto c = compress(*state, model,
                              {.policy = "h2o", .budget = double(k), .params = {{"recent", "4"}}});
            QVERIFY2(c, c.message().c_str());
            const auto& kept = c.value().keptTokens;
            QCOMPARE(int64_t(kept.size()), k);
            const std::set<int64_t> keptSet(kept.begin(), kept.end());
            for (int64_t t = T - 4; t < T; ++t)
                QVERIFY(keptSet.count(t));
            std::set<int64_t> recent;
            for (int64_t t = T - 4; t < T; ++t)
                recent.insert(t);
            const auto [minKept, maxEvicted] =
                keptVersusEvicted(attentionReceived(model, state->tokens, T), kept, recent);
            QVERIFY2(minKept >= maxEvicted - 1e-6,
                     qPrintable(QString("kept %1 < evicted %2").arg(minKept).arg(maxEvicted)));
        }
    }

    // TOVA keeps the slots the last query attends to most; SnapKV its observation window and
    // the slots that window attends to most, pooled over neighbours; KNorm the smallest key
    // norms; random a seeded choice (the same seed the same slots, another seed others).
    void scoredPoliciesKeepTheirBest() {
        for (const auto& [model, state] : both()) {
            const int64_t T = state->cacheLength, k = T / 3;
            const std::set<int64_t> last{T - 1};
            auto tova =
                compress(*state, model, {.policy = "tova", .budget = double(k), .params = {}});
            QVERIFY2(tova, tova.message().c_str());
            QCOMPARE(int64_t(tova.value().keptTokens.size()), k);
            auto [a, b] = keptVersusEvicted(attentionReceived(model, state->tokens, 1),
                                            tova.value().keptTokens, last);
            QVERIFY2(a >= b - 1e-6,
                     qPrintable(QString("tova: kept %1 < evicted %2").arg(a).arg(b)));

            const int64_t w = 8, pool = 5;
            auto snap = compress(
                *state, model,
                {.policy = "snapkv",
                 .budget = double(k),
                 .params = {{"window", std::to_string(w)}, {"pool", std::to_string(pool)}}});
            QVERIFY2(snap, snap.message().c_str());
            std::set<int64_t> window;
            for (int64_t t = T - w; t < T; ++t)
                window.insert(t);
            const auto& sk = snap.value().keptTokens;
            for (int64_t t : window)
                QVERIFY(std::find(sk.begin(), sk.end(), t) != sk.end());
            const auto raw = attentionReceived(model, state->tokens, w);
            std::vector<double> pooled(raw.size());
            for (int64_t t = 0; t < T; ++t) {
                double sum = 0;
                int n = 0;
                for (int64_t j = std::max<int64_t>(0, t - pool / 2);
                     j <= std::min(T - 1, t + pool / 2); ++j, ++n)
                    sum += raw[size_t(j)];
                pooled[size_t(t)] = sum / n;
            }
            std::tie(a, b) = keptVersusEvicted(pooled, sk, window);
            QVERIFY2(a >= b - 1e-6,
                     qPrintable(QString("snapkv: kept %1 < evicted %2").arg(a).arg(b)));

            auto knorm =
                compress(*state, model, {.policy = "knorm", .budget = double(k), .params = {}});
            QVERIFY2(knorm, knorm.message().c_str());
            auto full = restore(*state, model);
            QVERIFY(full);
            std::vector<double> small(size_t(T), 0.0); // minus the summed key norms
            for (int l = 0; l < int(state->layers.size()); ++l) {
                const HostTensor n = full.value().session.cache().keyNorms(l);
                for (int64_t h = 0; h < n.dim(0); ++h)
                    for (int64_t t = 0; t < T; ++t)
                        small[size_t(t)] -= n.data[size_t(h * T + t)];
            }
            std::tie(a, b) = keptVersusEvicted(small, knorm.value().keptTokens, last);
            QVERIFY2(a >= b - 1e-6,
                     qPrintable(QString("knorm: kept %1 < evicted %2").arg(a).arg(b)));

            auto r1 =
                compress(*state, model,
                         {.policy = "random", .budget = double(k), .params = {{"seed", "7"}}});
            auto r2 =
                compress(*state, model,
                         {.policy = "random", .budget = double(k), .params = {{"seed", "7"}}});
            auto r3 =
                compress(*state, model,
                         {.policy = "random", .budget = double(k), .params = {{"seed", "8"}}});
            QVERIFY(r1 && r2 && r3);
            QCOMPARE(r1.value().keptTokens, r2.value().keptTokens);
            QVERIFY(r1.value().keptTokens != r3.value().keptTokens);
            QCOMPARE(int64_t(r1.value().keptTokens.size()), k);
            QCOMPARE(r1.value().keptTokens.back(), T - 1);
        }
    }

    // Quantize -> dequantize: each value within half a step of its group (KIVI: keys per
    // channel in groups of `group` tokens; values, and the same-axis scheme's keys, per token in
    // groups of `group` channels), the residual tokens untouched.
    void quantizationWithinBound() {
        for (const auto& [model, state] : both()) {
            const int64_t T = state->cacheLength;
            for (const std::string policy : {"quant-kivi", "quant-same-axis"})
                for (int bits : {2, 4, 8}) {
                    const int64_t group = 8, residual = 5;
                    auto c = compress(*state, model,
                                      {.policy = policy,
                                       .params = {{"bits", std::to_string(bits)},
                                                  {"group", std::to_string(group)},
                                                  {"residual", std::to_string(residual)}}});
                    QVERIFY2(c, c.message().c_str());
                    auto full = restore(*state, model);
                    auto quant = restore(c.value().snapshot, model);
                    QVERIFY2(full && quant, (full ? quant.message() : full.message()).c_str());
                    const double levels = double((1 << bits) - 1);
                    const int64_t Q = T - residual;
                    // Within half a step of the group's range, residual tokens exact; a group
                    // runs along tokens for one channel (per channel) or along channels for
                    // one token (per token). Returns the largest error.
                    auto check = [&](const HostTensor& x0, const HostTensor& x1, bool perChannel) {
                        const int64_t H = x0.dim(0), D = x0.dim(2);
                        double worst = 0;
                        for (int64_t h = 0; h < H; ++h) {
                            auto at = [&](int64_t t, int64_t d) {
                                return size_t((h * T + t) * D + d);
                            };
                            const int64_t outer = perChannel ? D : Q, inner = perChannel ? Q : D;
                            for (int64_t o = 0; o < outer; ++o)
                                for (int64_t g = 0; g < inner; g += group) {
                                    auto idx = [&](int64_t i) {
                                        return perChannel ? at(i, o) : at(o, i);
                                    };
                                    const int64_t end = std::min(inner, g + group);
                                    double lo = INFINITY, hi = -INFINITY;
                                    for (int64_t i = g; i < end; ++i) {
                                        lo = std::min(lo, double(x0.data[idx(i)]));
                                        hi = std::max(hi, double(x0.data[idx(i)]));
                                    }
                                    const double bound = (hi - lo) / levels / 2 + 1e-6;
                                    for (int64_t i = g; i < end; ++i) {
                                        const double e =
                                            std::abs(double(x0.data[idx(i)]) - x1.data[idx(i)]);
                                        if (e > bound)
                                            qFatal("%s %d bits: error %g above %g", policy.c_str(),
                                                   bits, e, bound);
                                        worst = std::max(worst, e);
                                    }
                                }
                            for (int64_t t = Q; t < T; ++t)
                                for (int64_t d = 0; d < D; ++d)
                                    if (x0.data[at(t, d)] != x1.data[at(t, d)])
                                        qFatal("%s: residual token %lld changed", policy.c_str(),
                                               (long long)t);
                        }
                        return worst;
                    };
                    double worstK = 0, worstV = 0;
                    for (int l = 0; l < int(state->layers.size()); ++l) {
                        const KvCache& k0 = full.value().session.cache();
                        const KvCache& k1 = quant.value().session.cache();
                        worstK =
                            std::max(worstK, check(k0.key(l), k1.key(l), policy == "quant-kivi"));
                        worstV = std::max(worstV, check(k0.value(l), k1.value(l), false));
                    }
                    QVERIFY(worstK > 0); // something was quantized
                    QVERIFY(worstV > 0);
                    QVERIFY(c.value().bytesKept < c.value().bytesFull);
                }
            // The damage map of a quantized state: the residual tokens exact, the others hurt
            // less at 8 bits than at 2, none lost.
            std::vector<double> meanDamage;
            for (int bits : {2, 8}) {
                auto r = survive(*state, model,
                                 {.policy = "quant-kivi",
                                  .params = {{"bits", std::to_string(bits)}, {"residual", "5"}},
                                  .steps = 2});
                QVERIFY2(r, r.message().c_str());
                const auto& d = r.value().damage;
                double sum = 0;
                for (int64_t l = 0; l < r.value().damageLayers; ++l)
                    for (int64_t t = 0; t < T; ++t) {
                        const float x = d[size_t(l * T + t)];
                        QVERIFY(x >= 0 && x < 1);
                        if (t >= T - 5)
                            QCOMPARE(x, 0.0f);
                        sum += x;
                    }
                meanDamage.push_back(sum / double(d.size()));
            }
            QVERIFY2(meanDamage[0] > 4 * meanDamage[1],
                     qPrintable(QString("%1 vs %2").arg(meanDamage[0]).arg(meanDamage[1])));
        }
    }

    // Residual checkpoints rebuild K/V of the full state: (a) every layer projected from the
    // residual entering it, (b) at every L the layers from L on run over the residual entering
    // L, the layers below kept. Within 1e-5 of the original (f32; relative to the value where
    // it exceeds 1: the original was made by a prefill and token-by-token decode steps, the
    // rebuild by batched products, which round differently), and the state continues.
    void residualCheckpoints() {
        // GPT-2 too: no RoPE, LayerNorm with biases, learned positions in the embeddings.
        const auto gpt2 = randomGpt2(m_dir.filePath("gpt2"));
        std::vector<int32_t> prompt;
        for (int i = 0; i < 24; ++i)
            prompt.push_back(int32_t((i * 7 + 3) % 50));
        Session g(gpt2);
        QVERIFY(g.feed(prompt).isOk());
        Sampler greedy(SamplerSettings{0.0f});
        QVERIFY(g.generate(10, greedy)); // token-by-token steps after the prefill
        const Snapshot gpt2State = captureOrDie(g, &greedy, prompt);
        auto cases = both();
        cases.push_back({gpt2, &gpt2State});
        for (const auto& [model, state] : cases) {
            auto full = restore(*state, model);
            QVERIFY2(full, full.message().c_str());
            const KvCache& ref = full.value().session.cache();
            const int64_t L = int64_t(state->layers.size());
            // Largest |rebuilt - original| / max(1, |original|) over every layer's K and V.
            auto worst = [&](const Snapshot& s) {
                auto r = restore(s, model);
                if (!r)
                    qFatal("restore: %s", r.message().c_str());
                double w = 0;
                for (int l = 0; l < int(L); ++l)
                    for (bool key : {true, false}) {
                        const HostTensor a = key ? ref.key(l) : ref.value(l);
                        const HostTensor b = key ? r.value().session.cache().key(l)
                                                 : r.value().session.cache().value(l);
                        if (a.data.size() != b.data.size())
                            qFatal("layer %d: sizes differ", l);
                        for (size_t i = 0; i < a.data.size(); ++i)
                            w = std::max(w, std::abs(double(a.data[i]) - b.data[i]) /
                                                std::max(1.0, std::abs(double(a.data[i]))));
                    }
                return w;
            };
            auto all = compress(*state, model, {.policy = "residual-all", .params = {}});
            QVERIFY2(all, all.message().c_str());
            const double wa = worst(all.value().snapshot);
            QVERIFY2(wa <= 1e-5, qPrintable(QString("residual-all: %1").arg(wa)));
            QCOMPARE(all.value().bytesKept,
                     uint64_t(L * state->cacheLength * model->config().dim * 4));
            for (int from = 0; from < int(L); ++from) {
                auto at = compress(
                    *state, model,
                    {.policy = "residual-at", .params = {{"layer", std::to_string(from)}}});
                QVERIFY2(at, at.message().c_str());
                const Snapshot& s = at.value().snapshot;
                for (int l = 0; l < from; ++l) { // the layers below: kept byte for byte
                    QVERIFY(*s.layers[size_t(l)].key == *state->layers[size_t(l)].key);
                    QVERIFY(*s.layers[size_t(l)].value == *state->layers[size_t(l)].value);
                }
                const double w = worst(s);
                QVERIFY2(w <= 1e-5, qPrintable(QString("residual-at %1: %2").arg(from).arg(w)));
                QVERIFY(at.value().bytesKept > uint64_t(from) * state->cacheBytes() / uint64_t(L));
            }
            auto v = verifySnapshot(all.value().snapshot, model);
            QVERIFY2(!v.report.hasErrors(), qPrintable(ids(v.report)));
            auto r = survive(*state, model, {.policy = "residual-at", .params = {}, .steps = 8});
            QVERIFY2(r, r.message().c_str());
            QVERIFY(r.value().kl.max < 1e-6);
            QCOMPARE(r.value().firstDivergence, -1);
            QCOMPARE(r.value().parameters["layer"].get<std::string>(), std::to_string(L / 2));
            auto bad = compress(
                *state, model, {.policy = "residual-at", .params = {{"layer", std::to_string(L)}}});
            QVERIFY(!bad && bad.message().find("layer=") != std::string::npos);
        }
    }

    // Recall probes on the demo model (it has induction heads; stories260K does not copy
    // random tokens at all): the full state copies the repeat and the needle; a sink + window
    // eviction at 25 % loses the repeat's first copy and the needles outside its window, keeps
    // the one at depth 0.9; the full policy changes nothing.
    void recallProbes() {
        auto full = survive(m_demoState, m_demo, {.policy = "full", .params = {}, .steps = 2});
        QVERIFY2(full, full.message().c_str());
        QCOMPARE(int(full.value().recall.size()), 4);
        for (const auto& p : full.value().recall) {
            QVERIFY(std::abs(p.compressedLoss - p.fullLoss) < 1e-6); // last logits recomputed
            QVERIFY2(
                p.fullLoss < 0.75 * std::log(double(m_demo->config().vocabSize)),
                qPrintable(QString("%1 %2: %3").arg(p.name.c_str()).arg(p.depth).arg(p.fullLoss)));
        }
        auto sw = survive(m_demoState, m_demo,
                          {.policy = "sink-window", .budget = 0.25, .params = {}, .steps = 2});
        QVERIFY2(sw, sw.message().c_str());
        for (const auto& p : sw.value().recall) {
            const QString what = QString("%1@%2: %3 -> %4")
                                     .arg(p.name.c_str())
                                     .arg(p.depth)
                                     .arg(p.fullLoss)
                                     .arg(p.compressedLoss);
            if (p.name == "needle" && p.depth > 0.8)
                QVERIFY2(p.compressedLoss < p.fullLoss + 0.5, qPrintable(what));
            else
                QVERIFY2(p.compressedLoss > p.fullLoss + 2, qPrintable(what));
        }
        const auto j = sw.value().toJson();
        QCOMPARE(j["recall"]["needle"].size(), size_t(3));
        QVERIFY(j["recall"]["induction"].contains("compressed_loss"));
        auto none = survive(m_demoState, m_demo,
                            {.policy = "full", .params = {}, .steps = 2, .recall = false});
        QVERIFY(none && none.value().recall.empty() && none.value().toJson()["recall"].is_null());
    }

    // 2-bit quantization leaves four levels a group: aidreams260K's 2-bit keys differ from the
    // recomputed ones as much as another model's (86-116 %), and verify named that a RoPE
    // rotation problem, so restore refused the survival lab's own state and `survive --sweep`
    // stopped there. A 2-bit cache's keys are not compared; 4 bits still are (a 4-bit state
    // whose keys are another model's is caught).
    void twoBitStatesRestore() {
        KVSCOPE_REQUIRE_DATA("models/aidreams260K/aidreams260K.bin");
        const auto aidreams = testdata::loadModel("models/aidreams260K/aidreams260K.bin",
                                                  "models/aidreams260K/tok512.bin");
        const Snapshot state = generated(aidreams, "Once upon a time", 40);
        auto two = survive(state, aidreams,
                           {.policy = "quant-kivi", .params = {{"bits", "2"}}, .steps = 2});
        QVERIFY2(two, two.message().c_str());
        auto c = compress(state, aidreams, {.policy = "quant-kivi", .params = {{"bits", "2"}}});
        QVERIFY2(c, c.message().c_str());
        const auto v = verifySnapshot(c.value().snapshot, aidreams);
        for (const auto& x : v.report.violations)
            QVERIFY2(x.id != "positions.rope" && x.id != "cache.provenance", x.message.c_str());
        // The key check stays for 4 bits: the same state's keys swapped for random ones.
        auto four = compress(state, aidreams, {.policy = "quant-kivi", .params = {{"bits", "4"}}});
        QVERIFY2(four, four.message().c_str());
        QVERIFY(!verifySnapshot(four.value().snapshot, aidreams).report.hasErrors());
        Snapshot foreign = four.value().snapshot;
        QCOMPARE(foreign.cacheDtype, std::string("f32"));
        std::vector<uint8_t> noise(foreign.layers[0].key->size());
        for (std::size_t i = 0; i + 4 <= noise.size(); i += 4) {
            const float f = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
            std::memcpy(noise.data() + i, &f, 4);
        }
        foreign.layers[0].key = makeBytes(std::move(noise));
        bool caught = false;
        for (const auto& x : verifySnapshot(foreign, aidreams).report.violations)
            caught |= x.id == "cache.provenance" || x.id == "positions.rope";
        QVERIFY(caught);
    }

    // An evicted state verifies clean because its lineage records the gaps; the same state
    // without the record is corruption; a state continued from it keeps the record.
    void evictedStateLedger() {
        for (const auto& [model, state] : both()) {
            auto c = compress(*state, model, {.policy = "tova", .budget = 0.5, .params = {}});
            QVERIFY2(c, c.message().c_str());
            const std::string path = m_dir.filePath("tova.kvsnap").toStdString();
            QVERIFY(save(c.value().snapshot, path).isOk());
            auto v = verifyFile(path, model);
            QVERIFY2(!v.report.hasErrors() && v.report.violations.empty(),
                     qPrintable(ids(v.report)));
            QVERIFY(v.equivalence && v.equivalence->equivalent);

            Snapshot unrecorded = c.value().snapshot;
            unrecorded.lineage.parameters.erase("kept_tokens");
            auto u = verifySnapshot(unrecorded, model);
            bool length = false;
            for (const auto& x : u.report.violations)
                length |= x.id == "cache.length";
            QVERIFY2(length, qPrintable(ids(u.report)));

            Snapshot wrong = c.value().snapshot; // a record that does not fit the slots
            auto kept = wrong.lineage.parameters["kept_tokens"].get<std::vector<int64_t>>();
            kept.back() -= 1;
            wrong.lineage.parameters["kept_tokens"] = kept;
            QVERIFY(recordedKeptTokens(wrong).empty() || wrong.positions != kept);
            QVERIFY(verifySnapshot(wrong, model).report.hasErrors() ||
                    !verifySnapshot(wrong, model).report.violations.empty());

            // Continue 6 tokens, capture, carry the record: still clean.
            auto r = restore(c.value().snapshot, model);
            QVERIFY2(r, r.message().c_str());
            Session s = r.value().session;
            Sampler greedy(SamplerSettings{0.0f, 0.9f, 0, 42});
            QVERIFY(s.generate(6, greedy));
            CaptureOptions co;
            co.sampler = &greedy;
            auto next = capture(s, co);
            QVERIFY(next);
            carryKeptTokens(c.value().snapshot, next.value());
            QCOMPARE(recordedKeptTokens(next.value()).size(),
                     size_t(c.value().snapshot.cacheLength + 6));
            auto nv = verifySnapshot(next.value(), model);
            QVERIFY2(!nv.report.hasErrors(), qPrintable(ids(nv.report)));

            // Every way on from it keeps the record: a fork's branches, and the workspace's
            // restore -> generate -> capture (the GUI's path).
            ForkOptions fo;
            fo.branches = 2;
            fo.steps = 4;
            auto f = fork(c.value().snapshot, fo, model);
            QVERIFY2(f, f.message().c_str());
            for (const auto& b : f.value().branches) {
                QCOMPARE(recordedKeptTokens(b.snapshot).size(), size_t(b.snapshot.cacheLength));
                auto bv = verifySnapshot(b.snapshot, model);
                QVERIFY2(!bv.report.hasErrors(), qPrintable(ids(bv.report)));
            }
            ws::Workspace w;
            w.setModel(model);
            const std::string id = w.add(c.value().snapshot);
            auto restored = w.restore(id, false);
            QVERIFY2(restored, restored.message().c_str());
            auto g = w.liveSession()->generate(5, SamplerSettings{0.0f});
            QVERIFY(g && g.value().tokens.size() == 5);
            auto live = w.verify("");
            QVERIFY2(live && !live.value().report.hasErrors(),
                     qPrintable(ids(live.value().report)));
            auto captured = w.capture();
            QVERIFY2(captured, captured.message().c_str());
            auto cv = w.verify(captured.value());
            QVERIFY2(cv && !cv.value().report.hasErrors(), qPrintable(ids(cv.value().report)));
            QVERIFY(!recordedKeptTokens(*w.find(captured.value())->snapshot).empty());
        }
    }

    // The measurements: a random eviction at 25 % drifts (KL > 0, bytes ~25 %), replay does
    // not; every eviction policy continues; the sweep covers policies x budgets.
    void measurementsAndSweep() {
        for (const auto& [model, state] : both()) {
            auto r = survive(*state, model,
                             {.policy = "random", .budget = 0.25, .params = {}, .steps = 12});
            QVERIFY2(r, r.message().c_str());
            QVERIFY(r.value().kl.max > 1e-4);
            QVERIFY(r.value().kl.mean <= r.value().kl.max);
            QVERIFY(r.value().kl.median <= r.value().kl.p99 + 1e-12);
            const double ratio = double(r.value().bytesKept) / double(r.value().bytesFull);
            QVERIFY2(ratio > 0.2 && ratio < 0.3, qPrintable(QString::number(ratio)));
            QCOMPARE(r.value().steps, 12);
            auto replay = survive(*state, model, {.policy = "replay", .params = {}, .steps = 12});
            QVERIFY2(replay, replay.message().c_str());
            QVERIFY(replay.value().kl.max < 1e-6);
            // SnapKV says whether its observation window reached into the prompt.
            // The default window takes at most half the budget; a given one all of it.
            for (double b : {0.25, 1.0}) {
                auto c = compress(*state, model, {.policy = "snapkv", .budget = b, .params = {}});
                QVERIFY2(c, c.message().c_str());
                const int64_t w = std::stoll(c.value().parameters["window"].get<std::string>());
                QCOMPARE(w,
                         std::min<int64_t>(64, std::llround(b * double(state->cacheLength)) / 2));
                QCOMPARE(c.value().parameters["query_aware"].get<bool>(),
                         state->cacheLength - w < state->prompt.promptTokens);
                QVERIFY(!c.value().parameters["query_aware"].get<bool>());
            }
            auto whole = compress(*state, model,
                                  {.policy = "snapkv",
                                   .budget = 1.0,
                                   .params = {{"window", std::to_string(state->cacheLength)}}});
            QVERIFY2(whole, whole.message().c_str());
            QVERIFY(whole.value().parameters["query_aware"].get<bool>());
            QCOMPARE(replay.value().firstDivergence, -1);

            std::vector<std::string> seen;
            auto sw = sweep(*state, model,
                            {.budgets = {0.25, 0.5},
                             .bits = {4},
                             .layers = {1},
                             .steps = 4,
                             .progress = [&](int done, int total, const std::string& what) {
                                 seen.push_back(std::to_string(done) + "/" + std::to_string(total) +
                                                " " + what);
                                 return true;
                             }});
            QVERIFY2(sw, sw.message().c_str());
            // full, replay; seven evictions (the oracle included) at two budgets, four of them
            // also pyramid and head-adaptive; two quantizations at 4 bits; residual-all;
            // residual-at layer 1.
            QCOMPARE(int(sw.value().size()), 2 + 7 * 2 + 4 * 2 * 2 + 2 * 1 + 1 + 1);
            QCOMPARE(int(seen.size()), int(sw.value().size()));
            QCOMPARE(seen.front(), std::string("0/36 full"));
            QVERIFY(std::find(seen.begin(), seen.end(), "3/36 sink-window 50 %") != seen.end());
            QVERIFY(std::find(seen.begin(), seen.end(), "6/36 h2o pyramid 25 %") != seen.end());
            QCOMPARE(seen.back(), std::string("35/36 residual-at layer 1"));
            int calls = 0;
            SweepOptions stopAtThree;
            stopAtThree.steps = 2;
            stopAtThree.progress = [&](int, int, auto&) { return ++calls < 3; };
            auto stopped = sweep(*state, model, stopAtThree);
            QVERIFY(!stopped && stopped.message() == "survive: sweep stopped");
            QCOMPARE(calls, 3);
            const QString md = QString::fromStdString(sweepToMarkdown(sw.value()));
            QVERIFY(md.contains("| h2o | 25 % |"));
            QVERIFY(md.contains("| h2o head-adaptive | 25 % |"));
            QVERIFY(md.contains("| quant-kivi | 4 bits |"));
        }
    }

    // Unknown policies, parameters and budgets are refused by name; a state already evicted
    // cannot be evicted again.
    void refusals() {
        auto bad = compress(m_demoState, m_demo, {.policy = "lru", .params = {}});
        QVERIFY(!bad && bad.message().find("unknown policy 'lru'") != std::string::npos);
        bad = compress(m_demoState, m_demo,
                       {.policy = "h2o", .budget = 0.5, .params = {{"bits", "4"}}});
        QVERIFY(!bad && bad.message().find("no parameter 'bits'") != std::string::npos);
        bad = compress(m_demoState, m_demo, {.policy = "knorm", .budget = 0, .params = {}});
        QVERIFY(!bad && bad.message().find("budget") != std::string::npos);
        bad = compress(m_demoState, m_demo, {.policy = "quant-kivi", .params = {{"bits", "3"}}});
        QVERIFY(!bad && bad.message().find("bits=3") != std::string::npos);
        // A state shorter than the default recent-token count: the default shrinks to fit, an
        // explicit value is refused.
        const Snapshot tiny = fed(m_demo, {1, 17, 29, 301, 45, 6});
        auto shortQuant = compress(tiny, m_demo, {.policy = "quant-kivi", .params = {}});
        QVERIFY2(shortQuant, shortQuant.message().c_str());
        QCOMPARE(shortQuant.value().parameters["residual"].get<std::string>(), std::string("6"));
        bad = compress(tiny, m_demo, {.policy = "quant-kivi", .params = {{"residual", "16"}}});
        QVERIFY(!bad && bad.message().find("residual=16") != std::string::npos);
        auto once = compress(m_demoState, m_demo, {.policy = "knorm", .budget = 0.5, .params = {}});
        QVERIFY(once);
        bad = compress(once.value().snapshot, m_demo,
                       {.policy = "knorm", .budget = 0.5, .params = {}});
        QVERIFY(!bad && bad.message().find("cache every token") != std::string::npos);
        // A state that fills the context has no step to continue: an error, not "KL 0 over
        // 0 steps, no greedy divergence" (what the Survival panel showed at 128 of 128).
        std::vector<int32_t> ids(size_t(m_demo->config().maxContext));
        for (size_t i = 0; i < ids.size(); ++i)
            ids[i] = int32_t(1 + (i * 7) % 300);
        const Snapshot fullContext = fed(m_demo, ids);
        auto none = survive(fullContext, m_demo, {.policy = "full", .params = {}, .steps = 4});
        QVERIFY2(!none && none.message().find("fills the model's context") != std::string::npos,
                 none ? "survived" : none.message().c_str());
    }

    // The CLI: the issue's JSON fields, the saved state restorable, the sweep's JSON.
    void cli() {
        const QString in = m_dir.filePath("demo.kvsnap"), out = m_dir.filePath("h2o.kvsnap");
        QVERIFY(save(m_demoState, in.toStdString()).isOk());
        QProcess p;
        p.start(cliPath(), {"survive", in, "-m", kDemo, "--policy", "h2o", "--budget", "0.25", "-n",
                            "8", "-o", out, "--json"});
        QVERIFY(p.waitForFinished(300000));
        QCOMPARE(p.exitCode(), 0);
        const QJsonObject j = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
        for (const char* key : {"policy", "budget", "bytes_kept", "bytes_full", "kl",
                                "top1_agreement", "first_divergence", "ppl_ratio", "recall"})
            QVERIFY2(j.contains(key), key);
        for (const char* key : {"mean", "median", "p99", "max"})
            QVERIFY(j["kl"].toObject().contains(key));
        // The same numbers as the core's own run.
        auto core = survive(m_demoState, m_demo,
                            {.policy = "h2o", .budget = 0.25, .params = {}, .steps = 8});
        QVERIFY(core);
        QCOMPARE(qint64(j["bytes_kept"].toDouble()), qint64(core.value().bytesKept));
        QCOMPARE(j["first_divergence"].toInt(), core.value().firstDivergence);
        QVERIFY(std::abs(j["kl"].toObject()["mean"].toDouble() - core.value().kl.mean) < 1e-9);
        auto v = verifyFile(out.toStdString(), m_demo);
        QVERIFY2(v.report.violations.empty(), qPrintable(ids(v.report)));

        p.start(cliPath(),
                {"survive", in, "-m", kDemo, "--sweep", "--budgets", "0.5", "-n", "2", "--json"});
        QVERIFY(p.waitForFinished(300000));
        QCOMPARE(p.exitCode(), 0);
        const auto results =
            QJsonDocument::fromJson(p.readAllStandardOutput()).object()["results"].toArray();
        // full, replay; seven evictions (the oracle included), h2o/tova/snapkv/knorm also
        // pyramid and head-adaptive; two quantizations at 2/4/8 bits; residual-all; residual-at
        // at every layer.
        QCOMPARE(results.size(), 2 + 7 + 4 * 2 + 2 * 3 + 1 + int(m_demo->config().nLayers));

        p.start(cliPath(), {"survive", in, "-m", kDemo, "--policy", "h2o", "--param", "sinks=4"});
        QVERIFY(p.waitForFinished(300000));
        QCOMPARE(p.exitCode(), 1);
        QVERIFY(p.readAllStandardError().contains("no parameter 'sinks'"));
    }

    // docs/SURVIVAL.md is current: each of its generated tables is what the CLI prints now
    // (generate the state, survive --sweep --markdown). KVSCOPE_WRITE_REPORT=1 rewrites them.
    void survivalReportIsCurrent() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const QString stale = report::check(
            KVSCOPE_TESTS_DIR "/../docs/SURVIVAL.md", "survive-sweep", 2,
            [&](const report::Block& b, QString* error) {
                const QString model = report::modelPath(b.attributes["model"]);
                const QString state = m_dir.filePath("report.kvsnap");
                QProcess p;
                p.start(cliPath(),
                        {"generate", "-m", model, "-p", b.attributes["prompt"], "-n",
                         b.attributes["steps"], "--temperature", "0", "--snapshot-out", state});
                p.waitForFinished(300000);
                if (p.exitCode() != 0) {
                    *error = QString::fromUtf8(p.readAllStandardError());
                    return QString();
                }
                p.start(cliPath(), {"survive", state, "-m", model, "--sweep", "-n",
                                    b.attributes["n"], "--markdown"});
                p.waitForFinished(600000);
                if (p.exitCode() != 0)
                    *error = QString::fromUtf8(p.readAllStandardError());
                return QString::fromUtf8(p.readAllStandardOutput());
            },
            [](const QStringList& row, int column, const QString& a, const QString& b) {
                return sameCell(row, column, a, b);
            });
        QVERIFY2(!stale.startsWith("error: "), qPrintable(stale));
        QVERIFY2(
            stale.isEmpty(),
            qPrintable("docs/SURVIVAL.md is stale (rerun with KVSCOPE_WRITE_REPORT=1):\n" + stale));
    }
};

QTEST_GUILESS_MAIN(TestSurvive)
#include "tst_survive.moc"
