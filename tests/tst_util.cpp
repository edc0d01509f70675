// Tests for core/util: hashing, bounds-checked byte reading, atomic file writes.
#include "util/fileio.h"
#include "util/hash.h"
#include "util/status.h"
#include "util/topk.h"

#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <fstream>

using namespace kvscope;

class TestUtil : public QObject {
    Q_OBJECT
private slots:
    // The one top-k: larger first, ties by lower index, NaN after every number (partial_sort
    // with a plain '>' is not a strict weak order once a NaN is in the vector).
    void topKOrdersTiesAndNaN() {
        const float nan = std::nanf("");
        const std::vector<float> x{1.0f, 3.0f, nan, 3.0f, -2.0f, nan, 0.5f};
        QCOMPARE(topKIndices(x, 4), (std::vector<int64_t>{1, 3, 0, 6}));
        QCOMPARE(topKIndices(x, 7), (std::vector<int64_t>{1, 3, 0, 6, 4, 2, 5}));
        QCOMPARE(topKIndices(x, 100).size(), std::size_t(7));
        QVERIFY(topKIndices(x, 0).empty());
        QCOMPARE(topKIndices(std::vector<double>{2.0, 2.0, 2.0}, 2), (std::vector<int64_t>{0, 1}));
    }

    void hashIsStableAndFieldAware() {
        QCOMPARE(hash64("abc"), hash64("abc"));
        QVERIFY(hash64("abc") != hash64("abd"));
        Hasher a, b;
        a.updateField("ab");
        a.updateField("c");
        b.updateField("a");
        b.updateField("bc");
        QVERIFY(a.digest() != b.digest());
        QCOMPARE(hex64(0x1234).size(), size_t(16));
    }
    void byteReaderChecksBounds() {
        const std::uint8_t data[6] = {1, 0, 0, 0, 2, 0};
        ByteReader r(data, sizeof data, "test.bin");
        QCOMPARE(r.u32("a"), 1u);
        QCOMPARE(r.u16("b"), std::uint16_t(2));
        try {
            r.u32("c");
            QFAIL("expected an error");
        } catch (const KvError& e) {
            QVERIFY(std::string(e.what()).find("test.bin: c: unexpected end") == 0);
        }
    }
    void resultCarriesValueOrMessage() {
        Result<int> ok = 5;
        QVERIFY(ok.isOk());
        QCOMPARE(ok.value(), 5);
        auto bad = catchToResult([]() -> int { throw KvError("f.bin: field x: bad"); });
        QVERIFY(!bad.isOk());
        QCOMPARE(bad.message(), std::string("f.bin: field x: bad"));
        // An error always has a message, and libtorch's backtraces never reach users.
        QVERIFY(!Status::error("").message().empty());
        auto torchLike = catchToStatus([] {
            throw std::runtime_error("shape '[1, 47, 32]' is invalid\nException raised from "
                                     "reshape at aten/src/ATen/native/TensorShape.cpp:1 "
                                     "(most recent call first):\nframe #0: c10::Error::Error");
        });
        QCOMPARE(torchLike.message(), std::string("shape '[1, 47, 32]' is invalid"));
    }
    void atomicWriteReplacesWholeFile() {
        QTemporaryDir dir;
        const std::string p = (dir.path() + "/x.bin").toStdString();
        writeFileAtomic(p, "hello", 5);
        writeFileAtomic(p, "bye", 3);
        QCOMPARE(readFileText(p), std::string("bye"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
        // A folder that does not exist: error names the path, nothing created.
        QVERIFY_THROWS_EXCEPTION(KvError,
                                 writeFileAtomic(dir.path().toStdString() + "/no/such/x", "a", 1));
    }
};

QTEST_GUILESS_MAIN(TestUtil)
#include "tst_util.moc"
