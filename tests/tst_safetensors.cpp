// Tests for core/formats' safetensors reader and writer (single files and sharded folders) and
// for the JSON errors in our words (formats/jsonerror.h) that its header parser reports.
#include "formats/jsonerror.h"
#include "formats/safetensors.h"
#include "formats/safetensorswriter.h"
#include "formatstest.h"

#include <nlohmann/json.hpp>

using namespace kvscope;
using namespace kvscope::formatstest;

class TestSafetensors : public FormatsTest {
    Q_OBJECT

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    // ---- safetensors ---------------------------------------------------------------------
    void stRoundTrip();
    void stWriterLayout();
    void stSharded();
    void stMalformed_data();
    void stMalformed();
    void stMutations();

    // ---- jsonerror.h ----------------------------------------------------------------------
    void jsonErrorsInOurWords_data();
    void jsonErrorsInOurWords();
};

// ---- safetensors -----------------------------------------------------------------------------

namespace {
template <typename T> std::vector<std::uint8_t> asBytes(const std::vector<T>& v) {
    std::vector<std::uint8_t> out(v.size() * sizeof(T));
    if (!v.empty())
        std::memcpy(out.data(), v.data(), out.size());
    return out;
}

// [u64 header length][header][dataBytes zero bytes]
Bytes stFile(std::string_view header, std::size_t dataBytes) {
    Bytes b;
    b.u64(header.size()).raw(header).zeros(dataBytes);
    return b;
}
} // namespace

void TestSafetensors::stRoundTrip() {
    using safetensors::DType;
    std::vector<float> f32(6), halfs = allFiniteHalfValues(), bf(300);
    for (std::size_t i = 0; i < f32.size(); ++i)
        f32[i] = 0.1f * static_cast<float>(i) - 0.25f;
    for (std::size_t i = 0; i < bf.size(); ++i)
        bf[i] = bf16ToFloat(floatToBf16(std::sin(static_cast<float>(i)) * 1e3f));
    const std::vector<double> f64 = {0.5, -1e-300, 1e300};
    const std::vector<std::int64_t> i64 = {INT64_MIN, 0, INT64_MAX, 7};
    const std::vector<std::int32_t> i32 = {-1, 2, -3};
    const std::vector<std::int8_t> i8 = {-128, 127};
    const std::vector<std::uint8_t> u8 = {0, 255, 3}, boolean = {1, 0, 1, 1};

    safetensors::Writer w;
    w.setMetadata("format", "pt");
    w.setMetadata("kvscope.manifest", "{\"json\": \"inside\"}");
    w.addTensor("model.f32", {2, 3}, f32);
    w.addTensor("model.f16", {static_cast<std::int64_t>(halfs.size())}, halfs, DType::F16);
    w.addTensor("model.bf16", {10, 30}, bf, DType::BF16);
    w.addTensor("f64", DType::F64, {3}, asBytes(f64));
    w.addTensor("i64", DType::I64, {2, 2}, asBytes(i64));
    w.addTensor("i32", DType::I32, {3}, asBytes(i32));
    w.addTensor("i8", DType::I8, {2}, asBytes(i8));
    w.addTensor("u8", DType::U8, {3}, u8);
    w.addTensor("mask", DType::Bool, {4}, boolean);
    w.addTensor("scalar", {}, std::vector<float>{42.0f});
    w.addTensor("empty", {0, 5}, std::vector<float>{});
    const std::string path = tmpPath("rt.safetensors");
    QVERIFY(w.write(path).isOk());

    auto r = safetensors::File::open(path);
    QVERIFY2(r.isOk(), r.message().c_str());
    const auto& f = r.value();
    QCOMPARE(f.tensors().size(), std::size_t(11));
    QCOMPARE(f.metadata().size(), std::size_t(2));
    QCOMPARE(f.metadata().at("kvscope.manifest"), std::string("{\"json\": \"inside\"}"));
    QCOMPARE(f.dataOffset() % 8, std::uint64_t(0));
    QCOMPARE(f.tensor("model.f32")->shape, (std::vector<std::int64_t>{2, 3}));
    QCOMPARE(f.readF32("model.f32"), f32);
    QVERIFY(f.readF32("model.f16") == halfs); // every finite fp16 value, exact
    QVERIFY(f.readF32("model.bf16") == bf);
    QCOMPARE(f.readF32("f64"),
             (std::vector<float>{0.5f, -0.0f, std::numeric_limits<float>::infinity()}));
    QCOMPARE(f.readRaw("f64"), asBytes(f64));
    QCOMPARE(f.readRaw("i64"), asBytes(i64));
    QCOMPARE(f.readRaw("i32"), asBytes(i32));
    QCOMPARE(f.readRaw("i8"), asBytes(i8));
    QCOMPARE(f.readRaw("u8"), u8);
    QCOMPARE(f.readRaw("mask"), boolean);
    QCOMPARE(f.tensor("scalar")->shape.size(), std::size_t(0));
    QCOMPARE(f.tensor("scalar")->elementCount(), std::int64_t(1));
    QCOMPARE(f.readF32("scalar"), (std::vector<float>{42.0f}));
    QCOMPARE(f.readF32("empty").size(), std::size_t(0));
    QVERIFY_THROWS_EXCEPTION(KvError, f.readF32("i64"));
    try {
        f.readF32("nope");
        QFAIL("read a missing tensor");
    } catch (const KvError& e) {
        QVERIFY2(contains(e.what(), path + ": no tensor named 'nope'"), e.what());
    }
    QVERIFY_THROWS_EXCEPTION(KvError, w.addTensor("u8", DType::U8, {1}, {1}));    // duplicate
    QVERIFY_THROWS_EXCEPTION(KvError, w.addTensor("x", DType::F32, {3}, {1, 2})); // wrong size
}

void TestSafetensors::stWriterLayout() {
    using safetensors::DType;
    safetensors::Writer w;
    w.setMetadata("format", "pt");
    w.addTensor("b", {2}, std::vector<float>{1, 2});
    w.addTensor("a", {1}, std::vector<float>{3}, DType::F16);
    w.addTensor("c", DType::F64, {1}, asBytes(std::vector<double>{4}));
    w.addTensor("a32", {1}, std::vector<float>{5});
    const auto bytes = w.toBytes();
    std::uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    QCOMPARE(n % 8, std::uint64_t(0));
    const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
    // Byte-for-byte what the reference serializer produces: metadata first, then dtype
    // descending (F64, F32, F16), then name; compact JSON; space padding to 8 bytes.
    std::string expected = R"({"__metadata__":{"format":"pt"},)"
                           R"("c":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                           R"("a32":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
                           R"("a":{"dtype":"F16","shape":[1],"data_offsets":[20,22]}})";
    expected.resize((expected.size() + 7) / 8 * 8, ' ');
    QCOMPARE(header, expected);
    QCOMPARE(bytes.size(), std::size_t(8 + n + 22));
}

void TestSafetensors::stSharded() {
    safetensors::Writer a, b;
    a.addTensor("model.embed.weight", {2, 2}, std::vector<float>{1, 2, 3, 4});
    a.addTensor("model.layers.0.w", {1}, std::vector<float>{5});
    b.addTensor("lm_head.weight", {2}, std::vector<float>{6, 7}, safetensors::DType::BF16);
    QVERIFY(QDir(m_tmp.path()).mkpath("sharded"));
    QVERIFY(a.write(tmpPath("sharded/model-00001-of-00002.safetensors")).isOk());
    QVERIFY(b.write(tmpPath("sharded/model-00002-of-00002.safetensors")).isOk());
    auto writeIndex = [&](const std::string& name, const std::string& text) {
        const std::string p = tmpPath("sharded/" + name);
        writeBytes(p, std::vector<std::uint8_t>(text.begin(), text.end()));
        return p;
    };
    const std::string good = writeIndex("model.safetensors.index.json", R"({
      "metadata": {"total_size": 24},
      "weight_map": {
        "model.embed.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.w": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}})");

    auto idx = safetensors::openIndex(good);
    QVERIFY2(idx.isOk(), idx.message().c_str());
    QCOMPARE(idx.value().weightMap.size(), std::size_t(3));
    QCOMPARE(idx.value().shards().size(), std::size_t(2));
    QCOMPARE(idx.value().metadata.at("total_size"), std::string("24"));
    QCOMPARE(idx.value().weightMap.at("lm_head.weight"),
             tmpPath("sharded/model-00002-of-00002.safetensors"));

    auto c = safetensors::Checkpoint::open(good);
    QVERIFY2(c.isOk(), c.message().c_str());
    QCOMPARE(c.value().files().size(), std::size_t(2));
    QCOMPARE(
        c.value().tensorNames(),
        (std::vector<std::string>{"lm_head.weight", "model.embed.weight", "model.layers.0.w"}));
    QCOMPARE(c.value().readF32("lm_head.weight"), (std::vector<float>{6, 7}));
    QCOMPARE(c.value().readF32("model.embed.weight"), (std::vector<float>{1, 2, 3, 4}));
    QCOMPARE(c.value().tensor("model.layers.0.w")->dtype, safetensors::DType::F32);
    QVERIFY(!c.value().tensor("absent"));
    QVERIFY_THROWS_EXCEPTION(KvError, c.value().readF32("absent"));

    auto single =
        safetensors::Checkpoint::open(tmpPath("sharded/model-00002-of-00002.safetensors"));
    QVERIFY2(single.isOk(), single.message().c_str());
    QCOMPARE(single.value().tensorNames(), (std::vector<std::string>{"lm_head.weight"}));

    const std::string missing = writeIndex(
        "missing.index.json", R"({"weight_map": {"ghost": "model-00001-of-00002.safetensors"}})");
    auto m = safetensors::Checkpoint::open(missing);
    QVERIFY(!m.isOk());
    QVERIFY2(contains(m.message(), "tensor 'ghost' is mapped to"), m.message().c_str());
    const std::string escape =
        writeIndex("escape.index.json", R"({"weight_map": {"x": "../x.safetensors"}})");
    auto e = safetensors::openIndex(escape);
    QVERIFY(!e.isOk());
    QVERIFY2(contains(e.message(), "not a file name inside the index's folder"),
             e.message().c_str());
    const std::string noShard =
        writeIndex("noshard.index.json", R"({"weight_map": {"x": "nope.safetensors"}})");
    auto ns = safetensors::Checkpoint::open(noShard);
    QVERIFY(!ns.isOk());
    QVERIFY2(contains(ns.message(), "nope.safetensors: cannot open file"), ns.message().c_str());
    auto bad = safetensors::openIndex(writeIndex("bad.index.json", "{\"weight_map\": 3}"));
    QVERIFY(!bad.isOk());
    QVERIFY2(contains(bad.message(), "weight_map"), bad.message().c_str());
}

void TestSafetensors::stMalformed_data() {
    malformedFileColumns();
    const auto add = &addMalformedFile;
    const std::string ok = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    add("empty file", Bytes{}, {"too small for the 8-byte header length"});
    add("header length > file", Bytes{}.u64(100).raw("{}"),
        {"header length 100 exceeds the file size (10 bytes)"});
    add("header length 2^62", Bytes{}.u64(1ull << 62).raw("{}"),
        {"header length 4611686018427387904 exceeds the file size"});
    add("bad JSON", stFile("{\"t\": {", 0), {"header is not valid JSON"});
    add("header is an array", stFile("[1, 2]", 0), {"header is not a JSON object"});
    add("unknown dtype", stFile(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}})", 1),
        {"tensor 't': unknown dtype 'Q4'"});
    add("offsets past data", stFile("{" + ok + "}", 4),
        {"tensor 't': data_offsets [0,8] are past the end of the data section (4 bytes)"});
    add("shape x dtype != range",
        stFile(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
        {"tensor 't': data_offsets [0,8] hold 8 bytes but shape [3] × F32 needs 12"});
    add("begin > end", stFile(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", 8),
        {"tensor 't': data_offsets [8,0] are not a valid [begin, end]"});
    add("negative offset", stFile(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 8),
        {"tensor 't': data_offsets [-1,0] are not a valid"});
    add("huge offsets",
        stFile(
            R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})",
            8),
        {"tensor 't'", "past the end of the data section"});
    add("overlap",
        stFile("{" + ok + R"(,"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
        {"tensor 'u': data_offsets overlap tensor 't'"});
    add("negative dim", stFile(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
        {"tensor 't': shape[0] = -2 is not a non-negative integer"});
    add("bytes overflow",
        stFile(R"({"t":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,8]}})", 8),
        {"tensor 't': shape [2147483648,2147483648] × F32 overflows 64 bits"});
    add("element count overflows",
        stFile(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})",
               8),
        {"tensor 't': shape [4294967296,4294967296,4] has more than 2^63 elements"});
    add("missing dtype", stFile(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8),
        {"tensor 't': dtype is missing"});
    add("offsets arity", stFile(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
        {"tensor 't': data_offsets is missing or not [begin, end]"});
    add("metadata not strings", stFile(R"({"__metadata__":{"n":3}})", 0),
        {"__metadata__ 'n' is not a string"});
    // The tensors must tile the data section: a header length one byte short still parses (the
    // padding space is cut off) and would shift every tensor by one byte.
    const std::string padded = "{" + ok + "} ";
    add("header length one short", Bytes{}.u64(padded.size() - 1).raw(padded).zeros(8),
        {"the tensors cover 8 bytes but the data section after the 54-byte header has 9",
         "the header length or the data_offsets are wrong"});
    add("gap between tensors",
        stFile("{" + ok + R"(,"u":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
        {"tensor 'u': data_offsets begin at 12 but the tensors before it end at 8"});
    add("trailing bytes", stFile("{" + ok + "}", 12), {"the tensors cover 8 bytes", "has 12"});
}

void TestSafetensors::stMalformed() {
    expectRowRefused<safetensors::File>("bad.safetensors");
}

void TestSafetensors::stMutations() {
    safetensors::Writer w;
    w.setMetadata("format", "pt");
    w.addTensor("a", {2, 2}, std::vector<float>{1, 2, 3, 4});
    w.addTensor("b", {3}, std::vector<float>{1, 2, 3}, safetensors::DType::BF16);
    const auto base = w.toBytes();
    std::uint64_t n;
    std::memcpy(&n, base.data(), 8);
    openMutations<safetensors::File>(base, 8 + n, 600, tmpPath("mut.safetensors"));
}

// ---- jsonerror.h -----------------------------------------------------------------------------

void TestSafetensors::jsonErrorsInOurWords_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QStringList>("expected");
    QTest::newRow("invalid literal")
        << QByteArray("{\"a\": 1,\n \"b\": x}")
        << QStringList{"f.json: not valid JSON: line 2, column ", ": invalid literal at '", "x'"};
    QTest::newRow("cut") << QByteArray("{\"a\": [1, 2")
                         << QStringList{"f.json: not valid JSON: line 1, column 12: the text ends "
                                        "before the JSON value does (expected ']')"};
    QTest::newRow("empty") << QByteArray()
                           << QStringList{"f.json: not valid JSON: line 1, column 1: the text "
                                          "ends before the JSON value does (expected a JSON "
                                          "value)"};
    QTest::newRow("NaN") << QByteArray("{\"a\":\n  NaN}")
                         << QStringList{"f.json: not valid JSON: line 2, column ",
                                        "NaN and Infinity are not JSON numbers (found 'NaN')"};
    QTest::newRow("-Infinity") << QByteArray("[1, -Infinity]")
                               << QStringList{
                                      "NaN and Infinity are not JSON numbers (found '-Infinity')"};
    QTest::newRow("overflow") << QByteArray("{\"a\": [1,\n 1e99999]}")
                              << QStringList{"f.json: not valid JSON: line 2, column 2: the "
                                             "number 1e99999 is too large"};
    // The lexer's message says "expected" itself: the parser's expectation stays apart.
    QTest::newRow("minus") << QByteArray("[-x]")
                           << QStringList{"f.json: not valid JSON: line 1, column ",
                                          "invalid number; expected digit after '-' at '-x'"};
    // Bytes that are not UTF-8 are escaped; the token is cut to its last 32 bytes.
    QTest::newRow("bad UTF-8") << QByteArray("[\"\xff\"]")
                               << QStringList{"ill-formed UTF-8 byte at '\"\\xFF'"};
    QTest::newRow("long token") << (QByteArray("[\"") + QByteArray(100000, 'a'))
                                << QStringList{"invalid string: missing closing quote at '..." +
                                               QString(32, 'a') + "'"};
    QTest::newRow("deep") << QByteArray(1000, '[')
                          << QStringList{"f.json: JSON nested deeper than 128 levels"};
}

void TestSafetensors::jsonErrorsInOurWords() {
    QFETCH(QByteArray, text);
    QFETCH(QStringList, expected);
    try {
        (void)parseJsonText(std::string_view(text.constData(), size_t(text.size())), "f.json");
        QFAIL("parsed");
    } catch (const KvError& e) {
        const std::string m = e.what();
        for (const QString& part : expected)
            QVERIFY2(m.find(part.toStdString()) != std::string::npos, m.c_str());
        QVERIFY2(m.find("json.exception") == std::string::npos, m.c_str());
        QVERIFY2(m.size() < 300, m.c_str());
    }
    // Type errors from reading a parsed value, also in our words.
    try {
        (void)nlohmann::json::parse("[1]").get<std::string>();
        QFAIL("converted");
    } catch (const std::exception& e) {
        QCOMPARE(describeJsonError(e), std::string("expected a string, found an array"));
    }
}

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
