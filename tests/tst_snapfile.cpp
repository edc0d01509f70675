// Tests for core/snapfile: the .kvsnap container's round trip, compression, windowed writes,
// mapped reads, the single-pass check of a raw blob, the writer's failure paths. Damaged,
// hostile and hand-built files, and crash safety: tst_snapfilehostile.
#include "formats/mappedfile.h"
#include "snapfile/shuffle.h"
#include "snapfiletest.h"

#include <QDir>
#include <QTemporaryDir>
#include <QTest>
#include <cstring>
#include <random>
#include <zstd.h>

using namespace snapfiletest;

class TestSnapfile : public SnapfileTest {
    Q_OBJECT

private slots:
    void dtypesAndShuffle() {
        QCOMPARE(dtypeSize(DType::BF16), std::size_t(2));
        QCOMPARE(dtypeSize(DType::I64), std::size_t(8));
        for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32,
                         DType::U8, DType::Bool})
            QVERIFY(parseDType(dtypeName(dt)) == dt);
        QVERIFY(!parseDType("F32"));
        // FORMAT.md's definition: out[k * n + i] = in[i * size + k].
        const uint8_t in[6] = {1, 2, 3, 4, 5, 6};
        uint8_t out[6], back[6];
        shuffleBytes(in, out, 6, 2);
        QCOMPARE(Bytes(out, out + 6), (Bytes{1, 3, 5, 2, 4, 6}));
        unshuffleBytes(out, back, 6, 2);
        QCOMPARE(Bytes(back, back + 6), Bytes(in, in + 6));
        for (std::size_t es : {2, 4, 8}) {
            const Bytes d = makeData(DType::U8, 8 * 37, 5);
            Bytes s(d.size()), u(d.size());
            shuffleBytes(d.data(), s.data(), d.size(), es);
            unshuffleBytes(s.data(), u.data(), d.size(), es);
            QCOMPARE(u, d);
        }
    }

    void roundTrip_data() {
        QTest::addColumn<bool>("compress");
        QTest::addColumn<bool>("shuffle");
        QTest::addColumn<uint32_t>("block");
        QTest::newRow("zstd+shuffle 1MiB blocks") << true << true << uint32_t(1 << 20);
        QTest::newRow("zstd+shuffle 64B blocks")
            << true << true << uint32_t(64); // partial last blocks
        QTest::newRow("zstd") << true << false << uint32_t(1 << 20);
        QTest::newRow("none") << false << false << uint32_t(1 << 20);
    }
    void roundTrip() {
        QFETCH(bool, compress);
        QFETCH(bool, shuffle);
        QFETCH(uint32_t, block);
        const auto blobs = everyDType();
        const std::string p = path("rt.kvsnap");
        const Status st = writeFile(p, blobs, {compress, 3, shuffle, block, 0.0});
        QVERIFY2(st, st.message().c_str());
        auto r = Reader::open(p);
        QVERIFY2(r, r.message().c_str());
        const Reader& rd = r.value();
        QCOMPARE(rd.formatVersion(), 1u);
        JSON_COMPARE(rd.manifest(), kManifest);
        JSON_COMPARE(readManifest(p).value(), kManifest);
        QCOMPARE(rd.blobs().size(), blobs.size());
        for (std::size_t i = 0; i < blobs.size(); ++i) {
            const Sample& s = blobs[i];
            const BlobInfo& b = rd.blobs()[i];
            QCOMPARE(b.name, s.name);
            QVERIFY(b.dtype == s.dtype);
            QCOMPARE(b.shape, s.shape);
            QCOMPARE(b.rawBytes, uint64_t(s.data.size()));
            QCOMPARE(b.shuffled(), compress && shuffle && isFloat(s.dtype));
            QCOMPARE(rd.readBlob(s.name).value(), s.data);
            Bytes dst(s.data.size(), 0xAB);
            QVERIFY(rd.readBlob(b, dst.data(), dst.size()));
            QCOMPARE(dst, s.data);
            Bytes streamed;
            std::size_t calls = 0;
            QVERIFY(rd.readBlobChunks(b, [&](const uint8_t* d, std::size_t n) {
                streamed.insert(streamed.end(), d, d + n);
                ++calls;
                return Status::ok();
            }));
            QCOMPARE(streamed, s.data);
            if (s.name == "big")
                QVERIFY(calls >= 3); // delivered in chunks, not as one buffer
        }
        QVERIFY(rd.verifyAll());
        QVERIFY(!rd.readBlob(*rd.find("scalar"), Bytes(4).data(), 4)); // wrong dst size
        QVERIFY(!rd.readBlob("nope"));
    }

    void shuffleCompressesFloatsBetter() {
        const std::vector<Sample> one{sample("k", DType::F32, {64, 1024}, 3)};
        QVERIFY(writeFile(path("s.kvsnap"), one, {true, 3, true, 1u << 20, 0.0}));
        QVERIFY(writeFile(path("n.kvsnap"), one, {true, 3, false, 1u << 20, 0.0}));
        const uint64_t s = Reader::open(path("s.kvsnap")).value().blobs()[0].storedBytes;
        const uint64_t n = Reader::open(path("n.kvsnap")).value().blobs()[0].storedBytes;
        qInfo("f32 256 KiB: %llu bytes shuffled, %llu unshuffled", (unsigned long long)s,
              (unsigned long long)n);
        QVERIFY(s < n);
    }

    // Compression must pay: incompressible blobs are stored raw (a plain copy to read),
    // compressible ones with zstd; minSavings = 0 forces zstd; every blob reads back exactly.
    void compressionOnlyWhereItPays() {
        std::mt19937 rng(7);
        Sample noise{"noise", DType::U8, {256 * 1024}, Bytes(256 * 1024)};
        for (auto& b : noise.data)
            b = static_cast<uint8_t>(rng());
        Sample zeros{"zeros", DType::F32, {16, 1024}, Bytes(16 * 1024 * 4, 0)}; // 64 KiB
        const std::vector<Sample> blobs{noise, zeros};
        QVERIFY(writeFile(path("auto.kvsnap"), blobs)); // default options: the probe decides
        auto r = Reader::open(path("auto.kvsnap"));
        QVERIFY2(r, r.message().c_str());
        const BlobInfo* n = r.value().find("noise");
        const BlobInfo* z = r.value().find("zeros");
        QVERIFY(n->compression == Compression::None);
        QCOMPARE(n->storedBytes, n->rawBytes);
        QVERIFY(!n->shuffled());
        QVERIFY(z->compression == Compression::Zstd);
        QVERIFY(z->storedBytes < z->rawBytes / 100);
        QCOMPARE(r.value().readBlob("noise").value(), noise.data);
        QCOMPARE(r.value().readBlob("zeros").value(), zeros.data);
        QVERIFY(r.value().verifyAll());

        WriteOptions always;
        always.minSavings = 0;
        QVERIFY(writeFile(path("forced.kvsnap"), blobs, always));
        auto f = Reader::open(path("forced.kvsnap"));
        QVERIFY(f.value().find("noise")->compression == Compression::Zstd);
        QCOMPARE(f.value().readBlob("noise").value(), noise.data);
    }

    // A blob that compresses past the readers' bomb limit (64x above 64 KiB: a layer of
    // zeros) is stored raw, so every file the writer makes reads back.
    void writerNeverWritesWhatReadersRefuse() {
        Sample zeros{"zeros", DType::F32, {256, 1024}, Bytes(256 * 1024 * 4, 0)}; // 1 MiB
        Sample ramp{"ramp", DType::U8, {1 << 20}, Bytes(1 << 20)};
        for (std::size_t i = 0; i < ramp.data.size(); ++i)
            ramp.data[i] = static_cast<uint8_t>((i * 7) ^ (i >> 9));
        WriteOptions always;
        always.minSavings = 0;
        QVERIFY(writeFile(path("zeros.kvsnap"), {zeros, ramp}, always));
        auto r = Reader::open(path("zeros.kvsnap"));
        QVERIFY2(r, r.message().c_str());
        const BlobInfo* z = r.value().find("zeros");
        QVERIFY(z->compression == Compression::None);
        QCOMPARE(z->storedBytes, z->rawBytes);
        QCOMPARE(r.value().readBlob("zeros").value(), zeros.data);
        QCOMPARE(r.value().readBlob("ramp").value(), ramp.data);
        QVERIFY(r.value().verifyAll());
    }

    // The writer hands the file to the kernel in whole 2 MiB windows, holding back partial
    // ones: blobs that end just short of a window, cross several, and a zstd blob stored raw
    // after its compressed bytes had already crossed into a written window (the writer rereads
    // and rewinds that window) all come back byte for byte, back to back as FORMAT.md says.
    void windowedWritesKeepEveryByte() {
        constexpr std::size_t kWindow = 2u << 20;
        const std::size_t firstBytes = kWindow - 64 - 8; // ends 8 bytes short of a window
        Sample first{
            "first", DType::U8, {int64_t(firstBytes)}, makeData(DType::U8, firstBytes, 11)};
        Sample zeros{"zeros", DType::F32, {256, 1024}, Bytes(256 * 1024 * 4, 0)}; // 1 MiB
        const std::size_t lastBytes = 3 * kWindow + 12345;
        Sample last{"last", DType::U8, {int64_t(lastBytes)}, makeData(DType::U8, lastBytes, 12)};
        for (bool compress : {false, true}) {
            WriteOptions o;
            o.compress = compress; // random bytes stay raw, zeros are tried with zstd
            const std::string p = path(compress ? "windows-zstd.kvsnap" : "windows.kvsnap");
            QVERIFY(writeFile(p, {first, zeros, last}, o));
            auto r = Reader::open(p);
            QVERIFY2(r, r.message().c_str());
            QCOMPARE(r.value().find("zeros")->compression, Compression::None);
            QCOMPARE(r.value().find("zeros")->offset, uint64_t(64 + firstBytes));
            QCOMPARE(r.value().readBlob("first").value(), first.data);
            QCOMPARE(r.value().readBlob("zeros").value(), zeros.data);
            QCOMPARE(r.value().readBlob("last").value(), last.data);
            QVERIFY(r.value().verifyAll());
        }
    }

    // One damaged byte in a raw blob (read in a single pass, both checksums from one hash)
    // is still caught, naming the blob.
    void rawBlobCorruptionDetected() {
        std::mt19937 rng(9);
        Sample noise{"noise", DType::U8, {64 * 1024}, Bytes(64 * 1024)};
        for (auto& b : noise.data)
            b = static_cast<uint8_t>(rng());
        const std::string p = path("rawcorrupt.kvsnap");
        QVERIFY(writeFile(p, {noise}));
        uint64_t at = 0;
        {
            auto r = Reader::open(p);
            QVERIFY(r.value().find("noise")->compression == Compression::None);
            at = r.value().find("noise")->offset + 1000;
        }
        Bytes f = readAll(p);
        f[at] ^= 0x40;
        writeAll(p, f);
        auto r = Reader::open(p);
        QVERIFY2(r, r.message().c_str());
        Bytes dst(noise.data.size());
        const Status st = r.value().readBlob(*r.value().find("noise"), dst.data(), dst.size());
        QVERIFY(!st);
        QVERIFY2(contains(st.message(), "noise") && contains(st.message(), "checksum"),
                 st.message().c_str());
    }

    // openMapped(): a blob stored as is is handed out in place once its checksum held; a
    // compressed one is decoded as ever; a damaged one is refused by name.
    void mappedReaderBorrowsRawBlobs() {
        std::mt19937 rng(11);
        Sample noise{"noise", DType::U8, {64 * 1024}, Bytes(64 * 1024)};
        for (auto& b : noise.data)
            b = static_cast<uint8_t>(rng());
        // Two bits of entropy a byte: zstd shrinks it about 4x, well within the expansion rule.
        Sample lowent{"lowent", DType::U8, {256 * 1024}, Bytes(256 * 1024)};
        for (auto& b : lowent.data)
            b = static_cast<uint8_t>(rng() % 4);
        const std::string p = path("mapped.kvsnap");
        QVERIFY(writeFile(p, {noise, lowent}));

        auto plain = Reader::open(p);
        QVERIFY(plain);
        QVERIFY(!plain.value().mapping());
        QVERIFY(!plain.value().canBorrow(*plain.value().find("noise")));
        QVERIFY(!plain.value().borrowBlob(*plain.value().find("noise")));

        auto r = Reader::openMapped(p);
        QVERIFY2(r, r.message().c_str());
        const Reader& rd = r.value();
        QVERIFY(rd.mapping());
        QVERIFY(rd.find("lowent")->compression == Compression::Zstd);
        QVERIFY(rd.canBorrow(*rd.find("noise")));
        QVERIFY(!rd.canBorrow(*rd.find("lowent")));
        auto in = rd.borrowBlob(*rd.find("noise"));
        QVERIFY2(in, in.message().c_str());
        QCOMPARE(Bytes(in.value().begin(), in.value().end()), noise.data);
        QVERIFY(rd.mapping()->contains(in.value().data(), in.value().size())); // not a copy
        auto refused = rd.borrowBlob(*rd.find("lowent"));
        QVERIFY(!refused);
        QVERIFY2(contains(refused.message(), "lowent") && contains(refused.message(), "compressed"),
                 refused.message().c_str());
        auto decoded = rd.readBlob("lowent"); // the mapped reader still decodes
        QVERIFY(decoded);
        QCOMPARE(decoded.value(), lowent.data);

        Bytes f = readAll(p);
        f[rd.find("noise")->offset + 777] ^= 0x01;
        const std::string bad = path("mapped-bad.kvsnap");
        writeAll(bad, f);
        auto rb = Reader::openMapped(bad);
        QVERIFY2(rb, rb.message().c_str());
        auto damaged = rb.value().borrowBlob(*rb.value().find("noise"));
        QVERIFY(!damaged);
        QVERIFY2(contains(damaged.message(), bad) && contains(damaged.message(), "'noise'") &&
                     contains(damaged.message(), "checksum mismatch"),
                 damaged.message().c_str());
    }

    // borrowBlob's scan sees every byte once, in order, in chunks of at most kBorrowChunk;
    // the checksum still decides, and an error from the scan stops the borrow.
    void borrowScanSeesEveryByteOnce() {
        std::mt19937 rng(12);
        const std::size_t size = 2 * Reader::kBorrowChunk + 1000; // three chunks
        Sample big{"big", DType::U8, {static_cast<int64_t>(size)}, Bytes(size)};
        for (auto& b : big.data)
            b = static_cast<uint8_t>(rng());
        const std::string p = path("scan.kvsnap");
        QVERIFY(writeFile(p, {big}));
        auto r = Reader::openMapped(p);
        QVERIFY2(r, r.message().c_str());
        const Reader& rd = r.value();
        QVERIFY(rd.canBorrow(*rd.find("big")));
        Bytes seen;
        std::vector<std::size_t> sizes;
        auto in = rd.borrowBlob(*rd.find("big"), [&](const uint8_t* d, std::size_t n) {
            seen.insert(seen.end(), d, d + n);
            sizes.push_back(n);
            return Status::ok();
        });
        QVERIFY2(in, in.message().c_str());
        QCOMPARE(seen, big.data);
        QCOMPARE(sizes,
                 (std::vector<std::size_t>{Reader::kBorrowChunk, Reader::kBorrowChunk, 1000}));
        QVERIFY(in.value().data() == rd.mapping()->data() + rd.find("big")->offset);

        int calls = 0;
        auto stopped = rd.borrowBlob(*rd.find("big"), [&](const uint8_t*, std::size_t) {
            return ++calls == 2 ? Status::error("scan: stop here") : Status::ok();
        });
        QVERIFY(!stopped);
        QCOMPARE(calls, 2);
        QVERIFY2(contains(stopped.message(), "scan: stop here"), stopped.message().c_str());

        Bytes f = readAll(p);
        f[rd.find("big")->offset + Reader::kBorrowChunk + 5] ^= 0x10; // in the second chunk
        const std::string bad = path("scan-bad.kvsnap");
        writeAll(bad, f);
        auto rb = Reader::openMapped(bad);
        QVERIFY2(rb, rb.message().c_str());
        auto damaged = rb.value().borrowBlob(
            *rb.value().find("big"), [](const uint8_t*, std::size_t) { return Status::ok(); });
        QVERIFY(!damaged);
        QVERIFY2(contains(damaged.message(), "'big'") &&
                     contains(damaged.message(), "checksum mismatch"),
                 damaged.message().c_str());
    }

    // A reader written from FORMAT.md alone (as a Python user would) decodes our files.
    void independentDecoderFollowsFormatMd() {
        const auto blobs = everyDType();
        const std::string p = path("spec.kvsnap");
        QVERIFY(writeFile(p, blobs, {true, 5, true, 256, 0.0}));
        const Bytes f = readAll(p);
        auto le = [&](std::size_t at, int n) {
            uint64_t v = 0;
            for (int i = 0; i < n; ++i)
                v |= uint64_t(f[at + i]) << (8 * i);
            return v;
        };
        QCOMPARE(le(8, 4), uint64_t(1));
        QCOMPARE(le(56, 8), hash64(f.data(), 56));
        const uint64_t mo = le(32, 8), ms = le(40, 8);
        QCOMPARE(mo + ms, uint64_t(f.size()));
        const std::string text(f.begin() + long(mo), f.end());
        QCOMPARE(hash64(text), le(48, 8));
        const json d = json::parse(text);
        JSON_COMPARE(d["manifest"], kManifest);
        std::size_t i = 0;
        for (const auto& e : d["kvsnap"]["blobs"]) {
            const Sample& s = blobs[i++];
            QCOMPARE(e["name"].get<std::string>(), s.name);
            const uint8_t* stored = f.data() + e["offset"].get<uint64_t>();
            const std::size_t sn = e["stored_bytes"].get<std::size_t>();
            QCOMPARE(hex64(hash64(stored, sn)), e["stored_xxh3"].get<std::string>());
            Bytes raw(e["raw_bytes"].get<std::size_t>());
            QCOMPARE(ZSTD_getFrameContentSize(stored, sn), (unsigned long long)raw.size());
            QCOMPARE(ZSTD_decompress(raw.data(), raw.size(), stored, sn), raw.size());
            const std::size_t block = e["shuffle_block"].get<std::size_t>();
            if (block) {
                const std::size_t es = dtypeSize(*parseDType(e["dtype"].get<std::string>()));
                Bytes un(raw.size());
                for (std::size_t at = 0; at < raw.size(); at += block) {
                    const std::size_t len = std::min(block, raw.size() - at), n = len / es;
                    for (std::size_t j = 0; j < n; ++j)
                        for (std::size_t k = 0; k < es; ++k)
                            un[at + j * es + k] = raw[at + k * n + j];
                }
                raw = un;
            }
            QCOMPARE(raw, s.data);
            QCOMPARE(hex64(hash64(raw.data(), raw.size())), e["raw_xxh3"].get<std::string>());
        }
        QCOMPARE(i, blobs.size());
    }

    void writerRejectsBadArgumentsAndStaysUsable() {
        const std::string p = path("args.kvsnap");
        auto w = Writer::create(p);
        QVERIFY(w);
        Writer& wr = *w.value();
        const Bytes d(16);
        QVERIFY(contains(wr.addBlob("a", DType::F32, {5}, d.data(), 16).message(), "needs 20"));
        QVERIFY(!wr.addBlob("", DType::U8, {16}, d.data(), 16));
        QVERIFY(!wr.addBlob("bad\xff", DType::U8, {16}, d.data(), 16));
        QVERIFY(!wr.addBlob("neg", DType::U8, {-16}, d.data(), 16));
        QVERIFY(wr.addBlob("a", DType::F32, {4}, d.data(), 16));
        QVERIFY(contains(wr.addBlob("a", DType::F32, {4}, d.data(), 16).message(), "duplicate"));
        QVERIFY(wr.finish({{"ok", true}}));
        QVERIFY(!wr.finish({}));
        JSON_COMPARE(readManifest(p).value()["ok"], json(true));
        QVERIFY(!Writer::create(path("no/such/dir/x.kvsnap")));
        QVERIFY(!Writer::create(p, {true, 99}));
    }

    void abandonedWriterLeavesNoTraceAndKeepsOldFile() {
        QTemporaryDir dir;
        const std::string p = (dir.path() + "/a.kvsnap").toStdString();
        const std::vector<Sample> old{sample("x", DType::F32, {100}, 1)};
        QVERIFY(writeFile(p, old));
        const Bytes before = readAll(p);
        {
            auto w = Writer::create(p);
            QVERIFY(w);
            QVERIFY(QFile::exists(QString::fromStdString(w.value()->tempPath())));
            QVERIFY(w.value()->addBlob("y", DType::U8, {3}, "abc", 3));
        } // destroyed without finish()
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
        QCOMPARE(readAll(p), before);
        // A manifest that is not valid UTF-8 fails finish() the same way.
        auto w = Writer::create(p);
        QVERIFY(!w.value()->finish({{"s", "\xff"}}));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
        QCOMPARE(readAll(p), before);
    }

    void readerKeepsSeeingTheFileItOpened() {
        const std::string p = path("keep.kvsnap");
        const std::vector<Sample> a{sample("x", DType::F32, {100}, 1)};
        const std::vector<Sample> b{sample("x", DType::F32, {100}, 2)};
        QVERIFY(writeFile(p, a));
        auto r = Reader::open(p);
        QVERIFY(writeFile(p, b)); // atomic replace while r is open
        QCOMPARE(r.value().readBlob("x").value(), a[0].data);
        QCOMPARE(Reader::open(p).value().readBlob("x").value(), b[0].data);
    }

    void chunkCallbackErrorStopsTheRead() {
        const std::string p = path("cb.kvsnap");
        QVERIFY(writeFile(p, {sample("big", DType::F32, {1 << 20}, 4)}));
        auto r = Reader::open(p).value();
        int calls = 0;
        const Status st = r.readBlobChunks(*r.find("big"), [&](const uint8_t*, std::size_t) {
            ++calls;
            return Status::error("stop here");
        });
        QCOMPARE(st.message(), std::string("stop here"));
        QCOMPARE(calls, 1);
    }

    void manifestIsReadableWithoutBlobData() {
        const std::string p = path("lazy.kvsnap");
        const auto blobs = std::vector<Sample>{sample("layers.0.k", DType::F32, {256, 256}, 1),
                                               sample("layers.0.v", DType::F32, {256, 256}, 2)};
        QVERIFY(writeFile(p, blobs));
        Bytes f = readAll(p);
        const BlobInfo b = Reader::open(p).value().blobs()[1];
        f[b.offset + b.storedBytes / 2] ^= 0x40; // damage the second blob only
        writeAll(p, f);
        auto m = readManifest(p);
        QVERIFY2(m, m.message().c_str());
        JSON_COMPARE(m.value(), kManifest);
        auto r = Reader::open(p);
        QVERIFY(r);
        QVERIFY(r.value().readBlob("layers.0.k")); // untouched blob still reads
        auto bad = r.value().readBlob("layers.0.v");
        QVERIFY(!bad);
        QVERIFY2(contains(bad.message(), p + ": blob 'layers.0.v': stored data checksum mismatch"),
                 bad.message().c_str());
        QVERIFY(!r.value().verifyAll());
    }
};

QTEST_GUILESS_MAIN(TestSnapfile)
#include "tst_snapfile.moc"
