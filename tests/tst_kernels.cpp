// The engine's own kernels and what they make possible: 16-bit checkpoints computed from their
// 16-bit weights (no f32 copy) giving the f32 path's logits up to summation order, the decode
// kernels on shapes whose rows do not fill a vector register, and llama2.c export (the
// checkpoint run.c is benchmarked on).
#include "engine/convert.h"
#include "engine/forwardcommon.h"
#include "engine/matvec.h"
#include "engine/qdot.h"
#include "formats/gguf.h"
#include "engine/tensorconv.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "logitstest.h"
#include "testdata.h"
#include "util/fileio.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QTest>
#include <map>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>

using namespace kvscope;
using namespace logitstest;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";

std::shared_ptr<const Model> load(const std::string& path, const std::string& dtype = "") {
    LoadOptions o;
    o.dtype = dtype;
    auto r = Model::load(path, o);
    if (!r)
        qFatal("%s", r.message().c_str());
    return r.value();
}

int64_t matrixBytes(const Model& m, int bytesPerElement) {
    int64_t n = 0;
    for (const auto& w : m.weights()) {
        if (w.shape.size() != 2)
            continue;
        int64_t e = bytesPerElement;
        for (int64_t d : w.shape)
            e *= d;
        n += e;
    }
    return n;
}

// A llama with rows of 40 (not a multiple of 8, 16 or 32 elements: every kernel's tail runs),
// GQA 4/2, head_dim 10, FFN 72, untied.
ModelConfig oddShape() {
    ModelConfig c;
    c.architecture = "llama";
    c.hfArchitecture = "LlamaForCausalLM";
    c.dim = 40;
    c.hiddenDim = 72;
    c.nLayers = 2;
    c.nHeads = 4;
    c.nKvHeads = 2;
    c.headDim = 10;
    c.vocabSize = 50;
    c.maxContext = 64;
    c.normEps = 1e-5;
    c.ropeTheta = 10000.0;
    c.bosId = 1;
    c.eosId = 2;
    return c;
}

} // namespace

class TestKernels : public QObject {
    Q_OBJECT
private slots:
    // A bf16 or f16 checkpoint loaded on the CPU keeps its matrices in 16 bits, used in place
    // from the file: the model holds about half the bytes of the f32 path (--dtype f32), and
    // its logits are the f32 path's up to summation order, in decode and in prefill.
    void sixteenBitWeightsStaySixteenBit_data() {
        QTest::addColumn<QString>("source");
        QTest::addColumn<QString>("dtype");
        QTest::newRow("stories260K bf16") << "stories"
                                          << "bf16";
        QTest::newRow("stories260K f16") << "stories"
                                         << "f16";
        QTest::newRow("odd rows bf16") << "odd"
                                       << "bf16";
        QTest::newRow("odd rows f16") << "odd"
                                      << "f16";
    }
    void sixteenBitWeightsStaySixteenBit() {
        QFETCH(QString, source);
        QFETCH(QString, dtype);
        std::shared_ptr<const Model> original;
        if (source == "stories") {
            KVSCOPE_REQUIRE_DATA(kStories);
            original = load(testdata::path(kStories));
        } else {
            auto r = Model::createRandom(oddShape(), 7);
            QVERIFY2(r, r.message().c_str());
            original = r.value();
        }
        QTemporaryDir dir;
        ConvertOptions o;
        o.dtype = dtype.toStdString();
        QVERIFY(convertToHuggingFace(*original, dir.path().toStdString(), o));
        const auto kept = load(dir.path().toStdString());
        const auto widened = load(dir.path().toStdString(), "f32");
        QCOMPARE(kept->computeDtype(), std::string("f32")); // activations, cache
        for (const auto& w : kept->weights())
            QCOMPARE(w.dtype, dtype.toStdString()); // as stored
        // The forward pass reads the 16-bit matrices themselves, used in place from the file,
        // and f32 norms; --dtype f32 reads an f32 copy of everything.
        const int64_t matrices16 = matrixBytes(*kept, 2);
        QCOMPARE(kept->mappedWeightBytes(), kept->parameterCount() * 2);
        QCOMPARE(kept->computeWeightBytes(),
                 matrices16 + (kept->parameterCount() - matrices16 / 2) * 4);
        QCOMPARE(widened->computeWeightBytes(), widened->parameterCount() * 4);
        QCOMPARE(kept->weights().size(), widened->weights().size());

        const int64_t V = kept->config().vocabSize;
        std::vector<int32_t> ids;
        for (int i = 0; i < 20; ++i)
            ids.push_back(int32_t((i * 37 + 5) % V));
        const auto f32Decode = logits(widened, ids, true);
        const auto keptDecode = logits(kept, ids, true);
        const auto keptPrefill = logits(kept, ids, false);
        const double scale = std::max(1.0, maxAbs(f32Decode));
        const double dDecode = maxAbsDiff(keptDecode, f32Decode) / scale;
        const double dPrefill = maxAbsDiff(keptPrefill, f32Decode) / scale;
        qInfo("%s %s: 16-bit weights vs f32 copy: decode %.2g, prefill %.2g (relative to max "
              "|logit| %.3g)",
              qPrintable(source), qPrintable(dtype), dDecode, dPrefill, scale);
        QVERIFY(dDecode < 1e-5);
        QVERIFY(dPrefill < 1e-5);
        // Greedy text is the same.
        Sampler g1({0.0f, 0.9f, 0, 0}), g2({0.0f, 0.9f, 0, 0});
        Session s1(kept), s2(widened);
        QVERIFY(s1.feed(std::span(ids).first(3)));
        QVERIFY(s2.feed(std::span(ids).first(3)));
        auto r1 = s1.generate(24, g1), r2 = s2.generate(24, g2);
        QVERIFY(r1 && r2);
        QCOMPARE(r1.value().tokens, r2.value().tokens);
    }

    // A Q4_K_M file as llama.cpp made it (tests/data/quants/README.md). kvscope keeps its
    // q4_K / q6_K matrices as stored and, as llama.cpp does, quantizes the activations to 8-bit
    // blocks for their products: its logits are llama.cpp's on the quantized file itself up to
    // float summation order. With --dtype f32 every matrix is widened instead (llama.cpp's
    // dequantization) and the logits are llama.cpp's on the dequantized twin (f32 arithmetic on
    // the same weights). The two references differ by up to ~0.05: each test could only pass
    // against its own.
    void kQuantModelMatchesLlamaCpp() {
        const std::string dir = KVSCOPE_TESTS_DIR "/data/quants/";
        const std::string file = dir + "small-q4_k_m.gguf";
        const auto kept = load(file);
        const auto widened = load(file, "f32");
        const auto ref = nlohmann::json::parse(readFileText(dir + "small-q4_k_m.logits.json"));
        const auto ids = ref["tokens"].get<std::vector<int32_t>>();
        const int64_t V = kept->config().vocabSize;
        QCOMPARE(V, int64_t(256));
        QCOMPARE(kept->config().hiddenDim, int64_t(256));
        QCOMPARE(kept->config().weightDtype, std::string("q4_k"));
        // Kept: every matrix is the file's own blocks, used in place (the permuted q/k rows are a
        // copy); the whole model takes fewer bytes than the file.
        int64_t quantized = 0;
        for (const auto& w : kept->weights())
            quantized += w.dtype == "q4_k" || w.dtype == "q6_k";
        QCOMPARE(quantized, int64_t(9)); // token_embd, output; q, k, v, o, gate, up, down
        const auto fileBytes = int64_t(std::filesystem::file_size(file));
        QVERIFY2(kept->computeWeightBytes() < fileBytes,
                 qPrintable(QString::number(kept->computeWeightBytes())));
        QVERIFY(widened->computeWeightBytes() > 5 * fileBytes);

        const auto twin = flatRows(ref["f32_on_dequantized"]), direct = flatRows(ref["q4_k_m"]);
        const double refGap = maxAbsDiff(twin, direct);
        const auto keptPrefill = logits(kept, ids, false);
        const auto keptDecode = logits(kept, ids, true);
        const double dPaths = maxAbsDiff(keptPrefill, keptDecode);
        for (bool oneByOne : {false, true}) {
            const auto ours = logits(widened, ids, oneByOne);
            const double dTwin = maxAbsDiff(ours, twin);
            qInfo("--dtype f32 %s: max |kvscope - llama.cpp f32 on the dequantized weights| = "
                  "%.2g (logits up to %.2g)",
                  oneByOne ? "decode" : "prefill", dTwin, maxAbs(twin));
            QVERIFY(dTwin < 2e-5);
        }
        const double dDirect = maxAbsDiff(keptDecode, direct);
        const double dDirectPrefill = maxAbsDiff(keptPrefill, direct);
        qInfo("kept quantized: max |kvscope - llama.cpp Q4_K_M| = %.2g decode, %.2g prefill "
              "(prefill vs decode %.2g); the two llama.cpp references differ by %.2g",
              dDirect, dDirectPrefill, dPaths, refGap);
        QVERIFY(refGap > 0.01);
        QVERIFY(dDirect < 1e-5);
        QVERIFY(dDirectPrefill < 1e-5);
        for (std::size_t p = 0; p < ids.size(); ++p)
            QCOMPARE(argmaxAt(keptDecode, p, V), argmaxAt(direct, p, V));
    }

    // The cache grows by copying, and old and new buffers are resident together: a prompt of
    // several chunks gets its room at once (not 64, 128, ... doublings), and a generate call the
    // room its steps need, at least a quarter more than the cache holds, not twice the cache.
    // The tokens are those of a session that grew by doubling.
    void cacheRoomIsReservedPerRun() {
        ModelConfig c = oddShape();
        c.maxContext = 2048;
        auto made = Model::createRandom(c, 3);
        QVERIFY2(made, made.message().c_str());
        std::vector<int32_t> prompt;
        for (int i = 0; i < 600; ++i) // two chunks of kPrefillChunk (512)
            prompt.push_back(int32_t((i * 7 + 1) % c.vocabSize));
        Session s(made.value());
        QVERIFY(s.feed(prompt));
        // The prompt plus a quarter (64 to 256 slots) of slack.
        QCOMPARE(s.cache().impl().capacity(), int64_t(600 + 150));
        const void* buffer = s.cache().impl().k[0].data_ptr();
        Sampler greedy1({0.0f, 0.9f, 0, 0});
        auto r = s.generate(4, greedy1);
        QVERIFY(r);
        QCOMPARE(s.cache().impl().capacity(), int64_t(750)); // fitted: not copied
        QCOMPARE(s.cache().impl().k[0].data_ptr(), buffer);
        // A run past the room grows it by what it needs plus a quarter.
        Sampler greedy3({0.0f, 0.9f, 0, 0});
        QVERIFY(s.generate(200, greedy3));
        QCOMPARE(s.cache().impl().capacity(), int64_t(804 + 201));
        // A caller that reserves prompt and run at once gets one buffer for both.
        Session u(made.value());
        u.reserveFor(604);
        const void* once = u.cache().impl().k[0].data_ptr();
        QVERIFY(u.feed(prompt));
        Sampler greedy4({0.0f, 0.9f, 0, 0});
        QVERIFY(u.generate(4, greedy4));
        QCOMPARE(u.cache().impl().k[0].data_ptr(), once);
        QCOMPARE(u.cache().impl().capacity(), int64_t(604 + 151));
        // The same tokens as one token at a time (the forward pass's own doubling).
        Session t(made.value());
        for (int32_t id : prompt)
            QVERIFY(t.feed(std::span(&id, 1)));
        Sampler greedy2({0.0f, 0.9f, 0, 0});
        auto r2 = t.generate(4, greedy2);
        QVERIFY(r2);
        QCOMPARE(r2.value().tokens, r.value().tokens);
    }

    // convert --to gguf --out-dtype q8_0: every matrix whose rows are whole blocks as ggml's
    // reference Q8_0 (rows of 40 elements would be f16, as llama-quantize writes them), loaded
    // back kept quantized; the logits
    // follow the f32 model's within 8-bit rounding, and greedy text agrees.
    void q8_0ExportRunsQuantized() {
        ModelConfig c = oddShape();
        c.dim = 64;
        c.headDim = 16;
        c.hiddenDim = 96;
        auto made = Model::createRandom(c, 11, "cpu", 0.1);
        QVERIFY2(made, made.message().c_str());
        QTemporaryDir dir;
        const std::string out = dir.filePath("q8.gguf").toStdString();
        ConvertOptions o;
        o.dtype = "q8_0";
        QVERIFY(convertToGguf(*made.value(), out, o));
        const auto q8 = load(out);
        int quantized = 0;
        for (const auto& w : q8->weights())
            quantized += w.dtype == "q8_0";
        QCOMPARE(quantized, 2 * 7 + 2); // 7 matrices a layer, token_embd, output
        QVERIFY(q8->computeWeightBytes() < made.value()->computeWeightBytes() / 3);
        std::vector<int32_t> ids;
        for (int i = 0; i < 24; ++i)
            ids.push_back(int32_t((i * 13 + 3) % c.vocabSize));
        const auto want = logits(made.value(), ids, true);
        const auto got = logits(q8, ids, true);
        const double d = maxAbsDiff(got, want);
        int sameTop = 0;
        for (std::size_t p = 0; p < ids.size(); ++p)
            sameTop += argmaxAt(got, p, c.vocabSize) == argmaxAt(want, p, c.vocabSize);
        qInfo("q8_0 export: max |logit - f32 logit| = %.2g (logits up to %.2g), same top token "
              "at %d of %zu positions",
              d, maxAbs(want), sameTop, ids.size());
        QVERIFY(d < 0.05 * maxAbs(want));
        QVERIFY(d > 0); // really quantized
        QVERIFY(sameTop >= 20);
        o.dtype = "q4_1";
        const Status refused =
            convertToGguf(*made.value(), dir.filePath("x.gguf").toStdString(), o);
        QVERIFY(!refused);
        QVERIFY2(refused.message().find("q8_0") != std::string::npos, refused.message().c_str());
    }

    // convert --to gguf --out-dtype q4_k_m / q5_k_m end to end: the file loads back with its
    // matrices kept in the mix's types (Q4_K or Q5_K, Q6_K where llama-quantize's rule puts it:
    // the output, the last layer's attn_v and ffn_down of two), and runs within 4- and 5-bit
    // rounding of the f32 model, Q5_K_M closer than Q4_K_M. (The bytes equal llama-quantize's:
    // tst_quants.)
    void kQuantExportRunsQuantized() {
        ModelConfig c = oddShape();
        c.dim = 256; // K-quant rows are whole 256-element blocks
        c.headDim = 64;
        c.hiddenDim = 512;
        c.vocabSize = 300;
        auto made = Model::createRandom(c, 5, "cpu", 0.05);
        QVERIFY2(made, made.message().c_str());
        std::vector<int32_t> ids;
        for (int i = 0; i < 16; ++i)
            ids.push_back(int32_t((i * 29 + 3) % c.vocabSize));
        const auto want = logits(made.value(), ids, true);
        QTemporaryDir dir;
        double error[2] = {};
        for (int k = 0; k < 2; ++k) {
            const std::string type = k == 0 ? "q4_k" : "q5_k";
            const std::string out =
                dir.filePath(QString::fromStdString(type + "_m.gguf")).toStdString();
            ConvertOptions o;
            o.dtype = type + "_m";
            const Status written = convertToGguf(*made.value(), out, o);
            QVERIFY2(written, written.message().c_str());
            const auto q = load(out);
            QCOMPARE(q->config().weightDtype, type);
            std::map<std::string, int> types;
            for (const auto& w : q->weights())
                if (w.shape.size() == 2)
                    ++types[w.dtype];
            // 2 layers x 7 matrices + token_embd + output: output, blk.1 attn_v and ffn_down
            // in Q6_K, the rest in the mix's type.
            QCOMPARE(types["q6_k"], 3);
            QCOMPARE(types[type], 2 * 7 + 2 - 3);
            const auto got = logits(q, ids, true);
            error[k] = maxAbsDiff(got, want);
            qInfo("%s_m export: max |logit - f32 logit| = %.2g (logits up to %.2g)", type.c_str(),
                  error[k], maxAbs(want));
            QVERIFY(error[k] > 0 && error[k] < 0.35 * maxAbs(want)); // 0.68 of 2.9 for Q4_K_M
        }
        QVERIFY(error[1] < error[0]);
    }

    // Every quantized type's dot kernel on ggml's own blocks (tests/data/quants/ggml-quants.gguf,
    // 3 rows of 512): the vector kernel (where this CPU has one) equals the plain one up to float
    // rounding, and both equal the float dot product of ggml's dequantized row with the
    // activations up to the activations' 8-bit quantization: at most ~0.56 of a step (step =
    // the block's max |x| / 127, f16-rounded for Q8_0 / Q8_1) per element.
    void quantizedDotsMatchReference() {
        auto opened = gguf::File::open(KVSCOPE_TESTS_DIR "/data/quants/ggml-quants.gguf");
        QVERIFY2(opened, opened.message().c_str());
        const gguf::File& f = opened.value();
        const std::vector<float> src = f.readF32(*f.tensor("src"));
        const int64_t n = 512;
        for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K",
                                 "q5_K", "q6_K", "iq4_nl", "iq4_xs"}) {
            const gguf::TensorInfo* t = f.tensor(std::string("q.") + name);
            QVERIFY(t && qdot::hasKernel(t->type));
            const auto bytes = f.data(*t);
            const int64_t rowBytes = int64_t(bytes.size()) / 3;
            const std::vector<float> w = f.readF32(*t);
            const int64_t block =
                qdot::activationType(t->type) == gguf::TensorType::Q8_K ? 256 : 32;
            for (int64_t r = 0; r < 3; ++r) {
                // Row r against src row r + 1 (row 2 holds x25 outliers: coarse steps).
                const float* x = src.data() + ((r + 1) % 3) * n;
                std::vector<std::uint8_t> xq(qdot::activationBytes(t->type, n));
                qdot::quantizeActivations(t->type, x, n, xq.data());
                const std::uint8_t* row = bytes.data() + r * rowBytes;
                float fastOut = 0, plainOut = 0;
                qdot::rowKernel(t->type).run(row, xq.data(), xq.size(), 1, n, &fastOut);
                qdot::genericRowKernel(t->type).run(row, xq.data(), xq.size(), 1, n, &plainOut);
                const double fast = fastOut, plain = plainOut;
                double exact = 0, magnitude = 0, bound = 0;
                for (int64_t b = 0; b < n / block; ++b) {
                    double amax = 0;
                    for (int64_t j = b * block; j < (b + 1) * block; ++j)
                        amax = std::max(amax, double(std::abs(x[j])));
                    for (int64_t j = b * block; j < (b + 1) * block; ++j) {
                        const double wj = w[size_t(r * n + j)];
                        exact += wj * x[j];
                        magnitude += std::abs(wj * x[j]);
                        bound += std::abs(wj) * amax / 127.0 * 0.56;
                    }
                }
                const QString what = QString("%1 row %2: vector %3, plain %4, float %5 (bound %6)")
                                         .arg(name)
                                         .arg(r)
                                         .arg(fast)
                                         .arg(plain)
                                         .arg(exact)
                                         .arg(bound);
                // Q4_1 / Q5_1: the vector kernel takes the min term through Q8_1's s = d * sum(q),
                // stored in f16 as llama.cpp does (relative error 2^-11 a block); the plain one
                // sums the widened weights.
                const bool f16Sums = qdot::activationType(t->type) == gguf::TensorType::Q8_1;
                QVERIFY2(std::abs(fast - plain) <= (f16Sums ? 5e-4 : 1e-5) * magnitude + 1e-6,
                         qPrintable(what));
                QVERIFY2(std::abs(plain - exact) <= bound + 1e-5 * magnitude, qPrintable(what));
            }
        }
        qInfo("quantized dot kernels: %s", qdot::isa());

        // Several tokens in one call (a prefill): each token's result is the bits it gets alone,
        // whichever tokens share the call, for every count up to kMaxTokens and past it, and
        // in the eight-token tile wherever the type has one.
        int tiles = 0;
        constexpr int kVectors = 11;
        for (const char* name :
             {"q8_0", "q4_K", "q5_K", "q6_K", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "iq4_xs"}) {
            const gguf::TensorInfo* t = f.tensor(std::string("q.") + name);
            const auto row = f.data(*t).data();
            const std::size_t stride = qdot::activationBytes(t->type, n);
            std::vector<std::uint8_t> xq(kVectors * stride);
            for (int k = 0; k < kVectors; ++k) {
                std::vector<float> x(src.begin() + (k % 3) * n, src.begin() + (k % 3 + 1) * n);
                for (auto& v : x)
                    v *= 0.5f + 0.25f * float(k);
                qdot::quantizeActivations(t->type, x.data(), n, xq.data() + k * stride);
            }
            const qdot::RowKernel kernel = qdot::rowKernel(t->type);
            float alone[kVectors], together[kVectors];
            for (int k = 0; k < kVectors; ++k)
                kernel.run(row, xq.data() + k * stride, stride, 1, n, alone + k);
            for (int count = 1; count <= kVectors; ++count) {
                kernel.run(row, xq.data(), stride, count, n, together);
                for (int k = 0; k < count; ++k)
                    QVERIFY2(std::memcmp(&alone[k], &together[k], 4) == 0,
                             qPrintable(QString("%1: token %2 of %3").arg(name).arg(k).arg(count)));
            }
            if (kernel.tile) {
                ++tiles;
                constexpr int K = qdot::kTileTokens;
                for (int first = 0; first + K <= kVectors; first += 3) {
                    float eight[K];
                    kernel.tile(row, xq.data() + first * stride, stride, n, eight);
                    for (int k = 0; k < K; ++k)
                        QVERIFY2(std::memcmp(&alone[first + k], &eight[k], 4) == 0,
                                 qPrintable(QString("%1: tile token %2").arg(name).arg(first + k)));
                }
            }
        }
        // Every type with a vector kernel has a tile (all but IQ4_XS, which has the plain one).
        QCOMPARE(tiles, std::string(qdot::isa()) == "generic" ? 0 : 9);

        // An odd count of 32-element blocks (the first 15 of a row): the tiles that take two
        // blocks at a time end on a lone block, and it still gives the one-token bits.
        const int64_t odd = n - 32;
        for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}) {
            const gguf::TensorInfo* t = f.tensor(std::string("q.") + name);
            const auto row = f.data(*t).data();
            const std::size_t stride = qdot::activationBytes(t->type, odd);
            constexpr int K = qdot::kTileTokens;
            std::vector<std::uint8_t> xq(K * stride);
            for (int k = 0; k < K; ++k) {
                std::vector<float> x(src.begin() + (k % 3) * n, src.begin() + (k % 3) * n + odd);
                for (auto& v : x)
                    v *= 0.5f + 0.25f * float(k);
                qdot::quantizeActivations(t->type, x.data(), odd, xq.data() + k * stride);
            }
            const qdot::RowKernel kernel = qdot::rowKernel(t->type);
            if (!kernel.tile)
                continue;
            float eight[K];
            kernel.tile(row, xq.data(), stride, odd, eight);
            for (int k = 0; k < K; ++k) {
                float alone = 0;
                kernel.run(row, xq.data() + k * stride, stride, 1, odd, &alone);
                QVERIFY2(std::memcmp(&alone, &eight[k], 4) == 0,
                         qPrintable(QString("%1, 15 blocks: tile token %2").arg(name).arg(k)));
            }
        }
    }

    // The per-token loops (rmsNorm, RoPE, one query's attention) against the libtorch
    // expressions they replace, which still run where a gradient is recorded or a hook wants
    // the attention probabilities. Shapes off every vector width (D = 10, C = 37), grouped
    // heads, masked slots shared and per KV head, a head that sees nothing (NaN in both).
    void decodeKernelsMatchLibtorch() {
        at::manual_seed(7);
        auto close = [](const at::Tensor& a, const at::Tensor& b) {
            const bool sameNan = at::equal(a.isnan(), b.isnan());
            const double diff =
                (at::nan_to_num(a, 0.0) - at::nan_to_num(b, 0.0)).abs().max().item<double>();
            const double scale = std::max(1.0, b.abs().nan_to_num(0.0).max().item<double>());
            if (!sameNan || diff > 2e-6 * scale)
                qWarning("NaN pattern equal: %d, max |diff| %g", int(sameNan), diff);
            return sameNan && diff <= 2e-6 * scale;
        };
        // rmsNorm: the fast path and the libtorch path (taken when x records a gradient).
        const at::Tensor x = at::randn({5, 37}) * 3.0, w = at::randn({37});
        QVERIFY(canRmsNormRows(x, w));
        const at::Tensor xg = x.clone().requires_grad_(true);
        QVERIFY(!canRmsNormRows(xg, w));
        QVERIFY(close(rmsNorm(x, w, 1e-5), rmsNorm(xg, w, 1e-5).detach()));

        // RoPE on a transposed [H, T, D] view, as the forward pass hands it over.
        const at::Tensor inv = at::pow(10000.0, -at::arange(0, 10, 2, at::kFloat) / 10.0);
        const at::Tensor q = at::randn({3, 4, 10}).transpose(0, 1); // [H=4, T=3, D=10]
        const std::vector<int64_t> positions{0, 17, 4095};
        QVERIFY(canRopeRows(q, inv));
        const at::Tensor qg = q.clone().requires_grad_(true);
        QVERIFY(!canRopeRows(qg, inv));
        QVERIFY(close(applyRope(q, inv, positions), applyRope(qg, inv, positions).detach()));

        // One query over P = 37 slots, 4 query heads on 2 KV heads; a no-op hook forces the
        // libtorch path.
        const int64_t H = 4, KVH = 2, P = 37, D = 10;
        const at::Tensor qh = at::randn({1, H, 1, D});
        const at::Tensor store = at::randn({KVH, P + 5, D}); // a cache with room to spare
        const at::Tensor K = store.narrow(1, 0, P).unsqueeze(0);
        const at::Tensor V = (at::randn({KVH, P + 5, D})).narrow(1, 0, P).unsqueeze(0);
        const float ninf = -std::numeric_limits<float>::infinity();
        at::Tensor shared = at::zeros({1, P});
        for (int64_t j = 0; j < P; j += 3)
            shared[0][j] = ninf;
        at::Tensor perHead = at::zeros({KVH, 1, 1, P});
        perHead[1][0][0].narrow(0, 0, 20).fill_(ninf);
        at::Tensor blind = at::full({KVH, 1, 1, P}, ninf);
        blind[0].fill_(0.0); // KV head 1 (query heads 2, 3) sees no slot
        const std::function<void(at::Tensor&)> hook = [](at::Tensor&) {};
        // Plain 1/sqrt(D) scores, and Gemma 2's scale with soft-capping (a cap small enough
        // to bend these scores).
        for (const ScoreParams params :
             {ScoreParams{1.0 / std::sqrt(double(D)), 0.0}, ScoreParams{0.7, 1.5}})
            for (const at::Tensor& mask : {at::Tensor(), shared, perHead, blind}) {
                QVERIFY(canAttendOne(qh.view({H, D}), K[0], V[0], mask));
                const at::Tensor fast = groupedAttention(qh, K, V, mask, params);
                const at::Tensor slow = groupedAttention(qh, K, V, mask, params, hook);
                QCOMPARE(fast.sizes().vec(), (std::vector<int64_t>{1, 1, H * D}));
                QVERIFY(close(fast, slow));
            }
        const ScoreParams plain{1.0 / std::sqrt(double(D)), 0.0};
        QVERIFY(groupedAttention(qh, K, V, blind, plain).isnan().any().item<bool>());
        // The cap changes the result (the test above would pass if both paths ignored it).
        QVERIFY(!close(groupedAttention(qh, K, V, shared, {0.7, 1.5}),
                       groupedAttention(qh, K, V, shared, {0.7, 0.0})));
    }

    // The matrix-vector kernels read a row by whole 64-byte lines wherever it starts (mapped
    // tensors rarely start on a line): the result must not depend on where the weights lie,
    // bit for bit (--huge-pages copies them to other addresses and promises the same logits),
    // and must be W x. Every byte offset of the element size within a line, rows of a multiple
    // of 64 bytes (all rows alike) and not (each row its own offset), rows shorter than a line.
    void matvecIgnoresAlignment_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<int>("columns");
        for (const auto& [type, name] :
             {std::pair{at::kFloat, "f32"}, {at::kBFloat16, "bf16"}, {at::kHalf, "f16"}})
            for (const int n : {1, 7, 16, 33, 64, 100, 576})
                QTest::addRow("%s %d", name, n) << int(type) << n;
    }
    void matvecIgnoresAlignment() {
        QFETCH(int, dtype);
        QFETCH(int, columns);
        const auto type = static_cast<at::ScalarType>(dtype);
        const int64_t rowsCount = 9, n = columns;
        at::manual_seed(n);
        const at::Tensor values = at::randn({rowsCount, n}).to(type);
        const at::Tensor x = at::randn({n});
        // The exact products in double: the reference the kernels' float sums must be near.
        const at::Tensor want = at::mv(values.to(at::kDouble), x.to(at::kDouble));
        const int64_t bytes = values.numel() * values.element_size();
        std::vector<std::uint8_t> buffer(static_cast<size_t>(bytes + 128));
        const auto base = (reinterpret_cast<std::uintptr_t>(buffer.data()) + 63) & ~uintptr_t{63};
        at::Tensor first;
        for (int64_t offset = 0; offset < 64; offset += values.element_size()) {
            auto* at = reinterpret_cast<std::uint8_t*>(base) + offset;
            std::memcpy(at, values.data_ptr(), static_cast<size_t>(bytes));
            const at::Tensor w = at::from_blob(at, {rowsCount, n}, at::TensorOptions(type));
            QVERIFY(canMatvec(w, x, at::Tensor()));
            const at::Tensor y = matvec(w, x, at::Tensor());
            const double error = (y.to(at::kDouble) - want).abs().max().item<double>() /
                                 std::max(1.0, want.abs().max().item<double>());
            if (error > 1e-5)
                QFAIL(
                    qPrintable(QString("offset %1: max relative error %2").arg(offset).arg(error)));
            if (!first.defined())
                first = y;
            else if (!at::equal(y, first))
                QFAIL(qPrintable(QString("offset %1: not bit-identical to offset 0, max |diff| %2")
                                     .arg(offset)
                                     .arg((y - first).abs().max().item<double>())));
        }
    }

    // Tensors packed on huge pages: aligned, disjoint, writable, and the buffer outlives
    // every tensor but the last.
    void largePageTensors() {
        std::vector<TensorSpec> specs{
            {{1000, 600}, at::kFloat}, {{3}, at::kBFloat16}, {{17, 5}, at::kFloat}};
        std::vector<at::Tensor> t = emptyOnLargePages(specs);
        QCOMPARE(t.size(), specs.size());
        QCOMPARE(reinterpret_cast<std::uintptr_t>(t[0].data_ptr()) % (std::uintptr_t(2) << 20),
                 std::uintptr_t(0)); // 2.4 MB in all: a huge-page buffer
        for (std::size_t i = 0; i < t.size(); ++i) {
            QCOMPARE(t[i].sizes().vec(), specs[i].shape);
            QCOMPARE(t[i].scalar_type(), specs[i].dtype);
            QCOMPARE(reinterpret_cast<std::uintptr_t>(t[i].data_ptr()) % 64, std::uintptr_t(0));
            t[i].fill_(double(i + 1));
        }
        for (std::size_t i = 0; i + 1 < t.size(); ++i)
            QVERIFY(static_cast<const std::uint8_t*>(t[i].data_ptr()) + t[i].nbytes() <=
                    static_cast<const std::uint8_t*>(t[i + 1].data_ptr()));
        at::Tensor last = t[2];
        t.clear();
        QCOMPARE(last.sum().item<double>(), 3.0 * 85);
        // Small totals take an ordinary block.
        QCOMPARE(emptyOnLargePages({{{4}, at::kFloat}})[0].numel(), int64_t(4));
    }

    // --huge-pages: the mapped weights of 64 KB or more (stories260K's 128 KB embedding) are
    // copied out of the file, nothing else changes: the same fingerprint, the same logits.
    void weightsOnHugePages() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto mapped = load(testdata::path(kStories));
        LoadOptions o;
        o.weightsOnHugePages = true;
        auto r = Model::load(testdata::path(kStories), o);
        QVERIFY2(r, r.message().c_str());
        const auto copied = r.value();
        QVERIFY(mapped->mappedWeightBytes() > 0);
        QCOMPARE(copied->mappedWeightBytes(),
                 mapped->mappedWeightBytes() - int64_t(512 * 64 * sizeof(float)));
        QCOMPARE(copied->fingerprint(), mapped->fingerprint());
        const std::vector<int32_t> ids{1, 403, 407, 261, 378};
        QCOMPARE(maxAbsDiff(logits(copied, ids, false), logits(mapped, ids, false)), 0.0);
        QCOMPARE(maxAbsDiff(logits(copied, ids, true), logits(mapped, ids, true)), 0.0);
    }

    // llama2.c export: stories260K written back as a run.c checkpoint is the original file
    // but for the legacy RoPE tables nobody reads, and loads to the same logits; what run.c
    // cannot express is refused by field.
    void llama2cExportRoundTrip() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto original = load(testdata::path(kStories));
        QTemporaryDir dir;
        const std::string out = (dir.path() + "/stories.bin").toStdString();
        QVERIFY(convertToLlama2c(*original, out));
        const auto a = readFileBytes(testdata::path(kStories));
        const auto b = readFileBytes(out);
        QCOMPARE(b.size(), a.size());
        const auto& c = original->config();
        // header + weights up to rms_final_weight, and the tables' size, are byte-equal
        const std::size_t tables = 28 + std::size_t(original->parameterCount()) * 4 -
                                   (c.tiedEmbeddings ? 0 : std::size_t(c.vocabSize * c.dim) * 4);
        QVERIFY(std::equal(a.begin(), a.begin() + long(tables), b.begin()));
        const auto reloaded = load(out);
        std::vector<int32_t> ids{1, 403, 407, 261, 378};
        QCOMPARE(maxAbsDiff(logits(reloaded, ids, false), logits(original, ids, false)), 0.0);
        QVERIFY(!QFile::exists(QString::fromStdString(out) + ".tmp"));
        // Exists: refused without overwrite.
        QVERIFY(!convertToLlama2c(*original, out));

        ModelConfig theta = oddShape();
        theta.ropeTheta = 500000.0;
        auto m = Model::createRandom(theta, 1);
        QVERIFY(m);
        Status s = convertToLlama2c(*m.value(), (dir.path() + "/theta.bin").toStdString());
        QVERIFY(!s);
        QVERIFY2(s.message().find("rope_theta") != std::string::npos, s.message().c_str());
        ConvertOptions half;
        half.dtype = "bf16";
        s = convertToLlama2c(*original, (dir.path() + "/half.bin").toStdString(), half);
        QVERIFY(!s);
        QVERIFY2(s.message().find("f32") != std::string::npos, s.message().c_str());
    }
};

QTEST_GUILESS_MAIN(TestKernels)
#include "tst_kernels.moc"
