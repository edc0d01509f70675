// Tokenizer tests: llama2.c tok512, HF tokenizer.json against HF tokenizers 0.23.2 output,
// GGUF-embedded vocabularies against llama.cpp's .inp/.out, malformed files, speed.
#include "testdata.h"
#include "tokenizer/tokenizer.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <map>
#include <set>

using kvscope::tok::EncodeOptions;
using kvscope::tok::Tokenizer;
using TokPtr = std::shared_ptr<const Tokenizer>;
using Ids = std::vector<int32_t>;

Q_DECLARE_METATYPE(Ids)

namespace {

QString idsText(const Ids& ids) {
    QStringList parts;
    for (int32_t id : ids)
        parts << QString::number(id);
    return parts.join(' ');
}

// Loaded once per path: the big vocabularies take a moment and every data row shares them.
TokPtr loadCached(const std::string& path) {
    static std::map<std::string, TokPtr> cache;
    auto it = cache.find(path);
    if (it != cache.end())
        return it->second;
    auto r = Tokenizer::fromFile(path);
    TokPtr t = r ? r.value() : nullptr;
    if (!r)
        qWarning("load %s failed: %s", path.c_str(), r.message().c_str());
    cache.emplace(path, t);
    return t;
}

} // namespace

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
    void cleanupTestCase();

private:
    // pass/total per reference set and tokenizer, printed at the end.
    std::map<QString, std::pair<int, int>> m_summary;
    void count(const QString& key, bool pass) {
        auto& [ok, total] = m_summary[key];
        ok += pass ? 1 : 0;
        ++total;
    }
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
    for (const char* tok : {"models/stories260K/tok512.bin", "models/aidreams260K/tok512.bin"})
        for (int i = 0; i < texts.size(); ++i)
            QTest::addRow("%s#%d", tok, i) << QString(tok) << texts[i];
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
    count("hf-tokenizers-0.23.2 " + model, pass);
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
    count("chat-prompts.setA " + tokenizer.section('/', 1, 1), got == ids);
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
        if (family == "bert-bge") // WordPiece: not supported (optional in the brief)
            continue;
        QFile inp(base + ".inp"), out(base + ".out"), gguf(base);
        if (!gguf.exists() || !inp.open(QIODevice::ReadOnly) || !out.open(QIODevice::ReadOnly))
            continue;
        const QByteArray all = inp.readAll();
        QList<QByteArray> texts;
        const QByteArray sep = "\n__ggml_vocab_test__\n";
        qsizetype from = 0;
        for (qsizetype at = all.indexOf(sep); at >= 0; at = all.indexOf(sep, from)) {
            texts << all.mid(from, at - from);
            from = at + sep.size();
        }
        const QList<QByteArray> lines = out.readAll().split('\n');
        for (int i = 0; i < texts.size() && i < lines.size(); ++i) {
            Ids ids;
            for (const QByteArray& tok : lines[i].split(' '))
                if (!tok.isEmpty())
                    ids.push_back(tok.toInt());
            QTest::addRow("%s/%d", qPrintable(family), i)
                << base << QString::fromUtf8(texts[i]) << ids;
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
    count("ggml-vocab " + QFileInfo(gguf).completeBaseName(), got == ids);
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

void TstTokenizer::cleanupTestCase() {
    for (const auto& [key, v] : m_summary)
        qInfo("summary %s: %d/%d", qPrintable(key), v.first, v.second);
}

QTEST_GUILESS_MAIN(TstTokenizer)
#include "tst_tokenizer.moc"
