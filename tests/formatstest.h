// Shared by the format tests (tst_formats: fp16/bf16 and GGUF; tst_safetensors: safetensors
// and JSON errors): a little-endian byte builder for hand-made (often malformed) files, file
// helpers, and a base class with a temporary folder and the check that a malformed file is
// refused with a message naming it.
#pragma once

#include "formats/halffloat.h"
#include "util/status.h"

#include <QObject>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::formatstest {

// Little-endian byte builder for hand-made (often malformed) files.
struct Bytes {
    std::vector<std::uint8_t> b;
    // resize + memcpy rather than insert: GCC 12 reports false -Wstringop-overflow on
    // vector inserts of a few bytes here.
    template <typename T> Bytes& put(T v) {
        const std::size_t at = b.size();
        b.resize(at + sizeof v);
        std::memcpy(b.data() + at, &v, sizeof v);
        return *this;
    }
    Bytes& u32(std::uint32_t v) { return put(v); }
    Bytes& u64(std::uint64_t v) { return put(v); }
    Bytes& raw(std::string_view s) {
        const std::size_t at = b.size();
        b.resize(at + s.size());
        if (!s.empty())
            std::memcpy(b.data() + at, s.data(), s.size());
        return *this;
    }
    Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
    Bytes& zeros(std::size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
    Bytes& padTo(std::size_t a) {
        b.resize((b.size() + a - 1) / a * a, 0);
        return *this;
    }
};

inline void writeBytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::uint8_t> readBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

inline float maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
        m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// Every finite fp16 value, as float: exactly representable in fp16 and in float.
inline std::vector<float> allFiniteHalfValues() {
    std::vector<float> v;
    for (std::uint32_t h = 0; h < 0x10000; ++h)
        if (((h >> 10) & 0x1F) != 0x1F)
            v.push_back(fp16ToFloat(static_cast<std::uint16_t>(h)));
    return v;
}

// Opens `count` randomly corrupted copies of `base` (1-4 bytes overwritten within the first
// `span` bytes, or a random truncation): each must open or fail with a message naming the
// file — never crash or allocate absurdly (run under ASan to check the latter).
template <typename FileT>
void openMutations(const std::vector<std::uint8_t>& base, std::size_t span, int count,
                   const std::string& path) {
    std::mt19937 rng(1234);
    int failures = 0;
    for (int i = 0; i < count; ++i) {
        auto bytes = base;
        if (i % 8 == 7) {
            bytes.resize(rng() % bytes.size());
        } else {
            for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) {
                const std::size_t at = rng() % std::min(span, bytes.size());
                bytes[at] = (rng() % 4 == 0) ? 0xFF : static_cast<std::uint8_t>(rng());
            }
        }
        writeBytes(path, bytes);
        auto r = FileT::open(path);
        if (!r.isOk()) {
            ++failures;
            QVERIFY2(contains(r.message(), path), r.message().c_str());
        }
    }
    qInfo("%d of %d corrupted copies rejected, the rest opened", failures, count);
}

// The columns of a data-driven table of malformed files (`file`, and the parts the error
// must contain), and one row of it.
inline void malformedFileColumns() {
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<QStringList>("expected");
}
inline void addMalformedFile(const char* name, const Bytes& b, QStringList expected) {
    QTest::newRow(name) << QByteArray(reinterpret_cast<const char*>(b.b.data()),
                                      static_cast<qsizetype>(b.b.size()))
                        << expected;
}

// Base of the format test classes (a QObject without slots of its own).
class FormatsTest : public QObject {
protected:
    QTemporaryDir m_tmp;
    std::string tmpPath(const std::string& name) const {
        return (m_tmp.path() + "/" + QString::fromStdString(name)).toStdString();
    }
    // Writes `bytes` to <tmp>/<name> and checks that opening it fails with a message that
    // names the file and contains every string in `expected`.
    template <typename FileT>
    void expectOpenError(const std::vector<std::uint8_t>& bytes, const std::string& name,
                         const std::vector<std::string>& expected) {
        const std::string path = tmpPath(name);
        writeBytes(path, bytes);
        auto r = FileT::open(path);
        QVERIFY2(!r.isOk(), ("opened a malformed file: " + name).c_str());
        const std::string msg = r.message();
        QVERIFY2(contains(msg, path), ("message does not name the file: " + msg).c_str());
        for (const auto& e : expected)
            QVERIFY2(contains(msg, e), ("expected '" + e + "' in: " + msg).c_str());
    }
    // The current row of a malformed-file table (malformedFileColumns), written to
    // <tmp>/<name>: refused, as expectOpenError checks.
    template <typename FileT> void expectRowRefused(const std::string& name) {
        QFETCH(QByteArray, file);
        QFETCH(QStringList, expected);
        std::vector<std::string> parts;
        for (const auto& e : expected)
            parts.push_back(e.toStdString());
        expectOpenError<FileT>(std::vector<std::uint8_t>(file.begin(), file.end()), name, parts);
    }
};

} // namespace kvscope::formatstest
