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

// A copy of stories260K.gguf with one metadata value replaced.
QString ggufWith(const QString& out, const std::string& key, kvscope::gguf::Value value) {
    using namespace kvscope::gguf;
    auto f = File::open(data(kGguf).toStdString());
    if (!f)
        return {};
    Writer w(f.value().alignment());
    for (const auto& [k, v] : f.value().metadata())
        w.set(k, k == key ? value : v);
    for (const auto& t : f.value().tensors())
        w.addTensor(t.name, t.dims, t.type, f.value().readRaw(t));
    if (!w.write(out.toStdString()))
        return {};
    return out;
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
            {"llama.context_length", Value::scalar<std::uint64_t>(1ull << 40), "max_context"},
        };
        for (const auto& c : cases) {
            const QString path =
                ggufWith(m_tmp.filePath(QString::fromStdString(c.key) + ".gguf"), c.key, c.value);
            QVERIFY(!path.isEmpty());
            const Run r = cli({"generate", "-m", path, "--prompt", "Once", "-n", "2"});
            QCOMPARE(r.code, 1);
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
};

QTEST_GUILESS_MAIN(TestHostile)
#include "tst_hostile.moc"
