// Trainer: trains a small Llama-family model (RMSNorm, RoPE, GQA, SwiGLU) from scratch with
// libtorch autograd over the engine's own forward code (forwardLlamaBatch in
// engine/llama.cpp shares every layer op with the inference forward), and saves it as a
// standard Hugging Face folder that Model::load reads through the ordinary HF path.
//
// Optimisation: AdamW (decoupled weight decay on matrices and embeddings, not on norms),
// linear warmup then cosine decay to minLr, global gradient-norm clipping. Batches are
// windows of the tokenized corpus, each starting with BOS (optionally some with their first
// half repeated, see copyFraction, or made by the recall curriculum, see renameFraction);
// window offsets come from a
// generator seeded by (seed, step), so a run resumed from a checkpoint takes exactly the
// batches the uninterrupted run would have. Same seed, same thread count -> same weights.
//
// Checkpoint folder: the HF files plus optimizer.safetensors (AdamW moments) and
// trainer_state.json (step, options, loss history). Written atomically, file by file.
//
// Thread-safety: a Trainer is used by one thread. The public header is torch-free.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvscope::train {

struct ModelShape {
    int64_t dim = 128;
    int64_t nLayers = 4;
    int64_t nHeads = 4;
    int64_t nKvHeads = 1;
    int64_t hiddenDim = 352; // SwiGLU inner size
    int64_t context = 256;   // training window and max_position_embeddings
    double ropeTheta = 10000.0;
    double normEps = 1e-5;
    bool tiedEmbeddings = true;
};

struct TrainOptions {
    std::string corpusPath;     // UTF-8 text
    std::string validationPath; // optional held-out text; empty: the last validFraction
    double validFraction = 0.02;
    std::string tokenizerPath; // tokenizer.json (tokenizer_config.json beside it is copied)
    std::string outputDir;     // the final HF folder
    std::string checkpointDir; // empty: <outputDir>/checkpoint
    std::string resumeFrom;    // a checkpoint folder to continue from (shape/options from it)
    ModelShape shape;
    int64_t steps = 1000;
    int64_t batchSize = 16;
    // Fraction of training windows that repeat their first L tokens to the end, L random in
    // [context/16, context/2] (a copying curriculum: induction heads form within a small
    // budget). Validation windows are never repeated. 0 disables.
    double copyFraction = 0.0;
    // The recall curriculum (train/curriculum.h): the fraction of windows whose recurring
    // proper nouns are replaced by invented names (scored at their later mentions), and the
    // fraction with a random word segment written twice (scored on the second copy).
    // Validation windows stay natural. 0 disables; the two sum to at most 1.
    double renameFraction = 0.0;
    double segmentFraction = 0.0;
    // Sequence-length warmup: the first shortWindowSteps steps train on windows of
    // shortWindow tokens (context / shortWindow times as many, the same tokens per step).
    // An untrained attention head spreads over every earlier position, so short windows give
    // the previous-token and induction heads a far stronger gradient early on. 0: off.
    int64_t shortWindow = 0;
    int64_t shortWindowSteps = 0;
    // The segment fraction during the sequence-length warmup (< 0: segmentFraction). A
    // segment-heavy warmup grows the induction heads early (they form abruptly, after a
    // plateau); the rest of the run can then be mostly natural text.
    double shortWindowSegmentFraction = -1.0;
    // Report the recall probe (RecallLoss) at every evaluation.
    bool recallProbe = true;
    double lr = 3e-3;
    double minLr = 3e-4;
    int64_t warmupSteps = 100;
    double weightDecay = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double adamEps = 1e-8;
    double gradClip = 1.0;
    uint64_t seed = 1234;
    int threads = 0; // 0: KVSCOPE_THREADS or the core count
    int64_t logEvery = 10;
    int64_t evalEvery = 200;       // validation loss every N steps (and at the end); 0: only at end
    int64_t evalWindows = 32;      // validation windows (fixed, evenly spaced)
    int64_t checkpointEvery = 0;   // 0: only at the end
    std::string saveDtype = "f32"; // f32 | bf16 | f16 (model.safetensors of the HF folder)
};

// The recall probe on held-out text: mean loss (nats) on tokens only the context predicts —
// later mentions of invented names, the second copy of a repeated random segment. A model
// that does not look back scores about the log of the name/word pool's size (~6-8); one
// with induction heads far less. 0 when the tokenizer has too few plain words to build them.
struct RecallLoss {
    double names = 0;
    double segments = 0;
};

struct TrainProgress {
    int64_t step = 0; // steps done
    int64_t steps = 0;
    double loss = 0;            // training loss of this step's batch
    double lr = 0;              // learning rate used for this step
    double gradNorm = 0;        // before clipping
    double tokensPerSecond = 0; // since the run (or resume) started
    double elapsedSeconds = 0;
    std::optional<double> validLoss;  // set on evaluation steps
    std::optional<RecallLoss> recall; // set on evaluation steps (when recallProbe)
};

struct TrainSummary {
    int64_t steps = 0;
    int64_t parameters = 0;
    int64_t trainTokens = 0;
    int64_t validTokens = 0;
    double finalLoss = 0;      // mean training loss over the last logEvery steps
    double finalValidLoss = 0; // on the held-out windows
    RecallLoss finalRecall;
    double seconds = 0;
    std::string outputDir;
};

class Trainer {
public:
    // Loads the tokenizer and corpus, tokenizes, and initializes the model (normal(0, 0.02),
    // output projections scaled by 1/sqrt(2 * layers), norms 1) or resumes from a checkpoint.
    // Errors name the option or file ("--corpus x.txt: ...").
    static Result<std::unique_ptr<Trainer>> create(const TrainOptions& options);
    ~Trainer();

    // Trains up to options.steps, calling onProgress every logEvery steps and on evaluations;
    // returning false from onProgress stops early (a checkpoint is written). Writes
    // checkpoints every checkpointEvery steps and the HF folder at the end.
    Result<TrainSummary> run(const std::function<bool(const TrainProgress&)>& onProgress = {});

    // Saves the current weights as a Hugging Face Llama folder (config.json,
    // model.safetensors, tokenizer files, generation_config.json).
    Status saveModel(const std::string& dir) const;
    Status saveCheckpoint(const std::string& dir) const;

    // The training forward's logits for one sequence (positions 0..n-1): [n * vocab] floats.
    Result<std::vector<float>> logits(std::span<const int32_t> tokens) const;
    double validationLoss() const;
    RecallLoss recallLoss() const;
    int64_t step() const;
    int64_t parameterCount() const;
    // Hash over every weight's bytes (names sorted), 16 hex digits.
    std::string weightsFingerprint() const;
    const TrainOptions& options() const;

    struct Impl;

private:
    explicit Trainer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvscope::train
