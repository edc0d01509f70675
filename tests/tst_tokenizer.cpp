// Tokenizer tests: llama2.c tok512, HF tokenizer.json against HF tokenizers 0.23.2 output,
// GGUF-embedded vocabularies against llama.cpp's .inp/.out, malformed files, speed. Export to
// HF files: tst_tokenizerexport.
#include "testdata.h"
#include "tokenizer/tokenizer.h"
#include "tokenizertest.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <ctime>
#include <memory>
#include <map>
#include <set>

using kvscope::tok::EncodeOptions;
using namespace tokenizertest;

Q_DECLARE_METATYPE(Ids)

class TstTokenizer : public QObject {
    Q_OBJECT

private slots:
    void llama2cReference();
    void llama2cRoundTrip_data();
    void llama2cRoundTrip();
    void llama2cStreaming();
    void llama2cMalformed();

    void hfReference_data();
    void hfReference();
    void chatPrompts_data();
    void chatPrompts();
    void hfMetadata();
    void hfStreaming();
    void ggmlVocab_data();
    void ggmlVocab();
    void ggufLoadAll_data();
    void ggufLoadAll();
    void ggufStories();
    void externalReference_data();
    void externalReference();
    void malformed_data();
    void malformed();
    void speed();
    void cleanupTestCase();

private:
    // pass/total per reference set and tokenizer, printed at the end.
    PassCounts m_summary;
};

void TstTokenizer::llama2cReference() {
    KVSCOPE_REQUIRE_DATA("models/stories260K/tok512.bin");
    auto r = Tokenizer::fromFile(testdata::path("models/stories260K/tok512.bin"));
    QVERIFY2(r, r.message().c_str());
    const TokPtr t = r.value();
    QCOMPARE(QString::fromStdString(t->kind()), QString("llama2c"));
    QCOMPARE(t->vocabSize(), 512);
    QCOMPARE(t->bosId(), std::optional<int32_t>(1));
    QCOMPARE(t->eosId(), std::optional<int32_t>(2));
    // REFERENCE.md: run.c encodes "Once upon a time" as 1 403 407 261 378.
    QCOMPARE(idsText(t->encode("Once upon a time")), QString("1 403 407 261 378"));
    QCOMPARE(idsText(t->encode("Once upon a time", EncodeOptions{false})),
             QString("403 407 261 378"));
    QCOMPARE(t->encode(""), Ids{1});
    QCOMPARE(t->fingerprint().size(), std::size_t(16));
    QCOMPARE(t->fingerprint(), Tokenizer::fromFile(testdata::path("models/stories260K/tok512.bin"))
                                   .value()
                                   ->fingerprint());
}

void TstTokenizer::llama2cRoundTrip_data() {
    QTest::addColumn<QString>("tok");
    QTest::addColumn<QString>("text");
    const QStringList texts = {
        "Once upon a time, there was a little girl named Lily.",
        "Lily's mom said, \"Lily, let's go to the park.\"\nShe smiled.",
        "  two leading spaces and trailing  ",
        "Ünïcödé → 日本語 🙂 falls back to bytes",
        "tab\tand\r\nCRLF",
    };
    const QStringList toks = {"models/stories260K/tok512.bin", "models/aidreams260K/tok512.bin"};
    for (const QString& tok : toks)
        for (int i = 0; i < texts.size(); ++i)
            QTest::addRow("%s#%d", qPrintable(tok), i) << tok << texts[i];
}

void TstTokenizer::llama2cRoundTrip() {
    QFETCH(QString, tok);
    QFETCH(QString, text);
    KVSCOPE_REQUIRE_DATA(tok);
    const TokPtr t = loadCached(testdata::path(tok));
    QVERIFY(t);
    const std::string s = text.toStdString();
    const Ids ids = t->encode(s);
    QCOMPARE(ids.front(), 1);
    QCOMPARE(t->decode(ids, true), s);
    QCOMPARE(t->decode(t->encode(s, EncodeOptions{false})), s);
}

void TstTokenizer::llama2cStreaming() {
    KVSCOPE_REQUIRE_DATA("models/stories260K/tok512.bin");
    const TokPtr t = loadCached(testdata::path("models/stories260K/tok512.bin"));
    QVERIFY(t);
    const Ids ids = t->encode("Once upon a time\nthere was é");
    std::string streamed;
    for (std::size_t i = 1; i < ids.size(); ++i)
        streamed += t->decodeNext(ids[i - 1], ids[i]);
    QCOMPARE(streamed, std::string("Once upon a time\nthere was é"));
    QCOMPARE(t->decodeNext(1, 403), std::string("Once"));
    QCOMPARE(t->decodeNext(403, 407), std::string(" upon"));
    QCOMPARE(t->decodeNext(5, 13), std::string("\n")); // <0x0A>
}

void TstTokenizer::llama2cMalformed() {
    KVSCOPE_REQUIRE_DATA("models/stories260K/tok512.bin");
    QFile src(QString::fromStdString(testdata::path("models/stories260K/tok512.bin")));
    QVERIFY(src.open(QIODevice::ReadOnly));
    const QByteArray good = src.readAll();
    const QString dir = QDir::tempPath() + "/kvscope-tst-tokenizer";
    QDir().mkpath(dir);
    auto writeBad = [&](const QString& name, const QByteArray& bytes) {
        QFile f(dir + "/" + name);
        if (!f.open(QIODevice::WriteOnly))
            return std::string();
        f.write(bytes);
        return (dir + "/" + name).toStdString();
    };
    // Truncated mid-record, negative length, absurd max_token_length, empty file.
    QByteArray negative = good;
    const int32_t minusOne = -1;
    memcpy(negative.data() + 4 + 4, &minusOne, 4);
    QByteArray hugeMax = good;
    const int32_t huge = 1 << 30;
    memcpy(hugeMax.data(), &huge, 4);
    const std::pair<QString, QByteArray> cases[] = {
        {"tok-truncated.bin", good.left(good.size() - 3)},
        {"tok-negative.bin", negative},
        {"tok-hugemax.bin", hugeMax},
        {"tok-empty.bin", QByteArray()},
        {"tok-short.bin", good.left(2)},
    };
    for (const auto& [name, bytes] : cases) {
        const std::string path = writeBad(name, bytes);
        QVERIFY(!path.empty());
        auto r = Tokenizer::fromFile(path);
        QVERIFY2(!r, qPrintable(name));
        qDebug("%s -> %s", qPrintable(name), r.message().c_str());
        QVERIFY2(QString::fromStdString(r.message()).contains(name), r.message().c_str());
    }
}

namespace {

// Reads a .jsonl reference file; skips the {"meta":...} header line.
QList<QJsonObject> readJsonl(const QString& path) {
    QList<QJsonObject> out;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return out;
    for (const QByteArray& line : f.readAll().split('\n')) {
        if (line.trimmed().isEmpty())
            continue;
        const QJsonObject o = QJsonDocument::fromJson(line).object();
        if (!o.contains("meta"))
            out << o;
    }
    return out;
}

Ids jsonIds(const QJsonArray& a) {
    Ids ids;
    for (const auto& v : a)
        ids.push_back(v.toInt());
    return ids;
}

const char* const kHfModels[] = {"gpt2",       "llama-2",   "tinyllama-1.1b-chat-v1.0",
                                 "phi-3-mini", "falcon-7b", "qwen2.5",
                                 "llama-3.2",  "smollm"};

} // namespace

// Every tokenizer.json under hf/ against HF tokenizers 0.23.2 (ids with and without special
// tokens, and decode(ids, skip_special_tokens=false)).
void TstTokenizer::hfReference_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("special");
    QTest::addColumn<Ids>("ids");
    QTest::addColumn<QString>("decoded");
    const QString dir = testdata::root() + "/tokenizers/expected/hf-tokenizers-0.23.2/";
    for (const char* model : kHfModels)
        for (const QJsonObject& o : readJsonl(dir + model + ".jsonl"))
            QTest::addRow("%s/%s/%s", model, qPrintable(o["id"].toString()),
                          o["add_special_tokens"].toBool() ? "special" : "plain")
                << QString(model) << o["text"].toString() << o["add_special_tokens"].toBool()
                << jsonIds(o["ids"].toArray()) << o["decoded"].toString();
}

void TstTokenizer::hfReference() {
    QFETCH(QString, model);
    QFETCH(QString, text);
    QFETCH(bool, special);
    QFETCH(Ids, ids);
    QFETCH(QString, decoded);
    KVSCOPE_REQUIRE_DATA("tokenizers/hf/" + model + "/tokenizer.json");
    const TokPtr t = loadCached(testdata::path("tokenizers/hf/" + model + "/tokenizer.json"));
    QVERIFY(t);
    const Ids got = t->encode(text.toStdString(), EncodeOptions{special});
    const std::string dec = t->decode(ids);
    const bool pass = got == ids && dec == decoded.toStdString();
    m_summary.count("hf-tokenizers-0.23.2 " + model, pass);
    QCOMPARE(idsText(got), idsText(ids));
    QCOMPARE(QString::fromStdString(dec), decoded);
}

// Rendered chat prompts (add_special_tokens=false, the text carries the template's tokens).
void TstTokenizer::chatPrompts_data() {
    QTest::addColumn<QString>("tokenizer");
    QTest::addColumn<QString>("text");
    QTest::addColumn<Ids>("ids");
    const QString file =
        testdata::root() + "/tokenizers/expected/hf-tokenizers-0.23.2/chat-prompts.setA.jsonl";
    for (const QJsonObject& o : readJsonl(file))
        QTest::addRow("%s/%s", qPrintable(o["template"].toString()),
                      qPrintable(o["case"].toString()))
            << o["tokenizer"].toString() << o["text"].toString() << jsonIds(o["ids"].toArray());
}

void TstTokenizer::chatPrompts() {
    QFETCH(QString, tokenizer);
    QFETCH(QString, text);
    QFETCH(Ids, ids);
    KVSCOPE_REQUIRE_DATA("tokenizers/" + tokenizer);
    const TokPtr t = loadCached(testdata::path("tokenizers/" + tokenizer));
    QVERIFY(t);
    const Ids got = t->encode(text.toStdString(), EncodeOptions{false});
    m_summary.count("chat-prompts.setA " + tokenizer.section('/', 1, 1), got == ids);
    QCOMPARE(idsText(got), idsText(ids));
}

void TstTokenizer::hfMetadata() {
    KVSCOPE_REQUIRE_DATA("tokenizers/hf");
    struct Expect {
        const char* model;
        const char* kind;
        int vocab;
        int bos;
        int eos;
        bool chat;
    };
    const Expect expects[] = {
        {"gpt2", "hf-bpe-bytelevel", 50257, 50256, 50256, false},
        {"llama-2", "hf-bpe-sentencepiece", 32000, 1, 2, false},
        {"tinyllama-1.1b-chat-v1.0", "hf-bpe-sentencepiece", 32000, 1, 2, true},
        {"qwen2.5", "hf-bpe-bytelevel", 151665, -1, 151645, true},
        {"llama-3.2", "hf-bpe-bytelevel", 128256, 128000, 128001, false},
    };
    std::set<std::string> fingerprints;
    for (const auto& e : expects) {
        const QString rel = QString("tokenizers/hf/%1").arg(e.model);
        auto r = Tokenizer::fromFile(testdata::path(rel)); // the folder form
        QVERIFY2(r, r.message().c_str());
        const TokPtr t = r.value();
        QCOMPARE(QString::fromStdString(t->kind()), QString(e.kind));
        QCOMPARE(t->vocabSize(), e.vocab);
        QCOMPARE(t->bosId().value_or(-1), e.bos);
        QCOMPARE(t->eosId().value_or(-1), e.eos);
        QCOMPARE(t->chatTemplate().has_value(), e.chat);
        QVERIFY(QString::fromStdString(t->sourcePath()).endsWith("tokenizer.json"));
        QCOMPARE(t->fingerprint().size(), std::size_t(16));
        QCOMPARE(t->fingerprint(),
                 loadCached(testdata::path(rel + "/tokenizer.json"))->fingerprint());
        fingerprints.insert(t->fingerprint());
        if (e.eos >= 0)
            QVERIFY(t->isSpecial(e.eos));
    }
    // llama-2 and tinyllama share a vocabulary but not their added-token flags / config.
    QCOMPARE(fingerprints.size(), std::size(expects));
    const TokPtr gpt2 = loadCached(testdata::path("tokenizers/hf/gpt2/tokenizer.json"));
    QCOMPARE(gpt2->tokenText(2437), std::string("How"));
    QCOMPARE(gpt2->tokenText(389), std::string("\u0120are"));
}

void TstTokenizer::hfStreaming() {
    KVSCOPE_REQUIRE_DATA("tokenizers/hf");
    const std::string text = "Hello wörld 🙂 日本語\n  x";
    for (const char* model : kHfModels) {
        const TokPtr t =
            loadCached(testdata::path(QString("tokenizers/hf/%1/tokenizer.json").arg(model)));
        QVERIFY(t);
        const Ids ids = t->encode(text, EncodeOptions{false});
        std::string streamed;
        int32_t prev = -1;
        for (int32_t id : ids) {
            streamed += t->decodeNext(prev, id);
            prev = id;
        }
        QCOMPARE(streamed, t->decode(ids));
    }
}

// llama.cpp's vocab tests: .inp strings and the ids HF AutoTokenizer gave them (no BOS).
void TstTokenizer::ggmlVocab_data() {
    QTest::addColumn<QString>("gguf");
    QTest::addColumn<QString>("text");
    QTest::addColumn<Ids>("ids");
    const QString root = testdata::root() + "/tokenizers/ggml-vocab/";
    for (const QString& family : QDir(root).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString base = root + family + "/ggml-vocab-" + family + ".gguf";
        if (family == "bert-bge") // WordPiece: not supported (kvscope reads BPE tokenizers)
            continue;
        // The GGUF itself, and the HF tokenizer.json of the same model (as the test data pairs
        // them); families whose GGUF is too big to ship are checked through tokenizer.json only.
        QStringList tokenizers;
        if (QFile::exists(base))
            tokenizers << base;
        const std::map<QString, QStringList> hfTwins = {
            {"llama-spm", {"llama-2", "tinyllama-1.1b-chat-v1.0"}},
            {"gpt-2", {"gpt2"}},
            {"falcon", {"falcon-7b"}},
            {"llama-bpe", {"llama-3.2"}},
            {"smollm", {"smollm"}}};
        if (const auto twin = hfTwins.find(family); twin != hfTwins.end())
            for (const QString& m : twin->second)
                tokenizers << testdata::root() + "/tokenizers/hf/" + m + "/tokenizer.json";
        QFile out(base + ".out");
        const QList<QByteArray> texts = readInp(base + ".inp");
        if (tokenizers.isEmpty() || texts.isEmpty() || !out.open(QIODevice::ReadOnly))
            continue;
        const QList<QByteArray> lines = out.readAll().split('\n');
        for (int i = 0; i < texts.size() && i < lines.size(); ++i) {
            Ids ids;
            for (const QByteArray& tok : lines[i].split(' '))
                if (!tok.isEmpty())
                    ids.push_back(tok.toInt());
            for (const QString& tok : tokenizers)
                QTest::addRow(
                    "%s/%s/%d", qPrintable(family),
                    qPrintable(tok.endsWith(".gguf") ? QString("gguf") : tok.section('/', -2, -2)),
                    i)
                    << tok << QString::fromUtf8(texts[i]) << ids;
        }
    }
}

void TstTokenizer::ggmlVocab() {
    QFETCH(QString, gguf);
    QFETCH(QString, text);
    QFETCH(Ids, ids);
    const TokPtr t = loadCached(gguf.toStdString());
    QVERIFY(t);
    const Ids got = t->encode(text.toStdString(), EncodeOptions{false});
    m_summary.count("ggml-vocab " + (gguf.endsWith(".gguf") ? QFileInfo(gguf).completeBaseName()
                                                            : "hf/" + gguf.section('/', -2, -2)),
                    got == ids);
    QCOMPARE(idsText(got), idsText(ids));
    // Round trip (llama.cpp's test does the same): decode gives the text back.
    QCOMPARE(QString::fromStdString(t->decode(got)), text);
}

// Every GGUF vocabulary loads, names its kind and round-trips plain text.
void TstTokenizer::ggufLoadAll_data() {
    QTest::addColumn<QString>("gguf");
    QTest::addColumn<QString>("kind");
    const QString root = testdata::root() + "/tokenizers/ggml-vocab/";
    for (const QString& family : QDir(root).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString file = root + family + "/ggml-vocab-" + family + ".gguf";
        if (QFile::exists(file) && family != "bert-bge")
            QTest::addRow("%s", qPrintable(family))
                << file
                << QString(family == "llama-spm" || family == "phi-3" || family == "baichuan"
                               ? "gguf-llama"
                               : "gguf-gpt2");
    }
}

void TstTokenizer::ggufLoadAll() {
    QFETCH(QString, gguf);
    QFETCH(QString, kind);
    const TokPtr t = loadCached(gguf.toStdString());
    QVERIFY(t);
    QCOMPARE(QString::fromStdString(t->kind()), kind);
    QVERIFY(t->vocabSize() > 1000);
    QCOMPARE(t->fingerprint().size(), std::size_t(16));
    const std::string text = "Hello world! It's 2024: 3.14159 -- café, naïve.\n\tTabs  and spaces";
    QCOMPARE(t->decode(t->encode(text, EncodeOptions{false})), text);
}

void TstTokenizer::ggufStories() {
    KVSCOPE_REQUIRE_DATA("models/stories260K/stories260K.gguf");
    auto r = Tokenizer::fromFile(testdata::path("models/stories260K/stories260K.gguf"));
    QVERIFY2(r, r.message().c_str());
    const TokPtr t = r.value();
    QCOMPARE(QString::fromStdString(t->kind()), QString("gguf-llama"));
    QCOMPARE(t->vocabSize(), 512);
    QCOMPARE(t->bosId().value_or(-1), 1);
    QCOMPARE(t->eosId().value_or(-1), 2);
    // Same vocabulary and scores as tok512.bin: the same ids as run.c.
    QCOMPARE(idsText(t->encode("Once upon a time")), QString("1 403 407 261 378"));
    const TokPtr bin = loadCached(testdata::path("models/stories260K/tok512.bin"));
    QVERIFY(bin);
    const std::string story = "Lily's mom said, \"Lily, let's go to the park.\" Ünï 🙂";
    QCOMPARE(idsText(t->encode(story)), idsText(bin->encode(story)));
    QCOMPARE(t->decode(t->encode(story), true), story);
}

// Other upstream reference sets (produced by Python transformers, add_special_tokens=True):
// transformers.js tables, swift-transformers edge cases, long texts and multilingual
// baselines. Token ids must match exactly; decoded text is compared where the producer used
// plain decode (transformers' clean_up_tokenization_spaces may change it otherwise).
void TstTokenizer::externalReference_data() {
    QTest::addColumn<QString>("set");
    QTest::addColumn<QString>("tokenizer"); // relative to tokenizers/
    QTest::addColumn<QString>("text");
    QTest::addColumn<Ids>("ids");
    QTest::addColumn<QString>("decoded"); // empty: not compared
    const QString exp = testdata::root() + "/tokenizers/expected/";
    auto readJson = [](const QString& path) {
        QFile f(path);
        return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object()
                                           : QJsonObject();
    };
    const std::map<QString, QStringList> hubToLocal = {
        {"Xenova/llama-tokenizer", {"hf/llama-2", "hf/tinyllama-1.1b-chat-v1.0"}},
        {"Xenova/llama3-tokenizer-new", {"hf/llama-3.2"}},
        {"Xenova/gpt2", {"hf/gpt2"}},
        {"openai-community/gpt2", {"hf/gpt2"}},
        {"Xenova/Qwen1.5-0.5B-Chat", {"hf/qwen2.5"}},
        {"tiiuae/falcon-7b", {"hf/falcon-7b"}},
        {"Xenova/deepseek-coder-1.3b-instruct",
         {"ggml-vocab/deepseek-coder/ggml-vocab-deepseek-coder.gguf"}},
        {"coreml-projects/Llama-2-7b-chat-coreml", {"hf/llama-2"}},
        {"pcuenq/Llama-3.2-1B-Instruct-tokenizer", {"hf/llama-3.2"}},
        {"distilgpt2", {"hf/gpt2"}},
    };
    auto local = [&](const QString& hub) {
        const auto it = hubToLocal.find(hub);
        return it == hubToLocal.end() ? QStringList() : it->second;
    };
    for (const char* m : {"llama", "gpt2", "qwen2", "falcon"}) {
        const QJsonObject table =
            readJson(exp + "transformers.js/test_tokenization_" + m + ".json");
        for (auto hub = table.begin(); hub != table.end(); ++hub)
            for (const QString& tok : local(hub.key())) {
                const QJsonObject cases = hub.value().toObject();
                for (auto c = cases.begin(); c != cases.end(); ++c) {
                    const QJsonObject o = c.value().toObject();
                    if (o.contains("text_pair") || !o["text"].isString())
                        continue;
                    // The GGUF gives llama.cpp-style ids, not HF's: no BOS/EOS template there.
                    QTest::addRow("transformers.js/%s/%s/%s", qPrintable(hub.key()),
                                  qPrintable(tok.section('/', 1, 1)), qPrintable(c.key()))
                        << "transformers.js " + tok.section('/', 1, 1) << tok
                        << o["text"].toString() << jsonIds(o["ids"].toArray())
                        << o["decoded"].toString();
                }
            }
    }
    const QJsonObject swift = readJson(exp + "swift-transformers/tokenizer_tests.json");
    for (auto hub = swift.begin(); hub != swift.end(); ++hub)
        for (const QString& tok : local(hub.key())) {
            const QJsonArray cases = hub.value().toArray();
            for (int i = 0; i < cases.size(); ++i) {
                const QJsonObject o = cases[i].toObject();
                QTest::addRow("swift/%s/%d", qPrintable(hub.key()), i)
                    << "swift-transformers " + tok.section('/', 1, 1) << tok
                    << o["input"].toString()
                    << jsonIds(o["encoded"].toObject()["input_ids"].toArray())
                    << o["decoded_with_special"].toString();
            }
        }
    const std::pair<const char*, const char*> encoded[] = {{"llama_encoded.json", "hf/llama-2"},
                                                           {"falcon_encoded.json", "hf/falcon-7b"},
                                                           {"gpt2_encoded_tokens.json", "hf/gpt2"}};
    for (const auto& [file, tok] : encoded) {
        const QJsonObject o = readJson(exp + "swift-transformers/" + file);
        if (!o.isEmpty())
            QTest::addRow("swift/%s", file)
                << QString("swift-transformers long text") << QString(tok) << o["text"].toString()
                << jsonIds(o["token_ids"].toArray()) << QString();
    }
    QJsonArray inputs;
    {
        QFile f(exp + "swift-transformers-multilingual/inputs.json");
        if (f.open(QIODevice::ReadOnly))
            inputs = QJsonDocument::fromJson(f.readAll()).array();
    }
    std::map<QString, QString> texts;
    for (const auto& v : inputs)
        texts[v.toObject()["id"].toString()] = v.toObject()["text"].toString();
    const std::pair<const char*, const char*> multi[] = {
        {"gpt2_multilingual.json", "hf/gpt2"},
        {"tinyllama_multilingual.json", "hf/tinyllama-1.1b-chat-v1.0"}};
    for (const auto& [file, tok] : multi) {
        const QJsonArray entries =
            readJson(exp + "swift-transformers-multilingual/" + file)["entries"].toArray();
        for (const auto& v : entries) {
            const QJsonObject o = v.toObject();
            const QString id = o["id"].toString();
            if (texts.count(id))
                QTest::addRow("multilingual/%s/%s", file, qPrintable(id))
                    << "swift multilingual " + QString(tok).section('/', 1, 1) << QString(tok)
                    << texts[id] << jsonIds(o["input_ids"].toArray()) << QString();
        }
    }
}

void TstTokenizer::externalReference() {
    QFETCH(QString, set);
    QFETCH(QString, tokenizer);
    QFETCH(QString, text);
    QFETCH(Ids, ids);
    QFETCH(QString, decoded);
    KVSCOPE_REQUIRE_DATA("tokenizers/" + tokenizer);
    const TokPtr t = loadCached(testdata::path("tokenizers/" + tokenizer));
    QVERIFY(t);
    const Ids got = t->encode(text.toStdString());
    m_summary.count(set, got == ids);
    QCOMPARE(idsText(got), idsText(ids));
    if (!decoded.isEmpty()) {
        const QString got = QString::fromStdString(t->decode(ids));
        m_summary.count(set + " (decode, informational)", got == decoded);
        if (got != decoded)
            qDebug("decode differs (transformers post-processing?): %s | %s", qPrintable(got),
                   qPrintable(decoded));
    }
}

// Bad files are refused with a message naming the file and what is wrong; never a crash.
void TstTokenizer::malformed_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("expect"); // a fragment the message must contain
    const QString shared = testdata::root() + "/tokenizers/malformed/";
    for (const QString& name : QDir(shared).entryList(QDir::Files))
        QTest::addRow("shared/%s", qPrintable(name)) << shared + name << QString("merges");

    const QString dir = QDir::tempPath() + "/kvscope-tst-tokenizer-malformed";
    QDir().mkpath(dir);
    auto write = [&](const QString& name, const QByteArray& bytes) {
        QFile f(dir + "/" + name);
        if (f.open(QIODevice::WriteOnly))
            f.write(bytes);
        return dir + "/" + name;
    };
    const QByteArray vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2})";
    auto bpe = [&](const QByteArray& merges) {
        return R"({"model": {"type": "BPE", )" + vocab + R"(, "merges": )" + merges + "}}";
    };
    QTest::addRow("missing model")
        << write("no-model.json", R"({"normalizer": null})") << QString("missing field 'model'");
    QTest::addRow("unknown merge token")
        << write("bad-merge.json", bpe(R"(["a c"])")) << QString("merges[0]");
    QTest::addRow("merge result not in vocab")
        << write("bad-merge2.json", bpe(R"(["b a"])")) << QString("'ba' is not in the vocab");
    QTest::addRow("ambiguous merge")
        << write("ambiguous.json", bpe(R"(["a  b"])")) << QString("merges[0]");
    QTest::addRow("merge not a pair")
        << write("pair.json", bpe(R"([["a"]])")) << QString("merges[0]");
    QTest::addRow("bad json") << write("trunc.json", bpe(R"(["a b"])").left(30))
                              << QString("not valid JSON");
    QTest::addRow("wordpiece") << write("wp.json",
                                        R"({"model": {"type": "WordPiece", "vocab": {}}})")
                               << QString("unsupported model type 'WordPiece'");
    QTest::addRow("bad vocab id")
        << write("vocabid.json", R"({"model": {"type": "BPE", "vocab": {"a": -4}, "merges": []}})")
        << QString("vocab");
    QTest::addRow("bad pre_tokenizer")
        << write("pretok.json", bpe("[]").chopped(1) + R"(, "pre_tokenizer": {"type": "Nope"}})")
        << QString("pre_tokenizer: unsupported");
    QTest::addRow("bad regex")
        << write(
               "regex.json",
               bpe("[]").chopped(1) +
                   R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"}})")
        << QString("invalid regex");
    QTest::addRow("bad added token")
        << write("added.json", bpe("[]").chopped(1) + R"(, "added_tokens": [{"content": 5}]})")
        << QString("added_tokens[0]");
    QTest::addRow("gguf truncated")
        << write("trunc.gguf", QByteArray("GGUF\x03\0\0\0", 8)) << QString("trunc.gguf");
    QTest::addRow("empty folder") << (QDir().mkpath(dir + "/empty"), dir + "/empty")
                                  << QString("no tokenizer found");
    QTest::addRow("no such file") << dir + "/nope.json" << QString("no such file");
}

void TstTokenizer::malformed() {
    QFETCH(QString, file);
    QFETCH(QString, expect);
    auto r = Tokenizer::fromFile(file.toStdString());
    QVERIFY2(!r, qPrintable(file));
    const QString msg = QString::fromStdString(r.message());
    qDebug("%s", qPrintable(msg));
    QVERIFY2(msg.contains(QFileInfo(file).fileName()), qPrintable(msg));
    QVERIFY2(msg.contains(expect), qPrintable(msg));
}

// The largest vocabulary here (Llama 3.2: 128k tokens, 280k merges) loads in well under a few
// seconds and encodes long text without quadratic merge loops.
void TstTokenizer::speed() {
    KVSCOPE_REQUIRE_DATA("tokenizers/hf/llama-3.2/tokenizer.json");
    // CPU time as well as wall time: the test machines are shared and wall time alone flakes.
    QElapsedTimer timer;
    timer.start();
    const std::clock_t cpu0 = std::clock();
    auto r = Tokenizer::fromFile(testdata::path("tokenizers/hf/llama-3.2/tokenizer.json"));
    const qint64 loadMs = timer.elapsed();
    const double loadCpuMs = 1000.0 * double(std::clock() - cpu0) / CLOCKS_PER_SEC;
    QVERIFY2(r, r.message().c_str());
    std::string text;
    for (int i = 0; i < 2000; ++i)
        text += "The quick brown fox, number " + std::to_string(i) + ", jumps over the lazy dög. ";
    text += std::string(20000, 'a'); // one 20k-character word: the merge loop must not be O(n^2)
    timer.restart();
    const Ids ids = r.value()->encode(text);
    const qint64 encodeMs = timer.elapsed();
    qInfo("llama-3.2: load %lld ms (%.0f ms CPU), encode %zu bytes -> %zu ids in %lld ms", loadMs,
          loadCpuMs, text.size(), ids.size(), encodeMs);
    QVERIFY2(loadCpuMs < 3000, "loading took too long");
    QVERIFY2(encodeMs < 2000, "encoding took too long");
    QCOMPARE(r.value()->decode(ids, true), text);
}

void TstTokenizer::cleanupTestCase() {
    m_summary.print();
}

QTEST_GUILESS_MAIN(TstTokenizer)
#include "tst_tokenizer.moc"
