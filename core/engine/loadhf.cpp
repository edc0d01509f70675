// Loader for Hugging Face model folders: config.json + model.safetensors (or a sharded
// model.safetensors.index.json) + tokenizer.json. Llama family (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM) and GPT2LMHeadModel. Weights keep their dtype
// (F32/F16/BF16); HF checkpoints are already in the rotate_half layout.
#include "engine/modelimpl.h"
#include "engine/tensorconv.h"
#include "formats/safetensors.h"
#include "util/fileio.h"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace kvscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

template <typename T> T req(const json& j, const char* key, const std::string& file) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        throw KvError(file + ": missing field '" + key + "'");
    try {
        return it->get<T>();
    } catch (const std::exception&) {
        throw KvError(file + ": field '" + key + "' has the wrong type (" + it->dump() + ")");
    }
}

template <typename T> T opt(const json& j, const char* key, T fallback, const std::string& file) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return fallback;
    return req<T>(j, key, file);
}

int32_t firstId(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return -1;
    if (it->is_array())
        return it->empty() ? -1 : (*it)[0].get<int32_t>();
    return it->is_number_integer() ? it->get<int32_t>() : -1;
}

at::Tensor toTensor(const safetensors::Checkpoint& ck, const std::string& name) {
    const auto* info = ck.tensor(name);
    at::ScalarType st;
    switch (info->dtype) {
    case safetensors::DType::F32:
        st = at::kFloat;
        break;
    case safetensors::DType::F16:
        st = at::kHalf;
        break;
    case safetensors::DType::BF16:
        st = at::kBFloat16;
        break;
    case safetensors::DType::F64:
        st = at::kDouble;
        break;
    default:
        throw KvError(ck.fileOf(name)->path() + ": tensor '" + name + "' has dtype " +
                      std::string(safetensors::dtypeName(info->dtype)) +
                      "; expected F32, F16 or BF16");
    }
    auto span = ck.fileOf(name)->data(*info);
    auto t = at::from_blob(const_cast<uint8_t*>(span.data()), info->shape, st).clone();
    return st == at::kDouble ? t.to(at::kFloat) : t;
}

} // namespace

LoadedCheckpoint loadHfFolder(const std::string& dir) {
    const std::string cfgPath = (fs::path(dir) / "config.json").string();
    if (!fs::exists(cfgPath))
        throw KvError(dir + ": not a Hugging Face model folder (no config.json)");
    json cfg;
    try {
        cfg = json::parse(readFileText(cfgPath, 16 << 20));
    } catch (const json::exception& e) {
        throw KvError(cfgPath + ": invalid JSON: " + e.what());
    }
    std::string arch;
    if (cfg.contains("architectures") && cfg["architectures"].is_array() &&
        !cfg["architectures"].empty() && cfg["architectures"][0].is_string())
        arch = cfg["architectures"][0].get<std::string>();
    const std::string modelType = opt<std::string>(cfg, "model_type", "", cfgPath);

    LoadedCheckpoint ck;
    auto& c = ck.config;
    c.sourceFormat = "hf";
    if (arch == "GPT2LMHeadModel" || (arch.empty() && modelType == "gpt2")) {
        c.architecture = "gpt2";
        c.hfArchitecture = "GPT2LMHeadModel";
        c.dim = req<int64_t>(cfg, "n_embd", cfgPath);
        c.nLayers = req<int64_t>(cfg, "n_layer", cfgPath);
        c.nHeads = req<int64_t>(cfg, "n_head", cfgPath);
        c.nKvHeads = c.nHeads;
        c.headDim = c.nHeads > 0 ? c.dim / c.nHeads : 0;
        c.hiddenDim = opt<int64_t>(cfg, "n_inner", 4 * c.dim, cfgPath);
        c.maxContext = req<int64_t>(cfg, "n_positions", cfgPath);
        c.normEps = opt<double>(cfg, "layer_norm_epsilon", 1e-5, cfgPath);
        c.normType = "layernorm";
        const auto act = opt<std::string>(cfg, "activation_function", "gelu_new", cfgPath);
        if (act != "gelu_new" && act != "gelu_pytorch_tanh")
            throw KvError(cfgPath + ": activation_function '" + act +
                          "' is not supported (gelu_new)");
        c.activation = "gelu_new";
        c.tiedEmbeddings = true;
        c.attentionBias = true;
    } else if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" ||
               arch == "Qwen2ForCausalLM" ||
               (arch.empty() &&
                (modelType == "llama" || modelType == "mistral" || modelType == "qwen2"))) {
        c.architecture = "llama";
        c.hfArchitecture = arch.empty() ? "LlamaForCausalLM" : arch;
        c.dim = req<int64_t>(cfg, "hidden_size", cfgPath);
        c.hiddenDim = req<int64_t>(cfg, "intermediate_size", cfgPath);
        c.nLayers = req<int64_t>(cfg, "num_hidden_layers", cfgPath);
        c.nHeads = req<int64_t>(cfg, "num_attention_heads", cfgPath);
        c.nKvHeads = opt<int64_t>(cfg, "num_key_value_heads", c.nHeads, cfgPath);
        c.headDim = opt<int64_t>(cfg, "head_dim", c.nHeads > 0 ? c.dim / c.nHeads : 0, cfgPath);
        c.maxContext = req<int64_t>(cfg, "max_position_embeddings", cfgPath);
        c.normEps = opt<double>(cfg, "rms_norm_eps", 1e-6, cfgPath);
        c.ropeTheta = opt<double>(cfg, "rope_theta", 10000.0, cfgPath);
        const bool qwen = c.hfArchitecture == "Qwen2ForCausalLM" || modelType == "qwen2";
        c.attentionBias = qwen || opt<bool>(cfg, "attention_bias", false, cfgPath);
        c.tiedEmbeddings = opt<bool>(cfg, "tie_word_embeddings", false, cfgPath);
        const auto act = opt<std::string>(cfg, "hidden_act", "silu", cfgPath);
        if (act != "silu")
            throw KvError(cfgPath + ": hidden_act '" + act + "' is not supported (silu)");
        if (cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object()) {
            const json& rs = cfg["rope_scaling"];
            auto& s = c.ropeScaling;
            s.type = rs.contains("rope_type") ? req<std::string>(rs, "rope_type", cfgPath)
                                              : req<std::string>(rs, "type", cfgPath);
            s.factor = opt<double>(rs, "factor", 1.0, cfgPath);
            s.lowFreqFactor = opt<double>(rs, "low_freq_factor", 1.0, cfgPath);
            s.highFreqFactor = opt<double>(rs, "high_freq_factor", 4.0, cfgPath);
            s.originalMaxPositions =
                opt<int64_t>(rs, "original_max_position_embeddings", 0, cfgPath);
            if (s.type == "default")
                s.type = "none";
            if (s.type != "none" && s.type != "linear" && s.type != "llama3")
                throw KvError(cfgPath + ": rope_scaling type '" + s.type +
                              "' is not supported (supported: linear, llama3)");
            if (s.type == "llama3" && s.originalMaxPositions <= 0)
                throw KvError(
                    cfgPath +
                    ": rope_scaling.original_max_position_embeddings is required for llama3");
        }
    } else {
        throw KvError(cfgPath + ": architecture '" + (arch.empty() ? modelType : arch) +
                      "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                      "Qwen2ForCausalLM, GPT2LMHeadModel)");
    }
    c.vocabSize = req<int64_t>(cfg, "vocab_size", cfgPath);
    // The attention layout, before any weight is read: heads must divide the width when
    // head_dim is derived from it, KV heads must divide heads.
    {
        const bool gpt2 = c.architecture == "gpt2";
        const char* headsKey = gpt2 ? "n_head" : "num_attention_heads";
        if (c.nHeads > 0 && (gpt2 || !cfg.contains("head_dim")) && c.dim % c.nHeads != 0)
            throw KvError(cfgPath + ": " + headsKey + " = " + std::to_string(c.nHeads) +
                          " does not divide " + (gpt2 ? "n_embd" : "hidden_size") + " = " +
                          std::to_string(c.dim));
        if (c.nKvHeads > 0 && c.nHeads % c.nKvHeads != 0)
            throw KvError(cfgPath + ": num_key_value_heads = " + std::to_string(c.nKvHeads) +
                          " does not divide " + headsKey + " = " + std::to_string(c.nHeads));
        validateConfig(c, cfgPath);
    }
    c.bosId = firstId(cfg, "bos_token_id");
    c.eosId = firstId(cfg, "eos_token_id");
    // generation_config.json may name a different eos (e.g. chat models' end-of-turn).
    const auto genPath = fs::path(dir) / "generation_config.json";
    if (fs::exists(genPath)) {
        try {
            const json gen = json::parse(readFileText(genPath.string(), 1 << 20));
            if (firstId(gen, "eos_token_id") >= 0)
                c.eosId = firstId(gen, "eos_token_id");
            if (firstId(gen, "bos_token_id") >= 0)
                c.bosId = firstId(gen, "bos_token_id");
        } catch (const json::exception& e) {
            throw KvError(genPath.string() + ": invalid JSON: " + e.what());
        }
    }

    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    const fs::path single = fs::path(dir) / "model.safetensors";
    const std::string weightsPath = fs::exists(index) ? index.string() : single.string();
    if (!fs::exists(weightsPath))
        throw KvError(dir + ": no model.safetensors or model.safetensors.index.json");
    auto opened = safetensors::Checkpoint::open(weightsPath);
    if (!opened)
        throw KvError(opened.message());
    const auto& st = opened.value();
    std::map<std::string, int> dtypes;
    for (const auto& name : st.tensorNames()) {
        // GPT-2's causal-mask buffers are not weights.
        if (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))
            continue;
        at::Tensor t = toTensor(st, name);
        dtypes[dtypeName(t.scalar_type())]++;
        ck.weights[name] = t;
    }
    std::string most = "f32";
    int best = 0;
    for (const auto& [d, n] : dtypes)
        if (n > best)
            best = n, most = d;
    c.weightDtype = most;
    const auto tokJson = fs::path(dir) / "tokenizer.json";
    if (fs::exists(tokJson))
        ck.tokenizerPath = tokJson.string();
    return ck;
}

} // namespace kvscope
