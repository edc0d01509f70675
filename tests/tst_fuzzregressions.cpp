// Replays every input the fuzzers once crashed on (tests/fuzz/regressions/<target>/) through
// the normal, uninstrumented libraries and the same checks the fuzz targets run
// (tests/fuzz/exercise/): each must load cleanly or fail with an error that names the file.
// The fuzz targets also read these folders as seeds, under the sanitizers.
#include "fuzz/exercise/chat.h"
#include "fuzz/exercise/gguf.h"
#include "fuzz/exercise/llamacpp.h"
#include "fuzz/exercise/safetensors.h"
#include "fuzz/exercise/snapfile.h"
#include "fuzz/exercise/tokenizer.h"
#include "util/fileio.h"

#include <QDir>
#include <QTest>

using namespace kvscope;

namespace {

const QString kRoot = QStringLiteral(KVSCOPE_TESTS_DIR "/fuzz/regressions");
const QStringList kTargets = {"chat", "gguf", "llamacpp", "safetensors", "snapfile", "tokenizer"};

// Opens `path` with the reader of `target` and exercises what it gives; `outcome` says which
// way it went, for the log.
Status replay(const QString& target, const std::string& path, std::string& outcome) {
    const std::string name = QFileInfo(QString::fromStdString(path)).fileName().toStdString();
    auto refused = [&](const std::string& message, std::string_view mustName) {
        outcome = "refused: " + message.substr(0, 300);
        return fuzz::checkError(message, mustName);
    };
    outcome = "loaded";
    if (target == "gguf") {
        auto f = gguf::File::open(path);
        return f ? fuzz::exerciseGguf(f.value()) : refused(f.message(), path);
    }
    if (target == "safetensors") {
        auto f = safetensors::File::open(path);
        return f ? fuzz::exerciseSafetensors(f.value()) : refused(f.message(), path);
    }
    if (target == "tokenizer") {
        auto t = tok::Tokenizer::fromFile(path);
        if (!t) // the llama2.c loader names the file without its folder
            return refused(t.message(), name);
        outcome = "loaded " + t.value()->kind() + ", " + std::to_string(t.value()->vocabSize()) +
                  " tokens";
        return fuzz::exerciseTokenizer(*t.value(), readFileText(path));
    }
    if (target == "chat")
        return fuzz::exerciseChatTemplate(readFileText(path), name);
    if (target == "llamacpp") {
        auto f = llamacpp::read(path);
        return f ? fuzz::exerciseLlamaCpp(f.value()) : refused(f.message(), path);
    }
    auto r = snapfile::Reader::open(path);
    return r ? fuzz::exerciseSnapfile(r.value()) : refused(r.message(), path);
}

} // namespace

class TestFuzzRegressions : public QObject {
    Q_OBJECT
private slots:
    // A folder the suite does not know would be skipped silently: refuse it instead.
    void everyFolderHasAReader() {
        for (const QString& d : QDir(kRoot).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
            QVERIFY2(kTargets.contains(d),
                     qPrintable("regressions/" + d + ": no reader for this folder"));
    }

    void replayed_data() {
        QTest::addColumn<QString>("target");
        QTest::addColumn<QString>("path");
        for (const QString& target : kTargets)
            for (const QFileInfo& f :
                 QDir(kRoot + "/" + target).entryInfoList(QDir::Files, QDir::Name))
                QTest::newRow(qPrintable(target + "/" + f.fileName()))
                    << target << f.absoluteFilePath();
    }
    void replayed() {
        QFETCH(QString, target);
        QFETCH(QString, path);
        std::string outcome;
        const Status st = replay(target, path.toStdString(), outcome);
        qInfo("%s", outcome.c_str());
        QVERIFY2(st.isOk(), st.message().c_str());
    }
};

QTEST_GUILESS_MAIN(TestFuzzRegressions)
#include "tst_fuzzregressions.moc"
