// Core-internal: the libtorch side of Model, the per-architecture forward functions and the
// hook they report intermediates through. Include only from core .cpp files.
#pragma once

#include "engine/convert.h"
#include "engine/kvcacheimpl.h"
#include "engine/model.h"
#include "engine/qmatrix.h"
#include "formats/mappedfile.h"

#include <functional>
#include <map>
#include <optional>
#include <ATen/ATen.h>

namespace kvscope {

// Named-intermediate hook used by the forward passes (see observer.h for names/shapes).
// `t` may be replaced by the hook: that is how patching and transplants work.
class ForwardHook {
public:
    virtual ~ForwardHook() = default;
    virtual bool wants(const char* name, int layer) const = 0;
    virtual void on(const char* name, int layer, at::Tensor& t) = 0;
};

struct LayerWeights {
    at::Tensor attnNorm, attnNormBias;    // [C]
    Matrix wq, wk, wv, wo;                // [out, in]
    at::Tensor bq, bk, bv, bo;            // optional biases
    at::Tensor ffnNorm, ffnNormBias;      // [C]
    Matrix wGate, wUp, wDown;             // llama SwiGLU: [F, C], [F, C], [C, F]
    at::Tensor bUp, bDown;                // GPT-2 MLP biases (wUp = c_fc, wDown = c_proj)
    at::Tensor qNorm, kNorm;              // [D] per-head q/k RMSNorm (config.qkNorm)
    at::Tensor postAttnNorm, postFfnNorm; // [C] output norms (config.postNorms)
};

struct ArchitectureOps;

// Where a weight came from, so that messages name the file's own tensor (weightcheck.cpp).
struct WeightSource {
    std::string file;          // the file holding it (a shard for sharded checkpoints)
    std::string name;          // its name there: "blk.0.attn_q.weight", "wq (layer 0)"
    int order = 0;             // its position in the file: scans report the first in file order
    int64_t permutedHeads = 0; // > 0: rows permuted from the interleaved RoPE layout at load
    int64_t fileOffset = -1;   // byte offset of element 0 when the elements are stored plainly,
    int elementBytes = 0;      // and their size (0 otherwise: quantized blocks)
};

struct Model::Impl {
    ModelConfig config;
    // The architecture's operations, chosen once by bind() from config.architecture; every
    // later dispatch (forward, RoPE questions) goes through it, never through the name.
    const ArchitectureOps* arch = nullptr;
    std::string path;
    at::Device device{at::kCPU};
    at::ScalarType dtype = at::kFloat; // compute: activations, norms, biases
    // The KV cache's dtype when it differs from `dtype` (LoadOptions::cacheDtype); unset: the
    // compute dtype. Only a fresh cache takes it: a non-empty one keeps its own dtype.
    std::optional<at::ScalarType> cacheType;
    at::ScalarType cacheDtype() const { return cacheType.value_or(dtype); }
    // CPU models computing in f32 keep matrices as stored: bf16/f16 in their 16 bits (dense()
    // widens them in registers), ggml-quantized ones in their blocks (qdot.h), used in place from
    // the file: decoding streams the file's bytes, not a float32 copy's.
    bool keepStoredMatrices = false;
    // Every weight by its Hugging Face name, in the HF layout (GPT-2 Conv1D weights as
    // stored: [in, out]). Immutable after load. A quantized weight is its rows' raw blocks,
    // uint8 [out, bytes per row]; `quantized` gives its type and logical shape.
    std::map<std::string, at::Tensor> named;
    std::map<std::string, QuantInfo> quantized;
    std::map<std::string, WeightSource> sources; // by HF name; may lack some (random models)
    std::shared_ptr<const tok::Tokenizer> tokenizer;

    // Bound views used by the forward passes (filled by bind()).
    Matrix embed, lmHead;
    at::Tensor posEmbed, finalNorm, finalNormBias;
    std::vector<LayerWeights> layers;
    at::Tensor invFreq; // [head_dim / 2] float32, RoPE scaling applied
    // Sliding-window layers' frequencies where they differ (config.ropeThetaLocal: Gemma 3).
    at::Tensor invFreqLocal;
    // longrope's attention factor (cos and sin are multiplied by it); 1 otherwise.
    double ropeScale = 1.0;
    // The frequencies layer `l` rotates its queries and keys with.
    const at::Tensor& layerInvFreq(int64_t l) const {
        return invFreqLocal.defined() && config.isSliding(l) ? invFreqLocal : invFreq;
    }
    double layerRopeScale(int64_t l) const {
        return invFreqLocal.defined() && config.isSliding(l) ? 1.0 : ropeScale;
    }

    // Per-weight fingerprints and the model fingerprint, computed once at load (hashing every
    // weight on each call made restore validation slow).
    std::vector<WeightInfo> weightInfos;
    std::string modelFingerprint;
    // Bytes of `named` used in place from the model file's mapping (not copied).
    int64_t mappedBytes = 0;
    void computeFingerprints();

    const at::Tensor& get(const std::string& name) const;
    // Every bound view above (undefined ones included), for code that walks them all.
    std::vector<at::Tensor*> boundWeights();
    // Moves weights to device/dtype and fills the bound views; throws KvError naming a
    // missing or mis-shaped tensor.
    void bind();
    // CPU only, after bind(): the weights of 64 KB or more that are not used in place from
    // one of `mappings` (copied at load: permuted, dequantized, widened, random) move into
    // one buffer on huge pages (emptyOnLargePages), one tensor at a time, so the old copy is
    // released before the next is made. With `mappedToo` the mapped ones move as well and
    // their file pages are given back (MappedFile::release). Values are unchanged.
    void placeOwnedWeights(const std::vector<std::shared_ptr<const MappedFile>>& mappings,
                           bool mappedToo = false);
};

// Which rows of logits a forward pass computes: every token's, or only the last token's (a
// prompt being fed needs only the next token's distribution; the vocabulary projection of
// a 512-token chunk is a fifth of a small model's prefill).
enum class LogitRows { All, Last };

// Forward pass over T new tokens at the given positions, appending to `cache`.
// tokens: [T] int64 on the model's device. Returns logits [T, vocab] (float32), or [1, vocab]
// for LogitRows::Last.
at::Tensor forwardLlama(const Model::Impl& m, const at::Tensor& tokens,
                        const std::vector<int64_t>& positions, KvCache::Impl& cache,
                        ForwardHook* hook, LogitRows rows);
at::Tensor forwardGpt2(const Model::Impl& m, const at::Tensor& tokens,
                       const std::vector<int64_t>& positions, KvCache::Impl& cache,
                       ForwardHook* hook, LogitRows rows);
// The same from layer `from` on, given the residual stream entering it (x [T, C], model dtype
// and device): layers [from, n_layers) append their K/V to `cache`; lower layers' slots are
// reserved but not written. Residual checkpoints rebuild K/V this way.
at::Tensor forwardLlamaFrom(const Model::Impl& m, at::Tensor x, int from,
                            const std::vector<int64_t>& positions, KvCache::Impl& cache,
                            ForwardHook* hook, LogitRows rows);
at::Tensor forwardGpt2From(const Model::Impl& m, at::Tensor x, int from,
                           const std::vector<int64_t>& positions, KvCache::Impl& cache,
                           ForwardHook* hook, LogitRows rows);
// Layer `layer`'s K and V ([kv_heads, T, D]) projected from the residual stream entering it
// (x [T, C]): the attention norm, the K/V projections and RoPE, the rest of the layer not run.
std::pair<at::Tensor, at::Tensor> projectKvLlama(const Model::Impl& m, int layer,
                                                 const at::Tensor& x,
                                                 const std::vector<int64_t>& positions);
std::pair<at::Tensor, at::Tensor> projectKvGpt2(const Model::Impl& m, int layer,
                                                const at::Tensor& x,
                                                const std::vector<int64_t>& positions);

// One entry per supported architecture (one file each: llama.cpp, gpt2.cpp).
struct ArchitectureOps {
    const char* name; // ModelConfig::architecture
    void (*bind)(Model::Impl& m);
    at::Tensor (*forward)(const Model::Impl& m, const at::Tensor& tokens,
                          const std::vector<int64_t>& positions, KvCache::Impl& cache,
                          ForwardHook* hook, LogitRows rows);
    at::Tensor (*forwardFrom)(const Model::Impl& m, at::Tensor x, int from,
                              const std::vector<int64_t>& positions, KvCache::Impl& cache,
                              ForwardHook* hook, LogitRows rows);
    std::pair<at::Tensor, at::Tensor> (*projectKv)(const Model::Impl& m, int layer,
                                                   const at::Tensor& x,
                                                   const std::vector<int64_t>& positions);
    bool rope; // keys are rotated by RoPE (post-RoPE keys in the cache)
    // Model::createRandom's weights, drawn in one order from `gen`; null: no random models.
    void (*randomWeights)(const ModelConfig& c, std::map<std::string, at::Tensor>& weights,
                          at::Generator& gen, double stddev);
    bool layerNorm; // its norms are LayerNorm with a bias (GPT-2), not RMSNorm: the final
                    // norm (finalNormed) and the logit lens's frozen scale follow it
};
// The entry for `name`, or null when unsupported.
const ArchitectureOps* findArchitecture(const std::string& name);

// What a loader produces: the config and HF-named weights (CPU tensors, checkpoint dtype).
struct LoadedCheckpoint {
    ModelConfig config;
    std::map<std::string, at::Tensor> weights;
    std::map<std::string, WeightSource> sources; // by HF name
    std::map<std::string, QuantInfo> quantized;  // the weights kept as quantized blocks
    std::string tokenizerPath; // suggested tokenizer file, if the format implies one
    // The file mappings the weights were read from (tensors may use them in place).
    std::vector<std::shared_ptr<const MappedFile>> mappings;
};

// Weight checks (weightcheck.cpp).
std::string shapeText(const std::vector<int64_t>& shape); // "[64, 65]"
// The shape the llama forward pass needs for an HF-named weight; nullopt for a name it does
// not use. The one statement of the llama layout: bind() and the loaders' checks use it.
std::optional<std::vector<int64_t>> llamaWeightShape(const ModelConfig& config,
                                                     const std::string& hfName);
// For a weight the llama forward pass uses, throws KvError "<file>: tensor '<fileName>' has
// shape [..] but the config implies [..]" when `hfShape` (HF order) differs. `fileOrder`:
// print shapes reversed, as GGUF lists them (fastest dimension first).
void checkLlamaWeightShape(const ModelConfig& config, const std::string& hfName,
                           const std::vector<int64_t>& hfShape, const std::string& file,
                           const std::string& fileName, bool reversedInFile);
// The first weight element, in file order, that is NaN or infinite: "<file>: tensor '<name>'
// holds NaN at element N (byte B of the file)"; empty when every weight is finite. Reads every
// weight: for failure paths only.
std::string findNonFiniteWeight(const Model::Impl& m);

// Phi-3's fused weights (self_attn.qkv_proj, mlp.gate_up_proj), already shape-checked, become
// the q/k/v and gate/up views the forward pass binds (row ranges of the same storage: used in
// place from the mapping); their sources name the fused tensor and the rows.
void splitFusedWeights(const ModelConfig& config, LoadedCheckpoint& ck);

// A weight to write, made only when the file is written (one at a time, so a model larger than
// memory can be written): its Hugging Face name, shape, and a function giving its values (CPU,
// any float dtype).
struct LazyWeight {
    std::string name;
    std::vector<int64_t> shape;
    std::function<at::Tensor()> values;
};
// convertToHuggingFace's writer: the folder (model.safetensors streamed, config.json,
// generation_config.json, the tokenizer's files) of a model with `config` and `weights`;
// `source` goes into the safetensors metadata. Throws KvError (the folder policy as
// convertToHuggingFace documents it).
// The folder policy of every writer of a model folder (convert, random-model): a path that is
// a file, or a folder that already holds a model (config.json) unless `overwrite`, is refused
// (KvError naming the path and --force).
void checkModelFolder(const std::string& outDir, bool overwrite);
// config.json of a Hugging Face folder for `config`, its weights stored as `torchDtype`
// ("float32", "float16", "bfloat16"): GPT2LMHeadModel's keys or the llama family's, with
// rope_scaling and Gemma's and Phi-3's extras. Convert and the trainer write it.
nlohmann::json huggingFaceConfig(const ModelConfig& config, const std::string& torchDtype);
// generation_config.json's token ids: bos_token_id and eos_token_id, each only when the model
// has one (>= 0). Convert writes it as it is; the trainer adds its sampling defaults.
nlohmann::json huggingFaceGenerationConfig(const ModelConfig& config);
void writeHuggingFaceFolder(const ModelConfig& config,
                            const std::shared_ptr<const tok::Tokenizer>& tokenizer,
                            const std::string& source, const std::vector<LazyWeight>& weights,
                            const std::string& outDir, const ConvertOptions& options);

// The random value of weight `name` (shape `shape`) of a model with `config`, drawn from `gen`:
// normal(0, stddev) for matrices and biases; norm scales 1, or 1 + N(0, 5 stddev) in models
// with q/k or output norms (so that a test against another engine tells the norms apart).
// Model::createRandom and random-model's folders share it.
at::Tensor randomWeight(const ModelConfig& config, const std::string& name,
                        const std::vector<int64_t>& shape, at::Generator& gen, double stddev);

LoadedCheckpoint loadLlama2c(const std::string& path);
LoadedCheckpoint loadGguf(const std::string& path);
LoadedCheckpoint loadHfFolder(const std::string& path);

// RoPE helpers (rope.cpp): the single place that knows about the two layouts.
// Permutes q/k projection rows from the interleaved-pair layout (llama2.c, GGUF, Meta) to
// the rotate_half layout (HF). w: [n_heads * head_dim, in] (or a bias [n_heads * head_dim]).
at::Tensor permuteInterleavedToHalf(const at::Tensor& w, int64_t nHeads);
at::Tensor permuteHalfToInterleaved(const at::Tensor& w, int64_t nHeads);
at::Tensor ropeInvFreq(const ModelConfig& config); // [head_dim/2] float32
// Llama 3's scaling as the divisor of each frequency ([head_dim / 2]): what llama.cpp's
// converter writes as the `rope_freqs.weight` tensor of a Llama 3.1 / 3.2 GGUF.
std::vector<float> llama3FreqFactors(const ModelConfig& config);
// The sliding-window layers' frequencies when config.ropeThetaLocal is set (unscaled, as
// Gemma 3's local rotary embedding); undefined otherwise.
at::Tensor ropeInvFreqLocal(const ModelConfig& config);
// x: [heads, T, head_dim]; rotates in the half layout at the given positions, cos and sin
// times `scale` (longrope's attention factor; 1 otherwise).
at::Tensor applyRope(const at::Tensor& x, const at::Tensor& invFreq,
                     const std::vector<int64_t>& positions, double scale = 1.0);

} // namespace kvscope
