#include "engine/convert.h"
#include "engine/modelimpl.h"
#include "engine/randommodel.h"
#include "engine/tensorconv.h"
#include "formats/ggufquantize.h"
#include "formats/ggufwriter.h"
#include "formats/safetensorswriter.h"
#include "tokenizer/hfexport.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

namespace kvscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool isGemma(const ModelConfig& c) {
    return c.hfArchitecture == "Gemma2ForCausalLM" || c.hfArchitecture == "Gemma3ForCausalLM";
}

// Gemma's config.json fields (loadhf.cpp readGemmaConfig reads them back).
void gemmaConfig(const ModelConfig& c, json& j) {
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["hidden_act"] = "gelu_pytorch_tanh";
    j["query_pre_attn_scalar"] =
        c.attentionScale > 0 ? 1.0 / (c.attentionScale * c.attentionScale) : double(c.headDim);
    j["attn_logit_softcapping"] = c.attnSoftcap > 0 ? json(c.attnSoftcap) : json();
    j["final_logit_softcapping"] = c.finalSoftcap > 0 ? json(c.finalSoftcap) : json();
    j["sliding_window"] = c.slidingWindow > 0 ? json(c.slidingWindow) : json();
    if (!c.slidingLayers.empty()) {
        json types = json::array();
        for (const bool sliding : c.slidingLayers)
            types.push_back(sliding ? "sliding_attention" : "full_attention");
        j["layer_types"] = types;
    }
    if (c.hfArchitecture == "Gemma3ForCausalLM")
        j["rope_local_base_freq"] = c.ropeThetaLocal > 0 ? c.ropeThetaLocal : c.ropeTheta;
}

// The weights as the checkpoint format names them: Phi-3 stores q/k/v as one matrix and
// gate/up as another (the engine holds them split: splitFusedWeights). Quantized weights stay
// quantized (fused rows of one type are still whole blocks); writers widen one at a time.
std::map<std::string, Matrix> fusedForPhi3(const Model::Impl& impl) {
    std::map<std::string, Matrix> out;
    for (const auto& [name, t] : impl.named) {
        const auto q = impl.quantized.find(name);
        out[name] = q == impl.quantized.end()
                        ? Matrix(t)
                        : Matrix(t.contiguous(), q->second.type, q->second.shape.at(1));
    }
    if (impl.config.hfArchitecture != "Phi3ForCausalLM")
        return out;
    auto fuse = [&](const std::string& fused, const std::vector<std::string>& parts) {
        std::vector<at::Tensor> rows;
        Matrix first;
        for (const auto& p : parts) {
            const auto it = out.find(p);
            if (it == out.end())
                throw KvError(impl.path + ": tensor " + p + " is missing");
            // Parts of different types cannot share one tensor's blocks: widen them all.
            const bool sameKind = rows.empty() || (it->second.type == first.type);
            if (rows.empty())
                first = it->second;
            rows.push_back(sameKind ? it->second.t : widenMatrix(it->second));
            if (!sameKind)
                first = Matrix();
            out.erase(it);
        }
        if (first.quantized())
            out[fused] = Matrix(at::cat(rows, 0), first.type, first.cols);
        else {
            for (auto& r : rows)
                r = r.scalar_type() == at::kByte ? r : r.to(at::kFloat);
            out[fused] = Matrix(at::cat(rows, 0));
        }
    };
    for (int64_t l = 0; l < impl.config.nLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        fuse(p + "self_attn.qkv_proj.weight",
             {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
              p + "self_attn.v_proj.weight"});
        fuse(p + "mlp.gate_up_proj.weight", {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
    }
    return out;
}

json llamaConfig(const ModelConfig& c, const std::string& torchDtype) {
    static const std::map<std::string, std::string> kModelType = {
        {"Qwen2ForCausalLM", "qwen2"},        {"MistralForCausalLM", "mistral"},
        {"Qwen3ForCausalLM", "qwen3"},        {"Gemma2ForCausalLM", "gemma2"},
        {"Gemma3ForCausalLM", "gemma3_text"}, {"Phi3ForCausalLM", "phi3"}};
    const auto type = kModelType.find(c.hfArchitecture);
    json j = {
        {"architectures", {c.hfArchitecture.empty() ? "LlamaForCausalLM" : c.hfArchitecture}},
        {"model_type", type == kModelType.end() ? "llama" : type->second},
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
    if (isGemma(c))
        gemmaConfig(c, j);
    if (c.hfArchitecture == "Phi3ForCausalLM") {
        j["sliding_window"] = c.slidingWindow > 0 ? json(c.slidingWindow) : json();
        j["original_max_position_embeddings"] = c.maxContext; // longrope: its own, below
    }
    if (c.ropeScaling.type == "longrope") {
        j["rope_scaling"] = {{"rope_type", "longrope"},
                             {"short_factor", c.ropeScaling.shortFactor},
                             {"long_factor", c.ropeScaling.longFactor},
                             {"attention_factor", c.ropeScaling.attentionFactor}};
        j["original_max_position_embeddings"] = c.ropeScaling.originalMaxPositions;
    } else if (c.ropeScaling.type != "none") {
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

void checkModelFolder(const std::string& outDir, bool overwrite) {
    const fs::path dir(outDir);
    if (fs::exists(dir) && !fs::is_directory(dir))
        throw KvError(outDir + ": exists and is not a folder");
    if (fs::exists(dir / "config.json") && !overwrite)
        throw KvError(outDir + ": already holds a model (config.json); pass --force to replace it");
}

nlohmann::json huggingFaceConfig(const ModelConfig& c, const std::string& torchDtype) {
    return c.architecture == "gpt2" ? gpt2Config(c, torchDtype) : llamaConfig(c, torchDtype);
}

nlohmann::json huggingFaceGenerationConfig(const ModelConfig& c) {
    json gen = json::object();
    if (c.bosId >= 0)
        gen["bos_token_id"] = c.bosId;
    if (c.eosId >= 0)
        gen["eos_token_id"] = c.eosId;
    return gen;
}

void writeHuggingFaceFolder(const ModelConfig& c, const std::shared_ptr<const tok::Tokenizer>& tok,
                            const std::string& source, const std::vector<LazyWeight>& weights,
                            const std::string& outDir, const ConvertOptions& options) {
    checkModelFolder(outDir, options.overwrite);
    const fs::path dir(outDir);

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
    writer.setMetadata("source", source);
    for (const auto& w : weights) {
        // Gemma's checkpoints store norm scales minus 1 (its RMSNorm adds the 1).
        const bool gemmaNorm = isGemma(c) && w.name.ends_with("norm.weight");
        // Made while the file is written, one tensor at a time.
        writer.addTensor(w.name, sd, w.shape, [values = w.values, gemmaNorm, st] {
            const at::Tensor t = values();
            const at::Tensor x = gemmaNorm ? (t.to(at::kCPU, at::kFloat) - 1.0).to(st).contiguous()
                                           : t.to(at::kCPU, st).contiguous();
            const auto* p = static_cast<const uint8_t*>(x.data_ptr());
            return std::vector<uint8_t>(p, p + x.numel() * x.element_size());
        });
    }
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
    const json cfg = huggingFaceConfig(c, torchDtype);
    writeText(dir / "generation_config.json", huggingFaceGenerationConfig(c).dump(2) + "\n");
    if (tokFiles) {
        writeText(dir / "tokenizer.json", tokFiles->tokenizerJson);
        writeText(dir / "tokenizer_config.json", tokFiles->tokenizerConfigJson);
    }
    // config.json last: its presence marks a complete folder.
    writeText(dir / "config.json", cfg.dump(2) + "\n");
}

Status convertToHuggingFace(const Model& model, const std::string& outDir,
                            const ConvertOptions& options) {
    return catchToStatus([&] {
        const auto& impl = model.impl();
        std::vector<LazyWeight> weights;
        for (const auto& [name, m] : fusedForPhi3(impl))
            weights.push_back(
                {name, m.quantized() ? std::vector<int64_t>{m.rows(), m.cols} : m.t.sizes().vec(),
                 [m] { return widenMatrix(m); }});
        writeHuggingFaceFolder(impl.config, model.tokenizer(), impl.path, weights, outDir, options);
    });
}

namespace {

// The tokenizer as llama.cpp's GGUF vocabulary keys, from its Hugging Face form (the one export
// every tokenizer kind has).
void ggufTokenizer(const tok::Tokenizer& tok, gguf::Writer& w, int64_t vocabSize) {
    auto exported = tok::exportHuggingFace(tok);
    if (!exported)
        throw KvError(exported.message());
    const json t = json::parse(exported.value().tokenizerJson);
    const json& model = t.at("model");
    const json pre = t.value("pre_tokenizer", json());
    const bool gpt2Pre = pre.is_object() && pre.value("type", "") == "ByteLevel" &&
                         pre.value("use_regex", true) && t.value("normalizer", json()).is_null();
    if (model.value("type", "") != "BPE" || !gpt2Pre)
        throw KvError(
            "the tokenizer (" + tok.kind() + ", pre-tokenizer " +
            (pre.is_object() ? pre.value("type", std::string("?")) : std::string("none")) +
            ") is not a byte-level BPE with GPT-2's pre-tokenizer; kvscope writes only "
            "that kind to GGUF, since llama.cpp would split other texts differently");
    std::vector<std::string> tokens(static_cast<std::size_t>(vocabSize));
    std::vector<int32_t> types(static_cast<std::size_t>(vocabSize), 1); // normal
    std::vector<bool> seen(static_cast<std::size_t>(vocabSize), false);
    auto place = [&](const std::string& piece, int64_t id) {
        if (id < 0 || id >= vocabSize)
            throw KvError("token '" + piece + "' has id " + std::to_string(id) +
                          " outside the model's " + std::to_string(vocabSize) + " embeddings");
        tokens[static_cast<std::size_t>(id)] = piece;
        seen[static_cast<std::size_t>(id)] = true;
    };
    for (const auto& [piece, id] : model.at("vocab").items())
        place(piece, id.get<int64_t>());
    for (const auto& a : t.value("added_tokens", json::array())) {
        const int64_t id = a.at("id").get<int64_t>();
        place(a.at("content").get<std::string>(), id);
        types[static_cast<std::size_t>(id)] = a.value("special", false) ? 3 : 4; // control : user
    }
    for (int64_t i = 0; i < vocabSize; ++i)
        if (!seen[static_cast<std::size_t>(i)]) { // an embedding row no token uses
            tokens[static_cast<std::size_t>(i)] = "[PAD" + std::to_string(i) + "]";
            types[static_cast<std::size_t>(i)] = 5; // unused
        }
    std::vector<std::string> merges;
    for (const auto& m : model.value("merges", json::array()))
        merges.push_back(m.is_array()
                             ? m.at(0).get<std::string>() + " " + m.at(1).get<std::string>()
                             : m.get<std::string>());
    w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::Value::string("gpt-2"));
    w.set("tokenizer.ggml.tokens", gguf::Value::stringArray(std::move(tokens)));
    w.set("tokenizer.ggml.token_type", gguf::Value::array(types));
    w.set("tokenizer.ggml.merges", gguf::Value::stringArray(std::move(merges)));
    const auto bos = tok.bosId(), eos = tok.eosId();
    if (bos)
        w.set("tokenizer.ggml.bos_token_id", gguf::Value::scalar(static_cast<uint32_t>(*bos)));
    if (eos)
        w.set("tokenizer.ggml.eos_token_id", gguf::Value::scalar(static_cast<uint32_t>(*eos)));
    const auto probe = tok.encode("a");
    w.set("tokenizer.ggml.add_bos_token",
          gguf::Value::scalar(bos && !probe.empty() && probe.front() == *bos));
    w.set("tokenizer.ggml.add_eos_token",
          gguf::Value::scalar(eos && !probe.empty() && probe.back() == *eos));
    if (auto ct = tok.chatTemplate())
        w.set("tokenizer.chat_template", gguf::Value::string(*ct));
}

// llama.cpp's name for the model's architecture, or a KvError naming what it cannot express:
// biases (qwen2 is not written), a variation llama.cpp's graph for that architecture does not
// have, or a score scale it would derive differently.
std::string ggufArchitecture(const Model::Impl& impl) {
    const auto& c = impl.config;
    const std::string name = c.hfArchitecture.empty() ? c.architecture : c.hfArchitecture;
    auto refuse = [&](const std::string& why) {
        throw KvError(impl.path + ": " + name + " " + why +
                      "; GGUF export covers Llama, Mistral, Qwen3, Gemma 2 and Gemma 3 as "
                      "llama.cpp runs them");
    };
    if (c.architecture != "llama" || c.attentionBias || c.hfArchitecture == "Qwen2ForCausalLM")
        refuse("has attention biases or is not of the llama family");
    const std::string arch = llamaCppArchitecture(c); // Mistral runs as llama there
    const bool gemma = arch == "gemma2" || arch == "gemma3";
    // Phi-3's window covers every layer (llama.cpp reads it and disables it: the two engines
    // differ past it, whatever kvscope writes).
    const bool phi3Window =
        arch == "phi3" && c.slidingWindow > 0 &&
        std::count(c.slidingLayers.begin(), c.slidingLayers.end(), true) == c.nLayers;
    // What llama.cpp's graph for `arch` computes, against the config.
    const bool qkNorm = arch == "qwen3" || arch == "gemma3";
    if (c.qkNorm != qkNorm)
        refuse(std::string(c.qkNorm ? "normalizes" : "does not normalize") +
               " q and k heads, which llama.cpp's " + arch + " " +
               (qkNorm ? "always does" : "never does"));
    if (gemma != (c.postNorms && c.activation == "gelu_tanh" &&
                  std::abs(c.embedScale - std::sqrt(double(c.dim))) < 1e-9 * c.embedScale))
        refuse("differs from llama.cpp's " + arch +
               " in output norms, GeGLU or the sqrt(dim) embedding scale");
    if (!gemma && (c.attnSoftcap > 0 || c.finalSoftcap > 0 ||
                   (c.slidingWindow > 0 && !phi3Window) || c.attentionScale > 0))
        refuse("soft-caps, slides or rescales attention, which llama.cpp's " + arch + " does not");
    if (arch == "gemma2" && (c.attnSoftcap <= 0 || c.finalSoftcap <= 0))
        refuse("has no soft-capping, which llama.cpp's gemma2 always applies");
    if (arch == "gemma3" && c.attnSoftcap > 0)
        refuse("soft-caps attention scores, which llama.cpp's gemma3 does not");
    if (arch == "gemma2" && c.ropeThetaLocal > 0 && c.ropeThetaLocal != c.ropeTheta)
        refuse("has a separate RoPE base for sliding layers, which llama.cpp's gemma2 does not");
    if (gemma) {
        const bool big = c.nLayers == (arch == "gemma2" ? 46 : 62); // llama.cpp's 27B rule
        const double derived =
            big ? 1.0 / std::sqrt(double(c.dim / c.nHeads)) : 1.0 / std::sqrt(double(c.headDim));
        if (std::abs(c.scoreScale() - derived) > 1e-12 * derived)
            refuse("scales scores by " + std::to_string(c.scoreScale()) + "; llama.cpp derives " +
                   std::to_string(derived) + " for this shape");
    }
    return arch;
}

} // namespace

Status convertToGguf(const Model& model, const std::string& outPath,
                     const ConvertOptions& options) {
    return catchToStatus([&] {
        if (fs::exists(outPath) && !options.overwrite)
            throw KvError(outPath + ": exists; pass --force to replace it");
        const auto& impl = model.impl();
        const auto& c = impl.config;
        const std::string arch = ggufArchitecture(impl);
        const bool llama3 = c.ropeScaling.type == "llama3" && arch == "llama";
        if (c.ropeScaling.type != "none" && !llama3 &&
            !(arch == "phi3" && c.ropeScaling.type == "longrope"))
            throw KvError(impl.path + ": RoPE scaling '" + c.ropeScaling.type +
                          "' is not written to GGUF by this version");
        if (llama3) {
            // llama.cpp reads Llama 3's scaling from one divisor per frequency, the way its
            // converter writes it; kvscope's loader gives the parameters back from them.
            const auto& s = c.ropeScaling;
            if (s.lowFreqFactor != 1.0 || s.highFreqFactor != 4.0 || s.originalMaxPositions != 8192)
                throw KvError(impl.path + ": llama3 RoPE scaling with low_freq_factor " +
                              std::to_string(s.lowFreqFactor) + ", high_freq_factor " +
                              std::to_string(s.highFreqFactor) + " and " +
                              std::to_string(s.originalMaxPositions) +
                              " original positions is not Llama 3's (1, 4, 8192): GGUF keeps "
                              "only the divisors, and they would be read back as another scaling");
        }
        std::string dtype = options.dtype.empty() ? "f32" : options.dtype;
        // A quantized file is the one llama-quantize makes from the f32 file: its type per
        // tensor (gguf::quantizedType) and ggml's reference quantizers, byte for byte.
        const std::optional<gguf::QuantMix> mix = gguf::quantMix(dtype);
        const gguf::TensorType big =
            mix               ? mix->base
            : dtype == "f16"  ? gguf::TensorType::F16
            : dtype == "bf16" ? gguf::TensorType::BF16
            : dtype == "f32"  ? gguf::TensorType::F32
                              : throw KvError("--out-dtype " + dtype + ": f32, f16, bf16, " +
                                              std::string(gguf::quantMixNames()));
        gguf::QuantModel quantModel;
        quantModel.nLayers = c.nLayers;
        quantModel.hasOutput = !c.tiedEmbeddings && arch != "gemma2"; // as written below
        quantModel.llama70B = arch == "llama" && c.nLayers == 80 && c.nHeads != c.nKvHeads;
        gguf::Writer w;
        auto key = [&](const char* k) { return arch + "." + k; };
        w.set("general.architecture", gguf::Value::string(arch));
        w.set("general.name", gguf::Value::string(fs::path(impl.path).filename().string()));
        // llama.cpp's enum llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32, or the mix's.
        w.set("general.file_type",
              gguf::Value::scalar(static_cast<uint32_t>(mix ? mix->fileType
                                                        : big == gguf::TensorType::F32 ? 0
                                                        : big == gguf::TensorType::F16 ? 1
                                                                                       : 32)));
        if (mix) // as llama-quantize writes it (GGML_QNT_VERSION)
            w.set("general.quantization_version", gguf::Value::scalar(uint32_t{2}));
        w.set(key("context_length"), gguf::Value::scalar(static_cast<uint32_t>(c.maxContext)));
        w.set(key("embedding_length"), gguf::Value::scalar(static_cast<uint32_t>(c.dim)));
        w.set(key("block_count"), gguf::Value::scalar(static_cast<uint32_t>(c.nLayers)));
        w.set(key("feed_forward_length"), gguf::Value::scalar(static_cast<uint32_t>(c.hiddenDim)));
        w.set(key("attention.head_count"), gguf::Value::scalar(static_cast<uint32_t>(c.nHeads)));
        w.set(key("attention.head_count_kv"),
              gguf::Value::scalar(static_cast<uint32_t>(c.nKvHeads)));
        w.set(key("attention.key_length"), gguf::Value::scalar(static_cast<uint32_t>(c.headDim)));
        w.set(key("attention.value_length"), gguf::Value::scalar(static_cast<uint32_t>(c.headDim)));
        w.set(key("rope.dimension_count"), gguf::Value::scalar(static_cast<uint32_t>(c.headDim)));
        w.set(key("rope.freq_base"), gguf::Value::scalar(static_cast<float>(c.ropeTheta)));
        w.set(key("attention.layer_norm_rms_epsilon"),
              gguf::Value::scalar(static_cast<float>(c.normEps)));
        w.set(key("vocab_size"), gguf::Value::scalar(static_cast<uint32_t>(c.vocabSize)));
        if (arch == "phi3")
            w.set(key("attention.sliding_window"),
                  gguf::Value::scalar(static_cast<uint32_t>(c.slidingWindow)));
        if (llama3) {
            const std::vector<float> divisors = llama3FreqFactors(c);
            w.addTensor("rope_freqs.weight", {int64_t(divisors.size())},
                        std::span<const float>(divisors), gguf::TensorType::F32);
        }
        if (c.ropeScaling.type == "longrope") {
            // As llama.cpp's converter writes Phi-3 128k: two factor tensors, the attention
            // factor and the original context (llama.cpp picks the long factors when its
            // context exceeds it).
            const auto& s = c.ropeScaling;
            w.set(key("rope.scaling.attn_factor"),
                  gguf::Value::scalar(static_cast<float>(s.attentionFactor)));
            w.set(key("rope.scaling.original_context_length"),
                  gguf::Value::scalar(static_cast<uint32_t>(s.originalMaxPositions)));
            for (const auto& [name, values] :
                 {std::pair{"rope_factors_long.weight", &s.longFactor},
                  std::pair{"rope_factors_short.weight", &s.shortFactor}}) {
                const std::vector<float> v(values->begin(), values->end());
                w.addTensor(name, {int64_t(v.size())}, std::span<const float>(v),
                            gguf::TensorType::F32);
            }
        }
        if (isGemma(c)) {
            if (c.attnSoftcap > 0)
                w.set(key("attn_logit_softcapping"),
                      gguf::Value::scalar(static_cast<float>(c.attnSoftcap)));
            if (c.finalSoftcap > 0)
                w.set(key("final_logit_softcapping"),
                      gguf::Value::scalar(static_cast<float>(c.finalSoftcap)));
            if (c.slidingWindow > 0) {
                w.set(key("attention.sliding_window"),
                      gguf::Value::scalar(static_cast<uint32_t>(c.slidingWindow)));
                // One bool per layer (std::vector<bool> has no contiguous storage).
                const std::unique_ptr<bool[]> sliding(new bool[c.slidingLayers.size()]);
                std::copy(c.slidingLayers.begin(), c.slidingLayers.end(), sliding.get());
                w.set(key("attention.sliding_window_pattern"),
                      gguf::Value::array(
                          std::span<const bool>(sliding.get(), c.slidingLayers.size())));
            }
            if (c.ropeThetaLocal > 0)
                w.set(key("rope.freq_base_swa"),
                      gguf::Value::scalar(static_cast<float>(c.ropeThetaLocal)));
        }
        if (auto tok = model.tokenizer())
            ggufTokenizer(*tok, w, c.vocabSize);
        else
            w.set("tokenizer.ggml.model", gguf::Value::string("no_vocab"));

        // HF name -> GGUF name; q/k rows back to adjacent pairs.
        const std::map<std::string, Matrix> named = fusedForPhi3(impl);
        auto put = [&](const std::string& hfName, const std::string& ggufName, int64_t permute) {
            const auto it = named.find(hfName);
            if (it == named.end())
                throw KvError(impl.path + ": tensor " + hfName + " is missing");
            const Matrix m = it->second;
            const std::vector<int64_t> shape =
                m.quantized() ? std::vector<int64_t>{m.rows(), m.cols} : m.t.sizes().vec();
            std::vector<int64_t> dims(shape.rbegin(), shape.rend());
            // Vectors in f32; a quantized mix's type per tensor as llama-quantize picks it.
            const gguf::TensorType type =
                shape.size() == 1 ? gguf::TensorType::F32
                : mix             ? gguf::quantizedType(*mix, quantModel, ggufName, dims)
                                  : big;
            // Made while the file is written, one tensor at a time: an 8B model is never
            // widened whole.
            w.addFloatTensor(
                ggufName, dims,
                [m, permute] {
                    at::Tensor x = widenMatrix(m).to(at::kCPU, at::kFloat).contiguous();
                    if (permute > 0)
                        x = permuteHalfToInterleaved(x, permute).contiguous();
                    const float* p = x.data_ptr<float>();
                    return std::vector<float>(p, p + x.numel());
                },
                type);
        };
        // llama.cpp's llama architecture rotates interleaved pairs; the others, halves.
        const bool interleaved = arch == "llama";
        const bool phi3 = arch == "phi3";
        put("model.embed_tokens.weight", "token_embd.weight", 0);
        for (int64_t l = 0; l < c.nLayers; ++l) {
            const std::string h = "model.layers." + std::to_string(l) + ".";
            const std::string g = "blk." + std::to_string(l) + ".";
            put(h + "input_layernorm.weight", g + "attn_norm.weight", 0);
            if (phi3) {
                put(h + "self_attn.qkv_proj.weight", g + "attn_qkv.weight", 0);
            } else {
                put(h + "self_attn.q_proj.weight", g + "attn_q.weight", interleaved ? c.nHeads : 0);
                put(h + "self_attn.k_proj.weight", g + "attn_k.weight",
                    interleaved ? c.nKvHeads : 0);
                put(h + "self_attn.v_proj.weight", g + "attn_v.weight", 0);
            }
            put(h + "self_attn.o_proj.weight", g + "attn_output.weight", 0);
            if (c.qkNorm) {
                put(h + "self_attn.q_norm.weight", g + "attn_q_norm.weight", 0);
                put(h + "self_attn.k_norm.weight", g + "attn_k_norm.weight", 0);
            }
            if (c.postNorms) {
                put(h + "post_attention_layernorm.weight", g + "post_attention_norm.weight", 0);
                put(h + "pre_feedforward_layernorm.weight", g + "ffn_norm.weight", 0);
                put(h + "post_feedforward_layernorm.weight", g + "post_ffw_norm.weight", 0);
            } else {
                put(h + "post_attention_layernorm.weight", g + "ffn_norm.weight", 0);
            }
            if (phi3) {
                put(h + "mlp.gate_up_proj.weight", g + "ffn_up.weight", 0); // gate rows first
            } else {
                put(h + "mlp.gate_proj.weight", g + "ffn_gate.weight", 0);
                put(h + "mlp.up_proj.weight", g + "ffn_up.weight", 0);
            }
            put(h + "mlp.down_proj.weight", g + "ffn_down.weight", 0);
        }
        put("model.norm.weight", "output_norm.weight", 0);
        if (!c.tiedEmbeddings && arch != "gemma2") // llama.cpp's gemma2 projects with the embedding
            put("lm_head.weight", "output.weight", 0);
        if (Status st = w.write(outPath); !st)
            throw KvError(st.message());
    });
}

} // namespace kvscope

namespace kvscope {

Status convertToLlama2c(const Model& model, const std::string& outPath,
                        const ConvertOptions& options) {
    return catchToStatus([&] {
        if (fs::exists(outPath) && !options.overwrite)
            throw KvError(outPath + ": exists; pass --force to replace it");
        if (!options.dtype.empty() && options.dtype != "f32")
            throw KvError("--out-dtype " + options.dtype + ": llama2.c checkpoints are f32");
        const auto& impl = model.impl();
        const auto& c = impl.config;
        // run.c's fixed choices: what the file cannot say must already hold.
        auto refuse = [&](const std::string& field, const std::string& why) {
            throw KvError(impl.path + ": " + field + " " + why +
                          "; a llama2.c checkpoint cannot carry it (run.c fixes it)");
        };
        if (c.architecture != "llama" || c.attentionBias)
            refuse("architecture " + (c.hfArchitecture.empty() ? c.architecture : c.hfArchitecture),
                   "is not a bias-free llama");
        if (c.qkNorm || c.postNorms || c.activation != "silu" || c.embedScale != 1.0 ||
            c.attentionScale > 0 || c.attnSoftcap > 0 || c.finalSoftcap > 0 || c.slidingWindow > 0)
            refuse("architecture " + c.hfArchitecture,
                   "has q/k norms, output norms, GeGLU, scaled embeddings or scores, "
                   "soft-capping or sliding windows");
        if (c.ropeScaling.type != "none")
            refuse("rope_scaling", "is '" + c.ropeScaling.type + "'");
        if (c.ropeTheta != 10000.0)
            refuse("rope_theta", "is " + std::to_string(c.ropeTheta) + ", not 10000");
        if (std::abs(c.normEps - 1e-5) > 1e-12)
            refuse("rms_norm_eps", "is " + std::to_string(c.normEps) + ", not 1e-5");
        if (c.headDim * c.nHeads != c.dim)
            refuse("head_dim", "× n_heads is not dim");

        const int64_t C = c.dim, hd = c.headDim;
        std::vector<std::uint8_t> out;
        auto putI32 = [&](int64_t v) {
            const auto i = static_cast<int32_t>(v);
            const auto* b = reinterpret_cast<const std::uint8_t*>(&i);
            out.insert(out.end(), b, b + 4);
        };
        auto putTensor = [&](const at::Tensor& t) {
            const at::Tensor f = t.to(at::kCPU, at::kFloat).contiguous();
            const auto* b = static_cast<const std::uint8_t*>(f.data_ptr());
            out.insert(out.end(), b, b + f.nbytes());
        };
        auto weight = [&](const std::string& name) -> at::Tensor {
            const auto it = impl.named.find(name);
            if (it == impl.named.end())
                throw KvError(impl.path + ": tensor " + name + " is missing");
            const auto q = impl.quantized.find(name);
            return q == impl.quantized.end()
                       ? it->second
                       : widenMatrix(Matrix(it->second.contiguous(), q->second.type,
                                            q->second.shape.at(1)));
        };
        auto layers = [&](const char* suffix, int64_t permuteHeads) {
            for (int64_t l = 0; l < c.nLayers; ++l) {
                at::Tensor t =
                    weight("model.layers." + std::to_string(l) + "." + suffix).to(at::kFloat);
                putTensor(permuteHeads > 0 ? permuteHalfToInterleaved(t, permuteHeads) : t);
            }
        };
        const int64_t floats = llamaParameterCount(c) + c.maxContext * hd;
        out.reserve(28 + static_cast<std::size_t>(floats) * 4);
        putI32(C);
        putI32(c.hiddenDim);
        putI32(c.nLayers);
        putI32(c.nHeads);
        putI32(c.nKvHeads);
        putI32(c.tiedEmbeddings ? c.vocabSize : -c.vocabSize);
        putI32(c.maxContext);
        putTensor(weight("model.embed_tokens.weight"));
        layers("input_layernorm.weight", 0);
        layers("self_attn.q_proj.weight", c.nHeads);
        layers("self_attn.k_proj.weight", c.nKvHeads);
        layers("self_attn.v_proj.weight", 0);
        layers("self_attn.o_proj.weight", 0);
        layers("post_attention_layernorm.weight", 0);
        layers("mlp.gate_proj.weight", 0);
        layers("mlp.down_proj.weight", 0);
        layers("mlp.up_proj.weight", 0);
        putTensor(weight("model.norm.weight"));
        // The legacy RoPE tables (freq_cis_real, freq_cis_imag): run.c and kvscope compute
        // RoPE themselves and skip them; written as the values they stood for.
        const at::Tensor angles =
            at::outer(at::arange(c.maxContext, at::kDouble),
                      1.0 / at::pow(10000.0, at::arange(0, hd, 2, at::kDouble) / double(hd)));
        putTensor(angles.cos());
        putTensor(angles.sin());
        if (!c.tiedEmbeddings)
            putTensor(weight("lm_head.weight"));
        writeFileAtomic(outPath, out.data(), out.size());
    });
}

} // namespace kvscope
