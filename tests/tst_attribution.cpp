// Slot attribution (state/probes/attribution.h) on stories260K and aidreams260K: leave-one-out
// through the mask is the same computation as an eviction through the survival lab, slots that
// matter and slots that do not, the estimate's rank correlation with the ablation, the verdicts
// on masked and last slots, the refusals, the survival lab's `oracle` policy against every
// other eviction policy of the sweep, and `kvscope-cli attribute`.
#include "engine/randommodel.h"
#include "state/probes/attribution.h"
#include "state/probes/survive.h"
#include "surgeryfixture.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace {

const QString kDreams = "models/aidreams260K/aidreams260K.bin";
const QString kDreamsTok = "models/aidreams260K/tok512.bin";

std::shared_ptr<const Model> loadWith(const QString& model, const QString& tokenizer) {
    LoadOptions o;
    o.tokenizerPath = testdata::path(tokenizer);
    auto m = Model::load(testdata::path(model), o);
    if (!m)
        qFatal("load: %s", m.message().c_str());
    return m.value();
}

} // namespace

class TestAttribution : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_stories, m_dreams;
    Snapshot m_storiesState, m_dreamsState;

    std::vector<std::pair<std::shared_ptr<const Model>, const Snapshot*>> both() const {
        return {{m_stories, &m_storiesState}, {m_dreams, &m_dreamsState}};
    }
    static Session restored(const Snapshot& s, const std::shared_ptr<const Model>& model) {
        auto r = restore(s, model);
        if (!r)
            qFatal("restore: %s", r.message().c_str());
        return r.value().session;
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        KVSCOPE_REQUIRE_DATA(kStories);
        KVSCOPE_REQUIRE_DATA(kDreams);
        m_stories = loadWith(kStories, kStoriesTok);
        m_dreams = loadWith(kDreams, kDreamsTok);
        m_storiesState = generated(m_stories,
                                   "Once upon a time, there was a little girl named Lily. She "
                                   "loved to play outside",
                                   40);
        m_dreamsState =
            generated(m_dreams, "Echoes of vectors unfold, a gentle hum of precision", 40);
    }

    // Leave-one-out of a slot is the state with that slot evicted: for every slot the survival
    // lab evicts at a budget of all slots but one (random with five seeds, knorm, tova,
    // sink-window), ablateSlot's logits equal the evicted state's recomputed last logits within
    // 1e-4 (both f32; only the order of the sums differs), and at least one of those slots
    // moves the logits by far more than that (the identity is not "nothing changes").
    void leaveOneOutIsEviction() {
        const Session s = restored(m_storiesState, m_stories);
        const int64_t T = m_storiesState.cacheLength;
        auto fullLogits = s.recomputeLastStep();
        QVERIFY(fullLogits);
        std::vector<SurviveOptions> runs;
        for (int seed = 1; seed <= 5; ++seed)
            runs.push_back({.policy = "random",
                            .budget = double(T - 1),
                            .params = {{"seed", std::to_string(seed)}}});
        for (const char* p : {"knorm", "tova", "sink-window"})
            runs.push_back({.policy = p, .budget = double(T - 1), .params = {}});
        std::set<int64_t> seen;
        double worst = 0, largestEffect = 0;
        for (const auto& o : runs) {
            auto c = compress(m_storiesState, m_stories, o);
            QVERIFY2(c, c.message().c_str());
            const auto& kept = c.value().keptTokens;
            QCOMPARE(int64_t(kept.size()), T - 1);
            int64_t evicted = -1;
            for (int64_t t = 0; t < T && evicted < 0; ++t)
                if (!std::binary_search(kept.begin(), kept.end(), t))
                    evicted = t;
            QVERIFY(evicted >= 0 && evicted < T - 1);
            seen.insert(evicted);
            auto hidden = ablateSlot(s, evicted);
            QVERIFY2(hidden, hidden.message().c_str());
            const double d = maxAbsDiff(hidden.value(), c.value().snapshot.lastLogits);
            worst = std::max(worst, d);
            largestEffect = std::max(largestEffect, maxAbsDiff(hidden.value(), fullLogits.value()));
            QVERIFY2(d < 1e-4, qPrintable(QString("%1 evicting slot %2: max |dlogit| %3")
                                              .arg(QString::fromStdString(o.policy))
                                              .arg(evicted)
                                              .arg(d)));
        }
        qInfo("leave-one-out vs eviction over %zu slots: max |dlogit| %.3g; the largest change "
              "from the full logits %.3g",
              seen.size(), worst, largestEffect);
        QVERIFY(seen.size() >= 4);
        QVERIFY2(largestEffect > 1e-2, qPrintable(QString::number(largestEffect)));
        // The same through the attribution itself: its KL is the evicted state's.
        auto r = attributeSession(s, {});
        QVERIFY2(r, r.message().c_str());
        for (int64_t slot : seen) {
            auto hidden = ablateSlot(s, slot);
            QVERIFY(hidden);
            const double kl = compareLogits(fullLogits.value(), hidden.value()).kl;
            QVERIFY(std::abs(r.value().bySlot[size_t(slot)].ablationKl - kl) < 1e-12);
        }
    }

    // The verdict "this slot matters" (hiding it costs the top token more than 0.1 nats of log
    // probability) comes out both ways on one real state: the slot the ablation ranks first
    // matters, the one it ranks last does not, and their KLs are orders of magnitude apart.
    void slotsThatMatterAndSlotsThatDoNot() {
        auto r = attribute(m_dreamsState, m_dreams);
        QVERIFY2(r, r.message().c_str());
        const auto& res = r.value();
        QVERIFY(res.ranked.size() >= 2);
        const auto& first = res.bySlot[size_t(res.ranked.front())];
        const auto& last = res.bySlot[size_t(res.ranked.back())];
        auto matters = [](const SlotAttribution& a) { return a.deltaLogp < -0.1; };
        qInfo("aidreams260K: next token %d; slot %lld %s: KL %.3g, dlogp %.3g; slot %lld %s: "
              "KL %.3g, dlogp %.3g",
              res.topToken, (long long)first.slot, first.text.c_str(), first.ablationKl,
              first.deltaLogp, (long long)last.slot, last.text.c_str(), last.ablationKl,
              last.deltaLogp);
        QVERIFY(matters(first));
        QVERIFY(!matters(last));
        QVERIFY(first.ablationKl > 100 * last.ablationKl);
        // Ranked by KL, largest first; every slot but the last ablated.
        for (size_t i = 1; i < res.ranked.size(); ++i)
            QVERIFY(res.bySlot[size_t(res.ranked[i - 1])].ablationKl >=
                    res.bySlot[size_t(res.ranked[i])].ablationKl);
        QCOMPARE(res.ablated, m_dreamsState.cacheLength - 1);
        QCOMPARE(int64_t(res.bySlot.size()), m_dreamsState.cacheLength);
        QVERIFY(!res.bySlot.back().ablatable);
        QCOMPARE(res.bySlot.back().why, std::string("query"));
        QVERIFY(res.bySlot.back().estimate > 0); // the query attends to its own slot
        QCOMPARE(res.bySlot.back().tokenIndex, int64_t(m_dreamsState.tokens.size()) - 1);
        // Slot i holds token i, with its text.
        for (const auto& a : res.bySlot) {
            QCOMPARE(a.tokenIndex, a.slot);
            QCOMPARE(a.token, m_dreamsState.tokens[size_t(a.slot)]);
        }
        QVERIFY(!first.text.empty());
    }

    // The estimate agrees with the ablation in rank on both models (positive, within [-1, 1]);
    // Spearman itself on known columns (ties, a constant column, too few values).
    void rankCorrelation() {
        for (const auto& [model, state] : both()) {
            auto r = attribute(*state, model, {.top = 5});
            QVERIFY2(r, r.message().c_str());
            const double rho = r.value().rankCorrelation;
            qInfo("%s: Spearman(ablation KL, estimate) = %.3f over %lld slots",
                  model->path().c_str(), rho, (long long)r.value().ablated);
            QVERIFY(rho >= -1 && rho <= 1);
            QVERIFY2(rho > 0.5, qPrintable(QString::number(rho)));
            QCOMPARE(int64_t(r.value().ranked.size()), int64_t(5));
        }
        QCOMPARE(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
        QCOMPARE(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
        QVERIFY(std::abs(spearman({1, 2, 2, 3}, {1, 2, 3, 4}) - 0.9486832980505138) < 1e-12);
        QVERIFY(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
        QVERIFY(std::isnan(spearman({1}, {1})));
    }

    // A slot the state already masks is not ablated and gets no estimate (its attention is 0);
    // an evicted state's slots are named by the tokens its lineage says they hold.
    void maskedAndEvictedStates() {
        Snapshot masked = m_storiesState;
        masked.mask[5] = 0;
        auto r = attribute(masked, m_stories, {}, /*force=*/true);
        QVERIFY2(r, r.message().c_str());
        const auto& five = r.value().bySlot[5];
        QVERIFY(!five.ablatable);
        QCOMPARE(five.why, std::string("masked"));
        QCOMPARE(five.estimate, 0.0);
        QCOMPARE(r.value().ablated, masked.cacheLength - 2);
        QVERIFY(std::find(r.value().ranked.begin(), r.value().ranked.end(), 5) ==
                r.value().ranked.end());

        auto c = compress(m_storiesState, m_stories,
                          {.policy = "sink-window", .budget = 12.0, .params = {}});
        QVERIFY2(c, c.message().c_str());
        auto e = attribute(c.value().snapshot, m_stories);
        QVERIFY2(e, e.message().c_str());
        QCOMPARE(int64_t(e.value().bySlot.size()), int64_t(12));
        for (size_t i = 0; i < 12; ++i) {
            QCOMPARE(e.value().bySlot[i].tokenIndex, c.value().keptTokens[i]);
            QCOMPARE(e.value().bySlot[i].token,
                     m_storiesState.tokens[size_t(c.value().keptTokens[i])]);
        }
    }

    // Other architectures' paths: a random GPT-2 (learned positions, biases, LayerNorm) and a
    // Gemma-2-like llama (GQA, a sliding layer, soft-caps, output norms). Every slot but the
    // last ablated with a finite KL, every estimate finite and >= 0, and on GPT-2 the
    // leave-one-out still equals the survival lab's eviction.
    void otherArchitectures() {
        ModelConfig c = findRandomModelShape("gemma-2-2b")->config;
        c.nLayers = 3;
        c.dim = 64;
        c.hiddenDim = 96;
        c.nHeads = 4;
        c.nKvHeads = 2;
        c.headDim = 16;
        c.vocabSize = 97;
        c.maxContext = 64;
        c.embedScale = 8.0;
        c.slidingWindow = 6;
        c.slidingLayers = {true, false, true};
        c.bosId = 1;
        c.eosId = 2;
        auto gemma = Model::createRandom(c, 11, "cpu", 0.2);
        QVERIFY2(gemma, gemma.message().c_str());
        const auto gpt2 = randomGpt2(m_dir.filePath("gpt2"));
        for (const auto& model : {gemma.value(), gpt2}) {
            std::vector<int32_t> ids;
            for (int i = 0; i < 20; ++i)
                ids.push_back(3 + (i * 7) % 40);
            Session s(model);
            QVERIFY(s.feed(ids));
            auto r = attributeSession(s, {});
            QVERIFY2(r, r.message().c_str());
            QCOMPARE(r.value().ablated, int64_t(19));
            for (const auto& a : r.value().bySlot) {
                QVERIFY(std::isfinite(a.ablationKl) && a.ablationKl >= -1e-12);
                QVERIFY(std::isfinite(a.estimate) && a.estimate >= 0);
            }
            QVERIFY(r.value().rankCorrelation >= -1 && r.value().rankCorrelation <= 1);
            qInfo("%s: Spearman %.3f", model == gpt2 ? "random GPT-2" : "Gemma-2-like",
                  r.value().rankCorrelation);
        }
        const Snapshot g = fed(gpt2, {3, 10, 17, 24, 31, 38, 5, 12, 19, 26, 33, 40});
        const int64_t T = g.cacheLength;
        auto c3 = compress(g, gpt2, {.policy = "random", .budget = double(T - 1), .params = {}});
        QVERIFY2(c3, c3.message().c_str());
        const auto& kept = c3.value().keptTokens;
        int64_t evicted = 0;
        while (std::binary_search(kept.begin(), kept.end(), evicted))
            ++evicted;
        auto hidden = ablateSlot(restored(g, gpt2), evicted);
        QVERIFY2(hidden, hidden.message().c_str());
        const double d = maxAbsDiff(hidden.value(), c3.value().snapshot.lastLogits);
        QVERIFY2(d < 1e-4, qPrintable(QString::number(d)));
    }

    // Bad input is a Result error naming what is wrong.
    void refusals() {
        auto r = attribute(m_storiesState, nullptr);
        QVERIFY(!r && r.message().find("no model") != std::string::npos);
        r = attribute(m_storiesState, m_stories, {.top = -1});
        QVERIFY(!r && r.message().find("top -1") != std::string::npos);
        Snapshot empty = m_storiesState;
        empty.tokens.clear();
        empty.cacheLength = 0;
        r = attribute(empty, m_stories);
        QVERIFY(!r && r.message().find("no tokens") != std::string::npos);
        const Session s = restored(m_storiesState, m_stories);
        const int64_t T = s.cache().length();
        auto last = ablateSlot(s, T - 1);
        QVERIFY(!last && last.message().find("query") != std::string::npos);
        QVERIFY(!ablateSlot(s, -1));
        QVERIFY(!ablationEffects(s, 0));
        auto wrong = attributeSession(s, {0, 1, 2});
        QVERIFY(!wrong && wrong.message().find("slotTokens") != std::string::npos);
        QVERIFY(!attributeSession(Session(m_stories), {}));
        // NaN keys in one layer (a forced kv-nan.kvsnap of the hostile corpus): no top token,
        // every KL NaN; it printed "log p nan" and ablation KL 0 for every slot.
        const KvCache& c = s.cache();
        HostTensor k = c.key(2);
        std::fill(k.data.begin(), k.data.end(), std::numeric_limits<float>::quiet_NaN());
        auto nanCache = c.withLayer(2, k, c.value(2));
        QVERIFY(nanCache.isOk());
        const Session bad(m_stories, nanCache.value(), s.tokens(), s.nextPosition(),
                          s.lastLogits());
        auto nan = attributeSession(bad, {});
        QVERIFY(!nan);
        QVERIFY2(nan.message().find("non-finite") != std::string::npos, nan.message().c_str());
    }

    // The oracle against every other eviction run of the sweep, at every budget, on both
    // models (mean KL over 32 teacher-forced steps; recall probes off, 4 and 8 bits: what is
    // compared here are the evictions). It is not an upper bound everywhere, and this test says
    // where it stands. Measured (2026-12, README): lowest KL of all 15 eviction runs at 50 % on
    // both models and at 25 % and 75 % on stories260K; at 12.5 % seven runs beat it on
    // stories260K (h2o and snapkv uniform among them) and one on aidreams260K, tova uniform beats
    // it by 5 % at 25 % there, and three pyramid / head-adaptive runs at 75 %. Why: it ranks each
    // slot by the effect of removing it alone, with every other slot present (first order: what
    // a slot is worth once most others are gone it does not see), and it keeps one set of slots
    // for every layer and head, where pyramid and head-adaptive allocations choose per layer or
    // head. Held here: best of every run at 50 %, within 1.5x of the best run from 25 % on,
    // better than random everywhere; the runs that beat it are printed.
    void oracleAgainstEveryPolicy() {
        std::string failures;
        for (const auto& [model, state] : both()) {
            auto sw = sweep(*state, model,
                            {.budgets = {0.125, 0.25, 0.5, 0.75},
                             .bits = {4, 8},
                             .layers = {0},
                             .steps = 32,
                             .recall = false});
            QVERIFY2(sw, sw.message().c_str());
            std::map<double, double> oracle;
            std::map<double, std::vector<std::pair<std::string, double>>> others;
            for (const auto& r : sw.value()) {
                if (!isEvictionPolicy(r.policy))
                    continue;
                if (r.policy == "oracle")
                    oracle[r.budget] = r.kl.mean;
                else
                    others[r.budget].push_back({runCurve(r.policy, r.parameters), r.kl.mean});
            }
            QCOMPARE(int(oracle.size()), 4);
            for (const auto& [budget, kl] : oracle) {
                std::string beaten;
                const auto& runs = others[budget];
                // six other evictions, h2o/tova/snapkv/knorm also pyramid and head-adaptive
                QCOMPARE(int(runs.size()), 6 + 4 * 2);
                for (const auto& [name, other] : runs)
                    if (other < kl)
                        beaten += " " + name + " (" + std::to_string(other) + ")";
                const double best =
                    std::min_element(runs.begin(), runs.end(), [](auto& a, auto& b) {
                        return a.second < b.second;
                    })->second;
                qInfo("%s %.1f %%: oracle KL %.4g, best other %.4g%s%s", model->path().c_str(),
                      budget * 100, kl, best, beaten.empty() ? "" : "; lower:", beaten.c_str());
                const std::string where = model->path() + " " + std::to_string(budget) + ": ";
                if (budget == 0.5 && !beaten.empty())
                    failures += where + "beaten by" + beaten + "\n";
                if (budget >= 0.25 && kl > 1.5 * best)
                    failures += where + "more than 1.5x the best run\n";
                // Everywhere: far better than keeping slots at random.
                for (const auto& [name, other] : runs)
                    if (name == "random")
                        QVERIFY(kl < other);
            }
        }
        QVERIFY2(failures.empty(), failures.c_str());
    }

    // `kvscope-cli attribute`: the JSON fields, the core's numbers, the text output's
    // top slots, and --top refused below 1 with the usage exit.
    void cliCommand() {
        const QString in = m_dir.filePath("dreams.kvsnap");
        QVERIFY(save(m_dreamsState, in.toStdString()).isOk());
        const QString model = QString::fromStdString(testdata::path(kDreams));
        Run j = cli({"attribute", in, "-m", model, "--top", "3", "--json"});
        QVERIFY2(j.code == 0, j.err.constData());
        const QJsonObject o = QJsonDocument::fromJson(j.out).object();
        QVERIFY(o.contains("rank_correlation") && o["rank_correlation"].isDouble());
        const QJsonArray entries = o["slots"].toArray();
        QCOMPARE(qint64(entries.size()), qint64(m_dreamsState.cacheLength));
        for (const auto& v : entries)
            for (const char* key :
                 {"slot", "token", "text", "ablation_kl", "estimate", "delta_logp", "ablatable"})
                QVERIFY2(v.toObject().contains(key), key);
        QCOMPARE(o["ranked"].toArray().size(), 3);
        auto core = attribute(m_dreamsState, m_dreams, {.top = 3});
        QVERIFY(core);
        QVERIFY(std::abs(o["rank_correlation"].toDouble() - core.value().rankCorrelation) < 1e-12);
        const int64_t top = core.value().ranked.front();
        QCOMPARE(qint64(o["ranked"].toArray()[0].toInt()), qint64(top));
        QCOMPARE(o["top_token"].toInt(), core.value().topToken);

        Run t = cli({"attribute", in, "-m", model, "--top", "2"});
        QVERIFY2(t.code == 0, t.err.constData());
        const QString text = QString::fromUtf8(t.out);
        QVERIFY(text.contains("rank correlation"));
        QCOMPARE(text.split('\n', Qt::SkipEmptyParts).size(), 3 + 2); // header lines + 2 slots

        for (const char* bad : {"0", "-1"}) {
            Run b = cli({"attribute", in, "-m", model, "--top", bad, "--json"});
            QCOMPARE(b.code, 2);
            QVERIFY2(b.err.contains("--top"), b.err.constData());
            QVERIFY(b.out.isEmpty());
        }
        Run missing = cli({"attribute", m_dir.filePath("none.kvsnap"), "-m", model});
        QCOMPARE(missing.code, 1);
        QVERIFY(missing.err.contains("none.kvsnap"));
    }
};

QTEST_GUILESS_MAIN(TestAttribution)
#include "tst_attribution.moc"
