// A mapped file changed by another process (formats/mappedfile.h): truncated (`cp` over it,
// `truncate`) or written in place while kvscope reads it. Without the lease guard a truncation
// makes the next read of a lost page raise SIGBUS, so a failure here is a crash of this suite;
// the writer (a forked child) is held back by the kernel until the mapping is copied out.
// On real weights (stories260K, label model): weights and a restored cache read in place keep
// decoding, token for token, after their files are truncated.
#include "engine/model.h"
#include "engine/session.h"
#include "formats/mappedfile.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/restore.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"

#include <QTemporaryDir>
#include <QTest>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvscope;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + i / 4096) & 0xff);
    return v;
}

void writeFile(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> bytesOf(const MappedFile& m) {
    return {m.data(), m.data() + m.size()};
}

// Runs `change` in a forked child (system calls only) and returns its exit status; the child's
// truncate or open for writing waits until this process has released its lease.
int inAnotherProcess(const std::function<int()>& change) {
    const pid_t pid = ::fork();
    if (pid == 0)
        ::_exit(change());
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int truncateTo(const std::string& path, off_t size) {
    return ::truncate(path.c_str(), size) == 0 ? 0 : 1;
}

// `cp other path`: open with O_TRUNC, write other bytes.
int copyOver(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    if (fd < 0)
        return 1;
    const bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    ::close(fd);
    return ok ? 0 : 2;
}

} // namespace

class TestMappedFile : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::string tmp(const char* name) const { return m_dir.filePath(name).toStdString(); }

private slots:
    void truncatedFileKeepsItsBytes() {
        const std::string path = tmp("truncated.bin");
        const auto bytes = pattern(3 << 20, 1);
        writeFile(path, bytes);
        auto map = MappedFile::open(path);
        QVERIFY(map->guarded());
        QVERIFY(!map->detached());
        QCOMPARE(inAnotherProcess([&] { return truncateTo(path, 0); }), 0);
        QCOMPARE(std::filesystem::file_size(path), std::uintmax_t(0));
        QVERIFY(map->detached());
        QCOMPARE(bytesOf(*map), bytes); // SIGBUS here without the guard
    }

    void overwrittenFileKeepsItsBytes() {
        // A shorter file copied over the mapped one, and one of the same length written in
        // place: the mapping keeps the bytes it was opened with.
        const std::string path = tmp("overwritten.bin");
        const auto bytes = pattern(1 << 20, 2), other = pattern(1 << 20, 3);
        writeFile(path, bytes);
        auto map = MappedFile::open(path);
        QCOMPARE(inAnotherProcess([&] { return copyOver(path, other); }), 0);
        QCOMPARE(bytesOf(*map), bytes);
        auto shorter = MappedFile::open(path);
        QCOMPARE(bytesOf(*shorter), other);
        QCOMPARE(inAnotherProcess([&] {
                     return copyOver(path, {other.begin(), other.end() - 4096});
                 }),
                 0);
        QCOMPARE(bytesOf(*shorter), other);
    }

    void mapAgainBeforeAndAfterABreak() {
        const std::string path = tmp("again.bin");
        const auto bytes = pattern((1 << 20) + 123, 4);
        writeFile(path, bytes);
        auto map = MappedFile::open(path, true);
        auto before = map->mapAgain();
        QVERIFY(before->guarded());
        auto* writable = const_cast<std::uint8_t*>(before->data());
        writable[5] ^= 0xff; // a private write: neither the file nor `map` sees it
        QCOMPARE(inAnotherProcess([&] { return truncateTo(path, 100); }), 0);
        QVERIFY(map->detached() && before->detached());
        QCOMPARE(bytesOf(*map), bytes);
        auto expected = bytes;
        expected[5] ^= 0xff;
        QCOMPARE(bytesOf(*before), expected); // the private write was copied with the rest
        auto after = map->mapAgain();         // a copy of the bytes, not the 100-byte file
        QVERIFY(after->detached());
        QCOMPARE(bytesOf(*after), bytes);
        map.reset(); // the copies outlive the mapping they came from
        QCOMPARE(bytesOf(*after), bytes);
    }

    void fileOpenForWritingIsCopiedAtOnce() {
        // No read lease can be had while a writer holds the file open: the bytes are read into
        // memory instead, and that writer's later truncation cannot reach them.
        const std::string path = tmp("open-for-writing.bin");
        const auto bytes = pattern(2 << 20, 5);
        writeFile(path, bytes);
        const int writer = ::open(path.c_str(), O_WRONLY);
        QVERIFY(writer >= 0);
        auto map = MappedFile::open(path);
        QVERIFY(map->detached());
        QCOMPARE(::ftruncate(writer, 0), 0);
        ::close(writer);
        QCOMPARE(bytesOf(*map), bytes);
    }

    void weightsAndRestoredCacheSurviveTruncation() {
        KVSCOPE_REQUIRE_DATA(kStories);
        // The checkpoint copied here, so that this test may truncate it.
        const std::string weights = tmp("stories260K.bin");
        std::filesystem::copy_file(testdata::path(kStories), weights);
        LoadOptions o;
        o.tokenizerPath = testdata::path(kStoriesTok);
        auto loaded = Model::load(weights, o);
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto model = loaded.value();
        const auto prompt = model->tokenizer()->encode("Once upon a time");

        Session s(model);
        QVERIFY(s.feed(prompt).isOk());
        Sampler greedy({0.0f, 0.9f, 0, 0});
        QVERIFY(s.generate(6, greedy).isOk());
        auto snap = state::capture(s);
        QVERIFY2(snap.isOk(), snap.message().c_str());
        const std::string path = tmp("mapped.kvsnap");
        state::SaveOptions raw;
        raw.write.compress = false; // stored blobs are used in place
        QVERIFY(state::save(snap.value(), path, raw).isOk());
        Sampler g1({0.0f, 0.9f, 0, 0});
        auto reference = s.generate(20, g1);
        QVERIFY(reference.isOk());

        auto file = state::load(path);
        QVERIFY2(file.isOk(), file.message().c_str());
        auto restored = state::restore(file.value(), model);
        QVERIFY2(restored.isOk(), restored.message().c_str());
        Session& r = restored.value().session;
        QVERIFY(r.cache().usesFileMapping());

        QCOMPARE(inAnotherProcess([&] { return truncateTo(path, 0) | truncateTo(weights, 0); }), 0);
        QCOMPARE(std::filesystem::file_size(weights), std::uintmax_t(0));
        Sampler g2({0.0f, 0.9f, 0, 0});
        auto continued = r.generate(20, g2); // reads the cache and the weights: SIGBUS unguarded
        QVERIFY2(continued.isOk(), continued.message().c_str());
        QCOMPARE(continued.value().tokens, reference.value().tokens);
    }
};

QTEST_GUILESS_MAIN(TestMappedFile)
#include "tst_mappedfile.moc"
