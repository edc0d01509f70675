// Writing never destroys what is already at the path, and NaN weights cannot crash sampling.
//
// Every writing command of kvscope-cli is pointed at each kind of path that is not a regular
// file — a character device made with mknod (root only), a FIFO, a socket, a folder — and at a
// symbolic link: the special files must still be what they were, the command must fail with a
// message naming the path and its kind, and no temporary file may be left in the folder. A
// link's target is written (and the link stays a link). Models whose weights hold NaN, in all
// three formats (llama2.c, GGUF, safetensors), must end generation with an error naming the step
// and the token, not a signal.
#include "formats/gguf.h"
#include "state/ledger/snapshotio.h"
#include "testdata.h"
#include "util/fileio.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

namespace {

const QString kBin = "models/stories260K/stories260K.bin";
const QString kGguf = "models/stories260K/stories260K.gguf";

struct Run {
    int code = -1; // -1: killed by a signal
    QByteArray out, err;
};

Run cli(const QStringList& args) {
    QProcess p;
    p.start(KVSCOPE_CLI, args);
    if (!p.waitForFinished(120000))
        p.kill();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString data(const QString& rel) {
    return QString::fromStdString(testdata::path(rel));
}

// st_mode's file type of `path` without following links (0 when it does not exist).
mode_t kindOf(const QString& path) {
    struct stat st {};
    if (::lstat(QFile::encodeName(path).constData(), &st) != 0)
        return 0;
    return st.st_mode & S_IFMT;
}

bool makeSocket(const QString& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const QByteArray p = QFile::encodeName(path);
    if (std::size_t(p.size()) >= sizeof addr.sun_path) {
        ::close(fd);
        return false;
    }
    std::memcpy(addr.sun_path, p.constData(), std::size_t(p.size()));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd); // the socket file stays
    return ok;
}

// Names of the ".<name>.tmpXXXXXX" files the atomic writers leave if they fail badly.
QStringList tempFiles(const QString& dir) {
    QStringList out;
    for (const QString& name : QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::System))
        if (name.startsWith('.') && name.contains(".tmp"))
            out << name;
    return out;
}

// The kinds of path a writer must refuse; the device needs root (mknod), as CI runs.
struct Special {
    const char* name;
    mode_t kind;
    const char* word; // what the message calls it
};
const Special kSpecials[] = {{"chardev", S_IFCHR, "character device"},
                             {"fifo", S_IFIFO, "FIFO"},
                             {"socket", S_IFSOCK, "socket"},
                             {"folder", S_IFDIR, "folder"}};

bool makeSpecial(const Special& s, const QString& path) {
    const QByteArray p = QFile::encodeName(path);
    switch (s.kind) {
    case S_IFCHR:
        return ::mknod(p.constData(), S_IFCHR | 0644, makedev(1, 3)) == 0; // like /dev/null
    case S_IFIFO:
        return ::mkfifo(p.constData(), 0644) == 0;
    case S_IFSOCK:
        return makeSocket(path);
    case S_IFDIR:
        return QDir().mkdir(path);
    }
    return false;
}

// A copy of `src` with `count` floats from byte `offset` on set to NaN.
QString nanCopy(const QString& src, const QString& dst, qint64 offset, qint64 count) {
    QFile::remove(dst);
    if (!QFile::copy(src, dst))
        return {};
    QFile f(dst);
    if (!f.open(QIODevice::ReadWrite) || !f.seek(offset))
        return {};
    const float nan = std::numeric_limits<float>::quiet_NaN();
    QByteArray bytes(int(count * 4), '\0');
    for (qint64 i = 0; i < count; ++i)
        std::memcpy(bytes.data() + i * 4, &nan, 4);
    if (f.write(bytes) != bytes.size())
        return {};
    return dst;
}

} // namespace

class TestOutputs : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_snap; // a clean 6-token snapshot of stories260K

    QString tmp(const QString& name) const { return m_tmp.filePath(name); }

    // One writing command with its output at `out`; `{out}` in the template is replaced.
    struct Writer {
        QString name;
        QStringList args;
    };
    QList<Writer> writers() const {
        const QString m = data(kBin);
        return {
            {"generate --snapshot-out",
             {"generate", "-m", m, "--prompt", "Once", "-n", "2", "--snapshot-out", "{out}"}},
            {"continue --snapshot-out",
             {"continue", m_snap, "-m", m, "-n", "1", "--snapshot-out", "{out}"}},
            {"export", {"export", m_snap, "-o", "{out}"}},
            {"truncate", {"truncate", m_snap, "--at", "3", "-m", m, "-o", "{out}"}},
            {"patch", {"patch", m_snap, "--from", m_snap, "--layer", "0", "-o", "{out}"}},
            {"splice",
             {"splice", m_snap, "--from", m_snap, "--range", "1:3", "--at", "2", "-m", m, "-o",
              "{out}"}},
            {"fault inject", {"fault", "inject", "corrupt-layer", m_snap, "-o", "{out}"}},
        };
    }

    static QStringList with(QStringList args, const QString& out) {
        for (QString& a : args)
            if (a == "{out}")
                a = out;
        return args;
    }

private slots:
    void initTestCase() {
        KVSCOPE_REQUIRE_DATA(kBin);
        QVERIFY(m_tmp.isValid());
        m_snap = tmp("clean.kvsnap");
        const Run r = cli({"generate", "-m", data(kBin), "--prompt", "Once upon", "-n", "3",
                           "--temperature", "0", "--snapshot-out", m_snap});
        QVERIFY2(r.code == 0, r.err.constData());
    }

    // The policy itself (core's resolveOutputPath) on every kind of path.
    void policyNamesEveryKind() {
        QTemporaryDir dir;
        const QString missing = dir.filePath("missing.kvsnap");
        QCOMPARE(QString::fromStdString(kvscope::resolveOutputPath(missing.toStdString())),
                 missing);
        QFile regular(dir.filePath("regular.bin"));
        QVERIFY(regular.open(QIODevice::WriteOnly));
        regular.close();
        QCOMPARE(
            QString::fromStdString(kvscope::resolveOutputPath(regular.fileName().toStdString())),
            regular.fileName());
        // A relative link resolves against its own folder; a chain of links is followed.
        QVERIFY(QFile::link("regular.bin", dir.filePath("link1")));
        QVERIFY(QFile::link(dir.filePath("link1"), dir.filePath("link2")));
        QCOMPARE(
            QString::fromStdString(kvscope::resolveOutputPath(dir.filePath("link2").toStdString())),
            dir.filePath("regular.bin"));
        QVERIFY(QFile::link("not-yet.bin", dir.filePath("dangling")));
        QCOMPARE(QString::fromStdString(
                     kvscope::resolveOutputPath(dir.filePath("dangling").toStdString())),
                 dir.filePath("not-yet.bin"));
        QVERIFY(QFile::link(dir.filePath("loop-b"), dir.filePath("loop-a")));
        QVERIFY(QFile::link(dir.filePath("loop-a"), dir.filePath("loop-b")));
        try {
            (void)kvscope::resolveOutputPath(dir.filePath("loop-a").toStdString());
            QFAIL("a link loop was accepted");
        } catch (const std::exception& e) {
            QVERIFY2(std::strstr(e.what(), "symbolic links"), e.what());
        }
        for (const Special& s : kSpecials) {
            if (s.kind == S_IFCHR && ::geteuid() != 0)
                continue; // mknod needs root; the CLI test below says so once
            const QString p = dir.filePath(s.name);
            QVERIFY2(makeSpecial(s, p), s.name);
            try {
                (void)kvscope::resolveOutputPath(p.toStdString());
                QFAIL(qPrintable(QString("%1 was accepted as an output").arg(s.name)));
            } catch (const std::exception& e) {
                QVERIFY2(std::strstr(e.what(), s.word) && std::strstr(e.what(), s.name), e.what());
            }
            // Through a link, the message names the link and the target.
            const QString link = dir.filePath(QString("to-") + s.name);
            QVERIFY(QFile::link(p, link));
            try {
                (void)kvscope::resolveOutputPath(link.toStdString());
                QFAIL("a link to a special file was accepted");
            } catch (const std::exception& e) {
                QVERIFY2(std::strstr(e.what(), s.word), e.what());
            }
        }
    }

    // Every writing command refuses every special kind and leaves it as it was, with no
    // temporary file behind; a symlink's target is written and the link stays a link.
    void everyWriterKeepsSpecialFiles_data() {
        QTest::addColumn<int>("writer");
        for (int w = 0; w < writers().size(); ++w)
            QTest::newRow(qPrintable(writers()[w].name)) << w;
    }
    void everyWriterKeepsSpecialFiles() {
        QFETCH(int, writer);
        const Writer w = writers()[writer];
        QTemporaryDir dir;
        bool skippedDevice = false;
        for (const Special& s : kSpecials) {
            if (s.kind == S_IFCHR && ::geteuid() != 0) {
                skippedDevice = true; // mknod needs root (CI runs as root)
                continue;
            }
            // Each CLI run costs ~0.6 s of libtorch start-up: sockets and folders (refused by
            // the same check, tested above on the policy) are run through one writer only.
            if ((s.kind == S_IFSOCK || s.kind == S_IFDIR) && w.name != "export")
                continue;
            const QString out = dir.filePath(s.name);
            QVERIFY2(makeSpecial(s, out), s.name);
            const Run r = cli(with(w.args, out));
            QVERIFY2(r.code > 0, qPrintable(w.name + " on a " + s.word + ": exit " +
                                            QString::number(r.code) + " " + r.err));
            QVERIFY2(r.err.contains(QFile::encodeName(out)) && r.err.contains(s.word),
                     qPrintable(w.name + ": " + r.err));
            QCOMPARE(kindOf(out), s.kind);
            QVERIFY2(tempFiles(dir.path()).isEmpty(), qPrintable(tempFiles(dir.path()).join(' ')));
        }
        // A link: the target is written, the link is still a link to it.
        const QString target = dir.filePath("target.out");
        const QString link = dir.filePath("link.out");
        QVERIFY(QFile::link("target.out", link));
        const Run r = cli(with(w.args, link));
        QVERIFY2(r.code == 0, qPrintable(w.name + ": " + r.err));
        QCOMPARE(kindOf(link), mode_t(S_IFLNK));
        QCOMPARE(kindOf(target), mode_t(S_IFREG));
        QVERIFY(QFileInfo(target).size() > 0);
        // A regular file is replaced (the second write over the first).
        if (w.name == "export") {
            const Run again = cli(with(w.args, link));
            QVERIFY2(again.code == 0, again.err.constData());
            QCOMPARE(kindOf(link), mode_t(S_IFLNK));
        }
        QVERIFY2(tempFiles(dir.path()).isEmpty(), qPrintable(tempFiles(dir.path()).join(' ')));
        if (skippedDevice)
            qWarning("not root: the character-device case was not run (mknod needs root)");
    }

    // Writers of folders: fork writes <name>-fork<i>.kvsnap, convert config.json and
    // model.safetensors, train-tokenizer tokenizer.json and its config beside it. A FIFO or a
    // device where one of those files goes is refused and left alone.
    void folderWritersKeepSpecialFiles() {
        QTemporaryDir dir;
        const QString forks = dir.filePath("forks");
        QVERIFY(QDir().mkdir(forks));
        const QString fifo = forks + "/clean-fork0.kvsnap";
        QVERIFY(makeSpecial(kSpecials[1], fifo));
        Run r = cli({"fork", m_snap, "-n", "1", "-o", forks});
        QVERIFY2(r.code > 0 && r.err.contains("FIFO"), r.err.constData());
        QCOMPARE(kindOf(fifo), mode_t(S_IFIFO));
        QVERIFY(tempFiles(forks).isEmpty());

        const QString hf = dir.filePath("hf");
        QVERIFY(QDir().mkdir(hf));
        QVERIFY(makeSpecial(kSpecials[1], hf + "/model.safetensors"));
        r = cli({"convert", "-m", data(kBin), "-o", hf});
        QVERIFY2(r.code > 0 && r.err.contains("FIFO"), r.err.constData());
        QCOMPARE(kindOf(hf + "/model.safetensors"), mode_t(S_IFIFO));
        QVERIFY(tempFiles(hf).isEmpty());

        const QString corpus = dir.filePath("corpus.txt");
        QFile c(corpus);
        QVERIFY(c.open(QIODevice::WriteOnly));
        for (int i = 0; i < 50; ++i)
            c.write("the cat sat on the mat and the dog sat on the log\n");
        c.close();
        const QString tokDir = dir.filePath("tok");
        QVERIFY(QDir().mkdir(tokDir));
        QVERIFY(makeSpecial(kSpecials[1], tokDir + "/tokenizer.json"));
        r = cli({"train-tokenizer", "--corpus", corpus, "--vocab-size", "300", "-o",
                 tokDir + "/tokenizer.json"});
        QVERIFY2(r.code > 0 && r.err.contains("FIFO"), r.err.constData());
        QCOMPARE(kindOf(tokDir + "/tokenizer.json"), mode_t(S_IFIFO));
        QVERIFY(tempFiles(tokDir).isEmpty());
    }

    // Reading never waits on a FIFO either: inspect, verify and a model path fail at once.
    void readersRefuseFifos() {
        QTemporaryDir dir;
        const QString fifo = dir.filePath("state.kvsnap");
        QVERIFY(makeSpecial(kSpecials[1], fifo));
        for (const QStringList& args :
             {QStringList{"inspect", fifo}, QStringList{"verify", fifo, "-m", data(kBin)},
              QStringList{"generate", "-m", fifo, "-n", "1"},
              QStringList{"generate", "-m", data(kBin), "-t", fifo, "-n", "1"}}) {
            const Run r = cli(args);
            QVERIFY2(r.code > 0, qPrintable(args.join(' ') + ": " + r.err));
            QVERIFY2(r.err.contains("FIFO") || r.out.contains("FIFO"),
                     qPrintable(args.join(' ') + ": " + r.err + r.out));
        }
    }

    // NaN weights in each format: generation fails with the step and the token named, with the
    // default sampler (top-p) and greedy alike, never with a signal.
    void nanWeightsFailCleanly() {
        KVSCOPE_REQUIRE_DATA(kGguf);
        QTemporaryDir dir;
        // llama2.c: 7 int32 header fields, then the token embeddings (512 × 64).
        const QString bin = nanCopy(data(kBin), dir.filePath("nan.bin"), 28, 512 * 64);
        QVERIFY(!bin.isEmpty());
        QVERIFY(QFile::copy(data("models/stories260K/tok512.bin"), dir.filePath("tok512.bin")));
        // GGUF: the token embedding tensor, wherever the file puts it.
        auto g = kvscope::gguf::File::open(data(kGguf).toStdString());
        QVERIFY2(g, g.message().c_str());
        qint64 offset = -1, count = 0;
        for (const auto& t : g.value().tensors())
            if (t.name == "token_embd.weight" && t.type == kvscope::gguf::TensorType::F32) {
                offset = qint64(t.offset);
                count = qint64(t.nbytes / 4);
            }
        QVERIFY2(offset > 0, "stories260K.gguf has no f32 token_embd.weight");
        const QString gguf = nanCopy(data(kGguf), dir.filePath("nan.gguf"), offset, count);
        QVERIFY(!gguf.isEmpty());
        // safetensors: kvscope's own conversion of the NaN llama2.c model.
        const QString hf = dir.filePath("nan-hf");
        const Run conv = cli({"convert", "-m", bin, "-o", hf});
        QVERIFY2(conv.code == 0, conv.err.constData());
        QVERIFY(QFileInfo::exists(hf + "/model.safetensors"));

        for (const QString& model : {bin, gguf, hf})
            for (const QStringList& sampling : {QStringList{}, QStringList{"--temperature", "0"}}) {
                const Run r = cli(
                    QStringList{"generate", "-m", model, "--prompt", "Once", "-n", "4"} + sampling);
                const QString what = model + " " + sampling.join(' ') + ": " + r.err;
                QCOMPARE(r.code, 1);
                QVERIFY2(r.err.contains("step 0") && r.err.contains("nan"), qPrintable(what));
            }
    }

    // A snapshot whose stored sampler cannot be used is refused when read (continue and fork
    // replay it), naming the field; the flags are checked at the boundary.
    void storedSamplerIsChecked() {
        auto snap = kvscope::state::load(m_snap.toStdString());
        QVERIFY2(snap, snap.message().c_str());
        snap.value().hasSampler = true;
        snap.value().sampler.temperature = 1e-40f;
        const QString bad = tmp("tiny-temperature.kvsnap");
        QVERIFY(kvscope::state::save(snap.value(), bad.toStdString()));
        for (const QStringList& args : {QStringList{"continue", bad, "-m", data(kBin), "-n", "2"},
                                        QStringList{"fork", bad, "-n", "1", "--steps", "2", "-m",
                                                    data(kBin), "-o", tmp("forks")}}) {
            const Run r = cli(args);
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.contains("sampler") && r.err.contains("temperature"), r.err.constData());
        }
        const Run r = cli({"fork", m_snap, "-n", "1", "--temperature", "1e-40", "-o", tmp("f")});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("temperature"), r.err.constData());
        for (const char* t : {"nan", "1e-40"}) {
            const Run g = cli({"generate", "-m", data(kBin), "-n", "2", "--temperature", t});
            QCOMPARE(g.code, 2);
            QVERIFY2(g.err.contains("temperature"), g.err.constData());
        }
        const Run p =
            cli({"generate", "-m", data(kBin), "-n", "2", "--temperature", "1", "--top-p", "nan"});
        QCOMPARE(p.code, 2);
        QVERIFY2(p.err.contains("top-p"), p.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestOutputs)
#include "tst_outputs.moc"
