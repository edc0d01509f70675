// Random-weight models in real shapes (core/engine/randommodel.h, `kvscope-cli random-model`):
// the folders load through Model::load like the real checkpoints, with the real tokenizers, and
// the shapes hold the published parameter counts.
#include "engine/model.h"
#include "engine/randommodel.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "testdata.h"
#include "tokenizer/tokenizer.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <map>
#include <set>

using namespace kvscope;

namespace {

const QString kSmolTokenizer = "tokenizers/hf/smollm";
const QString kQwenTokenizer = "tokenizers/hf/qwen2.5";
const QString kGpt2Tokenizer = "tokenizers/hf/gpt2/tokenizer.json";
const QString kSmolExpected = "tokenizers/expected/hf-tokenizers-0.23.2/smollm.jsonl";

struct Run {
    int code = -1;
    QByteArray out, err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

Run cli(const QStringList& args) {
    QProcess p;
    p.start(KVSCOPE_CLI, args);
    p.waitForFinished(300000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString data(const QString& rel) {
    return QString::fromStdString(testdata::path(rel));
}

// The weights a llama-family config.json implies, written out here from the HF layout rather
// than taken from core, so that a wrong shape number shows up as a wrong total.
double parametersFromConfig(const QJsonObject& c) {
    const double C = c["dim"].toDouble(), F = c["hidden_dim"].toDouble(),
                 L = c["n_layers"].toDouble(), V = c["vocab_size"].toDouble();
    const double Q = c["n_heads"].toDouble() * c["head_dim"].toDouble();
    const double KV = c["n_kv_heads"].toDouble() * c["head_dim"].toDouble();
    const double perLayer = 2 * C                                             // two RMSNorms
                            + C * Q + 2 * C * KV + Q * C                      // q, k, v, o
                            + (c["attention_bias"].toBool() ? Q + 2 * KV : 0) // q/k/v biases
                            + (c["post_norms"].toBool() ? 2 * C : 0) // Gemma's two more norms
                            + (c["qk_norm"].toBool() ? 2 * c["head_dim"].toDouble() : 0) +
                            3 * C * F; // gate, up, down
    return V * C * (c["tied_embeddings"].toBool() ? 1 : 2) + C + L * perLayer;
}

LoadOptions withTokenizer() {
    LoadOptions o;
    o.requireTokenizer = true;
    return o;
}

qint64 folderBytes(const QString& dir) {
    qint64 n = 0;
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                          "tokenizer.json", "tokenizer_config.json"})
        n += QFileInfo(dir + "/" + f).size();
    return n;
}

} // namespace

class TestRandomModels : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    // The shapes are the published models: each total, computed from the listed config, is the
    // model card's within 1% (the exact sums: 134,515,008 / 1,235,814,400 / 494,032,768 /
    // 109,529,856 for llama2.c's stories110M, published as "110M" / 596,049,920 for Qwen3's
    // "0.6B" / 2,614,341,888 / 999,885,952 for Gemma 3's "1B" / 3,821,079,552 for Phi-3 mini's
    // "3.8B" / 8,030,261,248 / 7,615,616,512 / 7,248,023,552).
    void listMatchesPublishedCounts() {
        const Run r = cli({"random-model", "--list", "--json"});
        QCOMPARE(r.code, 0);
        const QJsonArray shapes = r.json()["shapes"].toArray();
        QCOMPARE(shapes.size(), 11);
        const std::map<QString, double> published = {
            {"smollm2-135m", 134.5e6}, {"llama-3.2-1b", 1.236e9},  {"qwen2.5-0.5b", 494e6},
            {"stories110m", 110e6},    {"qwen3-0.6b", 0.6e9},      {"gemma-2-2b", 2.61e9},
            {"gemma-3-1b", 1.0e9},     {"phi-3-mini-4k", 3.8e9},   {"llama-3.1-8b", 8.03e9},
            {"qwen2.5-7b", 7.62e9},    {"mistral-7b-v0.3", 7.25e9}};
        for (const auto& v : shapes) {
            const QJsonObject s = v.toObject();
            const QString name = s["name"].toString();
            QVERIFY2(published.count(name), qPrintable(name));
            const double counted = parametersFromConfig(s["config"].toObject());
            QCOMPARE(s["parameters"].toDouble(), counted);
            const double rel = std::fabs(counted - published.at(name)) / published.at(name);
            qInfo("%s: %.0f parameters, published %.4g (%.3f%% off)", qPrintable(name), counted,
                  published.at(name), 100 * rel);
            QVERIFY2(rel < 0.01, qPrintable(name));
            // The core count (what writeRandomModel reports) is the same number.
            const auto* shape = findRandomModelShape(name.toStdString());
            QVERIFY(shape);
            QCOMPARE(double(llamaParameterCount(shape->config)), counted);
        }
        const QJsonObject llama = shapes[1].toObject()["config"].toObject();
        QCOMPARE(llama["rope_scaling"].toObject()["type"].toString(), QString("llama3"));
        QCOMPARE(llama["rope_scaling"].toObject()["factor"].toDouble(), 32.0);
        QCOMPARE(llama["max_context"].toInteger(), 131072);
    }

    // A Q4_K_M file as llama.cpp made it (tests/data/quants), kept quantized: a state made on
    // it snapshots, verifies clean (the layer-0 keys recomputed from the quantized weights),
    // continues from the file, diffs, survives eviction and runs insight #21; the same state
    // with one layer's cache corrupted is named by verify (the verdict can come out the other
    // way).
    void quantizedModelThroughTheLedger() {
        const QString q = KVSCOPE_TESTS_DIR "/data/quants/small-q4_k_m.gguf";
        const QString dir = m_tmp.path();
        const QString s = dir + "/q.kvsnap", s2 = dir + "/q2.kvsnap", bad = dir + "/bad.kvsnap";
        const QString ids = "1,17,200,33,5,99,250,64,128,7,3,42";
        Run r = cli(
            {"generate", "-m", q, "--prompt-ids", ids, "-n", "8", "--snapshot-out", s, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        r = cli({"verify", s, "-m", q, "--json"});
        QVERIFY2(r.code == 0, r.out.constData());
        QVERIFY2(r.json()["ok"].toBool(), r.out.constData());
        r = cli({"continue", s, "-m", q, "-n", "4", "--snapshot-out", s2, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        r = cli({"diff", s, s2, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        r = cli({"survive", s, "-m", q, "--policy", "sink-window", "--budget", "8", "-n", "4",
                 "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QVERIFY(r.json().contains("kl"));
        // Insights read text: a byte-level BPE tokenizer of exactly the model's 256 tokens (the
        // 256 byte symbols, no merges) gives it some.
        QJsonObject vocab;
        for (int b = 0, extra = 0; b < 256; ++b) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            vocab[QString(QChar(printable ? b : 256 + extra++))] = b;
        }
        const QJsonObject tokJson{
            {"version", "1.0"},
            {"model", QJsonObject{{"type", "BPE"}, {"vocab", vocab}, {"merges", QJsonArray()}}},
            {"pre_tokenizer",
             QJsonObject{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", QJsonObject{{"type", "ByteLevel"}}}};
        QFile tokFile(dir + "/bytes-tokenizer.json");
        QVERIFY(tokFile.open(QIODevice::WriteOnly));
        tokFile.write(QJsonDocument(tokJson).toJson());
        tokFile.close();
        r = cli({"insights", "run", "21", "-m", q, "-t", tokFile.fileName(), "--json"});
        QVERIFY2(r.code == 0, (r.out + r.err).constData());
        r = cli({"fault", "inject", "corrupt-layer", s, "-o", bad, "-m", q});
        QVERIFY2(r.code == 0, r.err.constData());
        r = cli({"verify", bad, "-m", q, "--json"});
        QVERIFY(!r.json()["ok"].toBool());
        QVERIFY2(r.out.contains("layer"), r.out.constData());
    }

    // smollm2-135m cut to 2 layers, with the real SmolLM tokenizer: loads as a Llama with the
    // shape's numbers, tokenizes as HF tokenizers does, and generates finite nonsense.
    void smollmLoadsTokenizesAndGenerates() {
        KVSCOPE_REQUIRE_DATA(kSmolTokenizer);
        KVSCOPE_REQUIRE_DATA(kSmolExpected);
        const QString dir = m_tmp.filePath("smollm2");
        const Run r = cli({"random-model", "--shape", "smollm2-135m", "--layers", "2",
                           "--tokenizer", data(kSmolTokenizer), "-o", dir, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject j = r.json();
        QCOMPARE(j["output"].toString(), dir);
        QCOMPARE(j["shape"].toString(), QString("smollm2-135m"));
        QCOMPARE(j["layers"].toInt(), 2);
        QCOMPARE(j["tokenizer_tokens"].toInt(), 49152);
        QCOMPARE(j["bytes"].toInteger(), folderBytes(dir));

        auto loaded = Model::load(dir.toStdString(), withTokenizer());
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto model = loaded.value();
        const ModelConfig& c = model->config();
        QCOMPARE(c.hfArchitecture, std::string("LlamaForCausalLM"));
        QCOMPARE(c.nLayers, 2);
        QCOMPARE(c.dim, 576);
        QCOMPARE(c.hiddenDim, 1536);
        QCOMPARE(c.nHeads, 9);
        QCOMPARE(c.nKvHeads, 3);
        QCOMPARE(c.headDim, 64);
        QCOMPARE(c.vocabSize, 49152);
        QCOMPARE(c.ropeTheta, 100000.0);
        QCOMPARE(c.maxContext, 8192);
        QVERIFY(c.tiedEmbeddings);
        QVERIFY(!c.attentionBias);
        QCOMPARE(c.weightDtype, std::string("bf16"));
        QCOMPARE(model->parameterCount(), j["parameters"].toInteger());
        for (const auto& w : model->weights())
            QVERIFY2(w.name != "lm_head.weight", "tied embeddings wrote an lm_head");

        // The tokenizer copied into the folder gives HF tokenizers' ids (every reference case).
        const auto tok = model->tokenizer();
        QVERIFY(tok);
        QFile f(data(kSmolExpected));
        QVERIFY(f.open(QIODevice::ReadOnly));
        int cases = 0;
        for (const QByteArray& line : f.readAll().split('\n')) {
            const QJsonObject o = QJsonDocument::fromJson(line).object();
            if (o.isEmpty() || o.contains("meta"))
                continue;
            std::vector<int32_t> expected;
            for (const auto& id : o["ids"].toArray())
                expected.push_back(id.toInt());
            const auto got = tok->encode(o["text"].toString().toStdString(),
                                         {.addSpecialTokens = o["add_special_tokens"].toBool()});
            QVERIFY2(got == expected, qPrintable(o["id"].toString()));
            ++cases;
        }
        QVERIFY(cases >= 100);

        Session s(model);
        const auto prompt = tok->encode("The quick brown fox");
        QVERIFY(s.feed(prompt).isOk());
        Sampler greedy(SamplerSettings{0.0f});
        auto g = s.generate(4, greedy);
        QVERIFY2(g.isOk(), g.message().c_str());
        QVERIFY(!g.value().tokens.empty());
        for (const int32_t id : g.value().tokens)
            QVERIFY(id >= 0 && id < 49152);
        for (const float x : s.lastLogits())
            QVERIFY(std::isfinite(x));
    }

    // An existing model folder is refused without --force (untouched), replaced with it.
    void existingFolderNeedsForce() {
        const QString dir = m_tmp.filePath("smollm2-force");
        RandomModelOptions o;
        o.shape = "smollm2-135m";
        o.layers = 1;
        auto first = writeRandomModel(dir.toStdString(), o);
        QVERIFY2(first.isOk(), first.message().c_str());
        const QByteArray before = [&] {
            QFile f(dir + "/model.safetensors");
            return f.open(QIODevice::ReadOnly) ? f.read(4096) : QByteArray();
        }();
        const Run again = cli(
            {"random-model", "--shape", "smollm2-135m", "--layers", "1", "-o", dir, "--seed", "7"});
        QCOMPARE(again.code, 1);
        QVERIFY2(again.err.contains("already holds a model"), again.err.constData());
        QFile f(dir + "/model.safetensors");
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.read(4096), before);
        f.close();
        const Run forced = cli({"random-model", "--shape", "smollm2-135m", "--layers", "1", "-o",
                                dir, "--seed", "7", "--force", "--json"});
        QVERIFY2(forced.code == 0, forced.err.constData());
        QCOMPARE(forced.json()["seed"].toInt(), 7);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(f.read(4096) != before); // other weights (and "seed 7" in the metadata)
        auto m = Model::load(dir.toStdString());
        QVERIFY2(m.isOk(), m.message().c_str());
        QVERIFY(!m.value()->tokenizer()); // none was asked for
    }

    // qwen2.5-0.5b with one layer (core API): q/k/v biases are written, and the real tokenizer
    // (151,665 tokens) loads against the padded 151,936-row vocabulary as a real Qwen2.5 does.
    void qwenHasBiasesAndPaddedVocabulary() {
        KVSCOPE_REQUIRE_DATA(kQwenTokenizer);
        const std::string dir = m_tmp.filePath("qwen").toStdString();
        RandomModelOptions o;
        o.shape = "qwen2.5-0.5b";
        o.layers = 1;
        o.tokenizerPath = data(kQwenTokenizer).toStdString();
        auto r = writeRandomModel(dir, o);
        QVERIFY2(r.isOk(), r.message().c_str());
        QCOMPARE(r.value().tokenizerTokens, 151665);
        QCOMPARE(r.value().parameters, llamaParameterCount(r.value().config));

        auto loaded = Model::load(dir, withTokenizer());
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto model = loaded.value();
        QCOMPARE(model->config().hfArchitecture, std::string("Qwen2ForCausalLM"));
        QVERIFY(model->config().attentionBias);
        QCOMPARE(model->config().vocabSize, 151936);
        QCOMPARE(model->config().nHeads, 14);
        QCOMPARE(model->config().nKvHeads, 2);
        QCOMPARE(model->config().normEps, 1e-6);
        QCOMPARE(model->config().ropeTheta, 1e6);
        QCOMPARE(model->tokenizer()->vocabSize(), 151665);
        std::set<std::string> names;
        for (const auto& w : model->weights())
            names.insert(w.name);
        for (const char* b : {"q_proj", "k_proj", "v_proj"}) {
            const std::string name = std::string("model.layers.0.self_attn.") + b + ".bias";
            QVERIFY2(names.count(name), name.c_str());
        }
        QCOMPARE(model->parameterCount(), r.value().parameters);
    }

    // Bad options name the flag; a tokenizer with more tokens than the vocabulary is refused
    // before any weight is built, naming the file and vocab_size.
    void badOptionsNameTheFlag() {
        const Run shape = cli({"random-model", "--shape", "nope", "-o", m_tmp.filePath("x")});
        QCOMPARE(shape.code, 2);
        for (const char* s :
             {"--shape", "smollm2-135m", "llama-3.2-1b", "qwen2.5-0.5b", "stories110m"})
            QVERIFY2(shape.err.contains(s), shape.err.constData());
        const Run dtype = cli({"random-model", "--shape", "smollm2-135m", "--dtype", "f8", "-o",
                               m_tmp.filePath("x")});
        QCOMPARE(dtype.code, 2);
        QVERIFY2(dtype.err.contains("--dtype"), dtype.err.constData());
        const Run layers = cli({"random-model", "--shape", "smollm2-135m", "--layers", "0", "-o",
                                m_tmp.filePath("x")});
        QCOMPARE(layers.code, 2);
        QVERIFY2(layers.err.contains("--layers"), layers.err.constData());
        const Run noShape = cli({"random-model", "-o", m_tmp.filePath("x")});
        QCOMPARE(noShape.code, 2);
        QVERIFY2(noShape.err.contains("--shape"), noShape.err.constData());
        QVERIFY(!QFileInfo::exists(m_tmp.filePath("x")));

        KVSCOPE_REQUIRE_DATA(kGpt2Tokenizer);
        RandomModelOptions o;
        o.shape = "smollm2-135m";
        o.layers = 1;
        o.tokenizerPath = data(kGpt2Tokenizer).toStdString();
        auto r = writeRandomModel(m_tmp.filePath("gpt2tok").toStdString(), o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("gpt2/tokenizer.json") != std::string::npos &&
                     r.message().find("50257") != std::string::npos &&
                     r.message().find("vocab_size 49152") != std::string::npos,
                 r.message().c_str());
        QVERIFY(!QFileInfo::exists(m_tmp.filePath("gpt2tok")));
        o.tokenizerPath.clear();
        o.layers = 5000;
        r = writeRandomModel(m_tmp.filePath("x").toStdString(), o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--layers = 5000") != std::string::npos, r.message().c_str());
        o.layers = 1;
        o.shape = "gpt-5";
        r = writeRandomModel(m_tmp.filePath("x").toStdString(), o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--shape") != std::string::npos &&
                     r.message().find("qwen2.5-0.5b") != std::string::npos,
                 r.message().c_str());
    }
};

QTEST_GUILESS_MAIN(TestRandomModels)
#include "tst_randommodels.moc"
