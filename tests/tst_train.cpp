// Trainer tests: the byte-level BPE trainer (merge order on a hand-checkable corpus, exact
// round trips through our tokenizer, byte-identical output), the model trainer (loss goes
// down, same seed -> same weights, resume == uninterrupted run, and the engine computes the
// same logits from the saved HF folder as the training forward), and the bundled demo model
// (loads through the HF path, GQA and >= 4 layers, generates the README's reference text).
#include "chat/template.h"
#include "engine/model.h"
#include "engine/session.h"
#include "state/probes/induction.h"
#include "testdata.h"
#include "tokenizer/tokenizer.h"
#include "train/bpetrainer.h"
#include "train/curriculum.h"
#include "train/trainer.h"
#include "util/fileio.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <cmath>
#include <random>
#include <filesystem>

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

// A few KB of varied text: words that repeat (so merges are learned), names, digits,
// punctuation, blank lines and non-ASCII letters.
std::string smallCorpus() {
    std::string s;
    const char* lines[] = {
        "And Abiathar the priest said unto David, Behold, the ark is here.",
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the deep.",
        "Then said Abiathar unto the king: Let the king live for ever (verse 12).",
        "Zoë and Noël sang 3 songs — «très bien», said the crowd.",
        "",
        "And it came to pass, when the king heard it, that he rent his clothes.",
    };
    for (int rep = 0; rep < 12; ++rep)
        for (const char* l : lines)
            s += std::string(l) + "\n";
    return s;
}

std::string writeTokenizer(const QTemporaryDir& dir, const std::string& corpus, int vocab) {
    train::BpeOptions o;
    o.vocabSize = vocab;
    auto r = train::trainBpe(corpus, o);
    if (!r)
        qFatal("%s", r.message().c_str());
    const std::string path = (fs::path(dir.path().toStdString()) / "tok" / "tokenizer.json");
    if (Status s = train::writeBpe(r.value(), path); !s)
        qFatal("%s", s.message().c_str());
    return path;
}

void writeText(const std::string& path, const std::string& text) {
    writeFileAtomic(path, text.data(), text.size());
}

train::TrainOptions tinyOptions(const std::string& dir, const std::string& corpus,
                                const std::string& tokenizer) {
    train::TrainOptions o;
    o.corpusPath = corpus;
    o.tokenizerPath = tokenizer;
    o.outputDir = dir + "/model";
    o.validFraction = 0.1;
    o.shape.dim = 32;
    o.shape.nLayers = 2;
    o.shape.nHeads = 4;
    o.shape.nKvHeads = 2;
    o.shape.hiddenDim = 64;
    o.shape.context = 32;
    o.batchSize = 8;
    o.steps = 40;
    o.lr = 1e-2;
    o.minLr = 1e-3;
    o.warmupSteps = 5;
    o.seed = 7;
    o.threads = 1;
    o.logEvery = 1;
    o.evalEvery = 0;
    o.evalWindows = 4;
    return o;
}

std::unique_ptr<train::Trainer> makeTrainer(const train::TrainOptions& o) {
    auto r = train::Trainer::create(o);
    if (!r)
        qFatal("Trainer::create: %s", r.message().c_str());
    return std::move(r).value();
}

const QString kDemoDir = QStringLiteral(KVSCOPE_TESTS_DIR "/../resources/demo-model");

} // namespace

class TestTrain : public QObject {
    Q_OBJECT
private slots:
    void bpeMergesInFrequencyOrder() {
        // Pieces: "aa", "Ġaa" x2, "Ġbb" x2, "Ġc". Pair counts: (a,a) 3 -> first. Then
        // (Ġ,aa), (Ġ,b), (b,b) tie at 2: by bytes 'b' < 'Ġ' (C4 A0), so (b,b); then (Ġ,aa)
        // before (Ġ,bb) ("aa" < "bb"). (Ġ,c) is seen once: below min-frequency 2.
        train::BpeOptions o;
        o.vocabSize = 400;
        auto r = train::trainBpe("aa aa aa bb bb c", o);
        QVERIFY2(r.isOk(), r.message().c_str());
        const std::vector<std::pair<std::string, std::string>> want = {
            {"a", "a"}, {"b", "b"}, {"Ġ", "aa"}, {"Ġ", "bb"}};
        QCOMPARE(r.value().merges, want);
        QCOMPARE(r.value().vocabSize, int32_t(5 + 256 + 4));
        const auto j = nlohmann::json::parse(r.value().tokenizerJson);
        QCOMPARE(j["model"]["type"].get<std::string>(), std::string("BPE"));
        QCOMPARE(j["model"]["merges"][0].get<std::string>(), std::string("a a"));
        QCOMPARE(j["model"]["vocab"]["<|bos|>"].get<int>(), 0);
        QCOMPARE(j["model"]["vocab"]["Ġaa"].get<int>(), 5 + 256 + 2);
        QCOMPARE(j["pre_tokenizer"]["type"].get<std::string>(), std::string("ByteLevel"));
        QCOMPARE(j["decoder"]["type"].get<std::string>(), std::string("ByteLevel"));
        QCOMPARE(j["added_tokens"].size(), size_t(5));
    }

    void bpeRejectsBadOptions() {
        train::BpeOptions o;
        o.vocabSize = 100;
        auto r = train::trainBpe("abc", o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--vocab-size") != std::string::npos, r.message().c_str());
        o.vocabSize = 400;
        o.specialTokens = {"<|bos|>", "<|bos|>"};
        QVERIFY(!train::trainBpe("abc", o).isOk());
    }

    void bpeRoundTripsAndIsDeterministic() {
        QTemporaryDir dir;
        const std::string corpus = smallCorpus();
        const std::string path = writeTokenizer(dir, corpus, 420);
        auto again = train::trainBpe(corpus, [] {
            train::BpeOptions o;
            o.vocabSize = 420;
            return o;
        }());
        QVERIFY(again.isOk());
        QCOMPARE(readFileText(path), again.value().tokenizerJson);

        auto loaded = tok::Tokenizer::fromFile(path);
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto& tok = *loaded.value();
        QCOMPARE(tok.vocabSize(), int32_t(420));
        QCOMPARE(tok.kind(), std::string("hf-bpe-bytelevel"));
        QCOMPARE(tok.bosId().value_or(-1), int32_t(0));
        QCOMPARE(tok.eosId().value_or(-1), int32_t(1));
        const std::vector<std::string> texts = {
            corpus,
            "Abiathar and Abiathar",
            "  leading spaces, trailing tabs\t\t\nand\n\n\nnewlines ",
            "Unseen: ĳ ß 東京 🙂 0123456789 <not-special>",
            "<|user|>\nHi<|eos|>\n",
        };
        for (const auto& t : texts) {
            const auto ids = tok.encode(t);
            QVERIFY(!ids.empty());
            QCOMPARE(ids[0], int32_t(0)); // BOS from the TemplateProcessing post-processor
            QCOMPARE(tok.decode(ids, true), t == texts.back() ? std::string("\nHi\n") : t);
            QCOMPARE(tok.decode(ids, false), "<|bos|>" + t);
        }
        // The corpus compresses: learned merges are used.
        QVERIFY(tok.encode(corpus).size() < corpus.size() / 2);
    }

    void chatTemplateRenders() {
        QTemporaryDir dir;
        const std::string path = writeTokenizer(dir, smallCorpus(), 300);
        auto loaded = tok::Tokenizer::fromFile(path);
        QVERIFY(loaded.isOk());
        const auto src = loaded.value()->chatTemplate();
        QVERIFY(src.has_value());
        auto tmpl = chat::Template::parse(*src, "chat_template");
        QVERIFY2(tmpl.isOk(), tmpl.message().c_str());
        chat::RenderOptions ro;
        ro.addGenerationPrompt = true;
        ro.extraVariables = {{"bos_token", "<|bos|>"}, {"eos_token", "<|eos|>"}};
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        messages.push_back({{"role", "system"}, {"content", "Be brief."}});
        messages.push_back({{"role", "user"}, {"content", "Who was Abiathar?"}});
        auto out = tmpl.value().renderWithSegments(messages, ro);
        QVERIFY2(out.isOk(), out.message().c_str());
        QCOMPARE(out.value().text, std::string("<|bos|><|system|>\nBe brief.<|eos|>\n<|user|>\n"
                                               "Who was Abiathar?<|eos|>\n<|assistant|>\n"));
        QCOMPARE(out.value().segments.front().kind, std::string("scaffold"));
        QCOMPARE(out.value().segments.back().kind, std::string("generation_prompt"));
        // The markers are single special tokens.
        const auto ids = loaded.value()->encode(out.value().text, {.addSpecialTokens = false});
        QCOMPARE(ids[0], int32_t(0));
        QCOMPARE(ids[1], int32_t(2));
        QVERIFY(loaded.value()->isSpecial(ids[1]));
    }

    void lossDecreasesAndEngineAgrees() {
        QTemporaryDir dir;
        const std::string root = dir.path().toStdString();
        const std::string corpus = root + "/corpus.txt";
        writeText(corpus, smallCorpus());
        const std::string tokPath = writeTokenizer(dir, smallCorpus(), 300);
        auto o = tinyOptions(root, corpus, tokPath);
        auto trainer = makeTrainer(o);
        QCOMPARE(trainer->parameterCount(),
                 int64_t(300 * 32 + 32 + 2 * (2 * 32 + 32 * 32 * 2 + 2 * 16 * 32 + 3 * 64 * 32)));
        const double before = trainer->validationLoss();
        std::vector<double> losses;
        auto r = trainer->run([&](const train::TrainProgress& p) {
            losses.push_back(p.loss);
            return true;
        });
        QVERIFY2(r.isOk(), r.message().c_str());
        QCOMPARE(losses.size(), size_t(40));
        double tail = 0;
        for (size_t i = losses.size() - 5; i < losses.size(); ++i)
            tail += losses[i] / 5;
        qInfo("training loss %.4f -> %.4f (last 5), validation %.4f -> %.4f", losses[0], tail,
              before, r.value().finalValidLoss);
        QVERIFY(tail < losses[0] - 1.0);
        QVERIFY(r.value().finalValidLoss < before - 1.0);

        // The saved folder loads through the ordinary HF path...
        auto model = Model::load(o.outputDir);
        QVERIFY2(model.isOk(), model.message().c_str());
        const auto& c = model.value()->config();
        QCOMPARE(c.hfArchitecture, std::string("LlamaForCausalLM"));
        QCOMPARE(c.sourceFormat, std::string("hf"));
        QCOMPARE(c.nKvHeads, int64_t(2));
        QVERIFY(c.tiedEmbeddings);
        QCOMPARE(model.value()->parameterCount(), trainer->parameterCount());
        QVERIFY(model.value()->tokenizer() != nullptr);
        QVERIFY(model.value()->tokenizer()->chatTemplate().has_value());
        // ... and the engine's cached forward computes the training forward's logits.
        const auto ids = model.value()->tokenizer()->encode("And Abiathar the priest said");
        Session s(model.value());
        HostTensor engine;
        QVERIFY(s.feed(ids, &engine).isOk());
        auto trained = trainer->logits(ids);
        QVERIFY(trained.isOk());
        QCOMPARE(static_cast<size_t>(engine.numel()), trained.value().size());
        double maxDiff = 0;
        for (size_t i = 0; i < trained.value().size(); ++i)
            maxDiff = std::max(maxDiff, double(std::fabs(engine.data[i] - trained.value()[i])));
        qInfo("engine vs training forward: max |logit diff| = %.3g over %zu logits", maxDiff,
              trained.value().size());
        QVERIFY(maxDiff < 1e-4);
        // Incremental decoding in the engine agrees too (one token at a time).
        Session inc(model.value());
        for (size_t t = 0; t < ids.size(); ++t)
            QVERIFY(inc.feed(std::span<const int32_t>(&ids[t], 1)).isOk());
        const auto& last = inc.lastLogits();
        const size_t V = last.size();
        for (size_t v = 0; v < V; ++v)
            QVERIFY(std::fabs(last[v] - trained.value()[(ids.size() - 1) * V + v]) < 1e-4);
    }

    void sameSeedSameWeightsAndResume() {
        QTemporaryDir dir;
        const std::string root = dir.path().toStdString();
        const std::string corpus = root + "/corpus.txt";
        writeText(corpus, smallCorpus());
        const std::string tokPath = writeTokenizer(dir, smallCorpus(), 300);
        auto o = tinyOptions(root, corpus, tokPath);
        o.steps = 12;
        o.outputDir = root + "/a";
        auto a = makeTrainer(o);
        QVERIFY(a->run().isOk());
        o.outputDir = root + "/b";
        auto b = makeTrainer(o);
        QVERIFY(b->run().isOk());
        QCOMPARE(a->weightsFingerprint(), b->weightsFingerprint());
        o.outputDir = root + "/seed8";
        o.seed = 8;
        auto other = makeTrainer(o);
        QVERIFY(other->run().isOk());
        QVERIFY(other->weightsFingerprint() != a->weightsFingerprint());

        // Interrupted at step 6, resumed from its checkpoint: the same weights as run a.
        o.seed = 7;
        o.outputDir = root + "/c";
        auto c = makeTrainer(o);
        auto stopped = c->run([](const train::TrainProgress& p) { return p.step < 6; });
        QVERIFY(stopped.isOk());
        QCOMPARE(c->step(), int64_t(6));
        QVERIFY(!fs::exists(root + "/c/config.json")); // only the checkpoint was written
        train::TrainOptions ro;
        ro.resumeFrom = root + "/c/checkpoint";
        ro.outputDir = root + "/c";
        ro.threads = 1;
        auto resumed = makeTrainer(ro);
        QCOMPARE(resumed->step(), int64_t(6));
        QVERIFY(resumed->run().isOk());
        QCOMPARE(resumed->step(), int64_t(12));
        QCOMPARE(resumed->weightsFingerprint(), a->weightsFingerprint());
        QVERIFY(Model::load(root + "/c").isOk());

        // The copying curriculum changes the batches (so the weights), deterministically.
        o.outputDir = root + "/copy1";
        o.copyFraction = 0.5;
        auto copy1 = makeTrainer(o);
        QVERIFY(copy1->run().isOk());
        o.outputDir = root + "/copy2";
        auto copy2 = makeTrainer(o);
        QVERIFY(copy2->run().isOk());
        QCOMPARE(copy1->weightsFingerprint(), copy2->weightsFingerprint());
        QVERIFY(copy1->weightsFingerprint() != a->weightsFingerprint());
    }

    // The recall curriculum on the demo model's tokenizer (a real 4096-token BPE): which
    // tokens are proper nouns, and that renamed / repeated rows score exactly the tokens only
    // the context can predict.
    void recallCurriculum() {
        if (!QFileInfo::exists(kDemoDir + "/tokenizer.json"))
            QFAIL("no bundled demo model tokenizer");
        auto loaded = tok::Tokenizer::fromFile((kDemoDir + "/tokenizer.json").toStdString());
        QVERIFY2(loaded.isOk(), loaded.message().c_str());
        const auto& tok = *loaded.value();
        tok::EncodeOptions plain;
        plain.addSpecialTokens = false;
        auto one = [&](const char* word) {
            const auto ids = tok.encode(word, plain);
            if (ids.size() != 1)
                qFatal("'%s' is %zu tokens in the demo tokenizer", word, ids.size());
            return ids[0];
        };
        const int32_t moses = one(" Moses"), aaron = one(" Aaron"), andCap = one(" And"),
                      and_ = one(" and"), the = one(" the");
        std::string text;
        for (int i = 0; i < 12; ++i)
            text += "And Moses spake unto Aaron, and the people heard it. And the LORD said "
                    "unto Moses in the wilderness.\n";
        const auto corpus = tok.encode(text, plain);
        const auto pools = train::buildTokenPools(tok, corpus);
        QVERIFY(pools.usable());
        QVERIFY(pools.properNouns.count(moses));
        QVERIFY(pools.properNouns.count(aaron));
        QVERIFY(!pools.properNouns.count(andCap)); // " and" is 2x as frequent: not a name
        QVERIFY(std::find(pools.words.begin(), pools.words.end(), the) != pools.words.end());
        QVERIFY(std::find(pools.words.begin(), pools.words.end(), and_) != pools.words.end());

        const int64_t T = 64;
        const std::span<const int32_t> src(corpus.data(), corpus.size());
        std::mt19937_64 rng(5);
        const auto row = train::renamedRow(src, T, pools, rng);
        QCOMPARE(int64_t(row.tokens.size()), T);
        QCOMPARE(int64_t(row.scored.size()), T);
        QVERIFY(std::count(row.tokens.begin(), row.tokens.end(), moses) == 0 ||
                std::count(row.tokens.begin(), row.tokens.end(), aaron) == 0);
        // Every run of unscored tokens is a first mention; its tokens come back later, each
        // later mention scored and marked recall; tokens other than names are kept in order.
        std::vector<std::vector<int32_t>> firstMentions;
        for (int64_t t = 0; t < T;) {
            if (row.scored[size_t(t)]) {
                ++t;
                continue;
            }
            std::vector<int32_t> name;
            for (; t < T && !row.scored[size_t(t)]; ++t) {
                QCOMPARE(row.recall[size_t(t)], uint8_t(0));
                name.push_back(row.tokens[size_t(t)]);
            }
            QVERIFY(std::find(pools.nameStarts.begin(), pools.nameStarts.end(), name[0]) !=
                    pools.nameStarts.end());
            firstMentions.push_back(name);
        }
        QVERIFY(!firstMentions.empty());
        QVERIFY(row.recallCount() > 0);
        for (const auto& name : firstMentions) {
            int later = 0;
            for (int64_t t = 0; t + int64_t(name.size()) <= T; ++t)
                if (row.scored[size_t(t)] &&
                    std::equal(name.begin(), name.end(), row.tokens.begin() + t)) {
                    for (size_t i = 0; i < name.size(); ++i)
                        QCOMPARE(row.recall[size_t(t) + i], uint8_t(1));
                    ++later;
                }
            QVERIFY2(later > 0, "a renamed noun is never mentioned again in the window");
        }
        std::mt19937_64 again(5);
        QVERIFY(train::renamedRow(src, T, pools, again).tokens == row.tokens);

        // Repeated: natural text up to `start`, then a segment of L tokens drawn from the
        // window, over and over; the first copy and the token after it unscored, everything after
        // scored and marked recall.
        std::mt19937_64 rng2(9);
        const auto rep = train::repeatedRow(src, T, pools, rng2);
        const auto nat = train::naturalRow(src, T);
        const int64_t start =
            std::find(rep.scored.begin(), rep.scored.end(), uint8_t(0)) - rep.scored.begin();
        const int64_t firstRecall =
            std::find(rep.recall.begin(), rep.recall.end(), uint8_t(1)) - rep.recall.begin();
        const int64_t L = firstRecall - start - 1;
        QVERIFY2(L >= 4 && L <= 16, qPrintable(QString("segment length %1").arg(L))); // T/4 = 16
        QVERIFY(start <= T / 2);
        for (int64_t t = 0; t < T; ++t) {
            const auto i = size_t(t);
            if (t < start) {
                QCOMPARE(rep.tokens[i], nat.tokens[i]);
                QCOMPARE(rep.scored[i], uint8_t(1));
                QCOMPARE(rep.recall[i], uint8_t(0));
                continue;
            }
            QCOMPARE(rep.tokens[i], rep.tokens[size_t(start + (t - start) % L)]);
            QCOMPARE(rep.scored[i], uint8_t(t - start > L));
            QCOMPARE(rep.recall[i], uint8_t(t - start > L));
        }
        for (int64_t i = 0; i < L; ++i) // segment tokens come from the window itself
            QVERIFY(std::find(src.begin(), src.begin() + T, rep.tokens[size_t(start + i)]) !=
                    src.begin() + T);

        // Twice: two copies of L tokens from the window with natural text between; the first
        // copy and the second's first token unscored, the rest of the second copy recall.
        std::mt19937_64 rng3(11);
        const auto twice = train::repeatedRow(src, T, pools, rng3, train::SegmentRepeats::Twice);
        std::vector<int64_t> unscored2, recalled2;
        for (int64_t t = 0; t < T; ++t) {
            if (!twice.scored[size_t(t)])
                unscored2.push_back(t);
            if (twice.recall[size_t(t)])
                recalled2.push_back(t);
        }
        const int64_t L2 = int64_t(recalled2.size()) + 1;
        QVERIFY2(L2 >= 8 && L2 <= 20, qPrintable(QString("segment length %1").arg(L2))); // (T-2)/3
        QCOMPARE(int64_t(unscored2.size()), L2 + 1);
        const int64_t q1 = unscored2.front(), q2 = recalled2.front() - 1;
        QVERIFY(q2 >= q1 + L2 + 1 && q2 + L2 <= T);
        for (int64_t i = 0; i < L2; ++i)
            QCOMPARE(twice.tokens[size_t(q1 + i)], twice.tokens[size_t(q2 + i)]);
        for (int64_t t = 0; t < T; ++t)
            if ((t < q1 || t >= q1 + L2) && (t < q2 || t >= q2 + L2))
                QCOMPARE(twice.tokens[size_t(t)], nat.tokens[size_t(t)]);

        // A trainer with the curriculum is deterministic and resumable, and its recall probe
        // scores held-out renamed and repeated windows.
        QTemporaryDir dir;
        const std::string root = dir.path().toStdString();
        writeText(root + "/corpus.txt", text);
        auto o =
            tinyOptions(root, root + "/corpus.txt", (kDemoDir + "/tokenizer.json").toStdString());
        o.shape.context = 48;
        o.steps = 6;
        o.renameFraction = 0.5;
        o.segmentFraction = 0.5;
        o.shortWindow = 16;     // the first 4 steps on 3x as many 16-token windows,
        o.shortWindowSteps = 4; // with only repeated segments besides the renamed rows
        o.shortWindowSegmentFraction = 0.5;
        o.validFraction = 0.3;
        o.outputDir = root + "/a";
        auto a = makeTrainer(o);
        QVERIFY(a->run().isOk());
        const auto probe = a->recallLoss();
        QVERIFY(probe.names > 0 && std::isfinite(probe.names));
        QVERIFY(probe.segments > 0 && std::isfinite(probe.segments));
        o.outputDir = root + "/b";
        auto b = makeTrainer(o);
        QVERIFY(b->run([](const train::TrainProgress& p) { return p.step < 3; }).isOk());
        train::TrainOptions ro;
        ro.resumeFrom = root + "/b/checkpoint";
        ro.outputDir = root + "/b";
        ro.threads = 1;
        auto resumed = makeTrainer(ro);
        QCOMPARE(resumed->options().renameFraction, 0.5);
        QCOMPARE(resumed->options().shortWindow, int64_t(16));
        QCOMPARE(resumed->options().shortWindowSegmentFraction, 0.5);
        QVERIFY(resumed->run().isOk());
        QCOMPARE(resumed->weightsFingerprint(), a->weightsFingerprint());
        o.renameFraction = o.segmentFraction = 0;
        o.outputDir = root + "/plain";
        auto plainRun = makeTrainer(o);
        QVERIFY(plainRun->run().isOk());
        QVERIFY(plainRun->weightsFingerprint() != a->weightsFingerprint());
    }

    // The induction probe's numbers against a recomputation from the session's own logits,
    // and its head scores' invariants (on the bundled model; the mechanics do not depend on
    // how well it copies).
    void inductionProbe() {
        if (!QFileInfo::exists(kDemoDir + "/config.json"))
            QFAIL("no bundled demo model");
        auto model = Model::load(kDemoDir.toStdString());
        QVERIFY2(model.isOk(), model.message().c_str());
        const auto& m = model.value();
        const auto& tok = *m->tokenizer();
        state::InductionOptions o;
        o.length = 20;
        o.seed = 3;
        auto r = state::probeInduction(m, tok, o);
        QVERIFY2(r.isOk(), r.message().c_str());
        const auto& rep = r.value();
        QCOMPARE(rep.tokens.size(), size_t(41));
        QCOMPARE(rep.tokens[0], *tok.bosId());
        for (int i = 1; i <= 20; ++i)
            QCOMPARE(rep.tokens[size_t(i)], rep.tokens[size_t(i + 20)]);
        const auto& c = m->config();
        QCOMPARE(rep.heads.size(), size_t(c.nLayers * c.nHeads));
        for (const auto& h : rep.heads) {
            QVERIFY(h.induction >= 0 && h.induction <= 1);
            QVERIFY(h.previousToken >= 0 && h.previousToken <= 1);
        }
        // Second-copy loss recomputed from the logits of a plain feed.
        Session s(m);
        HostTensor logits;
        QVERIFY(s.feed(rep.tokens, &logits).isOk());
        const int64_t V = c.vocabSize;
        double loss = 0;
        for (int64_t t = 22; t <= 40; ++t) {
            const float* row = logits.data.data() + (t - 1) * V;
            double mx = row[0], z = 0;
            for (int64_t v = 0; v < V; ++v)
                mx = std::max(mx, double(row[v]));
            for (int64_t v = 0; v < V; ++v)
                z += std::exp(double(row[v]) - mx);
            loss += -(double(row[rep.tokens[size_t(t)]]) - mx - std::log(z));
        }
        QVERIFY(std::fabs(loss / 19 - rep.secondCopyLoss) < 1e-4);
        // Every second-copy token after the first is "recalled" from 20 positions back.
        QCOMPARE(rep.recalled.size(), size_t(20));
        for (const auto& t : rep.recalled) {
            QCOMPARE(t.earlierPosition, t.position - 20);
            QCOMPARE(t.id, rep.tokens[size_t(t.position)]);
            QVERIFY(t.rank >= 1 && t.probability > 0 && t.probability <= 1);
        }
        // Same seed, same segment; bad lengths are refused naming the option.
        QVERIFY(state::probeInduction(m, tok, o).value().tokens == rep.tokens);
        o.length = 1;
        auto bad = state::probeInduction(m, tok, o);
        QVERIFY(!bad.isOk());
        QVERIFY2(bad.message().find("--length") != std::string::npos, bad.message().c_str());
        o.length = c.maxContext;
        QVERIFY(!state::probeInduction(m, tok, o).isOk());
    }

    void trainerRejectsBadInput() {
        QTemporaryDir dir;
        const std::string root = dir.path().toStdString();
        const std::string corpus = root + "/corpus.txt";
        writeText(corpus, smallCorpus());
        const std::string tokPath = writeTokenizer(dir, smallCorpus(), 300);
        auto o = tinyOptions(root, corpus, tokPath);
        o.shape.nKvHeads = 3;
        auto r = train::Trainer::create(o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--kv-heads") != std::string::npos, r.message().c_str());
        o = tinyOptions(root, root + "/missing.txt", tokPath);
        r = train::Trainer::create(o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("missing.txt") != std::string::npos, r.message().c_str());
        o = tinyOptions(root, corpus, tokPath);
        o.shape.context = 100000;
        QVERIFY(!train::Trainer::create(o).isOk());
        o = tinyOptions(root, corpus, tokPath);
        o.copyFraction = 1.5;
        r = train::Trainer::create(o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--copy-fraction") != std::string::npos, r.message().c_str());
        o = tinyOptions(root, corpus, tokPath);
        o.renameFraction = 0.7;
        o.segmentFraction = 0.5;
        r = train::Trainer::create(o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--rename-fraction") != std::string::npos, r.message().c_str());
        o = tinyOptions(root, corpus, tokPath);
        o.shortWindow = 12; // does not divide the context (32)
        r = train::Trainer::create(o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--short-window") != std::string::npos, r.message().c_str());
        o = tinyOptions(root, corpus, tokPath);
        o.shortWindow = 16;
        o.renameFraction = 0.5;
        o.shortWindowSegmentFraction = 0.8;
        r = train::Trainer::create(o);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("--short-window-segment-fraction") != std::string::npos,
                 r.message().c_str());
        train::TrainOptions ro;
        ro.resumeFrom = root + "/nowhere";
        ro.outputDir = root + "/x";
        r = train::Trainer::create(ro);
        QVERIFY(!r.isOk());
        QVERIFY2(r.message().find("nowhere") != std::string::npos, r.message().c_str());
    }

    void demoModel() {
        if (!QFileInfo::exists(kDemoDir + "/config.json"))
            QFAIL(qPrintable("no bundled demo model at " + kDemoDir +
                             " (packaging/train-demo-model.sh makes it)"));
        const std::string dir = kDemoDir.toStdString();
        for (const char* f : {"README.md", "sample.txt", "tokenizer.json", "model.safetensors"})
            QVERIFY2(QFileInfo::exists(kDemoDir + "/" + f),
                     qPrintable("the demo model folder lacks " + QString(f)));
        auto model = Model::load(dir);
        QVERIFY2(model.isOk(), model.message().c_str());
        const auto& c = model.value()->config();
        QCOMPARE(c.sourceFormat, std::string("hf"));
        QCOMPARE(c.hfArchitecture, std::string("LlamaForCausalLM"));
        QVERIFY(c.nLayers >= 4);
        QVERIFY(c.nKvHeads < c.nHeads); // GQA
        const int64_t params = model.value()->parameterCount();
        QVERIFY(params >= 1'000'000 && params <= 5'000'000);
        auto tok = model.value()->tokenizer();
        QVERIFY(tok != nullptr);
        QVERIFY(tok->chatTemplate().has_value());

        // The corpus sample round-trips through the tokenizer.
        const std::string sample = readFileText(dir + "/sample.txt");
        QVERIFY(sample.size() > 1000);
        QCOMPARE(tok->decode(tok->encode(sample), true), sample);

        // The README records a reference generation:
        //   <!-- reference-generation prompt="..." steps=N seed=S temperature=T top_p=P -->
        //   ```text
        //   <the generated continuation>
        //   ```
        const std::string readme = readFileText(dir + "/README.md");
        const std::string marker = "<!-- reference-generation ";
        const auto at = readme.find(marker);
        QVERIFY2(at != std::string::npos, "README.md has no reference-generation marker");
        const auto end = readme.find("-->", at);
        const std::string attrs = readme.substr(at + marker.size(), end - at - marker.size());
        auto attr = [&](const std::string& key) {
            const auto k = attrs.find(key + "=");
            std::string v = attrs.substr(k + key.size() + 1);
            if (v[0] == '"')
                return v.substr(1, v.find('"', 1) - 1);
            return v.substr(0, v.find(' '));
        };
        const std::string open = "```text\n";
        const auto body = readme.find(open, end) + open.size();
        const std::string expected = readme.substr(body, readme.find("\n```", body) - body);

        auto generate = [&] {
            Session s(model.value());
            const auto prompt = tok->encode(attr("prompt"));
            if (!s.feed(prompt).isOk())
                return std::string("<feed failed>");
            Sampler sampler(SamplerSettings{std::stof(attr("temperature")),
                                            std::stof(attr("top_p")), 0,
                                            std::stoull(attr("seed"))});
            std::string text;
            int32_t prev = prompt.back();
            auto r = s.generate(std::stoi(attr("steps")), sampler, [&](int32_t id) {
                text += tok->decodeNext(prev, id);
                prev = id;
                return true;
            });
            return r.isOk() ? text : "<generate failed: " + r.message() + ">";
        };
        const std::string first = generate();
        QCOMPARE(generate(), first);
        QCOMPARE(first, expected);

        // It looks back at its context (induction heads grown by the recall curriculum,
        // core/train/curriculum.h). On the guided tour's passage — a sentence with a rare
        // name, then the sentence again — the repeated tokens rank far above the tokens
        // seen for the first time, and some head attends from a repeated token to the one
        // after its earlier occurrence; a random segment's second copy is easier than its
        // first. (The README records the measured values; these bounds leave a margin.)
        state::InductionOptions io;
        io.text = "And Jabez called on the God of Israel, saying, Oh that thou wouldest bless me "
                  "indeed. And Jabez called on the God of Israel, saying, Oh that thou wouldest";
        auto text = state::probeInduction(model.value(), *tok, io);
        QVERIFY2(text.isOk(), text.message().c_str());
        const auto& t = text.value();
        QVERIFY2(t.strongest().induction >= 0.3,
                 qPrintable(QString("strongest induction head %1").arg(t.strongest().induction)));
        QVERIFY2(t.recalledMeanRank * 2 < t.otherMeanRank,
                 qPrintable(QString("repeated tokens: mean rank %1, others %2")
                                .arg(t.recalledMeanRank)
                                .arg(t.otherMeanRank)));
        QVERIFY2(t.recalledTop1 >= 0.3,
                 qPrintable(QString("repeated tokens ranked first: %1").arg(t.recalledTop1)));
        state::InductionOptions ro;
        ro.length = 32;
        auto seg = state::probeInduction(model.value(), *tok, ro);
        QVERIFY2(seg.isOk(), seg.message().c_str());
        QVERIFY2(seg.value().secondCopyLoss < seg.value().firstCopyLoss - 2.0,
                 qPrintable(QString("copy loss %1 -> %2")
                                .arg(seg.value().firstCopyLoss)
                                .arg(seg.value().secondCopyLoss)));
    }
};

QTEST_GUILESS_MAIN(TestTrain)
#include "tst_train.moc"
