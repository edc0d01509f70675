// Random-weight models in the real shapes of popular families, written as Hugging Face folders.
//
// No real large model is available offline, yet GUI views and benchmarks must run at realistic
// sizes. A shape is the exact architecture of a published checkpoint (its config.json
// numbers); writeRandomModel() draws random weights in that shape one tensor at a time and
// writes them with convertToHuggingFace's writer (an 8B shape never sits in memory whole),
// optionally with a real tokenizer, so `Model::load` (and so every
// CLI command and the GUI) opens the folder like the real model. The outputs are nonsense; the
// sizes, the cache layout and the vocabulary are real.
//
// Thread-safety: the shape table is immutable; writeRandomModel may run on any thread.
#pragma once

#include "engine/modelconfig.h"
#include "util/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct RandomModelShape {
    std::string name;      // "smollm2-135m": what --shape takes
    std::string realModel; // the checkpoint it copies: "HuggingFaceTB/SmolLM2-135M"
    // The checkpoint's config.json as the engine holds it (llama family; bos/eos as published).
    ModelConfig config;
    // The tokenizer whose ids the vocabulary holds, for messages and --list.
    std::string tokenizer;
};

// Every known shape, in a fixed order: smollm2-135m, llama-3.2-1b, qwen2.5-0.5b, stories110m,
// qwen3-0.6b, gemma-2-2b, gemma-3-1b, phi-3-mini-4k, llama-3.1-8b, qwen2.5-7b, mistral-7b-v0.3.
const std::vector<RandomModelShape>& randomModelShapes();
// The shape called `name`, or null.
const RandomModelShape* findRandomModelShape(const std::string& name);
// "smollm2-135m, llama-3.2-1b, …", for messages.
std::string randomModelShapeNames();

// The number of weights a llama-family config implies (embeddings, lm_head unless tied, norms,
// projections, q/k/v biases when attentionBias), from the layout bind() checks
// (llamaWeightShape). Precondition: config.architecture == "llama".
int64_t llamaParameterCount(const ModelConfig& config);

struct RandomModelOptions {
    std::string shape;          // a name from randomModelShapes()
    int64_t layers = 0;         // > 0: replaces the shape's layer count (quick tests)
    uint64_t seed = 0;          // the weights' seed: same seed, same weights
    std::string dtype = "bf16"; // stored weights: f32, f16 or bf16 (the real checkpoints: bf16)
    // A tokenizer.json, a folder holding one, or any tokenizer kvscope loads; empty: none (the
    // model then works on token ids only). Exported beside the weights (an HF tokenizer.json
    // and its tokenizer_config.json are copied as they are). It may have fewer tokens than the
    // vocabulary (padded vocabularies, as Qwen2.5's), never more.
    std::string tokenizerPath;
    bool overwrite = false; // replace the files of an existing model folder
};

struct RandomModelReport {
    std::string output;
    std::string shape;
    ModelConfig config;          // as written (layers after --layers)
    int64_t parameters = 0;      // weights written
    uint64_t bytes = 0;          // every file written, together
    std::string tokenizer;       // the tokenizer's source file; empty when none
    int32_t tokenizerTokens = 0; // its vocabulary size; 0 when none
};

// What writing a random model takes, from its config alone (nothing is drawn).
struct RandomModelEstimate {
    ModelConfig config;     // as it would be written (layers after --layers)
    int64_t parameters = 0; // weights written
    uint64_t fileBytes = 0; // model.safetensors: every weight in the stored dtype, its header
    // Memory while writing: the weights are drawn one at a time, so the peak is the largest
    // one (`largestWeight`) in f32, its stored-dtype copy and the writer's buffer of it (8
    // bytes an element whatever the dtype), plus the process itself (`kProcessBytes`).
    uint64_t peakBytes = 0;
    std::string largestWeight;
    static constexpr uint64_t kProcessBytes = 512ull << 20; // libtorch, the code, the heap
};
// The estimate for `options`; the errors of the options themselves (unknown shape or dtype,
// --layers negative or beyond the limits of any model) as writeRandomModel() gives them.
Result<RandomModelEstimate> estimateRandomModel(const RandomModelOptions& options);

// The room the machine offers a write into `outDir`: memory available now (MemAvailable, and
// the cgroup's remaining limit when lower), the free space of the filesystem that holds
// `outDir` (or its nearest existing parent), whether that filesystem is memory (tmpfs, ramfs:
// the file's bytes then come out of the memory too), and the process's file size limit
// (RLIMIT_FSIZE, `ulimit -f`: a longer file is cut off by SIGXFSZ). Empty: not measurable here
// or no limit, and not checked.
struct MachineRoom {
    std::optional<uint64_t> memoryAvailable;
    std::optional<uint64_t> diskAvailable;
    bool diskIsMemory = false;
    std::string disk; // the folder whose filesystem was measured
    std::optional<uint64_t> fileSizeLimit;
};
MachineRoom machineRoom(const std::string& outDir);

// Whether `estimate` fits `room`, with a margin (memory: 10 % over the estimate; disk: 1 % and
// 64 MiB). The error names the options (`what`, e.g. "--shape llama-3.1-8b --layers 1024
// --dtype bf16"), the estimate and what is available: "... model.safetensors would take
// 897.3 GB; /data has 79.1 GB free; nothing written".
Status randomModelFits(const RandomModelEstimate& estimate, const MachineRoom& room,
                       const std::string& what);

// Writes `outDir` (config.json, generation_config.json, model.safetensors and, with a
// tokenizer, tokenizer.json + tokenizer_config.json) through convertToHuggingFace, so the
// output path policy and the refusal to replace an existing model are the same. Errors name the
// option or file and the field: "--shape: 'x' is not a known shape (...)", "<tokenizer>: 50257
// tokens, more than vocab_size 49152 of smollm2-135m". Before anything is drawn the estimate
// is checked against machineRoom(outDir) (randomModelFits): a model that does not fit the
// memory or the disk is refused by name. Memory: estimateRandomModel()'s peak (llama-3.2-1b:
// ~2.6 GB, its embeddings; an 8B shape: ~4.7 GB).
Result<RandomModelReport> writeRandomModel(const std::string& outDir,
                                           const RandomModelOptions& options);

} // namespace kvscope
