// The logit lens and direct logit attribution (core/state/probes/lens.h, engine/unembed.h):
// the parts sum to the logit on three architectures' paths (llama2.c RMSNorm, GPT-2 LayerNorm
// with biases, a Gemma-2-like llama with output norms, soft-caps, q/k/v biases and GQA), the
// lens at the last layer is the model's own output, a corrupted cache shows from its layer on
// and a clean one nowhere, and `kvscope-cli lens` prints the same.
#include "engine/randommodel.h"
#include "engine/unembed.h"
#include "state/probes/lens.h"
#include "state/surgery/faults.h"
#include "surgeryfixture.h"
#include "testmodel.h"

#include <QJsonArray>

#include <limits>

namespace {

const QString kDreams = "models/aidreams260K/aidreams260K.bin";
const QString kDreamsTok = "models/aidreams260K/tok512.bin";
const char* kText = "Once upon a time, there was a little girl named Lily. She loved to play";

// Tokens for models without a tokenizer: a fixed, varied sequence.
std::vector<int32_t> idsFor(const Model& m, int n) {
    if (m.tokenizer())
        return m.tokenizer()->encode(kText);
    return someIds(n, 3, static_cast<int>(m.config().vocabSize));
}

// A Gemma-2-like llama, small: post-attention and post-MLP norms (with varied scales), attention
// and final soft-caps, an embedding scale, q/k/v biases, grouped-query attention and one sliding
// layer, random weights.
std::shared_ptr<const Model> gemmaLike(int64_t context = 64) {
    ModelConfig c = findRandomModelShape("gemma-2-2b")->config;
    c.nLayers = 3;
    c.dim = 64;
    c.hiddenDim = 96;
    c.nHeads = 4;
    c.nKvHeads = 2;
    c.headDim = 16;
    c.vocabSize = 97;
    c.maxContext = context;
    c.embedScale = 8.0;
    c.attentionBias = true;
    c.slidingWindow = 6;
    c.slidingLayers = {true, false, true};
    c.bosId = 1;
    c.eosId = 2;
    auto m = Model::createRandom(c, 11, "cpu", 0.2);
    if (!m)
        qFatal("%s", m.message().c_str());
    return m.value();
}

Session sessionOf(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
    Session s(model);
    if (Status st = s.feed(tokens); !st)
        qFatal("%s", st.message().c_str());
    return s;
}

} // namespace

class TestLens : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

    std::shared_ptr<const Model> modelFor(const QString& name) {
        if (name == "stories260K")
            return testdata::loadModel(kStories, kStoriesTok);
        if (name == "aidreams260K")
            return testdata::loadModel(kDreams, kDreamsTok);
        if (name == "gpt2")
            return randomGpt2(m_dir.filePath("gpt2"));
        return gemmaLike();
    }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void partsSumToTheLogit_data() {
        QTest::addColumn<QString>("model");
        for (const char* m : {"stories260K", "aidreams260K", "gpt2", "gemma-like"})
            QTest::newRow(m) << QString(m);
    }
    // The identity: embedding + every head + every attention bias + every MLP + the final norm's
    // bias, the final norm's scale frozen, is the (pre-soft-cap) logit of the token, for the
    // top-1 and for an unlikely token; and the head applied to the recorded residual is the
    // forward pass's own logit.
    void partsSumToTheLogit() {
        QFETCH(QString, model);
        if (model == "stories260K" || model == "gpt2")
            KVSCOPE_REQUIRE_DATA(kStories);
        if (model == "aidreams260K")
            KVSCOPE_REQUIRE_DATA(kDreams);
        const auto m = modelFor(model);
        const auto& c = m->config();
        const Session s = sessionOf(m, idsFor(*m, 20));
        double worst = 0;
        for (int32_t token : {-1, int32_t(c.vocabSize - 3)}) {
            auto r = attributeHeads(s, token);
            QVERIFY2(r.isOk(), r.message().c_str());
            const HeadAttribution& a = r.value();
            const LogitAttribution& p = a.parts;
            QCOMPARE(int64_t(p.heads.size()), c.nLayers);
            QCOMPARE(int64_t(p.heads[0].size()), c.nHeads);
            // The forward pass's logit is the head's logit from the recorded residual.
            QVERIFY2(std::abs(p.logit - a.modelLogit) < 1e-4,
                     qPrintable(QString("head %1 vs forward %2").arg(p.logit).arg(a.modelLogit)));
            // The parts are this position's: they rebuild the final residual.
            QVERIFY2(p.residualError < 1e-4, qPrintable(QString::number(p.residualError)));
            qInfo("%s token %d: logit %.6f, parts sum %.6f, error %.2e, residual error %.2e",
                  qPrintable(model), p.token, p.preCapLogit, p.sum(), a.error, p.residualError);
            QVERIFY2(std::abs(a.error) < 1e-4, qPrintable(QString::number(a.error)));
            worst = std::max(worst, std::abs(a.error));
            if (token < 0) // the default is the top-1
                QCOMPARE(p.token,
                         int32_t(std::max_element(s.lastLogits().begin(), s.lastLogits().end()) -
                                 s.lastLogits().begin()));
            if (c.finalSoftcap > 0) // the soft-capped logit is not a sum: the pre-cap one is
                QVERIFY(std::abs(std::tanh(p.preCapLogit / c.finalSoftcap) * c.finalSoftcap -
                                 p.logit) < 1e-6);
            // The decomposition says something: no single part is the whole logit.
            int nonZero = 0;
            for (const auto& layer : p.heads)
                for (double h : layer)
                    nonZero += h != 0;
            QVERIFY(nonZero > 0);
        }
        qInfo("%s: max |parts - logit| %.2e", qPrintable(model), worst);
    }

    // A part that is not this position's breaks the identity: the check can fail.
    void wrongPartsAreNotTheLogit() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto m = modelFor("stories260K");
        const Session a = sessionOf(m, idsFor(*m, 20));
        auto r = attributeHeads(a, -1);
        QVERIFY(r.isOk());
        // The same token's parts, one MLP replaced by another position's output: the sum moves.
        auto other = sessionOf(m, {1, 5, 9});
        auto o = attributeHeads(other, r.value().parts.token);
        QVERIFY(o.isOk());
        LogitAttribution mixed = r.value().parts;
        mixed.mlp[1] = o.value().parts.mlp[1];
        QVERIFY(std::abs(mixed.sum() - mixed.preCapLogit) > 1e-2);
    }

    void lensAtTheLastLayerIsTheModelsOutput_data() { partsSumToTheLogit_data(); }
    void lensAtTheLastLayerIsTheModelsOutput() {
        QFETCH(QString, model);
        if (model == "stories260K" || model == "gpt2")
            KVSCOPE_REQUIRE_DATA(kStories);
        if (model == "aidreams260K")
            KVSCOPE_REQUIRE_DATA(kDreams);
        const auto m = modelFor(model);
        const int L = int(m->config().nLayers);
        const auto tokens = idsFor(*m, 20);
        const Session s = sessionOf(m, tokens);
        auto r = logitLens(s, {.top = 3});
        QVERIFY2(r.isOk(), r.message().c_str());
        const LensResult& lens = r.value();
        const auto T = int64_t(tokens.size());
        QCOMPARE(lens.cells.size(), size_t(L * T));
        qInfo("%s: max |lens(last layer) - logits| %.2e over %lld positions", qPrintable(model),
              lens.lastLayerMaxAbs, static_cast<long long>(T));
        QVERIFY2(lens.lastLayerMaxAbs < 1e-4, qPrintable(QString::number(lens.lastLayerMaxAbs)));
        double earlyKl = 0;
        for (int64_t t = 0; t < T; ++t) {
            const LensCell& last = lens.cells[size_t((L - 1) * T + t)];
            QCOMPARE(last.layer, L - 1);
            QCOMPARE(last.position, t);
            QVERIFY2(last.klToFinal < 1e-9, qPrintable(QString::number(last.klToFinal)));
            QCOMPARE(last.top.size(), size_t(3));
            QVERIFY(last.top[0].p >= last.top[1].p && last.top[1].p >= last.top[2].p);
            earlyKl = std::max(earlyKl, lens.cells[size_t(t)].klToFinal);
        }
        // ... and below it the lens is a different distribution somewhere (not a copy of the end).
        QVERIFY2(earlyKl > 1e-3, qPrintable(QString::number(earlyKl)));
        // The restored column of a live session is the fresh one.
        QCOMPARE(lens.firstChangedLayer, -1);
        QVERIFY(lens.klFinalToFresh <= lens.tolerance);
        const auto& lastLogits = s.lastLogits();
        const int32_t top1 =
            int32_t(std::max_element(lastLogits.begin(), lastLogits.end()) - lastLogits.begin());
        QCOMPARE(lens.restored.back().top[0].id, top1);
    }

    // The verdict both ways: a cache corrupted at layer k changes the last position's lens from
    // layer k on, never below; the clean state changes nothing; an eviction changes something.
    void damagedCacheShowsFromItsLayer() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto m = modelFor("stories260K");
        const Snapshot clean = generated(m, kText, 8);
        auto cleanSession = forcedSession(clean, m);
        QVERIFY(cleanSession.isOk());
        auto ok = logitLens(cleanSession.value(), {.from = 20});
        QVERIFY2(ok.isOk(), ok.message().c_str());
        QCOMPARE(ok.value().firstChangedLayer, -1);
        qInfo("clean: max KL to fresh %.2e (tolerance %.0e)",
              *std::max_element(ok.value().klToFresh.begin(), ok.value().klToFresh.end()),
              ok.value().tolerance);
        for (int k : {1, 3}) {
            FaultContext fc;
            fc.model = m;
            fc.params = {{"layer", std::to_string(k)}};
            auto faulty = injectFault("corrupt-layer", clean, fc);
            QVERIFY2(faulty.isOk(), faulty.message().c_str());
            auto session = forcedSession(faulty.value(), m);
            QVERIFY2(session.isOk(), session.message().c_str());
            auto r = logitLens(session.value(), {.from = 20});
            QVERIFY2(r.isOk(), r.message().c_str());
            const LensResult& lens = r.value();
            qInfo("corrupt-layer %d: first changed layer %d, KL to fresh per layer %.2e %.2e %.2e "
                  "%.2e %.2e",
                  k, lens.firstChangedLayer, lens.klToFresh[0], lens.klToFresh[1],
                  lens.klToFresh[2], lens.klToFresh[3], lens.klToFresh[4]);
            QCOMPARE(lens.firstChangedLayer, k);
            // The fresh grid is the tokens' and does not see the cache.
            QCOMPARE(lens.cells.size(), ok.value().cells.size());
            for (size_t i = 0; i < lens.cells.size(); ++i)
                QCOMPARE(lens.cells[i].top[0].id, ok.value().cells[i].top[0].id);
        }
    }

    // NaN keys at layer 2 (a forced restore of the hostile corpus's kv-nan.kvsnap): the lens
    // said "changes no layer" (a NaN KL compared as 0); the restored column now changes from
    // layer 2, and the head attribution refuses NaN parts by name.
    void nanKeysChangeFromTheirLayer() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto m = modelFor("stories260K");
        auto s = forcedSession(generated(m, kText, 8), m);
        QVERIFY(s.isOk());
        const KvCache& c = s.value().cache();
        HostTensor k = c.key(2);
        std::fill(k.data.begin(), k.data.end(), std::numeric_limits<float>::quiet_NaN());
        auto nanCache = c.withLayer(2, k, c.value(2));
        QVERIFY(nanCache.isOk());
        const Session bad(m, nanCache.value(), s.value().tokens(), s.value().nextPosition(),
                          s.value().lastLogits());
        auto r = logitLens(bad, {.from = 20});
        QVERIFY2(r.isOk(), r.message().c_str());
        QCOMPARE(r.value().firstChangedLayer, 2);
        QVERIFY(std::isinf(r.value().klFinalToFresh));
        // A NaN row is no distribution: no entropy and no top tokens (it read entropy 0, ids
        // 3, 0, 1 with p = nan); the layers below the NaN keep theirs.
        for (const auto& cell : r.value().restored) {
            if (cell.layer >= 2) {
                QVERIFY(std::isnan(cell.entropy));
                QVERIFY(cell.top.empty());
            } else {
                QVERIFY(std::isfinite(cell.entropy) && !cell.top.empty());
            }
        }
        auto heads = attributeHeads(bad);
        QVERIFY(!heads);
        QVERIFY2(heads.message().find("non-finite") != std::string::npos, heads.message().c_str());
    }

    // Quantized weights: the lens is still the model's head (dense() over the Q8_0 blocks), and
    // the decomposition reads the exact dequantized weights while the forward pass multiplied
    // 8-bit-quantized activations: the parts miss the logit by that rounding, stated here.
    void quantizedModel() {
        const QString demo = QStringLiteral(KVSCOPE_TESTS_DIR "/../resources/demo-model");
        if (!QFileInfo::exists(demo + "/config.json"))
            QFAIL("no bundled demo model in this tree (resources/demo-model)");
        const QString gguf = m_dir.filePath("demo-q8_0.gguf");
        QProcess p;
        p.start(kCli, {"convert", "-m", demo, "--to", "gguf", "--out-dtype", "q8_0", "-o", gguf});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        auto loaded = Model::load(gguf.toStdString());
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto m = loaded.value();
        const Session s = sessionOf(m, m->tokenizer()->encode("In the beginning God created the "
                                                              "heaven and the earth. And the"));
        auto lens = logitLens(s);
        QVERIFY2(lens.isOk(), lens.message().c_str());
        QCOMPARE(lens.value().lastLayerMaxAbs, 0.0);
        QCOMPARE(lens.value().firstChangedLayer, -1);
        auto a = attributeHeads(s);
        QVERIFY2(a.isOk(), a.message().c_str());
        const auto& parts = a.value().parts;
        qInfo("demo model Q8_0: token %d logit %.6f, parts sum %.6f, error %.2e, residual error "
              "%.2e",
              parts.token, parts.preCapLogit, parts.sum(), a.value().error, parts.residualError);
        QVERIFY(std::abs(parts.logit - a.value().modelLogit) < 1e-4);
        QVERIFY2(std::abs(a.value().error) < 5e-2, qPrintable(QString::number(a.value().error)));
    }

    // A state longer than a prefill chunk: the fresh run is fed in chunks and the grid's rows
    // gathered across the boundary (positions 500..559 straddle token 512).
    void longStateRunsInChunks() {
        const auto m = gemmaLike(1024);
        const Session s = sessionOf(m, someIds(600, 5, int(m->config().vocabSize)));
        QVERIFY(600 > Session::kPrefillChunk);
        auto r = logitLens(s, {.top = 1, .from = 500, .to = 560});
        QVERIFY2(r.isOk(), r.message().c_str());
        const LensResult& lens = r.value();
        const int L = int(m->config().nLayers);
        QCOMPARE(lens.cells.size(), size_t(L * 60));
        QCOMPARE(lens.cells.front().position, int64_t(500));
        QCOMPARE(lens.cells.back().position, int64_t(559));
        qInfo("600 tokens: max |lens(last layer) - logits| %.2e", lens.lastLayerMaxAbs);
        QVERIFY(lens.lastLayerMaxAbs < 1e-4);
        QCOMPARE(lens.firstChangedLayer, -1);
        // The grid's rows are the positions asked for: the cell at 559 of the last layer is
        // the model's distribution after token 559 (a session of those 560 tokens says it).
        Session cut(m);
        std::vector<int32_t> first560(s.tokens().begin(), s.tokens().begin() + 560);
        QVERIFY(cut.feed(first560).isOk());
        const auto& own = cut.lastLogits();
        QCOMPARE(lens.cells.back().top[0].id,
                 int32_t(std::max_element(own.begin(), own.end()) - own.begin()));
    }

    void badInputIsAnError() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto m = modelFor("stories260K");
        const Session s = sessionOf(m, idsFor(*m, 20));
        auto range = logitLens(s, {.from = 5, .to = 5});
        QVERIFY(!range.isOk());
        QVERIFY2(QString::fromStdString(range.message()).contains("positions [5, 5)"),
                 range.message().c_str());
        QVERIFY(!logitLens(s, {.top = 0}).isOk());
        QVERIFY(!logitLens(Session(m)).isOk()); // no tokens
        auto token = attributeHeads(s, int32_t(m->config().vocabSize));
        QVERIFY(!token.isOk());
        QVERIFY2(QString::fromStdString(token.message()).contains("vocabulary"),
                 token.message().c_str());
        ResidualParts parts;
        parts.heads.resize(size_t(m->config().nLayers));
        parts.mlp.resize(size_t(m->config().nLayers));
        parts.final.assign(size_t(m->config().dim), 0.5f);
        parts.embed.assign(3, 0.0f);
        auto wrong = attributeLogit(*m, parts, 0);
        QVERIFY(!wrong.isOk());
        QVERIFY2(QString::fromStdString(wrong.message()).contains("embedding has 3 values"),
                 wrong.message().c_str());
        HostTensor narrow{{2, 3}, std::vector<float>(6, 0.0f)};
        auto un = unembedResidual(*m, narrow);
        QVERIFY(!un.isOk());
        QVERIFY2(QString::fromStdString(un.message()).contains("[2, 3]"), un.message().c_str());
    }

    // `kvscope-cli lens --json`: the grid and the restored column as core computes them, and the
    // verdict on a corrupted file.
    void cliLens() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const auto m = modelFor("stories260K");
        const Snapshot clean = generated(m, kText, 4);
        const std::string cleanPath = m_dir.filePath("clean.kvsnap").toStdString();
        QVERIFY(save(clean, cleanPath).isOk());
        FaultContext fc;
        fc.model = m;
        fc.params = {{"layer", "2"}};
        auto faulty = injectFault("corrupt-layer", clean, fc);
        QVERIFY(faulty.isOk());
        const std::string badPath = m_dir.filePath("bad.kvsnap").toStdString();
        QVERIFY(save(faulty.value(), badPath).isOk());
        const QString model = QString::fromStdString(testdata::path(kStories));
        const QString tok = QString::fromStdString(testdata::path(kStoriesTok));
        auto run = [&](const QStringList& args) {
            QProcess p;
            p.start(kCli, args);
            p.waitForFinished(120000);
            return std::make_tuple(p.exitCode(), p.readAllStandardOutput(),
                                   p.readAllStandardError());
        };
        const auto [rc, out, err] = run({"lens", QString::fromStdString(cleanPath), "-m", model,
                                         "-t", tok, "--json", "--top", "2", "--from", "3"});
        QVERIFY2(rc == 0, err.constData());
        const QJsonObject j = QJsonDocument::fromJson(out).object();
        const int L = int(m->config().nLayers);
        const int T = int(clean.tokens.size());
        QCOMPARE(j["layers"].toInt(), L);
        QCOMPARE(j["tokens"].toInt(), T);
        const QJsonArray cells = j["cells"].toArray();
        QCOMPARE(cells.size(), qsizetype(L * (T - 3)));
        const QJsonObject first = cells[0].toObject();
        for (const char* key : {"layer", "position", "top", "entropy", "kl_to_final"})
            QVERIFY2(first.contains(key), key);
        QCOMPARE(first["position"].toInt(), 3);
        QCOMPARE(first["top"].toArray().size(), qsizetype(2));
        for (const char* key : {"id", "text", "p"})
            QVERIFY2(first["top"].toArray()[0].toObject().contains(key), key);
        // The same numbers as core.
        auto session = forcedSession(clean, m);
        QVERIFY(session.isOk());
        auto core = logitLens(session.value(), {.top = 2, .from = 3});
        QVERIFY(core.isOk());
        const LensCell& c0 = core.value().cells[0];
        QCOMPARE(first["top"].toArray()[0].toObject()["id"].toInt(), c0.top[0].id);
        QVERIFY(std::abs(first["entropy"].toDouble() - c0.entropy) < 1e-12);
        const QJsonObject restored = j["restored"].toObject();
        QCOMPARE(restored["cells"].toArray().size(), qsizetype(L));
        QVERIFY(restored["first_changed_layer"].isNull());

        // The corrupted file is refused without --force, read with it.
        const auto [rc2, out2, err2] =
            run({"lens", QString::fromStdString(badPath), "-m", model, "--json"});
        QCOMPARE(rc2, 1);
        QVERIFY2(err2.contains("bad.kvsnap") && err2.contains("logits.equivalence"),
                 err2.constData());
        const auto [rc3, out3, err3] =
            run({"lens", QString::fromStdString(badPath), "-m", model, "--json", "--force"});
        QVERIFY2(rc3 == 0, err3.constData());
        const QJsonObject bad = QJsonDocument::fromJson(out3).object()["restored"].toObject();
        QCOMPARE(bad["first_changed_layer"].toInt(), 2);
        QVERIFY(bad["cells"].toArray()[2].toObject()["kl_to_fresh"].toDouble() >
                bad["tolerance"].toDouble());

        // attribute --heads: core's decomposition of the restored last step, the corrupted
        // file's included (its parts still sum to its own logit).
        for (const std::string& path : {cleanPath, badPath}) {
            const auto [rcH, outH, errH] = run({"attribute", QString::fromStdString(path), "-m",
                                                model, "--heads", "--json", "--force"});
            QVERIFY2(rcH == 0, errH.constData());
            const QJsonObject h = QJsonDocument::fromJson(outH).object();
            QCOMPARE(h["layers"].toArray().size(), qsizetype(L));
            QCOMPARE(h["layers"].toArray()[0].toObject()["heads"].toArray().size(),
                     qsizetype(m->config().nHeads));
            QVERIFY2(std::abs(h["sum"].toDouble() - h["pre_cap_logit"].toDouble()) < 1e-4,
                     outH.constData());
            QVERIFY(std::abs(h["error"].toDouble()) < 1e-4);
            auto restored = forcedSession(path == cleanPath ? clean : faulty.value(), m);
            QVERIFY(restored.isOk());
            auto core = attributeHeads(restored.value());
            QVERIFY(core.isOk());
            QCOMPARE(h["token"].toObject()["id"].toInt(), core.value().parts.token);
            QVERIFY(std::abs(h["layers"].toArray()[2].toObject()["mlp"].toDouble() -
                             core.value().parts.mlp[2]) < 1e-9);
        }
        const auto [rcT, outT, errT] =
            run({"attribute", QString::fromStdString(cleanPath), "-m", model, "--token", "3"});
        QCOMPARE(rcT, 2);
        QVERIFY2(errT.contains("--heads"), errT.constData());

        // Usage errors name the flag.
        const auto [rc4, out4, err4] =
            run({"lens", QString::fromStdString(cleanPath), "-m", model, "--to", "999"});
        QCOMPARE(rc4, 2);
        QVERIFY2(err4.contains("--to 999"), err4.constData());
        const auto [rc5, out5, err5] =
            run({"lens", QString::fromStdString(cleanPath), "-m", model, "--top", "0"});
        QCOMPARE(rc5, 2);
        QVERIFY2(err5.contains("--top 0"), err5.constData());
    }
};

QTEST_GUILESS_MAIN(TestLens)
#include "tst_lens.moc"
