// Model: a loaded, immutable transformer checkpoint plus its tokenizer.
//
// Load once, share freely (std::shared_ptr<const Model>): weights never change after load,
// so any number of sessions (and threads) may run it. Supported sources:
//   - llama2.c checkpoints (.bin, 7-int header) + a llama2.c tokenizer .bin
//   - GGUF v2/v3, architecture llama, tensors F32/F16/BF16/Q8_0, embedded tokenizer
//   - Hugging Face folders (config.json + safetensors + tokenizer.json): Llama, Mistral,
//     Qwen2 (q/k/v biases), GPT-2
// Weights are named as in Hugging Face checkpoints whatever the source, so a missing tensor
// is reported by its HF name.
#pragma once

#include "engine/modelconfig.h"
#include "util/status.h"

#include <memory>
#include <string>
#include <vector>

namespace kvscope {
namespace tok {
class Tokenizer;
}

struct LoadOptions {
    std::string
        tokenizerPath; // empty: embedded (GGUF), tokenizer.json (HF), tok*.bin beside a .bin
    std::string device = "cpu"; // "cpu", "cuda", "cuda:N"
    std::string dtype;          // compute dtype; empty = f32 on CPU (bf16/f16 matrices kept as
                                // stored), checkpoint dtype on CUDA; "f32" widens every weight
    // KV cache dtype of the sessions this model starts: "f32", "f16" or "bf16"; empty = the
    // compute dtype (f32 on the CPU). A 16-bit cache halves the cache's memory; attention reads
    // it converted to the compute dtype. A cache restored from a snapshot keeps its own dtype.
    std::string cacheDtype;
    bool requireTokenizer = false;
    // CPU: copy the weights of 64 KB or more out of the file mapping into one buffer on huge
    // pages, giving the file's pages back as each is copied (resident memory stays about the
    // weights' size). Decoding streams every weight once per token, and on some machines
    // (virtual ones especially) mapped 4 KB file pages stream far slower than huge pages
    // (measured: 12x768 f32 model, one thread, ~39 vs ~64 tok/s). Load takes longer by the
    // copy; mappedWeightBytes() is then 0.
    bool weightsOnHugePages = false;
};

struct WeightInfo {
    std::string name; // Hugging Face name
    std::vector<int64_t> shape;
    std::string dtype;
    std::string fingerprint; // 16 hex digits over the tensor's bytes (as loaded, f32 on CPU)
};

class Model {
public:
    static Result<std::shared_ptr<const Model>> load(const std::string& path,
                                                     const LoadOptions& options = {});
    // Devices this build of libtorch can run on: always "cpu", plus "cuda:N" per GPU.
    static std::vector<std::string> availableDevices();
    // Sets libtorch's intra-op threads to the core count (called by load()).
    static void configureThreads();
    // Sets libtorch's intra-op thread count (process-wide); returns the previous value.
    static int setThreads(int n);
    // A model of the given shape with random weights (normal, std `stddev`; norms 1, or
    // 1 + N(0, 5 stddev) in models with q/k or output norms; GPT-2's LayerNorm biases drawn
    // like the weights), for benchmarks and tests. Deterministic for a seed. No tokenizer.
    static Result<std::shared_ptr<const Model>> createRandom(const ModelConfig& config,
                                                             uint64_t seed,
                                                             const std::string& device = "cpu",
                                                             double stddev = 0.02);

    const ModelConfig& config() const;
    const std::string& path() const;
    std::string device() const;
    std::string computeDtype() const;
    // The dtype of the caches this model's fresh sessions make (LoadOptions::cacheDtype).
    std::string cacheDtype() const;
    // Whether cached keys are rotated by RoPE (false for learned positions, e.g. GPT-2).
    bool usesRope() const;
    // May be null when no tokenizer was found (token ids still work).
    std::shared_ptr<const tok::Tokenizer> tokenizer() const;
    std::vector<WeightInfo> weights() const;
    // Fingerprint of the whole model: config + every weight fingerprint.
    std::string fingerprint() const;
    int64_t parameterCount() const;
    // Bytes of weights used in place from the model file's memory mapping rather than copied
    // (f32/f16/bf16 tensors in their stored layout; not the llama q/k rows permuted at load,
    // dequantized or narrowed ones). 0 for a random model.
    int64_t mappedWeightBytes() const;
    // Bytes of the weights the forward pass reads, as it holds them: about half the f32 size
    // for a bf16/f16 checkpoint on the CPU (its matrices stay 16-bit), all f32 with --dtype f32.
    int64_t computeWeightBytes() const;

    struct Impl;
    const Impl& impl() const { return *m_impl; }
    explicit Model(std::unique_ptr<Impl> impl);
    ~Model();

private:
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvscope
