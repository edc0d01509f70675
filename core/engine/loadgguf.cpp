// Loader for GGUF files of the llama family (general.architecture llama, mistral, qwen2, qwen3,
// gemma2, gemma3).
// Tensors F32/F16/BF16 keep their dtype and are used in place from the file's mapping, and so
// are quantized matrices (Q4_0 … Q8_0, the K quants, IQ4_NL/IQ4_XS): their blocks, read by
// qdot.h's kernels (Model widens them only for a GPU or an explicit --dtype, with llama.cpp's
// dequantization). GGUF stores llama q/k rows in the
// interleaved RoPE layout (llama.cpp permutes HF weights when converting), so they are permuted
// back to the half layout here; qwen2/3 and gemma GGUFs use NEOX (half) RoPE already. Gemma
// norms are stored as the scale they multiply by (llama.cpp's converter adds Gemma's 1), as
// ModelConfig holds them.
#include "engine/modelimpl.h"
#include "engine/qdot.h"
#include "engine/tensorconv.h"
#include "formats/gguf.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace kvscope {

namespace {

// F32, F16 and BF16 tensors are used in place from the file's mapping, and so are the blocks
// of quantized matrices the engine has kernels for (qdot.h): a uint8 [rows, bytes per row] view,
// recorded in `quant`. Other quantized tensors (vectors) are dequantized to a copy and their
// pages given back.
at::Tensor readTensor(const gguf::File& f, const gguf::TensorInfo& t,
                      std::optional<QuantInfo>& quant) {
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend()); // GGUF ne[0] is fastest
    const auto span = f.data(t);
    quant.reset();
    switch (t.type) {
    case gguf::TensorType::F32:
        return mappedTensor(f.mapping(), span.data(), shape, at::kFloat);
    case gguf::TensorType::F16:
        return mappedTensor(f.mapping(), span.data(), shape, at::kHalf);
    case gguf::TensorType::BF16:
        return mappedTensor(f.mapping(), span.data(), shape, at::kBFloat16);
    default:
        if (shape.size() == 2 && shape[0] > 0 && qdot::hasKernel(t.type)) {
            quant = QuantInfo{t.type, shape};
            const int64_t rowBytes = static_cast<int64_t>(span.size()) / shape[0];
            return mappedTensor(f.mapping(), span.data(), {shape[0], rowBytes}, at::kByte);
        }
        {
            // throws for unsupported types, naming tensor and type
            auto* values = new std::vector<float>(f.readF32(t));
            f.mapping()->release(span.data(), span.size());
            return at::from_blob(
                values->data(), shape, [values](void*) { delete values; }, at::kFloat);
        }
    }
}

// GGUF tensor names -> Hugging Face names (layer tensors: the part after "blk.N."). Gemma's
// four norms a layer: ffn_norm is its pre-FFN norm there.
std::optional<std::string> hfName(const std::string& name, bool gemma, bool phi3) {
    if (name == "token_embd.weight")
        return "model.embed_tokens.weight";
    if (name == "output_norm.weight")
        return "model.norm.weight";
    if (name == "output.weight")
        return "lm_head.weight";
    if (name.rfind("blk.", 0) != 0)
        return std::nullopt;
    static const std::map<std::string, std::string> names = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    };
    static const std::map<std::string, std::string> gemmaNorms = {
        {"post_attention_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    };
    const auto dot = name.find('.', 4);
    if (dot == std::string::npos)
        return std::nullopt;
    // Phi-3: one fused q/k/v matrix, and ffn_up holds gate and up (llama.cpp's SwiGLU split).
    static const std::map<std::string, std::string> phi3Fused = {
        {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
        {"ffn_up.weight", "mlp.gate_up_proj.weight"},
    };
    const std::string rest = name.substr(dot + 1);
    const auto& table = gemma && gemmaNorms.count(rest) ? gemmaNorms
                        : phi3 && phi3Fused.count(rest) ? phi3Fused
                                                        : names;
    const auto it = table.find(rest);
    if (it == table.end())
        return std::nullopt; // e.g. rope_freqs: read into the config (Llama 3 scaling)
    return "model.layers." + name.substr(4, dot - 4) + "." + it->second;
}

// Gemma 2/3's hyperparameters, with llama.cpp's defaults where a key is absent: GeGLU, four
// norms a layer, embeddings times sqrt(dim); soft-capping (Gemma 2: 50 / 30); sliding-window
// layers by pattern (every n-th layer global: Gemma 2 n = 2, window 4096; Gemma 3 n = 6, only
// when the file gives a window) with Gemma 3's own RoPE base there (rope.freq_base_swa, 10000);
// the 27B models scale scores by 1/sqrt(dim / heads) instead of 1/sqrt(head_dim).
void readGemma(const gguf::File& f, const std::string& arch, ModelConfig& c, ConfigKeyNames& keys) {
    auto key = [&](const char* k) { return arch + "." + k; };
    const bool gemma2 = arch == "gemma2";
    c.activation = "gelu_tanh";
    c.postNorms = true;
    c.embedScale = std::sqrt(static_cast<double>(c.dim));
    if (gemma2) {
        c.attnSoftcap =
            f.has(key("attn_logit_softcapping")) ? f.getF64(key("attn_logit_softcapping")) : 50.0;
        c.finalSoftcap =
            f.has(key("final_logit_softcapping")) ? f.getF64(key("final_logit_softcapping")) : 30.0;
    } else if (f.has(key("final_logit_softcapping"))) {
        c.finalSoftcap = f.getF64(key("final_logit_softcapping"));
    }
    keys["attn_softcap"] = key("attn_logit_softcapping");
    keys["final_softcap"] = key("final_logit_softcapping");
    keys["sliding_window"] = key("attention.sliding_window");
    keys["sliding_layers"] = key("attention.sliding_window_pattern");
    keys["rope_theta_local"] = key("rope.freq_base_swa");
    const bool hasWindow = f.has(key("attention.sliding_window"));
    c.slidingWindow = hasWindow ? f.getI64(key("attention.sliding_window")) : (gemma2 ? 4096 : 0);
    if (c.slidingWindow > 0) {
        c.slidingLayers.assign(static_cast<size_t>(std::max<int64_t>(0, c.nLayers)), false);
        const std::string patternKey = key("attention.sliding_window_pattern");
        const gguf::Value* pattern = f.find(patternKey);
        if (pattern && pattern->isArray()) {
            // One bool per layer.
            const auto& bytes = pattern->packed();
            if (pattern->elementType() != gguf::ValueType::Bool ||
                int64_t(bytes.size()) != c.nLayers)
                throw KvError(f.path() + ": " + patternKey + " holds " +
                              std::to_string(pattern->size()) + " values; expected one bool " +
                              "for each of the " + std::to_string(c.nLayers) + " layers");
            for (int64_t l = 0; l < c.nLayers; ++l)
                c.slidingLayers[size_t(l)] = bytes[size_t(l)] != 0;
        } else {
            const int64_t n = pattern ? f.getI64(patternKey) : (gemma2 ? 2 : 6);
            if (n < 0 || n > 1024)
                throw KvError(f.path() + ": " + patternKey + " = " + std::to_string(n) +
                              " is outside 0..1024");
            c.slidingLayers = slidingPattern(c.nLayers, n);
        }
        if (!gemma2)
            c.ropeThetaLocal =
                f.has(key("rope.freq_base_swa")) ? f.getF64(key("rope.freq_base_swa")) : 10000.0;
    }
    if ((gemma2 && c.nLayers == 46) || (!gemma2 && c.nLayers == 62))
        c.attentionScale = 1.0 / std::sqrt(static_cast<double>(c.dim / c.nHeads));
}

int elementBytes(gguf::TensorType type) {
    switch (type) {
    case gguf::TensorType::F32:
        return 4;
    case gguf::TensorType::F16:
    case gguf::TensorType::BF16:
        return 2;
    default:
        return 0; // quantized blocks
    }
}

} // namespace

LoadedCheckpoint loadGguf(const std::string& path) {
    auto opened = gguf::File::open(path);
    if (!opened)
        throw KvError(opened.message());
    const gguf::File& f = opened.value();
    const std::string arch = f.getString("general.architecture");
    static const std::map<std::string, std::string> kHfArchitecture = {
        {"llama", "LlamaForCausalLM"},   {"mistral", "MistralForCausalLM"},
        {"qwen2", "Qwen2ForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"},
        {"gemma2", "Gemma2ForCausalLM"}, {"gemma3", "Gemma3ForCausalLM"},
        {"phi3", "Phi3ForCausalLM"},
    };
    if (!kHfArchitecture.count(arch))
        throw KvError(path + ": general.architecture '" + arch +
                      "' is not supported (supported: llama, mistral, qwen2, qwen3, gemma2, "
                      "gemma3, phi3)");
    const bool gemma = arch == "gemma2" || arch == "gemma3";
    const bool phi3 = arch == "phi3";
    auto key = [&](const char* k) { return arch + "." + k; };

    LoadedCheckpoint ck;
    ck.mappings.push_back(f.mapping());
    auto& c = ck.config;
    c.architecture = "llama";
    c.hfArchitecture = kHfArchitecture.at(arch);
    c.sourceFormat = "gguf";
    // Every key a check may name, as this file spells it.
    const bool hasKvHeads = f.has(key("attention.head_count_kv"));
    const bool hasKeyLength = f.has(key("attention.key_length"));
    ConfigKeyNames keys = {
        {"dim", key("embedding_length")},
        {"hidden_dim", key("feed_forward_length")},
        {"n_layers", key("block_count")},
        {"n_heads", key("attention.head_count")},
        {"n_kv_heads", hasKvHeads ? key("attention.head_count_kv")
                                  : key("attention.head_count") + " (no head_count_kv)"},
        {"head_dim", hasKeyLength ? key("attention.key_length")
                                  : "head_dim (" + key("embedding_length") + " / " +
                                        key("attention.head_count") + ")"},
        {"max_context", key("context_length")},
        {"norm_eps", key("attention.layer_norm_rms_epsilon")},
        {"rope_theta", key("rope.freq_base")},
        {"rope_scaling.type", key("rope.scaling.type")},
        {"rope_scaling.factor", key("rope.scaling.factor")},
        {"vocab_size", "token_embd.weight rows"},
    };
    c.dim = f.getI64(key("embedding_length"));
    c.hiddenDim = f.getI64(key("feed_forward_length"));
    c.nLayers = f.getI64(key("block_count"));
    c.nHeads = f.getI64(key("attention.head_count"));
    c.nKvHeads = hasKvHeads ? f.getI64(key("attention.head_count_kv")) : c.nHeads;
    // The attention layout is checked before any tensor is read or permuted by head: a head
    // count that does not divide the width would otherwise fail deep inside libtorch. Sizes
    // that are not positive are validateConfig's to name.
    if (!hasKeyLength && c.nHeads > 0 && c.dim > 0 && c.dim % c.nHeads != 0)
        throw KvError(path + ": " + key("attention.head_count") + " = " + std::to_string(c.nHeads) +
                      " does not divide " + key("embedding_length") + " = " +
                      std::to_string(c.dim));
    c.headDim = hasKeyLength ? f.getI64(key("attention.key_length"))
                             : (c.nHeads > 0 ? c.dim / c.nHeads : 0);
    c.maxContext = f.getI64(key("context_length"));
    c.normEps = f.getF64(key("attention.layer_norm_rms_epsilon"));
    c.ropeTheta = f.has(key("rope.freq_base")) ? f.getF64(key("rope.freq_base")) : 10000.0;
    if (f.has(key("rope.scaling.type"))) {
        const std::string t = f.getString(key("rope.scaling.type"));
        if (t == "linear") {
            c.ropeScaling.type = "linear";
            c.ropeScaling.factor = f.getF64(key("rope.scaling.factor"));
        } else if (t != "none") {
            throw KvError(path + ": " + key("rope.scaling.type") + " '" + t + "' is not supported");
        }
    }
    // Llama 3.1 / 3.2: llama.cpp's converter writes the scaling as one divisor per frequency
    // (rope_freqs.weight) and no scaling keys. Every Llama 3 checkpoint blends with low 1, high 4
    // over 8,192 original positions, the factor being the largest divisor: those parameters
    // are taken when they give the file's divisors, and anything else is refused by name.
    if (const gguf::TensorInfo* freqs = f.tensor("rope_freqs.weight");
        freqs && (arch == "llama" || arch == "mistral")) {
        const std::vector<float> divisors = f.readF32(*freqs);
        const float factor =
            divisors.empty() ? 1.0f : *std::max_element(divisors.begin(), divisors.end());
        ModelConfig guess = c;
        guess.ropeScaling.type = "llama3";
        guess.ropeScaling.factor = factor;
        guess.ropeScaling.lowFreqFactor = 1.0;
        guess.ropeScaling.highFreqFactor = 4.0;
        guess.ropeScaling.originalMaxPositions = 8192;
        const std::vector<float> expected = c.headDim > 0 && c.headDim % 2 == 0 && c.ropeTheta > 0
                                                ? llama3FreqFactors(guess)
                                                : std::vector<float>{};
        bool same = expected.size() == divisors.size();
        for (size_t i = 0; same && i < divisors.size(); ++i)
            same = std::abs(expected[i] - divisors[i]) <= 1e-5f * std::abs(expected[i]);
        if (!same)
            throw KvError(path + ": tensor 'rope_freqs.weight' holds " +
                          std::to_string(divisors.size()) +
                          " frequency divisors that are not Llama 3's scaling (factor " +
                          std::to_string(factor) +
                          ", low 1, high 4, 8192 original positions, head_dim / 2 values); "
                          "other per-frequency factors are not supported");
        if (factor != 1.0f) {
            c.ropeScaling = guess.ropeScaling;
            keys["rope_scaling.type"] = "rope_freqs.weight";
            keys["rope_scaling.factor"] = "rope_freqs.weight";
        }
    }
    c.attentionBias = arch == "qwen2";
    c.qkNorm = arch == "qwen3" || arch == "gemma3";
    if (gemma)
        readGemma(f, arch, c, keys);
    if (phi3) {
        // Phi-3 128k's long-RoPE factors: two tensors of head_dim / 2 divisors and an
        // attention factor (llama.cpp's converter writes them; RopeScaling says which is used).
        const gguf::TensorInfo* longF = f.tensor("rope_factors_long.weight");
        const gguf::TensorInfo* shortF = f.tensor("rope_factors_short.weight");
        if (longF || shortF) {
            if (!longF || !shortF)
                throw KvError(path + ": tensor 'rope_factors_" + (longF ? "short" : "long") +
                              ".weight' is missing (long-RoPE needs both factor tensors)");
            auto& s = c.ropeScaling;
            s.type = "longrope";
            const std::vector<float> l = f.readF32(*longF), sh = f.readF32(*shortF);
            s.longFactor.assign(l.begin(), l.end());
            s.shortFactor.assign(sh.begin(), sh.end());
            const std::string orig = key("rope.scaling.original_context_length");
            s.originalMaxPositions = f.has(orig) ? f.getI64(orig) : c.maxContext;
            s.factor = s.originalMaxPositions > 0
                           ? double(c.maxContext) / double(s.originalMaxPositions)
                           : 1.0;
            const std::string attn = key("rope.scaling.attn_factor");
            s.attentionFactor = f.has(attn) ? f.getF64(attn) : 1.0;
            keys["rope_scaling.original_max_position_embeddings"] = orig;
            keys["rope_scaling.long_factor"] = "rope_factors_long.weight";
            keys["rope_scaling.short_factor"] = "rope_factors_short.weight";
            keys["rope_scaling.attention_factor"] = attn;
        }
        // Phi-3 mini attends over a window on every layer (its config.json's sliding_window;
        // llama.cpp reads the key but disables the window, so the two differ past it).
        if (f.has(key("attention.sliding_window")) &&
            f.getI64(key("attention.sliding_window")) > 0) {
            c.slidingWindow = f.getI64(key("attention.sliding_window"));
            c.slidingLayers.assign(static_cast<size_t>(std::clamp<int64_t>(c.nLayers, 0, 1024)),
                                   true);
            keys["sliding_window"] = key("attention.sliding_window");
        }
    }
    c.bosId = f.has("tokenizer.ggml.bos_token_id") ? f.getI32("tokenizer.ggml.bos_token_id") : -1;
    c.eosId = f.has("tokenizer.ggml.eos_token_id") ? f.getI32("tokenizer.ggml.eos_token_id") : -1;
    // The vocabulary is the embedding's row count (GGUF ne[1]).
    const gguf::TensorInfo* embInfo = f.tensor("token_embd.weight");
    if (!embInfo)
        throw KvError(path + ": missing tensor 'token_embd.weight'");
    c.vocabSize = embInfo->dims.size() == 2 ? embInfo->dims[1] : 0;
    if (embInfo->dims.size() != 2)
        throw KvError(path + ": tensor 'token_embd.weight' has shape " + shapeText(embInfo->dims) +
                      " but the config implies [" + key("embedding_length") + ", vocabulary]");
    validateConfig(c, path, keys);
    // One head_dim serves keys, values and the rotation: a file that says otherwise describes
    // a model this engine would run wrongly.
    if (f.has(key("attention.value_length")) &&
        f.getI64(key("attention.value_length")) != c.headDim)
        throw KvError(path + ": " + key("attention.value_length") + " = " +
                      std::to_string(f.getI64(key("attention.value_length"))) +
                      " differs from the key length " + std::to_string(c.headDim) +
                      " (separate value head sizes are not supported)");
    if (f.has(key("rope.dimension_count")) && f.getI64(key("rope.dimension_count")) != c.headDim)
        throw KvError(path + ": " + key("rope.dimension_count") + " = " +
                      std::to_string(f.getI64(key("rope.dimension_count"))) +
                      " differs from head_dim " + std::to_string(c.headDim) +
                      ": this engine rotates whole heads (partial RoPE is not supported)");

    // Every tensor's stored shape against the config, before any is read, reshaped or
    // permuted, so the message names the file's tensor and both shapes.
    for (const auto& t : f.tensors())
        if (const auto name = hfName(t.name, gemma, phi3))
            checkLlamaWeightShape(c, *name, std::vector<int64_t>(t.dims.rbegin(), t.dims.rend()),
                                  path, t.name, true);

    std::map<std::string, int> typeCount;
    auto& w = ck.weights;
    const bool interleaved = arch == "llama" || arch == "mistral";
    int order = 0;
    for (const auto& t : f.tensors()) {
        typeCount[gguf::typeName(t.type)]++;
        const auto name = hfName(t.name, gemma, phi3);
        if (!name)
            continue;
        std::optional<QuantInfo> quant;
        at::Tensor x = readTensor(f, t, quant);
        if (quant)
            ck.quantized[*name] = *quant;
        int64_t permutedHeads = 0;
        if (interleaved && t.name.find(".attn_q.") != std::string::npos)
            permutedHeads = c.nHeads;
        if (interleaved && t.name.find(".attn_k.") != std::string::npos)
            permutedHeads = c.nKvHeads;
        if (permutedHeads > 0) {
            // A copy in the half-split layout; the file's pages are not read again.
            x = permuteInterleavedToHalf(x, permutedHeads);
            const auto span = f.data(t);
            f.mapping()->release(span.data(), span.size());
        }
        w[*name] = x;
        const int bytes = elementBytes(t.type);
        ck.sources[*name] = {
            path, t.name, order++, permutedHeads, bytes > 0 ? static_cast<int64_t>(t.offset) : -1,
            bytes};
    }
    splitFusedWeights(c, ck);
    // llama.cpp writes output.weight even when it equals the embedding; keep it (the
    // forward uses it either way) but record tying when it is absent. Gemma 2 always projects
    // with the embedding (llama.cpp ignores an output.weight there).
    if (arch == "gemma2") {
        w.erase("lm_head.weight");
        ck.sources.erase("lm_head.weight");
    }
    c.tiedEmbeddings = !w.count("lm_head.weight");
    const auto most = std::max_element(typeCount.begin(), typeCount.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
    std::string dtype = most == typeCount.end() ? "F32" : most->first;
    std::transform(dtype.begin(), dtype.end(), dtype.begin(), ::tolower);
    c.weightDtype = dtype;
    // The embedded vocabulary, unless the file says it has none (llama.cpp's "none", or
    // "no_vocab" as kvscope's export of a model without a tokenizer writes).
    const bool noVocab =
        f.has("tokenizer.ggml.model") && (f.getString("tokenizer.ggml.model") == "none" ||
                                          f.getString("tokenizer.ggml.model") == "no_vocab");
    if (!noVocab)
        ck.tokenizerPath = path;
    return ck;
}

} // namespace kvscope
