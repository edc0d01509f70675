// Helpers shared by the .kvsnap container tests (tst_snapfile, tst_snapfilehostile): sample
// blobs of every dtype, a writer shortcut, and files built by hand after FORMAT.md.
#pragma once

#include "snapfile/snapfile.h"
#include "util/hash.h"

#include <QObject>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

namespace snapfiletest {

using namespace kvscope;
using namespace kvscope::snapfile;
using nlohmann::json;
using Bytes = std::vector<uint8_t>;

// QCOMPARE cannot print nlohmann::json (and trips over its conversions).
#define JSON_COMPARE(a, b)                                                                         \
    QVERIFY2((a) == (b),                                                                           \
             qPrintable(QString::fromStdString(json(a).dump() + " != " + json(b).dump())))

inline Bytes readAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void writeAll(const std::string& path, const Bytes& b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Smooth float-like data (compresses well once shuffled) or noise.
inline Bytes makeData(DType dt, std::size_t elements, uint32_t seed) {
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

inline std::size_t elementsOf(const std::vector<int64_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape)
        n *= std::size_t(d);
    return n;
}

inline Sample sample(std::string name, DType dt, std::vector<int64_t> shape, uint32_t seed) {
    Sample s{std::move(name), dt, std::move(shape), {}};
    s.data = makeData(dt, elementsOf(s.shape), seed);
    return s;
}

inline std::vector<Sample> everyDType() {
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

inline const json kManifest = {{"model", "tiny"}, {"tokens", {1, 2, 3}}, {"note", "ünïcode ✓"}};

inline Status writeFile(const std::string& path, const std::vector<Sample>& blobs,
                        WriteOptions o = {}, const json& manifest = kManifest) {
    auto w = Writer::create(path, o);
    if (!w)
        return w.status();
    for (const auto& s : blobs)
        if (Status st = w.value()->addBlob(s.name, s.dtype, s.shape, s.data.data(), s.data.size());
            !st)
            return st;
    return w.value()->finish(manifest);
}

inline bool contains(const std::string& hay, const std::string& needle) {
    return hay.find(needle) != std::string::npos;
}

// Every blob reads back as written, or reading reports an error: never silently wrong data.
inline bool noSilentCorruption(const Reader& r, const std::vector<Sample>& blobs) {
    for (const auto& s : blobs) {
        auto got = r.readBlob(s.name);
        if (got && got.value() != s.data)
            return false;
    }
    return true;
}

// --- Hand-built files, following FORMAT.md -----------------------------------------------

inline void putLe(Bytes& f, std::size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
        f[at + i] = uint8_t(v >> (8 * i));
}

inline void resealHeader(Bytes& f) {
    putLe(f, 56, hash64(f.data(), 56), 8);
}

inline Bytes craft(const std::string& manifestText, const Bytes& data = {}, uint32_t version = 1,
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

inline json entry(const std::string& name, const std::string& dtype, const json& shape,
                  uint64_t offset, uint64_t stored, uint64_t raw,
                  const std::string& compression = "none", uint64_t shuffleBlock = 0,
                  uint64_t storedHash = 0, uint64_t rawHash = 0) {
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

inline std::string doc(const json& blobs, const json& manifest = json::object()) {
    return json{{"kvsnap", {{"format_version", 1}, {"blobs", blobs}}}, {"manifest", manifest}}
        .dump();
}

// A test class with a temporary folder for its files and the check every hostile file gets:
// open() refuses it with a message naming the file and each of `parts`.
class SnapfileTest : public QObject {
protected:
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
};

} // namespace snapfiletest
