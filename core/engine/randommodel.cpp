// Random-weight models in real shapes (see randommodel.h). The weights come from
// Model::createRandom and the folder from convertToHuggingFace: this file only knows the shapes.
#include "engine/randommodel.h"
#include "engine/convert.h"
#include "engine/modelimpl.h"
#include "tokenizer/tokenizer.h"
#include "util/hash.h"

#include <ATen/CPUGeneratorImpl.h>

#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

namespace kvscope {

namespace fs = std::filesystem;

namespace {

// One published config.json as the engine reads it (loadhf.cpp's mapping).
ModelConfig llamaShape(const char* hfArchitecture, int64_t layers, int64_t hidden,
                       int64_t intermediate, int64_t heads, int64_t kvHeads, int64_t vocab,
                       int64_t maxPositions, double normEps, double ropeTheta, int32_t bos,
                       int32_t eos) {
    ModelConfig c;
    c.architecture = "llama";
    c.hfArchitecture = hfArchitecture;
    c.sourceFormat = "hf";
    c.nLayers = layers;
    c.dim = hidden;
    c.hiddenDim = intermediate;
    c.nHeads = heads;
    c.nKvHeads = kvHeads;
    c.headDim = 64; // every shape here: hidden_size / num_attention_heads (Llama 3.2: head_dim)
    c.vocabSize = vocab;
    c.maxContext = maxPositions;
    c.normEps = normEps;
    c.ropeTheta = ropeTheta;
    c.tiedEmbeddings = true;
    c.weightDtype = "bf16"; // torch_dtype of the published checkpoints (stories110m: f32)
    c.bosId = bos;
    c.eosId = eos;
    return c;
}

// What every Gemma 2/3 shares: GeGLU, four norms a layer, embeddings times sqrt(hidden), and
// every `pattern`-th layer global, the others sliding over `window` positions.
void gemmaShape(ModelConfig& c, int64_t headDim, int64_t window, int64_t pattern) {
    c.headDim = headDim;
    c.activation = "gelu_tanh";
    c.postNorms = true;
    c.embedScale = std::sqrt(static_cast<double>(c.dim));
    c.slidingWindow = window;
    c.slidingLayers = slidingPattern(c.nLayers, pattern);
}

std::vector<RandomModelShape> makeShapes() {
    // Numbers from each checkpoint's config.json on the Hugging Face hub.
    RandomModelShape smol{
        "smollm2-135m", "HuggingFaceTB/SmolLM2-135M",
        llamaShape("LlamaForCausalLM", 30, 576, 1536, 9, 3, 49152, 8192, 1e-5, 100000.0, 0, 0),
        "SmolLM/SmolLM2 (49,152 tokens)"};
    RandomModelShape llama{"llama-3.2-1b", "meta-llama/Llama-3.2-1B",
                           llamaShape("LlamaForCausalLM", 16, 2048, 8192, 32, 8, 128256, 131072,
                                      1e-5, 500000.0, 128000, 128001),
                           "Llama 3 / 3.1 / 3.2 (128,256 tokens)"};
    llama.config.ropeScaling.type = "llama3";
    llama.config.ropeScaling.factor = 32.0;
    llama.config.ropeScaling.lowFreqFactor = 1.0;
    llama.config.ropeScaling.highFreqFactor = 4.0;
    llama.config.ropeScaling.originalMaxPositions = 8192;
    RandomModelShape qwen{"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B",
                          llamaShape("Qwen2ForCausalLM", 24, 896, 4864, 14, 2, 151936, 32768, 1e-6,
                                     1000000.0, 151643, 151643),
                          "Qwen2 / Qwen2.5 (151,665 tokens; the vocabulary is padded)"};
    qwen.config.attentionBias = true;
    // llama2.c's largest published checkpoint (karpathy/tinyllamas stories110M; its model.py
    // ModelArgs): the shape run.c is benchmarked with. f32, theta 10000, eps 1e-5, shared
    // classifier; convert --to llama2c writes it as a run.c checkpoint.
    RandomModelShape stories{
        "stories110m", "karpathy/tinyllamas stories110M",
        llamaShape("LlamaForCausalLM", 12, 768, 2048, 12, 12, 32000, 1024, 1e-5, 10000.0, 1, 2),
        "Llama 2 / llama2.c (32,000 tokens)"};
    stories.config.weightDtype = "f32";
    // Qwen3: q/k norms, head_dim 128 (not hidden / heads), no biases.
    RandomModelShape qwen3{"qwen3-0.6b", "Qwen/Qwen3-0.6B",
                           llamaShape("Qwen3ForCausalLM", 28, 1024, 3072, 16, 8, 151936, 40960,
                                      1e-6, 1000000.0, 151643, 151645),
                           "Qwen2.5 / Qwen3 (151,669 tokens; the vocabulary is padded)"};
    qwen3.config.headDim = 128;
    qwen3.config.qkNorm = true;
    // Gemma 2: GeGLU, four norms a layer, soft-capping, every other layer a 4,096 window.
    RandomModelShape gemma2{
        "gemma-2-2b", "google/gemma-2-2b",
        llamaShape("Gemma2ForCausalLM", 26, 2304, 9216, 8, 4, 256000, 8192, 1e-6, 10000.0, 2, 1),
        "Gemma (256,000 tokens)"};
    gemmaShape(gemma2.config, 256, 4096, 2);
    gemma2.config.attnSoftcap = 50.0;
    gemma2.config.finalSoftcap = 30.0;
    // Gemma 3: q/k norms, five 512-window layers (RoPE base 10,000) to one global (1,000,000).
    RandomModelShape gemma3{
        "gemma-3-1b", "google/gemma-3-1b-pt",
        llamaShape("Gemma3ForCausalLM", 26, 1152, 6912, 4, 1, 262144, 32768, 1e-6, 1000000.0, 2, 1),
        "Gemma 3 (262,144 tokens)"};
    gemmaShape(gemma3.config, 256, 512, 6);
    gemma3.config.qkNorm = true;
    gemma3.config.ropeThetaLocal = 10000.0;
    // Phi-3 mini (4k): fused q/k/v and gate/up in the checkpoint, a 2,047-position window on
    // every layer.
    RandomModelShape phi3{
        "phi-3-mini-4k", "microsoft/Phi-3-mini-4k-instruct",
        llamaShape("Phi3ForCausalLM", 32, 3072, 8192, 32, 32, 32064, 4096, 1e-5, 10000.0, 1, 32000),
        "Llama 2 / Phi-3 (32,011 tokens; the vocabulary is padded)"};
    phi3.config.headDim = 96;
    phi3.config.tiedEmbeddings = false;
    phi3.config.slidingWindow = 2047;
    phi3.config.slidingLayers.assign(32, true);
    // The 7-8B models people download quantized (Q4_K_M, Q5_K_M, Q8_0): head_dim 128, GQA 8:1
    // (Llama, Mistral) or 7:1 (Qwen), untied output matrices.
    RandomModelShape llama8b{"llama-3.1-8b", "meta-llama/Llama-3.1-8B",
                             llamaShape("LlamaForCausalLM", 32, 4096, 14336, 32, 8, 128256, 131072,
                                        1e-5, 500000.0, 128000, 128001),
                             "Llama 3 / 3.1 / 3.2 (128,256 tokens)"};
    llama8b.config.headDim = 128;
    llama8b.config.tiedEmbeddings = false;
    llama8b.config.ropeScaling = llama.config.ropeScaling;
    llama8b.config.ropeScaling.factor = 8.0;
    RandomModelShape qwen7b{"qwen2.5-7b", "Qwen/Qwen2.5-7B",
                            llamaShape("Qwen2ForCausalLM", 28, 3584, 18944, 28, 4, 152064, 131072,
                                       1e-6, 1000000.0, 151643, 151643),
                            "Qwen2 / Qwen2.5 (151,665 tokens; the vocabulary is padded)"};
    qwen7b.config.headDim = 128;
    qwen7b.config.tiedEmbeddings = false;
    qwen7b.config.attentionBias = true;
    RandomModelShape mistral7b{"mistral-7b-v0.3", "mistralai/Mistral-7B-v0.3",
                               llamaShape("MistralForCausalLM", 32, 4096, 14336, 32, 8, 32768,
                                          32768, 1e-5, 1000000.0, 1, 2),
                               "Mistral v0.3 (32,768 tokens)"};
    mistral7b.config.headDim = 128;
    mistral7b.config.tiedEmbeddings = false;
    return {smol, llama, qwen, stories, qwen3, gemma2, gemma3, phi3, llama8b, qwen7b, mistral7b};
}

// The HF names of a llama-family model's weights, in createRandom's set: what bind() reads.
std::vector<std::string> llamaWeightNames(const ModelConfig& c) {
    std::vector<std::string> names{"model.embed_tokens.weight", "model.norm.weight"};
    if (!c.tiedEmbeddings)
        names.push_back("lm_head.weight");
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        for (const char* w : {"input_layernorm.weight", "post_attention_layernorm.weight",
                              "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                              "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                              "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
            names.push_back(p + w);
        if (c.postNorms)
            for (const char* n :
                 {"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
                names.push_back(p + n);
        if (c.qkNorm)
            for (const char* n : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
                names.push_back(p + n);
        if (c.attentionBias)
            for (const char* b :
                 {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
                names.push_back(p + b);
    }
    return names;
}

// The shape `options` asks for and its config as it would be written; KvError naming the option.
ModelConfig configFor(const RandomModelOptions& options, const RandomModelShape*& shape) {
    shape = findRandomModelShape(options.shape);
    if (!shape)
        throw KvError("--shape: '" + options.shape +
                      "' is not a known shape (known: " + randomModelShapeNames() + ")");
    if (options.dtype != "f32" && options.dtype != "f16" && options.dtype != "bf16")
        throw KvError("--dtype: '" + options.dtype + "' is not f32, f16 or bf16");
    ModelConfig config = shape->config;
    if (options.layers < 0)
        throw KvError("--layers: " + std::to_string(options.layers) + " is negative");
    if (options.layers > 0) {
        config.nLayers = options.layers;
        // The real model's layer pattern, repeated where there are more layers.
        const auto& real = shape->config.slidingLayers;
        config.slidingLayers.clear();
        for (int64_t l = 0; l < options.layers && !real.empty(); ++l)
            config.slidingLayers.push_back(real[size_t(l) % real.size()]);
    }
    config.weightDtype = options.dtype;
    validateConfig(config, "--shape " + shape->name, {{"n_layers", "--layers"}});
    return config;
}

// "4.7 GB", "310.2 MB": decimal units, as disk sizes are sold and `df -H` prints them.
std::string sizeText(uint64_t bytes) {
    char buf[48];
    if (bytes >= 1000000000ull)
        std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / 1e9);
    else
        std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / 1e6);
    return buf;
}

// MemAvailable from /proc/meminfo (what can be allocated without swapping), else the free
// physical pages.
std::optional<uint64_t> systemMemoryAvailable() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemAvailable:")
            return kb * 1024;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        return uint64_t(pages) * uint64_t(page);
    return std::nullopt;
}

// What the cgroup (v2) of this process and its ancestors still allow: the least of
// memory.max - memory.current over the hierarchy; empty without a limit. A container's
// limit is usually far below the machine's MemAvailable.
std::optional<uint64_t> cgroupMemoryLeft() {
    std::ifstream self("/proc/self/cgroup");
    std::string line, path;
    while (std::getline(self, line))
        if (line.rfind("0::", 0) == 0)
            path = line.substr(3);
    if (path.empty())
        return std::nullopt;
    auto readNumber = [](const fs::path& p) -> std::optional<uint64_t> {
        std::ifstream f(p);
        std::string v;
        if (!(f >> v) || v == "max" || v.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        return std::stoull(v);
    };
    std::optional<uint64_t> left;
    for (fs::path p = fs::path("/sys/fs/cgroup") / fs::path(path).relative_path();;
         p = p.parent_path()) {
        const auto max = readNumber(p / "memory.max");
        const auto current = readNumber(p / "memory.current");
        if (max && current) {
            const uint64_t l = *max > *current ? *max - *current : 0;
            left = left ? std::min(*left, l) : l;
        }
        if (p == "/sys/fs/cgroup" || !p.has_relative_path() || p == p.parent_path())
            break;
    }
    return left;
}

} // namespace

const std::vector<RandomModelShape>& randomModelShapes() {
    static const std::vector<RandomModelShape> kShapes = makeShapes();
    return kShapes;
}

const RandomModelShape* findRandomModelShape(const std::string& name) {
    for (const auto& s : randomModelShapes())
        if (s.name == name)
            return &s;
    return nullptr;
}

std::string randomModelShapeNames() {
    std::string r;
    for (const auto& s : randomModelShapes())
        r += (r.empty() ? "" : ", ") + s.name;
    return r;
}

int64_t llamaParameterCount(const ModelConfig& config) {
    assert(config.architecture == "llama");
    int64_t n = 0;
    for (const auto& name : llamaWeightNames(config)) {
        const auto shape = llamaWeightShape(config, name); // named: `for (d : *f())` would dangle
        int64_t elements = 1;
        for (const int64_t d : *shape)
            elements *= d;
        n += elements;
    }
    return n;
}

Result<RandomModelEstimate> estimateRandomModel(const RandomModelOptions& options) {
    return catchToResult([&]() -> RandomModelEstimate {
        const RandomModelShape* shape = nullptr;
        RandomModelEstimate e;
        e.config = configFor(options, shape);
        const uint64_t stored = options.dtype == "f32" ? 4 : 2;
        uint64_t largest = 0;
        // safetensors: 8 bytes of header size, the JSON header (each tensor's name, dtype,
        // shape and offsets: its name and under 100 bytes), the metadata, the data.
        e.fileBytes = 8 + 512;
        for (const auto& name : llamaWeightNames(e.config)) {
            const auto shape =
                llamaWeightShape(e.config, name); // named: `for (d : *f())` would dangle
            uint64_t elements = 1;
            for (const int64_t d : *shape)
                elements *= uint64_t(d);
            e.fileBytes += elements * stored + name.size() + 100;
            if (elements > largest) {
                largest = elements;
                e.largestWeight = name;
            }
        }
        e.parameters = llamaParameterCount(e.config);
        // The writer's producer (writeHuggingFaceFolder): the weight drawn in f32 (4 bytes),
        // converted to the stored dtype (2, or none for f32: the same tensor) and copied into
        // the byte buffer the file is written from (2 or 4): 8 bytes an element either way.
        e.peakBytes = largest * 8 + RandomModelEstimate::kProcessBytes;
        return e;
    });
}

MachineRoom machineRoom(const std::string& outDir) {
    MachineRoom room;
    room.memoryAvailable = systemMemoryAvailable();
    if (const auto cg = cgroupMemoryLeft())
        room.memoryAvailable = room.memoryAvailable ? std::min(*room.memoryAvailable, *cg) : *cg;
    std::error_code ec;
    fs::path p = fs::absolute(outDir.empty() ? fs::path(".") : fs::path(outDir), ec);
    while (!ec && !fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path())
        p = p.parent_path();
    room.disk = p.string();
    struct statvfs vfs {};
    if (::statvfs(room.disk.c_str(), &vfs) == 0)
        room.diskAvailable = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
    struct statfs fsInfo {};
    if (::statfs(room.disk.c_str(), &fsInfo) == 0)
        room.diskIsMemory = static_cast<unsigned long>(fsInfo.f_type) == TMPFS_MAGIC ||
                            static_cast<unsigned long>(fsInfo.f_type) == RAMFS_MAGIC;
    struct rlimit fsize {};
    if (::getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY)
        room.fileSizeLimit = uint64_t(fsize.rlim_cur);
    return room;
}

Status randomModelFits(const RandomModelEstimate& e, const MachineRoom& room,
                       const std::string& what) {
    std::string problems;
    auto add = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
    std::string file;
    const uint64_t diskNeed = e.fileBytes + e.fileBytes / 100 + (64ull << 20);
    if (room.diskAvailable && diskNeed > *room.diskAvailable)
        file = room.disk + " has " + sizeText(*room.diskAvailable) + " free";
    if (room.fileSizeLimit && e.fileBytes > *room.fileSizeLimit)
        file += (file.empty() ? "" : " and ") + std::string("the file size limit (ulimit -f) is ") +
                sizeText(*room.fileSizeLimit);
    if (!file.empty())
        add("model.safetensors would take " + sizeText(e.fileBytes) + " and " + file);
    // A file in a tmpfs is memory too.
    const uint64_t memory = e.peakBytes + (room.diskIsMemory ? e.fileBytes : 0);
    if (room.memoryAvailable && memory + memory / 10 > *room.memoryAvailable)
        add("writing takes about " + sizeText(memory) + " of memory (" + e.largestWeight +
            " drawn in f32 and copied once" +
            (room.diskIsMemory ? ", and the file itself: " + room.disk + " is in memory" : "") +
            ") and " + sizeText(*room.memoryAvailable) + " is available");
    if (problems.empty())
        return Status::ok();
    return Status::error(what + " does not fit this machine: " + problems + "; nothing written");
}

Result<RandomModelReport> writeRandomModel(const std::string& outDir,
                                           const RandomModelOptions& options) {
    return catchToResult([&]() -> RandomModelReport {
        const RandomModelShape* shape = nullptr;
        const ModelConfig config = configFor(options, shape);

        // What can fail fails before the weights are drawn: the folder's refusals, what the
        // machine has room for, then the tokenizer.
        checkModelFolder(outDir, options.overwrite);
        const auto estimate = estimateRandomModel(options);
        if (!estimate)
            throw KvError(estimate.message());
        const std::string what =
            "--shape " + shape->name +
            (options.layers > 0 ? " --layers " + std::to_string(options.layers) : std::string()) +
            " --dtype " + options.dtype;
        if (Status st = randomModelFits(estimate.value(), machineRoom(outDir), what); !st)
            throw KvError(st.message());
        std::shared_ptr<const tok::Tokenizer> tokenizer;
        if (!options.tokenizerPath.empty()) {
            auto loaded = tok::Tokenizer::fromFile(options.tokenizerPath);
            if (!loaded)
                throw KvError("--tokenizer: " + loaded.message());
            tokenizer = loaded.value();
            // Model::load's rule: fewer tokens than embedding rows is a padded vocabulary (as
            // Qwen2.5 ships), more would give ids the model has no row for.
            if (tokenizer->vocabSize() > config.vocabSize)
                throw KvError(tokenizer->sourcePath() + ": " +
                              std::to_string(tokenizer->vocabSize()) +
                              " tokens, more than vocab_size " + std::to_string(config.vocabSize) +
                              " of " + shape->name + " (its tokenizer: " + shape->tokenizer + ")");
        }

        // Each weight is drawn when the file is written, from its own generator (seeded by the
        // seed and its name): one tensor in memory at a time, so an 8B shape is written within
        // a few GB; the same seed gives the same weights.
        std::vector<LazyWeight> weights;
        for (const auto& name : llamaWeightNames(config)) {
            const std::vector<int64_t> shape = *llamaWeightShape(config, name);
            const uint64_t seed =
                hash64(name.data(), name.size()) ^ (options.seed * 0x9E3779B97F4A7C15ull);
            weights.push_back({name, shape, [config, name, shape, seed] {
                                   auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
                                   return randomWeight(config, name, shape, gen, 0.02);
                               }});
        }
        const int64_t parameters = estimate.value().parameters;
        ConvertOptions convert;
        convert.dtype = options.dtype;
        convert.overwrite = options.overwrite;
        ModelConfig written = config;
        written.sourceFormat = "random";
        writeHuggingFaceFolder(written, tokenizer,
                               "random " + shape->name + " (seed " + std::to_string(options.seed) +
                                   ")",
                               weights, outDir, convert);

        RandomModelReport report;
        report.output = outDir;
        report.shape = shape->name;
        report.config = config;
        report.parameters = parameters;
        std::vector<std::string> files{"config.json", "generation_config.json",
                                       "model.safetensors"};
        if (tokenizer) {
            files.push_back("tokenizer.json");
            files.push_back("tokenizer_config.json");
            report.tokenizer = tokenizer->sourcePath();
            report.tokenizerTokens = tokenizer->vocabSize();
        }
        for (const auto& f : files)
            report.bytes += fs::file_size(fs::path(outDir) / f);
        return report;
    });
}

} // namespace kvscope
