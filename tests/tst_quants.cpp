// ggml's quantized tensor types, read back as llama.cpp reads them and written as
// llama-quantize writes them. The fixture
// tests/data/quants/ggml-quants.gguf was written by ggml itself (make-ggml-quants.c, built
// against llama.cpp 0.5.0 / ggml 0.25.1 from the node-llama-cpp 3.22.1 source bundle): a
// 3 × 512 float tensor `src` (smooth values, outliers ×25 every 61st element of row 2, a run of
// 64 zeros), each type's quantization `q.<type>` made by ggml_quantize_chunk, and `ref.<type>`,
// ggml's own dequantization of it (to_float). kvscope's dequantization must equal the
// reference bit for bit, and kvscope's quantization of `src` must equal `q.<type>` byte for
// byte. A second fixture, quant-edges.gguf (make-quant-edges.c, the same ggml), holds 8 rows of
// 256 values on the quantizers' unusual paths (zero and flat sub-blocks, one sign only, scales
// below fp16's range, values near its largest, rounding ties, spikes) and their quantization.
#include "formats/gguf.h"
#include "formats/ggufquantize.h"
#include "formats/ggufwriter.h"

#include <QTest>
#include <cmath>
#include <cstring>
#include <map>

using namespace kvscope;

namespace {

const char* kFixture = KVSCOPE_TESTS_DIR "/data/quants/ggml-quants.gguf";
const char* kEdges = KVSCOPE_TESTS_DIR "/data/quants/quant-edges.gguf";

gguf::File fixture(const char* path = kFixture) {
    auto f = gguf::File::open(path);
    if (!f)
        qFatal("%s", f.message().c_str());
    return std::move(f.value());
}

// The types gguf::quantize makes, by ggml's names.
const std::pair<const char*, gguf::TensorType> kQuantizable[] = {
    {"q4_0", gguf::TensorType::Q4_0}, {"q5_0", gguf::TensorType::Q5_0},
    {"q5_1", gguf::TensorType::Q5_1}, {"q8_0", gguf::TensorType::Q8_0},
    {"q4_K", gguf::TensorType::Q4_K}, {"q5_K", gguf::TensorType::Q5_K},
    {"q6_K", gguf::TensorType::Q6_K}};

// The matrices and vectors `convert --to gguf` writes for a llama-shaped model (GGUF dims:
// row length first), in its order.
struct Shape {
    int layers;
    std::int64_t dim, kvDim, ffn, vocab;
    bool tied;
};
std::vector<std::pair<std::string, std::vector<std::int64_t>>> llamaTensors(const Shape& s) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> t;
    t.push_back({"token_embd.weight", {s.dim, s.vocab}});
    for (int l = 0; l < s.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        t.push_back({b + "attn_norm.weight", {s.dim}});
        t.push_back({b + "attn_q.weight", {s.dim, s.dim}});
        t.push_back({b + "attn_k.weight", {s.dim, s.kvDim}});
        t.push_back({b + "attn_v.weight", {s.dim, s.kvDim}});
        t.push_back({b + "attn_output.weight", {s.dim, s.dim}});
        t.push_back({b + "ffn_norm.weight", {s.dim}});
        t.push_back({b + "ffn_gate.weight", {s.dim, s.ffn}});
        t.push_back({b + "ffn_up.weight", {s.dim, s.ffn}});
        t.push_back({b + "ffn_down.weight", {s.ffn, s.dim}});
    }
    t.push_back({"output_norm.weight", {s.dim}});
    if (!s.tied)
        t.push_back({"output.weight", {s.dim, s.vocab}});
    return t;
}

// How many tensors of each type the mix gives the model, as "q4_K 16, q6_K 14, …".
std::string typeCounts(const char* mix, const Shape& s) {
    const gguf::QuantMix m = *gguf::quantMix(mix);
    gguf::QuantModel model;
    model.nLayers = s.layers;
    model.hasOutput = !s.tied;
    std::map<std::string, int> counts;
    for (const auto& [name, dims] : llamaTensors(s))
        ++counts[gguf::typeName(gguf::quantizedType(m, model, name, dims))];
    std::string out;
    for (const auto& [type, n] : counts)
        out += (out.empty() ? "" : ", ") + type + " " + std::to_string(n);
    return out;
}

} // namespace

class TestQuants : public QObject {
    Q_OBJECT
private slots:
    void dequantizesAsGgml_data() {
        QTest::addColumn<QString>("type");
        QTest::addColumn<int>("id");
        // ggml's names and the type ids GGUF stores.
        const std::pair<const char*, int> types[] = {
            {"q4_0", 2},    {"q4_1", 3},    {"q5_0", 6},  {"q5_1", 7},  {"q8_0", 8},
            {"q2_K", 10},   {"q3_K", 11},   {"q4_K", 12}, {"q5_K", 13}, {"q6_K", 14},
            {"iq4_nl", 20}, {"iq4_xs", 23}, {"f16", 1},   {"bf16", 30}};
        for (const auto& [name, id] : types)
            QTest::newRow(name) << QString(name) << id;
    }
    void dequantizesAsGgml() {
        QFETCH(QString, type);
        QFETCH(int, id);
        const gguf::File f = fixture();
        const gguf::TensorInfo* q = f.tensor("q." + type.toStdString());
        const gguf::TensorInfo* ref = f.tensor("ref." + type.toStdString());
        QVERIFY(q && ref);
        QCOMPARE(static_cast<int>(q->type), id);
        QVERIFY(gguf::canReadF32(q->type));
        QCOMPARE(q->dims, (std::vector<std::int64_t>{512, 3}));
        const std::vector<float> ours = f.readF32(*q);
        const std::vector<float> theirs = f.readF32(*ref);
        QCOMPARE(ours.size(), theirs.size());
        int differ = 0;
        for (std::size_t i = 0; i < ours.size(); ++i)
            differ += std::memcmp(&ours[i], &theirs[i], 4) != 0;
        QCOMPARE(differ, 0); // bit for bit
        // And it is a quantization of src: on the smooth row 0 (|x| up to ~9) no element is
        // off by more than 30% of the row's largest value, even at 2 bits per weight.
        const std::vector<float> src = f.readF32(*f.tensor("src"));
        double worst = 0, largest = 0;
        for (std::size_t i = 0; i < 512; ++i) {
            worst = std::max(worst, double(std::abs(ours[i] - src[i])));
            largest = std::max(largest, double(std::abs(src[i])));
        }
        QVERIFY2(worst < 0.3 * largest,
                 qPrintable(type + ": row 0 error " + QString::number(worst)));
    }

    // A block cut short or a type without a kernel is refused with the tensor's name.
    void unsupportedTypesAreNamed() {
        const gguf::File f = fixture();
        gguf::TensorInfo t = *f.tensor("q.q4_K");
        t.type = gguf::TensorType::IQ2_XXS;
        try {
            (void)f.readF32(t);
            QFAIL("IQ2_XXS was read");
        } catch (const KvError& e) {
            const QString m = e.what();
            QVERIFY2(m.contains("q.q4_K") && m.contains("IQ2_XXS") && m.contains("Q6_K"),
                     qPrintable(m));
        }
        t = *f.tensor("q.q6_K");
        t.dims = {500, 3}; // not a multiple of the 256-element block
        QVERIFY_THROWS_EXCEPTION(KvError, (void)f.readF32(t));
    }

    // gguf::quantize is ggml's reference quantizer: on both fixtures, every type's bytes equal
    // the ones ggml wrote (what llama-quantize writes without an importance matrix).
    void quantizesAsGgml_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("type");
        QTest::addColumn<int>("id");
        for (const char* file : {kFixture, kEdges})
            for (const auto& [name, type] : kQuantizable)
                QTest::newRow((QString(file).section('/', -1) + " " + name).toUtf8().constData())
                    << QString(file) << QString(name) << int(type);
    }
    void quantizesAsGgml() {
        QFETCH(QString, file);
        QFETCH(QString, type);
        QFETCH(int, id);
        const gguf::File f = fixture(file.toUtf8().constData());
        const gguf::TensorInfo* q = f.tensor("q." + type.toStdString());
        QVERIFY(q);
        QCOMPARE(int(q->type), id);
        const std::vector<float> src = f.readF32(*f.tensor("src"));
        const std::vector<std::uint8_t> ours = gguf::quantize(q->type, src);
        const std::span<const std::uint8_t> theirs = f.data(*q);
        QCOMPARE(ours.size(), theirs.size());
        std::size_t differ = 0, first = ours.size();
        for (std::size_t i = 0; i < ours.size(); ++i)
            if (ours[i] != theirs[i]) {
                first = std::min(first, i);
                ++differ;
            }
        QVERIFY2(differ == 0, qPrintable(QString("%1 of %2 bytes differ, the first at %3")
                                             .arg(differ)
                                             .arg(ours.size())
                                             .arg(first)));
    }

    // Two blocks checked by hand. x = -16 … 15: Q4_0 maps the extreme -16 to level 0, so
    // d = -16 / -8 = 2 (fp16 0x4000) and x[j] lands on min(15, trunc(x/2 + 8.5)); Q8_0 has
    // d = 16/127 = 0.12598… (fp16 0x3008) and rounds x·127/16 half away from zero, so the tie
    // -8 · 7.9375 = -63.5 becomes -64.
    void quantizesHandCheckedBlocks() {
        std::vector<float> x(32);
        for (int j = 0; j < 32; ++j)
            x[j] = float(j - 16);
        const std::vector<std::uint8_t> q4 = gguf::quantize(gguf::TensorType::Q4_0, x);
        QCOMPARE(q4.size(), std::size_t(18));
        QCOMPARE(q4[0], std::uint8_t(0x00));
        QCOMPARE(q4[1], std::uint8_t(0x40));
        for (int j = 0; j < 16; ++j) { // x[j] in the low nibble, x[j + 16] in the high one
            const int lo = std::min(15, (j + 1) / 2), hi = std::min(15, 8 + (j + 1) / 2);
            QCOMPARE(int(q4[2 + j]), lo | (hi << 4));
        }
        const std::vector<std::uint8_t> q8 = gguf::quantize(gguf::TensorType::Q8_0, x);
        QCOMPARE(q8.size(), std::size_t(34));
        QCOMPARE(q8[0], std::uint8_t(0x08));
        QCOMPARE(q8[1], std::uint8_t(0x30));
        QCOMPARE(int(std::int8_t(q8[2 + 0])), -127); // -16
        QCOMPARE(int(std::int8_t(q8[2 + 8])), -64);  // -8: the tie, away from zero
        QCOMPARE(int(std::int8_t(q8[2 + 16])), 0);
        QCOMPARE(int(std::int8_t(q8[2 + 31])), 119); // 15 · 7.9375 = 119.06
        // All zeros: a zero scale everywhere. Q4_0 and Q5_0 divide the extreme by a negative
        // number, so their d is -0 (fp16 0x8000, as ggml writes it), and their levels sit at
        // the middle (8: nibbles 0x88; 16: low nibbles 0 and every fifth bit set); the others
        // are zero bytes throughout.
        const std::vector<float> zeros(256, 0.0f);
        for (const auto& [name, type] : kQuantizable) {
            const std::vector<std::uint8_t> z = gguf::quantize(type, zeros);
            for (std::size_t i = 0; i < z.size(); ++i) {
                const bool q4 = type == gguf::TensorType::Q4_0, q5 = type == gguf::TensorType::Q5_0;
                const std::size_t at = i % (q4 ? 18 : 22);
                const int want = (q4 || q5) && at == 1     ? 0x80
                                 : q4 && at >= 2           ? 0x88
                                 : q5 && at >= 2 && at < 6 ? 0xFF
                                                           : 0;
                QVERIFY2(
                    int(z[i]) == want,
                    qPrintable(
                        QString("%1 byte %2: %3, want %4").arg(name).arg(i).arg(z[i]).arg(want)));
            }
        }
    }

    // Quantize, dequantize: every value comes back within the type's resolution. Smooth values
    // and spikes, 8 × 256 of them; the bound is a fraction of the largest |x| of each block of
    // 256 (steps of max/8 for Q4_0 and of range/15 … for the K types, half a step each, plus
    // the fp16 rounding of the scales). Prints the worst error per type.
    void roundTripsWithinResolution() {
        std::vector<float> x(8 * 256);
        for (std::size_t i = 0; i < x.size(); ++i)
            x[i] = std::sin(0.05f * float(i)) * (1.0f + float(i % 37) / 10.0f) *
                   (i % 101 == 0 ? 8.0f : 1.0f);
        const std::map<gguf::TensorType, double> bound = {
            {gguf::TensorType::Q4_0, 0.07},  {gguf::TensorType::Q5_0, 0.035},
            {gguf::TensorType::Q5_1, 0.035}, {gguf::TensorType::Q8_0, 0.005},
            {gguf::TensorType::Q4_K, 0.10},  {gguf::TensorType::Q5_K, 0.05},
            {gguf::TensorType::Q6_K, 0.02}};
        for (const auto& [name, type] : kQuantizable) {
            const std::vector<std::uint8_t> q = gguf::quantize(type, x);
            std::vector<float> y(x.size());
            gguf::dequantize(type, q.data(), y.size(), y.data());
            double worst = 0; // relative to the 256-block's max |x|
            for (std::size_t b = 0; b < x.size(); b += 256) {
                double amax = 0;
                for (std::size_t i = b; i < b + 256; ++i)
                    amax = std::max(amax, double(std::abs(x[i])));
                for (std::size_t i = b; i < b + 256; ++i)
                    worst = std::max(worst, std::abs(double(y[i]) - x[i]) / amax);
            }
            qInfo("%s: worst |error| %.4f of the block's max |x| (bound %.3f)", name, worst,
                  bound.at(type));
            QVERIFY2(worst < bound.at(type), name);
            QVERIFY2(worst > 0, name); // really quantized
        }
    }

    void quantizeRefusesWhatItCannotMake() {
        const std::vector<float> x(255, 1.0f);
        try {
            (void)gguf::quantize(gguf::TensorType::Q4_K, x);
            QFAIL("255 values made Q4_K");
        } catch (const KvError& e) {
            QVERIFY2(QString(e.what()).contains("256"), e.what());
        }
        QVERIFY(!gguf::canQuantize(gguf::TensorType::IQ4_NL));
        QVERIFY_THROWS_EXCEPTION(
            KvError, (void)gguf::quantize(gguf::TensorType::IQ4_NL, std::vector<float>(32)));
        // The writer takes the quantized types and reads them back as ggml dequantizes them.
        std::vector<float> v(2 * 256);
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = std::cos(0.3f * float(i));
        gguf::Writer w;
        w.addTensor("k", {256, 2}, v, gguf::TensorType::Q4_K);
        w.addFloatTensor(
            "six", {256, 2}, [v] { return v; }, gguf::TensorType::Q6_K);
        QVERIFY_THROWS_EXCEPTION(
            KvError, w.addTensor("short", {128, 4}, v, gguf::TensorType::Q5_K)); // rows of 128
        const auto f = gguf::File::openMemory(w.toBytes());
        QVERIFY2(f, f.message().c_str());
        for (const auto& [name, type] :
             {std::pair{"k", gguf::TensorType::Q4_K}, std::pair{"six", gguf::TensorType::Q6_K}}) {
            const gguf::TensorInfo* t = f.value().tensor(name);
            QVERIFY(t && t->type == type);
            const std::vector<std::uint8_t> want = gguf::quantize(type, v);
            const auto got = f.value().data(*t);
            QVERIFY(std::equal(got.begin(), got.end(), want.begin(), want.end()));
        }
    }

    // llama-quantize's type per tensor. The counts are what llama-quantize (llama.cpp 0.5.0)
    // wrote from kvscope's f32 GGUF of each shape (convert --to gguf, random weights): SmolLM2
    // 135M (30 layers, dim 576, not whole 256-blocks, so the K types fall back) and Llama 3.2
    // 1B (16 layers, dim 2048; its file also holds the vector rope_freqs.weight, one more F32);
    // both tie the output to the embedding.
    void picksTypesAsLlamaQuantize_data() {
        QTest::addColumn<QString>("mix");
        QTest::addColumn<bool>("smol");
        QTest::addColumn<QString>("counts");
        auto row = [](const char* mix, bool smol, const char* counts) {
            QTest::newRow((std::string(smol ? "smollm2 " : "llama1b ") + mix).c_str())
                << QString(mix) << smol << QString(counts);
        };
        row("q4_k_m", true, "F32 61, Q4_K 16, Q5_0 166, Q6_K 14, Q8_0 15");
        row("q5_k_m", true, "F32 61, Q5_1 166, Q5_K 16, Q6_K 14, Q8_0 15");
        row("q4_0", true, "F32 61, Q4_0 210, Q8_0 1");
        row("q8_0", true, "F32 61, Q8_0 211");
        row("q4_k", true, "F32 61, Q4_K 30, Q5_0 181");
        row("q5_k", true, "F32 61, Q5_1 181, Q5_K 30");
        row("q6_k", true, "F32 61, Q6_K 30, Q8_0 181");
        row("q4_k_m", false, "F32 33, Q4_K 96, Q6_K 17");
        row("q5_k_m", false, "F32 33, Q5_K 96, Q6_K 17");
        row("q4_0", false, "F32 33, Q4_0 112, Q6_K 1");
        row("q8_0", false, "F32 33, Q8_0 113");
        row("q4_k", false, "F32 33, Q4_K 113");
        row("q5_k", false, "F32 33, Q5_K 113");
        row("q6_k", false, "F32 33, Q6_K 113");
    }
    void picksTypesAsLlamaQuantize() {
        QFETCH(QString, mix);
        QFETCH(bool, smol);
        QFETCH(QString, counts);
        const Shape s = smol ? Shape{30, 576, 192, 1536, 49152, true}
                             : Shape{16, 2048, 512, 8192, 128256, true};
        QCOMPARE(QString::fromStdString(typeCounts(mix.toUtf8().constData(), s)), counts);
    }

    // The rules one by one: which layers get more bits, the output, llama.cpp's 70B attn_v,
    // the fused qkv, rows of odd lengths, and what is never quantized.
    void typeRulesOneByOne() {
        const gguf::QuantMix km = *gguf::quantMix("q4_k_m");
        gguf::QuantModel m;
        m.nLayers = 32;
        m.hasOutput = true;
        const std::vector<std::int64_t> square{4096, 4096};
        auto type = [&](const gguf::QuantMix& mix, const std::string& name,
                        std::vector<std::int64_t> dims) {
            return gguf::quantizedType(mix, m, name, dims);
        };
        // 32 layers: the first and last four, then every third from layer 6 (6, 9, …, 27).
        std::string more;
        for (int l = 0; l < 32; ++l)
            if (type(km, "blk." + std::to_string(l) + ".attn_v.weight", square) ==
                gguf::TensorType::Q6_K)
                more += std::to_string(l) + " ";
        QCOMPARE(more, std::string("0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31 "));
        QCOMPARE(type(km, "blk.6.ffn_down.weight", square), gguf::TensorType::Q6_K);
        QCOMPARE(type(km, "blk.7.ffn_down.weight", square), gguf::TensorType::Q4_K);
        QCOMPARE(type(km, "blk.7.attn_q.weight", square), gguf::TensorType::Q4_K);
        QCOMPARE(type(km, "output.weight", square), gguf::TensorType::Q6_K);
        QCOMPARE(type(km, "token_embd.weight", square), gguf::TensorType::Q4_K); // untied
        QCOMPARE(type(km, "blk.3.attn_qkv.weight", square), gguf::TensorType::Q6_K);
        QCOMPARE(type(km, "blk.4.attn_qkv.weight", square), gguf::TensorType::Q4_K);
        QCOMPARE(type(*gguf::quantMix("q4_k"), "blk.3.attn_v.weight", square),
                 gguf::TensorType::Q4_K); // --pure
        QCOMPARE(type(*gguf::quantMix("q8_0"), "output.weight", square), gguf::TensorType::Q8_0);
        QCOMPARE(type(*gguf::quantMix("q4_0"), "output.weight", square), gguf::TensorType::Q6_K);
        m.hasOutput = false; // the embedding is the output
        QCOMPARE(type(km, "token_embd.weight", square), gguf::TensorType::Q6_K);
        QCOMPARE(type(km, "token_embd.weight", {576, 1000}), gguf::TensorType::Q8_0);
        m.llama70B = true;
        m.nLayers = 80;
        QCOMPARE(type(km, "blk.11.attn_v.weight", square), gguf::TensorType::Q5_K);
        QCOMPARE(type(km, "blk.12.attn_v.weight", square), gguf::TensorType::Q6_K);
        // Rows that are not whole blocks: the 32-element cousin, then F16.
        QCOMPARE(type(km, "blk.11.attn_q.weight", {96, 96}), gguf::TensorType::Q5_0);
        QCOMPARE(type(*gguf::quantMix("q5_k"), "blk.1.attn_q.weight", {96, 96}),
                 gguf::TensorType::Q5_1);
        QCOMPARE(type(*gguf::quantMix("q6_k"), "blk.1.attn_q.weight", {96, 96}),
                 gguf::TensorType::Q8_0);
        QCOMPARE(type(km, "blk.11.attn_q.weight", {40, 96}), gguf::TensorType::F16);
        QCOMPARE(type(*gguf::quantMix("q8_0"), "blk.1.attn_q.weight", {40, 96}),
                 gguf::TensorType::F16);
        // Never quantized: vectors (also as [n, 1]), norms, names not ending in "weight".
        QCOMPARE(type(km, "blk.0.attn_norm.weight", {4096}), gguf::TensorType::F32);
        QCOMPARE(type(km, "blk.0.attn_q_norm.weight", {128, 1}), gguf::TensorType::F32);
        QCOMPARE(type(km, "blk.0.attn_q.bias", square), gguf::TensorType::F32);
        QCOMPARE(type(km, "rope_freqs.weight", {64}), gguf::TensorType::F32);
        // The names and file types.
        QVERIFY(!gguf::quantMix("q4_1"));
        QCOMPARE(gguf::quantMix("q4_k_m")->fileType, 15u);
        QCOMPARE(gguf::quantMix("q5_k_m")->fileType, 17u);
        QCOMPARE(gguf::quantMix("q6_k")->fileType, 18u);
        QCOMPARE(gguf::quantMix("q4_0")->fileType, 2u);
        QCOMPARE(gguf::quantMix("q8_0")->fileType, 7u);
    }
};

QTEST_GUILESS_MAIN(TestQuants)
#include "tst_quants.moc"
