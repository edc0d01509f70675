// Loader for Hugging Face model folders: config.json + model.safetensors (or a sharded
// model.safetensors.index.json) + tokenizer.json. Llama family (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM) and GPT2LMHeadModel. Weights keep their dtype
// (F32/F16/BF16); HF checkpoints are already in the rotate_half layout.
#include "engine/modelimpl.h"
#include "engine/tensorconv.h"
#include "formats/jsonerror.h"
#include "formats/safetensors.h"
#include "util/fileio.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

namespace kvscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* jsonTypeName(const json& v) {
    if (v.is_boolean())
        return "a boolean";
    if (v.is_number_integer())
        return "an integer";
    if (v.is_number())
        return "a number";
    if (v.is_string())
        return "a string";
    if (v.is_array())
        return "a list";
    if (v.is_object())
        return "an object";
    return "null";
}

// The value of `key` as T, refusing a value of another JSON type (nlohmann would turn 64.7
// into 64 and "x" into an exception naming neither file nor key).
template <typename T> T req(const json& j, const char* key, const std::string& file) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        throw KvError(file + ": missing field '" + key + "'");
    const char* expected = nullptr;
    if constexpr (std::is_same_v<T, bool>)
        expected = it->is_boolean() ? nullptr : "a boolean";
    else if constexpr (std::is_integral_v<T>)
        expected = it->is_number_integer() ? nullptr : "an integer";
    else if constexpr (std::is_floating_point_v<T>)
        expected = it->is_number() ? nullptr : "a number";
    else
        expected = it->is_string() ? nullptr : "a string";
    if (expected)
        throw KvError(file + ": " + key + ": expected " + expected + ", found " +
                      jsonTypeName(*it));
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // Beyond int64 nlohmann stores an unsigned value; get<int64_t> would wrap it.
        if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
            throw KvError(file + ": " + key + " = " + it->dump() + " is out of range");
    }
    return it->get<T>();
}

template <typename T> T opt(const json& j, const char* key, T fallback, const std::string& file) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return fallback;
    return req<T>(j, key, file);
}

// bos_token_id / eos_token_id: absent, null or negative (-1), an id, or a list of ids (the
// first is used). Anything else is refused naming the file and the key.
int32_t tokenId(const json& j, const char* key, const std::string& file) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return -1;
    const json* v = &*it;
    if (v->is_array()) {
        if (v->empty())
            return -1;
        v = &(*v)[0];
    }
    if (!v->is_number_integer())
        throw KvError(file + ": " + key + ": expected a token id or a list of token ids, found " +
                      (it->is_array() ? std::string("a list holding ") + jsonTypeName(*v)
                                      : std::string(jsonTypeName(*v))));
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT32_MAX))
        throw KvError(file + ": " + key + " = " + v->dump() + " is not a token id");
    return v->get<int64_t>() < 0 ? -1 : v->get<int32_t>(); // -1 stands for "none" in some files
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
    // Used in place from the file's mapping; f64 is narrowed to a copy.
    const auto* file = ck.fileOf(name);
    auto span = file->data(*info);
    auto t = mappedTensor(file->mapping(), span.data(), info->shape, st);
    if (st != at::kDouble)
        return t;
    t = t.to(at::kFloat);
    file->mapping()->release(span.data(), span.size());
    return t;
}

// The Llama-family class a config.json names (by architectures[0], else by model_type); empty
// when it names none.
std::string llamaFamily(const std::string& arch, const std::string& modelType) {
    static const std::map<std::string, std::string> kByType = {
        {"llama", "LlamaForCausalLM"},   {"mistral", "LlamaForCausalLM"},
        {"qwen2", "LlamaForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"},
        {"gemma2", "Gemma2ForCausalLM"}, {"gemma3_text", "Gemma3ForCausalLM"},
        {"phi3", "Phi3ForCausalLM"},
    };
    static const std::set<std::string> kClasses = {
        "LlamaForCausalLM",  "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
        "Gemma2ForCausalLM", "Gemma3ForCausalLM",  "Phi3ForCausalLM"};
    if (!arch.empty())
        return kClasses.count(arch) ? arch : std::string();
    const auto it = kByType.find(modelType);
    return it == kByType.end() ? std::string() : it->second;
}

// Phi-3 128k's rope_scaling (transformers' longrope): per-frequency short and long factors;
// original_max_position_embeddings from the config's top level (Phi-3) or rope_scaling; the
// attention factor given, or sqrt(1 + ln(factor) / ln(original)) for factor = context /
// original.
void readLongRope(const json& cfg, const json& rs, const std::string& where, ModelConfig& c) {
    auto& s = c.ropeScaling;
    auto factors = [&](const char* k) {
        std::vector<double> v;
        const auto it = rs.find(k);
        if (it == rs.end() || !it->is_array())
            throw KvError(where + ": " + k + ": expected a list of numbers");
        for (const auto& x : *it) {
            if (!x.is_number())
                throw KvError(where + ": " + k + ": expected a list of numbers, found " +
                              jsonTypeName(x));
            v.push_back(x.get<double>());
        }
        return v;
    };
    s.shortFactor = factors("short_factor");
    s.longFactor = factors("long_factor");
    s.originalMaxPositions =
        cfg.contains("original_max_position_embeddings")
            ? opt<int64_t>(cfg, "original_max_position_embeddings", 0, where)
            : opt<int64_t>(rs, "original_max_position_embeddings", c.maxContext, where);
    s.factor =
        s.originalMaxPositions > 0 ? double(c.maxContext) / double(s.originalMaxPositions) : 1.0;
    const auto given = rs.find("attention_factor");
    s.attentionFactor =
        given != rs.end() && !given->is_null() ? opt<double>(rs, "attention_factor", 1.0, where)
        : s.factor <= 1.0 || s.originalMaxPositions <= 1
            ? 1.0
            : std::sqrt(1.0 + std::log(s.factor) / std::log(double(s.originalMaxPositions)));
}

bool isGemma(const std::string& hfArchitecture) {
    return hfArchitecture == "Gemma2ForCausalLM" || hfArchitecture == "Gemma3ForCausalLM";
}

// Gemma 2 / Gemma 3 (text) config.json fields: GeGLU, four norms a layer, embeddings times
// sqrt(hidden_size), scores scaled by query_pre_attn_scalar^-0.5, soft-capping, sliding-window
// layers (layer_types, else Gemma 2's every other layer / Gemma 3's sliding_window_pattern)
// with Gemma 3's rope_local_base_freq there.
void readGemmaConfig(const json& cfg, const std::string& cfgPath, ModelConfig& c,
                     ConfigKeyNames& keys) {
    const bool gemma2 = c.hfArchitecture == "Gemma2ForCausalLM";
    const std::string actKey =
        cfg.contains("hidden_activation") ? "hidden_activation" : "hidden_act";
    const auto act = opt<std::string>(cfg, actKey.c_str(), "gelu_pytorch_tanh", cfgPath);
    if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
        throw KvError(cfgPath + ": " + actKey + " '" + act +
                      "' is not supported (gelu_pytorch_tanh)");
    keys["activation"] = actKey;
    c.activation = "gelu_tanh";
    c.postNorms = true;
    c.embedScale = std::sqrt(static_cast<double>(c.dim));
    auto optNumber = [&](const char* k, double fallback) {
        const auto it = cfg.find(k);
        return it == cfg.end() || it->is_null() ? fallback : opt<double>(cfg, k, fallback, cfgPath);
    };
    const double scalar = optNumber("query_pre_attn_scalar", double(c.headDim));
    if (!(std::isfinite(scalar) && scalar > 0))
        throw KvError(cfgPath + ": query_pre_attn_scalar must be a finite positive number");
    // 1/sqrt(head_dim) is the default, held as 0 (as a GGUF of the same model loads).
    c.attentionScale = scalar == double(c.headDim) ? 0.0 : 1.0 / std::sqrt(scalar);
    c.attnSoftcap = optNumber("attn_logit_softcapping", 0.0);
    c.finalSoftcap = optNumber("final_logit_softcapping", 0.0);
    keys["attention_scale"] = "query_pre_attn_scalar";
    keys["attn_softcap"] = "attn_logit_softcapping";
    keys["final_softcap"] = "final_logit_softcapping";
    keys["sliding_window"] = "sliding_window";
    keys["rope_theta_local"] = "rope_local_base_freq";
    const auto window = cfg.find("sliding_window");
    c.slidingWindow = window == cfg.end() || window->is_null()
                          ? 0
                          : opt<int64_t>(cfg, "sliding_window", 0, cfgPath);
    if (c.slidingWindow <= 0 || c.nLayers <= 0 || c.nLayers > 1024)
        return; // validateConfig names a bad layer count
    c.slidingLayers.assign(size_t(c.nLayers), false);
    if (const auto types = cfg.find("layer_types"); types != cfg.end() && !types->is_null()) {
        keys["sliding_layers"] = "layer_types";
        if (!types->is_array() || int64_t(types->size()) != c.nLayers)
            throw KvError(cfgPath + ": layer_types: expected one entry for each of the " +
                          std::to_string(c.nLayers) + " layers");
        for (int64_t l = 0; l < c.nLayers; ++l) {
            const json& t = (*types)[size_t(l)];
            if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
                throw KvError(cfgPath + ": layer_types[" + std::to_string(l) +
                              "]: expected \"sliding_attention\" or \"full_attention\"");
            c.slidingLayers[size_t(l)] = t == "sliding_attention";
        }
    } else {
        keys["sliding_layers"] = "sliding_window_pattern";
        const int64_t n = gemma2 ? 2 : opt<int64_t>(cfg, "sliding_window_pattern", 6, cfgPath);
        if (n < 1 || n > 1024)
            throw KvError(cfgPath + ": sliding_window_pattern = " + std::to_string(n) +
                          " is outside 1..1024");
        c.slidingLayers = slidingPattern(c.nLayers, n);
    }
    if (!gemma2)
        c.ropeThetaLocal = optNumber("rope_local_base_freq", 10000.0);
}

} // namespace

LoadedCheckpoint loadHfFolder(const std::string& dir) {
    const std::string cfgPath = (fs::path(dir) / "config.json").string();
    if (!fs::exists(cfgPath))
        throw KvError(dir + ": not a Hugging Face model folder (no config.json)");
    const json cfg = parseJsonText(readFileText(cfgPath, 16 << 20), cfgPath);
    if (!cfg.is_object())
        throw KvError(cfgPath + ": expected a JSON object at the top level, found " +
                      jsonTypeName(cfg));
    std::string arch;
    if (auto it = cfg.find("architectures"); it != cfg.end() && !it->is_null()) {
        if (!it->is_array())
            throw KvError(cfgPath + ": architectures: expected a list of class names, found " +
                          jsonTypeName(*it));
        if (!it->empty() && !(*it)[0].is_string())
            throw KvError(cfgPath + ": architectures[0]: expected a class name (a string), found " +
                          jsonTypeName((*it)[0]));
        if (!it->empty())
            arch = (*it)[0].get<std::string>();
    }
    const std::string modelType = opt<std::string>(cfg, "model_type", "", cfgPath);
    // Transformers picks the model class by model_type, other runtimes by architectures: when
    // both are given they must name the same family, or two tools would run different models.
    if (!arch.empty() && !modelType.empty()) {
        static const std::map<std::string, std::vector<std::string>> kTypes = {
            {"LlamaForCausalLM", {"llama", "mistral", "qwen2"}},
            {"MistralForCausalLM", {"mistral", "llama"}},
            {"Qwen2ForCausalLM", {"qwen2"}},
            {"Qwen3ForCausalLM", {"qwen3"}},
            {"Gemma2ForCausalLM", {"gemma2"}},
            {"Gemma3ForCausalLM", {"gemma3_text"}},
            {"Phi3ForCausalLM", {"phi3"}},
            {"GPT2LMHeadModel", {"gpt2"}},
        };
        static const std::set<std::string> kKnown = {"llama",  "mistral", "qwen2",       "qwen3",
                                                     "gemma2", "gpt2",    "gemma3_text", "phi3"};
        if (auto t = kTypes.find(arch);
            t != kTypes.end() && kKnown.count(modelType) &&
            std::find(t->second.begin(), t->second.end(), modelType) == t->second.end()) {
            std::string expected;
            for (const auto& e : t->second)
                expected += (expected.empty() ? "'" : " or '") + e + "'";
            throw KvError(cfgPath + ": model_type '" + modelType +
                          "' contradicts architectures[0] '" + arch + "' (expected model_type " +
                          expected + ")");
        }
    }

    LoadedCheckpoint ck;
    auto& c = ck.config;
    c.sourceFormat = "hf";
    ConfigKeyNames keys; // this file's name for each field validateConfig may name
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
    } else if (const std::string family = llamaFamily(arch, modelType); !family.empty()) {
        c.architecture = "llama";
        c.hfArchitecture = family;
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
        const bool gemma = isGemma(c.hfArchitecture);
        c.attentionBias = qwen || opt<bool>(cfg, "attention_bias", false, cfgPath);
        c.tiedEmbeddings = opt<bool>(cfg, "tie_word_embeddings", gemma, cfgPath);
        c.qkNorm =
            c.hfArchitecture == "Qwen3ForCausalLM" || c.hfArchitecture == "Gemma3ForCausalLM";
        if (gemma) {
            readGemmaConfig(cfg, cfgPath, c, keys);
        } else {
            const auto act = opt<std::string>(cfg, "hidden_act", "silu", cfgPath);
            if (act != "silu")
                throw KvError(cfgPath + ": hidden_act '" + act + "' is not supported (silu)");
        }
        if (c.hfArchitecture == "Phi3ForCausalLM") {
            // Every layer attends over sliding_window positions (Phi-3 mini: 2047).
            const auto w = cfg.find("sliding_window");
            if (w != cfg.end() && !w->is_null()) {
                c.slidingWindow = opt<int64_t>(cfg, "sliding_window", 0, cfgPath);
                if (c.slidingWindow > 0 && c.nLayers > 0 && c.nLayers <= 1024)
                    c.slidingLayers.assign(size_t(c.nLayers), true);
                keys["sliding_window"] = "sliding_window";
            }
        }
        if (auto it = cfg.find("rope_scaling"); it != cfg.end() && !it->is_null()) {
            if (!it->is_object())
                throw KvError(cfgPath + ": rope_scaling: expected an object or null, found " +
                              jsonTypeName(*it));
            const json& rs = *it;
            const std::string where = cfgPath + ": rope_scaling";
            auto& s = c.ropeScaling;
            s.type = rs.contains("rope_type") ? req<std::string>(rs, "rope_type", where)
                                              : req<std::string>(rs, "type", where);
            s.factor = opt<double>(rs, "factor", 1.0, where);
            s.lowFreqFactor = opt<double>(rs, "low_freq_factor", 1.0, where);
            s.highFreqFactor = opt<double>(rs, "high_freq_factor", 4.0, where);
            s.originalMaxPositions = opt<int64_t>(rs, "original_max_position_embeddings", 0, where);
            if (s.type == "default")
                s.type = "none";
            if (s.type == "su")
                s.type = "longrope"; // Phi-3's first name for it
            if (s.type == "longrope")
                readLongRope(cfg, rs, where, c);
            keys["rope_scaling.type"] =
                rs.contains("rope_type") ? "rope_scaling.rope_type" : "rope_scaling.type";
        }
    } else {
        throw KvError(cfgPath + ": architecture '" + (arch.empty() ? modelType : arch) +
                      "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                      "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, "
                      "Gemma3ForCausalLM, Phi3ForCausalLM, GPT2LMHeadModel)");
    }
    c.vocabSize = req<int64_t>(cfg, "vocab_size", cfgPath);
    // The attention layout, before any weight is read: heads must divide the width when
    // head_dim is derived from it; then every check the engine shares (validateConfig), each
    // naming this file's key.
    {
        const bool gpt2 = c.architecture == "gpt2";
        const char* headsKey = gpt2 ? "n_head" : "num_attention_heads";
        const char* widthKey = gpt2 ? "n_embd" : "hidden_size";
        const bool derivedHeadDim = gpt2 || !cfg.contains("head_dim") || cfg["head_dim"].is_null();
        if (c.nHeads > 0 && c.dim > 0 && derivedHeadDim && c.dim % c.nHeads != 0)
            throw KvError(cfgPath + ": " + headsKey + " = " + std::to_string(c.nHeads) +
                          " does not divide " + widthKey + " = " + std::to_string(c.dim));
        keys["dim"] = widthKey;
        keys["hidden_dim"] = gpt2 ? "n_inner" : "intermediate_size";
        keys["n_layers"] = gpt2 ? "n_layer" : "num_hidden_layers";
        keys["n_heads"] = headsKey;
        keys["n_kv_heads"] = gpt2 ? "n_head"
                             : cfg.contains("num_key_value_heads")
                                 ? "num_key_value_heads"
                                 : "num_key_value_heads (absent: num_attention_heads)";
        keys["head_dim"] = derivedHeadDim
                               ? std::string("head_dim (") + widthKey + " / " + headsKey + ")"
                               : "head_dim";
        keys["max_context"] = gpt2 ? "n_positions" : "max_position_embeddings";
        keys["norm_eps"] = gpt2 ? "layer_norm_epsilon" : "rms_norm_eps";
        validateConfig(c, cfgPath, keys);
    }
    c.bosId = tokenId(cfg, "bos_token_id", cfgPath);
    c.eosId = tokenId(cfg, "eos_token_id", cfgPath);
    // generation_config.json may name a different eos (e.g. chat models' end-of-turn).
    const auto genPath = fs::path(dir) / "generation_config.json";
    if (fs::exists(genPath)) {
        const std::string genFile = genPath.string();
        const json gen = parseJsonText(readFileText(genFile, 1 << 20), genFile);
        if (!gen.is_object())
            throw KvError(genFile + ": expected a JSON object at the top level, found " +
                          jsonTypeName(gen));
        if (const int32_t eos = tokenId(gen, "eos_token_id", genFile); eos >= 0)
            c.eosId = eos;
        if (const int32_t bos = tokenId(gen, "bos_token_id", genFile); bos >= 0)
            c.bosId = bos;
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
    // Every llama-family tensor's stored shape against the config, naming the file that
    // holds it (GPT-2's Conv1D layout is checked when the model binds its weights).
    if (c.architecture == "llama")
        for (const auto& name : st.tensorNames())
            checkLlamaWeightShape(c, name, st.tensor(name)->shape, st.fileOf(name)->path(), name,
                                  false);
    std::map<std::string, int> dtypes;
    // In file order (shard, then offset), so that a scan for NaN names the first one a reader
    // of the files would meet.
    std::vector<std::string> names = st.tensorNames();
    std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
        return std::pair(st.fileOf(a)->path(), st.tensor(a)->offset) <
               std::pair(st.fileOf(b)->path(), st.tensor(b)->offset);
    });
    int order = 0;
    for (const auto& name : names) {
        // GPT-2's causal-mask buffers are not weights.
        if (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))
            continue;
        at::Tensor t = toTensor(st, name);
        // Gemma's RMSNorm multiplies by 1 + weight (in float32): held as that scale.
        if (isGemma(c.hfArchitecture) && name.ends_with("norm.weight"))
            t = t.to(at::kFloat) + 1.0;
        if (const auto& m = st.fileOf(name)->mapping();
            std::find(ck.mappings.begin(), ck.mappings.end(), m) == ck.mappings.end())
            ck.mappings.push_back(m);
        dtypes[dtypeName(t.scalar_type())]++;
        ck.weights[name] = t;
        const auto* info = st.tensor(name);
        const int bytes = info->dtype == safetensors::DType::F32   ? 4
                          : info->dtype == safetensors::DType::F64 ? 8
                                                                   : 2;
        ck.sources[name] = {
            st.fileOf(name)->path(), name, order++, 0, static_cast<int64_t>(info->offset), bytes};
    }
    if (c.architecture == "llama")
        splitFusedWeights(c, ck);
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
