// Qwen3 and Gemma 2/3 against an independent implementation. Each fixture in tests/data/archs
// is a tiny random model kvscope wrote as GGUF (Model::createRandom + convertToGguf, pinned
// here: the writer must still produce the committed bytes) and the logits llama.cpp computed
// on that file (README there). The same model then goes through the decode kernels, the
// trainer's batched forward, a Hugging Face folder and back, and a snapshot whose ledger must
// know its sliding windows. KVSCOPE_WRITE_FIXTURES=1 rewrites the GGUF files (then rerun
// llama.cpp on them, as the README says).
#include "engine/attention.h"
#include "engine/convert.h"
#include "engine/forwardcommon.h"
#include "engine/model.h"
#include "engine/modelimpl.h"
#include "formats/gguf.h"
#include "engine/rerotate.h"
#include "engine/session.h"
#include "logitstest.h"
#include "state/interop/llamacpp.h"
#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"
#include "util/fileio.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

using namespace kvscope;
using namespace logitstest;

namespace {

const std::string kDir = KVSCOPE_TESTS_DIR "/data/archs/";

ModelConfig tiny(const std::string& hfArchitecture) {
    ModelConfig c;
    c.hfArchitecture = hfArchitecture;
    c.dim = 64;
    c.hiddenDim = 96;
    c.nHeads = 4;
    c.nKvHeads = 2;
    c.headDim = 32;
    c.vocabSize = 128;
    c.maxContext = 256;
    c.normEps = 1e-6;
    return c;
}

// The three fixtures: every variation the forward pass has, sized so that each one shows.
ModelConfig fixtureConfig(const std::string& name) {
    if (name == "phi3long") {
        // Phi-3 128k's long RoPE: the long factors apply (context 256 > original 64, llama.cpp's
        // rule for its context of 256), cos and sin times sqrt(1 + ln 4 / ln 64).
        ModelConfig c = fixtureConfig("phi3");
        auto& s = c.ropeScaling;
        s.type = "longrope";
        s.originalMaxPositions = 64;
        s.factor = 4.0;
        s.attentionFactor = std::sqrt(1.0 + std::log(4.0) / std::log(64.0));
        for (int i = 0; i < 8; ++i) {
            s.shortFactor.push_back(1.0 + 0.25 * i);
            s.longFactor.push_back(2.0 + 0.75 * i);
        }
        return c;
    }
    if (name == "phi3") {
        ModelConfig c = tiny("Phi3ForCausalLM");
        c.nLayers = 2;
        c.headDim = 16;
        // A window on every layer, wider than the fixture: llama.cpp disables Phi-3's window,
        // so past it the two engines would differ by design (gemma tests the window).
        c.slidingWindow = 64;
        c.slidingLayers = {true, true};
        return c;
    }
    if (name == "qwen3") {
        ModelConfig c = tiny("Qwen3ForCausalLM");
        c.nLayers = 2;
        c.headDim = 24; // not dim / heads: llama.cpp reads key_length
        c.ropeTheta = 1e6;
        c.qkNorm = true;
        return c;
    }
    ModelConfig c = tiny(name == "gemma2" ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM");
    c.activation = "gelu_tanh";
    c.postNorms = true;
    c.embedScale = std::sqrt(64.0);
    c.tiedEmbeddings = true;
    c.slidingWindow = 5; // the 20-token fixture runs well past it
    if (name == "gemma2") {
        c.nLayers = 3;
        c.slidingLayers = {true, false, true};
        c.attnSoftcap = 1.0; // small enough to bend these scores (Gemma 2 ships 50 and 30)
        c.finalSoftcap = 2.0;
    } else {
        c.nLayers = 4;
        c.nKvHeads = 1;
        c.slidingLayers = {true, true, false, true};
        c.qkNorm = true;
        c.ropeTheta = 1e6;
        c.ropeThetaLocal = 1e4;
    }
    return c;
}

std::shared_ptr<const Model> fixtureModel(const std::string& name) {
    // Weights N(0, 0.16): scores and logits of order 1, so that caps and norms matter.
    auto m = Model::createRandom(fixtureConfig(name), 2026, "cpu", 0.16);
    if (!m)
        qFatal("%s", m.message().c_str());
    return m.value();
}

std::shared_ptr<const Model> load(const std::string& path) {
    auto r = Model::load(path);
    if (!r)
        qFatal("%s", r.message().c_str());
    return r.value();
}

std::vector<int32_t> fixtureTokens() {
    std::vector<int32_t> ids;
    for (int i = 0; i < 20; ++i)
        ids.push_back((i * 37 + 11) % 128);
    return ids;
}

} // namespace

class TestArchitectures : public QObject {
    Q_OBJECT

private slots:
    void matchesLlamaCpp_data() {
        QTest::addColumn<QString>("name");
        for (const char* n : {"qwen3", "gemma2", "gemma3", "phi3", "phi3long"})
            QTest::newRow(n) << QString(n);
    }

    // The committed GGUF is what kvscope writes for the fixture model today; loaded back it
    // has the fixture's config; its logits are llama.cpp's, prefill and decode alike.
    void matchesLlamaCpp() {
        QFETCH(QString, name);
        const std::string n = name.toStdString(), gguf = kDir + n + ".gguf";
        const auto made = fixtureModel(n);
        QTemporaryDir tmp;
        const std::string written = std::getenv("KVSCOPE_WRITE_FIXTURES")
                                        ? gguf
                                        : tmp.filePath("fixture.gguf").toStdString();
        ConvertOptions o;
        o.overwrite = true;
        QVERIFY2(convertToGguf(*made, written, o).isOk(), n.c_str());
        QCOMPARE(readFileText(written, 1 << 24), readFileText(gguf, 1 << 24));

        const auto model = load(gguf);
        ModelConfig expected = fixtureConfig(n);
        expected.sourceFormat = "gguf";
        expected.weightDtype = "f32";
        expected.normEps = static_cast<float>(expected.normEps); // GGUF stores f32s
        expected.ropeScaling.attentionFactor =
            static_cast<float>(expected.ropeScaling.attentionFactor);
        const nlohmann::json diff = nlohmann::json::diff(toJson(expected), toJson(model->config()));
        QVERIFY2(diff.empty(), diff.dump().c_str());

        const auto ref = nlohmann::json::parse(readFileText(kDir + n + ".logits.json"));
        const auto ids = ref["tokens"].get<std::vector<int32_t>>();
        QCOMPARE(ids, fixtureTokens());
        // Stock llama.cpp reads GELU from a table indexed by the f16 rounding of its input
        // (ggml-cpu vec.h, GGML_GELU_FP16): Gemma's logits move by ~3e-3 there. The tight
        // reference is the same llama.cpp built with that define off (exact f32 GELU).
        const bool gelu = ref.contains("logits_exact_gelu");
        const auto stock = flatRows(ref["logits"]);
        const auto theirs = gelu ? flatRows(ref["logits_exact_gelu"]) : stock;
        const int64_t V = model->config().vocabSize;
        for (bool oneByOne : {false, true}) {
            const auto ours = logits(model, ids, oneByOne);
            const double d = maxAbsDiff(ours, theirs), dStock = maxAbsDiff(ours, stock);
            qInfo("%s %s: max |kvscope - llama.cpp| = %.2g (stock llama.cpp: %.2g; logits up "
                  "to %.2g)",
                  n.c_str(), oneByOne ? "decode" : "prefill", d, dStock, maxAbs(theirs));
            QVERIFY(d < 1e-4);
            QVERIFY(dStock < 1e-2);
            for (std::size_t p = 0; p < ids.size(); ++p) {
                QCOMPARE(argmaxAt(ours, p, V), argmaxAt(theirs, p, V));
            }
        }
        // The model built in memory computes the same (the GGUF holds its f32 weights).
        QVERIFY(maxAbsDiff(logits(made, ids, false), theirs) < 1e-4);
    }

    void otherPathsAgree_data() { matchesLlamaCpp_data(); }

    // The trainer's batched forward and a Hugging Face folder (Gemma's norms stored minus 1)
    // give the session's logits; the folder's config reads back as the same config.
    void otherPathsAgree() {
        QFETCH(QString, name);
        const std::string n = name.toStdString();
        const auto model = load(kDir + n + ".gguf");
        const auto ids = fixtureTokens();
        const auto session = logits(model, ids, false);

        at::Tensor tokens = at::empty({2, int64_t(ids.size())}, at::kLong);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            tokens[0][long(i)] = ids[i];
            tokens[1][long(i)] = ids[i];
        }
        at::Tensor batch = forwardLlamaBatch(model->impl(), tokens)[1].contiguous();
        std::vector<float> b(batch.data_ptr<float>(), batch.data_ptr<float>() + batch.numel());
        QVERIFY(maxAbsDiff(b, session) < 1e-4);

        QTemporaryDir tmp;
        const std::string hf = tmp.filePath("hf").toStdString();
        QVERIFY(convertToHuggingFace(*model, hf).isOk());
        const auto config = nlohmann::json::parse(readFileText(hf + "/config.json"));
        if (n.rfind("gemma", 0) == 0) {
            QCOMPARE(config["hidden_activation"].get<std::string>(),
                     std::string("gelu_pytorch_tanh"));
            QCOMPARE(config["layer_types"][0].get<std::string>(), std::string("sliding_attention"));
        }
        if (n == "phi3")
            QCOMPARE(config["sliding_window"].get<int64_t>(), int64_t(64));
        const auto back = load(hf);
        if (n == "phi3") {
            // Phi-3's checkpoints hold fused q/k/v and gate/up matrices; the engine binds row
            // ranges of them, and names the fused tensor and the rows.
            const auto& sources = back->impl().sources;
            QCOMPARE(sources.at("model.layers.1.self_attn.k_proj.weight").name,
                     std::string("model.layers.1.self_attn.qkv_proj.weight (rows 64..96)"));
            QCOMPARE(sources.at("model.layers.0.mlp.up_proj.weight").name,
                     std::string("model.layers.0.mlp.gate_up_proj.weight (rows 96..192)"));
            QVERIFY(back->mappedWeightBytes() > 0);
        }
        ModelConfig a = model->config(), c = back->config();
        a.sourceFormat = c.sourceFormat = "";
        QCOMPARE(toJson(c).dump(), toJson(a).dump());
        QVERIFY(maxAbsDiff(logits(back, ids, false), session) < 1e-5);
    }

    // Sliding windows are the model's, not the cache's: the cache keeps every slot, a
    // sliding layer's attention sees only the last `window` positions, and a snapshot's
    // ledger carries the window, so a model with another one is refused by name.
    void slidingWindowInLedgerAndViews() {
        const auto model = load(kDir + "gemma3.gguf");
        const auto& c = model->config();
        QVERIFY(c.isSliding(0) && !c.isSliding(2));
        Session s(model);
        QueryRecorder queries(1 << 20);
        s.setObserver(&queries);
        const auto ids = fixtureTokens();
        QVERIFY(s.feed(ids).isOk());
        QCOMPARE(s.cache().length(), int64_t(ids.size())); // every slot kept
        for (int layer : {0, 2}) {
            auto p = attentionPattern(*model, s.cache(), queries.queries(layer),
                                      queries.rows(layer), layer, 1);
            QVERIFY2(p.isOk(), p.message().c_str());
            const auto& pattern = p.value();
            const int64_t last = pattern.queries - 1;
            int64_t seen = 0;
            for (int64_t k = 0; k < pattern.keys; ++k) {
                const float prob = pattern.probs[size_t(last * pattern.keys + k)];
                QCOMPARE(pattern.visible(last, k), prob > 0);
                seen += pattern.visible(last, k);
            }
            QCOMPARE(seen, layer == 0 ? c.slidingWindow : int64_t(ids.size()));
        }

        auto snap = state::capture(s);
        QVERIFY(snap.isOk());
        QVERIFY(state::validate(snap.value(), model.get()).ok());
        ModelConfig wider = c;
        wider.slidingWindow = 8;
        auto other = Model::createRandom(wider, 2026, "cpu", 0.16);
        QVERIFY(other.isOk());
        const auto report = state::validate(snap.value(), other.value().get());
        const auto* v = report.find("model.config");
        QVERIFY(v);
        QVERIFY2(v->message.find("sliding_window 5 -> 8") != std::string::npos, v->message.c_str());
        // llama.cpp would hold these layers in a second, window-sized cache: not written.
        auto exported = state::llamacpp::exportSequence(snap.value());
        QVERIFY(!exported.isOk());
        QVERIFY2(exported.message().find("sliding-window") != std::string::npos,
                 exported.message().c_str());
    }

    // Gemma 3's sliding layers rotate with their own base: moving a state's positions
    // re-rotates each layer with its frequencies, so continuing from the moved state gives
    // the logits of a run made at those positions.
    void rerotationUsesEachLayersBase() {
        const auto model = load(kDir + "gemma3.gguf");
        const auto ids = fixtureTokens();
        const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 8);
        Session a(model);
        QVERIFY(a.feed(prompt).isOk());
        auto snap = state::capture(a);
        QVERIFY(snap.isOk());
        state::Snapshot moved = snap.value();
        std::vector<int64_t> to = moved.positions;
        for (auto& p : to)
            p += 3;
        for (std::size_t l = 0; l < moved.layers.size(); ++l) {
            auto k = rerotateKeys(*model, int64_t(l), moved.cacheDtype, moved.kvHeads,
                                  moved.headDim, *moved.layers[l].key, moved.positions, to);
            QVERIFY2(k.isOk(), k.message().c_str());
            moved.layers[l].key = state::makeBytes(std::move(k).value());
        }
        // The reference: the same prompt fed at positions 3.. from the start.
        Session b(model);
        b.setNextPosition(3);
        QVERIFY(b.feed(prompt).isOk());
        const HostTensor keysB = b.cache().key(0);
        std::vector<float> keysMoved(keysB.data.size());
        std::memcpy(keysMoved.data(), moved.layers[0].key->data(), keysMoved.size() * 4);
        QVERIFY(maxAbsDiff(keysMoved, keysB.data) < 1e-4);
        const HostTensor globalB = b.cache().key(2);
        std::vector<float> globalMoved(globalB.data.size());
        std::memcpy(globalMoved.data(), moved.layers[2].key->data(), globalMoved.size() * 4);
        QVERIFY(maxAbsDiff(globalMoved, globalB.data) < 1e-4);
        // Rotated with the global layers' base, the sliding layer's keys land elsewhere.
        auto wrong = rerotateKeys(*model, 2, moved.cacheDtype, moved.kvHeads, moved.headDim,
                                  *snap.value().layers[0].key, snap.value().positions, to);
        QVERIFY(wrong.isOk());
        std::vector<float> wrongKeys(keysB.data.size());
        std::memcpy(wrongKeys.data(), wrong.value().data(), wrongKeys.size() * 4);
        QVERIFY(maxAbsDiff(wrongKeys, keysB.data) > 1e-2);
    }

    // transformers' config.json for Phi-3 128k: without attention_factor the loader derives
    // sqrt(1 + ln(context / original) / ln(original)), as transformers does; a factor list of
    // the wrong length is refused naming the key.
    void longRopeConfigJson() {
        auto writeText = [](const std::string& path, const std::string& text) {
            writeFileAtomic(path, text.data(), text.size());
        };
        QTemporaryDir tmp;
        const std::string hf = tmp.filePath("hf").toStdString();
        QVERIFY(convertToHuggingFace(*load(kDir + "phi3long.gguf"), hf).isOk());
        auto config = nlohmann::json::parse(readFileText(hf + "/config.json"));
        config["rope_scaling"].erase("attention_factor");
        writeText(hf + "/config.json", config.dump());
        const auto derived = load(hf)->config().ropeScaling;
        QVERIFY(std::abs(derived.attentionFactor -
                         std::sqrt(1.0 + std::log(4.0) / std::log(64.0))) < 1e-12);
        QVERIFY(derived.usesLongFactors(256));
        config["rope_scaling"]["long_factor"].erase(0);
        writeText(hf + "/config.json", config.dump());
        auto bad = Model::load(hf);
        QVERIFY(!bad.isOk());
        QVERIFY2(bad.message().find("rope_scaling.long_factor has 7 values") != std::string::npos,
                 bad.message().c_str());
    }

    // Llama 3.1 / 3.2's RoPE scaling goes to GGUF as llama.cpp's converter writes it (one
    // divisor per frequency, rope_freqs.weight, no scaling keys) and comes back as the same
    // llama3 parameters: the same logits. Divisors that are not Llama 3's are refused by name;
    // without the tensor the model would rotate with other frequencies (the logits differ).
    void llama3ScalingThroughGguf() {
        ModelConfig c = tiny("LlamaForCausalLM");
        c.nLayers = 2;
        auto& s = c.ropeScaling;
        s.type = "llama3";
        s.factor = 32.0;
        s.lowFreqFactor = 1.0;
        s.highFreqFactor = 4.0;
        s.originalMaxPositions = 8192;
        auto made = Model::createRandom(c, 7, "cpu", 0.16);
        QVERIFY2(made, made.message().c_str());
        // head_dim 32, theta 10000: wavelengths from 6 to ~35,000 positions, so the divisors
        // hold 1s, the blend and 32s.
        const auto divisors = llama3FreqFactors(c);
        QCOMPARE(divisors.size(), std::size_t{16});
        QCOMPARE(divisors.front(), 1.0f);
        QCOMPARE(divisors.back(), 32.0f);
        QVERIFY(std::any_of(divisors.begin(), divisors.end(),
                            [](float d) { return d > 1.0f && d < 32.0f; }));
        QTemporaryDir tmp;
        const std::string out = tmp.filePath("llama3.gguf").toStdString();
        QVERIFY(convertToGguf(*made.value(), out));
        auto f = gguf::File::open(out);
        QVERIFY2(f, f.message().c_str());
        QVERIFY(f.value().tensor("rope_freqs.weight"));
        QVERIFY(!f.value().has("llama.rope.scaling.type"));
        const auto back = load(out);
        QCOMPARE(back->config().ropeScaling.type, std::string("llama3"));
        QCOMPARE(back->config().ropeScaling.factor, 32.0);
        QCOMPARE(back->config().ropeScaling.originalMaxPositions, int64_t{8192});
        // Positions far apart, where the low frequencies' scaling shows.
        const auto ids = fixtureTokens();
        QVERIFY(maxAbsDiff(logits(back, ids, false), logits(made.value(), ids, false)) < 1e-5);
        ModelConfig unscaled = c;
        unscaled.ropeScaling = {};
        auto plain = Model::createRandom(unscaled, 7, "cpu", 0.16);
        QVERIFY(plain);
        QVERIFY(maxAbsDiff(logits(plain.value(), ids, false), logits(back, ids, false)) > 1e-3);

        // One divisor changed in the file: not Llama 3's scaling, refused naming the tensor.
        const auto* t = f.value().tensor("rope_freqs.weight");
        std::string bytes = readFileText(out, 1 << 24);
        const float odd = 7.5f;
        std::memcpy(bytes.data() + t->offset + 4 * 3, &odd, 4);
        const std::string damaged = tmp.filePath("damaged.gguf").toStdString();
        writeFileAtomic(damaged, bytes.data(), bytes.size());
        auto refused = Model::load(damaged);
        QVERIFY(!refused);
        QVERIFY2(refused.message().find("rope_freqs.weight") != std::string::npos,
                 refused.message().c_str());
        // Parameters GGUF cannot carry are refused at export, nothing written.
        ModelConfig other = c;
        other.ropeScaling.highFreqFactor = 2.0;
        auto otherModel = Model::createRandom(other, 7, "cpu", 0.16);
        QVERIFY(otherModel);
        const std::string no = tmp.filePath("no.gguf").toStdString();
        const Status st = convertToGguf(*otherModel.value(), no);
        QVERIFY(!st);
        QVERIFY2(st.message().find("high_freq_factor") != std::string::npos, st.message().c_str());
        QVERIFY(!std::filesystem::exists(no));
    }

    // What llama.cpp cannot express is refused by name, not written wrongly.
    void exportRefusals() {
        ModelConfig c = fixtureConfig("gemma2");
        c.finalSoftcap = 0;
        auto m = Model::createRandom(c, 1);
        QVERIFY(m.isOk());
        QTemporaryDir tmp;
        auto st = convertToGguf(*m.value(), tmp.filePath("x.gguf").toStdString());
        QVERIFY(!st.isOk());
        QVERIFY2(st.message().find("soft-capping") != std::string::npos, st.message().c_str());
        auto l2c = convertToLlama2c(*fixtureModel("qwen3"), tmp.filePath("x.bin").toStdString());
        QVERIFY(!l2c.isOk());
        QVERIFY2(l2c.message().find("q/k norms") != std::string::npos, l2c.message().c_str());
        QVERIFY(!std::filesystem::exists(tmp.filePath("x.gguf").toStdString()));
    }
};

QTEST_GUILESS_MAIN(TestArchitectures)
#include "tst_architectures.moc"
