#include "engine/modelconfig.h"
#include "util/status.h"

#include <nlohmann/json.hpp>

namespace kvscope {

nlohmann::json toJson(const ModelConfig& c) {
    return {
        {"architecture", c.architecture},
        {"hf_architecture", c.hfArchitecture},
        {"source_format", c.sourceFormat},
        {"dim", c.dim},
        {"hidden_dim", c.hiddenDim},
        {"n_layers", c.nLayers},
        {"n_heads", c.nHeads},
        {"n_kv_heads", c.nKvHeads},
        {"head_dim", c.headDim},
        {"vocab_size", c.vocabSize},
        {"max_context", c.maxContext},
        {"norm_eps", c.normEps},
        {"norm_type", c.normType},
        {"activation", c.activation},
        {"rope_theta", c.ropeTheta},
        {"rope_scaling",
         {{"type", c.ropeScaling.type},
          {"factor", c.ropeScaling.factor},
          {"low_freq_factor", c.ropeScaling.lowFreqFactor},
          {"high_freq_factor", c.ropeScaling.highFreqFactor},
          {"original_max_position_embeddings", c.ropeScaling.originalMaxPositions},
          {"beta_fast", c.ropeScaling.betaFast},
          {"beta_slow", c.ropeScaling.betaSlow}}},
        {"rope_layout", c.ropeLayout},
        {"tied_embeddings", c.tiedEmbeddings},
        {"attention_bias", c.attentionBias},
        {"weight_dtype", c.weightDtype},
        {"bos_id", c.bosId},
        {"eos_id", c.eosId},
    };
}

namespace {
template <typename T> T field(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end())
        throw KvError(std::string("model config: missing field '") + key + "'");
    try {
        return it->get<T>();
    } catch (const std::exception&) {
        throw KvError(std::string("model config: field '") + key + "' has the wrong type");
    }
}
} // namespace

ModelConfig modelConfigFromJson(const nlohmann::json& j) {
    if (!j.is_object())
        throw KvError("model config: not a JSON object");
    ModelConfig c;
    c.architecture = field<std::string>(j, "architecture");
    c.hfArchitecture = field<std::string>(j, "hf_architecture");
    c.sourceFormat = field<std::string>(j, "source_format");
    c.dim = field<int64_t>(j, "dim");
    c.hiddenDim = field<int64_t>(j, "hidden_dim");
    c.nLayers = field<int64_t>(j, "n_layers");
    c.nHeads = field<int64_t>(j, "n_heads");
    c.nKvHeads = field<int64_t>(j, "n_kv_heads");
    c.headDim = field<int64_t>(j, "head_dim");
    c.vocabSize = field<int64_t>(j, "vocab_size");
    c.maxContext = field<int64_t>(j, "max_context");
    c.normEps = field<double>(j, "norm_eps");
    c.normType = field<std::string>(j, "norm_type");
    c.activation = field<std::string>(j, "activation");
    c.ropeTheta = field<double>(j, "rope_theta");
    const auto rs = field<nlohmann::json>(j, "rope_scaling");
    c.ropeScaling.type = field<std::string>(rs, "type");
    c.ropeScaling.factor = field<double>(rs, "factor");
    c.ropeScaling.lowFreqFactor = field<double>(rs, "low_freq_factor");
    c.ropeScaling.highFreqFactor = field<double>(rs, "high_freq_factor");
    c.ropeScaling.originalMaxPositions = field<int64_t>(rs, "original_max_position_embeddings");
    c.ropeScaling.betaFast = field<double>(rs, "beta_fast");
    c.ropeScaling.betaSlow = field<double>(rs, "beta_slow");
    c.ropeLayout = field<std::string>(j, "rope_layout");
    c.tiedEmbeddings = field<bool>(j, "tied_embeddings");
    c.attentionBias = field<bool>(j, "attention_bias");
    c.weightDtype = field<std::string>(j, "weight_dtype");
    c.bosId = field<int32_t>(j, "bos_id");
    c.eosId = field<int32_t>(j, "eos_id");
    return c;
}

void validateConfig(const ModelConfig& c, const std::string& what) {
    auto positive = [&](int64_t v, const char* name, int64_t limit) {
        if (v <= 0 || v > limit)
            throw KvError(what + ": " + name + " = " + std::to_string(v) + " is outside 1.." +
                          std::to_string(limit));
    };
    positive(c.dim, "dim", 1 << 16);
    positive(c.hiddenDim, "hidden_dim", 1 << 18);
    positive(c.nLayers, "n_layers", 1024);
    positive(c.nHeads, "n_heads", 1024);
    positive(c.nKvHeads, "n_kv_heads", 1024);
    positive(c.headDim, "head_dim", 4096);
    positive(c.vocabSize, "vocab_size", 1 << 22);
    positive(c.maxContext, "max_context", 1 << 24);
    if (c.nHeads % c.nKvHeads != 0)
        throw KvError(what + ": n_heads " + std::to_string(c.nHeads) +
                      " is not a multiple of n_kv_heads " + std::to_string(c.nKvHeads));
    if (c.architecture != "llama" && c.architecture != "gpt2")
        throw KvError(what + ": unsupported architecture '" + c.architecture + "'");
    if (c.architecture == "llama" && c.headDim % 2 != 0)
        throw KvError(what + ": head_dim " + std::to_string(c.headDim) + " must be even for RoPE");
    if (!(c.normEps > 0 && c.normEps < 1))
        throw KvError(what + ": norm_eps " + std::to_string(c.normEps) + " is outside (0, 1)");
}

} // namespace kvscope
