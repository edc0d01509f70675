// Fault lab and transplant tests on real weights (stories260K): every fault is named by
// verify (through a real .kvsnap file) and changes the continuation; the clean state has no
// error and no drift; the residual-stream transplant reproduces the donor; the Observer
// intervention hook; and the CLI (`fault list/inject/lab`, `transplant`).
#include "engine/model.h"
#include "engine/session.h"
#include "state/probes/compare.h"
#include "state/surgery/faults.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshotio.h"
#include "state/probes/transplant.h"
#include "state/verify/verifyfile.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

using namespace kvscope;
using namespace kvscope::state;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";
const QString kDreamsTok = "models/aidreams260K/tok512.bin";

using testdata::loadModel;

// The first n tokens of a story text (BOS included).
std::vector<int32_t> promptOf(const Model& m, const char* text, std::size_t n) {
    auto ids = m.tokenizer()->encode(text);
    if (ids.size() < n)
        qFatal("prompt '%s' has only %zu tokens", text, ids.size());
    ids.resize(n);
    return ids;
}

const char* kStory = "Once upon a time, there was a little girl named Lily. She loved to play "
                     "outside in the park with her friends and her big red ball.";
const char* kOtherStory = "One day, a small dog called Max found a shiny blue box under the "
                          "old tree. He barked and ran to show it to his mom and dad.";

QString ids(const Report& r) {
    QStringList l;
    for (const auto& v : r.violations)
        l << QString::fromStdString(v.id + "(" + severityName(v.severity) + "): " + v.message);
    return l.join("\n");
}

const Sampler kGreedy(SamplerSettings{0.0f, 0.9f, 0, 42});

struct CliRun {
    int code = -1;
    QByteArray out, err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

QString cliPath() {
#ifdef KVSCOPE_CLI
    return KVSCOPE_CLI;
#else
    return QString(KVSCOPE_BINARY_DIR) + "/app/cli/kvscope-cli";
#endif
}

CliRun cli(const QStringList& args) {
    QProcess p;
    p.start(cliPath(), args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

} // namespace

class TestFaults : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_model;
    Snapshot m_clean;        // 24-token prompt + 16 greedy tokens
    std::string m_cleanPath; // ... saved
    std::string tmp(const char* name) const { return m_dir.filePath(name).toStdString(); }

    FaultContext context() const {
        FaultContext c;
        c.model = m_model;
        if (testdata::exists(kDreamsTok)) {
            auto t = tok::Tokenizer::fromFile(testdata::path(kDreamsTok));
            if (t)
                c.otherTokenizer = t.value();
        }
        return c;
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        if (!testdata::exists(kStories))
            return;
        m_model = loadModel(kStories, kStoriesTok);
        const auto prompt = promptOf(*m_model, kStory, 24);
        Session s(m_model);
        QVERIFY(s.feed(prompt).isOk());
        Sampler sampler(SamplerSettings{0.0f, 0.9f, 0, 42});
        auto gen = s.generate(16, sampler);
        QVERIFY2(gen.isOk(), gen.message().c_str());
        QCOMPARE(gen.value().tokens.size(), std::size_t(16));
        CaptureOptions co;
        co.sampler = &sampler;
        co.prompt = plainPromptMeta(prompt, m_model->config().bosId);
        auto snap = capture(s, co);
        QVERIFY2(snap.isOk(), snap.message().c_str());
        m_clean = snap.value();
        m_cleanPath = tmp("clean.kvsnap");
        QVERIFY(save(m_clean, m_cleanPath).isOk());
    }

    void cleanStateHasNoErrorAndNoDrift() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto v = verifyFile(m_cleanPath, m_model);
        QVERIFY2(!v.report.hasErrors(), qPrintable(ids(v.report)));
        QVERIFY2(!v.report.has("cache.precision"), qPrintable(ids(v.report)));
        QVERIFY(v.equivalence && v.equivalence->equivalent);
        auto a = restore(m_clean, m_model);
        QVERIFY2(a.isOk(), a.message().c_str());
        auto b = forcedSession(m_clean, m_model);
        QVERIFY2(b.isOk(), b.message().c_str());
        auto d = drift(a.value().session, b.value(), 16, kGreedy);
        QVERIFY2(d.isOk(), d.message().c_str());
        QCOMPARE(static_cast<int>(d.value().steps.size()), 16);
        QCOMPARE(d.value().maxKl, 0.0);
        QCOMPARE(d.value().firstDivergingStep, -1);
    }

    void everyFault_data() {
        QTest::addColumn<QString>("fault");
        for (const auto& f : allFaults())
            QTest::newRow(f.name.c_str()) << QString::fromStdString(f.name);
    }
    // Inject -> save -> verifyFile names the documented check; drift clean vs faulty (forced)
    // shows the effect (except metadata-only faults, whose drift must be exactly zero).
    void everyFault() {
        KVSCOPE_REQUIRE_DATA(kStories);
        QFETCH(QString, fault);
        const FaultInfo* info = findFault(fault.toStdString());
        QVERIFY(info);
        QVERIFY2(std::any_of(allChecks().begin(), allChecks().end(),
                             [&](const CheckInfo& c) { return c.id == info->check; }),
                 qPrintable("undocumented check " + QString::fromStdString(info->check)));
        const auto cleanKey0 = m_clean.layers[0].key->toVector();
        auto faulty = injectFault(info->name, m_clean, context());
        QVERIFY2(faulty.isOk(), faulty.message().c_str());
        QCOMPARE(m_clean.layers[0].key->toVector(), cleanKey0); // the input is untouched
        const Snapshot& s = faulty.value();
        QCOMPARE(s.lineage.operation, std::string("fault"));
        QCOMPARE(s.lineage.parentId, m_clean.lineage.id);
        QCOMPARE(s.lineage.parameters["fault"].get<std::string>(), info->name);

        const std::string path = tmp((info->name + ".kvsnap").c_str());
        QVERIFY(save(s, path).isOk());
        auto v = verifyFile(path, m_model);
        QVERIFY2(v.report.has(info->check),
                 qPrintable("expected " + QString::fromStdString(info->check) + " in:\n" +
                            ids(v.report)));
        QVERIFY2(v.report.worst() >= Severity::Warning, qPrintable(ids(v.report)));
        // The counts by severity add up to the violations, and the worst one is counted.
        QCOMPARE(v.report.count(Severity::Error) + v.report.count(Severity::Warning) +
                     v.report.count(Severity::Note),
                 int(v.report.violations.size()));
        QVERIFY(v.report.count(v.report.worst()) > 0);
        // Its findings: the warnings and errors, each id once, the fault's check among them.
        const auto found = v.report.findings();
        QVERIFY(std::find(found.begin(), found.end(), info->check) != found.end());
        QCOMPARE(std::set<std::string>(found.begin(), found.end()).size(), found.size());
        for (const auto& id : found)
            QVERIFY(v.report.find(id)->severity != Severity::Note);

        auto clean = restore(m_clean, m_model);
        QVERIFY(clean.isOk());
        auto bad = forcedSession(s, m_model);
        QVERIFY2(bad.isOk(), bad.message().c_str());
        auto d = drift(clean.value().session, bad.value(), 16, kGreedy);
        QVERIFY2(d.isOk(), d.message().c_str());
        const auto& st = d.value().steps;
        QVERIFY(st.size() >= 2);
        qInfo("%s: verify %s; drift KL step0 %.3g, step1 %.3g, max %.3g, first diverging %d",
              info->name.c_str(), info->check.c_str(), st[0].logits.kl, st[1].logits.kl,
              d.value().maxKl, d.value().firstDivergingStep);
        if (info->metadataOnly) {
            QCOMPARE(d.value().maxKl, 0.0);
            QCOMPARE(d.value().firstDivergingStep, -1);
        } else {
            QVERIFY2(st[1].logits.kl > 0 || d.value().firstDivergingStep >= 0,
                     "the fault does not change the continuation");
        }
    }

    // The lab reproduces the per-fault result for every fault in one call.
    void labCatchesEveryFault() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto rows =
            faultLab(m_clean, context(), {.steps = 16, .workDir = tmp("lab"), .faults = {}});
        QVERIFY2(rows.isOk(), rows.message().c_str());
        QCOMPARE(rows.value().size(), allFaults().size());
        for (const auto& r : rows.value()) {
            QVERIFY2(r.error.empty(), r.error.c_str());
            QCOMPARE(r.stage, FaultLabRow::Stage::Measured);
            QVERIFY(r.applied() && !r.engineRaised());
            QVERIFY2(r.caught, qPrintable(QString::fromStdString(r.fault + " not caught")));
            QVERIFY2(r.metadataOnly || r.effect(), r.fault.c_str());
            QCOMPARE(r.steps, 16);
        }
    }

    // A fault that does not apply to a model is "not-injected", never the engine refusing it:
    // wrong-rope-theta on a model with llama3 RoPE scaling (the insights lab leaves such rows
    // out of what the engine flagged, #37 / #76).
    void faultThatDoesNotApplyIsNotInjected() {
        ModelConfig c;
        c.architecture = "llama";
        c.hfArchitecture = "LlamaForCausalLM";
        c.dim = 32;
        c.hiddenDim = 64;
        c.nLayers = 2;
        c.nHeads = 4;
        c.nKvHeads = 2;
        c.headDim = 8;
        c.vocabSize = 64;
        c.maxContext = 64;
        c.ropeTheta = 500000.0;
        c.ropeScaling.type = "llama3";
        c.ropeScaling.factor = 8.0;
        c.ropeScaling.originalMaxPositions = 32;
        c.bosId = 1;
        c.eosId = 2;
        auto model = Model::createRandom(c, 3);
        QVERIFY2(model, model.message().c_str());
        Session s(model.value());
        QVERIFY(s.feed(std::vector<int32_t>{1, 5, 9, 13, 17, 21}).isOk());
        auto clean = capture(s);
        QVERIFY2(clean, clean.message().c_str());
        FaultContext ctx;
        ctx.model = model.value();
        auto rows = faultLab(clean.value(), ctx,
                             {.steps = 4,
                              .workDir = tmp("not-injected"),
                              .faults = {"wrong-rope-theta", "position-offset"}});
        QVERIFY2(rows.isOk(), rows.message().c_str());
        QCOMPARE(rows.value().size(), std::size_t(2));
        for (const auto& r : rows.value()) {
            const auto j = toJson(r);
            if (r.fault == "wrong-rope-theta") {
                QCOMPARE(r.stage, FaultLabRow::Stage::NotInjected);
                QVERIFY(!r.applied() && !r.engineRaised());
                QVERIFY2(r.error.find("rope_scaling") != std::string::npos, r.error.c_str());
                QCOMPARE(j["stage"].get<std::string>(), std::string("not-injected"));
            } else {
                QCOMPARE(r.stage, FaultLabRow::Stage::Measured);
                QCOMPARE(j["stage"].get<std::string>(), std::string("measured"));
            }
        }
    }

    void faultParameters() {
        KVSCOPE_REQUIRE_DATA(kStories);
        FaultContext c = context();
        c.params = {{"mode", "zeros"}, {"layer", "1"}};
        auto zeros = injectFault("corrupt-layer", m_clean, c);
        QVERIFY2(zeros.isOk(), zeros.message().c_str());
        auto k1 = cacheFromSnapshot(zeros.value(), "cpu").value().key(1);
        QVERIFY(std::all_of(k1.data.begin(), k1.data.end(), [](float x) { return x == 0; }));
        QCOMPARE(*zeros.value().layers[0].key, *m_clean.layers[0].key);
        QVERIFY(validate(zeros.value(), m_model.get()).ok()); // only recompute can tell
        const std::string p = tmp("zeros.kvsnap");
        QVERIFY(save(zeros.value(), p).isOk());
        QVERIFY2(verifyFile(p, m_model).report.has("logits.equivalence"), "zeros not caught");

        // Noise in layer 0 is named specifically: layer-0 keys can be recomputed per token.
        c.params = {{"layer", "0"}, {"which", "k"}};
        auto layer0 = injectFault("corrupt-layer", m_clean, c);
        QVERIFY2(layer0.isOk(), layer0.message().c_str());
        const Report r0 = validate(layer0.value(), m_model.get());
        QVERIFY2(r0.has("cache.provenance"), qPrintable(ids(r0)));

        c.params = {{"mode", "sideways"}};
        auto bad = injectFault("corrupt-layer", m_clean, c);
        QVERIFY(!bad.isOk());
        QVERIFY2(QString::fromStdString(bad.message()).contains("mode"), bad.message().c_str());
        c.params = {{"layer", "99"}};
        QVERIFY(!injectFault("corrupt-layer", m_clean, c).isOk());
        c.params = {{"offset", "0"}};
        QVERIFY(!injectFault("position-offset", m_clean, c).isOk());
        c.params = {{"bogus", "1"}};
        auto unknown = injectFault("stale-next-position", m_clean, c);
        QVERIFY(!unknown.isOk());
        QVERIFY(QString::fromStdString(unknown.message()).contains("bogus"));
        c.params.clear();
        auto name = injectFault("no-such-fault", m_clean, c);
        QVERIFY(!name.isOk());
        QVERIFY(QString::fromStdString(name.message()).contains("unknown fault"));
        FaultContext noModel;
        auto needsModel = injectFault("duplicate-bos", m_clean, noModel);
        QVERIFY(!needsModel.isOk());
        QVERIFY(QString::fromStdString(needsModel.message()).contains("--model"));
        // A built-in alternative tokenizer when none is given.
        auto swapped = injectFault("tokenizer-swapped", m_clean, noModel);
        QVERIFY2(swapped.isOk(), swapped.message().c_str());
        QVERIFY(swapped.value().fingerprints.tokenizer != m_clean.fingerprints.tokenizer);
    }

    // cache.precision: f16 and bf16 round trips are named (with the dtype); a clean f32 cache
    // and a cache with a single changed value are not.
    void precisionCheck() {
        KVSCOPE_REQUIRE_DATA(kStories);
        for (const char* via : {"f16", "bf16"}) {
            FaultContext c;
            c.params = {{"via", via}};
            auto r = injectFault("dtype-roundtrip", m_clean, c);
            QVERIFY2(r.isOk(), r.message().c_str());
            const Report rep = validate(r.value(), m_model.get());
            const Violation* v = rep.find("cache.precision");
            QVERIFY2(v, qPrintable(ids(rep)));
            QVERIFY2(QString::fromStdString(v->message).contains(via), v->message.c_str());
        }
        QVERIFY(!validate(m_clean, m_model.get()).has("cache.precision"));
        // f16 round trip of every layer but one value made non-f16 in layer 0: layer 0 passes.
        FaultContext c;
        auto r = injectFault("dtype-roundtrip", m_clean, c);
        Snapshot s = r.value();
        auto key0 = s.layers[0].key->toVector();
        float x;
        std::memcpy(&x, key0.data(), 4);
        x = std::nextafter(x == 0 ? 1.0f : x, 1e30f);
        std::memcpy(key0.data(), &x, 4);
        s.layers[0].key = makeBytes(key0);
        const Violation* v = validate(s, m_model.get()).find("cache.precision");
        QVERIFY(v);
        QVERIFY2(QString::fromStdString(v->message).contains("layer(s) 1"), v->message.c_str());
    }

    // Observer::replace: a read-only observer changes nothing; a replacement with another
    // shape fails the feed and leaves the session as it was.
    void observerIntervention() {
        KVSCOPE_REQUIRE_DATA(kStories);
        struct Watch : Observer {
            int seen = 0;
            bool wants(std::string_view n, int) const override { return n == "resid"; }
            void observe(std::string_view, int, const HostTensor&) override { ++seen; }
        } watch;
        struct Breaker : Observer {
            bool wants(std::string_view n, int l) const override { return n == "resid" && l == 0; }
            void observe(std::string_view, int, const HostTensor&) override {}
            bool replace(std::string_view, int, HostTensor& v) override {
                v.shape[0] += 1;
                v.data.resize(static_cast<std::size_t>(v.numel()));
                return true;
            }
        } breaker;
        const auto prompt = promptOf(*m_model, kStory, 24);
        Session plain(m_model), watched(m_model), broken(m_model);
        watched.setObserver(&watch);
        broken.setObserver(&breaker);
        QVERIFY(plain.feed(prompt).isOk());
        QVERIFY(watched.feed(prompt).isOk());
        QCOMPARE(watch.seen, static_cast<int>(m_model->config().nLayers));
        QCOMPARE(watched.lastLogits(), plain.lastLogits());
        auto st = broken.feed(prompt);
        QVERIFY(!st.isOk());
        QVERIFY2(QString::fromStdString(st.message()).contains("shape"), st.message().c_str());
        QCOMPARE(broken.cache().length(), int64_t(0));
        QVERIFY(broken.tokens().empty());
    }

    void transplantAllPositions() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto recipient = promptOf(*m_model, kStory, 16);
        const auto donor = promptOf(*m_model, kOtherStory, 16);
        for (int layer = 0; layer < m_model->config().nLayers; ++layer) {
            auto r =
                transplant(m_model, recipient, donor,
                           {.layer = layer, .positions = TransplantPositions::All, .steps = 0});
            QVERIFY2(r.isOk(), r.message().c_str());
            qInfo("layer %d all positions: KL vs donor %.3g, vs original %.3g", layer,
                  r.value().vsDonor.kl, r.value().vsOriginal.kl);
            QVERIFY2(r.value().vsDonor.kl < 1e-6,
                     qPrintable(QString::number(r.value().vsDonor.kl)));
            QVERIFY(r.value().donorVsOriginal.kl > 1e-3); // the prompts really differ
            QVERIFY(r.value().persistence.empty());
        }
        auto mismatch = transplant(m_model, recipient, promptOf(*m_model, kOtherStory, 12),
                                   {.layer = 0, .positions = TransplantPositions::All, .steps = 0});
        QVERIFY(!mismatch.isOk());
        QVERIFY(!transplant(m_model, recipient, donor,
                            {.layer = 99, .positions = TransplantPositions::All, .steps = 0})
                     .isOk());
    }

    void transplantLastPositionAndPersistence() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto recipient = promptOf(*m_model, kStory, 16);
        const auto donor = promptOf(*m_model, kOtherStory, 16);
        const int last = static_cast<int>(m_model->config().nLayers) - 1;
        const int K = 6;
        auto r = transplant(m_model, recipient, donor,
                            {.layer = last, .positions = TransplantPositions::Last, .steps = K});
        QVERIFY2(r.isOk(), r.message().c_str());
        QVERIFY2(r.value().vsDonor.kl < 1e-6, qPrintable(QString::number(r.value().vsDonor.kl)));
        // At layer 0 only the last position is the donor's: the rest of the context is not.
        auto early = transplant(m_model, recipient, donor,
                                {.layer = 0, .positions = TransplantPositions::Last, .steps = 0});
        QVERIFY(early.isOk());
        QVERIFY(early.value().vsOriginal.kl > 0);

        const auto& p = r.value().persistence;
        QCOMPARE(p.size(), std::size_t(3));
        const std::set<std::string> names{p[0].intervention, p[1].intervention, p[2].intervention};
        QCOMPARE(names, (std::set<std::string>{"residual-only", "token-only", "residual+kv"}));
        for (const auto& x : p) {
            QVERIFY2(x.skipped.empty(), x.skipped.c_str());
            QCOMPARE(static_cast<int>(x.steps.size()), K);
        }
        QCOMPARE(r.value().donorTokensGenerated.size(), std::size_t(K));
        // residual-only at the last layer: step 0 is the donor's distribution.
        QVERIFY(p[0].steps[0].klDonor < 1e-6);
        // token-only: nothing is patched before the first token, so step 0 is the original's,
        // and the token fed is the donor's.
        QCOMPARE(p[1].steps[0].klOriginal, 0.0);
        QCOMPARE(p[1].steps[0].token, r.value().donorTokensGenerated[0]);
        // residual+kv (all positions at the last layer): step 0 is the donor's too.
        QVERIFY(p[2].steps[0].klDonor < 1e-6);
    }

    void cli() {
        KVSCOPE_REQUIRE_DATA(kStories);
        if (!QFileInfo::exists(cliPath()))
            QFAIL("kvscope-cli is not built");
        const QString model = QString::fromStdString(testdata::path(kStories));
        auto list = ::cli({"fault", "list", "--json"});
        QCOMPARE(list.code, 0);
        const auto faults = list.json()["faults"].toArray();
        QCOMPARE(faults.size(), static_cast<qsizetype>(allFaults().size()));
        for (const auto& f : faults) {
            const auto o = f.toObject();
            QVERIFY(o["name"].isString() && o["description"].isString() && o["check"].isString());
        }

        const QString clean = QString::fromStdString(m_cleanPath);
        const auto before = readFileBytes(m_cleanPath);
        const QString out = m_dir.filePath("cli-stale.kvsnap");
        auto inj = ::cli({"fault", "inject", "stale-next-position", clean, "-o", out, "--json"});
        QVERIFY2(inj.code == 0, inj.err.constData());
        QCOMPARE(inj.json()["check"].toString(), QString("positions.next"));
        auto ver = ::cli({"verify", out, "--model", model, "--json"});
        QCOMPARE(ver.code, 1);
        bool named = false;
        for (const auto& v : ver.json()["violations"].toArray())
            named = named || v.toObject()["id"].toString() == "positions.next";
        QVERIFY2(named, ver.out.constData());

        auto lab = ::cli({"fault", "lab", clean, "--model", model, "--steps", "8", "--json"});
        QVERIFY2(lab.code == 0, lab.err.constData());
        QCOMPARE(lab.json()["faults"].toArray().size(), static_cast<qsizetype>(allFaults().size()));

        auto unknown = ::cli({"fault", "inject", "no-such-fault", clean, "-o", out});
        QCOMPARE(unknown.code, 2);
        QVERIFY(unknown.err.contains("unknown fault"));
        auto param =
            ::cli({"fault", "inject", "corrupt-layer", clean, "-o", out, "--param", "colour=red"});
        QCOMPARE(param.code, 2);
        auto self = ::cli({"fault", "inject", "corrupt-layer", clean, "-o", clean});
        QCOMPARE(self.code, 2);
        QCOMPARE(readFileBytes(m_cleanPath), before); // the input is never overwritten

        auto tp = ::cli({"transplant", "--model", model, "--recipient-snapshot", clean,
                         "--donor-snapshot", clean, "--layer", "2", "--steps", "3", "--json"});
        QVERIFY2(tp.code == 0, tp.err.constData());
        QCOMPARE(tp.json()["persistence"].toArray().size(), 3);
        QVERIFY(tp.json()["kl_vs_donor"].toDouble() < 1e-6);
        auto badLayer = ::cli(
            {"transplant", "--model", model, "--recipient", "a", "--donor", "b", "--layer", "42"});
        QCOMPARE(badLayer.code, 2);
    }
};

QTEST_GUILESS_MAIN(TestFaults)
#include "tst_faults.moc"
