#include "engine/convert.h"
#include "engine/modelimpl.h"
#include "engine/tensorconv.h"
#include "formats/safetensorswriter.h"
#include "tokenizer/hfexport.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace kvscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json llamaConfig(const ModelConfig& c, const std::string& torchDtype) {
    json j = {
        {"architectures", {c.hfArchitecture.empty() ? "LlamaForCausalLM" : c.hfArchitecture}},
        {"model_type", c.hfArchitecture == "Qwen2ForCausalLM"     ? "qwen2"
                       : c.hfArchitecture == "MistralForCausalLM" ? "mistral"
                                                                  : "llama"},
        {"hidden_size", c.dim},
        {"intermediate_size", c.hiddenDim},
        {"num_hidden_layers", c.nLayers},
        {"num_attention_heads", c.nHeads},
        {"num_key_value_heads", c.nKvHeads},
        {"head_dim", c.headDim},
        {"max_position_embeddings", c.maxContext},
        {"rms_norm_eps", c.normEps},
        {"rope_theta", c.ropeTheta},
        {"hidden_act", "silu"},
        {"tie_word_embeddings", c.tiedEmbeddings},
        {"attention_bias", c.attentionBias},
        {"vocab_size", c.vocabSize},
        {"torch_dtype", torchDtype},
    };
    if (c.bosId >= 0)
        j["bos_token_id"] = c.bosId;
    if (c.eosId >= 0)
        j["eos_token_id"] = c.eosId;
    if (c.ropeScaling.type != "none") {
        j["rope_scaling"] = {{"rope_type", c.ropeScaling.type}, {"factor", c.ropeScaling.factor}};
        if (c.ropeScaling.type == "llama3") {
            j["rope_scaling"]["low_freq_factor"] = c.ropeScaling.lowFreqFactor;
            j["rope_scaling"]["high_freq_factor"] = c.ropeScaling.highFreqFactor;
            j["rope_scaling"]["original_max_position_embeddings"] =
                c.ropeScaling.originalMaxPositions;
        }
    }
    return j;
}

json gpt2Config(const ModelConfig& c, const std::string& torchDtype) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_embd", c.dim},
            {"n_layer", c.nLayers},
            {"n_head", c.nHeads},
            {"n_inner", c.hiddenDim},
            {"n_positions", c.maxContext},
            {"layer_norm_epsilon", c.normEps},
            {"activation_function", "gelu_new"},
            {"vocab_size", c.vocabSize},
            {"bos_token_id", c.bosId},
            {"eos_token_id", c.eosId},
            {"torch_dtype", torchDtype}};
}

void writeText(const fs::path& p, const std::string& text) {
    writeFileAtomic(p.string(), text.data(), text.size());
}

} // namespace

Status convertToHuggingFace(const Model& model, const std::string& outDir,
                            const ConvertOptions& options) {
    return catchToStatus([&] {
        const fs::path dir(outDir);
        if (fs::exists(dir) && !fs::is_directory(dir))
            throw KvError(outDir + ": exists and is not a folder");
        if (fs::exists(dir / "config.json") && !options.overwrite)
            throw KvError(outDir +
                          ": already holds a model (config.json); pass --force to replace it");
        const auto& impl = model.impl();
        const auto& c = impl.config;

        // Choose the output dtype: the checkpoint's, or the requested one.
        std::string dtype = options.dtype;
        if (dtype.empty())
            dtype = (c.weightDtype == "f16" || c.weightDtype == "bf16") ? c.weightDtype : "f32";
        const at::ScalarType st = parseDtype(dtype, "--dtype");
        const safetensors::DType sd = st == at::kHalf       ? safetensors::DType::F16
                                      : st == at::kBFloat16 ? safetensors::DType::BF16
                                                            : safetensors::DType::F32;

        safetensors::Writer writer;
        writer.setMetadata("format", "pt");
        writer.setMetadata("converted_by", "kvscope");
        writer.setMetadata("source", impl.path);
        for (const auto& [name, t] : impl.named) {
            auto x = t.to(at::kCPU, st).contiguous();
            const auto* p = static_cast<const uint8_t*>(x.data_ptr());
            writer.addTensor(name, sd, x.sizes().vec(),
                             std::vector<uint8_t>(p, p + x.numel() * x.element_size()));
        }
        auto tok = model.tokenizer();
        std::optional<tok::HfTokenizerFiles> tokFiles;
        if (tok) {
            auto exported = tok::exportHuggingFace(*tok);
            if (!exported)
                throw KvError(exported.message());
            tokFiles = exported.value();
        }

        fs::create_directories(dir);
        if (Status s = writer.write((dir / "model.safetensors").string()); !s)
            throw KvError(s.message());
        const std::string torchDtype = dtype == "f16"    ? "float16"
                                       : dtype == "bf16" ? "bfloat16"
                                                         : "float32";
        const json cfg =
            c.architecture == "gpt2" ? gpt2Config(c, torchDtype) : llamaConfig(c, torchDtype);
        json gen = json::object();
        if (c.bosId >= 0)
            gen["bos_token_id"] = c.bosId;
        if (c.eosId >= 0)
            gen["eos_token_id"] = c.eosId;
        writeText(dir / "generation_config.json", gen.dump(2) + "\n");
        if (tokFiles) {
            writeText(dir / "tokenizer.json", tokFiles->tokenizerJson);
            writeText(dir / "tokenizer_config.json", tokFiles->tokenizerConfigJson);
        }
        // config.json last: its presence marks a complete folder.
        writeText(dir / "config.json", cfg.dump(2) + "\n");
    });
}

} // namespace kvscope
