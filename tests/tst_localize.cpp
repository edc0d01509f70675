// localize (state/probes/localize.h) on real weights (stories260K): the fault lab's damage is
// named where it is (corrupt-layer: its layer; foreign-cache: layer 0 among the layers that
// matter; dtype-roundtrip: nothing that matters; an off-by-one position record: not the K/V);
// the minimal patch set, applied with the patch surgery (an implementation of its own), brings
// KL under the tolerance and none of its patches can be dropped; the layer search tried every
// smaller set without success; bad input is refused by name; and the CLI's JSON. Also the
// branches side by side (state/probes/branches.h): two forks of one state part in their own
// tokens but not in their caches; a corrupted layer shows in the forced KL from step 0.
#include "engine/model.h"
#include "engine/session.h"
#include "state/ledger/snapshotio.h"
#include "state/probes/branches.h"
#include "state/probes/localize.h"
#include "state/probes/survive.h"
#include "state/surgery/faults.h"
#include "state/surgery/surgery.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <limits>

using namespace kvscope;
using namespace kvscope::state;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";

const char* kStory = "Once upon a time, there was a little girl named Lily. She loved to play "
                     "outside in the park with her friends and her big red ball.";

struct CliRun {
    int code = -1;
    QByteArray out, err;
};

CliRun cli(const QStringList& args) {
    QProcess p;
    p.start(KVSCOPE_CLI, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

} // namespace

class TestLocalize : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_model;
    Snapshot m_clean; // 24-token prompt + 16 greedy tokens
    std::string tmp(const char* name) const { return m_dir.filePath(name).toStdString(); }

    Snapshot fault(const char* name, std::map<std::string, std::string> params = {}) {
        FaultContext c;
        c.model = m_model;
        c.params = std::move(params);
        auto r = injectFault(name, m_clean, c);
        if (!r)
            qFatal("%s: %s", name, r.message().c_str());
        return r.value();
    }

    // KL(B's next step || A's with `patches` applied through the patch surgery): the check
    // that does not share code with the search.
    double klWithPatches(const Snapshot& a, const Snapshot& b, const LocalizeResult& r,
                         const std::vector<int>& which) {
        Snapshot patched = a;
        for (int i : which) {
            const auto& p = r.patches[std::size_t(i)];
            PatchOptions o;
            o.layer = p.layer;
            o.head = p.head;
            o.begin = p.first;
            o.end = p.end;
            auto made = patch(patched, b, o);
            if (!made)
                qFatal("patch: %s", made.message().c_str());
            patched = made.value().snapshot;
        }
        auto sa = forcedSession(patched, m_model);
        auto sb = forcedSession(b, m_model);
        if (!sa || !sb)
            qFatal("restore failed");
        const int32_t probe = r.probeToken;
        Session na = sa.value(), nb = sb.value();
        if (!na.feed(std::span<const int32_t>(&probe, 1)) ||
            !nb.feed(std::span<const int32_t>(&probe, 1)))
            qFatal("feed failed");
        return compareLogits(nb.lastLogits(), na.lastLogits()).kl;
    }

    // A session of `clean` with every key of `layer` NaN (what `--force` restores from a
    // .kvsnap whose layer holds NaN: the hostile corpus's kvsnap.content kv-nan).
    Session withNanKeys(const Snapshot& clean, int layer) {
        auto s = forcedSession(clean, m_model);
        if (!s)
            qFatal("restore: %s", s.message().c_str());
        const KvCache& c = s.value().cache();
        HostTensor k = c.key(layer);
        std::fill(k.data.begin(), k.data.end(), std::numeric_limits<float>::quiet_NaN());
        auto bad = c.withLayer(layer, k, c.value(layer));
        if (!bad)
            qFatal("withLayer: %s", bad.message().c_str());
        return Session(m_model, bad.value(), s.value().tokens(), s.value().nextPosition(),
                       s.value().lastLogits());
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        if (!testdata::exists(kStories))
            return;
        m_model = testdata::loadModel(kStories, kStoriesTok);
        auto prompt = m_model->tokenizer()->encode(kStory);
        prompt.resize(24);
        Session s(m_model);
        QVERIFY(s.feed(prompt).isOk());
        Sampler sampler(SamplerSettings{0.0f, 0.9f, 0, 42});
        QVERIFY(s.generate(16, sampler).isOk());
        CaptureOptions co;
        co.sampler = &sampler;
        co.prompt = plainPromptMeta(prompt, m_model->config().bosId);
        auto snap = capture(s, co);
        QVERIFY2(snap.isOk(), snap.message().c_str());
        m_clean = snap.value();
        QVERIFY(save(m_clean, tmp("clean.kvsnap")).isOk());
    }

    // One layer overwritten with noise: that layer and no other is what matters; the minimal
    // set is verified through the patch surgery, and is minimal as the search defines it.
    void corruptLayerNamesItsLayer_data() {
        QTest::addColumn<int>("layer");
        QTest::addColumn<QString>("which");
        QTest::newRow("layer 2, k and v") << 2 << "kv";
        QTest::newRow("layer 0, v only") << 0 << "v";
        QTest::newRow("layer 4, k only") << 4 << "k";
    }
    void corruptLayerNamesItsLayer() {
        KVSCOPE_REQUIRE_DATA(kStories);
        QFETCH(int, layer);
        QFETCH(QString, which);
        const Snapshot bad = fault(
            "corrupt-layer", {{"layer", std::to_string(layer)}, {"which", which.toStdString()}});
        auto r = localize(bad, &m_clean, m_model);
        QVERIFY2(r.isOk(), r.message().c_str());
        const auto& res = r.value();
        qInfo("%s (%d forward steps)", res.summary.c_str(), res.evaluations);
        QCOMPARE(res.verdict, std::string("localized"));
        QCOMPARE(res.minimalLayers(), std::vector<int>{layer});
        QVERIFY(res.klBefore > res.tolerance);
        QVERIFY(res.klAfter <= res.tolerance);
        // The biggest single-layer patch is the corrupted layer.
        const auto top = std::find_if(res.patches.begin(), res.patches.end(),
                                      [](const LocalizePatch& p) { return p.stage == "layer"; });
        QCOMPARE(top->layer, layer);
        // Applied by the patch surgery: under the tolerance; without any one patch: above.
        const double all = klWithPatches(bad, m_clean, res, res.minimal);
        QVERIFY2(all <= res.tolerance, qPrintable(QString::number(all)));
        for (std::size_t drop = 0; drop < res.minimal.size() && res.minimal.size() > 1; ++drop) {
            auto fewer = res.minimal;
            fewer.erase(fewer.begin() + std::ptrdiff_t(drop));
            QVERIFY(klWithPatches(bad, m_clean, res, fewer) > res.tolerance);
        }
        // No smaller layer set tried in the search brought KL under the tolerance.
        for (std::size_t i = 0; i + 1 < res.layerSearch.size(); ++i)
            QVERIFY(res.layerSearch[i].kl > res.tolerance);
        QVERIFY(res.layerSearch.back().kl <= res.tolerance);
        // The map: the corrupted layer's row holds the largest KL removed.
        QVERIFY(res.map);
        double best = -1;
        int bestLayer = -1;
        for (std::size_t l = 0; l < res.map->klRemoved.size(); ++l)
            for (double x : res.map->klRemoved[l])
                if (x > best)
                    best = x, bestLayer = int(l);
        QCOMPARE(bestLayer, layer);
    }

    // Another model's K/V at every layer: the damage starts at layer 0, which is among the
    // layers that matter.
    void foreignCacheNamesLayerZero() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const Snapshot bad = fault("foreign-cache");
        auto r = localize(bad, &m_clean, m_model);
        QVERIFY2(r.isOk(), r.message().c_str());
        const auto& res = r.value();
        qInfo("%s (%d forward steps)", res.summary.c_str(), res.evaluations);
        QCOMPARE(res.verdict, std::string("localized"));
        const auto layers = res.minimalLayers();
        QVERIFY(!layers.empty());
        QCOMPARE(layers.front(), 0);
        QVERIFY(klWithPatches(bad, m_clean, res, res.minimal) <= res.tolerance);
    }

    // f16 round trip behind an f32 manifest: a real difference, not one that matters.
    void dtypeRoundtripMattersNot() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const Snapshot bad = fault("dtype-roundtrip");
        auto r = localize(bad, &m_clean, m_model);
        QVERIFY2(r.isOk(), r.message().c_str());
        qInfo("%s", r.value().summary.c_str());
        QCOMPARE(r.value().verdict, std::string("clean"));
        QVERIFY(r.value().minimal.empty());
        QVERIFY(r.value().summary.find("nothing that matters") != std::string::npos);
        // The same state under the exact profile: the rounding does change the next step.
        LocalizeOptions exactly;
        exactly.profile = ToleranceProfile::Exact;
        auto exact = localize(bad, &m_clean, m_model, exactly);
        QVERIFY2(exact.isOk(), exact.message().c_str());
        QVERIFY(exact.value().verdict != "clean");
    }

    // An off-by-one position record: the K/V are right, the positions are not.
    void shiftedPositionsAreNotTheKv() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const Snapshot bad = fault("position-offset");
        auto r = localize(bad, &m_clean, m_model);
        QVERIFY2(r.isOk(), r.message().c_str());
        qInfo("%s", r.value().summary.c_str());
        QCOMPARE(r.value().verdict, std::string("not-kv"));
        const auto& other = r.value().otherDifferences;
        QVERIFY(std::find(other.begin(), other.end(), "positions") != other.end());
        QVERIFY(r.value().klAllLayers > r.value().tolerance);
    }

    // B left out: A's tokens replayed. The clean state is its own replay (nothing matters); the
    // corrupted one is localized as against the clean state.
    void replayIsTheDefaultReference() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto clean = localize(m_clean, nullptr, m_model);
        QVERIFY2(clean.isOk(), clean.message().c_str());
        QCOMPARE(clean.value().reference, std::string("replay"));
        QCOMPARE(clean.value().verdict, std::string("clean"));
        auto bad = localize(fault("corrupt-layer", {{"layer", "3"}}), nullptr, m_model);
        QVERIFY2(bad.isOk(), bad.message().c_str());
        QCOMPARE(bad.value().minimalLayers(), std::vector<int>{3});
    }

    void refusesWhatCannotBeCompared() {
        KVSCOPE_REQUIRE_DATA(kStories);
        // Other tokens.
        Snapshot other = m_clean;
        other.tokens[5] = (other.tokens[5] + 1) % 512;
        auto r = localize(m_clean, &other, m_model);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("token 5") != std::string::npos, r.message().c_str());
        // An evicted state has no replay of the same slots.
        SurviveOptions so;
        so.policy = "sink-window";
        so.budget = 0.5;
        auto evicted = compress(m_clean, m_model, so);
        QVERIFY2(evicted.isOk(), evicted.message().c_str());
        auto e = localize(evicted.value().snapshot, nullptr, m_model);
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("give B") != std::string::npos, e.message().c_str());
        // A shorter B.
        auto cut = truncate(m_clean, 30, m_model);
        QVERIFY(cut.isOk());
        auto s = localize(m_clean, &cut.value().snapshot, m_model);
        QVERIFY(!s.isOk());
    }

    // Two forks of the clean state: their own distributions part once their tokens do, their
    // caches never (B's prefix fed A's tokens is A, bit for bit); a fork of the corrupted state
    // against a fork of the clean one differs in its cache from the first step.
    void branchesOfForks() {
        KVSCOPE_REQUIRE_DATA(kStories);
        ForkOptions fo;
        fo.branches = 2;
        fo.steps = 10;
        fo.temperature = 1.0f;
        auto forks = fork(m_clean, fo, m_model);
        QVERIFY2(forks.isOk(), forks.message().c_str());
        const auto& br = forks.value().branches;
        auto c = compareBranches(br[0].snapshot, br[1].snapshot, m_model);
        QVERIFY2(c.isOk(), c.message().c_str());
        const auto& r = c.value();
        QVERIFY(r.prefix >= int64_t(m_clean.tokens.size()));
        QVERIFY(r.prefix < r.tokensA); // the seeds part the branches within 10 tokens
        QCOMPARE(r.steps.front().after, r.prefix - 1);
        QCOMPARE(*r.steps.front().klOwn, 0.0); // the same prefix predicts the same next token
        QVERIFY(r.maxKlOwn > 0);
        QCOMPARE(r.maxKlForced, 0.0);
        QCOMPARE(r.firstStepForcedAbove, int64_t(-1));
        QCOMPARE(int64_t(r.steps.size()), std::max(r.tokensA, r.tokensB) - (r.prefix - 1));

        fo.branches = 1;
        fo.force = true;
        auto damaged = fork(fault("corrupt-layer"), fo, m_model);
        QVERIFY2(damaged.isOk(), damaged.message().c_str());
        auto d = compareBranches(br[0].snapshot, damaged.value().branches[0].snapshot, m_model);
        QVERIFY2(d.isOk(), d.message().c_str());
        QCOMPARE(d.value().firstStepForcedAbove, int64_t(0));
        QVERIFY(d.value().maxKlForced > d.value().threshold);
        // The same tokens (the corrupted state against the clean one): one step, both KLs equal.
        auto same = compareBranches(fault("corrupt-layer"), m_clean, m_model);
        QVERIFY2(same.isOk(), same.message().c_str());
        QCOMPARE(same.value().prefix, int64_t(m_clean.tokens.size()));
        QCOMPARE(same.value().steps.size(), std::size_t(1));
        QCOMPARE(*same.value().steps[0].klOwn, *same.value().steps[0].klForced);
        QVERIFY(*same.value().steps[0].klOwn > 0);
        // An evicted state has no slot per token to branch from.
        SurviveOptions so;
        so.policy = "sink-window";
        so.budget = 0.5;
        auto evicted = compress(m_clean, m_model, so);
        QVERIFY(evicted.isOk());
        auto refused = compareBranches(m_clean, evicted.value().snapshot, m_model);
        QVERIFY(!refused.isOk());
        QVERIFY2(refused.message().find("B's cache holds") != std::string::npos,
                 refused.message().c_str());
        // The CLI prints core's JSON.
        QVERIFY(save(br[0].snapshot, tmp("fork0.kvsnap")).isOk());
        QVERIFY(save(br[1].snapshot, tmp("fork1.kvsnap")).isOk());
        auto run = cli({"branches", QString::fromStdString(tmp("fork0.kvsnap")),
                        QString::fromStdString(tmp("fork1.kvsnap")), "-m",
                        QString::fromStdString(testdata::path(kStories)), "-t",
                        QString::fromStdString(testdata::path(kStoriesTok)), "--json"});
        QVERIFY2(run.code == 0, run.err.constData());
        QVERIFY(nlohmann::json::parse(run.out.toStdString()) ==
                nlohmann::json::parse(toJson(r, m_model->tokenizer().get()).dump()));
    }

    // A layer of NaN keys is damage, not a perfect match: compareLogits dropped a NaN through
    // std::max (KL 0), so localize called such a state "clean" and branches saw no change
    // (hostile corpus, probe.kvsnap.localize / branches on kv-nan.kvsnap).
    void nanKeysAreNotClean() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const std::vector<float> ok = {1.0f, 2.0f, 3.0f};
        const std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f};
        QVERIFY(std::isinf(compareLogits(ok, nan).kl));
        QVERIFY(std::isinf(compareLogits(nan, ok).maxAbs));
        auto cleanSession = forcedSession(m_clean, m_model);
        QVERIFY(cleanSession.isOk());
        const Session bad = withNanKeys(m_clean, 2);
        auto r = localize(bad, &cleanSession.value());
        QVERIFY2(r.isOk(), r.message().c_str());
        qInfo("%s", r.value().summary.c_str());
        QCOMPARE(r.value().verdict, std::string("localized"));
        QCOMPARE(r.value().minimalLayers(), std::vector<int>{2});
        // The patches: the NaN layer removes everything (+inf) and comes first; the others
        // remove nothing (inf - inf is not NaN here), and nothing in the JSON reads "nan".
        const auto& patches = r.value().patches;
        QCOMPARE(patches.front().layer, 2);
        QVERIFY(std::isinf(patches.front().klRemoved) && patches.front().klRemoved > 0);
        for (const auto& p : patches) {
            QVERIFY(!std::isnan(p.klRemoved));
            if (p.layer != 2)
                QCOMPARE(p.klRemoved, 0.0);
        }
        QVERIFY(toJson(r.value()).dump().find("nan") == std::string::npos);
        // As the reference, or as either branch, NaN is refused by name (it read "not the
        // K/V" and "B's cache changes ... from step 0" whichever side held it).
        auto asReference = localize(cleanSession.value(), &bad);
        QVERIFY(!asReference);
        QVERIFY2(asReference.message().find("non-finite") != std::string::npos,
                 asReference.message().c_str());
        for (const bool badIsA : {true, false}) {
            auto br = badIsA ? compareBranches(bad, cleanSession.value())
                             : compareBranches(cleanSession.value(), bad);
            QVERIFY(!br);
            QVERIFY2(br.message().find(badIsA ? "A's next-token logits are not finite"
                                              : "B's next-token logits are not finite") !=
                         std::string::npos,
                     br.message().c_str());
        }
    }

    // The KL bound of a pair follows the loosest cache dtype whichever state comes first: an
    // f32 state against a bf16 one is judged as bf16 both ways round (branches used A's dtype).
    void toleranceFollowsTheLoosestCache() {
        KVSCOPE_REQUIRE_DATA(kStories);
        LoadOptions o;
        o.tokenizerPath = testdata::path(kStoriesTok);
        o.cacheDtype = "bf16";
        auto bf = Model::load(testdata::path(kStories), o);
        QVERIFY2(bf.isOk(), bf.message().c_str());
        Session b(bf.value());
        QVERIFY(b.feed(m_clean.tokens).isOk());
        QCOMPARE(b.cache().dtype(), std::string("bf16"));
        auto a = forcedSession(m_clean, m_model);
        QVERIFY(a.isOk());
        auto ab = compareBranches(a.value(), b);
        auto ba = compareBranches(b, a.value());
        QVERIFY2(ab.isOk() && ba.isOk(), (ab.message() + ba.message()).c_str());
        QCOMPARE(ab.value().threshold, ba.value().threshold);
        QCOMPARE(ab.value().threshold, toleranceFor(ToleranceProfile::SameDevice, "bf16").maxKl);
        QCOMPARE(toleranceDtype("f32", {"f32", "bf16"}), std::string("bf16"));
        QCOMPARE(toleranceDtype("f32", {"f16", "f32"}), std::string("f16"));
        QCOMPARE(toleranceDtype("f16", {"bf16"}), std::string("f16"));
    }

    void cliPrintsTheSameJson() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const Snapshot bad = fault("corrupt-layer", {{"layer", "1"}});
        QVERIFY(save(bad, tmp("bad.kvsnap")).isOk());
        const QString model = QString::fromStdString(testdata::path(kStories));
        const QString tok = QString::fromStdString(testdata::path(kStoriesTok));
        auto run =
            cli({"localize", QString::fromStdString(tmp("bad.kvsnap")),
                 QString::fromStdString(tmp("clean.kvsnap")), "-m", model, "-t", tok, "--json"});
        QVERIFY2(run.code == 0, run.err.constData());
        const auto j = nlohmann::json::parse(run.out.toStdString());
        for (const char* key : {"kl_before", "kl_after", "tolerance", "patches", "minimal", "map"})
            QVERIFY2(j.contains(key), key);
        auto core = localize(bad, &m_clean, m_model);
        QVERIFY(core.isOk());
        QVERIFY(j == nlohmann::json::parse(toJson(core.value()).dump()));
        QVERIFY(j["minimal_layers"] == nlohmann::json::array({1}));
        const auto& first = j["patches"][0];
        QVERIFY(first["head"].is_null() || first["head"].is_number_integer());
        QCOMPARE(first["slots"].size(), std::size_t(2));
        // Text output names the layer; usage errors exit 2; other tokens exit 1 naming both files.
        auto text =
            cli({"localize", QString::fromStdString(tmp("bad.kvsnap")), "-m", model, "-t", tok});
        QVERIFY2(text.code == 0, text.err.constData());
        QVERIFY2(text.out.contains("layer 1"), text.out.constData());
        QCOMPARE(cli({"localize", QString::fromStdString(tmp("bad.kvsnap")), "-m", model,
                      "--map-blocks", "-1"})
                     .code,
                 2);
        QCOMPARE(cli({"localize", QString::fromStdString(tmp("bad.kvsnap")), "-m", model,
                      "--profile", "close-enough"})
                     .code,
                 2);
        Snapshot other = m_clean;
        other.tokens[3] = (other.tokens[3] + 1) % 512;
        QVERIFY(save(other, tmp("other.kvsnap")).isOk());
        auto refused = cli({"localize", QString::fromStdString(tmp("bad.kvsnap")),
                            QString::fromStdString(tmp("other.kvsnap")), "-m", model});
        QCOMPARE(refused.code, 1);
        QVERIFY2(refused.err.contains("other.kvsnap") && refused.err.contains("token 3"),
                 refused.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestLocalize)
#include "tst_localize.moc"
