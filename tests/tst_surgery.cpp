// State surgery on real weights (stories260K): truncate, fork, patch, splice, diff and the
// lineage tree — each checked against an independent computation (a fresh generation, the
// original continued, the donor's own logits, a recompute of the spliced text) — plus every
// surgery command end to end through kvscope-cli (exit codes, JSON shape, bad input).
#include "engine/model.h"
#include "formats/safetensorswriter.h"
#include "engine/session.h"
#include "state/diff.h"
#include "state/lineagetree.h"
#include "state/restore.h"
#include "state/snapshotio.h"
#include "state/surgery.h"
#include "state/verifyfile.h"
#include "testdata.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

using namespace kvscope;
using namespace kvscope::state;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";
const char* kCli = KVSCOPE_CLI;

Snapshot captureOrDie(const Session& s, const Sampler* sampler,
                      const std::vector<int32_t>& prompt) {
    CaptureOptions co;
    co.sampler = sampler;
    co.prompt = plainPromptMeta(prompt, s.model()->config().bosId);
    auto snap = capture(s, co);
    if (!snap)
        qFatal("%s", snap.message().c_str());
    return snap.value();
}

// prompt + `steps` tokens generated with `settings`, captured with the sampler.
Snapshot generated(const std::shared_ptr<const Model>& model, const std::string& text, int steps,
                   SamplerSettings settings = {0.0f, 0.9f, 0, 42}) {
    Session s(model);
    const auto prompt = model->tokenizer()->encode(text);
    if (!s.feed(prompt))
        qFatal("feed failed");
    Sampler sampler(settings);
    auto r = s.generate(steps, sampler);
    if (!r)
        qFatal("%s", r.message().c_str());
    return captureOrDie(s, &sampler, prompt);
}

// Exactly these tokens fed (one prefill), captured.
Snapshot fed(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
    Session s(model);
    if (!s.feed(tokens))
        qFatal("feed failed");
    Sampler greedy(SamplerSettings{0.0f});
    return captureOrDie(s, &greedy, tokens);
}

// Restores and continues `steps` tokens with the snapshot's own sampler.
std::vector<int32_t> continued(const Snapshot& s, const std::shared_ptr<const Model>& model,
                               int steps) {
    auto r = restore(s, model);
    if (!r)
        qFatal("restore: %s", r.message().c_str());
    auto g = r.value().session.generate(steps, r.value().sampler);
    if (!g)
        qFatal("generate: %s", g.message().c_str());
    return g.value().tokens;
}

bool sameCache(const Snapshot& a, const Snapshot& b) {
    if (a.layers.size() != b.layers.size())
        return false;
    for (std::size_t l = 0; l < a.layers.size(); ++l)
        if (*a.layers[l].key != *b.layers[l].key || *a.layers[l].value != *b.layers[l].value)
            return false;
    return true;
}

double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size())
        return INFINITY;
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    return d;
}

// Largest |x| of an f32 K/V buffer.
double maxAbsF32(const std::vector<uint8_t>& bytes) {
    double m = 0;
    for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        float f;
        std::memcpy(&f, bytes.data() + i, 4);
        m = std::max(m, std::fabs(double(f)));
    }
    return m;
}

// A tiny random GPT-2 (learned absolute positions) as a Hugging Face folder.
std::shared_ptr<const Model> randomGpt2(const QString& folder) {
    const int64_t C = 32, L = 2, V = 50, P = 64;
    const nlohmann::json cfg = {{"architectures", {"GPT2LMHeadModel"}},
                                {"n_embd", C},
                                {"n_layer", L},
                                {"n_head", 4},
                                {"n_positions", P},
                                {"vocab_size", V},
                                {"n_inner", nullptr},
                                {"layer_norm_epsilon", 1e-5},
                                {"activation_function", "gelu_new"}};
    std::vector<std::pair<std::string, std::vector<int64_t>>> t = {
        {"transformer.wte.weight", {V, C}},
        {"transformer.wpe.weight", {P, C}},
        {"transformer.ln_f.weight", {C}},
        {"transformer.ln_f.bias", {C}}};
    for (int l = 0; l < L; ++l)
        for (auto [n, s] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
                 {"ln_1.weight", {C}},
                 {"ln_1.bias", {C}},
                 {"ln_2.weight", {C}},
                 {"ln_2.bias", {C}},
                 {"attn.c_attn.weight", {C, 3 * C}},
                 {"attn.c_attn.bias", {3 * C}},
                 {"attn.c_proj.weight", {C, C}},
                 {"attn.c_proj.bias", {C}},
                 {"mlp.c_fc.weight", {C, 4 * C}},
                 {"mlp.c_fc.bias", {4 * C}},
                 {"mlp.c_proj.weight", {4 * C, C}},
                 {"mlp.c_proj.bias", {C}}})
            t.push_back({"transformer.h." + std::to_string(l) + "." + n, s});
    QDir().mkpath(folder);
    safetensors::Writer w;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    for (const auto& [name, shape] : t) {
        int64_t n = 1;
        for (int64_t d : shape)
            n *= d;
        std::vector<float> v(static_cast<std::size_t>(n));
        for (float& x : v)
            x = name.find("ln_") != std::string::npos && name.ends_with(".weight") ? 1.0f
                                                                                   : normal(rng);
        w.addTensor(name, shape, v);
    }
    if (!w.write((folder + "/model.safetensors").toStdString()))
        qFatal("cannot write safetensors");
    const std::string text = cfg.dump(2);
    writeFileAtomic((folder + "/config.json").toStdString(), text.data(), text.size());
    auto m = Model::load(folder.toStdString());
    if (!m)
        qFatal("%s", m.message().c_str());
    return m.value();
}

std::vector<int32_t> someIds(int n, int salt, int vocab) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i)
        ids.push_back(int32_t((i * 7 + salt) % vocab));
    return ids;
}

PatchOptions po(int layer, int head = -1, int64_t begin = -1, int64_t end = -1) {
    PatchOptions o;
    o.layer = layer;
    o.head = head;
    o.begin = begin;
    o.end = end;
    return o;
}

struct Run {
    int code = -1;
    QByteArray out, err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

Run cli(const QStringList& args) {
    QProcess p;
    p.start(kCli, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString ids(const Report& r) {
    QStringList l;
    for (const auto& v : r.violations)
        l << QString::fromStdString(v.id + ": " + v.message);
    return l.join("; ");
}

} // namespace

class TestSurgery : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_model;
    Snapshot m_a; // "Once upon a time" + 20 greedy tokens
    Snapshot m_b; // other text, same length as m_a
    std::string tmp(const QString& name) const { return m_dir.filePath(name).toStdString(); }
    QString qtmp(const QString& name) const { return m_dir.filePath(name); }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        if (!testdata::exists(kStories) || !testdata::exists(kStoriesTok))
            return;
        LoadOptions o;
        o.tokenizerPath = testdata::path(kStoriesTok);
        auto m = Model::load(testdata::path(kStories), o);
        QVERIFY2(m.isOk(), m.message().c_str());
        m_model = m.value();
        m_a = generated(m_model, "Once upon a time", 20);
        auto other = m_model->tokenizer()->encode(
            "Tom and his sister went to the park. They saw a big dog and a little cat. The dog "
            "was happy and ran around the tree.");
        QVERIFY(other.size() >= m_a.tokens.size());
        other.resize(m_a.tokens.size());
        m_b = fed(m_model, other);
        QCOMPARE(m_b.cacheLength, m_a.cacheLength);
    }

    // ---- truncate

    void truncateThenContinue_data() {
        QTest::addColumn<int>("at");
        for (int n : {1, 2, 5, 12, 24, 25})
            QTest::newRow(qPrintable(QString("at %1").arg(n))) << n;
    }
    void truncateThenContinue() {
        KVSCOPE_REQUIRE_DATA(kStories);
        QFETCH(int, at);
        const auto n = static_cast<int>(m_a.tokens.size());
        if (at > n)
            QSKIP("state shorter than the row");
        auto t = state::truncate(m_a, at, m_model);
        QVERIFY2(t.isOk(), t.message().c_str());
        const Snapshot& s = t.value().snapshot;
        QCOMPARE(s.tokens.size(), std::size_t(at));
        QCOMPARE(s.cacheLength, int64_t(at));
        QCOMPARE(s.nextPosition, int64_t(at));
        QCOMPARE(s.lineage.operation, std::string("truncate"));
        QCOMPARE(s.lineage.parentId, m_a.lineage.id);
        QCOMPARE(s.lineage.parameters["at"].get<int>(), at);
        QCOMPARE(t.value().report.droppedTokens.size(), std::size_t(n - at));
        QVERIFY(s.prompt.promptTokens <= at);
        for (const auto& seg : s.prompt.segments)
            QVERIFY(seg.end <= at);
        const Report rep = validate(s, m_model.get());
        QVERIFY2(rep.ok(), qPrintable(ids(rep)));

        // Reference: generate from the first `at` tokens in a fresh session.
        Session fresh(m_model);
        QVERIFY(fresh.feed(std::vector<int32_t>(m_a.tokens.begin(), m_a.tokens.begin() + at)));
        const double dl = maxAbsDiff(s.lastLogits, fresh.lastLogits());
        qInfo("at %d: recomputed logits vs prefill max |d| %g", at, dl);
        QVERIFY(dl < 1e-4);
        Sampler greedy(SamplerSettings{0.0f});
        auto ref = fresh.generate(12, greedy);
        QVERIFY(ref.isOk());
        QCOMPARE(continued(s, m_model, 12), ref.value().tokens);
        // The cache is byte-for-byte the original's first `at` positions (truncate drops, it
        // does not recompute), so a diff reports zero deltas over them.
        const DiffReport d = diff(m_a, s);
        QCOMPARE(d.maxAbs, 0.0);
    }

    void truncateRejects() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto n = static_cast<int64_t>(m_a.tokens.size());
        for (int64_t bad : {int64_t(0), int64_t(-3), n + 1}) {
            auto t = state::truncate(m_a, bad, m_model);
            QVERIFY(!t.isOk());
            QVERIFY2(t.message().find("at = ") != std::string::npos, t.message().c_str());
        }
        QVERIFY(!state::truncate(m_a, 3, nullptr).isOk());
    }

    // ---- fork

    void forkGreedyEqualsOriginal() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto original = continued(m_a, m_model, 15);
        ForkOptions o;
        o.branches = 3;
        o.temperature = 0.0f;
        auto f = state::fork(m_a, o, m_model);
        QVERIFY2(f.isOk(), f.message().c_str());
        QCOMPARE(f.value().branches.size(), std::size_t(3));
        for (const auto& b : f.value().branches) {
            QCOMPARE(b.snapshot.lineage.operation, std::string("fork"));
            QCOMPARE(b.snapshot.lineage.parentId, m_a.lineage.id);
            QVERIFY(b.snapshot.lineage.id != m_a.lineage.id);
            // Storage is shared with the source, not copied.
            QCOMPARE(b.snapshot.layers[0].key.get(), m_a.layers[0].key.get());
            QCOMPARE(continued(b.snapshot, m_model, 15), original);
        }
        // Continued inside fork (steps > 0): the same tokens again.
        o.steps = 15;
        auto g = state::fork(m_a, o, m_model);
        QVERIFY2(g.isOk(), g.message().c_str());
        for (const auto& b : g.value().branches) {
            QCOMPARE(b.generated, original);
            QCOMPARE(b.snapshot.tokens.size(), m_a.tokens.size() + 15);
            QCOMPARE(b.snapshot.lineage.parameters["steps"].get<int>(), 15);
        }
    }

    void forkSeedsDifferAndReproduce() {
        KVSCOPE_REQUIRE_DATA(kStories);
        ForkOptions o;
        o.branches = 3;
        o.temperature = 1.0f;
        o.seedBase = 1000;
        auto f = state::fork(m_a, o, m_model);
        QVERIFY2(f.isOk(), f.message().c_str());
        std::vector<std::vector<int32_t>> runs;
        for (std::size_t i = 0; i < 3; ++i) {
            const auto& b = f.value().branches[i];
            QCOMPARE(b.seed, uint64_t(1000 + i));
            QCOMPARE(b.snapshot.lineage.parameters["seed"].get<uint64_t>(), uint64_t(1000 + i));
            QCOMPARE(b.snapshot.rngState,
                     Sampler(SamplerSettings{1.0f, 0.9f, 0, 1000 + i}).rngState());
            const std::string path = tmp(QString("seedfork%1.kvsnap").arg(i));
            QVERIFY(save(b.snapshot, path).isOk());
            auto l1 = load(path), l2 = load(path);
            QVERIFY(l1.isOk() && l2.isOk());
            const auto r1 = continued(l1.value(), m_model, 20);
            const auto r2 = continued(l2.value(), m_model, 20);
            QCOMPARE(r1, r2);
            QCOMPARE(r1, continued(b.snapshot, m_model, 20));
            runs.push_back(r1);
        }
        QVERIFY(runs[0] != runs[1] || runs[1] != runs[2]);
        QVERIFY(runs[0] != runs[1] && runs[0] != runs[2] && runs[1] != runs[2]);
        // fork --steps gives each branch exactly what its saved fork would have generated.
        o.steps = 20;
        auto g = state::fork(m_a, o, m_model);
        QVERIFY2(g.isOk(), g.message().c_str());
        for (std::size_t i = 0; i < 3; ++i)
            QCOMPARE(g.value().branches[i].generated, runs[i]);
        // Forking is refused for absurd input.
        o.branches = 0;
        QVERIFY(!state::fork(m_a, o, m_model).isOk());
        o.branches = 2;
        o.steps = 3;
        QVERIFY(!state::fork(m_a, o, nullptr).isOk());
    }

    // ---- patch

    void patchIdenticalChangesNothing() {
        KVSCOPE_REQUIRE_DATA(kStories);
        for (int layer = 0; layer < int(m_a.layers.size()); ++layer) {
            auto p = state::patch(m_a, m_a, po(layer));
            QVERIFY2(p.isOk(), p.message().c_str());
            QVERIFY(sameCache(p.value().snapshot, m_a));
            QCOMPARE(p.value().report.keyElementsChanged, int64_t(0));
            QCOMPARE(p.value().report.valueElementsChanged, int64_t(0));
            QCOMPARE(p.value().snapshot.lastLogits, m_a.lastLogits);
            QCOMPARE(p.value().snapshot.lineage.parameters["logits"].get<std::string>(),
                     std::string("stale"));
        }
        auto p = state::patch(m_a, m_a, po(2), m_model);
        QVERIFY2(p.isOk(), p.message().c_str());
        QVERIFY(sameCache(p.value().snapshot, m_a));
        qInfo("identical patch, recomputed logits vs stored: max |d| %g",
              maxAbsDiff(p.value().snapshot.lastLogits, m_a.lastLogits));
        QVERIFY(maxAbsDiff(p.value().snapshot.lastLogits, m_a.lastLogits) < 1e-4);
    }

    void patchFromOtherPrompt() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto p = state::patch(m_a, m_b, po(1), m_model);
        QVERIFY2(p.isOk(), p.message().c_str());
        const auto& rep = p.value().report;
        QVERIFY(rep.keyElementsChanged > 0 && rep.valueElementsChanged > 0);
        QVERIFY(rep.logitChange.has_value());
        qInfo("patch layer 1 from another prompt: logits max |d| %g, KL %g",
              rep.logitChange->maxAbs, rep.logitChange->kl);
        QVERIFY(rep.logitChange->maxAbs > 1e-3);
        // Only layer 1 changed.
        for (std::size_t l = 0; l < m_a.layers.size(); ++l)
            if (l != 1)
                QCOMPARE(p.value().snapshot.layers[l].key.get(), m_a.layers[l].key.get());
        QCOMPARE(p.value().snapshot.lineage.parameters["source_id"].get<std::string>(),
                 m_b.lineage.id);

        // One head over a range: exactly those rows change.
        auto h = state::patch(m_a, m_b, po(0, 1, 2, 5));
        QVERIFY2(h.isOk(), h.message().c_str());
        const auto& pk = *h.value().snapshot.layers[0].key;
        const auto& ak = *m_a.layers[0].key;
        const auto& bk = *m_b.layers[0].key;
        const std::size_t row = std::size_t(m_a.headDim) * 4, n = std::size_t(m_a.cacheLength);
        for (std::size_t hd = 0; hd < std::size_t(m_a.kvHeads); ++hd)
            for (std::size_t pos = 0; pos < n; ++pos) {
                const std::size_t off = (hd * n + pos) * row;
                const bool inside = hd == 1 && pos >= 2 && pos < 5;
                QVERIFY(std::memcmp(pk.data() + off, (inside ? bk : ak).data() + off, row) == 0);
            }
    }

    void patchEveryLayerMatchesDonor() {
        KVSCOPE_REQUIRE_DATA(kStories);
        Snapshot s = m_a;
        for (int l = 0; l < int(m_a.layers.size()); ++l) {
            auto p = state::patch(s, m_b, po(l), m_model);
            QVERIFY2(p.isOk(), p.message().c_str());
            s = p.value().snapshot;
        }
        // Layer 0 now holds B's keys under A's tokens, which validation may flag
        // (cache.provenance) and restore refuse; force it — the point is to run that cache.
        auto ra = restore(s, m_model, {.force = true, .validate = {}});
        auto rb = restore(m_b, m_model);
        QVERIFY2(ra.isOk(), ra.message().c_str());
        QVERIFY2(rb.isOk(), rb.message().c_str());
        const int32_t next[1] = {m_b.tokens[3]};
        QVERIFY(ra.value().session.feed(next));
        QVERIFY(rb.value().session.feed(next));
        const double d =
            maxAbsDiff(ra.value().session.lastLogits(), rb.value().session.lastLogits());
        qInfo("every layer patched from B, next-token logits vs B: max |d| %g", d);
        QVERIFY(d <= 1e-5);
    }

    void patchStaleLogitsAreFlagged() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto p = state::patch(m_a, m_b, po(3));
        QVERIFY2(p.isOk(), p.message().c_str());
        QVERIFY(!p.value().report.logitsRecomputed);
        const std::string path = tmp("stale.kvsnap");
        QVERIFY(save(p.value().snapshot, path).isOk());
        const auto v = verifyFile(path, m_model);
        QVERIFY2(v.report.has("logits.equivalence"), qPrintable(ids(v.report)));
        // With the model the logits are recomputed and verify accepts them.
        auto q = state::patch(m_a, m_b, po(3), m_model);
        QVERIFY(q.isOk());
        const std::string path2 = tmp("fresh.kvsnap");
        QVERIFY(save(q.value().snapshot, path2).isOk());
        const auto w = verifyFile(path2, m_model);
        QVERIFY2(w.report.ok() && !w.report.has("logits.equivalence"), qPrintable(ids(w.report)));
    }

    void patchRejects() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto e = state::patch(m_a, m_b, po(99));
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("layer") != std::string::npos, e.message().c_str());
        e = state::patch(m_a, m_b, po(0, 17));
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("head") != std::string::npos, e.message().c_str());
        auto shorter = state::truncate(m_b, 10, m_model);
        QVERIFY(shorter.isOk());
        e = state::patch(m_a, shorter.value().snapshot, po(0));
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("positions") != std::string::npos, e.message().c_str());
        e = state::patch(m_a, shorter.value().snapshot, po(0, -1, 5, 12));
        QVERIFY(!e.isOk());
        // A range both cover is fine.
        QVERIFY(state::patch(m_a, shorter.value().snapshot, po(0, -1, 5, 10)).isOk());
        Snapshot other = m_b;
        other.headDim = m_b.headDim / 2;
        e = state::patch(m_a, other, po(0));
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("head_dim") != std::string::npos, e.message().c_str());
    }

    // ---- splice

    void spliceAtSamePositionsIsIdentity() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const int64_t n = m_a.cacheLength;
        for (int64_t p : {int64_t(1), int64_t(8), n - 1}) {
            auto t = state::truncate(m_a, p, m_model);
            QVERIFY(t.isOk());
            auto s =
                state::splice(t.value().snapshot, m_a, {.begin = p, .end = n, .at = p}, m_model);
            QVERIFY2(s.isOk(), s.message().c_str());
            const Snapshot& r = s.value().snapshot;
            QCOMPARE(s.value().report.rerotatedFragmentKeys, int64_t(0));
            QCOMPARE(r.tokens, m_a.tokens);
            QCOMPARE(r.positions, m_a.positions);
            QCOMPARE(r.mask, m_a.mask);
            QCOMPARE(r.nextPosition, m_a.nextPosition);
            QVERIFY(sameCache(r, m_a));
            const double dl = maxAbsDiff(r.lastLogits, m_a.lastLogits);
            qInfo("splice back at %lld: logits vs original max |d| %g", (long long)p, dl);
            QVERIFY(dl < 1e-4);
            QVERIFY2(s.value().report.validation.ok(),
                     qPrintable(ids(s.value().report.validation)));
        }
    }

    void spliceShifted_data() {
        QTest::addColumn<QString>("source");
        QTest::addColumn<int>("begin");
        QTest::addColumn<int>("end");
        QTest::addColumn<int>("at");
        const int n = 25;
        QTest::newRow("same text appended") << "a" << n - 6 << n - 1 << n;
        QTest::newRow("other prompt into the middle") << "b" << 1 << 6 << 3;
        QTest::newRow("other prompt at the front") << "b" << 0 << 4 << 0;
    }
    void spliceShifted() {
        KVSCOPE_REQUIRE_DATA(kStories);
        QFETCH(QString, source);
        QFETCH(int, begin);
        QFETCH(int, end);
        QFETCH(int, at);
        const Snapshot& src = source == "a" ? m_a : m_b;
        if (end > src.cacheLength || at > m_a.cacheLength)
            QSKIP("state shorter than the row");
        auto s = state::splice(m_a, src, {.begin = begin, .end = end, .at = at}, m_model);
        QVERIFY2(s.isOk(), s.message().c_str());
        const auto& rep = s.value().report;
        const Snapshot& r = s.value().snapshot;
        const int len = end - begin;
        QCOMPARE(r.cacheLength, m_a.cacheLength + len);
        QCOMPARE(rep.inserted, int64_t(len));
        for (int i = 0; i < int(r.positions.size()); ++i)
            QCOMPARE(r.positions[std::size_t(i)], int64_t(i));
        QCOMPARE(r.nextPosition, m_a.nextPosition + len);
        for (int k = 0; k < len; ++k)
            QCOMPARE(r.tokens[std::size_t(at + k)], src.tokens[std::size_t(begin + k)]);
        QVERIFY2(rep.validation.ok(), qPrintable(ids(rep.validation)));
        QVERIFY(validate(r, m_model.get()).ok());
        QVERIFY(rep.rerotatedFragmentKeys > 0 || rep.rerotatedTailKeys > 0);
        QVERIFY(rep.drift.mismatch.empty());
        for (const auto& d : rep.drift.layers) {
            qInfo("  layer %d: max|dK| %.3g max|dV| %.3g cosK %.6f cosV %.6f", d.layer, d.keyMaxAbs,
                  d.valueMaxAbs, d.keyCosine, d.valueCosine);
            QVERIFY(std::isfinite(d.keyMaxAbs) && std::isfinite(d.valueMaxAbs));
        }
        qInfo("%s: next-step logits KL %.3g max|d| %.3g top1 %s", QTest::currentDataTag(),
              rep.logitDrift.kl, rep.logitDrift.maxAbs,
              rep.logitDrift.top1Agree ? "agrees" : "differs");
        QVERIFY(std::isfinite(rep.logitDrift.kl));
        // Layer 0's keys depend only on the token and its position: after re-rotation they
        // must equal the recompute's (the position arithmetic is right), and layer 0's values
        // do not depend on position at all.
        QVERIFY2(rep.drift.layers[0].keyMaxAbs < 1e-4, "layer 0 keys not re-rotated correctly");
        QVERIFY(rep.drift.layers[0].valueMaxAbs < 1e-5);
        // And they are not the source's bytes: the moved keys were really rotated.
        if (rep.fragmentShift != 0) {
            const auto& key0 = *r.layers[0].key;
            const auto& src0 = *src.layers[0].key;
            const std::size_t row = std::size_t(r.headDim) * 4;
            QVERIFY(std::memcmp(key0.data() + std::size_t(at) * row,
                                src0.data() + std::size_t(begin) * row, row) != 0);
        }
    }

    // Re-rotation uses the model's own (scaled) frequencies: on a random Llama with llama3
    // rope_scaling and a large theta, a shifted splice's layer-0 keys match a recompute.
    void spliceWithScaledRope() {
        ModelConfig c;
        c.architecture = "llama";
        c.dim = 32;
        c.hiddenDim = 64;
        c.nLayers = 2;
        c.nHeads = 4;
        c.nKvHeads = 2;
        c.headDim = 8;
        c.vocabSize = 50;
        c.maxContext = 256;
        c.ropeTheta = 500000.0;
        c.ropeScaling.type = "llama3";
        c.ropeScaling.factor = 8.0;
        c.ropeScaling.lowFreqFactor = 1.0;
        c.ropeScaling.highFreqFactor = 4.0;
        c.ropeScaling.originalMaxPositions = 16;
        auto made = Model::createRandom(c, 11);
        QVERIFY2(made.isOk(), made.message().c_str());
        const auto model = made.value();
        const Snapshot a = fed(model, someIds(40, 3, 50)), b = fed(model, someIds(30, 5, 50));
        for (auto [begin, end, at] : {std::tuple{2, 12, 30}, std::tuple{20, 28, 1}}) {
            auto s = state::splice(a, b, {.begin = begin, .end = end, .at = at}, model);
            QVERIFY2(s.isOk(), s.message().c_str());
            const auto& rep = s.value().report;
            const double scale = maxAbsF32(*s.value().snapshot.layers[0].key);
            qInfo("scaled rope, splice %d:%d at %d: layer-0 max|dK| %.3g (keys up to %.3g), "
                  "shift %lld",
                  begin, end, at, rep.drift.layers[0].keyMaxAbs, scale,
                  (long long)rep.fragmentShift);
            QVERIFY(scale > 0);
            QVERIFY(rep.drift.layers[0].keyMaxAbs < 1e-5 * std::max(1.0, scale));
            QVERIFY2(rep.validation.ok(), qPrintable(ids(rep.validation)));
        }
    }

    // GPT-2 has learned absolute positions: a splice that moves keys is refused with a clear
    // message; one that keeps every position works.
    void spliceRefusesLearnedPositions() {
        const auto model = randomGpt2(qtmp("gpt2"));
        const Snapshot a = fed(model, someIds(20, 1, 50)), b = fed(model, someIds(20, 2, 50));
        auto e = state::splice(a, b, {.begin = 2, .end = 5, .at = 4}, model);
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("learned absolute positions") != std::string::npos,
                 e.message().c_str());
        auto t = state::truncate(a, 12, model);
        QVERIFY2(t.isOk(), t.message().c_str());
        auto s = state::splice(t.value().snapshot, b, {.begin = 12, .end = 20, .at = 12}, model);
        QVERIFY2(s.isOk(), s.message().c_str());
        QCOMPARE(s.value().report.rerotatedFragmentKeys, int64_t(0));
        QVERIFY(s.value().report.validation.ok());
    }

    void spliceRejects() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const int64_t n = m_a.cacheLength;
        QVERIFY(!state::splice(m_a, m_b, {.begin = 3, .end = 3, .at = 0}, m_model).isOk());
        QVERIFY(!state::splice(m_a, m_b, {.begin = 0, .end = n + 1, .at = 0}, m_model).isOk());
        auto e = state::splice(m_a, m_b, {.begin = 0, .end = 2, .at = n + 1}, m_model);
        QVERIFY(!e.isOk());
        QVERIFY2(e.message().find("at = ") != std::string::npos, e.message().c_str());
        QVERIFY(!state::splice(m_a, m_b, {.begin = 0, .end = 2, .at = 0}, nullptr).isOk());
    }

    // ---- diff

    void diffSelfAndTruncated() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const DiffReport self = diff(m_a, m_a);
        QVERIFY(self.identicalState());
        QCOMPARE(self.firstDivergence, int64_t(-1));
        QCOMPARE(self.commonPrefix, m_a.cacheLength);
        QCOMPARE(self.maxAbs, 0.0);
        QVERIFY(self.fields.empty());
        for (const auto& l : self.layers) {
            QCOMPARE(l.key.maxAbs, 0.0);
            QCOMPARE(l.value.relL2, 0.0);
            QVERIFY(std::fabs(l.key.cosine - 1.0) < 1e-12);
            QCOMPARE(l.heads.size(), std::size_t(m_a.kvHeads));
        }
        auto t = state::truncate(m_a, 10, m_model);
        QVERIFY(t.isOk());
        const DiffReport d = diff(m_a, t.value().snapshot);
        QCOMPARE(d.commonPrefix, int64_t(10));
        QCOMPARE(d.firstDivergence, int64_t(10));
        QCOMPARE(d.tokenA, m_a.tokens[10]);
        QCOMPARE(d.tokenB, -1);
        QCOMPARE(d.comparedPositions, int64_t(10));
        QCOMPARE(d.maxAbs, 0.0);
        QVERIFY(!d.identicalState());
        bool sawCount = false, sawOp = false;
        for (const auto& f : d.fields) {
            sawCount |= f.field == "tokens.count";
            sawOp |= f.field == "lineage.operation";
        }
        QVERIFY(sawCount && sawOp);
        const auto j = d.toJson();
        QCOMPARE(j["tokens"]["first_divergence"].get<int64_t>(), int64_t(10));
    }

    void diffOtherStateAndShapes() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const DiffReport d = diff(m_a, m_b);
        QVERIFY(d.firstDivergence >= 0 && d.firstDivergence < m_a.cacheLength);
        QVERIFY(d.maxAbs > 0);
        QVERIFY(d.layers.back().key.relL2 > 0 && d.layers.back().key.cosine < 1);
        // Different shapes are reported, not a crash.
        Snapshot odd = m_b;
        odd.kvHeads = 1;
        const DiffReport e = diff(m_a, odd);
        QVERIFY(!e.cacheMismatch.empty());
        QVERIFY(e.layers.empty());
        Snapshot broken = m_b;
        broken.layers[2].value = makeBytes({1, 2, 3});
        const DiffReport f = diff(m_a, broken);
        QVERIFY2(f.cacheMismatch.find("layers.2.v") != std::string::npos, f.cacheMismatch.c_str());
    }

    // ---- tree

    void treeFromFolder() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const QString dir = qtmp("tree");
        QVERIFY(QDir().mkpath(dir));
        const std::string d = dir.toStdString();
        QVERIFY(save(m_a, d + "/root.kvsnap").isOk());
        ForkOptions o;
        o.branches = 2;
        auto f = state::fork(m_a, o);
        QVERIFY(f.isOk());
        QVERIFY(save(f.value().branches[0].snapshot, d + "/f0.kvsnap").isOk());
        QVERIFY(save(f.value().branches[1].snapshot, d + "/f1.kvsnap").isOk());
        auto t = state::truncate(f.value().branches[0].snapshot, 7, m_model);
        QVERIFY(t.isOk());
        QVERIFY(save(t.value().snapshot, d + "/t.kvsnap").isOk());
        QFile junk(dir + "/junk.kvsnap");
        QVERIFY(junk.open(QIODevice::WriteOnly));
        junk.write("not a snapshot");
        junk.close();

        auto tree = scanLineageTree(d);
        QVERIFY2(tree.isOk(), tree.message().c_str());
        auto j = tree.value().toJson();
        qInfo("%s", tree.value().toText().c_str());
        QCOMPARE(j["roots"].size(), std::size_t(1));
        const auto& root = j["roots"][0];
        QCOMPARE(root["file"].get<std::string>(), std::string("root.kvsnap"));
        QCOMPARE(root["operation"].get<std::string>(), std::string("capture"));
        QCOMPARE(root["children"].size(), std::size_t(2));
        const auto& f0 = root["children"][0];
        QCOMPARE(f0["file"].get<std::string>(), std::string("f0.kvsnap"));
        QCOMPARE(f0["operation"].get<std::string>(), std::string("fork"));
        QCOMPARE(f0["parameters"]["branch"].get<int>(), 0);
        QCOMPARE(f0["children"].size(), std::size_t(1));
        QCOMPARE(f0["children"][0]["operation"].get<std::string>(), std::string("truncate"));
        QCOMPARE(f0["children"][0]["tokens"].get<int>(), 7);
        QCOMPARE(root["children"][1]["children"].size(), std::size_t(0));
        QCOMPARE(j["problems"].size(), std::size_t(1)); // junk.kvsnap

        // Missing parent: the forks become roots marked as such.
        QVERIFY(QFile::remove(dir + "/root.kvsnap"));
        auto orphan = scanLineageTree(d);
        QVERIFY(orphan.isOk());
        auto k = orphan.value().toJson();
        QCOMPARE(k["roots"].size(), std::size_t(2));
        for (const auto& r : k["roots"])
            QVERIFY(r.value("parent_missing", false));
        QVERIFY(orphan.value().toText().find("parent not here") != std::string::npos);

        // Duplicate id: reported, the later file is a root of its own.
        QVERIFY(QFile::copy(dir + "/t.kvsnap", dir + "/t2.kvsnap"));
        auto dup = scanLineageTree(d);
        QVERIFY(dup.isOk());
        bool reported = false;
        for (const auto& p : dup.value().problems)
            reported |= p.find("duplicate id") != std::string::npos;
        QVERIFY(reported);
        QCOMPARE(dup.value().toJson()["roots"].size(), std::size_t(3));
    }

    void treeCycles() {
        std::vector<TreeNode> nodes(4);
        const char* names[] = {"a", "b", "c", "d"};
        const char* parents[] = {"c", "a", "b", "a"}; // a -> b -> c -> a, d under a
        for (int i = 0; i < 4; ++i) {
            nodes[std::size_t(i)].id = names[i];
            nodes[std::size_t(i)].parentId = parents[i];
            nodes[std::size_t(i)].file = std::string(names[i]) + ".kvsnap";
        }
        const LineageTree t = buildLineageTree(nodes);
        QCOMPARE(t.roots.size(), std::size_t(1));
        QVERIFY(t.nodes[t.roots[0]].inCycle);
        QCOMPARE(t.problems.size(), std::size_t(1));
        QVERIFY(t.problems[0].find("cycle") != std::string::npos);
        // Every node appears exactly once in the JSON tree.
        std::function<int(const nlohmann::json&)> count = [&](const nlohmann::json& n) {
            int c = 1;
            for (const auto& k : n["children"])
                c += count(k);
            return c;
        };
        QCOMPARE(count(t.toJson()["roots"][0]), 4);
    }

    // ---- CLI end to end

    void cliCommands() {
        KVSCOPE_REQUIRE_DATA(kStories);
        if (!QFileInfo::exists(kCli))
            QSKIP("kvscope-cli not built");
        const QString model = QString::fromStdString(testdata::path(kStories));
        const QString a = qtmp("cli-a.kvsnap"), b = qtmp("cli-b.kvsnap");
        QVERIFY(save(m_a, a.toStdString()).isOk());
        QVERIFY(save(m_b, b.toStdString()).isOk());

        // truncate
        auto r =
            cli({"truncate", a, "--at", "10", "-m", model, "-o", qtmp("cli-t.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["report"].toObject()["at"].toInt(), 10);
        QCOMPARE(r.json()["report"].toObject()["dropped_count"].toInt(),
                 int(m_a.tokens.size()) - 10);
        QVERIFY(!r.json()["report"].toObject()["dropped_text"].toString().isEmpty());
        // Bad --at: exit 1, the field named, an existing output untouched.
        const QString keep = qtmp("keep.kvsnap");
        {
            QFile f(keep);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("precious");
        }
        for (const QString bad : {"0", "1000"}) {
            r = cli({"truncate", a, "--at", bad, "-m", model, "-o", keep});
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.contains("at = "), r.err.constData());
        }
        // fork (no model), then tree over the folder
        const QString forks = qtmp("cli-forks");
        r = cli({"fork", a, "-n", "2", "-o", forks, "--temperature", "1", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["branches"].toArray().size(), 2);
        for (const auto& br : r.json()["branches"].toArray())
            QVERIFY(QFileInfo::exists(br.toObject()["file"].toString()));
        QVERIFY(QFileInfo::exists(forks + "/cli-a-fork1.kvsnap"));
        r = cli(
            {"fork", a, "-n", "2", "-o", forks + "-steps", "--steps", "4", "-m", model, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["branches"].toArray()[0].toObject()["generated"].toArray().size(), 4);
        r = cli({"fork", a, "-n", "2", "-o", forks + "-x", "--steps", "4"});
        QCOMPARE(r.code, 2); // --steps without --model
        QVERIFY(QFile::copy(a, forks + "/cli-a.kvsnap"));
        r = cli({"tree", forks, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["roots"].toArray().size(), 1);
        QCOMPARE(r.json()["roots"].toArray()[0].toObject()["children"].toArray().size(), 2);
        r = cli({"tree", forks});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains("fork"));
        r = cli({"tree", qtmp("no-such-dir")});
        QCOMPARE(r.code, 1);

        // patch
        r = cli({"patch", a, "--from", b, "--layer", "1", "-o", qtmp("cli-p.kvsnap"), "-m", model,
                 "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["report"].toObject()["logits"].toString(), QString("recomputed"));
        QVERIFY(r.json()["report"].toObject()["key_elements_changed"].toInt() > 0);
        r = cli({"patch", a, "--from", b, "--layer", "99", "-o", keep});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("layer"), r.err.constData());
        r = cli({"patch", a, "--from", qtmp("cli-t.kvsnap"), "--layer", "0", "-o", keep});
        QCOMPARE(r.code, 1); // mismatched lengths, no range
        QVERIFY2(r.err.contains("positions"), r.err.constData());
        r = cli({"patch", a, "--from", b, "--layer", "0", "--positions", "3-5", "-o", keep});
        QCOMPARE(r.code, 2);
        r = cli({"patch", a, "--from", b, "--layer", "0", "--head", "1", "--positions", "2:6", "-o",
                 qtmp("cli-ph.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["report"].toObject()["logits"].toString(), QString("stale"));

        // splice
        r = cli({"splice", a, "--from", b, "--range", "1:4", "--at", "2", "-m", model, "-o",
                 qtmp("cli-s.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto rep = r.json()["report"].toObject();
        QCOMPARE(rep["inserted"].toInt(), 3);
        QVERIFY(rep["validation"].toObject()["ok"].toBool());
        QVERIFY(rep["drift"].toObject()["cache"].toObject()["layers"].toArray().size() > 0);
        r = cli(
            {"splice", a, "--from", b, "--range", "1:4", "--at", "999", "-m", model, "-o", keep});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("at = "), r.err.constData());
        r = cli({"verify", qtmp("cli-s.kvsnap"), "-m", model, "--json"});
        QVERIFY2(r.code == 0, r.out.constData());

        // diff
        r = cli({"diff", a, qtmp("cli-t.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto tok = r.json()["tokens"].toObject();
        QCOMPARE(tok["common_prefix"].toInt(), 10);
        QCOMPARE(tok["first_divergence"].toInt(), 10);
        QVERIFY(r.json()["cache"].toObject()["layers"].toArray().size() == int(m_a.layers.size()));
        QVERIFY(r.json()["fields"].toArray().size() > 0);
        r = cli({"diff", a, b, "--heads"});
        QCOMPARE(r.code, 0);
        r = cli({"diff", a, qtmp("keep.kvsnap")});
        QCOMPARE(r.code, 1);

        // Nothing overwrote the existing output.
        QFile f(keep);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), QByteArray("precious"));
    }
};

QTEST_GUILESS_MAIN(TestSurgery)
#include "tst_surgery.moc"
