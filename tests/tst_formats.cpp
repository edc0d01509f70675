// Tests for core/formats: fp16/bf16 conversion and the GGUF reader and writer (safetensors:
// tst_safetensors). Real files come from ../shared (skipped when absent); malformed files are
// built here.
#include "formats/gguf.h"
#include "formats/ggufwriter.h"
#include "formats/halffloat.h"
#include "formats/safetensorswriter.h"
#include "util/fileio.h"
#include "formatstest.h"
#include "testdata.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

using namespace kvscope;
using namespace kvscope::formatstest;

namespace {

Bytes ggufHeader(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    Bytes out;
    out.raw("GGUF").u32(version).u64(tensors).u64(kvs);
    return out;
}

} // namespace

class TestFormats : public FormatsTest {
    Q_OBJECT

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    // ---- halffloat.h ---------------------------------------------------------------------
    void halfKnownValues();
    void halfRoundTripAll();

    // ---- GGUF ----------------------------------------------------------------------------
    void ggufStories260K();
    void ggufVocabOnly();
    void ggufTypedGetters();
    void ggufMetadataRoundTrip();
    void ggufTensorRoundTrip_data();
    void ggufTensorRoundTrip();
    void ggufQuantizedKernels();
    void ggufAlignmentAndVersion2();
    void writersStreamProducedTensors();
    void ggufTruncated_data();
    void ggufTruncated();
    void ggufMalformed_data();
    void ggufMalformed();
    void ggufUnsupportedType();
    void ggufMutations();
    void ggufTypeLie();
};

// ---- halffloat.h -----------------------------------------------------------------------------

void TestFormats::halfKnownValues() {
    QCOMPARE(floatToFp16(1.0f), std::uint16_t(0x3C00));
    QCOMPARE(floatToFp16(-2.0f), std::uint16_t(0xC000));
    QCOMPARE(floatToFp16(65504.0f), std::uint16_t(0x7BFF));
    QCOMPARE(floatToFp16(65519.0f), std::uint16_t(0x7BFF));              // below the halfway point
    QCOMPARE(floatToFp16(65520.0f), std::uint16_t(0x7C00));              // tie rounds to even = inf
    QCOMPARE(floatToFp16(std::ldexp(1.0f, -24)), std::uint16_t(0x0001)); // smallest subnormal
    QCOMPARE(floatToFp16(std::ldexp(1.0f, -25)), std::uint16_t(0x0000)); // tie to even 0
    QCOMPARE(floatToFp16(std::ldexp(1.5f, -25)), std::uint16_t(0x0001));
    QCOMPARE(floatToFp16(std::ldexp(3.0f, -25)), std::uint16_t(0x0002));        // tie 1.5 -> 2
    QCOMPARE(floatToFp16(1.0f + std::ldexp(1.0f, -11)), std::uint16_t(0x3C00)); // tie -> even
    QCOMPARE(floatToFp16(1.0f + std::ldexp(3.0f, -11)), std::uint16_t(0x3C02)); // tie -> even
    QCOMPARE(floatToFp16(std::numeric_limits<float>::infinity()), std::uint16_t(0x7C00));
    QVERIFY(std::isnan(fp16ToFloat(floatToFp16(std::numeric_limits<float>::quiet_NaN()))));
    QCOMPARE(floatToFp16(-0.0f), std::uint16_t(0x8000));
    QCOMPARE(fp16ToFloat(0x0001), std::ldexp(1.0f, -24));

    QCOMPARE(floatToBf16(1.0f), std::uint16_t(0x3F80));
    QCOMPARE(floatToBf16(1.0f + std::ldexp(1.0f, -8)), std::uint16_t(0x3F80));       // tie -> even
    QCOMPARE(floatToBf16(1.0f + std::ldexp(3.0f, -8)), std::uint16_t(0x3F82));       // tie -> even
    QCOMPARE(floatToBf16(std::numeric_limits<float>::max()), std::uint16_t(0x7F80)); // -> inf
    QVERIFY(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

void TestFormats::halfRoundTripAll() {
    // Every non-NaN fp16 and bf16 bit pattern survives half -> float -> half exactly.
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
        const auto bits = static_cast<std::uint16_t>(h);
        if ((h & 0x7C00) != 0x7C00 || (h & 0x03FF) == 0)
            QCOMPARE(floatToFp16(fp16ToFloat(bits)), bits);
        if ((h & 0x7F80) != 0x7F80 || (h & 0x007F) == 0)
            QCOMPARE(floatToBf16(bf16ToFloat(bits)), bits);
    }
}

// ---- GGUF ------------------------------------------------------------------------------------

void TestFormats::ggufStories260K() {
    KVSCOPE_REQUIRE_DATA("models/stories260K/stories260K.gguf");
    auto r = gguf::File::open(testdata::path("models/stories260K/stories260K.gguf"));
    QVERIFY2(r.isOk(), r.message().c_str());
    const gguf::File& f = r.value();
    QCOMPARE(f.version(), 3u);
    QCOMPARE(f.metadata().size(), std::size_t(19));
    QCOMPARE(f.tensors().size(), std::size_t(48));
    for (const auto& t : f.tensors())
        QVERIFY2(t.type == gguf::TensorType::F32, t.name.c_str());
    QCOMPARE(f.alignment(), 32u);
    QCOMPARE(f.dataOffset() % 32, std::uint64_t(0));
    QCOMPARE(f.getString("general.architecture"), std::string("llama"));
    QCOMPARE(f.getU32("llama.embedding_length"), 64u);
    QCOMPARE(f.getI64("llama.block_count"), std::int64_t(5));
    QCOMPARE(f.getStringArray("tokenizer.ggml.tokens").size(), std::size_t(512));
    QCOMPARE(f.getF32Array("tokenizer.ggml.scores").size(), std::size_t(512));
    QCOMPARE(f.getI32Array("tokenizer.ggml.token_type").size(), std::size_t(512));
    QCOMPARE(f.getStringArray("tokenizer.ggml.tokens")[1], std::string("<s>"));
    QCOMPARE(f.getF32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);

    const gguf::TensorInfo* embd = f.tensor("token_embd.weight");
    QVERIFY(embd);
    QCOMPARE(embd->dims, (std::vector<std::int64_t>{64, 512})); // ne[0] = dim is fastest
    QCOMPARE(embd->nbytes, std::uint64_t(512 * 64 * 4));
    const std::vector<float> e = f.readF32(*embd);

    // The llama2.c checkpoint: 28-byte header, then token_embedding[512][64] in fp32.
    KVSCOPE_REQUIRE_DATA("models/stories260K/stories260K.bin");
    const auto bin = readBytes(testdata::path("models/stories260K/stories260K.bin"));
    QVERIFY(bin.size() >= 28 + e.size() * 4);
    QVERIFY(std::memcmp(e.data(), bin.data() + 28, e.size() * 4) == 0); // bit-exact

    const gguf::TensorInfo* out = f.tensor("output.weight");
    QVERIFY(out);
    QVERIFY(f.readF32(*out) == e); // tied classifier, stored twice
    QVERIFY(f.readRaw(*out) == f.readRaw(*embd));
    QVERIFY(!f.tensor("no.such.tensor"));
}

void TestFormats::ggufVocabOnly() {
    const QString rel = "tokenizers/ggml-vocab/gpt-2/ggml-vocab-gpt-2.gguf";
    KVSCOPE_REQUIRE_DATA(rel);
    auto r = gguf::File::open(testdata::path(rel));
    QVERIFY2(r.isOk(), r.message().c_str());
    const gguf::File& f = r.value();
    QCOMPARE(f.tensors().size(), std::size_t(0));
    QCOMPARE(f.getString("tokenizer.ggml.model"), std::string("gpt2"));
    QCOMPARE(f.getStringArray("tokenizer.ggml.tokens").size(), std::size_t(50257));
    QCOMPARE(f.getStringArray("tokenizer.ggml.merges").size(), std::size_t(50000));
    QCOMPARE(f.getStringArray("tokenizer.ggml.merges")[0], std::string("\xC4\xA0 t")); // "Ġ t"
    QCOMPARE(f.getI32Array("tokenizer.ggml.token_type").size(), std::size_t(50257));
    QCOMPARE(f.getU32("tokenizer.ggml.bos_token_id"), 50256u);
}

void TestFormats::ggufTypedGetters() {
    gguf::Writer w;
    w.set("u8", gguf::Value::scalar<std::uint8_t>(200));
    w.set("i8", gguf::Value::scalar<std::int8_t>(-5));
    w.set("u64big", gguf::Value::scalar<std::uint64_t>(1ull << 40));
    w.set("f64", gguf::Value::scalar<double>(0.25));
    w.set("name", gguf::Value::string("x"));
    w.set("ints", gguf::Value::array(std::vector<std::uint16_t>{1, 2, 65535}));
    const std::string path = tmpPath("getters.gguf");
    QVERIFY(w.write(path).isOk());
    auto r = gguf::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    const gguf::File& f = r.value();
    QCOMPARE(f.getU32("u8"), 200u); // any integer type that fits
    QCOMPARE(f.getI32("i8"), -5);
    QCOMPARE(f.getU64("u64big"), 1ull << 40);
    QCOMPARE(f.getF32("f64"), 0.25f); // f64 accepted as f32
    QCOMPARE(f.getI32Array("ints"), (std::vector<std::int32_t>{1, 2, 65535}));
    auto expectThrow = [&](auto fn, std::vector<std::string> parts) {
        try {
            fn();
            QFAIL("no exception");
        } catch (const KvError& e) {
            for (const auto& p : parts)
                QVERIFY2(contains(e.what(), p), e.what());
        }
    };
    expectThrow([&] { f.getU32("i8"); }, {path, "'i8'", "unsigned 32-bit", "i8 -5"});
    expectThrow([&] { f.getU32("u64big"); }, {"'u64big'", "unsigned 32-bit"});
    expectThrow([&] { f.getString("u8"); }, {"'u8'", "expected a string", "found u8"});
    expectThrow([&] { f.getF32("name"); }, {"'name'", "floating-point", "found string"});
    expectThrow([&] { f.getStringArray("ints"); }, {"'ints'", "array of u16"});
    expectThrow([&] { f.getU32("missing.key"); }, {path, "'missing.key'", "missing"});
}

void TestFormats::ggufMetadataRoundTrip() {
    using gguf::Value;
    gguf::Writer w;
    w.set("u8", Value::scalar<std::uint8_t>(255));
    w.set("i8", Value::scalar<std::int8_t>(-128));
    w.set("u16", Value::scalar<std::uint16_t>(65535));
    w.set("i16", Value::scalar<std::int16_t>(-32768));
    w.set("u32", Value::scalar<std::uint32_t>(4294967295u));
    w.set("i32", Value::scalar<std::int32_t>(std::numeric_limits<std::int32_t>::min()));
    w.set("f32", Value::scalar<float>(3.5f));
    w.set("bool", Value::scalar(true));
    w.set("str", Value::string(std::string("h\0llo \xC3\xA9", 8))); // embedded NUL, UTF-8
    w.set("u64", Value::scalar<std::uint64_t>(std::numeric_limits<std::uint64_t>::max()));
    w.set("i64", Value::scalar<std::int64_t>(std::numeric_limits<std::int64_t>::min()));
    w.set("f64", Value::scalar<double>(-1e300));
    w.set("a.u8", Value::array(std::vector<std::uint8_t>{0, 1, 255}));
    w.set("a.i8", Value::array(std::vector<std::int8_t>{-1, 2}));
    w.set("a.u16", Value::array(std::vector<std::uint16_t>{7}));
    w.set("a.i16", Value::array(std::vector<std::int16_t>{-7, 7}));
    w.set("a.u32", Value::array(std::vector<std::uint32_t>{1, 4000000000u}));
    w.set("a.i32", Value::array(std::vector<std::int32_t>{-1, 0, 1}));
    std::vector<float> floats(100000);
    for (std::size_t i = 0; i < floats.size(); ++i)
        floats[i] = static_cast<float>(i) * 0.5f - 7.0f;
    w.set("a.f32", Value::array(floats));
    const bool flags[] = {true, false, true};
    w.set("a.bool", Value::array(std::span<const bool>(flags)));
    w.set("a.u64",
          Value::array(std::vector<std::uint64_t>{std::numeric_limits<std::uint64_t>::max()}));
    w.set("a.i64", Value::array(std::vector<std::int64_t>{-3, 1ll << 50}));
    w.set("a.f64", Value::array(std::vector<double>{0.1, -0.2}));
    std::vector<std::string> strings;
    for (int i = 0; i < 100000; ++i)
        strings.push_back("tok" + std::to_string(i));
    strings.push_back(""); // empty string element
    w.set("a.str", Value::stringArray(strings));
    w.set("a.empty", Value::array(std::vector<std::int32_t>{}));
    w.set("u8", Value::scalar<std::uint8_t>(254)); // replacing keeps the position

    const std::string path = tmpPath("meta.gguf");
    QVERIFY(w.write(path).isOk());
    auto r = gguf::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    const gguf::File& f = r.value();
    QCOMPARE(f.metadata().size(), std::size_t(25));
    QCOMPARE(f.metadata()[0].first, std::string("u8")); // file order preserved
    QCOMPARE(f.tensors().size(), std::size_t(0));
    QCOMPARE(f.getU32("u8"), 254u);
    QCOMPARE(f.getI64("i8"), std::int64_t(-128));
    QCOMPARE(f.getU32("u16"), 65535u);
    QCOMPARE(f.getI32("i16"), -32768);
    QCOMPARE(f.getU32("u32"), 4294967295u);
    QCOMPARE(f.getI32("i32"), std::numeric_limits<std::int32_t>::min());
    QCOMPARE(f.getF32("f32"), 3.5f);
    QCOMPARE(f.getBool("bool"), true);
    QCOMPARE(f.getString("str"), std::string("h\0llo \xC3\xA9", 8));
    QCOMPARE(f.getU64("u64"), std::numeric_limits<std::uint64_t>::max());
    QVERIFY(!f.find("u64")->asI64()); // does not fit
    QCOMPARE(f.getI64("i64"), std::numeric_limits<std::int64_t>::min());
    QCOMPARE(f.getF64("f64"), -1e300);
    QCOMPARE(f.getI32Array("a.u8"), (std::vector<std::int32_t>{0, 1, 255}));
    QCOMPARE(f.getI32Array("a.i8"), (std::vector<std::int32_t>{-1, 2}));
    QCOMPARE(f.getI32Array("a.u16"), (std::vector<std::int32_t>{7}));
    QCOMPARE(f.getI32Array("a.i16"), (std::vector<std::int32_t>{-7, 7}));
    QCOMPARE(f.getI64Array("a.u32"), (std::vector<std::int64_t>{1, 4000000000ll}));
    QVERIFY(!f.find("a.u32")->toI32Array()); // 4e9 does not fit in i32
    QCOMPARE(f.getI32Array("a.i32"), (std::vector<std::int32_t>{-1, 0, 1}));
    QVERIFY(f.getF32Array("a.f32") == floats);
    QCOMPARE(f.find("a.bool")->elementType(), gguf::ValueType::Bool);
    QCOMPARE(f.find("a.bool")->packed(), (std::vector<std::uint8_t>{1, 0, 1}));
    QVERIFY(!f.find("a.u64")->toI64Array());
    QCOMPARE(f.getI64Array("a.i64"), (std::vector<std::int64_t>{-3, 1ll << 50}));
    QCOMPARE(f.getF32Array("a.f64"), (std::vector<float>{0.1f, -0.2f}));
    QVERIFY(f.getStringArray("a.str") == strings);
    QCOMPARE(f.find("a.empty")->size(), std::size_t(0));
    QCOMPARE(f.find("a.empty")->elementType(), gguf::ValueType::I32);
    QCOMPARE(f.find("a.f32")->toDisplayString(3), std::string("[-7, -6.5, -6, … (100000 items)]"));
}

void TestFormats::ggufTensorRoundTrip_data() {
    QTest::addColumn<int>("type");
    QTest::newRow("F32") << int(gguf::TensorType::F32);
    QTest::newRow("F16") << int(gguf::TensorType::F16);
    QTest::newRow("BF16") << int(gguf::TensorType::BF16);
    QTest::newRow("Q8_0") << int(gguf::TensorType::Q8_0);
}

void TestFormats::ggufTensorRoundTrip() {
    QFETCH(int, type);
    const auto t = static_cast<gguf::TensorType>(type);
    // Values exactly representable in the target type, so F16/BF16 must round-trip bit-exactly.
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> a(64 * 3 * 2); // dims {64, 3, 2}
    for (float& x : a) {
        x = normal(rng);
        if (t == gguf::TensorType::F16)
            x = fp16ToFloat(floatToFp16(x));
        if (t == gguf::TensorType::BF16)
            x = bf16ToFloat(floatToBf16(x));
    }
    std::vector<float> halves = allFiniteHalfValues(); // 63488 values incl. subnormals, ±0
    halves.resize(halves.size() / 32 * 32);
    std::vector<float> b =
        t == gguf::TensorType::BF16 ? std::vector<float>(halves.size(), 0.0f) : halves;
    if (t == gguf::TensorType::BF16)
        for (std::size_t i = 0; i < b.size(); ++i)
            b[i] = bf16ToFloat(static_cast<std::uint16_t>(i * 7919 % 0x7F80)); // finite bf16

    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("test"));
    w.addTensor("a", {64, 3, 2}, a, t);
    w.addTensor("b", {static_cast<std::int64_t>(b.size())}, b, t);
    w.addTensor("empty", {0, 4}, std::span<const float>(), t);
    const std::string path = tmpPath("tensors.gguf");
    QVERIFY(w.write(path).isOk());
    auto r = gguf::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    const gguf::File& f = r.value();
    QCOMPARE(f.tensors().size(), std::size_t(3));
    for (const auto& info : f.tensors()) {
        QCOMPARE(info.type, t);
        QCOMPARE((info.offset - f.dataOffset()) % f.alignment(), std::uint64_t(0));
    }
    QCOMPARE(f.tensor("a")->dims, (std::vector<std::int64_t>{64, 3, 2}));
    QCOMPARE(f.readF32(*f.tensor("empty")).size(), std::size_t(0));

    for (const auto* pair : {&a, &b}) {
        const std::vector<float>& want = *pair;
        const auto got = f.readF32(*f.tensor(pair == &a ? "a" : "b"));
        QCOMPARE(got.size(), want.size());
        if (t != gguf::TensorType::Q8_0) {
            QVERIFY2(std::memcmp(got.data(), want.data(), got.size() * 4) == 0,
                     qPrintable(QString("max |diff| %1").arg(maxAbsDiff(got, want))));
            continue;
        }
        // Q8_0: per block of 32, with d = max|x| / 127 stored as fp16,
        //   |x - x̂| <= 0.6·d + 127·2^-25.
        // 0.5·d is half a quantization step; the fp16 rounding of d adds at most 127·2^-11·d
        // (< 0.07·d) for normal d, or 127·2^-25 absolute when d is an fp16 subnormal (the
        // input here includes every tiny fp16 value, so that case is exercised).
        const float floorTerm = 127.0f * std::ldexp(1.0f, -25);
        float worstSteps = 0, worstAbs = 0;
        for (std::size_t blk = 0; blk < want.size() / 32; ++blk) {
            float amax = 0;
            for (int j = 0; j < 32; ++j)
                amax = std::max(amax, std::fabs(want[32 * blk + j]));
            const float d = amax / 127.0f;
            const float tol = 0.6f * d + floorTerm;
            for (int j = 0; j < 32; ++j) {
                const float err = std::fabs(got[32 * blk + j] - want[32 * blk + j]);
                worstAbs = std::max(worstAbs, err);
                if (d >= std::ldexp(1.0f, -14)) // normal fp16 scale: relative bound alone
                    worstSteps = std::max(worstSteps, err / d);
                QVERIFY2(err <= tol, qPrintable(QString("block %1 elem %2: error %3 > tol %4")
                                                    .arg(blk)
                                                    .arg(j)
                                                    .arg(err)
                                                    .arg(tol)));
            }
        }
        QVERIFY2(worstSteps <= 0.6f, qPrintable(QString("worst %1 steps").arg(worstSteps)));
        qInfo("Q8_0: worst error %.3f steps for normal-range d (tolerance 0.6), max |diff| %g",
              worstSteps, worstAbs);
    }
}

void TestFormats::ggufQuantizedKernels() {
    // Q4_0 and Q4_1 blocks built by hand: x = d·(q-8) and x = d·q + m, low nibbles first.
    std::vector<std::uint8_t> q40(18), q41(20);
    const std::uint16_t d = floatToFp16(0.5f), m = floatToFp16(-1.0f);
    std::memcpy(q40.data(), &d, 2);
    std::memcpy(q41.data(), &d, 2);
    std::memcpy(q41.data() + 2, &m, 2);
    for (int j = 0; j < 16; ++j) {
        q40[2 + j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
        q41[4 + j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
    }
    gguf::Writer w;
    w.addTensor("q40", {32}, gguf::TensorType::Q4_0, q40);
    w.addTensor("q41", {32}, gguf::TensorType::Q4_1, q41);
    const std::string path = tmpPath("q4.gguf");
    QVERIFY(w.write(path).isOk());
    auto r = gguf::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    const auto a = r.value().readF32(*r.value().tensor("q40"));
    const auto b = r.value().readF32(*r.value().tensor("q41"));
    for (int j = 0; j < 16; ++j) {
        QCOMPARE(a[j], 0.5f * static_cast<float>(j - 8));
        QCOMPARE(a[j + 16], 0.5f * static_cast<float>(15 - j - 8));
        QCOMPARE(b[j], 0.5f * static_cast<float>(j) - 1.0f);
        QCOMPARE(b[j + 16], 0.5f * static_cast<float>(15 - j) - 1.0f);
    }
    QCOMPARE(r.value().readRaw(*r.value().tensor("q40")), q40);
}

void TestFormats::ggufAlignmentAndVersion2() {
    gguf::Writer w(64);
    const std::vector<float> x = {1, 2, 3};
    w.addTensor("x", {3}, x);
    w.addTensor("y", {3}, x);
    auto bytes = w.toBytes();
    bytes[4] = 2; // version 2 has the same little-endian layout as version 3
    const std::string path = tmpPath("v2.gguf");
    writeBytes(path, bytes);
    auto r = gguf::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    QCOMPARE(r.value().version(), 2u);
    QCOMPARE(r.value().alignment(), 64u);
    QCOMPARE(r.value().getU32("general.alignment"), 64u);
    QCOMPARE(r.value().dataOffset() % 64, std::uint64_t(0));
    QCOMPARE(r.value().tensor("y")->offset - r.value().tensor("x")->offset, std::uint64_t(64));
    QCOMPARE(r.value().readF32(*r.value().tensor("y")), x);

    // Writing over an existing file replaces it atomically; a failed write leaves it alone.
    QVERIFY(!w.write(tmpPath("no/such/dir/x.gguf")).isOk());
    QVERIFY(gguf::File::open(path).isOk());
}

// Tensors made at write time (how convert writes an 8B model): each producer runs once, while
// the file is written, one after another; the file is the one eager tensors would make. A
// producer that makes the wrong byte count fails the write naming the tensor, and one that
// throws leaves an existing file untouched. The same for safetensors.
void TestFormats::writersStreamProducedTensors() {
    const std::vector<float> x = {1, 2, 3, 4, 5, 6};
    gguf::Writer eager, lazy;
    eager.addTensor("a", {3, 2}, x, gguf::TensorType::F16);
    eager.addTensor("b", {6}, x);
    int made = 0;
    lazy.addFloatTensor(
        "a", {3, 2},
        [&] {
            ++made;
            return x;
        },
        gguf::TensorType::F16);
    lazy.addTensor("b", {6}, gguf::TensorType::F32, [&] {
        ++made;
        std::vector<std::uint8_t> bytes(24);
        std::memcpy(bytes.data(), x.data(), 24);
        return bytes;
    });
    QCOMPARE(made, 0);
    const std::string path = tmpPath("lazy.gguf");
    QVERIFY(lazy.write(path).isOk());
    QCOMPARE(made, 2);
    QCOMPARE(readFileBytes(path), eager.toBytes());

    gguf::Writer wrong;
    wrong.addTensor("short", {6}, gguf::TensorType::F32,
                    [] { return std::vector<std::uint8_t>(20); });
    const Status st = wrong.write(path);
    QVERIFY(!st.isOk());
    QVERIFY2(st.message().find("'short'") != std::string::npos, st.message().c_str());
    gguf::Writer throwing;
    throwing.addFloatTensor("t", {6}, []() -> std::vector<float> { throw KvError("no values"); });
    QVERIFY(!throwing.write(path).isOk());
    QCOMPARE(readFileBytes(path), eager.toBytes()); // untouched
    QVERIFY_THROWS_EXCEPTION(KvError, lazy.addFloatTensor(
                                          "c", {6}, [&] { return x; }, gguf::TensorType::Q4_K));

    safetensors::Writer st1, st2;
    st1.addTensor("w", {2, 3}, x, safetensors::DType::BF16);
    st2.addTensor("w", safetensors::DType::BF16, {2, 3},
                  [&] { return safetensors::encodeFloats("w", x, safetensors::DType::BF16); });
    const std::string sp = tmpPath("lazy.safetensors");
    QVERIFY(st2.write(sp).isOk());
    QCOMPARE(readFileBytes(sp), st1.toBytes());
    safetensors::Writer st3;
    st3.addTensor("w", safetensors::DType::F32, {2, 3},
                  [] { return std::vector<std::uint8_t>(4); });
    const Status bad = st3.write(sp);
    QVERIFY(!bad.isOk());
    QVERIFY2(bad.message().find("'w'") != std::string::npos, bad.message().c_str());
    QCOMPARE(readFileBytes(sp), st1.toBytes());
}

void TestFormats::ggufTruncated_data() {
    QTest::addColumn<qint64>("cut");
    QTest::addColumn<QString>("field");
    // stories260K.gguf: metadata from byte 24, tensor infos end at 14176 - padding,
    // data runs from 14176 to the end (1185376 bytes).
    QTest::newRow("empty") << qint64(0) << "not a GGUF file";
    QTest::newRow("in magic") << qint64(3) << "not a GGUF file";
    QTest::newRow("in version") << qint64(6) << "header field version";
    QTest::newRow("in tensor_count") << qint64(10) << "header field tensor_count";
    QTest::newRow("in kv_count") << qint64(20) << "header field metadata_kv_count";
    QTest::newRow("in first key length") << qint64(28) << "header field metadata_kv_count = 19";
    QTest::newRow("in token strings") << qint64(5000) << "'tokenizer.ggml.tokens': element #";
    QTest::newRow("in tensor infos") << qint64(13000) << "tensor";
    QTest::newRow("in first tensor") << qint64(14176 + 100) << "tensor 'token_embd.weight': offset";
    QTest::newRow("last byte missing") << qint64(1185375) << "past the end of the file";
}

void TestFormats::ggufTruncated() {
    QFETCH(qint64, cut);
    QFETCH(QString, field);
    KVSCOPE_REQUIRE_DATA("models/stories260K/stories260K.gguf");
    auto bytes = readBytes(testdata::path("models/stories260K/stories260K.gguf"));
    QCOMPARE(bytes.size(), std::size_t(1185376));
    bytes.resize(static_cast<std::size_t>(cut));
    expectOpenError<gguf::File>(bytes, "cut-" + std::to_string(cut) + ".gguf",
                                {field.toStdString()});
}

void TestFormats::ggufMalformed_data() {
    malformedFileColumns();
    const auto add = &addMalformedFile;
    const std::uint64_t huge62 = 1ull << 62, huge60 = 1ull << 60;
    Bytes magic;
    magic.raw("GGML").u32(3).u64(0).u64(0);
    add("wrong magic", magic, {"not a GGUF file", "0x47474d4c"});
    add("version 1", ggufHeader(0, 0, 1), {"GGUF version 1 is not supported"});
    add("version 99", ggufHeader(0, 0, 99), {"unsupported GGUF version 99"});
    add("big-endian", ggufHeader(0, 0, 0x03000000), {"big-endian"});
    add("kv count 2^60", ggufHeader(0, huge60),
        {"header field metadata_kv_count = 1152921504606846976"});
    add("tensor count 2^60", ggufHeader(huge60, 0),
        {"header field tensor_count = 1152921504606846976"});
    add("key length 2^62", ggufHeader(0, 1).u64(huge62).raw("k").zeros(16),
        {"metadata key #0: key: string length 4611686018427387904", "exceeds the file size"});
    add("string value length 2^62", ggufHeader(0, 1).str("name").u32(8).u64(huge62),
        {"metadata key #0 'name': value: string length 4611686018427387904"});
    add("u32 array count 2^60", ggufHeader(0, 1).str("a").u32(9).u32(4).u64(huge60),
        {"metadata key #0 'a': array count 1152921504606846976", "exceeds the file size"});
    add("string array count 2^60", ggufHeader(0, 1).str("a").u32(9).u32(8).u64(huge60).str("x"),
        {"metadata key #0 'a': array count 1152921504606846976"});
    add("string element too long",
        ggufHeader(0, 1).str("toks").u32(9).u32(8).u64(2).str("x").u64(huge62),
        {"'toks': element #1: string length 4611686018427387904"});
    add("value type 13", ggufHeader(0, 1).str("k").u32(13).u32(0), {"'k': value type 13"});
    add("array of arrays", ggufHeader(0, 1).str("k").u32(9).u32(9).u64(0),
        {"'k': arrays of arrays"});
    add("array element type 99", ggufHeader(0, 1).str("k").u32(9).u32(99).u64(0),
        {"'k': array element type 99"});
    add("duplicate key", ggufHeader(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2),
        {"metadata key #1 'k': the key appears more than once"});
    add("alignment 3", ggufHeader(0, 1).str("general.alignment").u32(4).u32(3),
        {"'general.alignment'", "not a power of two"});
    add("alignment is a string", ggufHeader(0, 1).str("general.alignment").u32(8).str("32"),
        {"'general.alignment'", "expected an unsigned integer"});
    auto tensorFile = [&](std::uint32_t nDims, std::vector<std::uint64_t> dims, std::uint32_t type,
                          std::uint64_t offset, std::size_t dataBytes) {
        Bytes b = ggufHeader(1, 0);
        b.str("blk.0.attn_q.weight").u32(nDims);
        for (auto d : dims)
            b.u64(d);
        b.u32(type).u64(offset).padTo(32).zeros(dataBytes);
        return b;
    };
    add("dim product overflows", tensorFile(2, {1ull << 32, 1ull << 32}, 0, 0, 64),
        {"tensor 'blk.0.attn_q.weight': dimension 1 = 4294967296", "overflow"});
    add("bytes overflow", tensorFile(2, {1ull << 31, 1ull << 31}, 0, 0, 64),
        {"tensor 'blk.0.attn_q.weight': size in bytes overflows"});
    add("negative dim", tensorFile(1, {~0ull}, 0, 0, 64),
        {"'blk.0.attn_q.weight': dimension 0 = -1 is negative"});
    add("n_dims 1000", tensorFile(1000, {}, 0, 0, 0), {"'blk.0.attn_q.weight': n_dims = 1000"});
    add("unknown tensor type", tensorFile(1, {4}, 77, 0, 64),
        {"'blk.0.attn_q.weight': unknown tensor type id 77"});
    add("Q8_0 row not whole blocks", tensorFile(1, {33}, 8, 0, 64),
        {"dimension 0 = 33 is not a multiple of the Q8_0 block size 32"});
    add("offset past end", tensorFile(1, {1024}, 0, 64, 64),
        {"tensor 'blk.0.attn_q.weight': offset", "+ 4096 bytes is past the end of the file"});
    add("offset 2^64-32", tensorFile(1, {1}, 0, ~0ull - 31, 64),
        {"tensor 'blk.0.attn_q.weight': offset 18446744073709551584", "past the end of the file"});
    add("offset misaligned", tensorFile(1, {4}, 0, 4, 64),
        {"offset 4 is not a multiple of the alignment 32"});
    Bytes overlap = ggufHeader(2, 0);
    overlap.str("a")
        .u32(1)
        .u64(16)
        .u32(0)
        .u64(0)
        .str("b")
        .u32(1)
        .u64(16)
        .u32(0)
        .u64(32)
        .padTo(32)
        .zeros(128);
    add("overlapping tensors", overlap, {"tensor 'b': data at offset", "overlaps tensor 'a'"});
    Bytes dup = ggufHeader(2, 0);
    dup.str("a").u32(1).u64(4).u32(0).u64(0).str("a").u32(1).u64(4).u32(0).u64(32).padTo(32).zeros(
        64);
    add("duplicate tensor", dup, {"tensor 'a': the tensor name appears more than once"});
    add("truncated tensor name", ggufHeader(1, 0).u64(1000).raw("abc").zeros(21),
        {"tensor #0: name: string length 1000"});
}

void TestFormats::ggufMalformed() {
    expectRowRefused<gguf::File>("bad.gguf");
}

void TestFormats::ggufUnsupportedType() {
    gguf::Writer w;
    // IQ2_XXS (256 values in 66 bytes, lattice codebooks) has no kernel in kvscope.
    w.addTensor("blk.0.ffn_up.weight", {256}, gguf::TensorType::IQ2_XXS,
                std::vector<std::uint8_t>(66, 0));
    const std::string path = tmpPath("iq2xxs.gguf");
    QVERIFY(w.write(path).isOk());
    auto r = gguf::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    const auto& t = *r.value().tensor("blk.0.ffn_up.weight");
    QCOMPARE(t.nbytes, std::uint64_t(66));
    QCOMPARE(r.value().readRaw(t).size(), std::size_t(66));
    try {
        r.value().readF32(t);
        QFAIL("IQ2_XXS converted");
    } catch (const KvError& e) {
        QVERIFY2(
            contains(e.what(), path + ": tensor 'blk.0.ffn_up.weight': cannot convert IQ2_XXS"),
            e.what());
    }
    QVERIFY_THROWS_EXCEPTION(
        KvError, w.addTensor("bad", {32}, gguf::TensorType::Q8_0, std::vector<std::uint8_t>(33)));
    QVERIFY_THROWS_EXCEPTION(KvError,
                             w.addTensor("blk.0.ffn_up.weight", {1}, std::vector<float>{1.0f}));
}

void TestFormats::ggufMutations() {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("llama"));
    w.set("llama.block_count", gguf::Value::scalar<std::uint32_t>(2));
    w.set("tokens", gguf::Value::stringArray({"a", "bb", "ccc"}));
    w.set("scores", gguf::Value::array(std::vector<float>{0.5f, 1.5f, 2.5f}));
    w.addTensor("w", {32, 2}, std::vector<float>(64, 1.0f), gguf::TensorType::Q8_0);
    w.addTensor("n", {4}, std::vector<float>{1, 2, 3, 4}, gguf::TensorType::F16);
    const auto base = w.toBytes();
    auto ok = gguf::File::open((writeBytes(tmpPath("mut.gguf"), base), tmpPath("mut.gguf")));
    QVERIFY2(ok.isOk(), ok.message().c_str());
    openMutations<gguf::File>(base, static_cast<std::size_t>(ok.value().dataOffset()), 600,
                              tmpPath("mut.gguf"));
}

// A GGUF tensor retyped to a smaller type (Q8_0 over f32 data) leaves unused bytes behind it:
// refused, naming the tensor and the type, instead of reading garbage of the right shape.
void TestFormats::ggufTypeLie() {
    gguf::Writer w;
    w.addTensor("a", {64}, std::vector<float>(64, 1.0f));
    w.addTensor("b", {64}, std::vector<float>(64, 2.0f));
    for (const char* retyped : {"a", "b"}) {
        auto bytes = w.toBytes();
        const std::string info = std::string(retyped);
        // name length (u64), name, n_dims (u32), dims (i64), type (u32)
        auto at = std::search(bytes.begin(), bytes.end(), info.begin(), info.end());
        for (; at != bytes.end(); at = std::search(at + 1, bytes.end(), info.begin(), info.end())) {
            std::uint64_t len;
            std::memcpy(&len, &*(at - 8), 8);
            if (len == 1)
                break;
        }
        QVERIFY(at != bytes.end());
        const std::uint32_t q8 = static_cast<std::uint32_t>(gguf::TensorType::Q8_0);
        std::memcpy(&*(at + 1 + 4 + 8), &q8, 4);
        expectOpenError<gguf::File>(
            bytes, "lie.gguf",
            {std::string("tensor '") + retyped + "'", "Q8_0", "unused bytes follow"});
    }
    QVERIFY(gguf::File::openMemory(w.toBytes(), "sound.gguf")); // the sound file opens
}

QTEST_GUILESS_MAIN(TestFormats)
#include "tst_formats.moc"
