// Loader for GGUF files of the llama family (general.architecture llama, mistral, qwen2).
// Tensors F32/F16/BF16 keep their dtype; quantized ones (Q8_0, Q4_0, Q4_1) are dequantized
// to f32. GGUF stores llama q/k rows in the interleaved RoPE layout (llama.cpp permutes HF
// weights when converting), so they are permuted back to the half layout here; qwen2 GGUFs
// use NEOX (half) RoPE already.
#include "engine/modelimpl.h"
#include "formats/gguf.h"

#include <algorithm>
#include <map>

namespace kvscope {

namespace {

at::Tensor readTensor(const gguf::File& f, const gguf::TensorInfo& t) {
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend()); // GGUF ne[0] is fastest
    const auto span = f.data(t);
    switch (t.type) {
    case gguf::TensorType::F32:
        return at::from_blob(const_cast<uint8_t*>(span.data()), shape, at::kFloat).clone();
    case gguf::TensorType::F16:
        return at::from_blob(const_cast<uint8_t*>(span.data()), shape, at::kHalf).clone();
    case gguf::TensorType::BF16:
        return at::from_blob(const_cast<uint8_t*>(span.data()), shape, at::kBFloat16).clone();
    default: {
        auto v = f.readF32(t); // throws for unsupported types, naming tensor and type
        return at::from_blob(v.data(), shape, at::kFloat).clone();
    }
    }
}

} // namespace

LoadedCheckpoint loadGguf(const std::string& path) {
    auto opened = gguf::File::open(path);
    if (!opened)
        throw KvError(opened.message());
    const gguf::File& f = opened.value();
    const std::string arch = f.getString("general.architecture");
    if (arch != "llama" && arch != "mistral" && arch != "qwen2")
        throw KvError(path + ": general.architecture '" + arch +
                      "' is not supported (supported: llama, mistral, qwen2)");
    auto key = [&](const char* k) { return arch + "." + k; };

    LoadedCheckpoint ck;
    auto& c = ck.config;
    c.architecture = "llama";
    c.hfArchitecture = arch == "qwen2"     ? "Qwen2ForCausalLM"
                       : arch == "mistral" ? "MistralForCausalLM"
                                           : "LlamaForCausalLM";
    c.sourceFormat = "gguf";
    c.dim = f.getI64(key("embedding_length"));
    c.hiddenDim = f.getI64(key("feed_forward_length"));
    c.nLayers = f.getI64(key("block_count"));
    c.nHeads = f.getI64(key("attention.head_count"));
    c.nKvHeads =
        f.has(key("attention.head_count_kv")) ? f.getI64(key("attention.head_count_kv")) : c.nHeads;
    if (c.nHeads <= 0 || c.nKvHeads <= 0 || c.dim <= 0)
        throw KvError(path + ": " + key("attention.head_count") +
                      " / embedding_length must be positive");
    c.headDim = f.has(key("attention.key_length")) ? f.getI64(key("attention.key_length"))
                                                   : c.dim / c.nHeads;
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
    c.attentionBias = arch == "qwen2";
    c.bosId = f.has("tokenizer.ggml.bos_token_id") ? f.getI32("tokenizer.ggml.bos_token_id") : -1;
    c.eosId = f.has("tokenizer.ggml.eos_token_id") ? f.getI32("tokenizer.ggml.eos_token_id") : -1;
    c.vocabSize = f.has(key("vocab_size")) ? f.getI64(key("vocab_size")) : 1;
    // The attention layout is checked before any tensor is read or permuted by head: a head
    // count that does not divide the width would otherwise fail deep inside libtorch.
    if (!f.has(key("attention.key_length")) && c.dim % c.nHeads != 0)
        throw KvError(path + ": " + key("attention.head_count") + " = " + std::to_string(c.nHeads) +
                      " does not divide " + key("embedding_length") + " = " +
                      std::to_string(c.dim));
    if (c.nHeads % c.nKvHeads != 0)
        throw KvError(path + ": " + key("attention.head_count_kv") + " = " +
                      std::to_string(c.nKvHeads) + " does not divide " +
                      key("attention.head_count") + " = " + std::to_string(c.nHeads));
    validateConfig(c, path);

    std::map<std::string, int> typeCount;
    auto& w = ck.weights;
    const bool interleaved = arch != "qwen2";
    for (const auto& t : f.tensors()) {
        typeCount[gguf::typeName(t.type)]++;
        std::string name = t.name;
        at::Tensor x = readTensor(f, t);
        if (name == "token_embd.weight") {
            w["model.embed_tokens.weight"] = x;
        } else if (name == "output_norm.weight") {
            w["model.norm.weight"] = x;
        } else if (name == "output.weight") {
            w["lm_head.weight"] = x;
        } else if (name.rfind("blk.", 0) == 0) {
            const auto dot = name.find('.', 4);
            const std::string layer = name.substr(4, dot - 4);
            const std::string rest = name.substr(dot + 1);
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
            };
            auto it = names.find(rest);
            if (it == names.end())
                continue; // e.g. rope_freqs: not used by this architecture
            if (interleaved && rest.rfind("attn_q.", 0) == 0)
                x = permuteInterleavedToHalf(x, c.nHeads);
            if (interleaved && rest.rfind("attn_k.", 0) == 0)
                x = permuteInterleavedToHalf(x, c.nKvHeads);
            w["model.layers." + layer + "." + it->second] = x;
        }
    }
    auto emb = w.find("model.embed_tokens.weight");
    if (emb == w.end())
        throw KvError(path + ": missing tensor 'token_embd.weight'");
    c.vocabSize = emb->second.size(0);
    // llama.cpp writes output.weight even when it equals the embedding; keep it (the
    // forward uses it either way) but record tying when it is absent.
    c.tiedEmbeddings = !w.count("lm_head.weight");
    const auto most = std::max_element(typeCount.begin(), typeCount.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
    std::string dtype = most == typeCount.end() ? "F32" : most->first;
    std::transform(dtype.begin(), dtype.end(), dtype.begin(), ::tolower);
    c.weightDtype = dtype;
    ck.tokenizerPath = path; // the embedded vocabulary
    return ck;
}

} // namespace kvscope
