// llama.cpp state files (state/interop/llamacpp.h): the fixtures llama.cpp wrote for
// stories260K import, verify and continue exactly as llama.cpp did; a wrong model is named;
// export -> import round trips; slot and session files; hostile files get errors naming the
// field; the CLI's import/verify/continue/export.
#include "engine/model.h"
#include "engine/session.h"
#include "engine/convert.h"
#include "formats/gguf.h"
#include "formats/safetensorswriter.h"
#include "state/interop/hfstate.h"
#include "state/interop/llamacpp.h"
#include "state/ledger/export.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/restore.h"
#include "state/verify/verifyfile.h"
#include "testdata.h"
#include "tokenizer/tokenizer.h"
#include "testmodel.h"
#include "util/demomodel.h"
#include "util/fileio.h"
#include "workspace/workspace.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace kvscope;
using namespace kvscope::state;
namespace lc = kvscope::state::llamacpp;

namespace {

const QString kDir = QStringLiteral("llamacpp/stories260K");
const QString kGguf = QStringLiteral("models/stories260K/stories260K.gguf");

QJsonObject reference(const QString& name) {
    const auto bytes = readFileBytes(testdata::path(kDir + "/reference.json"));
    const auto doc = QJsonDocument::fromJson(
        QByteArray(reinterpret_cast<const char*>(bytes.data()), static_cast<int>(bytes.size())));
    for (const auto& r : doc.object()["results"].toArray())
        if (r.toObject()["name"].toString() == name)
            return r.toObject();
    qFatal("no reference for %s", qPrintable(name));
}

std::vector<int32_t> ids(const QJsonValue& v) {
    std::vector<int32_t> out;
    for (const auto& x : v.toArray())
        out.push_back(x.toInt());
    return out;
}

std::vector<uint8_t> fixture(const QString& name) {
    return readFileBytes(testdata::path(kDir + "/" + name + ".ggsq"));
}

lc::StateFile parseOrFail(std::vector<uint8_t> bytes, const std::string& name = "t.ggsq") {
    auto f = lc::parse(std::move(bytes), name);
    if (!f)
        qFatal("parse failed: %s", f.message().c_str());
    return std::move(f).value();
}

bool hasId(const std::vector<Violation>& v, const std::string& id) {
    return std::any_of(v.begin(), v.end(), [&](const Violation& x) { return x.id == id; });
}

std::string ids(const std::vector<Violation>& v) {
    std::string s;
    for (const auto& x : v)
        s += x.id + " (" + x.message + "); ";
    return s;
}

std::vector<int32_t> greedy(const Snapshot& s, std::shared_ptr<const Model> model, int n,
                            bool force = false) {
    auto r = restore(s, model, {.force = force});
    if (!r)
        qFatal("restore failed: %s", r.message().c_str());
    auto g = r.value().session.generate(n, r.value().sampler);
    if (!g)
        qFatal("generate failed: %s", g.message().c_str());
    return g.value().tokens;
}

// Little-endian field access on a byte vector.
void put32(std::vector<uint8_t>& b, std::size_t off, uint32_t v) {
    std::memcpy(b.data() + off, &v, 4);
}
void put64(std::vector<uint8_t>& b, std::size_t off, uint64_t v) {
    std::memcpy(b.data() + off, &v, 8);
}
void writeFileBytes(const std::string& path, const std::vector<uint8_t>& b) {
    writeFileAtomic(path, b.data(), b.size());
}
uint32_t get32(const std::vector<uint8_t>& b, std::size_t off) {
    uint32_t v;
    std::memcpy(&v, b.data() + off, 4);
    return v;
}

double relL2(std::span<const uint8_t> a, std::span<const uint8_t> b) {
    const auto n = a.size() / 4;
    double d = 0, s = 0;
    for (std::size_t i = 0; i < n; ++i) {
        float x, y;
        std::memcpy(&x, a.data() + i * 4, 4);
        std::memcpy(&y, b.data() + i * 4, 4);
        d += (double(x) - y) * (double(x) - y);
        s += double(x) * x;
    }
    return std::sqrt(d / std::max(s, 1e-30));
}

struct Run {
    int code = -1;
    QByteArray out, err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

Run runCli(const QStringList& args) {
    QProcess p;
    p.start(KVSCOPE_CLI, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString data(const QString& rel) {
    return QString::fromStdString(testdata::path(rel));
}

} // namespace

class TestInterop : public QObject {
    Q_OBJECT

    std::shared_ptr<const Model> m_model;

private slots:
    void initTestCase() {
        KVSCOPE_REQUIRE_DATA(kDir + "/reference.json");
        KVSCOPE_REQUIRE_DATA(kGguf);
        m_model = testdata::loadModel(kGguf);
    }

    // The fixtures llama.cpp wrote: read, imported, verified clean, continued token for token.
    void fixtures_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("k");
        QTest::addColumn<QString>("v");
        QTest::addColumn<bool>("transposed");
        QTest::newRow("tim-dog") << "tim-dog"
                                 << "f16"
                                 << "f16" << false;
        QTest::newRow("v-transposed") << "v-transposed"
                                      << "f16"
                                      << "f16" << true;
        QTest::newRow("f32-cache") << "f32-cache"
                                   << "f32"
                                   << "f32" << false;
    }
    void fixtures() {
        QFETCH(QString, name);
        QFETCH(QString, k);
        QFETCH(QString, v);
        QFETCH(bool, transposed);
        const QJsonObject ref = reference(name);
        const auto file = parseOrFail(fixture(name), name.toStdString());
        QCOMPARE(lc::kindName(file.kind), std::string("ggsq"));
        QCOMPARE(file.version, 3u);
        QCOMPARE(file.tokens, ids(ref["state_tokens"]));
        QCOMPARE(file.used, file.bytes.size());
        QCOMPARE(file.streams.size(), std::size_t{1});
        QCOMPARE(file.streams[0].vTrans, transposed ? 1u : 0u);

        auto imp = lc::import(file, m_model);
        QVERIFY2(imp.snapshot, ids(imp.violations).c_str());
        const Snapshot& s = *imp.snapshot;
        QCOMPARE(imp.source["cache_type"]["k"].get<std::string>(), k.toStdString());
        QCOMPARE(imp.source["cache_type"]["v"].get<std::string>(), v.toStdString());
        QCOMPARE(s.lineage.operation, std::string("import"));
        QCOMPARE(s.lineage.parameters["engine"].get<std::string>(), std::string("llama.cpp"));
        QCOMPARE(s.lineage.parameters["logits"].get<std::string>(), std::string("recomputed"));
        QCOMPARE(s.lineage.parameters["hash"].get<std::string>(), file.hash);
        QVERIFY(!s.hasSampler); // absent, not invented
        QCOMPARE(s.tokens, file.tokens);
        QCOMPARE(s.cacheLength, static_cast<int64_t>(file.tokens.size()));
        for (int64_t i = 0; i < s.cacheLength; ++i)
            QCOMPARE(s.positions[static_cast<std::size_t>(i)], i);
        QCOMPARE(s.nextPosition, s.cacheLength);

        auto verdict = verifySnapshot(s, m_model, {}, imp.violations);
        QVERIFY2(verdict.report.ok(), ids(verdict.report.violations).c_str());
        QVERIFY(!hasId(verdict.report.violations, "cache.provenance"));
        QVERIFY(!hasId(verdict.report.violations, "cache.precision")); // recorded: source type
        QVERIFY(hasId(verdict.report.violations, "import.absent"));

        // Restoring and going on greedily yields the pending token, then llama.cpp's own
        // continuation, token for token.
        std::vector<int32_t> want = {ref["pending_token"].toInt()};
        for (int32_t t : ids(ref["continuation"]))
            want.push_back(t);
        const auto got = greedy(s, m_model, static_cast<int>(want.size()));
        QCOMPARE(got, want);

        // The same through a file and `verify FILE.ggsq` directly.
        const auto direct = verifyFile(testdata::path(kDir + "/" + name + ".ggsq"), m_model);
        QVERIFY2(direct.report.ok(), ids(direct.report.violations).c_str());
        QCOMPARE(direct.source["format"].get<std::string>(), std::string("ggsq"));
    }

    // A state llama.cpp wrote for a Q4_K_M model (tests/data/quants: q4_K / q6_K matrices, an
    // f32 and its default f16 cache) imports onto the quantized model kept quantized, verifies
    // clean (layer 0's keys recomputed from the quantized weights match the file's), and
    // continues token for token as llama.cpp did; with an f32 cache the prompt's logits are
    // llama.cpp's to float rounding (8.7e-6 of 27.5). A model of the same shape with other
    // weights is named by the key provenance check.
    void quantizedModelStates() {
        const std::string dir = KVSCOPE_TESTS_DIR "/data/quants/";
        auto loaded = Model::load(dir + "tiny-q4_k_m.gguf");
        QVERIFY2(loaded, loaded.message().c_str());
        const auto model = loaded.value();
        QCOMPARE(model->config().weightDtype, std::string("q4_k"));
        const auto bytes = readFileBytes(dir + "tiny-q4_k_m.states.json");
        const auto doc = QJsonDocument::fromJson(
            QByteArray(reinterpret_cast<const char*>(bytes.data()), int(bytes.size())));
        const QJsonArray states = doc.object()["states"].toArray();
        QCOMPARE(states.size(), 2);
        for (const auto& entry : states) {
            const QJsonObject ref = entry.toObject();
            const std::string name = ref["file"].toString().toStdString();
            const auto file = parseOrFail(readFileBytes(dir + name), name);
            QCOMPARE(file.tokens, ids(ref["state_tokens"]));
            auto imp = lc::import(file, model);
            QVERIFY2(imp.snapshot, ids(imp.violations).c_str());
            auto verdict = verifySnapshot(*imp.snapshot, model, {}, imp.violations);
            QVERIFY2(verdict.report.ok(), ids(verdict.report.violations).c_str());
            QVERIFY(!hasId(verdict.report.violations, "cache.provenance"));
            std::vector<int32_t> want = {ref["pending_token"].toInt()};
            for (int32_t t : ids(ref["continuation"]))
                want.push_back(t);
            QCOMPARE(greedy(*imp.snapshot, model, int(want.size())), want);
            if (!ref.contains("next_logits"))
                continue;
            Session session(model);
            QVERIFY(session.feed(ids(ref["prompt_ids"])));
            const QJsonArray theirs = ref["next_logits"].toArray();
            QCOMPARE(qsizetype(session.lastLogits().size()), theirs.size());
            double worst = 0, largest = 0;
            for (qsizetype i = 0; i < theirs.size(); ++i) {
                worst = std::max(worst,
                                 std::abs(session.lastLogits()[size_t(i)] - theirs[i].toDouble()));
                largest = std::max(largest, std::abs(theirs[i].toDouble()));
            }
            qInfo("%s: max |kvscope - llama.cpp| after the prompt = %.2g (logits up to %.3g)",
                  name.c_str(), worst, largest);
            QVERIFY(worst < 1e-4);
        }
        // Another model of the same shape: its keys are not the file's.
        ModelConfig c = model->config();
        auto other = Model::createRandom(c, 5);
        QVERIFY(other);
        const auto file = parseOrFail(readFileBytes(dir + "tiny-q4_k_m.f32-cache.ggsq"));
        auto imp = lc::import(file, other.value());
        std::vector<Violation> found = imp.violations;
        if (imp.snapshot)
            found =
                verifySnapshot(*imp.snapshot, other.value(), {}, imp.violations).report.violations;
        QVERIFY2(hasId(found, "cache.provenance"), ids(found).c_str());
    }

    // llama.cpp's default f16 cache, imported by a model loaded with --cache-dtype f16, keeps
    // its values bit for bit (the f32 model's import holds the same values widened), verifies
    // clean without cache.compute_dtype and continues as llama.cpp did.
    void f16CacheImportsAsF16() {
        const std::string dir = KVSCOPE_TESTS_DIR "/data/quants/";
        LoadOptions o;
        o.cacheDtype = "f16";
        auto half = Model::load(dir + "tiny-q4_k_m.gguf", o);
        auto full = Model::load(dir + "tiny-q4_k_m.gguf");
        QVERIFY2(half && full, (half ? full : half).message().c_str());
        const auto bytes = readFileBytes(dir + "tiny-q4_k_m.states.json");
        const auto doc = QJsonDocument::fromJson(
            QByteArray(reinterpret_cast<const char*>(bytes.data()), int(bytes.size())));
        QJsonObject ref;
        for (const auto& entry : doc.object()["states"].toArray())
            if (entry.toObject()["file"].toString() == "tiny-q4_k_m.f16-cache.ggsq")
                ref = entry.toObject();
        QVERIFY(!ref.isEmpty());
        const auto file =
            parseOrFail(readFileBytes(dir + "tiny-q4_k_m.f16-cache.ggsq"), "f16-cache");
        auto imp16 = lc::import(file, half.value());
        auto imp32 = lc::import(file, full.value());
        QVERIFY2(imp16.snapshot && imp32.snapshot, ids(imp16.violations).c_str());
        QCOMPARE(imp16.snapshot->cacheDtype, std::string("f16"));
        QCOMPARE(imp32.snapshot->cacheDtype, std::string("f32"));
        QCOMPARE(imp16.snapshot->cacheSourceType, std::string("f16"));
        auto widened = cacheFromSnapshot(*imp32.snapshot, "cpu");
        QVERIFY(widened);
        const KvCache asF16 = widened.value().convertedTo("f16");
        for (std::size_t l = 0; l < imp16.snapshot->layers.size(); ++l) {
            QVERIFY(imp16.snapshot->layers[l].key->toVector() == asF16.rawKey(int(l)));
            QVERIFY(imp16.snapshot->layers[l].value->toVector() == asF16.rawValue(int(l)));
        }
        auto verdict = verifySnapshot(*imp16.snapshot, half.value(), {}, imp16.violations);
        QVERIFY2(verdict.report.ok(), ids(verdict.report.violations).c_str());
        QVERIFY(!hasId(verdict.report.violations, "cache.compute_dtype"));
        QVERIFY(hasId(
            verifySnapshot(*imp16.snapshot, full.value(), {}, imp16.violations).report.violations,
            "cache.compute_dtype"));
        std::vector<int32_t> want = {ref["pending_token"].toInt()};
        for (int32_t t : ids(ref["continuation"]))
            want.push_back(t);
        QCOMPARE(greedy(*imp16.snapshot, half.value(), int(want.size())), want);
    }

    // llama.cpp accepts a q8_0 K cache with head size 8 without flash attention; its views of
    // the cache then cut through the 32-element blocks and every score is 0. The import names
    // it (and the state cannot continue like llama.cpp did in a correct engine).
    void misalignedQuantizedKeys() {
        const auto file = parseOrFail(fixture("q8-keys"), "q8-keys.ggsq");
        auto imp = lc::import(file, m_model);
        QVERIFY(imp.snapshot);
        QCOMPARE(imp.source["cache_type"]["k"].get<std::string>(), std::string("q8_0"));
        QCOMPARE(imp.snapshot->cacheSourceType, std::string("q8_0"));
        QVERIFY2(hasId(imp.violations, "import.misaligned_blocks"), ids(imp.violations).c_str());
        // Layer 0's keys are still this model's (q8_0 rounding is within the check's tolerance).
        auto more = validateAgainstModel(*imp.snapshot, *m_model);
        QVERIFY2(!hasId(more, "cache.provenance"), ids(more).c_str());
        auto verdict = verifySnapshot(*imp.snapshot, m_model, {}, imp.violations);
        QVERIFY(!verdict.report.ok());
        QVERIFY(verdict.report.forceable());
    }

    // The file names no model: a model of the same shape with other weights is caught by the
    // key provenance check; one of another shape by the layout, naming the field.
    void wrongModel() {
        const auto file = parseOrFail(fixture("tim-dog"), "tim-dog.ggsq");
        auto other = Model::createRandom(m_model->config(), 7);
        QVERIFY(other);
        auto imp = lc::import(file, other.value());
        QVERIFY(imp.snapshot);
        auto verdict = verifySnapshot(*imp.snapshot, other.value(), {}, imp.violations);
        QVERIFY(!verdict.report.ok());
        QVERIFY2(hasId(verdict.report.violations, "cache.provenance"),
                 ids(verdict.report.violations).c_str());

        KVSCOPE_REQUIRE_DATA("models/aidreams260K/aidreams260K.bin");
        auto aid = testdata::loadModel("models/aidreams260K/aidreams260K.bin");
        auto wrong = lc::import(file, aid);
        QVERIFY(!wrong.snapshot);
        QVERIFY(hasId(wrong.violations, "import.layout"));
        QVERIFY2(wrong.violations.front().message.find("n_layer is 5") != std::string::npos,
                 wrong.violations.front().message.c_str());
        QVERIFY(wrong.violations.front().structural);
    }

    // export -> parse -> import gives the same state: bit-exact for f32 and f16 (plain and
    // transposed V), within the block rounding for the quantized types.
    void roundTrip_data() {
        QTest::addColumn<QString>("k");
        QTest::addColumn<QString>("v");
        QTest::addColumn<bool>("transposed");
        QTest::addColumn<double>("bound");
        QTest::newRow("f32") << "f32"
                             << "f32" << false << 0.0;
        QTest::newRow("f16 transposed") << "f16"
                                        << "f16" << true << 1e-3;
        QTest::newRow("bf16") << "bf16"
                              << "bf16" << false << 1e-2;
        QTest::newRow("q8_0") << "q8_0"
                              << "q8_0" << false << 1e-2;
        QTest::newRow("q5_1") << "q5_1"
                              << "q5_0" << false << 6e-2;
        QTest::newRow("q4_0") << "q4_0"
                              << "q4_1" << false << 0.15;
        QTest::newRow("iq4_nl") << "iq4_nl"
                                << "f16" << false << 0.15;
    }
    void roundTrip() {
        QFETCH(QString, k);
        QFETCH(QString, v);
        QFETCH(bool, transposed);
        QFETCH(double, bound);
        // A model whose head size (64) is a multiple of the blocks, so llama.cpp would also
        // rotate quantized K and V (Hadamard): the export rotates and the import undoes it.
        ModelConfig c = m_model->config();
        c.nHeads = 2;
        c.nKvHeads = 1;
        c.headDim = 64;
        c.dim = 128;
        auto model = Model::createRandom(c, 3);
        QVERIFY2(model, model.message().c_str());
        Session session(model.value());
        std::vector<int32_t> prompt = {1, 300, 301, 302, 303, 304, 305, 306, 307};
        QVERIFY(session.feed(prompt));
        auto snap = capture(session);
        QVERIFY(snap);
        auto bytes = lc::exportSequence(snap.value(), {.keyType = k.toStdString(),
                                                       .valueType = v.toStdString(),
                                                       .transposeValues = transposed});
        QVERIFY2(bytes, bytes.message().c_str());
        const auto file = parseOrFail(std::move(bytes).value());
        auto imp = lc::import(file, model.value());
        QVERIFY2(imp.snapshot, ids(imp.violations).c_str());
        const Snapshot& back = *imp.snapshot;
        QCOMPARE(back.tokens, snap.value().tokens);
        QCOMPARE(back.positions, snap.value().positions);
        for (std::size_t l = 0; l < back.layers.size(); ++l) {
            const double ek = relL2(*snap.value().layers[l].key, *back.layers[l].key);
            const double ev = relL2(*snap.value().layers[l].value, *back.layers[l].value);
            if (bound == 0) {
                QCOMPARE(*back.layers[l].key, *snap.value().layers[l].key);
                QCOMPARE(*back.layers[l].value, *snap.value().layers[l].value);
            } else {
                QVERIFY2(ek <= bound && ev <= bound,
                         qPrintable(QString("layer %1: K %2, V %3").arg(l).arg(ek).arg(ev)));
            }
        }
        auto verdict = verifySnapshot(back, model.value(), {}, imp.violations);
        QVERIFY2(!hasId(verdict.report.violations, "cache.provenance"),
                 ids(verdict.report.violations).c_str());
    }

    // The Hadamard transform is orthonormal and its own inverse, in Sylvester order.
    void hadamard() {
        std::vector<float> x(128, 0.0f);
        x[0] = 1.0f;
        lc::hadamard(x.data(), 128, 64);
        for (int i = 0; i < 64; ++i)
            QCOMPARE(x[static_cast<std::size_t>(i)], 0.125f);
        std::mt19937 rng(1);
        std::normal_distribution<float> nd;
        std::vector<float> y(256), y0;
        for (auto& e : y)
            e = nd(rng);
        y0 = y;
        lc::hadamard(y.data(), 256, 128);
        QVERIFY(y != y0);
        lc::hadamard(y.data(), 256, 128);
        for (std::size_t i = 0; i < y.size(); ++i)
            QVERIFY(std::fabs(y[i] - y0[i]) < 1e-5f);
        QCOMPARE(lc::hadamardChunk(8), int64_t{0});
        QCOMPARE(lc::hadamardChunk(64), int64_t{64});
        QCOMPARE(lc::hadamardChunk(128), int64_t{128});
        QCOMPARE(lc::hadamardChunk(192), int64_t{64});
    }

    // A llama-server slot file (the ggsq with a packed token blob) and a session file (ggsn,
    // every sequence, arch string) made from the tim-dog fixture's bytes.
    void slotAndSession() {
        auto b = fixture("tim-dog");
        const uint32_t n = get32(b, 8);
        const std::vector<uint8_t> tokens(b.begin() + 12, b.begin() + 12 + 4 * n);
        const std::vector<uint8_t> state(b.begin() + 12 + 4 * n, b.end());

        std::vector<uint8_t> slot(12);
        put32(slot, 0, 0x67677371u);
        put32(slot, 4, 3);
        std::vector<uint8_t> blob(12);
        put32(blob, 0, 0xFFFFFFFFu);
        put32(blob, 4, 1);
        put32(blob, 8, n);
        blob.insert(blob.end(), tokens.begin(), tokens.end());
        blob.resize(blob.size() + 4, 0); // no media chunks
        put32(slot, 8, static_cast<uint32_t>(blob.size() / 4));
        slot.insert(slot.end(), blob.begin(), blob.end());
        slot.insert(slot.end(), state.begin(), state.end());
        const auto sf = parseOrFail(slot, "slot.bin");
        QCOMPARE(lc::kindName(sf.kind), std::string("slot"));
        QCOMPARE(sf.tokens, parseOrFail(b).tokens);
        auto simp = lc::import(sf, m_model);
        QVERIFY(simp.snapshot);

        std::vector<uint8_t> ggsn(12);
        put32(ggsn, 0, 0x6767736eu);
        put32(ggsn, 4, 10);
        put32(ggsn, 8, n);
        ggsn.insert(ggsn.end(), tokens.begin(), tokens.end());
        const std::string arch = "llama";
        std::vector<uint8_t> len(4);
        put32(len, 0, static_cast<uint32_t>(arch.size()));
        ggsn.insert(ggsn.end(), len.begin(), len.end());
        ggsn.insert(ggsn.end(), arch.begin(), arch.end());
        const std::size_t stateAt = ggsn.size();
        ggsn.insert(ggsn.end(), state.begin(), state.end());
        // The last three cells belong to sequence 1: sequence 0 is imported without them.
        const std::size_t cellsAt = stateAt + 8;
        for (uint32_t i = n - 3; i < n; ++i)
            put32(ggsn, cellsAt + i * 12 + 8, 1);
        const auto nf = parseOrFail(ggsn, "session.bin");
        QCOMPARE(lc::kindName(nf.kind), std::string("ggsn"));
        QCOMPARE(nf.arch, arch);
        auto nimp = lc::import(nf, m_model);
        QVERIFY(nimp.snapshot);
        QVERIFY2(hasId(nimp.violations, "import.sequences"), ids(nimp.violations).c_str());
        QCOMPARE(nimp.snapshot->cacheLength, static_cast<int64_t>(n - 3));
        // ... and its token list (all n) no longer matches the cells: named, not invented.
        auto verdict = verifySnapshot(*nimp.snapshot, m_model, {}, nimp.violations);
        QVERIFY(hasId(verdict.report.violations, "cache.length"));
        QCOMPARE(nimp.snapshot->lineage.parameters["logits"].get<std::string>(),
                 std::string("absent"));
        // Sequence 1 on request.
        auto one = lc::import(nf, m_model, {.sequence = 1});
        QVERIFY(one.snapshot);
        QCOMPARE(one.snapshot->cacheLength, int64_t{3});
        QCOMPARE(one.snapshot->positions.front(), static_cast<int64_t>(n - 3));
    }

    // Lying counts, sizes and types, truncations and trailing bytes: errors that name the file
    // and the field, never a crash or an allocation the file cannot back.
    void hostile() {
        const auto b = fixture("tim-dog");
        const uint32_t n = get32(b, 8);
        const std::size_t stateAt = 12 + 4 * n, cellsAt = stateAt + 8;
        const uint32_t cells = get32(b, stateAt + 4);
        const std::size_t dataAt = cellsAt + cells * 12; // v_trans, n_layer, layer 0 K type
        auto expectError = [&](std::vector<uint8_t> bytes, const char* field) {
            auto r = lc::parse(std::move(bytes), "hostile.ggsq");
            QVERIFY2(!r, field);
            QVERIFY2(r.message().find("hostile.ggsq") != std::string::npos, r.message().c_str());
            QVERIFY2(r.message().find(field) != std::string::npos, r.message().c_str());
        };
        auto with32 = [&](std::size_t off, uint32_t v) {
            auto c = b;
            put32(c, off, v);
            return c;
        };
        expectError(with32(0, 0x12345678u), "magic");
        expectError(with32(4, 4), "version");
        expectError(with32(8, 0x7FFFFFFFu), "n_token");
        expectError(with32(stateAt, 0), "n_stream");
        expectError(with32(stateAt + 4, 0xFFFFFFF0u), "cell_count");
        expectError(with32(cellsAt + 4, 0x40000000u), "n_seq_id");
        expectError(with32(dataAt, 7), "v_trans");
        expectError(with32(dataAt + 4, 100000), "n_layer");
        expectError(with32(dataAt + 8, 99), "type");
        {
            auto c = b;
            put64(c, dataAt + 12, 0x4000000000000000ull);
            expectError(c, "row size");
        }
        {
            auto c = b;
            put64(c, dataAt + 12, 0);
            expectError(c, "row size");
        }
        // Every truncation is an error naming the file; none crashes.
        for (std::size_t len = 0; len < b.size(); len += (len < 600 ? 1 : 97)) {
            auto r = lc::parse(std::vector<uint8_t>(b.begin(), b.begin() + len), "cut.ggsq");
            QVERIFY2(!r, qPrintable(QString("a %1-byte prefix parsed").arg(len)));
            QVERIFY(r.message().find("cut.ggsq") != std::string::npos);
        }
        // Trailing bytes parse; the import names them.
        auto longer = b;
        longer.resize(longer.size() + 10, 0xAB);
        auto imp = lc::import(parseOrFail(longer), m_model);
        QVERIFY(hasId(imp.violations, "import.trailing"));
        // A model with other head counts: the row size does not fit, and the message says why.
        ModelConfig c = m_model->config();
        c.nKvHeads = 2;
        auto narrow = Model::createRandom(c, 1);
        QVERIFY(narrow);
        auto bi = lc::import(parseOrFail(b), narrow.value());
        QVERIFY(!bi.snapshot);
        QVERIFY(hasId(bi.violations, "import.layout"));
        QVERIFY2(bi.violations.front().message.find("layer 0 K row size is 64 bytes; the model's 2 "
                                                    "KV heads x head_dim 8 in f16 take 32") !=
                     std::string::npos,
                 bi.violations.front().message.c_str());
        // Token ids outside the vocabulary are named by the validation core.
        auto tok = with32(12 + 4, 100000);
        auto ti = lc::import(parseOrFail(tok), m_model);
        QVERIFY(ti.snapshot);
        auto verdict = verifySnapshot(*ti.snapshot, m_model, {}, ti.violations);
        QVERIFY(hasId(verdict.report.violations, "tokens.range"));
    }

    // Issue 44's classes for states of other engines, each at its root:
    // - positions recorded far below zero while the keys were rotated at 0..n import, but
    //   verify names positions.range (structural): nothing is written, continue is refused
    //   even forced;
    // - a session file's arch string is compared with the model's;
    // - a sequence with more cells than the model's context is refused before anything is built;
    // - continue refuses what verify fails on logits.equivalence, unless forced;
    // - safetensors: a file that cannot be read, a damaged kvscope_manifest and a damaged file
    //   given to verify get our words and the file's name.
    void hostileStates() {
        QTemporaryDir dir;
        const auto b = fixture("tim-dog");
        const uint32_t n = get32(b, 8);
        const std::size_t stateAt = 12 + 4 * n, cellsAt = stateAt + 8;
        const uint32_t cells = get32(b, stateAt + 4);
        auto shifted = [&](int32_t by) {
            auto c = b;
            for (uint32_t i = 0; i < cells; ++i)
                put32(c, cellsAt + i * 12, static_cast<uint32_t>(static_cast<int32_t>(i) + by));
            return c;
        };
        {
            auto imp = lc::import(parseOrFail(shifted(-1000)), m_model);
            QVERIFY(imp.snapshot);
            QCOMPARE(imp.snapshot->positions.front(), int64_t{-1000});
            auto verdict = verifySnapshot(*imp.snapshot, m_model, {}, imp.violations);
            QVERIFY2(hasId(verdict.report.violations, "positions.range"),
                     ids(verdict.report.violations).c_str());
            QVERIFY(verdict.report.hasStructural());
            const QString path = dir.filePath("minus1000.ggsq");
            writeFileBytes(path.toStdString(), shifted(-1000));
            auto v = runCli({"verify", path, "-m", data(kGguf)});
            QCOMPARE(v.code, 1);
            QVERIFY2(v.out.contains("positions.range"), v.out.constData());
            const QString out = dir.filePath("minus1000.kvsnap");
            auto i = runCli({"import", path, "-m", data(kGguf), "-o", out, "--force"});
            QCOMPARE(i.code, 1);
            QVERIFY(!QFileInfo::exists(out));
            // The same record shifted by +7 (inside the context): the keys name the offset.
            auto plus = lc::import(parseOrFail(shifted(7)), m_model);
            auto pv = verifySnapshot(*plus.snapshot, m_model, {}, plus.violations);
            QVERIFY2(hasId(pv.report.violations, "positions.offset"),
                     ids(pv.report.violations).c_str());
        }
        {
            // ggsn: the tokens, then the arch string, then the state.
            std::vector<uint8_t> ggsn(12);
            put32(ggsn, 0, 0x6767736eu);
            put32(ggsn, 4, 10);
            put32(ggsn, 8, n);
            ggsn.insert(ggsn.end(), b.begin() + 12, b.begin() + 12 + 4 * n);
            const std::string arch = "mamba";
            std::vector<uint8_t> len(4);
            put32(len, 0, static_cast<uint32_t>(arch.size()));
            ggsn.insert(ggsn.end(), len.begin(), len.end());
            ggsn.insert(ggsn.end(), arch.begin(), arch.end());
            ggsn.insert(ggsn.end(), b.begin() + 12 + 4 * n, b.end());
            auto imp = lc::import(parseOrFail(ggsn, "mamba.bin"), m_model);
            QVERIFY(!imp.snapshot);
            QVERIFY2(hasId(imp.violations, "model.architecture"), ids(imp.violations).c_str());
            QVERIFY2(imp.violations.front().message.find("mamba.bin: arch is \"mamba\"") !=
                         std::string::npos,
                     imp.violations.front().message.c_str());
        }
        {
            // More cells than the model's context, written by kvscope's own export.
            const ModelConfig& mc = m_model->config();
            Snapshot big;
            big.config = mc;
            big.cacheDtype = "f32";
            big.kvHeads = mc.nKvHeads;
            big.headDim = mc.headDim;
            big.cacheLength = mc.maxContext + 88;
            for (int64_t i = 0; i < big.cacheLength; ++i) {
                big.tokens.push_back(1);
                big.positions.push_back(i);
                big.mask.push_back(1);
            }
            big.nextPosition = big.cacheLength;
            const std::vector<uint8_t> zeros(static_cast<std::size_t>(big.expectedLayerBytes()));
            for (int64_t l = 0; l < mc.nLayers; ++l)
                big.layers.push_back({makeBytes(zeros), makeBytes(zeros)});
            auto bytes = lc::exportSequence(big, {});
            QVERIFY2(bytes, bytes.message().c_str());
            auto imp = lc::import(parseOrFail(bytes.value(), "big.ggsq"), m_model);
            QVERIFY(!imp.snapshot);
            QVERIFY2(hasId(imp.violations, "import.layout"), ids(imp.violations).c_str());
            const std::string want = "has " + std::to_string(big.cacheLength) +
                                     " cells (cell_count); the model's context holds " +
                                     std::to_string(mc.maxContext);
            QVERIFY2(imp.violations.back().message.find(want) != std::string::npos,
                     imp.violations.back().message.c_str());
        }
        {
            // Stored logits the restored cache does not reproduce.
            auto imp = lc::import(parseOrFail(b), m_model);
            Snapshot s = *imp.snapshot;
            std::rotate(s.lastLogits.begin(), s.lastLogits.begin() + 1, s.lastLogits.end());
            const QString path = dir.filePath("wrong-logits.kvsnap");
            QVERIFY(save(s, path.toStdString()));
            auto v = runCli({"verify", path, "-m", data(kGguf)});
            QCOMPARE(v.code, 1);
            QVERIFY(v.out.contains("logits.equivalence"));
            auto c = runCli({"continue", path, "-m", data(kGguf), "-n", "3"});
            QCOMPARE(c.code, 1);
            QVERIFY2(c.err.contains("logits.equivalence"), c.err.constData());
            auto forced = runCli({"continue", path, "-m", data(kGguf), "-n", "3", "--force"});
            QVERIFY2(forced.code == 0, forced.err.constData());
        }
        {
            // safetensors: unreadable, a damaged manifest, a damaged file given to verify.
            const QString junk = dir.filePath("junk.safetensors");
            writeFileBytes(junk.toStdString(), std::vector<uint8_t>(23, 'g'));
            auto r = runCli(
                {"import", junk, "-m", data(kGguf), "-o", dir.filePath("x.kvsnap"), "--json"});
            QCOMPARE(r.code, 1);
            QVERIFY2(!r.out.contains("json.exception") && !r.err.contains("json.exception"),
                     r.err.constData());
            QCOMPARE(r.json()["source"].toObject()["file"].toString(), QString("junk.safetensors"));
            QVERIFY(r.out.contains("header length"));

            Session session(m_model);
            QVERIFY(session.feed(std::vector<int32_t>{1, 326, 394, 261}));
            auto snap = capture(session, {});
            QVERIFY(snap);
            const std::string ours = dir.filePath("ours.safetensors").toStdString();
            QVERIFY(exportSafetensors(snap.value(), ours));
            auto f = readFileBytes(ours);
            const std::string key = "\"kvscope_manifest\":\"{";
            const auto at = std::search(f.begin(), f.end(), key.begin(), key.end());
            QVERIFY(at != f.end());
            *(at + static_cast<std::ptrdiff_t>(key.size()) - 1) = '#'; // the manifest's '{'
            const std::string broken = dir.filePath("broken-manifest.safetensors").toStdString();
            writeFileBytes(broken, f);
            auto imp = hf::importSafetensors(broken, m_model);
            QVERIFY2(imp.snapshot, ids(imp.violations).c_str());
            const std::string note = imp.violations.back().message;
            QVERIFY2(note.find("kvscope_manifest is unreadable") != std::string::npos &&
                         note.find("json.exception") == std::string::npos,
                     note.c_str());

            std::vector<uint8_t> cut(f.begin(), f.begin() + 40);
            const QString damaged = dir.filePath("damaged.safetensors");
            writeFileBytes(damaged.toStdString(), cut);
            auto v = runCli({"verify", damaged, "-m", data(kGguf)});
            QCOMPARE(v.code, 1);
            QVERIFY2(!v.out.contains(".kvsnap") && v.out.contains("damaged.safetensors"),
                     v.out.constData());
        }
    }

    // Hugging Face past_key_values: kvscope's own safetensors export comes back bit-exact
    // (with its sampler and prompt meta); a bare transformers-style dump (K/V and input_ids
    // only) imports with positions assumed and logits recomputed, and continues like the
    // original; shapes that do not fit are named.
    void huggingFace() {
        QTemporaryDir dir;
        Session session(m_model);
        QVERIFY(session.feed(std::vector<int32_t>{1, 326, 394, 261, 370, 400, 428}));
        Sampler sampler({.temperature = 0.8f, .seed = 5});
        QVERIFY(session.generate(6, sampler));
        CaptureOptions co;
        co.sampler = &sampler;
        auto snap = capture(session, co);
        QVERIFY(snap);
        const Snapshot& a = snap.value();

        const std::string ours = dir.filePath("ours.safetensors").toStdString();
        QVERIFY(exportSafetensors(a, ours));
        auto back = hf::importSafetensors(ours, m_model);
        QVERIFY2(back.snapshot, ids(back.violations).c_str());
        const Snapshot& b = *back.snapshot;
        QCOMPARE(back.source["engine"].get<std::string>(), std::string("kvscope"));
        for (std::size_t l = 0; l < a.layers.size(); ++l) {
            QCOMPARE(*b.layers[l].key, *a.layers[l].key);
            QCOMPARE(*b.layers[l].value, *a.layers[l].value);
        }
        QCOMPARE(b.cacheDtype, a.cacheDtype);
        QCOMPARE(b.tokens, a.tokens);
        QCOMPARE(b.positions, a.positions);
        QCOMPARE(b.mask, a.mask);
        QCOMPARE(b.lastLogits, a.lastLogits);
        QCOMPARE(b.nextPosition, a.nextPosition);
        QVERIFY(b.hasSampler);
        QCOMPARE(b.rngState, a.rngState);
        QCOMPARE(b.prompt.segments, a.prompt.segments);
        QCOMPARE(b.lineage.operation, std::string("import"));
        QCOMPARE(b.lineage.parameters["exported_from"].get<std::string>(), a.lineage.id);
        QVERIFY(verifySnapshot(b, m_model, {}, back.violations).report.ok());

        // What a transformers user writes: the cache and the ids, nothing else.
        safetensors::Writer w;
        for (std::size_t l = 0; l < a.layers.size(); ++l) {
            const std::vector<int64_t> shape{1, a.kvHeads, a.cacheLength, a.headDim};
            w.addTensor("past_key_values." + std::to_string(l) + ".key", safetensors::DType::F32,
                        shape, a.layers[l].key->toVector());
            w.addTensor("past_key_values." + std::to_string(l) + ".value", safetensors::DType::F32,
                        shape, a.layers[l].value->toVector());
        }
        std::vector<uint8_t> idBytes;
        for (int32_t t : a.tokens) {
            const int64_t v = t;
            const auto* p = reinterpret_cast<const uint8_t*>(&v);
            idBytes.insert(idBytes.end(), p, p + 8);
        }
        w.addTensor("input_ids", safetensors::DType::I64,
                    {1, static_cast<int64_t>(a.tokens.size())}, idBytes);
        const std::string bare = dir.filePath("dynamic_cache.safetensors").toStdString();
        QVERIFY(w.write(bare));
        auto imp = hf::importSafetensors(bare, m_model);
        QVERIFY2(imp.snapshot, ids(imp.violations).c_str());
        QCOMPARE(imp.source["engine"].get<std::string>(), std::string("transformers"));
        QCOMPARE(imp.snapshot->lineage.parameters["logits"].get<std::string>(),
                 std::string("recomputed"));
        QCOMPARE(imp.snapshot->positions, a.positions);
        QVERIFY(!imp.snapshot->hasSampler);
        QVERIFY(imp.violations.back().message.find("no position_ids") != std::string::npos);
        const auto verdict = verifySnapshot(*imp.snapshot, m_model, {}, imp.violations);
        QVERIFY2(verdict.report.ok(), ids(verdict.report.violations).c_str());
        // Greedy from the dump == greedy from the original state.
        Snapshot greedyA = a;
        greedyA.hasSampler = false;
        QCOMPARE(greedy(*imp.snapshot, m_model, 8), greedy(greedyA, m_model, 8));

        // Shapes that do not fit, a missing layer, a file that is not safetensors.
        safetensors::Writer wrong;
        for (std::size_t l = 0; l < a.layers.size(); ++l) {
            const std::vector<int64_t> shape{1, a.headDim, a.cacheLength, a.kvHeads};
            wrong.addTensor("past_key_values." + std::to_string(l) + ".key",
                            safetensors::DType::F32, shape, a.layers[l].key->toVector());
            if (l + 1 < a.layers.size())
                wrong.addTensor("past_key_values." + std::to_string(l) + ".value",
                                safetensors::DType::F32, shape, a.layers[l].value->toVector());
        }
        const std::string bad = dir.filePath("wrong.safetensors").toStdString();
        QVERIFY(wrong.write(bad));
        auto wi = hf::importSafetensors(bad, m_model);
        QVERIFY(!wi.snapshot);
        QVERIFY(hasId(wi.violations, "import.layout"));
        QVERIFY2(wi.violations.front().message.find("has shape [1, 8, 13, 4]") != std::string::npos,
                 wi.violations.front().message.c_str());
        auto junk = hf::importSafetensors(testdata::path(kDir + "/tim-dog.ggsq"), m_model);
        QVERIFY(hasId(junk.violations, "import.file"));

        auto r = runCli({"import", QString::fromStdString(ours), "-m", data(kGguf), "-o",
                         dir.filePath("back.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["source"].toObject()["format"].toString(), QString("safetensors"));
    }

    // convert --to gguf: the bundled demo model as llama.cpp's GGUF (llama.* keys, llama.cpp's
    // tensor names, the byte-level BPE tokenizer as "gpt2"/"gpt-2"), which kvscope loads back to
    // the same tokens and greedy output. (That llama.cpp runs it the same way is the optional
    // llamacpp_export check.) A tokenizer llama.cpp would split differently is refused.
    void ggufExport() {
        const auto demo = findDemoModel();
        QVERIFY2(demo, "the bundled demo model was not found");
        auto model = Model::load(*demo);
        QVERIFY2(model, model.message().c_str());
        QTemporaryDir dir;
        const std::string out = dir.filePath("demo.gguf").toStdString();
        QVERIFY(convertToGguf(*model.value(), out));
        auto f = gguf::File::open(out);
        QVERIFY2(f, f.message().c_str());
        const auto& g = f.value();
        QCOMPARE(g.getString("general.architecture"), std::string("llama"));
        QCOMPARE(g.getString("tokenizer.ggml.model"), std::string("gpt2"));
        QCOMPARE(g.getString("tokenizer.ggml.pre"), std::string("gpt-2"));
        QCOMPARE(g.getStringArray("tokenizer.ggml.tokens").size(), std::size_t{4096});
        QCOMPARE(g.getStringArray("tokenizer.ggml.merges").size(), std::size_t{3835});
        QCOMPARE(g.getI64("llama.block_count"), int64_t{4});
        QCOMPARE(g.getI64("llama.attention.head_count_kv"), int64_t{1});
        QVERIFY(g.has("tokenizer.ggml.add_bos_token"));
        QCOMPARE(g.getBool("tokenizer.ggml.add_bos_token"), true);

        auto back = Model::load(out);
        QVERIFY2(back, back.message().c_str());
        const std::string text =
            "Verily, verily, I say unto thee: 12 tribes\n\tand 144,000 sealed!";
        const auto ids = model.value()->tokenizer()->encode(text);
        QCOMPARE(back.value()->tokenizer()->encode(text), ids);
        auto run = [&](std::shared_ptr<const Model> m) {
            Session session(m);
            if (!session.feed(ids))
                return std::vector<int32_t>{};
            Sampler greedySampler;
            auto g2 = session.generate(24, greedySampler);
            return g2 ? g2.value().tokens : std::vector<int32_t>{};
        };
        const auto want = run(model.value());
        QCOMPARE(want.size(), std::size_t{24});
        QCOMPARE(run(back.value()), want);

        // stories260K's tokenizer is SentencePiece-style: refused, by name, nothing written.
        const std::string refused = dir.filePath("stories.gguf").toStdString();
        const Status st = convertToGguf(*m_model, refused);
        QVERIFY(!st);
        QVERIFY2(st.message().find("byte-level BPE") != std::string::npos, st.message().c_str());
        QVERIFY(!QFileInfo::exists(QString::fromStdString(refused)));
        // An existing file is not replaced without overwrite.
        QVERIFY(!convertToGguf(*model.value(), out));
    }

    // The workspace (what the GUI's File > Open calls) opens a llama.cpp state with the same
    // verdict as `kvscope-cli verify FILE.ggsq --json`, and stores it as an imported node.
    void workspaceMatchesCli() {
        ws::Workspace w;
        w.setModel(m_model);
        const std::string path = testdata::path(kDir + "/v-transposed.ggsq");
        auto opened = w.open(path);
        QVERIFY2(!opened.id.empty(), ids(opened.verdict.report.violations).c_str());
        auto r = runCli({"verify", data(kDir + "/v-transposed.ggsq"), "-m", data(kGguf), "--json"});
        QCOMPARE(r.code, 0);
        const auto cliJson = QJsonDocument::fromJson(r.out).object();
        const auto guiJson =
            QJsonDocument::fromJson(QByteArray::fromStdString(opened.verdict.toJson().dump()))
                .object();
        QCOMPARE(guiJson["ok"], cliJson["ok"]);
        QCOMPARE(guiJson["violations"], cliJson["violations"]);
        QCOMPARE(guiJson["equivalence"], cliJson["equivalence"]);
        QCOMPARE(guiJson["source"], cliJson["source"]);
        QCOMPARE(opened.verdict.snapshot->lineage.operation, std::string("import"));

        // A misaligned quantized cache is stored too (the error is forceable) and named.
        auto q8 = w.open(testdata::path(kDir + "/q8-keys.ggsq"));
        QVERIFY(!q8.id.empty());
        QVERIFY(q8.verdict.report.has("import.misaligned_blocks"));
    }

    // The CLI: import (JSON shape), verify of a .ggsq, continue --temperature 0 of the import,
    // and export --format llamacpp that imports back.
    void commandLine() {
        QTemporaryDir dir;
        const QString out = dir.filePath("tim.kvsnap");
        auto r = runCli(
            {"import", data(kDir + "/tim-dog.ggsq"), "-m", data(kGguf), "-o", out, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto j = r.json();
        QCOMPARE(j["source"].toObject()["engine"].toString(), QString("llama.cpp"));
        QCOMPARE(j["source"].toObject()["format"].toString(), QString("ggsq"));
        QCOMPARE(j["source"].toObject()["version"].toInt(), 3);
        QCOMPARE(j["cache_type"].toObject()["k"].toString(), QString("f16"));
        QCOMPARE(j["tokens"].toArray().size(), 21);
        QCOMPARE(j["positions"].toArray().size(), 21);
        QVERIFY(j["violations"].isArray());

        auto v = runCli({"verify", data(kDir + "/v-transposed.ggsq"), "-m", data(kGguf), "--json"});
        QVERIFY2(v.code == 0, v.out.constData());
        QCOMPARE(v.json()["source"].toObject()["format"].toString(), QString("ggsq"));

        auto c =
            runCli({"continue", out, "-m", data(kGguf), "-n", "8", "--temperature", "0", "--json"});
        QVERIFY2(c.code == 0, c.err.constData());
        const QJsonObject ref = reference("tim-dog");
        std::vector<int32_t> want = {ref["pending_token"].toInt()};
        for (int32_t t : ids(ref["continuation"]))
            if (want.size() < 8)
                want.push_back(t);
        QCOMPARE(ids(c.json()["tokens"]), want);

        const QString ggsq = dir.filePath("back.ggsq");
        auto e = runCli({"export", out, "--format", "llamacpp", "-o", ggsq, "--transpose-v"});
        QVERIFY2(e.code == 0, e.err.constData());
        auto back = runCli({"verify", ggsq, "-m", data(kGguf), "--json"});
        QVERIFY2(back.code == 0, back.out.constData());
        QCOMPARE(back.json()["source"].toObject()["v_transposed"].toBool(), true);

        // The wrong model is named and nothing is written.
        const QString none = dir.filePath("none.kvsnap");
        auto w = runCli({"import", data(kDir + "/tim-dog.ggsq"), "-m",
                         data("models/aidreams260K/aidreams260K.bin"), "-o", none});
        QCOMPARE(w.code, 1);
        QVERIFY(w.out.contains("import.layout"));
        QVERIFY(!QFileInfo::exists(none));
        auto notState = runCli({"import", data(kGguf), "-m", data(kGguf), "-o", none});
        QCOMPARE(notState.code, 1);
        QVERIFY(notState.err.contains("not a llama.cpp state file"));
    }
};

QTEST_GUILESS_MAIN(TestInterop)
#include "tst_interop.moc"
