// train, train-tokenizer: the trainer that produced the bundled demo model.
#include "clicommon.h"
#include "train/bpetrainer.h"
#include "train/trainer.h"
#include "util/fileio.h"

#include <cstdio>
#include <iostream>

namespace kvscope::cli {

namespace {

void registerTrainTokenizer(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "train-tokenizer",
        "Train a byte-level BPE tokenizer; writes tokenizer.json and tokenizer_config.json");
    struct Args {
        std::string corpus;
        std::string out;
        train::BpeOptions bpe;
        bool json = false;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("--corpus", a->corpus, "UTF-8 text file")->required();
    cmd->add_option("--vocab-size", a->bpe.vocabSize,
                    "Vocabulary size, including special tokens and the 256 byte symbols")
        ->capture_default_str();
    cmd->add_option("--min-frequency", a->bpe.minFrequency, "Never merge rarer pairs")
        ->capture_default_str();
    cmd->add_option("--context", a->bpe.modelMaxLength, "model_max_length to record")
        ->capture_default_str();
    cmd->add_option("-o,--output", a->out,
                    "tokenizer.json to write (tokenizer_config.json goes beside it)")
        ->required();
    addJsonFlag(cmd, a->json);
    cmd->callback([a] {
        std::string corpus;
        try {
            corpus = readFileText(a->corpus, 1ull << 30);
        } catch (const std::exception& e) {
            throw CliFailure{std::string("--corpus ") + e.what()};
        }
        auto r = train::trainBpe(corpus, a->bpe, [&](int64_t done, int64_t wanted) {
            if (!a->json)
                std::cerr << "\rmerges " << done << "/" << wanted << std::flush;
        });
        if (!a->json)
            std::cerr << "\n";
        if (!r)
            throw CliFailure{r.message()};
        if (Status s = train::writeBpe(r.value(), a->out); !s)
            throw CliFailure{s.message()};
        const auto& v = r.value();
        if (a->json)
            printJson({{"output", a->out},
                       {"vocab_size", v.vocabSize},
                       {"merges", v.merges.size()},
                       {"corpus_bytes", v.corpusBytes},
                       {"unique_pieces", v.uniquePieces}});
        else
            std::cout << "wrote " << a->out << ": " << v.vocabSize << " tokens, " << v.merges.size()
                      << " merges from " << v.corpusBytes << " bytes (" << v.uniquePieces
                      << " distinct pre-tokenized pieces)\n";
    });
}

void registerTrainModel(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "train", "Train a small Llama-family model (GQA, SwiGLU, RoPE) from scratch on a text "
                 "corpus; writes a Hugging Face folder");
    struct Args {
        train::TrainOptions o;
        bool json = false;
    };
    auto a = std::make_shared<Args>();
    auto& o = a->o;
    cmd->add_option("--corpus", o.corpusPath, "Training text (UTF-8)");
    cmd->add_option("--valid", o.validationPath,
                    "Held-out text for the validation loss (default: the corpus's tail)");
    cmd->add_option("--valid-fraction", o.validFraction,
                    "Tail of the corpus held out when --valid is not given")
        ->capture_default_str();
    cmd->add_option("--tokenizer", o.tokenizerPath,
                    "tokenizer.json (e.g. from train-tokenizer); copied into the output");
    cmd->add_option("-o,--output", o.outputDir, "Output Hugging Face folder")->required();
    cmd->add_option("--checkpoint-dir", o.checkpointDir,
                    "Checkpoint folder (default: <output>/checkpoint)");
    cmd->add_option("--resume", o.resumeFrom,
                    "Continue from a checkpoint folder (its recorded training options apply)");
    cmd->add_option("--dim", o.shape.dim, "Hidden size")->capture_default_str();
    cmd->add_option("--layers", o.shape.nLayers, "Decoder layers")->capture_default_str();
    cmd->add_option("--heads", o.shape.nHeads, "Query heads")->capture_default_str();
    cmd->add_option("--kv-heads", o.shape.nKvHeads, "Key/value heads (GQA when < heads)")
        ->capture_default_str();
    cmd->add_option("--ffn", o.shape.hiddenDim, "SwiGLU inner size")->capture_default_str();
    cmd->add_option("--context", o.shape.context, "Training window = max positions")
        ->capture_default_str();
    cmd->add_option("--rope-theta", o.shape.ropeTheta, "RoPE base")->capture_default_str();
    cmd->add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
    cmd->add_option("--batch", o.batchSize, "Windows per step")->capture_default_str();
    cmd->add_option("--copy-fraction", o.copyFraction,
                    "Fraction of windows that repeat their first L tokens, L random in "
                    "[context/16, context/2] (copying curriculum for induction heads)")
        ->capture_default_str();
    cmd->add_option("--rename-fraction", o.renameFraction,
                    "Fraction of windows whose recurring proper nouns become invented names, "
                    "scored at their later mentions (recall curriculum)")
        ->capture_default_str();
    cmd->add_option("--segment-fraction", o.segmentFraction,
                    "Fraction of windows with a random word segment written twice, scored on "
                    "the second copy (recall curriculum)")
        ->capture_default_str();
    cmd->add_option("--short-window", o.shortWindow,
                    "Sequence-length warmup: train on windows of this many tokens first "
                    "(divides --context; 0: off)")
        ->capture_default_str();
    cmd->add_option("--short-window-steps", o.shortWindowSteps,
                    "Steps of the sequence-length warmup")
        ->capture_default_str();
    cmd->add_option("--short-window-segment-fraction", o.shortWindowSegmentFraction,
                    "--segment-fraction during the sequence-length warmup (< 0: the same)")
        ->capture_default_str();
    cmd->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
    cmd->add_option("--min-lr", o.minLr, "Learning rate at the end of the cosine")
        ->capture_default_str();
    cmd->add_option("--warmup", o.warmupSteps, "Linear warmup steps")->capture_default_str();
    cmd->add_option("--weight-decay", o.weightDecay, "AdamW decoupled weight decay")
        ->capture_default_str();
    cmd->add_option("--grad-clip", o.gradClip, "Global gradient-norm clip (0: off)")
        ->capture_default_str();
    cmd->add_option("--seed", o.seed, "Seed of the initial weights and the batch order")
        ->capture_default_str();
    cmd->add_option("--threads", o.threads, "CPU threads (0: KVSCOPE_THREADS or all cores)")
        ->capture_default_str();
    cmd->add_option("--log-every", o.logEvery, "Progress line every N steps")
        ->capture_default_str();
    cmd->add_option("--eval-every", o.evalEvery, "Validation loss every N steps (0: at the end)")
        ->capture_default_str();
    cmd->add_option("--eval-windows", o.evalWindows, "Validation windows")->capture_default_str();
    cmd->add_option("--checkpoint-every", o.checkpointEvery,
                    "Checkpoint every N steps (0: at "
                    "the end)")
        ->capture_default_str();
    cmd->add_option("--save-dtype", o.saveDtype, "model.safetensors dtype")
        ->check(CLI::IsMember({"f32", "bf16", "f16"}))
        ->capture_default_str();
    addJsonFlag(cmd, a->json);
    cmd->callback([a] {
        auto created = train::Trainer::create(a->o);
        if (!created)
            throw CliFailure{created.message()};
        auto& trainer = *created.value();
        const auto& o = trainer.options();
        if (!a->json)
            std::cerr << "training " << trainer.parameterCount()
                      << " parameters: " << o.shape.nLayers << " layers, dim " << o.shape.dim
                      << ", " << o.shape.nHeads << " heads / " << o.shape.nKvHeads
                      << " kv heads, ffn " << o.shape.hiddenDim << ", context " << o.shape.context
                      << "; " << o.steps << " steps of " << o.batchSize << "x" << o.shape.context
                      << " tokens from step " << trainer.step() << "\n";
        auto r = trainer.run([&](const train::TrainProgress& p) {
            if (a->json) {
                nlohmann::json j = {{"step", p.step},
                                    {"steps", p.steps},
                                    {"loss", p.loss},
                                    {"lr", p.lr},
                                    {"grad_norm", p.gradNorm},
                                    {"tokens_per_second", p.tokensPerSecond},
                                    {"elapsed_seconds", p.elapsedSeconds}};
                if (p.validLoss)
                    j["valid_loss"] = *p.validLoss;
                if (p.recall) {
                    j["recall_names"] = p.recall->names;
                    j["recall_segments"] = p.recall->segments;
                }
                printJson(j);
            } else {
                char line[256];
                std::snprintf(line, sizeof line,
                              "step %6lld/%lld  loss %.4f  lr %.2e  grad %.3f  %.0f tok/s  %.0f s",
                              static_cast<long long>(p.step), static_cast<long long>(p.steps),
                              p.loss, p.lr, p.gradNorm, p.tokensPerSecond, p.elapsedSeconds);
                std::cout << line;
                if (p.validLoss) {
                    std::snprintf(line, sizeof line, "  valid %.4f", *p.validLoss);
                    std::cout << line;
                }
                if (p.recall) {
                    std::snprintf(line, sizeof line, "  recall: names %.3f segments %.3f",
                                  p.recall->names, p.recall->segments);
                    std::cout << line;
                }
                std::cout << std::endl;
            }
            return true;
        });
        if (!r)
            throw CliFailure{r.message()};
        const auto& s = r.value();
        nlohmann::json j = {{"output", s.outputDir},
                            {"steps", s.steps},
                            {"parameters", s.parameters},
                            {"train_tokens", s.trainTokens},
                            {"valid_tokens", s.validTokens},
                            {"final_loss", s.finalLoss},
                            {"final_valid_loss", s.finalValidLoss},
                            {"final_recall_names", s.finalRecall.names},
                            {"final_recall_segments", s.finalRecall.segments},
                            {"seconds", s.seconds},
                            {"weights_fingerprint", trainer.weightsFingerprint()}};
        if (a->json)
            printJson(j);
        else
            std::cout << "wrote " << s.outputDir << ": " << s.steps << " steps, loss "
                      << s.finalLoss << ", validation loss " << s.finalValidLoss
                      << ", recall loss: names " << s.finalRecall.names << " segments "
                      << s.finalRecall.segments << ", " << s.seconds << " s\n";
    });
}

} // namespace

void registerTrainCommand(CLI::App& app) {
    registerTrainTokenizer(app);
    registerTrainModel(app);
}

} // namespace kvscope::cli
