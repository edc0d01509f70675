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

QTEST_GUILESS_MAIN(TstTokenizer)
#include "tst_tokenizer.moc"
