// State ledger tests on real weights (stories260K, aidreams260K): snapshot round trips that
// continue exactly like an uninterrupted run, every fault named by verify, restore refusal,
// equivalence, replay, drift, safetensors export and chat prompt segment maps.
#include "chat/template.h"
#include "engine/convert.h"
#include "engine/kvcacheimpl.h"
#include "engine/model.h"
#include "engine/session.h"
#include "formats/safetensors.h"
#include "snapfile/snapfile.h"
#include "state/ledger/chatprompt.h"
#include "state/probes/compare.h"
#include "state/interop/llamacpp.h"
#include "state/ledger/export.h"
#include "state/ledger/manifest.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/verifyfile.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#include <QDir>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

using namespace kvscope;
using namespace kvscope::state;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";
const QString kDreams = "models/aidreams260K/aidreams260K.bin";
const QString kDreamsTok = "models/aidreams260K/tok512.bin";

using testdata::loadModel;

std::vector<int32_t> storiesPrompt(const Model& m) {
    return m.tokenizer()->encode("Once upon a time");
}

// A session after prompt + `steps` generated tokens, captured with its sampler.
Snapshot generateAndCapture(const std::shared_ptr<const Model>& model, int steps,
                            SamplerSettings settings = {0.0f, 0.9f, 0, 42}) {
    Session s(model);
    const auto prompt = storiesPrompt(*model);
    if (!s.feed(prompt))
        qFatal("feed failed");
    Sampler sampler(settings);
    auto r = s.generate(steps, sampler);
    if (!r)
        qFatal("%s", r.message().c_str());
    CaptureOptions co;
    co.sampler = &sampler;
    co.prompt = plainPromptMeta(prompt, model->config().bosId);
    auto snap = capture(s, co);
    if (!snap)
        qFatal("%s", snap.message().c_str());
    return snap.value();
}

std::vector<uint8_t> fileBytes(const std::string& p) {
    return readFileBytes(p);
}
void writeBytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

QString ids(const Report& r) {
    QStringList l;
    for (const auto& v : r.violations)
        l << QString::fromStdString(v.id + "(" + severityName(v.severity) + "): " + v.message);
    return l.join("\n");
}

#define VERIFY_HAS(report, id)                                                                     \
    QVERIFY2((report).has(id), qPrintable(QString("expected %1 in:\n%2").arg(id, ids(report))))

} // namespace

class TestState : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_stories;
    std::shared_ptr<const Model> m_hf; // stories260K converted to a Hugging Face folder
    std::string m_clean;               // a clean snapshot of stories260K after 20 generated tokens
    std::string tmp(const char* name) const { return m_dir.filePath(name).toStdString(); }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        if (!testdata::exists(kStories))
            return;
        m_stories = loadModel(kStories);
        const std::string hf = tmp("stories-hf");
        QVERIFY(convertToHuggingFace(*m_stories, hf).isOk());
        auto hfModel = Model::load(hf);
        QVERIFY2(hfModel.isOk(), hfModel.message().c_str());
        m_hf = hfModel.value();
        m_clean = tmp("clean.kvsnap");
        QVERIFY(save(generateAndCapture(m_stories, 20), m_clean).isOk());
    }

    void roundTrip_data() {
        QTest::addColumn<float>("temperature");
        QTest::addColumn<bool>("hf");
        QTest::newRow("stories260K greedy") << 0.0f << false;
        QTest::newRow("stories260K seeded") << 1.0f << false;
        QTest::newRow("hf-converted greedy") << 0.0f << true;
        QTest::newRow("hf-converted seeded") << 1.0f << true;
    }
    // generate 40 + snapshot + continue 60 == one uninterrupted 100-token generation.
    void roundTrip() {
        KVSCOPE_REQUIRE_DATA(kStories);
        QFETCH(float, temperature);
        QFETCH(bool, hf);
        const auto& model = hf ? m_hf : m_stories;
        const SamplerSettings settings{temperature, 0.9f, 0, 1234};
        Session whole(model);
        QVERIFY(whole.feed(storiesPrompt(*model)).isOk());
        Sampler ws(settings);
        auto all = whole.generate(100, ws);
        QVERIFY(all.isOk());
        const auto& expected = all.value().tokens;
        QVERIFY2(expected.size() > 40, "the reference run stopped before 40 tokens");

        const Snapshot snap = generateAndCapture(model, 40, settings);
        const std::string path = tmp("roundtrip.kvsnap");
        QVERIFY(save(snap, path).isOk());
        auto loaded = load(path);
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        auto restored = restore(loaded.value(), model);
        QVERIFY2(restored.isOk(), restored.message().c_str());
        QVERIFY2(restored.value().report.ok(), qPrintable(ids(restored.value().report)));
        auto more = restored.value().session.generate(60, restored.value().sampler);
        QVERIFY(more.isOk());
        std::vector<int32_t> got(snap.tokens.begin() +
                                     static_cast<long>(storiesPrompt(*model).size()),
                                 snap.tokens.end());
        got.insert(got.end(), more.value().tokens.begin(), more.value().tokens.end());
        QCOMPARE(got, expected);
    }

    // generate --snapshot-out's writer copies the cache layer by layer as it writes: the file
    // holds what capture() then save() writes (the lineage's id and time aside).
    void saveCaptureWritesWhatCaptureSaves() {
        KVSCOPE_REQUIRE_DATA(kStories);
        Session s(m_stories);
        QVERIFY(s.feed(storiesPrompt(*m_stories)).isOk());
        Sampler sampler(SamplerSettings{0.8f, 0.9f, 0, 7});
        QVERIFY(s.generate(12, sampler).isOk());
        CaptureOptions co;
        co.sampler = &sampler;
        co.prompt = plainPromptMeta(storiesPrompt(*m_stories), m_stories->config().bosId);
        co.operation = "generate";
        const std::string whole = tmp("captured.kvsnap"), streamed = tmp("streamed.kvsnap");
        auto snap = capture(s, co);
        QVERIFY(snap.isOk());
        QVERIFY(save(snap.value(), whole).isOk());
        const Status st = saveCapture(s, co, streamed);
        QVERIFY2(st.isOk(), st.message().c_str());

        auto a = load(whole), b = load(streamed);
        QVERIFY2(a.isOk() && b.isOk(), (a.message() + b.message()).c_str());
        QCOMPARE(b.value().layers.size(), a.value().layers.size());
        QVERIFY(!a.value().layers.empty());
        for (std::size_t l = 0; l < a.value().layers.size(); ++l) {
            QVERIFY(*b.value().layers[l].key == *a.value().layers[l].key);
            QVERIFY(*b.value().layers[l].value == *a.value().layers[l].value);
        }
        auto ma = loadManifest(whole), mb = loadManifest(streamed);
        QVERIFY(ma.isOk() && mb.isOk());
        QVERIFY(ma.value()["lineage"] != mb.value()["lineage"]); // a new id
        ma.value().erase("lineage");
        mb.value().erase("lineage");
        QVERIFY(ma.value() == mb.value());
        auto restored = restore(b.value(), m_stories);
        QVERIFY2(restored.isOk(), restored.message().c_str());
        QVERIFY2(restored.value().report.ok(), qPrintable(ids(restored.value().report)));

        // An unwritable path is an error naming it, and nothing is left behind.
        const std::string folder = tmp("a-folder");
        QVERIFY(QDir().mkpath(QString::fromStdString(folder)));
        const Status refused = saveCapture(s, co, folder);
        QVERIFY(!refused.isOk());
        QVERIFY2(refused.message().find(folder) != std::string::npos, refused.message().c_str());
    }

    // load() uses an uncompressed cache in place from the file mapping and restore() builds the
    // cache over a second, private mapping: nothing is copied, and nothing the restored session
    // writes reaches the snapshot's bytes or the file.
    void restoreUsesTheFileInPlace() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const Snapshot snap = generateAndCapture(m_stories, 20);
        const std::string path = tmp("inplace.kvsnap");
        SaveOptions raw;
        raw.write.compress = false;
        QVERIFY(save(snap, path, raw).isOk());
        const auto fileBefore = fileBytes(path);

        auto loaded = load(path);
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const Snapshot& s = loaded.value();
        std::vector<std::vector<uint8_t>> before;
        for (const auto& l : s.layers) {
            QVERIFY(l.key->file() && l.value->file()); // borrowed, not copied
            before.push_back(l.key->toVector());
            before.push_back(l.value->toVector());
        }
        QCOMPARE(before.front(), snap.layers.front().key->toVector());

        // Another save replacing the file at the path leaves the loaded snapshot alone.
        QVERIFY(save(generateAndCapture(m_stories, 7), path).isOk());

        auto restored = restore(s, m_stories);
        QVERIFY2(restored.isOk(), restored.message().c_str());
        Session& session = restored.value().session;
        QVERIFY(session.cache().usesFileMapping());
        auto eq = checkEquivalence(session, s.lastLogits, ToleranceProfile::Exact);
        QVERIFY2(eq.isOk(), eq.message().c_str());
        QVERIFY(eq.value().equivalent);

        // The same state restored from owned bytes continues identically.
        Snapshot owned = s;
        for (auto& l : owned.layers)
            l = {makeBytes(l.key->toVector()), makeBytes(l.value->toVector())};
        auto copy = restore(owned, m_stories);
        QVERIFY(copy.isOk());
        QVERIFY(!copy.value().session.cache().usesFileMapping());
        // The probe attends to the recomputed slot beside the mapped cache instead of writing it
        // there: the same numbers, bit for bit, as writing it into a cache the session owns.
        auto asideLogits = session.recomputeLastStep();
        auto writtenLogits = copy.value().session.recomputeLastStep();
        QVERIFY(asideLogits.isOk() && writtenLogits.isOk());
        QCOMPARE(asideLogits.value(), writtenLogits.value());
        Sampler a, b;
        auto ga = session.generate(12, a);
        auto gb = copy.value().session.generate(12, b);
        QVERIFY(ga.isOk() && gb.isOk());
        QCOMPARE(ga.value().tokens, gb.value().tokens);
        QCOMPARE(session.lastLogits(), copy.value().session.lastLogits());
        QVERIFY(!session.cache().usesFileMapping()); // copied when it grew

        // With room for a run (continue -n N) the cache is built as a copy with that room: the
        // run appends without copying it again, and continues as the in-place restore did.
        auto roomy = restore(s, m_stories, {.room = 12});
        QVERIFY2(roomy.isOk(), roomy.message().c_str());
        Session& roomySession = roomy.value().session;
        QVERIFY(!roomySession.cache().usesFileMapping());
        QVERIFY(roomySession.cache().impl().capacity() >= roomySession.cache().length() + 12);
        const void* roomBuffer = roomySession.cache().impl().k[0].data_ptr();
        Sampler c;
        auto gc = roomySession.generate(12, c);
        QVERIFY(gc.isOk());
        QCOMPARE(gc.value().tokens, ga.value().tokens);
        QCOMPARE(roomySession.lastLogits(), session.lastLogits());
        QCOMPARE(roomySession.cache().impl().k[0].data_ptr(), roomBuffer);

        std::size_t i = 0;
        for (const auto& l : s.layers) {
            QCOMPARE(l.key->toVector(), before[i++]);
            QCOMPARE(l.value->toVector(), before[i++]);
        }
        QVERIFY(fileBytes(path) != fileBefore); // replaced by the second save...

        // An f16 cache over the mapping (the probe's general path: the slots are concatenated).
        Session half(m_stories, cacheFromSnapshot(snap, "cpu").value().convertedTo("f16"),
                     snap.tokens, snap.nextPosition, snap.lastLogits);
        auto halfSnap = capture(half);
        QVERIFY(halfSnap.isOk());
        const std::string halfPath = tmp("inplace-f16.kvsnap");
        QVERIFY(save(halfSnap.value(), halfPath, raw).isOk());
        auto halfLoaded = load(halfPath);
        QVERIFY(halfLoaded.isOk());
        auto halfRestored = restore(halfLoaded.value(), m_stories);
        QVERIFY2(halfRestored.isOk(), halfRestored.message().c_str());
        QVERIFY(halfRestored.value().session.cache().usesFileMapping());
        auto halfEq = checkEquivalence(halfRestored.value().session, halfLoaded.value().lastLogits);
        QVERIFY2(halfEq.isOk(), halfEq.message().c_str());
        QVERIFY(halfEq.value().comparison.top1Agree);
        auto again = load(path);
        QVERIFY(again.isOk());
        QCOMPARE(again.value().tokens.size(), size_t(storiesPrompt(*m_stories).size() + 7));
    }

    void cleanSnapshotVerifies() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto v = verifyFile(m_clean, m_stories);
        QVERIFY2(v.report.ok(), qPrintable(ids(v.report)));
        QVERIFY(v.equivalence.has_value());
        QVERIFY(v.equivalence->equivalent);
        qInfo("equivalence after restore: KL %.3g, max |dlogit| %.3g", v.equivalence->comparison.kl,
              v.equivalence->comparison.maxAbs);
        auto manifest = loadManifest(m_clean);
        QVERIFY(manifest.isOk());
        // Version 1: a state without a head mask stays readable by older readers.
        QCOMPARE(manifest.value()["kvscope_ledger"].get<int>(), 1);
        QVERIFY(kLedgerVersion >= 1);
        QVERIFY(!manifest.value()["fingerprints"]["weights"].empty());
    }

    void faultDifferentModel() {
        KVSCOPE_REQUIRE_DATA(kDreams);
        auto v = verifyFile(m_clean, loadModel(kDreams));
        QVERIFY(!v.report.ok());
        VERIFY_HAS(v.report, "weights.embedding");
        VERIFY_HAS(v.report, "weights.attention");
        VERIFY_HAS(v.report, "tokenizer.fingerprint");
    }

    // The same checkpoint with one float of layer 0's q_proj changed.
    void faultOneWeightChanged() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto bytes = fileBytes(testdata::path(kStories));
        const auto& c = m_stories->config();
        const std::size_t wq =
            28 + 4 * static_cast<std::size_t>(c.vocabSize * c.dim + c.nLayers * c.dim);
        float f;
        std::memcpy(&f, &bytes[wq + 40], 4);
        f += 0.5f;
        std::memcpy(&bytes[wq + 40], &f, 4);
        const std::string path = tmp("changed.bin");
        writeBytes(path, bytes);
        LoadOptions o;
        o.tokenizerPath = testdata::path(kStoriesTok);
        auto changed = Model::load(path, o);
        QVERIFY2(changed.isOk(), changed.message().c_str());
        auto v = verifyFile(m_clean, changed.value());
        const Violation* w = v.report.find("weights.attention");
        QVERIFY2(w, qPrintable(ids(v.report)));
        QCOMPARE(w->layer, 0);
        QVERIFY(w->message.find("q_proj") != std::string::npos);
        QVERIFY(!v.report.has("model.config"));
        QVERIFY(!v.report.has("weights.embedding"));
    }

    void faultSameShapeRandomModels() {
        ModelConfig c;
        c.dim = 64;
        c.hiddenDim = 128;
        c.nLayers = 2;
        c.nHeads = 4;
        c.nKvHeads = 2;
        c.headDim = 16;
        c.vocabSize = 100;
        c.maxContext = 64;
        auto a = Model::createRandom(c, 1), b = Model::createRandom(c, 2);
        QVERIFY(a.isOk() && b.isOk());
        Session s(a.value());
        QVERIFY(s.feed(std::vector<int32_t>{1, 5, 7, 9}).isOk());
        auto snap = capture(s);
        QVERIFY(snap.isOk());
        QVERIFY(validate(snap.value(), a.value().get()).ok());
        auto r = validate(snap.value(), b.value().get());
        VERIFY_HAS(r, "weights.attention");
        QVERIFY(!r.has("weights.norm")); // norms are 1 in both models
        QVERIFY(!r.has("model.config"));
    }

    // The HF-converted copy holds the same weights: only provenance (a note) and the
    // tokenizer (another implementation with its own fingerprint) are reported.
    void convertedCopySameWeights() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto v = verifyFile(m_clean, m_hf);
        VERIFY_HAS(v.report, "model.fingerprint");
        QCOMPARE(v.report.find("model.fingerprint")->severity, Severity::Note);
        QVERIFY(!v.report.has("weights.attention") && !v.report.has("model.config"));
        VERIFY_HAS(v.report, "tokenizer.fingerprint");
    }

    void faultDifferentTokenizer() {
        KVSCOPE_REQUIRE_DATA(kDreamsTok);
        auto v = verifyFile(m_clean, loadModel(kStories, kDreamsTok));
        VERIFY_HAS(v.report, "tokenizer.fingerprint");
        QVERIFY(!v.report.has("weights.attention"));
    }

    void faultUnknownFormatVersion() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto bytes = fileBytes(m_clean);
        bytes[8] = 7; // container format_version
        writeBytes(tmp("v7.kvsnap"), bytes);
        auto v = verifyFile(tmp("v7.kvsnap"), m_stories);
        VERIFY_HAS(v.report, "format.version");
        QVERIFY(v.report.find("format.version")->message.find("version 7") != std::string::npos);

        // A ledger manifest from the future inside a valid container.
        auto snap = load(m_clean);
        QVERIFY(snap.isOk());
        auto w = snapfile::Writer::create(tmp("ledger99.kvsnap"));
        QVERIFY(w.isOk());
        auto m = toManifest(snap.value());
        m["kvscope_ledger"] = 99;
        QVERIFY(w.value()->finish(m).isOk());
        auto v2 = verifyFile(tmp("ledger99.kvsnap"), m_stories);
        VERIFY_HAS(v2.report, "format.version");
    }

    // One flipped byte anywhere — in each blob, the manifest and the header — is named.
    void faultFlippedByte() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto reader = snapfile::Reader::open(m_clean);
        QVERIFY(reader.isOk());
        const auto original = fileBytes(m_clean);
        std::vector<std::pair<std::string, uint64_t>> spots;
        for (const auto& b : reader.value().blobs())
            if (b.storedBytes > 0)
                spots.push_back({b.name, b.offset + b.storedBytes / 2});
        spots.push_back({"manifest", original.size() - 10});
        spots.push_back({"header", 50});
        QVERIFY(spots.size() > 10);
        for (const auto& [name, offset] : spots) {
            auto bytes = original;
            bytes[offset] ^= 0x10;
            const std::string path = tmp("flipped.kvsnap");
            writeBytes(path, bytes);
            auto v = verifyFile(path, m_stories);
            QVERIFY2(v.report.has("file.checksum"),
                     qPrintable(QString::fromStdString(name) + "\n" + ids(v.report)));
            if (name.rfind("layers.", 0) == 0)
                QCOMPARE(v.report.find("file.checksum")->layer, std::stoi(name.substr(7)));
            QVERIFY(!load(path).isOk());
        }
    }

    void faultTruncated() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto original = fileBytes(m_clean);
        for (std::size_t keep :
             {original.size() - 1, original.size() / 2, std::size_t(100), std::size_t(20)}) {
            auto bytes = original;
            bytes.resize(keep);
            writeBytes(tmp("cut.kvsnap"), bytes);
            auto v = verifyFile(tmp("cut.kvsnap"), m_stories);
            VERIFY_HAS(v.report, "file.truncated");
        }
        writeBytes(tmp("cut.kvsnap"), {1, 2, 3});
        VERIFY_HAS(verifyFile(tmp("cut.kvsnap"), m_stories).report, "file.magic");
        VERIFY_HAS(verifyFile(tmp("absent.kvsnap"), m_stories).report, "file.unreadable");
    }

    void faultPositionsDisagree() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        snap.positions.pop_back();
        QVERIFY(save(snap, tmp("pos.kvsnap")).isOk());
        auto v = verifyFile(tmp("pos.kvsnap"), m_stories);
        VERIFY_HAS(v.report, "positions.count");
        QVERIFY(!v.report.ok());
        // Refused unless forced; forced, the cache cannot be built from mismatched sizes.
        QVERIFY(!restore(snap, m_stories).isOk());
    }

    void faultMaskWrongLength() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        snap.mask.push_back(1);
        QVERIFY(save(snap, tmp("mask.kvsnap")).isOk());
        auto v = verifyFile(tmp("mask.kvsnap"), m_stories);
        VERIFY_HAS(v.report, "mask.shape");
        QCOMPARE(v.report.find("mask.shape")->item, std::string("attention mask"));
    }

    // f16 K/V bytes stored under a manifest that still says f32.
    void faultDtypeBehindManifest() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        auto cache = cacheFromSnapshot(snap, "cpu");
        QVERIFY(cache.isOk());
        const KvCache half = cache.value().convertedTo("f16");
        Snapshot forged = snap;
        forged.cacheDtype = "f16";
        for (std::size_t l = 0; l < forged.layers.size(); ++l)
            forged.layers[l] = {makeBytes(half.rawKey(static_cast<int>(l))),
                                makeBytes(half.rawValue(static_cast<int>(l)))};
        auto w = snapfile::Writer::create(tmp("dtype.kvsnap"));
        QVERIFY(w.isOk());
        // Blobs of the f16 snapshot, manifest of the f32 one.
        for (std::size_t l = 0; l < forged.layers.size(); ++l)
            for (int kv = 0; kv < 2; ++kv) {
                const auto& b = kv ? forged.layers[l].value : forged.layers[l].key;
                QVERIFY(w.value()
                            ->addBlob(layerBlobName(l, kv == 1), snapfile::DType::F16,
                                      {forged.kvHeads, forged.cacheLength, forged.headDim},
                                      b->data(), b->size())
                            .isOk());
            }
        QVERIFY(w.value()
                    ->addBlob("tokens", snapfile::DType::I32, {(int64_t)snap.tokens.size()},
                              snap.tokens.data(), snap.tokens.size() * 4)
                    .isOk());
        QVERIFY(w.value()
                    ->addBlob("positions", snapfile::DType::I64, {(int64_t)snap.positions.size()},
                              snap.positions.data(), snap.positions.size() * 8)
                    .isOk());
        QVERIFY(w.value()
                    ->addBlob("mask", snapfile::DType::U8, {(int64_t)snap.mask.size()},
                              snap.mask.data(), snap.mask.size())
                    .isOk());
        QVERIFY(w.value()
                    ->addBlob("logits", snapfile::DType::F32, {(int64_t)snap.lastLogits.size()},
                              snap.lastLogits.data(), snap.lastLogits.size() * 4)
                    .isOk());
        QVERIFY(w.value()->finish(toManifest(snap)).isOk());
        auto v = verifyFile(tmp("dtype.kvsnap"), m_stories);
        VERIFY_HAS(v.report, "cache.dtype");
        QCOMPARE(v.report.find("cache.dtype")->layer, 0);
        QVERIFY(!load(tmp("dtype.kvsnap")).isOk());

        // Honestly declared f16 is fine but warned about: the model computes in f32.
        QVERIFY(save(forged, tmp("f16.kvsnap")).isOk());
        auto v2 = verifyFile(tmp("f16.kvsnap"), m_stories);
        QVERIFY2(v2.report.ok(), qPrintable(ids(v2.report)));
        VERIFY_HAS(v2.report, "cache.compute_dtype");
    }

    // A session of a model loaded with an f16 cache (LoadOptions::cacheDtype): its snapshot
    // records "f16" and stores 16-bit K/V; restored on the same model it verifies clean under
    // the f16 tolerances, and its last step recomputes exactly. The verdict can come out the
    // other way: the logits an f32 cache gives for the same tokens pass the f16 same-device
    // bounds but not the exact profile. On a model whose caches are f32 the snapshot is named
    // (cache.compute_dtype) and the restored session continues in f16.
    void f16CacheSnapshot() {
        KVSCOPE_REQUIRE_DATA(kStories);
        LoadOptions o;
        o.cacheDtype = "f16";
        auto loaded = Model::load(testdata::path(kStories), o);
        QVERIFY2(loaded, loaded.message().c_str());
        const auto half = loaded.value();
        const Snapshot snap = generateAndCapture(half, 20);
        QCOMPARE(snap.cacheDtype, std::string("f16"));
        QCOMPARE(snap.computeDtype, std::string("f32"));
        QCOMPARE(snap.layers[0].key->size(), snap.expectedLayerBytes());
        QCOMPARE(snap.expectedLayerBytes(),
                 uint64_t(snap.kvHeads * snap.cacheLength * snap.headDim * 2));
        const std::string path = tmp("f16-cache.kvsnap");
        QVERIFY(save(snap, path).isOk());
        auto manifest = loadManifest(path);
        QVERIFY(manifest.isOk());
        QCOMPARE(QString::fromStdString(manifest.value()["cache"]["dtype"].get<std::string>()),
                 QString("f16"));

        auto v = verifyFile(path, half);
        QVERIFY2(v.report.ok(), qPrintable(ids(v.report)));
        QVERIFY2(!v.report.has("cache.compute_dtype"), qPrintable(ids(v.report)));
        QVERIFY(v.equivalence && v.equivalence->equivalent);
        double scale = 1;
        for (float x : snap.lastLogits)
            scale = std::max(scale, double(std::fabs(x)));
        const Tolerance f16Bounds = toleranceFor(ToleranceProfile::SameDevice, "f16", scale);
        QCOMPARE(v.equivalence->tolerance.maxKl, f16Bounds.maxKl);
        QCOMPARE(v.equivalence->tolerance.maxAbsLogit, f16Bounds.maxAbsLogit);
        VerifyOptions exactly;
        exactly.profile = ToleranceProfile::Exact;
        auto ve = verifyFile(path, half, exactly);
        QVERIFY2(ve.equivalence && ve.equivalence->equivalent,
                 qPrintable(QString::fromStdString(toJson(*ve.equivalence).dump())));

        auto restored = restore(load(path).value(), half);
        QVERIFY2(restored, restored.message().c_str());
        Session& session = restored.value().session;
        QCOMPARE(session.cache().dtype(), std::string("f16"));

        // The same tokens through an f32 cache: prompt, then one token at a time as generated.
        Session ref(m_stories);
        const auto prompt = storiesPrompt(*m_stories);
        QVERIFY(ref.feed(prompt).isOk());
        for (std::size_t t = prompt.size(); t < snap.tokens.size(); ++t)
            QVERIFY(ref.feed(std::span<const int32_t>(snap.tokens).subspan(t, 1)).isOk());
        auto strict = checkEquivalence(session, ref.lastLogits(), ToleranceProfile::Exact);
        auto loose = checkEquivalence(session, ref.lastLogits(), ToleranceProfile::SameDevice);
        QVERIFY(strict.isOk() && loose.isOk());
        qInfo("f16 cache vs f32 cache, last step: KL %.3g, max |dlogit| %.3g (f16 bound %.3g, "
              "f32 bound %.3g)",
              loose.value().comparison.kl, loose.value().comparison.maxAbs,
              loose.value().tolerance.maxAbsLogit,
              toleranceFor(ToleranceProfile::SameDevice, "f32", scale).maxAbsLogit);
        QVERIFY(loose.value().comparison.maxAbs > 0);
        QVERIFY(!strict.value().equivalent);
        QVERIFY(loose.value().equivalent);

        // On a model whose caches are f32: named, not an error; the session stays f16.
        auto v32 = verifyFile(path, m_stories);
        QVERIFY2(v32.report.ok(), qPrintable(ids(v32.report)));
        VERIFY_HAS(v32.report, "cache.compute_dtype");
        QVERIFY(v32.equivalence && v32.equivalence->equivalent);
        auto on32 = restore(load(path).value(), m_stories);
        QVERIFY2(on32, on32.message().c_str());
        Sampler greedy({0.0f, 0.9f, 0, 42});
        Sampler greedy2({0.0f, 0.9f, 0, 42});
        auto a = on32.value().session.generate(6, greedy);
        auto b = session.generate(6, greedy2);
        QVERIFY(a.isOk() && b.isOk());
        QCOMPARE(on32.value().session.cache().dtype(), std::string("f16"));
        QCOMPARE(a.value().tokens, b.value().tokens);
        QCOMPARE(on32.value().session.lastLogits(), session.lastLogits());
    }

    // Absurd counts in the manifest are refused before anything is sized from them.
    void absurdShapesRejected() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        const std::vector<std::pair<std::string, std::string>> edits = {
            {"cache", "length"}, {"cache", "kv_heads"}, {"cache", "layers"}, {"tokens", "count"}};
        for (const auto& [section, key] : edits) {
            auto m = toManifest(snap);
            m[section][key] = int64_t{1} << 50;
            const std::string path = tmp("absurd.kvsnap");
            auto w = snapfile::Writer::create(path);
            QVERIFY(w.isOk());
            QVERIFY(w.value()->finish(m).isOk());
            auto v = verifyFile(path, m_stories);
            VERIFY_HAS(v.report, "manifest.invalid");
        }
        // Plausible-looking but wrong dims: the blobs do not match, nothing is allocated.
        auto m = toManifest(snap);
        m["cache"]["kv_heads"] = 4096;
        m["cache"]["head_dim"] = 4096;
        auto w = snapfile::Writer::create(tmp("absurd2.kvsnap"));
        const auto& b = *snap.layers[0].key;
        QVERIFY(w.value()
                    ->addBlob("layers.0.k", snapfile::DType::F32, {(int64_t)b.size() / 4}, b.data(),
                              b.size())
                    .isOk());
        QVERIFY(w.value()->finish(m).isOk());
        VERIFY_HAS(verifyFile(tmp("absurd2.kvsnap"), m_stories).report, "cache.blob");
    }

    // Every ledger field is read with its type checked: a wrong type is refused naming the
    // field (it used to read as "" or be skipped), unknown keys are ignored.
    void wrongTypedFieldsNamed() {
        KVSCOPE_REQUIRE_DATA(kStories);
        using json = nlohmann::json;
        auto base = toManifest(load(m_clean).value());
        base["sampler"] = {{"temperature", 0.8},
                           {"top_p", 0.9},
                           {"top_k", 0},
                           {"seed", "42"},
                           {"rng_state", "42"}};
        base["future_key"] = json::array({1, 2, 3});
        QVERIFY_THROWS_NO_EXCEPTION(snapshotFromManifest(base)); // the base itself reads
        const std::vector<std::tuple<std::string, json, std::string>> cases = {
            {"/lineage/created_at", 12345, "lineage.created_at is a number, expected a string"},
            {"/lineage", json::array({1, 2}), "lineage is an array, expected an object"},
            {"/lineage/parent_id", nullptr, "lineage.parent_id is a null"},
            {"/model/path", 12345, "model.path"},
            {"/model/config/max_context", int64_t{1} << 62, "max_context"},
            {"/cache/key_blob", 12345, "cache.key_blob"},
            {"/cache/value_blob", "layers.{layer}.k", "cache.value_blob"},
            {"/cache/layout", json::object(), "cache.layout"},
            {"/positions/blob", "tokens", "positions.blob"},
            {"/positions/rope", json::array({1, 2}), "positions.rope is an array"},
            {"/positions/rope/theta", "12", "positions.rope.theta is a string, expected a number"},
            {"/positions/rope/max_context", "12", "positions.rope.max_context"},
            {"/tokens/blob", 12345, "tokens.blob"},
            {"/mask/blob", 12345, "mask.blob"},
            {"/logits/blob", 12345, "logits.blob"},
            {"/prompt/system_prompt", 12345, "prompt.system_prompt"},
            {"/prompt/chat_template", "x", "prompt.chat_template is a string"},
            {"/prompt/segments/0/role", 12345, "prompt.segments[0].role"},
            {"/prompt/segments/0/kind", 12345, "prompt.segments[0].kind"},
            {"/fingerprints/model", 12345, "fingerprints.model"},
            {"/fingerprints/tokenizer", true, "fingerprints.tokenizer is a boolean"},
            {"/fingerprints/weights/0/dtype", 12345, "fingerprints.weights[0].dtype"},
            {"/fingerprints/weights/1/shape/0", "x", "fingerprints.weights[1].shape[0]"},
            {"/sampler", json::array({1, 2}), "sampler is an array, expected an object"},
            {"/sampler/top_p", "12", "sampler.top_p is a string, expected a number"},
            {"/sampler/top_k", int64_t{1} << 40, "sampler.top_k = 1099511627776 is outside"},
            {"/sampler/seed", "-1", "sampler.seed = \"-1\" is not a decimal number"},
            {"/sampler/rng_state", "18446744073709551616", "sampler.rng_state"},
        };
        for (const auto& [pointer, value, expected] : cases) {
            json m = base;
            m[json::json_pointer(pointer)] = value;
            try {
                (void)snapshotFromManifest(m);
                QFAIL(qPrintable(QString::fromStdString(pointer + " was accepted")));
            } catch (const KvError& e) {
                const std::string msg = e.what();
                QVERIFY2(msg.find(expected) != std::string::npos,
                         qPrintable(QString::fromStdString(pointer + ": " + msg)));
            }
        }
        // Through a file, the path is said once (it used to be printed twice).
        json m = base;
        m["sampler"]["top_p"] = "12";
        const std::string path = tmp("wrongtype.kvsnap");
        auto w = snapfile::Writer::create(path);
        QVERIFY(w.isOk());
        QVERIFY(w.value()->finish(m).isOk());
        auto r = load(path);
        QVERIFY(!r);
        QCOMPARE(r.message(), path + ": manifest: sampler.top_p is a string, expected a number");
    }

    // An offset position record is named by its root cause, an error (the recomputed layer-0
    // keys match at the slot index, not at the recorded position), not only by a warning.
    void positionOffsetNamedAsError() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        for (auto& p : snap.positions)
            p += 3;
        snap.nextPosition += 3;
        QVERIFY(save(snap, tmp("offset.kvsnap")).isOk());
        auto v = verifyFile(tmp("offset.kvsnap"), m_stories);
        VERIFY_HAS(v.report, "positions.start");
        VERIFY_HAS(v.report, "positions.offset");
        QCOMPARE(v.report.find("positions.offset")->severity, Severity::Error);
        QVERIFY(v.report.find("positions.offset")->message.find("offset by 3") !=
                std::string::npos);
        QVERIFY(v.report.forceable()); // semantic: a diagnostic restore may be forced
        auto rp = replay(snap, m_stories);
        QVERIFY(rp.isOk());
        QVERIFY(!rp.value().positionsMatch);
    }

    // A position record forged far below zero (the keys rotated at 0..n): no slot can be
    // recomputed there, which is itself a structural finding — never a warning that passes.
    // A shift that leaves some slots at valid positions still compares keys: the first
    // sample moves to the nearest slot that can be recomputed and names the offset.
    void negativePositionsAreStructural() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        for (auto& p : snap.positions)
            p -= 1000;
        snap.nextPosition -= 1000;
        auto v = verifySnapshot(snap, m_stories);
        VERIFY_HAS(v.report, "positions.range");
        QVERIFY(v.report.find("positions.range")->structural);
        QVERIFY(v.report.find("positions.range")->message.find("-1000 (negative)") !=
                std::string::npos);
        QVERIFY(!v.report.ok());
        QVERIFY(!v.report.forceable());
        QVERIFY(!v.report.has("positions.start")); // the range is the finding, not an offset
        auto forced = restore(snap, m_stories, {.force = true});
        QVERIFY(!forced);
        QVERIFY(forced.message().find("positions.range") != std::string::npos);

        auto shifted = load(m_clean).value();
        for (auto& p : shifted.positions)
            p -= 5;
        shifted.nextPosition -= 5;
        auto w = verifySnapshot(shifted, m_stories);
        VERIFY_HAS(w.report, "positions.range");
        VERIFY_HAS(w.report, "positions.offset");
        QVERIFY(w.report.find("positions.offset")->message.find("offset by -5") !=
                std::string::npos);

        // Beyond the context: the same finding, from the other side.
        auto far = load(m_clean).value();
        const int64_t context = far.config.maxContext;
        for (auto& p : far.positions)
            p += context;
        far.nextPosition += context;
        VERIFY_HAS(verifySnapshot(far, m_stories).report, "positions.range");
        // The clean state has none.
        QVERIFY(!verifyFile(m_clean, m_stories).report.has("positions.range"));
    }

    // continue judges a state as verify does: stored logits the restored cache does not
    // reproduce (logits.equivalence) refuse the restore unless forced.
    void restoreRefusesWhatVerifyFails() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        QVERIFY(restore(snap, m_stories).isOk()); // the clean state restores
        auto& logits = snap.lastLogits;
        const auto top = std::max_element(logits.begin(), logits.end()) - logits.begin();
        std::rotate(logits.begin(), logits.begin() + 1, logits.end());
        QVERIFY(std::max_element(logits.begin(), logits.end()) - logits.begin() != top);
        const std::string path = tmp("wrong-logits.kvsnap");
        QVERIFY(save(snap, path).isOk());
        auto v = verifyFile(path, m_stories);
        VERIFY_HAS(v.report, "logits.equivalence");
        QVERIFY(v.report.forceable());
        auto refused = restore(snap, m_stories);
        QVERIFY(!refused);
        QVERIFY2(refused.message().find("logits.equivalence") != std::string::npos,
                 refused.message().c_str());
        QVERIFY(restore(snap, m_stories, {.force = true}).isOk());
        QVERIFY(restore(snap, m_stories, {.equivalence = false}).isOk());
    }

    // Neither export format has a per-head mask: a state whose head mask hides slots (or is
    // malformed) is refused by name instead of written as if every head saw every slot.
    void exportRefusesHiddenHeads() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        const auto n =
            snap.layers.size() * static_cast<std::size_t>(snap.kvHeads * snap.cacheLength);
        snap.headMask.assign(n, 1);
        QVERIFY(state::exportSafetensors(snap, tmp("all-visible.safetensors")).isOk());
        snap.headMask[static_cast<std::size_t>(snap.cacheLength) + 3] = 0; // layer 0, head 1
        auto st = state::exportSafetensors(snap, tmp("hidden.safetensors"));
        QVERIFY(!st);
        QVERIFY2(st.message().find("head_mask hides slot 3 of layer 0 KV head 1") !=
                     std::string::npos,
                 st.message().c_str());
        QVERIFY(!QFileInfo::exists(QString::fromStdString(tmp("hidden.safetensors"))));
        auto lc = state::llamacpp::exportSequence(snap, {});
        QVERIFY(!lc);
        QVERIFY2(lc.message().find("head_mask") != std::string::npos, lc.message().c_str());
        snap.headMask[static_cast<std::size_t>(snap.cacheLength) + 3] = 2;
        auto bad = state::llamacpp::exportSequence(snap, {});
        QVERIFY(!bad);
        QVERIFY2(bad.message().find("is 2, not 0 or 1") != std::string::npos,
                 bad.message().c_str());
        snap.headMask.pop_back();
        QVERIFY(state::exportSafetensors(snap, tmp("short.safetensors"))
                    .message()
                    .find("head_mask holds") != std::string::npos);
    }

    void validationUnits() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        Snapshot dup = snap;
        dup.tokens.insert(dup.tokens.begin(), dup.tokens[0]);
        VERIFY_HAS(validate(dup, nullptr), "prompt.duplicate_bos");
        VERIFY_HAS(validate(dup, nullptr), "cache.length");
        Snapshot nan = snap;
        auto bytes = nan.layers[3].value->toVector();
        const float inf = INFINITY;
        const std::size_t at =
            static_cast<std::size_t>((1 * nan.cacheLength + 7) * nan.headDim + 2); // head 1, pos 7
        std::memcpy(&bytes[at * 4], &inf, 4);
        nan.layers[3].value = makeBytes(bytes);
        auto r = validate(nan, nullptr);
        const Violation* v = r.find("cache.nonfinite");
        QVERIFY2(v, qPrintable(ids(r)));
        QCOMPARE(v->layer, 3);
        QCOMPARE(v->head, 1);
        QCOMPARE(v->position, int64_t{7});
        Snapshot next = snap;
        next.nextPosition += 1;
        VERIFY_HAS(validate(next, nullptr), "positions.next");
        // Every catalogued check has an item and an explanation.
        for (const auto& c : allChecks())
            QVERIFY(!c.item.empty() && !c.explanation.empty());
    }

    // load() scans a borrowed cache blob for NaN/Inf while its checksum reads it, chunk by
    // chunk (snapfile::Reader::kBorrowChunk); validate() uses that scan instead of a second
    // pass. It must name the same layer, head and position as a fresh scan of owned bytes,
    // including past the first chunk.
    void nonFiniteFoundWhileLoading() {
        KVSCOPE_REQUIRE_DATA(kStories);
        Snapshot big = load(m_clean).value();
        big.cacheLength = 2100; // [kv_heads, 2100, head_dim] f32 blobs span two chunks
        const std::size_t n = static_cast<std::size_t>(big.kvHeads * big.cacheLength * big.headDim);
        QVERIFY(n * 4 > snapfile::Reader::kBorrowChunk);
        auto at = [&](int head, int64_t pos, int dim) {
            return static_cast<std::size_t>((head * big.cacheLength + pos) * big.headDim + dim);
        };
        for (std::size_t l = 0; l < big.layers.size(); ++l) {
            std::vector<float> k(n), v(n);
            for (std::size_t i = 0; i < n; ++i) {
                k[i] = std::sin(0.01f * static_cast<float>(i + l));
                v[i] = std::cos(0.01f * static_cast<float>(i + l));
            }
            if (l == 0)
                k[at(0, 3, 1)] = NAN; // first chunk
            if (l == 1) {
                v[at(3, 2050, 5)] = -INFINITY; // second chunk...
                v[at(3, 2090, 0)] = NAN;       // ...and a later one: the first is named
            }
            auto bytesOf = [](const std::vector<float>& f) {
                std::vector<uint8_t> b(f.size() * 4);
                std::memcpy(b.data(), f.data(), b.size());
                return makeBytes(std::move(b));
            };
            big.layers[l] = {bytesOf(k), bytesOf(v)};
        }
        QVERIFY(at(3, 2050, 5) * 4 > snapfile::Reader::kBorrowChunk);
        const std::string path = tmp("nonfinite-big.kvsnap");
        SaveOptions raw;
        raw.write.compress = false;
        QVERIFY(save(big, path, raw).isOk());
        auto loaded = load(path);
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const Snapshot& s = loaded.value();
        for (std::size_t l = 0; l < s.layers.size(); ++l) {
            for (const Bytes& b : {s.layers[l].key, s.layers[l].value}) {
                QVERIFY(b->file()); // borrowed: scanned while loading
                QVERIFY(b->finiteScan() && b->finiteScan()->dtype == "f32");
                QCOMPARE(b->finiteScan()->firstNonFinite, firstNonFinite("f32", b->span()));
            }
        }
        QCOMPARE(s.layers[0].key->finiteScan()->firstNonFinite, uint64_t{at(0, 3, 1)});
        QCOMPARE(s.layers[1].value->finiteScan()->firstNonFinite, uint64_t{at(3, 2050, 5)});
        QCOMPARE(s.layers[2].key->finiteScan()->firstNonFinite, uint64_t{n}); // none

        // The same report as from owned bytes, which validate() scans itself.
        Snapshot owned = s;
        for (auto& l : owned.layers)
            l = {makeBytes(l.key->toVector()), makeBytes(l.value->toVector())};
        QVERIFY(!owned.layers[0].key->finiteScan());
        auto nonFinite = [](const Report& r) {
            std::vector<std::tuple<int, int, int64_t, std::string>> out;
            for (const auto& v : r.violations)
                if (v.id == "cache.nonfinite")
                    out.emplace_back(v.layer, v.head, v.position, v.message);
            return out;
        };
        const auto fromScan = nonFinite(validate(s, nullptr));
        QCOMPARE(fromScan, nonFinite(validate(owned, nullptr)));
        QCOMPARE(fromScan.size(), size_t(2));
        QCOMPARE(std::get<0>(fromScan[1]), 1);
        QCOMPARE(std::get<1>(fromScan[1]), 3);
        QCOMPARE(std::get<2>(fromScan[1]), int64_t{2050});
        QVERIFY(std::get<3>(fromScan[1]).find("layer 1 V head 3 position 2050") !=
                std::string::npos);
    }

    void replayAndDrift() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        auto rp = replay(snap, m_stories);
        QVERIFY2(rp.isOk(), rp.message().c_str());
        QCOMPARE(rp.value().cache.firstDivergingLayer, -1);
        for (const auto& l : rp.value().cache.layers)
            QVERIFY(l.keyCosine > 0.99999 && l.valueCosine > 0.99999);

        // One corrupted layer: replay names it and the first diverging position.
        Snapshot bad = snap;
        auto bytes = bad.layers[2].key->toVector();
        const std::size_t at = static_cast<std::size_t>(5 * bad.headDim) * 4; // head 0, pos 5
        float f;
        std::memcpy(&f, &bytes[at], 4);
        f += 1.0f;
        std::memcpy(&bytes[at], &f, 4);
        bad.layers[2].key = makeBytes(bytes);
        auto rb = replay(bad, m_stories);
        QVERIFY(rb.isOk());
        QCOMPARE(rb.value().cache.firstDivergingLayer, 2);
        QCOMPARE(rb.value().cache.firstDivergingPosition, int64_t{5});

        auto a = restore(snap, m_stories), b = restore(snap, m_stories),
             c = restore(bad, m_stories);
        QVERIFY(a.isOk() && b.isOk() && c.isOk());
        auto same = drift(a.value().session, b.value().session, 20, a.value().sampler);
        QVERIFY(same.isOk());
        QCOMPARE(same.value().firstDivergingStep, -1);
        QCOMPARE(same.value().maxAbs, 0.0);
        auto off = drift(a.value().session, c.value().session, 20, a.value().sampler);
        QVERIFY(off.isOk());
        QVERIFY(off.value().maxAbs > 0);
        QCOMPARE(off.value().tokens, same.value().tokens); // teacher-forced on A
        qInfo("drift vs corrupted layer 2: max KL %.3g, max |dlogit| %.3g, first diverging step %d",
              off.value().maxKl, off.value().maxAbs, off.value().firstDivergingStep);
    }

    void exportSafetensors() {
        KVSCOPE_REQUIRE_DATA(kStories);
        auto snap = load(m_clean).value();
        const std::string path = tmp("state.safetensors");
        QVERIFY(state::exportSafetensors(snap, path).isOk());
        auto f = safetensors::File::open(path);
        QVERIFY2(f.isOk(), f.message().c_str());
        const auto* k = f.value().tensor("past_key_values.4.key");
        QVERIFY(k);
        QCOMPARE(k->shape, (std::vector<int64_t>{1, snap.kvHeads, snap.cacheLength, snap.headDim}));
        QCOMPARE(f.value().readRaw("past_key_values.4.value"), snap.layers[4].value->toVector());
        QVERIFY(f.value().tensor("input_ids") && f.value().tensor("position_ids"));
        auto meta = nlohmann::json::parse(f.value().metadata().at("kvscope_manifest"));
        QCOMPARE(meta["lineage"]["id"].get<std::string>(), snap.lineage.id);
    }

    void chatPromptSegments() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const QString tmplPath = "chat-templates/chatml.jinja";
        KVSCOPE_REQUIRE_DATA(tmplPath);
        auto tmpl = chat::Template::parse(readFileText(testdata::path(tmplPath)), "chatml");
        QVERIFY(tmpl.isOk());
        nlohmann::ordered_json messages = nlohmann::ordered_json::array(
            {{{"role", "system"}, {"content", "You tell stories."}},
             {{"role", "user"}, {"content", "Tell me about a cat."}}});
        ChatPromptOptions o;
        o.render.addGenerationPrompt = true;
        o.addBosIfMissing = true;
        o.templateName = "chatml";
        auto p = buildChatPrompt(*m_stories->tokenizer(), tmpl.value(), messages, o);
        QVERIFY2(p.isOk(), p.message().c_str());
        const auto& segs = p.value().meta.segments;
        QVERIFY(segs.size() >= 3);
        QCOMPARE(segs.front().begin, int64_t{0});
        QCOMPARE(segs.back().end, static_cast<int64_t>(p.value().tokens.size()));
        for (std::size_t i = 1; i < segs.size(); ++i)
            QCOMPARE(segs[i].begin, segs[i - 1].end);
        QCOMPARE(p.value().meta.systemPrompt, std::string("You tell stories."));
        // The segment map travels with the snapshot.
        Session s(m_stories);
        QVERIFY(s.feed(p.value().tokens).isOk());
        CaptureOptions co;
        co.prompt = p.value().meta;
        auto snap = capture(s, co);
        QVERIFY(snap.isOk());
        QVERIFY(save(snap.value(), tmp("chat.kvsnap")).isOk());
        auto back = load(tmp("chat.kvsnap"));
        QVERIFY(back.isOk());
        QCOMPARE(back.value().prompt.segments, segs);
        QCOMPARE(back.value().prompt.chatTemplateHash, tmpl.value().hash());
    }

    // A state without a recorded sampler gets the sampler.missing note only when it holds
    // tokens: an empty session has nothing to continue identically (the GUI's empty live
    // session showed the note).
    void samplerNoteOnlyWithTokens() {
        KVSCOPE_REQUIRE_DATA(kStories);
        Session empty(m_stories);
        auto e = capture(empty);
        QVERIFY2(e.isOk(), e.message().c_str());
        QVERIFY(!e.value().hasSampler);
        QVERIFY(!verifySnapshot(e.value(), m_stories).report.has("sampler.missing"));
        Session fed(m_stories);
        QVERIFY(fed.feed(std::vector<int32_t>{1, 403, 407}).isOk());
        auto f = capture(fed);
        QVERIFY2(f.isOk(), f.message().c_str());
        QVERIFY(verifySnapshot(f.value(), m_stories).report.has("sampler.missing"));
    }
};

QTEST_GUILESS_MAIN(TestState)
#include "tst_state.moc"
