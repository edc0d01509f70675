// ModelConfig: the architecture facts of a loaded model, as a plain value.
//
// Recorded in every snapshot (it is part of the state ledger) and compared on restore, so
// every field that changes the math is here. Thread-safe as any const value.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kvscope {

// RoPE frequency scaling, as Hugging Face's `rope_scaling` describes it.
struct RopeScaling {
    std::string type = "none"; // none | linear | dynamic | llama3 | yarn | longrope
    double factor = 1.0;
    double lowFreqFactor = 1.0;       // llama3
    double highFreqFactor = 4.0;      // llama3
    int64_t originalMaxPositions = 0; // llama3, dynamic, yarn
    double betaFast = 32.0;           // yarn
    double betaSlow = 1.0;            // yarn
    // longrope (Phi-3 128k): every frequency divided by its factor, the long ones when the
    // model's context exceeds originalMaxPositions (llama.cpp's rule for a context of that
    // size; transformers switches per forward pass by the longest sequence so far, so its
    // first originalMaxPositions tokens are rotated with the short ones); cos and sin are
    // multiplied by attentionFactor.
    std::vector<double> shortFactor, longFactor; // head_dim / 2 each
    double attentionFactor = 1.0;
    bool usesLongFactors(int64_t maxContext) const { return maxContext > originalMaxPositions; }
    bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
    // "llama" (Llama, Mistral, Qwen2/3, Gemma 2/3: one forward pass with the switches below)
    // or "gpt2"
    std::string architecture = "llama";
    std::string hfArchitecture; // e.g. LlamaForCausalLM, Gemma2ForCausalLM, GPT2LMHeadModel
    std::string sourceFormat;   // llama2c | gguf | hf
    int64_t dim = 0;            // hidden size
    int64_t hiddenDim = 0;      // FFN inner size
    int64_t nLayers = 0;
    int64_t nHeads = 0;
    int64_t nKvHeads = 0;
    int64_t headDim = 0;
    int64_t vocabSize = 0;
    int64_t maxContext = 0; // maximum positions (llama2.c seq_len, HF max_position_embeddings)
    double normEps = 1e-5;
    std::string normType = "rmsnorm"; // rmsnorm | layernorm
    // silu (SwiGLU) | gelu_tanh (GeGLU with the tanh approximation: Gemma) | gelu_new (GPT-2 MLP)
    std::string activation = "silu";
    double ropeTheta = 10000.0; // llama family only
    RopeScaling ropeScaling;
    // Keys in the cache are post-RoPE in the "half" layout (HF rotate_half); checkpoints in the
    // interleaved-pair layout (llama2.c, GGUF) have their q/k rows permuted at load.
    std::string ropeLayout = "half";
    bool tiedEmbeddings = false;
    bool attentionBias = false;      // q/k/v projections have biases (Qwen2, GPT-2)
    std::string weightDtype = "f32"; // f32 | f16 | bf16 as stored in the checkpoint
    int32_t bosId = -1;
    int32_t eosId = -1;

    // Llama-family variations (all off for Llama itself). Norm weights are held as the scale
    // they multiply by: Gemma's checkpoints store scale - 1, the loaders add the 1.
    bool qkNorm = false;         // RMSNorm of each q and k head before RoPE (Qwen3, Gemma 3)
    bool postNorms = false;      // RMSNorm of the attention and FFN outputs (Gemma 2/3)
    double embedScale = 1.0;     // embeddings are multiplied by it (Gemma: sqrt(dim))
    double attentionScale = 0.0; // scores = q.k * it; 0: 1/sqrt(head_dim)
    double attnSoftcap = 0.0;    // scores = cap * tanh(scores / cap) before the mask; 0: off
    double finalSoftcap = 0.0;   // the same on the logits (Gemma 2: 50 and 30)
    // Sliding-window attention: on a layer marked in slidingLayers (one entry per layer, or
    // empty for none) a query at position p sees only keys at positions p - window + 1 .. p.
    int64_t slidingWindow = 0;
    std::vector<bool> slidingLayers;
    double ropeThetaLocal = 0.0; // RoPE base of sliding layers, unscaled; 0: rope_theta

    int64_t kvGroups() const { return nKvHeads > 0 ? nHeads / nKvHeads : 0; }
    bool isSliding(int64_t layer) const {
        return slidingWindow > 0 && layer >= 0 && layer < int64_t(slidingLayers.size()) &&
               slidingLayers[size_t(layer)];
    }
    // The factor scores are multiplied by.
    double scoreScale() const;
    bool operator==(const ModelConfig&) const = default;
};

nlohmann::json toJson(const ModelConfig& config);
// Gemma's layer pattern: every n-th layer (the n-th, 2n-th, ...) global, the others sliding;
// n = 0 makes every layer sliding (llama.cpp's reading of a pattern of 0).
std::vector<bool> slidingPattern(int64_t layers, int64_t n);
// How the config departs from a plain Llama, one phrase each ("q/k norms", "GeGLU", "sliding
// window 512 on 22 of 26 layers (RoPE base 10000 there)", ...); empty for a Llama. What
// `kvscope-cli info` and the GUI's model line show.
std::vector<std::string> configVariations(const ModelConfig& config);
// llama.cpp's name for the architecture (its GGUF `general.architecture` and the arch string
// of its session files): "llama" for Llama, Mistral and llama2.c models, "qwen2", "qwen3",
// "gemma2", "gemma3", "phi3", "gpt2".
std::string llamaCppArchitecture(const ModelConfig& config);
// Throws KvError naming the missing/invalid field.
ModelConfig modelConfigFromJson(const nlohmann::json& j);
// A file's own name for the ModelConfig fields a check may name, by the name toJson gives
// them ("n_kv_heads" -> "llama.attention.head_count_kv" for a GGUF, "num_key_value_heads"
// for a config.json; "rope_scaling.factor" for the scaling factor). A field missing here is
// named as toJson names it.
using ConfigKeyNames = std::map<std::string, std::string>;

// Checks that the engine can run the config: sizes in range, KV heads divide heads, head_dim
// even for RoPE, norm_eps in (0, 1), rope_theta finite and positive, a supported rope_scaling
// with a finite positive factor. Throws KvError "<what>: <key> = <value> ..." on the first
// problem, <key> as `keys` names the field. Every loader, the snapshot reader and the random
// model builder call it, so the GUI and the CLI refuse the same configs with the same words.
void validateConfig(const ModelConfig& config, const std::string& what,
                    const ConfigKeyNames& keys = {});

} // namespace kvscope
