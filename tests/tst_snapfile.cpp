// Tests for core/snapfile: the .kvsnap container (round trip, corruption, truncation,
// versioning, hostile headers/manifests, crash safety). Hand-built files follow FORMAT.md
// byte by byte, so they also check that the document matches the code.
#include "formats/mappedfile.h"
#include "snapfile/shuffle.h"
#include "snapfile/snapfile.h"
#include "util/hash.h"

#include <QDir>
#include <QTemporaryDir>
#include <QTest>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

using namespace kvscope;
using namespace kvscope::snapfile;
using nlohmann::json;
using Bytes = std::vector<uint8_t>;

// QCOMPARE cannot print nlohmann::json (and trips over its conversions).
#define JSON_COMPARE(a, b)                                                                         \
    QVERIFY2((a) == (b),                                                                           \
             qPrintable(QString::fromStdString(json(a).dump() + " != " + json(b).dump())))

namespace {

Bytes readAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::string& path, const Bytes& b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Smooth float-like data (compresses well once shuffled) or noise.
Bytes makeData(DType dt, std::size_t elements, uint32_t seed) {
    Bytes b(elements * dtypeSize(dt));
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < elements; ++i) {
        uint8_t* p = b.data() + i * dtypeSize(dt);
        const float f = std::sin(0.01f * float(i + seed)) + 0.001f * float(rng() % 100);
        switch (dt) {
        case DType::F32:
            std::memcpy(p, &f, 4);
            break;
        case DType::F64: {
            const double d = f;
            std::memcpy(p, &d, 8);
            break;
        }
        case DType::F16:
        case DType::BF16: {
            uint32_t u;
            std::memcpy(&u, &f, 4);
            const uint16_t h = uint16_t(u >> 16);
            std::memcpy(p, &h, 2);
            break;
        }
        case DType::I64: {
            const int64_t v = int64_t(rng() % 32000);
            std::memcpy(p, &v, 8);
            break;
        }
        case DType::I32: {
            const int32_t v = int32_t(rng());
            std::memcpy(p, &v, 4);
            break;
        }
        case DType::U8:
            *p = uint8_t(rng());
            break;
        case DType::Bool:
            *p = uint8_t(rng() & 1);
            break;
        }
    }
    return b;
}

struct Sample {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Bytes data;
};

std::size_t elementsOf(const std::vector<int64_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape)
        n *= std::size_t(d);
    return n;
}

Sample sample(std::string name, DType dt, std::vector<int64_t> shape, uint32_t seed) {
    Sample s{std::move(name), dt, std::move(shape), {}};
    s.data = makeData(dt, elementsOf(s.shape), seed);
    return s;
}

std::vector<Sample> everyDType() {
    const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64,
                         DType::I64, DType::I32, DType::U8,   DType::Bool};
    std::vector<Sample> v;
    uint32_t seed = 1;
    for (DType dt : all) {
        v.push_back(sample("t." + dtypeName(dt) + ".a", dt, {3, 5, 7}, seed++));
        v.push_back(sample("t." + dtypeName(dt) + ".b", dt, {2, 300}, seed++));
    }
    v.push_back(sample("empty", DType::F32, {4, 0, 2}, 0));
    v.push_back(sample("empty.flat", DType::U8, {0}, 0));
    v.push_back(sample("scalar", DType::F64, {}, 9));
    v.push_back(sample("big", DType::F32, {3, 1 << 18}, 11)); // 3 MiB: several chunks
    return v;
}

const json kManifest = {{"model", "tiny"}, {"tokens", {1, 2, 3}}, {"note", "ünïcode ✓"}};

Status writeFile(const std::string& path, const std::vector<Sample>& blobs, WriteOptions o = {},
                 const json& manifest = kManifest) {
    auto w = Writer::create(path, o);
    if (!w)
        return w.status();
    for (const auto& s : blobs)
        if (Status st = w.value()->addBlob(s.name, s.dtype, s.shape, s.data.data(), s.data.size());
            !st)
            return st;
    return w.value()->finish(manifest);
}

bool contains(const std::string& hay, const std::string& needle) {
    return hay.find(needle) != std::string::npos;
}

// Every blob reads back as written, or reading reports an error: never silently wrong data.
bool noSilentCorruption(const Reader& r, const std::vector<Sample>& blobs) {
    for (const auto& s : blobs) {
        auto got = r.readBlob(s.name);
        if (got && got.value() != s.data)
            return false;
    }
    return true;
}

// --- Hand-built files, following FORMAT.md -----------------------------------------------

void putLe(Bytes& f, std::size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
        f[at + i] = uint8_t(v >> (8 * i));
}

void resealHeader(Bytes& f) {
    putLe(f, 56, hash64(f.data(), 56), 8);
}

Bytes craft(const std::string& manifestText, const Bytes& data = {}, uint32_t version = 1,
            uint64_t required = 0, uint64_t optional = 0) {
    Bytes f(64, 0);
    const uint8_t magic[8] = {0x89, 'K', 'V', 'S', 'N', 'A', 'P', '\n'};
    std::memcpy(f.data(), magic, 8);
    putLe(f, 8, version, 4);
    putLe(f, 12, 64, 4);
    putLe(f, 16, required, 8);
    putLe(f, 24, optional, 8);
    putLe(f, 32, 64 + data.size(), 8);
    putLe(f, 40, manifestText.size(), 8);
    putLe(f, 48, hash64(manifestText), 8);
    resealHeader(f);
    f.insert(f.end(), data.begin(), data.end());
    f.insert(f.end(), manifestText.begin(), manifestText.end());
    return f;
}

json entry(const std::string& name, const std::string& dtype, const json& shape, uint64_t offset,
           uint64_t stored, uint64_t raw, const std::string& compression = "none",
           uint64_t shuffleBlock = 0, uint64_t storedHash = 0, uint64_t rawHash = 0) {
    return {{"name", name},
            {"dtype", dtype},
            {"shape", shape},
            {"offset", offset},
            {"stored_bytes", stored},
            {"raw_bytes", raw},
            {"compression", compression},
            {"shuffle_block", shuffleBlock},
            {"stored_xxh3", hex64(storedHash)},
            {"raw_xxh3", hex64(rawHash)}};
}

std::string doc(const json& blobs, const json& manifest = json::object()) {
    return json{{"kvsnap", {{"format_version", 1}, {"blobs", blobs}}}, {"manifest", manifest}}
        .dump();
}

} // namespace

class TestSnapfile : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::string path(const char* name) const { return (m_dir.path() + "/" + name).toStdString(); }
    void expectOpenError(const Bytes& file, std::initializer_list<const char*> parts,
                         const char* name = "bad.kvsnap") {
        const std::string p = path(name);
        writeAll(p, file);
        auto r = Reader::open(p);
        QVERIFY2(!r, "a hostile file was accepted");
        if (qEnvironmentVariableIsSet("KVSCOPE_SHOW_ERRORS"))
            qInfo("%s", r.message().c_str());
        QVERIFY2(contains(r.message(), p), r.message().c_str());
        for (const char* part : parts)
            QVERIFY2(contains(r.message(), part),
                     (r.message() + "  [missing: " + part + "]").c_str());
    }

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

    // Every byte of the file is covered by a checksum (header, one blob, or the manifest), so
    // every single-byte flip must be reported, by open() or by reading the blob it hit.
    void everyFlippedByteIsDetected_data() {
        QTest::addColumn<bool>("compress");
        QTest::newRow("zstd+shuffle") << true;
        QTest::newRow("none") << false;
    }
    void everyFlippedByteIsDetected() {
        QFETCH(bool, compress);
        const std::vector<Sample> blobs{
            sample("k", DType::F32, {4, 8}, 1), sample("ids", DType::I64, {5}, 2),
            sample("h", DType::BF16, {3, 4}, 3), sample("none", DType::U8, {0}, 0)};
        const std::string p = path("flip.kvsnap");
        QVERIFY(writeFile(p, blobs, {compress, 3, true, 16, 0.0}, {{"m", 1}}));
        const Bytes good = readAll(p);
        int flips = 0, atOpen = 0, atRead = 0;
        for (std::size_t pos = 0; pos < good.size(); ++pos) {
            for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xFF)}) {
                Bytes f = good;
                f[pos] ^= mask;
                ++flips;
                // In memory (the same parser; the disk is shared and slow), through a real
                // file for every 16th position.
                const bool onDisk = pos % 16 == 0 && mask == 1;
                if (onDisk)
                    writeAll(p, f);
                auto r = onDisk ? Reader::open(p) : Reader::openMemory(f, p);
                if (!r) {
                    ++atOpen;
                    QVERIFY2(contains(r.message(), p), r.message().c_str());
                    continue;
                }
                QVERIFY2(noSilentCorruption(r.value(), blobs),
                         qPrintable(QString("wrong data after flip at %1").arg(pos)));
                const Status st = r.value().verifyAll();
                QVERIFY2(!st, qPrintable(QString("undetected flip at byte %1 mask %2 of %3")
                                             .arg(pos)
                                             .arg(mask)
                                             .arg(good.size())));
                ++atRead;
            }
        }
        qInfo("%d flips over all %zu bytes: %d refused by open(), %d by blob reads", flips,
              good.size(), atOpen, atRead);
        QVERIFY(atRead > 0);
    }

    void everyTruncationIsRefused() {
        const std::string p = path("cut.kvsnap");
        QVERIFY(
            writeFile(p, {sample("k", DType::F32, {4, 8}, 1), sample("t", DType::I32, {7}, 2)}));
        const Bytes good = readAll(p);
        for (std::size_t cut = 0; cut < good.size(); ++cut) {
            const Bytes f(good.begin(), good.begin() + long(cut));
            const bool onDisk = cut % 16 == 0;
            if (onDisk)
                writeAll(p, f);
            auto r = onDisk ? Reader::open(p) : Reader::openMemory(f, p);
            QVERIFY2(!r, qPrintable(QString("accepted a file cut at %1").arg(cut)));
            QVERIFY2(contains(r.message(), p), r.message().c_str());
            if (cut >= 64)
                QVERIFY2(contains(r.message(), "truncated"), r.message().c_str());
        }
        qInfo("%zu cut points refused", good.size());
        Bytes longer = good;
        longer.push_back(0);
        writeAll(p, longer);
        QVERIFY(contains(Reader::open(p).message(), "1 unexpected bytes after the manifest"));
    }

    void versionsAndFeatureFlags() {
        const std::string m = doc(json::array());
        QVERIFY(Reader::openMemory(craft(m)));
        expectOpenError(
            craft(m, {}, 7),
            {"format version 7 is newer than this kvscope supports (1); upgrade kvscope"});
        Bytes v7 = craft(m);
        putLe(v7, 8, 7, 4); // a newer header layout: its checksum is not ours to check
        expectOpenError(v7, {"format version 7 is newer"});
        expectOpenError(craft(m, {}, 0), {"format version 0"});
        expectOpenError(craft(m, {}, 1, 1ull << 3), {"feature flag(s) 0x8", "format version 1"});
        auto opt = Reader::openMemory(craft(m, {}, 1, 0, 1ull << 40));
        QVERIFY2(opt, opt.message().c_str()); // unknown optional flags are ignored
        QCOMPARE(opt.value().optionalFeatures(), 1ull << 40);
        // The manifest's own version must agree with the header's.
        expectOpenError(
            craft(json{{"kvsnap", {{"format_version", 2}, {"blobs", json::array()}}}}.dump()),
            {"format_version"});
        Bytes magic = craft(m);
        magic[1] = 'X';
        expectOpenError(magic, {"bad magic"});
    }

    void handBuiltFileReads() {
        const Bytes data{1, 2, 3, 4, 5, 6, 7, 8};
        const std::string m =
            doc(json::array({entry("x", "u8", {2, 4}, 64, 8, 8, "none", 0, hash64(data.data(), 8),
                                   hash64(data.data(), 8))}),
                {{"hello", "world"}});
        auto r = Reader::openMemory(craft(m, data), "hand.kvsnap");
        QVERIFY2(r, r.message().c_str());
        QCOMPARE(r.value().readBlob("x").value(), data);
        JSON_COMPARE(r.value().manifest()["hello"], json("world"));
    }

    // Each hostile value is refused at open(), by name, before anything is sized from it.
    void absurdValuesAreRefused() {
        auto one = [](const json& e) { return doc(json::array({e})); };
        expectOpenError(craft(one(entry("layers.3.k", "f32", {4, 1000000000000ll, 8}, 64, 0,
                                        128000000000000ull))),
                        {"blob 'layers.3.k': shape [4, 1000000000000, 8] × f32 = 128000000000000 "
                         "bytes exceeds the limit"});
        expectOpenError(
            craft(one(entry("o", "f32", {1ull << 40, 1ull << 40, 1ull << 40}, 64, 0, 0))),
            {"blob 'o'", "overflows"});
        expectOpenError(craft(one(entry("n", "f32", {4, -1}, 64, 0, 0))),
                        {"shape[1] = -1", "non-negative"});
        expectOpenError(craft(one(entry("f", "f32", {2.5}, 64, 0, 0))), {"shape[0] = 2.5"});
        expectOpenError(craft(one(entry("r", "u8", json(std::vector<int>(33, 1)), 64, 1, 1))),
                        {"rank 33"});
        expectOpenError(craft(one(entry("m", "u8", {4}, 64, 4, 5))), {"raw_bytes' = 5"});
        expectOpenError(craft(one(entry("s", "u8", {4}, 64, 1ull << 62, 4, "zstd"))),
                        {"blob 's'", "runs past the data area"});
        expectOpenError(craft(one(entry("a", "u8", {4}, ~0ull, 4, 4))),
                        {"offset = 18446744073709551615"});
        expectOpenError(
            craft(one(entry("z", "u8", {1ll << 30}, 64, 16, 1ull << 30, "zstd")), Bytes(16)),
            {"blob 'z'", "from 16 stored zstd bytes", "decompression bomb"});
        // 65 KiB from 1 KiB: over 64x for a blob above 64 KiB.
        expectOpenError(craft(one(entry("y", "u8", {66560}, 64, 1024, 66560, "zstd")), Bytes(1024)),
                        {"blob 'y'", "decompression bomb"});
        // Many small blobs, each allowed, together past 256 MiB + 64x the data area.
        json many = json::array();
        for (int i = 0; i < 4200; ++i) {
            std::string name = std::to_string(i); // not "t" + ...: GCC 12 -Wrestrict misfires
            name.insert(0, 1, 't');
            many.push_back(entry(name, "u8", {65536}, 64 + 16 * uint64_t(i), 16, 65536, "zstd"));
        }
        expectOpenError(craft(doc(many), Bytes(16 * 4200)),
                        {"zstd blobs up to 't4", "decompression bomb"});
        expectOpenError(craft(one(entry("b", "f32", {4}, 64, 16, 16, "zstd", 1ull << 40))),
                        {"shuffle_block"});
        expectOpenError(craft(one(entry("b", "u8", {4}, 64, 16, 4, "zstd", 1))), {"shuffle_block"});
        expectOpenError(craft(one(entry("d", "f8", {4}, 64, 4, 4))), {"unknown dtype 'f8'"});
        expectOpenError(craft(one(entry("c", "u8", {4}, 64, 4, 4, "lz4"))),
                        {"unknown compression"});
        json badHex = entry("h", "u8", {4}, 64, 4, 4);
        badHex["raw_xxh3"] = "xyz";
        expectOpenError(craft(one(badHex)), {"raw_xxh3"});
        json noName = entry("h", "u8", {4}, 64, 4, 4);
        noName.erase("name");
        expectOpenError(craft(one(noName)), {"blob table entry 0", "missing field 'name'"});
        expectOpenError(craft(doc(json::array(
                            {entry("d", "u8", {0}, 64, 0, 0), entry("d", "u8", {0}, 64, 0, 0)}))),
                        {"duplicate"});
        expectOpenError(craft(doc(json::array({entry("g", "u8", {0}, 64, 0, 0)})), Bytes(3)),
                        {"blobs end at offset 64 but the manifest starts at 67"});
        expectOpenError(craft(json{{"kvsnap", {{"format_version", 1}, {"blobs", 3}}}}.dump()),
                        {"kvsnap.blobs"});
        expectOpenError(craft("[1, 2"), {"not valid JSON"});
        {
            // Large but valid: 300,000 members of an unknown key read in linear time (the
            // callback parser this replaced needed minutes: the test's timeout catches that).
            json manifest = json::object();
            manifest["unknown"] = json::array();
            for (int i = 0; i < 300000; ++i)
                manifest["unknown"].push_back(json::object({{"k", i}}));
            auto r = Reader::openMemory(craft(doc(json::array(), manifest)));
            QVERIFY2(r, r ? "" : r.message().c_str());
            QCOMPARE(r.value().manifest()["unknown"].size(), std::size_t{300000});
        }
        expectOpenError(craft(std::string(100000, '[') + std::string(100000, ']')),
                        {"manifest", "nested deeper than 128"});

        // Header fields.
        Bytes f = craft(doc(json::array()));
        putLe(f, 40, 1ull << 63, 8);
        resealHeader(f);
        expectOpenError(f, {"truncated", "needs 9223372036854775808 bytes"});
        f = craft(doc(json::array()));
        putLe(f, 32, ~0ull, 8);
        resealHeader(f);
        expectOpenError(f, {"manifest_offset = 18446744073709551615"});
        f = craft(doc(json::array()));
        putLe(f, 32, 0, 8);
        resealHeader(f);
        expectOpenError(f, {"manifest_offset = 0", "inside the 64-byte header"});
        f = craft(doc(json::array()));
        putLe(f, 12, 4096, 4);
        resealHeader(f);
        expectOpenError(f, {"header_size = 4096"});
        // Limits are configurable: a smaller blob limit refuses what the default allows.
        const std::string ok = one(entry("l", "u8", {4096}, 64, 4096, 4096));
        QVERIFY(Reader::openMemory(craft(ok, Bytes(4096))));
        auto lim = Reader::openMemory(craft(ok, Bytes(4096)), "lim.kvsnap", {1024, 1 << 20});
        QVERIFY(contains(lim.message(), "exceeds the limit of 1024 bytes"));
    }

    // A save killed partway (SIGKILL: no destructors, no cleanup) leaves the previous
    // snapshot at the path intact, plus a stale temporary file that removeStaleTempFiles clears.
    void killedSaveKeepsTheOldSnapshot() {
        QTemporaryDir dir;
        const std::string p = (dir.path() + "/state.kvsnap").toStdString();
        const std::vector<Sample> old{sample("layers.0.k", DType::F32, {64, 64}, 1)};
        QVERIFY(writeFile(p, old, {}, {{"generation", "old"}}));
        const Bytes before = readAll(p);

        int fds[2];
        QVERIFY(::pipe(fds) == 0);
        const pid_t child = ::fork();
        QVERIFY(child >= 0);
        if (child == 0) {
            ::close(fds[0]);
            auto w = Writer::create(p, {true, 1});
            if (!w)
                ::_exit(2);
            const Bytes block = makeData(DType::U8, 4 << 20, 7); // incompressible noise
            for (int i = 0; i < 1000; ++i) {
                std::string name = "b";
                name += std::to_string(i);
                if (!w.value()->addBlob(name, DType::U8, {4 << 20}, block.data(), block.size()))
                    ::_exit(3);
                if (i == 2) // three blobs are on disk: tell the parent to kill us
                    (void)!::write(fds[1], "x", 1);
            }
            ::_exit(4); // not reached in time
        }
        ::close(fds[1]);
        char c = 0;
        QCOMPARE(::read(fds[0], &c, 1), ssize_t(1));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        ::close(fds[0]);
        QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

        QCOMPARE(readAll(p), before);
        auto r = Reader::open(p);
        QVERIFY2(r, r.message().c_str());
        JSON_COMPARE(r.value().manifest()["generation"], json("old"));
        QVERIFY(r.value().verifyAll());
        QCOMPARE(r.value().readBlob("layers.0.k").value(), old[0].data);

        const QStringList temps =
            QDir(dir.path()).entryList({".state.kvsnap.tmp*"}, QDir::Files | QDir::Hidden);
        QCOMPARE(temps.size(), 1);
        // Three blobs reached the file, but for what the writer holds back until a 2 MiB window
        // of the file is whole.
        QVERIFY(QFileInfo(dir.path() + "/" + temps[0]).size() >= 3 * (4 << 20) - (2 << 20));
        QCOMPARE(removeStaleTempFiles(p).value(), 0); // too young: may be a save in progress
        QCOMPARE(removeStaleTempFiles(p, std::chrono::seconds(0)).value(), 1);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden),
                 QStringList{"state.kvsnap"});
        QVERIFY(Reader::open(p).value().verifyAll());
    }
};

QTEST_GUILESS_MAIN(TestSnapfile)
#include "tst_snapfile.moc"
