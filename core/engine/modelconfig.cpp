#include "engine/modelconfig.h"
#include "util/status.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvscope {

double ModelConfig::scoreScale() const {
    return attentionScale > 0 ? attentionScale
                              : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, headDim)));
}

nlohmann::json toJson(const ModelConfig& c) {
    nlohmann::json j = {
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
    if (c.ropeScaling.type == "longrope") {
        j["rope_scaling"]["short_factor"] = c.ropeScaling.shortFactor;
        j["rope_scaling"]["long_factor"] = c.ropeScaling.longFactor;
        j["rope_scaling"]["attention_factor"] = c.ropeScaling.attentionFactor;
    }
    // Written only when set, so a Llama's config (and its fingerprint in older snapshots)
    // stays as it was.
    if (c.qkNorm)
        j["qk_norm"] = true;
    if (c.postNorms)
        j["post_norms"] = true;
    if (c.embedScale != 1.0)
        j["embed_scale"] = c.embedScale;
    if (c.attentionScale != 0.0)
        j["attention_scale"] = c.attentionScale;
    if (c.attnSoftcap != 0.0)
        j["attn_softcap"] = c.attnSoftcap;
    if (c.finalSoftcap != 0.0)
        j["final_softcap"] = c.finalSoftcap;
    if (c.slidingWindow != 0 || !c.slidingLayers.empty()) {
        j["sliding_window"] = c.slidingWindow;
        j["sliding_layers"] = c.slidingLayers;
    }
    if (c.ropeThetaLocal != 0.0)
        j["rope_theta_local"] = c.ropeThetaLocal;
    return j;
}

std::vector<bool> slidingPattern(int64_t layers, int64_t n) {
    std::vector<bool> sliding(static_cast<size_t>(std::max<int64_t>(0, layers)));
    for (int64_t l = 0; l < layers; ++l)
        sliding[static_cast<size_t>(l)] = n == 0 || (l + 1) % n != 0;
    return sliding;
}

std::string llamaCppArchitecture(const ModelConfig& c) {
    if (c.architecture == "gpt2")
        return "gpt2";
    static const std::map<std::string, std::string> kNames = {
        {"Qwen2ForCausalLM", "qwen2"},   {"Qwen3ForCausalLM", "qwen3"},
        {"Gemma2ForCausalLM", "gemma2"}, {"Gemma3ForCausalLM", "gemma3"},
        {"Phi3ForCausalLM", "phi3"},
    };
    const auto it = kNames.find(c.hfArchitecture);
    return it == kNames.end() ? "llama" : it->second;
}

std::vector<std::string> configVariations(const ModelConfig& c) {
    auto num = [](double v) {
        std::ostringstream os;
        os << v;
        return os.str();
    };
    std::vector<std::string> out;
    if (c.architecture != "llama")
        return out;
    if (c.attentionBias)
        out.push_back("q/k/v biases");
    if (c.qkNorm)
        out.push_back("q/k norms");
    if (c.postNorms)
        out.push_back("output norms");
    if (c.activation == "gelu_tanh")
        out.push_back("GeGLU");
    if (c.embedScale != 1.0)
        out.push_back("embeddings x " + num(c.embedScale));
    if (c.attentionScale > 0)
        out.push_back("scores x " + num(c.attentionScale));
    if (c.attnSoftcap > 0)
        out.push_back("scores soft-capped at " + num(c.attnSoftcap));
    if (c.finalSoftcap > 0)
        out.push_back("logits soft-capped at " + num(c.finalSoftcap));
    const auto sliding = std::count(c.slidingLayers.begin(), c.slidingLayers.end(), true);
    if (c.slidingWindow > 0 && sliding > 0)
        out.push_back("sliding window " + std::to_string(c.slidingWindow) + " on " +
                      std::to_string(sliding) + " of " + std::to_string(c.nLayers) + " layers" +
                      (c.ropeThetaLocal > 0 ? " (RoPE base " + num(c.ropeThetaLocal) + " there)"
                                            : std::string()));
    return out;
}

namespace {
template <typename T> T field(const nlohmann::json& j, const char* key);
// An optional field: `fallback` when absent.
template <typename T> T optionalField(const nlohmann::json& j, const char* key, T fallback) {
    return j.contains(key) ? field<T>(j, key) : fallback;
}
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
    c.ropeScaling.shortFactor = optionalField(rs, "short_factor", std::vector<double>{});
    c.ropeScaling.longFactor = optionalField(rs, "long_factor", std::vector<double>{});
    c.ropeScaling.attentionFactor = optionalField(rs, "attention_factor", 1.0);
    c.ropeLayout = field<std::string>(j, "rope_layout");
    c.tiedEmbeddings = field<bool>(j, "tied_embeddings");
    c.attentionBias = field<bool>(j, "attention_bias");
    c.weightDtype = field<std::string>(j, "weight_dtype");
    c.bosId = field<int32_t>(j, "bos_id");
    c.eosId = field<int32_t>(j, "eos_id");
    c.qkNorm = optionalField(j, "qk_norm", false);
    c.postNorms = optionalField(j, "post_norms", false);
    c.embedScale = optionalField(j, "embed_scale", 1.0);
    c.attentionScale = optionalField(j, "attention_scale", 0.0);
    c.attnSoftcap = optionalField(j, "attn_softcap", 0.0);
    c.finalSoftcap = optionalField(j, "final_softcap", 0.0);
    c.slidingWindow = optionalField<int64_t>(j, "sliding_window", 0);
    c.slidingLayers = optionalField(j, "sliding_layers", std::vector<bool>{});
    c.ropeThetaLocal = optionalField(j, "rope_theta_local", 0.0);
    return c;
}

namespace {

std::string number(double v) {
    if (std::isnan(v))
        return "nan";
    if (std::isinf(v))
        return v > 0 ? "inf" : "-inf";
    std::ostringstream os;
    os << v;
    return os.str();
}

} // namespace

void validateConfig(const ModelConfig& c, const std::string& what, const ConfigKeyNames& keys) {
    auto key = [&](const std::string& field) {
        const auto it = keys.find(field);
        return it == keys.end() ? field : it->second;
    };
    auto fail = [&](const std::string& field, const std::string& problem) {
        throw KvError(what + ": " + key(field) + " " + problem);
    };
    auto positive = [&](int64_t v, const char* name, int64_t limit) {
        if (v <= 0 || v > limit)
            fail(name, "= " + std::to_string(v) + " is outside 1.." + std::to_string(limit));
    };
    if (c.architecture != "llama" && c.architecture != "gpt2")
        fail("architecture", "'" + c.architecture + "' is not supported (llama, gpt2)");
    positive(c.dim, "dim", 1 << 16);
    positive(c.hiddenDim, "hidden_dim", 1 << 18);
    positive(c.nLayers, "n_layers", 1024);
    positive(c.nHeads, "n_heads", 1024);
    positive(c.nKvHeads, "n_kv_heads", 1024);
    positive(c.headDim, "head_dim", 4096);
    positive(c.vocabSize, "vocab_size", 1 << 22);
    positive(c.maxContext, "max_context", 1 << 24);
    if (c.nHeads % c.nKvHeads != 0)
        fail("n_kv_heads", "= " + std::to_string(c.nKvHeads) + " does not divide " +
                               key("n_heads") + " = " + std::to_string(c.nHeads));
    if (!(c.normEps > 0 && c.normEps < 1))
        fail("norm_eps", "= " + number(c.normEps) + " is outside (0, 1)");
    if (c.activation != "silu" && c.activation != "gelu_tanh" && c.activation != "gelu_new")
        fail("activation", "'" + c.activation + "' is not supported (silu, gelu_tanh, gelu_new)");
    auto finiteNonNegative = [&](double v, const char* name) {
        if (!(std::isfinite(v) && v >= 0))
            fail(name, "= " + number(v) + " must be a finite number >= 0 (0: off)");
    };
    finiteNonNegative(c.attentionScale, "attention_scale");
    finiteNonNegative(c.attnSoftcap, "attn_softcap");
    finiteNonNegative(c.finalSoftcap, "final_softcap");
    finiteNonNegative(c.ropeThetaLocal, "rope_theta_local");
    if (!(std::isfinite(c.embedScale) && c.embedScale > 0))
        fail("embed_scale", "= " + number(c.embedScale) + " must be a finite positive number");
    if (c.slidingWindow < 0 || c.slidingWindow > (int64_t(1) << 24))
        fail("sliding_window",
             "= " + std::to_string(c.slidingWindow) + " is outside 0.." + std::to_string(1 << 24));
    if (!c.slidingLayers.empty() && int64_t(c.slidingLayers.size()) != c.nLayers)
        fail("sliding_layers", "has " + std::to_string(c.slidingLayers.size()) + " entries for " +
                                   std::to_string(c.nLayers) + " layers");
    if (c.architecture != "llama") {
        if (c.qkNorm || c.postNorms || c.embedScale != 1.0 || c.attnSoftcap != 0 ||
            c.finalSoftcap != 0 || c.slidingWindow != 0 || c.activation == "gelu_tanh")
            fail("architecture", "'" + c.architecture +
                                     "' has none of the Llama-family variations (q/k norms, "
                                     "post norms, soft-capping, sliding windows, GeGLU)");
        return; // learned positions: no RoPE
    }
    if (c.activation == "gelu_new")
        fail("activation",
             "'gelu_new' is GPT-2's MLP; the llama family gates with silu or gelu_tanh");
    if (c.headDim % 2 != 0)
        fail("head_dim", "= " + std::to_string(c.headDim) + " must be even for RoPE");
    // inv_freq = theta^(-2i/d): 0, a negative or a non-finite base gives NaN or Inf angles.
    if (!(std::isfinite(c.ropeTheta) && c.ropeTheta > 0))
        fail("rope_theta", "= " + number(c.ropeTheta) + " must be a finite positive number");
    const auto& s = c.ropeScaling;
    if (s.type == "none" || s.type == "default")
        return;
    if (s.type != "linear" && s.type != "llama3" && s.type != "longrope")
        fail("rope_scaling.type",
             "'" + s.type + "' is not supported (none, linear, llama3, longrope)");
    if (s.type == "longrope") {
        if (s.originalMaxPositions <= 0 || s.originalMaxPositions > (1 << 24))
            fail("rope_scaling.original_max_position_embeddings",
                 "= " + std::to_string(s.originalMaxPositions) + " is outside 1.." +
                     std::to_string(1 << 24) + " (required for longrope scaling)");
        for (const auto* factors : {&s.shortFactor, &s.longFactor}) {
            const char* name = factors == &s.shortFactor ? "rope_scaling.short_factor"
                                                         : "rope_scaling.long_factor";
            if (int64_t(factors->size()) != c.headDim / 2)
                fail(name, "has " + std::to_string(factors->size()) + " values; head_dim " +
                               std::to_string(c.headDim) + " needs " +
                               std::to_string(c.headDim / 2));
            for (double f : *factors)
                if (!(std::isfinite(f) && f > 0))
                    fail(name, "holds " + number(f) + "; every factor must be finite and positive");
        }
        if (!(std::isfinite(s.attentionFactor) && s.attentionFactor > 0))
            fail("rope_scaling.attention_factor",
                 "= " + number(s.attentionFactor) + " must be a finite positive number");
    }
    // The frequencies are divided by the factor.
    if (!(std::isfinite(s.factor) && s.factor > 0))
        fail("rope_scaling.factor", "= " + number(s.factor) + " must be a finite positive number");
    if (s.type == "llama3") {
        if (s.originalMaxPositions <= 0 || s.originalMaxPositions > (1 << 24))
            fail("rope_scaling.original_max_position_embeddings",
                 "= " + std::to_string(s.originalMaxPositions) + " is outside 1.." +
                     std::to_string(1 << 24) + " (required for llama3 scaling)");
        // The blend divides by high - low and the wavelengths by each factor.
        if (!(std::isfinite(s.lowFreqFactor) && std::isfinite(s.highFreqFactor) &&
              s.lowFreqFactor > 0 && s.highFreqFactor > s.lowFreqFactor))
            fail("rope_scaling.low_freq_factor",
                 "= " + number(s.lowFreqFactor) + " and " + key("rope_scaling.high_freq_factor") +
                     " = " + number(s.highFreqFactor) +
                     " must be finite with 0 < low_freq_factor < high_freq_factor");
    }
}

} // namespace kvscope
