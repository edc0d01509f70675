// Hostile input through kvscope-cli: each class a hostile-input run found (crashes, hangs,
// memory blow-ups, unclear errors) has a regression here, run as a user would run it. The
// classes tested at the library level live beside their code: decompression bombs in
// tst_snapfile, a 100,000-deep lineage in tst_lineage, template budgets in tst_chatlimits,
// NaN weights and sampler values in tst_outputs.
#include "formats/gguf.h"
#include "formats/ggufwriter.h"
#include "snapfile/writer.h"
#include "state/ledger/snapshotio.h"
#include "testdata.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

namespace {

const QString kBin = "models/stories260K/stories260K.bin";
const QString kGguf = "models/stories260K/stories260K.gguf";

struct Run {
    int code = -1; // -1: killed by a signal or by the timeout
    QByteArray out, err;
    qint64 ms = 0;
};

Run cli(const QStringList& args, int timeoutMs = 60000) {
    QProcess p;
    QElapsedTimer t;
    t.start();
    p.start(KVSCOPE_CLI, args);
    if (!p.waitForFinished(timeoutMs))
        p.kill(), p.waitForFinished();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError(), t.elapsed()};
}

QString data(const QString& rel) {
    return QString::fromStdString(testdata::path(rel));
}

// Internal text that must never reach a user.
bool leaksInternals(const QByteArray& err) {
    for (const char* s : {"std::bad_alloc", "basic_string", "vector::", "terminate called",
                          "Exception raised from", "frame #", "[json.exception"})
        if (err.contains(s))
            return true;
    return false;
}

// A copy of stories260K.gguf rewritten through `edit(writer, file)`, which sets the metadata
// and adds the tensors. Returns `out`, or "" when it could not be written.
template <typename Edit> QString rewriteGguf(const QString& out, Edit edit) {
    auto f = kvscope::gguf::File::open(data(kGguf).toStdString());
    if (!f)
        return {};
    kvscope::gguf::Writer w(f.value().alignment());
    edit(w, f.value());
    return w.write(out.toStdString()) ? out : QString();
}

// A copy of stories260K.gguf with one metadata value replaced.
QString ggufWith(const QString& out, const std::string& key, kvscope::gguf::Value value) {
    return rewriteGguf(out, [&](kvscope::gguf::Writer& w, const kvscope::gguf::File& f) {
        for (const auto& [k, v] : f.metadata())
            w.set(k, k == key ? value : v);
        if (!f.has(key))
            w.set(key, value);
        for (const auto& t : f.tensors())
            w.addTensor(t.name, t.dims, t.type, f.readRaw(t));
    });
}

// A copy of stories260K.gguf with tensor `name` stored as `dims` (GGUF order), its bytes
// zero-padded or cut to fit.
QString ggufWithTensorDims(const QString& out, const std::string& name,
                           std::vector<std::int64_t> dims) {
    return rewriteGguf(out, [&](kvscope::gguf::Writer& w, const kvscope::gguf::File& f) {
        for (const auto& [k, v] : f.metadata())
            w.set(k, v);
        for (const auto& t : f.tensors()) {
            auto bytes = f.readRaw(t);
            if (t.name != name) {
                w.addTensor(t.name, t.dims, t.type, bytes);
                continue;
            }
            std::int64_t n = 4;
            for (auto d : dims)
                n *= d;
            bytes.resize(static_cast<std::size_t>(n));
            w.addTensor(t.name, dims, t.type, bytes);
        }
    });
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool writeAll(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size();
}

// A copy of the folder `from` (flat) at `to`, with `file` replaced by `contents`.
bool copyFolderWith(const QString& from, const QString& to, const QString& file,
                    const QByteArray& contents) {
    QDir().mkpath(to);
    for (const QString& n : QDir(from).entryList(QDir::Files))
        if (n != file && !QFile::copy(from + "/" + n, to + "/" + n))
            return false;
    return writeAll(to + "/" + file, contents);
}

} // namespace

class TestHostile : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    QString m_snap;

private slots:
    void initTestCase() {
        KVSCOPE_REQUIRE_DATA(kBin);
        QVERIFY(m_tmp.isValid());
        m_snap = m_tmp.filePath("base.kvsnap");
        const Run r = cli({"generate", "-m", data(kBin), "--prompt", "Once upon", "-n", "3",
                           "--temperature", "0", "--snapshot-out", m_snap});
        QVERIFY2(r.code == 0, r.err.constData());
    }

    // A GGUF whose head count does not divide the width (or whose KV heads do not divide the
    // heads) is refused naming the file and the key, before libtorch sees a shape.
    void ggufAttentionArithmetic() {
        KVSCOPE_REQUIRE_DATA(kGguf);
        using kvscope::gguf::Value;
        struct Case {
            std::string key;
            Value value;
            const char* says;
        };
        const Case cases[] = {
            {"llama.attention.head_count", Value::scalar<std::uint32_t>(7),
             "llama.attention.head_count = 7 does not divide llama.embedding_length"},
            {"llama.attention.head_count_kv", Value::scalar<std::uint32_t>(3),
             "llama.attention.head_count_kv = 3 does not divide"},
            {"llama.context_length", Value::scalar<std::uint64_t>(1ull << 40),
             "llama.context_length = 1099511627776 is outside 1..16777216"},
            // Each check names the key that is wrong (head_count_kv = 0 named head_count).
            {"llama.attention.head_count_kv", Value::scalar<std::uint32_t>(0),
             "llama.attention.head_count_kv = 0 is outside 1..1024"},
            {"llama.attention.head_count", Value::scalar<std::uint32_t>(0),
             "llama.attention.head_count = 0 is outside 1..1024"},
            // RoPE: a base that makes the angles NaN/Inf, a rotary width this engine cannot
            // run (it rotates whole heads). All of these loaded and ran.
            {"llama.rope.freq_base", Value::scalar<float>(std::numeric_limits<float>::infinity()),
             "llama.rope.freq_base = inf must be a finite positive number"},
            {"llama.rope.freq_base", Value::scalar<float>(std::numeric_limits<float>::quiet_NaN()),
             "llama.rope.freq_base = nan must be a finite positive number"},
            {"llama.rope.freq_base", Value::scalar<float>(0), "llama.rope.freq_base = 0 must be"},
            {"llama.rope.freq_base", Value::scalar<float>(-10000), "llama.rope.freq_base = -10000"},
            {"llama.rope.dimension_count", Value::scalar<std::uint32_t>(7),
             "llama.rope.dimension_count = 7 differs from head_dim 8"},
            {"llama.rope.dimension_count", Value::scalar<std::uint32_t>(1000),
             "llama.rope.dimension_count = 1000 differs from head_dim 8"},
        };
        int i = 0;
        for (const auto& c : cases) {
            const QString path = ggufWith(
                m_tmp.filePath(QString::fromStdString(c.key) + QString::number(i++) + ".gguf"),
                c.key, c.value);
            QVERIFY(!path.isEmpty());
            const Run r = cli({"generate", "-m", path, "--prompt", "Once", "-n", "2"});
            QVERIFY2(r.code == 1, qPrintable(QString::fromStdString(c.key) + ": exit " +
                                             QString::number(r.code)));
            QVERIFY2(r.err.contains(QFileInfo(path).fileName().toUtf8()) && r.err.contains(c.says),
                     r.err.constData());
            QVERIFY2(!r.err.contains("is invalid for input") && !leaksInternals(r.err),
                     r.err.constData());
        }
    }

    // inspect on a sound container whose ledger is unreadable prints what there is and exits 1
    // naming the field (it exited 0).
    void inspectFailsOnAnUnreadableLedger() {
        const QString path = m_tmp.filePath("no-ledger.kvsnap");
        auto w = kvscope::snapfile::Writer::create(path.toStdString());
        QVERIFY(w);
        QVERIFY(w.value()->finish({{"ledger_version", 1}, {"tokens", "many"}}));
        for (const bool json : {false, true}) {
            const Run r =
                cli(json ? QStringList{"inspect", path, "--json"} : QStringList{"inspect", path});
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.contains("no-ledger.kvsnap") && r.err.contains("ledger"),
                     r.err.constData());
            QVERIFY(!r.out.isEmpty()); // the document is still shown
        }
    }

    // A folder whose lineage is one chain 3,000 snapshots deep (manifests only): tree prints
    // it as text and JSON in seconds, without recursion (12,000 overflowed the stack, 3,000 ran
    // past 20 s).
    void deepLineageFolder() {
        auto base = kvscope::state::loadManifest(m_snap.toStdString());
        QVERIFY2(base, base.message().c_str());
        QTemporaryDir dir;
        constexpr int n = 3000;
        for (int i = 0; i < n; ++i) {
            nlohmann::json m = base.value();
            m["lineage"]["id"] = "chain-" + std::to_string(i);
            m["lineage"]["parent_id"] = i == 0 ? "" : "chain-" + std::to_string(i - 1);
            m["lineage"]["operation"] = i == 0 ? "generate" : "continue";
            kvscope::snapfile::WriteOptions o;
            auto w = kvscope::snapfile::Writer::create(
                dir.filePath(QString("s%1.kvsnap").arg(i, 5, 10, QChar('0'))).toStdString(), o);
            QVERIFY(w);
            QVERIFY(w.value()->finish(m));
        }
        for (const bool json : {false, true}) {
            const Run r = cli(json ? QStringList{"tree", dir.path(), "--json"}
                                   : QStringList{"tree", dir.path()},
                              120000);
            QVERIFY2(r.code == 0, r.err.constData());
            qInfo("tree%s over a %d-deep chain: %lld ms, %lld bytes", json ? " --json" : "", n,
                  r.ms, qint64(r.out.size()));
            if (json) {
                const auto j = nlohmann::json::parse(r.out.toStdString());
                QCOMPARE(j["count"].get<int>(), n);
                QVERIFY(j["problems"].empty());
            } else {
                QVERIFY(r.out.contains(QByteArray("[depth ") + QByteArray::number(n - 1)));
            }
        }
    }

    // A stored sampler that cannot be used and out-of-range arguments are refused at the
    // boundary with the flag or field named; nothing crashes.
    void argumentsAreChecked() {
        const QString m = data(kBin);
        struct Case {
            QStringList args;
            const char* says;
        };
        const Case cases[] = {
            {{"generate", "-m", m, "-n", "2", "--top-k", "-5"}, "top-k"},
            {{"truncate", m_snap, "--at", "0", "-m", m, "-o", m_tmp.filePath("t.kvsnap")}, "at"},
            {{"truncate", m_snap, "--at", "99999", "-m", m, "-o", m_tmp.filePath("t.kvsnap")},
             "at"},
            {{"patch", m_snap, "--from", m_snap, "--layer", "-1", "-o", m_tmp.filePath("p.kvsnap")},
             "layer"},
            {{"patch", m_snap, "--from", m_snap, "--layer", "999", "-o",
              m_tmp.filePath("p.kvsnap")},
             "layer"},
            {{"patch", m_snap, "--from", m_snap, "--layer", "0", "--positions", "5:2", "-o",
              m_tmp.filePath("p.kvsnap")},
             "positions"},
            {{"splice", m_snap, "--from", m_snap, "--range", "0:9223372036854775807", "--at", "1",
              "-m", m, "-o", m_tmp.filePath("s.kvsnap")},
             "range"},
            {{"fork", m_snap, "-n", "0", "-o", m_tmp.filePath("f")}, "branches"},
        };
        for (const auto& c : cases) {
            const Run r = cli(c.args);
            QVERIFY2(r.code == 1 || r.code == 2, qPrintable(c.args.join(' ') + ": exit " +
                                                            QString::number(r.code) + " " + r.err));
            QVERIFY2(r.err.contains(c.says) && !leaksInternals(r.err),
                     qPrintable(c.args.join(' ') + ": " + r.err));
        }
    }

    // A tensor whose stored shape disagrees with the config is refused naming the file, the
    // tensor and both shapes (libtorch's "shape '[8, 4, 2, 64]' is invalid for input of size
    // 4160" leaked). A type that makes a tensor smaller than the bytes written for it is
    // refused too (Q4_0 over f32 data loaded, converted and ran as garbage).
    void ggufTensorLies() {
        KVSCOPE_REQUIRE_DATA(kGguf);
        const QString shape = ggufWithTensorDims(m_tmp.filePath("attn_q-64x65.gguf"),
                                                 "blk.0.attn_q.weight", {64, 65});
        QVERIFY(!shape.isEmpty());
        Run r = cli({"info", "-m", shape});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("attn_q-64x65.gguf: tensor 'blk.0.attn_q.weight' has shape "
                                "[64, 65] but the config implies [64, 64]"),
                 r.err.constData());

        // The last tensor retyped Q4_0 (18 bytes per 32 values instead of 128).
        QByteArray bytes = readAll(data(kGguf));
        auto f = kvscope::gguf::File::open(data(kGguf).toStdString());
        QVERIFY(f);
        const auto& last =
            *std::max_element(f.value().tensors().begin(), f.value().tensors().end(),
                              [](const auto& a, const auto& b) { return a.offset < b.offset; });
        const QByteArray name = QByteArray::fromStdString(last.name);
        const qsizetype at = bytes.indexOf(name);
        QVERIFY(at > 0);
        const qsizetype typeAt = at + name.size() + 4 + 8 * qsizetype(last.dims.size());
        const std::uint32_t q4 = 2;
        bytes.replace(typeAt, 4, QByteArray(reinterpret_cast<const char*>(&q4), 4));
        const QString lie = m_tmp.filePath("type-last-q4.gguf");
        QVERIFY(writeAll(lie, bytes));
        r = cli({"convert", "-m", lie, "-o", m_tmp.filePath("type-lie-out")});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("type-last-q4.gguf") && r.err.contains(name) &&
                     r.err.contains("Q4_0") && r.err.contains("unused bytes follow"),
                 r.err.constData());
        QVERIFY(!QFileInfo::exists(m_tmp.filePath("type-lie-out")));
    }

    // JSON that does not parse is reported in our words with the file, line and column, never
    // with nlohmann's "[json.exception...]" text; values of the wrong type name the key.
    void jsonErrorsNameFileAndPlace() {
        KVSCOPE_REQUIRE_DATA(kBin);
        const QString hf = m_tmp.filePath("hf");
        if (!QFileInfo::exists(hf + "/config.json")) {
            const Run r = cli({"convert", "-m", data(kBin), "-o", hf});
            QVERIFY2(r.code == 0, r.err.constData());
        }
        const QByteArray config = readAll(hf + "/config.json");
        const QByteArray tokenizer = readAll(hf + "/tokenizer.json");
        QByteArray weights = readAll(hf + "/model.safetensors");
        QVERIFY(config.contains("\"hidden_size\"") && !tokenizer.isEmpty());
        const qsizetype colon = weights.indexOf("\"dtype\":") + 7;
        QVERIFY(colon > 7);
        weights[colon] = '?';
        auto withValue = [&](const QByteArray& key, const QByteArray& value) {
            auto j = nlohmann::json::parse(config.toStdString());
            j[key.toStdString()] = nlohmann::json::parse(value.toStdString());
            return QByteArray::fromStdString(j.dump(2));
        };
        auto replaced = [&](const QByteArray& from, const QByteArray& to) {
            QByteArray c = config;
            return c.replace(from, to);
        };
        const QByteArray hiddenSize = "\"hidden_size\": 64";
        QVERIFY(config.contains(hiddenSize));
        struct Case {
            const char* tag;
            QString file;
            QByteArray contents;
            QStringList says;
        };
        const QList<Case> cases = {
            {"nan",
             "config.json",
             replaced(hiddenSize, "\"hidden_size\": NaN"),
             {"config.json: not valid JSON: line ", "NaN and Infinity are not JSON numbers"}},
            {"overflow",
             "config.json",
             replaced(hiddenSize, "\"hidden_size\": 1e99999"),
             {"config.json: not valid JSON: line ", "the number 1e99999 is too large"}},
            {"cut",
             "config.json",
             config.left(100),
             {"config.json: not valid JSON: line ", "the text ends before the JSON value does"}},
            {"deep",
             "config.json",
             QByteArray(100000, '[') + QByteArray(100000, ']'),
             {"config.json: JSON nested deeper than 128 levels"}},
            {"header",
             "model.safetensors",
             weights,
             {"model.safetensors: header is not valid JSON: line 1, column ", "expected ':'"}},
            {"tokenizer",
             "tokenizer.json",
             tokenizer.left(tokenizer.size() / 2),
             {"tokenizer.json: not valid JSON: line "}},
            {"generation",
             "generation_config.json",
             R"({"bos_token_id": "x"})",
             {"generation_config.json: bos_token_id: expected a token id or a list of token ids, "
              "found a string"}},
            {"generation-list",
             "generation_config.json",
             R"({"eos_token_id": [[1]]})",
             {"generation_config.json: eos_token_id: expected a token id",
              "a list holding a list"}},
            // Values the engine cannot run, or a config that contradicts itself: each loaded.
            {"theta-0",
             "config.json",
             withValue("rope_theta", "0"),
             {"config.json: rope_theta = 0 must be a finite positive number"}},
            {"theta-negative",
             "config.json",
             withValue("rope_theta", "-10000.0"),
             {"config.json: rope_theta = -10000 must be a finite positive number"}},
            {"scaling-0",
             "config.json",
             withValue("rope_scaling", R"({"type": "linear", "factor": 0})"),
             {"config.json: rope_scaling.factor = 0 must be a finite positive number"}},
            {"model-type",
             "config.json",
             withValue("model_type", R"("gpt2")"),
             {"config.json: model_type 'gpt2' contradicts architectures[0] 'LlamaForCausalLM'"}},
            {"architectures",
             "config.json",
             withValue("architectures", "[123]"),
             {"config.json: architectures[0]: expected a class name (a string), found an integer"}},
            {"kv-heads",
             "config.json",
             withValue("num_key_value_heads", "0"),
             {"config.json: num_key_value_heads = 0 is outside 1..1024"}},
            {"float-size",
             "config.json",
             withValue("hidden_size", "64.5"),
             {"config.json: hidden_size: expected an integer, found a number"}},
        };
        for (const auto& c : cases) {
            const QString dir = m_tmp.filePath(QString("hf-") + c.tag);
            QVERIFY(copyFolderWith(hf, dir, c.file, c.contents));
            const Run r = cli({"info", "-m", dir});
            QVERIFY2(r.code == 1, qPrintable(QString(c.tag) + ": exit " + QString::number(r.code)));
            for (const QString& says : c.says)
                QVERIFY2(r.err.contains(says.toUtf8()), qPrintable(QString(c.tag) + ": " + r.err));
            QVERIFY2(!leaksInternals(r.err), r.err.constData());
        }
    }

    // When the output turns NaN, the error names the model file and the first tensor holding
    // NaN/Inf, at its element and byte in the file; with finite weights it says so.
    void nonFiniteOutputNamesTheTensor() {
        KVSCOPE_REQUIRE_DATA(kBin);
        QByteArray bytes = readAll(data(kBin));
        // stories260K: dim 64, 5 layers, vocab 512; wq follows the embedding and the 5
        // attention norms. Element 123 of layer 0's wq (in the file's interleaved layout: the
        // loader permutes the rows, the message must not).
        const qsizetype wq = 28 + (512 * 64 + 5 * 64) * 4;
        const qsizetype at = wq + 123 * 4;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        bytes.replace(at, 4, QByteArray(reinterpret_cast<const char*>(&nan), 4));
        const QString bad = m_tmp.filePath("wq-nan.bin");
        QVERIFY(writeAll(bad, bytes));
        QVERIFY(QFile::copy(data("models/stories260K/tok512.bin"), m_tmp.filePath("tok512.bin")) ||
                QFileInfo::exists(m_tmp.filePath("tok512.bin")));
        Run r =
            cli({"generate", "-m", bad, "-p", "Once upon a time", "-n", "2", "--temperature", "0"});
        QCOMPARE(r.code, 1);
        QVERIFY2(
            r.err.contains("wq-nan.bin: tensor 'wq (layer 0)' holds NaN at element 123 (byte " +
                           QByteArray::number(at) + " of the file)"),
            r.err.constData());

        // A snapshot holding NaN keys, continued by force on sound weights: the weights are
        // said to be finite and the cache named as the likely source.
        const QString nanSnap = m_tmp.filePath("nan-keys.kvsnap");
        auto snap = kvscope::state::load(m_snap.toStdString());
        QVERIFY2(snap, snap.message().c_str());
        auto& key = snap.value().layers.at(2).key;
        auto nanKeys = key->toVector();
        for (std::size_t i = 0; i + 4 <= nanKeys.size(); i += 4)
            std::memcpy(nanKeys.data() + i, &nan, 4);
        key = kvscope::state::makeBytes(std::move(nanKeys));
        QVERIFY(kvscope::state::save(snap.value(), nanSnap.toStdString()));
        r = cli({"continue", nanSnap, "-m", data(kBin), "-n", "3", "--force"});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("although every weight of") && r.err.contains("stories260K.bin") &&
                     r.err.contains("the cache"),
                 r.err.constData());
        // ... and names the snapshot, and what verify found that --force went past.
        QVERIFY2(r.err.startsWith(("kvscope-cli: " + nanSnap + ": generate: ").toUtf8()),
                 r.err.constData());
        QVERIFY2(r.err.contains("restored with --force past: cache.nonfinite: layer 2 K"),
                 r.err.constData());
    }

    // A prompt longer than the model's context names the model file.
    void contextFullNamesTheModel() {
        KVSCOPE_REQUIRE_DATA(kBin);
        // seq_len 512 -> 4: the legacy RoPE tables after the final norm shrink with it
        // (seq_len x head_dim floats); the classifier is shared, so they end the file.
        QByteArray bytes = readAll(data(kBin));
        const std::int32_t seqLen = 4;
        bytes.replace(24, 4, QByteArray(reinterpret_cast<const char*>(&seqLen), 4));
        bytes.chop((512 - 4) * 8 * 4);
        const QString path = m_tmp.filePath("context-4.bin");
        QVERIFY(writeAll(path, bytes));
        const Run r = cli({"generate", "-m", path, "-t", data("models/stories260K/tok512.bin"),
                           "-p", "Once upon a time", "-n", "2", "--temperature", "0"});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("context full") && r.err.contains("context-4.bin"),
                 r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestHostile)
#include "tst_hostile.moc"
