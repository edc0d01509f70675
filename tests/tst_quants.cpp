// ggml's quantized tensor types, read back as llama.cpp reads them. The fixture
// tests/data/quants/ggml-quants.gguf was written by ggml itself (make-ggml-quants.c, built
// against llama.cpp 0.5.0 / ggml 0.25.1 from the node-llama-cpp 3.22.1 source bundle): a
// 3 × 512 float tensor `src` (smooth values, outliers ×25 every 61st element of row 2, a run of
// 64 zeros), each type's quantization `q.<type>` made by ggml_quantize_chunk, and `ref.<type>`,
// ggml's own dequantization of it (to_float). kvscope's dequantization must equal the
// reference bit for bit.
#include "formats/gguf.h"

#include <QTest>
#include <cstring>

using namespace kvscope;

namespace {

const char* kFixture = KVSCOPE_TESTS_DIR "/data/quants/ggml-quants.gguf";

gguf::File fixture() {
    auto f = gguf::File::open(kFixture);
    if (!f)
        qFatal("%s", f.message().c_str());
    return std::move(f.value());
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
};

QTEST_GUILESS_MAIN(TestQuants)
#include "tst_quants.moc"
