// kvscope-cli end to end: JSON shapes, exit codes, and the three model formats (llama2.c .bin,
// GGUF, and the converted Hugging Face folder) agreeing on tokens and logits.
#include "testdata.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <cstring>
#include <functional>
#include <sys/resource.h>
#include <sys/stat.h>

namespace {

const QString kBin = "models/stories260K/stories260K.bin";
const QString kGguf = "models/stories260K/stories260K.gguf";

struct Run {
    int code = -1;
    QByteArray out, err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

Run cli(const QStringList& args,
        const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
    QProcess p;
    p.setProcessEnvironment(env);
    p.start(KVSCOPE_CLI, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString data(const QString& rel) {
    return QString::fromStdString(testdata::path(rel));
}

std::vector<int> ids(const QJsonValue& v) {
    std::vector<int> out;
    for (const auto& x : v.toArray())
        out.push_back(x.toInt());
    return out;
}

double maxLogitDiff(const QJsonObject& a, const QJsonObject& b) {
    const auto ra = a["logits"].toArray(), rb = b["logits"].toArray();
    if (ra.size() != rb.size())
        return 1e30;
    double d = 0;
    for (qsizetype t = 0; t < ra.size(); ++t) {
        const auto x = ra[t].toArray(), y = rb[t].toArray();
        if (x.size() != y.size())
            return 1e30;
        for (qsizetype i = 0; i < x.size(); ++i)
            d = std::max(d, std::fabs(x[i].toDouble() - y[i].toDouble()));
    }
    return d;
}

} // namespace

// Helpers of the hostile-argument tests (issue 44, round two).
namespace hostile44 {

// kvscope-cli with a file size limit (RLIMIT_FSIZE, `ulimit -f`) on the child.
Run cliWithFileLimit(const QStringList& args, rlim_t bytes) {
    QProcess p;
    p.setChildProcessModifier([bytes] {
        const struct rlimit l { bytes, bytes };
        ::setrlimit(RLIMIT_FSIZE, &l);
    });
    p.start(KVSCOPE_CLI, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

quint64 u64(const QByteArray& b, int at) {
    quint64 v = 0;
    std::memcpy(&v, b.constData() + at, 8);
    return v;
}
void setU64(QByteArray& b, int at, quint64 v) {
    std::memcpy(b.data() + at, &v, 8);
}

// A copy of the .kvsnap `in` with a head mask blob appended (ledger version 2), built by hand
// after core/snapfile/FORMAT.md: a file whose container and checksums are sound while the
// ledger's head mask is whatever `mask` makes of the cache's (layers, kv_heads, length).
bool withHeadMask(const QString& in, const QString& out,
                  const std::function<QByteArray(int layers, int heads, int length)>& mask) {
    QFile f(in);
    if (!f.open(QIODevice::ReadOnly))
        return false;
    QByteArray file = f.readAll();
    const auto manifestOffset = qsizetype(u64(file, 32));
    QJsonObject doc = QJsonDocument::fromJson(file.mid(manifestOffset)).object();
    QJsonObject ledger = doc["manifest"].toObject();
    const QJsonObject cache = ledger["cache"].toObject();
    const QByteArray blob =
        mask(cache["layers"].toInt(), cache["kv_heads"].toInt(), cache["length"].toInt());
    const QString hash =
        QString::fromStdString(kvscope::hex64(kvscope::hash64(blob.constData(), blob.size())));
    QJsonObject kvsnap = doc["kvsnap"].toObject();
    QJsonArray blobs = kvsnap["blobs"].toArray();
    blobs.append(QJsonObject{{"name", "head_mask"},
                             {"dtype", "u8"},
                             {"shape", QJsonArray{blob.size()}},
                             {"offset", manifestOffset},
                             {"stored_bytes", blob.size()},
                             {"raw_bytes", blob.size()},
                             {"compression", "none"},
                             {"shuffle_block", 0},
                             {"stored_xxh3", hash},
                             {"raw_xxh3", hash}});
    kvsnap["blobs"] = blobs;
    ledger["kvscope_ledger"] = 2;
    ledger["head_mask"] = QJsonObject{
        {"count", blob.size()}, {"layout", "[layers, kv_heads, length]"}, {"blob", "head_mask"}};
    doc["kvsnap"] = kvsnap;
    doc["manifest"] = ledger;
    const QByteArray manifest = QJsonDocument(doc).toJson(QJsonDocument::Compact);
    QByteArray result = file.left(manifestOffset) + blob + manifest;
    setU64(result, 32, quint64(manifestOffset + blob.size()));
    setU64(result, 40, quint64(manifest.size()));
    setU64(result, 48, kvscope::hash64(manifest.constData(), std::size_t(manifest.size())));
    setU64(result, 56, kvscope::hash64(result.constData(), 56));
    QFile o(out);
    return o.open(QIODevice::WriteOnly) && o.write(result) == result.size();
}

} // namespace hostile44

class TestCli : public QObject {
    Q_OBJECT
private slots:
    void usageErrorsExitWith2() {
        QCOMPARE(cli({}).code, 2);
        QCOMPARE(cli({"no-such-command"}).code, 2);
        // No --model and no demo model to fall back on: a usage error naming the way out.
        QProcessEnvironment noDemo = QProcessEnvironment::systemEnvironment();
        noDemo.insert("KVSCOPE_DEMO_MODEL", "/nonexistent/demo-model");
        const Run r = cli({"generate", "-n", "1"}, noDemo);
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--model"), r.err.constData());
        QCOMPARE(cli({"generate", "-m", "x", "--steps", "many"}).code, 2);
    }

    // Without --model the model commands use the bundled demo model (when the tree has it).
    void demoModelIsTheDefault() {
        const QString demo = QStringLiteral(KVSCOPE_TESTS_DIR "/../resources/demo-model");
        if (!QFileInfo::exists(demo + "/config.json"))
            QFAIL("no bundled demo model in this tree (resources/demo-model)");
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove("KVSCOPE_DEMO_MODEL");
        const Run r = cli({"generate", "-n", "4", "--temperature", "0", "--json"}, env);
        QCOMPARE(r.code, 0);
        QVERIFY2(r.err.contains("bundled demo model"), r.err.constData());
        QCOMPARE(r.json()["tokens"].toArray().size(), 4);
        const Run info = cli({"info", "--json"}, env);
        QCOMPARE(info.code, 0);
        QCOMPARE(QFileInfo(info.json()["path"].toString()).canonicalFilePath(),
                 QFileInfo(demo).canonicalFilePath());
    }

    // `induction` on the bundled model: the JSON report's shape, and its usage errors.
    void inductionJson() {
        const QString demo = QStringLiteral(KVSCOPE_TESTS_DIR "/../resources/demo-model");
        if (!QFileInfo::exists(demo + "/config.json"))
            QFAIL("no bundled demo model in this tree (resources/demo-model)");
        Run r = cli({"induction", "-m", demo, "--length", "16", "--json"});
        QCOMPARE(r.code, 0);
        QJsonObject j = r.json();
        QCOMPARE(j["tokens"].toInt(), 33);
        QCOMPARE(j["segment"].toObject()["length"].toInt(), 16);
        QVERIFY(j["segment"].toObject()["second_copy_loss"].toDouble() > 0);
        const Run info = cli({"info", "-m", demo, "--json"});
        const auto cfg = info.json();
        QCOMPARE(j["heads"].toArray().size(), cfg["n_layers"].toInt() * cfg["n_heads"].toInt());
        QCOMPARE(j["recalled"].toArray().size(), 16);

        r = cli({"induction", "-m", demo, "--json", "--text",
                 "And Moses said unto Aaron, and Aaron said unto Moses"});
        QCOMPARE(r.code, 0);
        j = r.json();
        QVERIFY(!j.contains("segment"));
        QStringList recalled;
        for (const auto& t : j["recalled"].toArray())
            recalled << t.toObject()["text"].toString();
        QVERIFY2(recalled.contains(" Moses") && recalled.contains(" Aaron"),
                 qPrintable(recalled.join('|')));

        r = cli({"induction", "-m", demo, "--length", "0"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--length"), r.err.constData());
        QCOMPARE(cli({"induction", "-m", "/nonexistent/model"}).code, 1);
    }

    // Every flag value is checked by its type before it is converted: CLI11 alone read "-1"
    // into an unsigned seed as 2^64-1, "nan" into a float, "" as 0 and "1,,2" as [1, 2].
    void valuesAreCheckedByType() {
        const std::vector<std::pair<QStringList, QString>> cases = {
            {{"--seed", "-1"}, "--seed: '-1' is not a decimal number >= 0"},
            {{"--seed", "0x10"}, "--seed: '0x10' is not a decimal number"},
            {{"--seed", "18446744073709551616"}, "--seed: '18446744073709551616' is out of range"},
            {{"--temperature", "nan"}, "--temperature: 'nan' is not a finite number"},
            {{"--top-p", "-inf"}, "--top-p: '-inf' is not a finite number"},
            {{"--top-k", "1e3"}, "--top-k: '1e3' is not a decimal integer"},
            {{"--dtype="}, "--dtype"},
            {{"--prompt-ids", "1,,2"}, "--prompt-ids: entry 2 is empty"},
            {{"--prompt-ids", "5,-1"}, "--prompt-ids: entry 2 '-1' is not a token id"},
            {{"-n", "99999999999"}, "--steps = 99999999999"},
        };
        for (const auto& [flags, expected] : cases) {
            const Run r = cli(QStringList{"generate", "-m", "/nonexistent/m.bin"} + flags);
            QVERIFY2(r.code == 2 && r.err.contains(expected.toUtf8()),
                     qPrintable(flags.join(' ') + " -> " + QString::number(r.code) + ": " + r.err));
        }
        for (const char* t : {"-1", "nan", "inf"}) {
            const Run r = cli({"replay", "x.kvsnap", "-m", "m.bin", "--threshold", t});
            QVERIFY2(r.code == 2 && r.err.contains("--threshold"), r.err.constData());
        }
        const Run head =
            cli({"patch", "a", "--from", "b", "--layer", "0", "--head", "-1", "-o", "c"});
        QVERIFY2(head.code == 2 && head.err.contains("--head"), head.err.constData());
        const Run seedBase = cli({"fork", "a", "-n", "2", "--seed-base", "-3", "-o", "d"});
        QVERIFY2(seedBase.code == 2 && seedBase.err.contains("--seed-base"),
                 seedBase.err.constData());
        // An empty prompt stays allowed (BOS alone).
        KVSCOPE_REQUIRE_DATA(kBin);
        QCOMPARE(cli({"generate", "-m", data(kBin), "-p", "", "-n", "1"}).code, 0);
    }

    // A restore refusal names the snapshot file (continue, replay) and drift says which one.
    void refusalsNameTheSnapshot() {
        KVSCOPE_REQUIRE_DATA(kBin);
        KVSCOPE_REQUIRE_DATA("models/aidreams260K/aidreams260K.bin");
        QTemporaryDir dir;
        const QString snap = dir.filePath("s.kvsnap");
        QCOMPARE(
            cli({"generate", "-m", data(kBin), "-p", "Once", "-n", "3", "--snapshot-out", snap})
                .code,
            0);
        const QString other = data("models/aidreams260K/aidreams260K.bin");
        for (const char* command : {"continue", "replay"}) {
            const Run r = cli({command, snap, "-m", other});
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.startsWith(("kvscope-cli: " + snap + ": restore refused").toUtf8()),
                     r.err.constData());
        }
        const Run d = cli({"drift", snap, snap, "-m", other});
        QCOMPARE(d.code, 1);
        QVERIFY2(d.err.startsWith(("kvscope-cli: A " + snap + ": restore refused").toUtf8()),
                 d.err.constData());
    }

    void failuresExitWith1AndNameTheFile() {
        auto r = cli({"info", "-m", "/nonexistent/model.bin"});
        QCOMPARE(r.code, 1);
        QVERIFY(r.err.contains("/nonexistent/model.bin"));
        KVSCOPE_REQUIRE_DATA("tokenizers/malformed");
        r = cli({"tokenize", "-t",
                 data("tokenizers/malformed/tinyllama-1.1b-chat-v1.0.tokenizer.nbsp-mangled.json"),
                 "--text", "hi"});
        QCOMPARE(r.code, 1);
        QVERIFY(r.err.contains("merges"));
    }

    void infoJson() {
        KVSCOPE_REQUIRE_DATA(kBin);
        auto r = cli({"info", "-m", data(kBin), "--json"});
        QCOMPARE(r.code, 0);
        const auto j = r.json();
        QCOMPARE(j["n_layers"].toInt(), 5);
        QCOMPARE(j["n_kv_heads"].toInt(), 4);
        QCOMPARE(j["tokenizer"].toObject()["kind"].toString(), QString("llama2c"));
        QCOMPARE(j["fingerprint"].toString().size(), 16);
        // Every weight but the permuted q/k rows is used in place from the file (tst_engine).
        QVERIFY(j["mapped_weight_bytes"].toDouble() > 0);
        QVERIFY(j["mapped_weight_bytes"].toDouble() < j["parameters"].toDouble() * 4);
    }

    // --cache-dtype: every command that runs a model takes it; the JSON says what the cache
    // was; a snapshot made with it records it and verifies clean on a model loaded with it
    // (named on one without); a value that is not a dtype is a usage error naming the option.
    void cacheDtypeOption() {
        KVSCOPE_REQUIRE_DATA(kBin);
        auto r = cli({"info", "-m", data(kBin), "--cache-dtype", "f16", "--json"});
        QCOMPARE(r.code, 0);
        QCOMPARE(r.json()["cache_dtype"].toString(), QString("f16"));
        QCOMPARE(r.json()["compute_dtype"].toString(), QString("f32"));
        QCOMPARE(cli({"info", "-m", data(kBin), "--json"}).json()["cache_dtype"].toString(),
                 QString("f32"));
        QTemporaryDir dir;
        const QString snap = dir.filePath("f16.kvsnap");
        r = cli({"generate", "-m", data(kBin), "--steps", "12", "--temperature", "0",
                 "--cache-dtype", "f16", "--snapshot-out", snap, "--json"});
        QCOMPARE(r.code, 0);
        QCOMPARE(r.json()["cache_dtype"].toString(), QString("f16"));
        QCOMPARE(r.json()["tokens"].toArray().size(), 12);
        r = cli({"verify", snap, "-m", data(kBin), "--cache-dtype", "f16", "--json"});
        QVERIFY2(r.code == 0, r.out.constData());
        QVERIFY(r.json()["ok"].toBool());
        QVERIFY2(!r.out.contains("cache.compute_dtype"), r.out.constData());
        QVERIFY(r.json()["equivalence"].toObject()["equivalent"].toBool());
        r = cli({"verify", snap, "-m", data(kBin), "--json"});
        QVERIFY2(r.out.contains("cache.compute_dtype"), r.out.constData());
        r = cli({"generate", "-m", data(kBin), "--cache-dtype", "q4", "--steps", "1"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--cache-dtype q4: f32, f16 or bf16"), r.err.constData());
        // The fault lab's model options take it too (a fault that recomputes a session).
        const QString leaked = dir.filePath("leaked.kvsnap");
        r = cli({"fault", "inject", "leaked-state", snap, "-o", leaked, "-m", data(kBin),
                 "--cache-dtype", "f16", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        r = cli({"fault", "inject", "leaked-state", snap, "-o", leaked, "-m", data(kBin),
                 "--cache-dtype", "q4"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--cache-dtype q4: f32, f16 or bf16"), r.err.constData());
    }

    void generateJsonMatchesReference() {
        KVSCOPE_REQUIRE_DATA(kBin);
        auto r =
            cli({"generate", "-m", data(kBin), "--steps", "200", "--temperature", "0", "--json"});
        QCOMPARE(r.code, 0);
        const auto j = r.json();
        QCOMPARE(ids(j["prompt_tokens"]), std::vector<int>{1});
        QCOMPARE(j["tokens"].toArray().size(), 200);
        const std::string ref =
            kvscope::readFileText(testdata::path("models/stories260K/REFERENCE.md"));
        const auto start = ref.find("--- EXPECTED (verbatim) ---\n") + 28;
        const std::string expected = ref.substr(start, ref.find("\n--- END ---", start) - start);
        QCOMPARE(j["text"].toString(), QString::fromStdString(expected));
    }

    void logitsAndTokenizeJson() {
        KVSCOPE_REQUIRE_DATA(kBin);
        auto r = cli({"logits", "-m", data(kBin), "-p", "Once upon a time", "--json"});
        QCOMPARE(r.code, 0);
        const auto j = r.json();
        QCOMPARE(ids(j["tokens"]), (std::vector<int>{1, 403, 407, 261, 378}));
        QCOMPARE(j["logits"].toArray().size(), 5);
        QCOMPARE(j["logits"].toArray()[0].toArray().size(), 512);
        QVERIFY(std::fabs(j["logits"].toArray()[0].toArray()[1].toDouble() - 8.4043417) < 1e-4);

        KVSCOPE_REQUIRE_DATA("tokenizers/hf/gpt2/tokenizer.json");
        r = cli({"tokenize", "-t", data("tokenizers/hf/gpt2/tokenizer.json"), "--text",
                 "How are you doing?", "--json"});
        QCOMPARE(r.code, 0);
        QCOMPARE(ids(r.json()["ids"]), (std::vector<int>{2437, 389, 345, 1804, 30}));
        r = cli({"tokenize", "-t", data("models/stories260K/tok512.bin"), "--text",
                 "Once upon a time", "--no-special", "--json"});
        QCOMPARE(ids(r.json()["ids"]), (std::vector<int>{403, 407, 261, 378}));
    }

    // .bin, .gguf and the HF folder converted from the .bin: same greedy tokens, same logits.
    void formatsAgree() {
        KVSCOPE_REQUIRE_DATA(kBin);
        KVSCOPE_REQUIRE_DATA(kGguf);
        QTemporaryDir dir;
        const QString hf = dir.path() + "/stories-hf";
        auto conv = cli({"convert", "-m", data(kBin), "--to", "hf", "-o", hf});
        QCOMPARE(conv.code, 0);
        for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                              "tokenizer_config.json", "generation_config.json"})
            QVERIFY2(QFile::exists(hf + "/" + f), f);
        // Converting again into the same folder is refused (nothing is damaged).
        QCOMPARE(cli({"convert", "-m", data(kBin), "--to", "hf", "-o", hf}).code, 1);

        const QStringList models{data(kBin), data(kGguf), hf};
        std::vector<std::vector<int>> tokens;
        std::vector<QJsonObject> logits;
        for (const auto& m : models) {
            auto g = cli({"generate", "-m", m, "-p", "Once upon a time", "--steps", "120",
                          "--temperature", "0", "--json"});
            QVERIFY2(g.code == 0, g.err.constData());
            tokens.push_back(ids(g.json()["tokens"]));
            auto l = cli({"logits", "-m", m, "-p", "Once upon a time there was", "--json"});
            QVERIFY2(l.code == 0, l.err.constData());
            logits.push_back(l.json());
        }
        QCOMPARE(tokens[1], tokens[0]);
        QCOMPARE(tokens[2], tokens[0]);
        const double dGguf = maxLogitDiff(logits[0], logits[1]);
        const double dHf = maxLogitDiff(logits[0], logits[2]);
        qInfo("max |logit| difference vs .bin: gguf %.3g, converted HF %.3g (tolerance 1e-5)",
              dGguf, dHf);
        QVERIFY(dGguf < 1e-5);
        QVERIFY(dHf < 1e-5);

        // The converted folder is a standard HF folder: its tokenizer.json encodes like tok512.
        auto t =
            cli({"tokenize", "-t", hf + "/tokenizer.json", "--text", "Once upon a time", "--json"});
        QCOMPARE(ids(t.json()["ids"]), (std::vector<int>{1, 403, 407, 261, 378}));
        auto info = cli({"info", "-m", hf, "--json"});
        QCOMPARE(info.json()["source_format"].toString(), QString("hf"));
        QCOMPARE(info.json()["n_kv_heads"].toInt(), 4);
    }

    // ---- Hostile input, round two (issue 44): arguments that meant nothing, sizes asked for
    // before they were checked, a structurally broken head mask, inputs named by the wrong kind.

    // attention: a negative --query showed every row; each index is refused outside its range
    // (exit 2, naming the flag and the range); only leaving --query out means every row.
    void attentionRefusesIndicesOutsideTheirRange() {
        KVSCOPE_REQUIRE_DATA(kBin);
        QTemporaryDir dir;
        const QString snap = dir.filePath("s.kvsnap");
        QCOMPARE(cli({"generate", "-m", data(kBin), "-p", "Once upon a time", "-n", "3",
                      "--temperature", "0", "--snapshot-out", snap})
                     .code,
                 0);
        const QStringList base{"attention", snap, "-m", data(kBin), "--layer", "0", "--head", "0"};
        const Run all = cli(base + QStringList{"--json"});
        QVERIFY2(all.code == 0, all.err.constData());
        const int tokens = all.json()["queries"].toInt();
        QCOMPARE(all.json()["rows"].toArray().size(), tokens);
        const QString range = "outside 0.." + QString::number(tokens - 1);
        const std::vector<std::pair<QStringList, QString>> cases = {
            {{"--query", "-2"}, "--query -2 is " + range},
            {{"--query", "-1"}, "--query -1 is " + range},
            {{"--query", QString::number(tokens)}, "--query " + QString::number(tokens)},
            {{"--top", "0"}, "--top 0"},
            {{"--top", "-3"}, "--top -3"},
        };
        for (const auto& [flags, expected] : cases) {
            const Run r = cli(base + flags);
            QVERIFY2(r.code == 2 && r.err.contains(expected.toUtf8()),
                     qPrintable(flags.join(' ') + " -> " + QString::number(r.code) + ": " + r.err));
        }
        for (const auto& [flag, value] :
             std::vector<std::pair<QString, QString>>{{"--layer", "-1"}, {"--head", "-1"}}) {
            QStringList args{"attention", snap, "-m", data(kBin), "--layer", "0", "--head", "0"};
            args[args.indexOf(flag) + 1] = value;
            const Run r = cli(args);
            QVERIFY2(r.code == 2 &&
                         r.err.contains((flag + " " + value + " is outside 0..").toUtf8()),
                     qPrintable(flag + " -> " + QString::number(r.code) + ": " + r.err));
        }
        const Run one = cli(base + QStringList{"--query", "0", "--json"});
        QVERIFY2(one.code == 0, one.err.constData());
        QCOMPARE(one.json()["rows"].toArray().size(), 1);
    }

    // survive: --budget 25 printed "budget 2500 %". A budget is a share in (0, 1] or a whole
    // slot count up to the cache's slots, printed as slots; anything else is refused naming the
    // flag, for --budget and every value of --budgets, and so are the other numbers and the
    // flags that belong to the other mode.
    void surviveBudgetsMeanOneThing() {
        KVSCOPE_REQUIRE_DATA(kBin);
        QTemporaryDir dir;
        const QString snap = dir.filePath("s.kvsnap");
        QCOMPARE(cli({"generate", "-m", data(kBin), "-p", "Once upon a time", "-n", "6",
                      "--temperature", "0", "--snapshot-out", snap})
                     .code,
                 0);
        const QStringList base{"survive", snap, "-m", data(kBin)};
        const Run counted = cli(base + QStringList{"-n", "2", "--policy", "h2o", "--budget", "3"});
        QVERIFY2(counted.code == 0, counted.err.constData());
        QVERIFY2(counted.out.contains("at budget 3 slots"), counted.out.constData());
        QVERIFY2(!counted.out.contains("300 %"), counted.out.constData());
        const Run share = cli(base + QStringList{"-n", "2", "--policy", "h2o", "--budget", "0.5"});
        QVERIFY2(share.code == 0 && share.out.contains("at budget 50 %"), share.out.constData());

        const std::vector<std::pair<QStringList, QString>> cases = {
            {{"--budget", "25"},
             "--budget 25: a share of the cached slots in (0, 1] or a whole "
             "slot count 2.."},
            {{"--budget", "2.5"}, "--budget 2.5: a share"},
            {{"--budget", "0"}, "--budget 0: a share"},
            {{"--budget", "-0.5"}, "--budget -0.5: a share"},
            {{"--budget", "inf"}, "--budget: 'inf' is not a finite number"},
            {{"--policy", "quant-kivi", "--budget", "0.5"}, "--budget 0.5: policy quant-kivi"},
            {{"-n", "0"}, "-n/--steps 0 is outside 1..65536"},
            {{"--budgets", "0.5"}, "--budgets sets the sweep's runs"},
            {{"--sweep", "--budget", "0.5"}, "--budget sets one run"},
            {{"--sweep", "--budgets", "0.5", "25"}, "--budgets 25: a share"},
            {{"--sweep", "--budgets", "0.25", "-1"}, "--budgets -1: a share"},
            {{"--sweep", "--layers", "99"}, "--layers 99 is outside 0.."},
            {{"--sweep", "--allocations", "diagonal"}, "--allocations diagonal"},
        };
        for (const auto& [flags, expected] : cases) {
            // An eviction policy unless the case names one (or sweeps).
            const QStringList policy = flags.contains("--policy") || flags.contains("--sweep")
                                           ? QStringList()
                                           : QStringList{"--policy", "h2o"};
            const QStringList steps = flags.contains("-n") ? QStringList() : QStringList{"-n", "2"};
            const Run r = cli(base + policy + steps + flags);
            QVERIFY2(r.code == 2 && r.err.contains(expected.toUtf8()),
                     qPrintable(flags.join(' ') + " -> " + QString::number(r.code) + ": " + r.err));
        }
    }

    // random-model: --layers 1024 built until it died. The bytes are estimated first and what
    // does not fit the machine is refused by name, before anything is drawn or written. The
    // file size limit makes "the machine" the same everywhere.
    void randomModelRefusesWhatDoesNotFit() {
        QTemporaryDir dir;
        const QString out = dir.filePath("huge");
        QElapsedTimer t;
        t.start();
        const Run r = hostile44::cliWithFileLimit(
            {"random-model", "--shape", "smollm2-135m", "--layers", "1024", "-o", out}, 64 << 20);
        QVERIFY2(r.code == 1, qPrintable(QString::number(r.code) + ": " + r.err));
        for (const char* part :
             {"--shape smollm2-135m --layers 1024 --dtype bf16 does not fit",
              "model.safetensors would take 7.", "file size limit (ulimit -f)", "nothing written"})
            QVERIFY2(r.err.contains(part), r.err.constData());
        QVERIFY2(!r.err.contains("frame #"), r.err.constData());
        QVERIFY2(t.elapsed() < 60000, qPrintable(QString::number(t.elapsed())));
        QVERIFY(!QFileInfo::exists(out + "/config.json"));
        QVERIFY(!QFileInfo::exists(out + "/model.safetensors"));
        // The full-size 8B shape in f32 asks for ~900 GB of disk: refused on any machine whose
        // disk or file size limit is smaller (the limit here), at once.
        const Run big =
            hostile44::cliWithFileLimit({"random-model", "--shape", "llama-3.1-8b", "--layers",
                                         "1024", "--dtype", "f32", "-o", out},
                                        1ull << 30);
        QVERIFY2(big.code == 1 && big.err.contains("model.safetensors would take 89") &&
                     big.err.contains("--dtype f32 does not fit"),
                 big.err.constData());
        // What fits is still written.
        const Run small =
            hostile44::cliWithFileLimit({"random-model", "--shape", "stories110m", "--layers", "1",
                                         "--dtype", "f16", "-o", dir.filePath("small"), "--json"},
                                        1ull << 30);
        QVERIFY2(small.code == 0, small.err.constData());
    }

    // diff exited 0 on a snapshot whose head mask had the wrong length or entries other than
    // 0/1; it now refuses (exit 1) naming the file and the check: such entries have no (layer,
    // head, slot) to be compared at. Sound masks are compared at each (layer, head, slot) both
    // hold, also when the cache lengths differ (index by index they once lined up another
    // head's entries).
    void diffRefusesABrokenHeadMask() {
        KVSCOPE_REQUIRE_DATA(kBin);
        QTemporaryDir dir;
        const QString snap = dir.filePath("s.kvsnap"), cut = dir.filePath("cut.kvsnap");
        QCOMPARE(cli({"generate", "-m", data(kBin), "-p", "Once upon a time", "-n", "3",
                      "--temperature", "0", "--snapshot-out", snap})
                     .code,
                 0);
        QCOMPARE(cli({"truncate", snap, "-m", data(kBin), "--at", "5", "-o", cut}).code, 0);
        const QString sound = dir.filePath("sound.kvsnap"), shorter = dir.filePath("short.kvsnap"),
                      twos = dir.filePath("twos.kvsnap"), hidden = dir.filePath("hidden.kvsnap"),
                      cutHidden = dir.filePath("cut-hidden.kvsnap");
        auto ones = [](int layers, int heads, int length) {
            return QByteArray(layers * heads * length, '\1');
        };
        // Layer 1, KV head 0 does not see slot 0.
        auto hide = [](int layers, int heads, int length) {
            QByteArray m(layers * heads * length, '\1');
            m[1 * heads * length] = '\0';
            return m;
        };
        QVERIFY(hostile44::withHeadMask(snap, sound, ones));
        QVERIFY(hostile44::withHeadMask(snap, shorter, [](int layers, int heads, int length) {
            return QByteArray(layers * heads * length - 1, '\1');
        }));
        QVERIFY(hostile44::withHeadMask(snap, twos, [](int layers, int heads, int length) {
            QByteArray m(layers * heads * length, '\1');
            m[m.size() / 2] = '\2';
            return m;
        }));
        QVERIFY(hostile44::withHeadMask(snap, hidden, hide));
        QVERIFY(hostile44::withHeadMask(cut, cutHidden, hide));

        const Run ok = cli({"diff", snap, sound, "--json"});
        QVERIFY2(ok.code == 0, ok.err.constData());
        QCOMPARE(ok.json()["invalid"].toArray().size(), 0);
        QCOMPARE(ok.json()["head_mask"].toObject()["differ"].toInt(), 0);
        const Run one = cli({"diff", sound, hidden, "--json"});
        QVERIFY2(one.code == 0, one.err.constData());
        QCOMPARE(one.json()["head_mask"].toObject()["differ"].toInt(), 1);
        const Run aligned = cli({"diff", hidden, cutHidden, "--json"});
        QVERIFY2(aligned.code == 0, aligned.err.constData());
        const QJsonObject hm = aligned.json()["head_mask"].toObject();
        QVERIFY2(hm["differ"].toInt() == 0 && hm["a"].toInt() > hm["b"].toInt() &&
                     hm["compared"].toInt() == hm["b"].toInt(),
                 QJsonDocument(hm).toJson().constData());

        const std::vector<std::pair<QString, QString>> broken = {{shorter, "head_mask.shape"},
                                                                 {twos, "head_mask.values"}};
        for (const auto& [file, check] : broken) {
            for (const QStringList& args :
                 {QStringList{"diff", snap, file}, QStringList{"diff", file, snap, "--json"}}) {
                const Run r = cli(args);
                QVERIFY2(
                    r.code == 1 && r.err.contains((file + ": " + check).toUtf8()),
                    qPrintable(args.join(' ') + " -> " + QString::number(r.code) + ": " + r.err));
                QVERIFY2(r.out.isEmpty(), r.out.constData());
            }
        }
    }

    // import of a FIFO or a folder said "not a llama.cpp state file": it now says what the
    // input is (the readers' own check, openRegularFile), whatever --format says, before the
    // model loads; an unreadable .safetensors says why instead of a JSON library's words; a
    // negative --sequence is refused instead of meaning "the lowest".
    void importNamesWhatTheInputIs() {
        QTemporaryDir dir;
        const QString fifo = dir.filePath("state.fifo"), folder = dir.filePath("state.bin"),
                      out = dir.filePath("out.kvsnap");
        QVERIFY(::mkfifo(fifo.toLocal8Bit().constData(), 0600) == 0);
        QVERIFY(QDir().mkdir(folder));
        const std::vector<std::pair<QString, QString>> kinds = {{fifo, "it is a FIFO"},
                                                                {folder, "it is a folder"}};
        for (const auto& [input, kind] : kinds)
            for (const char* format : {"auto", "llamacpp", "safetensors"}) {
                const Run r = cli(
                    {"import", input, "-m", "/nonexistent/m.bin", "-o", out, "--format", format});
                QVERIFY2(r.code == 1 &&
                             r.err.contains((input + ": not a regular file (" + kind).toUtf8()) &&
                             !r.err.contains("llama.cpp state file"),
                         qPrintable(input + " " + format + " -> " + QString::number(r.code) + ": " +
                                    r.err));
            }
        const QString missing = dir.filePath("missing.safetensors");
        const Run gone = cli({"import", missing, "-m", "/nonexistent/m.bin", "-o", out});
        QVERIFY2(gone.code == 1 && gone.err.contains((missing + ": cannot open file").toUtf8()) &&
                     !gone.err.contains("json.exception"),
                 gone.err.constData());
        const Run seq =
            cli({"import", fifo, "-m", "/nonexistent/m.bin", "-o", out, "--sequence", "-2"});
        QVERIFY2(seq.code == 2 && seq.err.contains("--sequence -2"), seq.err.constData());
        QVERIFY(!QFileInfo::exists(out));
    }

    // A file named .gguf that is not one is named as that, with the bytes it starts with, not
    // read as a llama2.c checkpoint ("header field dim = 1574218895 ..."); the same bytes under
    // another name are still tried as llama2.c.
    void ggufNameWithoutGgufBytes() {
        QTemporaryDir dir;
        const QString fake = dir.filePath("model.GGUF"), empty = dir.filePath("empty.gguf"),
                      other = dir.filePath("model.bin");
        for (const QString& f : {fake, other}) {
            QFile file(f);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write(QByteArray("\x7f"
                                  "ELF",
                                  4) +
                       QByteArray(4096, '\x41'));
        }
        QFile(empty).open(QIODevice::WriteOnly);
        const Run r = cli({"info", "-m", fake});
        QVERIFY2(r.code == 1 && r.err.contains((fake + ": not a GGUF file: it starts with the "
                                                       "bytes 7f 45 4c 46")
                                                   .toUtf8()),
                 r.err.constData());
        const Run e = cli({"info", "-m", empty});
        QVERIFY2(e.code == 1 && e.err.contains("not a GGUF file: it is empty"), e.err.constData());
        const Run b = cli({"info", "-m", other});
        QVERIFY2(b.code == 1 && !b.err.contains("not a GGUF file"), b.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
