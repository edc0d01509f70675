// Loader for llama2.c checkpoints (karpathy/llama2.c "legacy" export, version 0):
// a 7 x int32 header, then fp32 weights in a fixed order. A negative vocab_size means an
// unshared classifier follows the (unused) RoPE tables.
//
// The file is mapped and its tensors are used in place (tensorconv.h mappedTensor): only
// wq and wk, whose rows are permuted to the half-split RoPE layout, are copies (their file
// pages are given back after the copy), so a loaded model holds its weights about once.
#include "engine/modelimpl.h"
#include "engine/tensorconv.h"
#include "formats/mappedfile.h"
#include "util/fileio.h"

#include <filesystem>

namespace kvscope {

namespace fs = std::filesystem;

namespace {

std::string findTokenizerBeside(const fs::path& model) {
    const fs::path dir = model.has_parent_path() ? model.parent_path() : fs::path(".");
    if (fs::exists(dir / "tokenizer.bin"))
        return (dir / "tokenizer.bin").string();
    std::string found;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (e.is_regular_file() && n.rfind("tok", 0) == 0 && e.path().extension() == ".bin" &&
            e.path() != model) {
            if (!found.empty())
                return {}; // ambiguous: let the user choose
            found = e.path().string();
        }
    }
    return found;
}

} // namespace

LoadedCheckpoint loadLlama2c(const std::string& path) {
    const auto map = MappedFile::open(path);
    const std::size_t size = map->size();
    ByteReader r(map->data(), size, path);
    if (size >= 4 && std::string(reinterpret_cast<const char*>(map->data()), 4) == "ak42")
        throw KvError(path + ": llama2.c export versions 1/2 ('ak42' magic) are not supported; "
                             "export with --version 0 (legacy)");
    const int32_t dim = r.i32("header.dim");
    const int32_t hidden = r.i32("header.hidden_dim");
    const int32_t nLayers = r.i32("header.n_layers");
    const int32_t nHeads = r.i32("header.n_heads");
    const int32_t nKv = r.i32("header.n_kv_heads");
    const int32_t vocabRaw = r.i32("header.vocab_size");
    const int32_t seqLen = r.i32("header.seq_len");

    auto check = [&](int64_t v, const char* name, int64_t limit) {
        if (v <= 0 || v > limit)
            throw KvError(path + ": header field " + name + " = " + std::to_string(v) +
                          " is outside 1.." + std::to_string(limit) +
                          " (is this a llama2.c checkpoint?)");
    };
    check(dim, "dim", 1 << 16);
    check(hidden, "hidden_dim", 1 << 18);
    check(nLayers, "n_layers", 1024);
    check(nHeads, "n_heads", 1024);
    check(nKv, "n_kv_heads", 1024);
    check(seqLen, "seq_len", 1 << 24);
    const bool shared = vocabRaw > 0;
    const int64_t vocab = vocabRaw > 0 ? vocabRaw : -static_cast<int64_t>(vocabRaw);
    check(vocab, "vocab_size", 1 << 22);
    // The attention layout, each check naming the field that is wrong (validateConfig below
    // repeats the last two with the same words; the file size check needs them first).
    if (dim % nHeads != 0)
        throw KvError(path + ": header.n_heads = " + std::to_string(nHeads) +
                      " does not divide header.dim = " + std::to_string(dim));
    if (nHeads % nKv != 0)
        throw KvError(path + ": header.n_kv_heads = " + std::to_string(nKv) +
                      " does not divide header.n_heads = " + std::to_string(nHeads));
    if ((dim / nHeads) % 2 != 0)
        throw KvError(path + ": head_dim (header.dim / header.n_heads) = " +
                      std::to_string(dim / nHeads) + " must be even for RoPE");

    const int64_t C = dim, F = hidden, L = nLayers, hd = dim / nHeads, kvDim = nKv * hd;
    const int64_t floats = vocab * C + L * C + L * C * C + 2 * L * C * kvDim + L * C * C + L * C +
                           3 * L * C * F + C + seqLen * hd + (shared ? 0 : vocab * C);
    const uint64_t expected = 28 + static_cast<uint64_t>(floats) * 4;
    if (size != expected)
        throw KvError(path + ": file is " + std::to_string(size) + " bytes but its header (dim " +
                      std::to_string(dim) + ", layers " + std::to_string(L) + ", vocab " +
                      std::to_string(vocab) + ", seq_len " + std::to_string(seqLen) + ") implies " +
                      std::to_string(expected) + " (truncated or not a llama2.c checkpoint)");

    LoadedCheckpoint ck;
    ck.mappings.push_back(map);
    auto& c = ck.config;
    c.architecture = "llama";
    c.hfArchitecture = "LlamaForCausalLM";
    c.sourceFormat = "llama2c";

    // The header fixes every tensor's shape and the size check above their total: no tensor
    // can disagree with the config, so there is no per-tensor shape to check.
    const float* const first = reinterpret_cast<const float*>(map->data() + 28);
    const float* p = first;
    // The next tensor, used in place from the mapping.
    auto take = [&](std::vector<int64_t> shape) {
        int64_t n = 1;
        for (int64_t s : shape)
            n *= s;
        auto t = mappedTensor(map, reinterpret_cast<const std::uint8_t*>(p), shape, at::kFloat);
        p += n;
        return t;
    };
    // Weights are named as run.c's TransformerWeights fields, a layer's slice as "wq (layer 0)".
    int order = 0;
    auto source = [&](const std::string& hfName, const std::string& name, int64_t heads) {
        ck.sources[hfName] = {path, name, order++, heads, 28 + (p - first) * 4, 4};
    };

    c.dim = C;
    c.hiddenDim = F;
    c.nLayers = L;
    c.nHeads = nHeads;
    c.nKvHeads = nKv;
    c.headDim = hd;
    c.vocabSize = vocab;
    c.maxContext = seqLen;
    c.normEps = 1e-5;
    c.ropeTheta = 10000.0;
    c.tiedEmbeddings = shared;
    c.weightDtype = "f32";
    c.bosId = 1;
    c.eosId = 2;
    validateConfig(c, path,
                   {{"dim", "header.dim"},
                    {"hidden_dim", "header.hidden_dim"},
                    {"n_layers", "header.n_layers"},
                    {"n_heads", "header.n_heads"},
                    {"n_kv_heads", "header.n_kv_heads"},
                    {"head_dim", "head_dim (header.dim / header.n_heads)"},
                    {"vocab_size", "header.vocab_size"},
                    {"max_context", "header.seq_len"}});

    auto& w = ck.weights;
    auto layerName = [](int64_t l, const char* suffix) {
        return "model.layers." + std::to_string(l) + "." + suffix;
    };
    source("model.embed_tokens.weight", "token_embedding_table", 0);
    w["model.embed_tokens.weight"] = take({vocab, C});
    auto perLayer = [&](const char* suffix, const char* name, std::vector<int64_t> shape,
                        int64_t heads) {
        for (int64_t l = 0; l < L; ++l) {
            source(layerName(l, suffix), std::string(name) + " (layer " + std::to_string(l) + ")",
                   heads);
            auto t = take(shape);
            if (heads > 0) {
                // A copy in the half-split layout; the file's pages are not read again.
                const at::Tensor stored = t;
                t = permuteInterleavedToHalf(t, heads);
                map->release(stored.data_ptr(), std::size_t(stored.nbytes()));
            }
            w[layerName(l, suffix)] = t;
        }
    };
    perLayer("input_layernorm.weight", "rms_att_weight", {C}, 0);
    perLayer("self_attn.q_proj.weight", "wq", {C, C}, nHeads);
    perLayer("self_attn.k_proj.weight", "wk", {kvDim, C}, nKv);
    perLayer("self_attn.v_proj.weight", "wv", {kvDim, C}, 0);
    perLayer("self_attn.o_proj.weight", "wo", {C, C}, 0);
    perLayer("post_attention_layernorm.weight", "rms_ffn_weight", {C}, 0);
    perLayer("mlp.gate_proj.weight", "w1", {F, C}, 0);
    perLayer("mlp.down_proj.weight", "w2", {C, F}, 0);
    perLayer("mlp.up_proj.weight", "w3", {F, C}, 0);
    source("model.norm.weight", "rms_final_weight", 0);
    w["model.norm.weight"] = take({C});
    p += seqLen * hd; // legacy freq_cis_real + freq_cis_imag, unused
    if (!shared) {
        source("lm_head.weight", "wcls", 0);
        w["lm_head.weight"] = take({vocab, C});
    }
    ck.tokenizerPath = findTokenizerBeside(fs::path(path));
    return ck;
}

} // namespace kvscope
