#include "engine/modelimpl.h"

#include <cmath>
#include <numeric>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include "engine/tensorconv.h"
#include "tokenizer/tokenizer.h"
#include "util/hash.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include "util/fileio.h"
#include <mutex>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <thread>

namespace kvscope {

namespace fs = std::filesystem;

const at::Tensor& Model::Impl::get(const std::string& name) const {
    auto it = named.find(name);
    if (it == named.end())
        throw KvError(path + ": missing tensor '" + name + "'");
    return it->second;
}

namespace {

// The shape a weight holds: a quantized one's logical [out, in], not its bytes'.
std::vector<int64_t> storedShape(const Model::Impl& m, const std::string& name) {
    const auto q = m.quantized.find(name);
    return q != m.quantized.end() ? q->second.shape : m.get(name).sizes().vec();
}

void checkShape(const Model::Impl& m, const std::string& name, const std::vector<int64_t>& shape) {
    if (const auto stored = storedShape(m, name); stored != shape) {
        const auto src = m.sources.find(name);
        throw KvError((src == m.sources.end() ? m.path : src->second.file) + ": tensor '" + name +
                      "' has shape " + shapeText(stored) + " but the config implies " +
                      shapeText(shape));
    }
}

// A weight in the compute dtype on the model's device; 16-bit matrices stay as stored where
// the model keeps them so, quantized ones are widened (matrix() keeps those).
at::Tensor expectShape(const Model::Impl& m, const std::string& name, std::vector<int64_t> shape) {
    checkShape(m, name, shape);
    const at::Tensor& t = m.get(name);
    if (const auto q = m.quantized.find(name); q != m.quantized.end())
        return widenMatrix(Matrix(t.contiguous(), q->second.type, shape.back()))
            .to(m.device, m.dtype)
            .contiguous();
    const bool is16 = t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
    if (m.keepStoredMatrices && t.dim() == 2 && is16)
        return t.contiguous();
    return t.to(m.device, m.dtype).contiguous();
}

// A matrix the forward pass multiplies with: quantized blocks stay as stored where the model
// keeps matrices so (CPU, f32 compute), as the kernels of qdot.h read them.
Matrix matrix(const Model::Impl& m, const std::string& name, std::vector<int64_t> shape) {
    const auto q = m.quantized.find(name);
    if (q == m.quantized.end() || !m.keepStoredMatrices)
        return expectShape(m, name, std::move(shape));
    checkShape(m, name, shape);
    return Matrix(m.get(name).contiguous(), q->second.type, shape.back());
}

at::Tensor optional(const Model::Impl& m, const std::string& name, std::vector<int64_t> shape) {
    return m.named.count(name) ? expectShape(m, name, std::move(shape)) : at::Tensor();
}

void bindLlama(Model::Impl& m) {
    const auto& c = m.config;
    // Every shape from llamaWeightShape, the one statement of the layout the loaders check.
    auto shape = [&](const std::string& name) { return *llamaWeightShape(c, name); };
    auto required = [&](const std::string& name) { return expectShape(m, name, shape(name)); };
    auto requiredMatrix = [&](const std::string& name) { return matrix(m, name, shape(name)); };
    m.embed = requiredMatrix("model.embed_tokens.weight");
    m.finalNorm = required("model.norm.weight");
    if (m.named.count("lm_head.weight"))
        m.lmHead = requiredMatrix("lm_head.weight");
    else if (c.tiedEmbeddings)
        m.lmHead = m.embed;
    else
        throw KvError(m.path + ": missing tensor 'lm_head.weight' (embeddings are not tied)");
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        LayerWeights w;
        w.attnNorm = required(p + "input_layernorm.weight");
        w.wq = requiredMatrix(p + "self_attn.q_proj.weight");
        w.wk = requiredMatrix(p + "self_attn.k_proj.weight");
        w.wv = requiredMatrix(p + "self_attn.v_proj.weight");
        w.wo = requiredMatrix(p + "self_attn.o_proj.weight");
        // q/k/v biases: required when the config says so (Qwen2), else optional.
        auto bias = [&](const std::string& name) {
            return c.attentionBias ? required(name) : optional(m, name, shape(name));
        };
        w.bq = bias(p + "self_attn.q_proj.bias");
        w.bk = bias(p + "self_attn.k_proj.bias");
        w.bv = bias(p + "self_attn.v_proj.bias");
        w.bo = optional(m, p + "self_attn.o_proj.bias", shape(p + "self_attn.o_proj.bias"));
        if (c.postNorms) {
            // Gemma 2/3: input, post-attention, pre-FFN and post-FFN norms.
            w.postAttnNorm = required(p + "post_attention_layernorm.weight");
            w.ffnNorm = required(p + "pre_feedforward_layernorm.weight");
            w.postFfnNorm = required(p + "post_feedforward_layernorm.weight");
        } else {
            w.ffnNorm = required(p + "post_attention_layernorm.weight");
        }
        if (c.qkNorm) {
            w.qNorm = required(p + "self_attn.q_norm.weight");
            w.kNorm = required(p + "self_attn.k_norm.weight");
        }
        w.wGate = requiredMatrix(p + "mlp.gate_proj.weight");
        w.wUp = requiredMatrix(p + "mlp.up_proj.weight");
        w.wDown = requiredMatrix(p + "mlp.down_proj.weight");
        m.layers.push_back(std::move(w));
    }
    m.invFreq = ropeInvFreq(c).to(m.device);
    m.ropeScale = c.ropeScaling.type == "longrope" ? c.ropeScaling.attentionFactor : 1.0;
    if (const at::Tensor local = ropeInvFreqLocal(c); local.defined())
        m.invFreqLocal = local.to(m.device);
}

void bindGpt2(Model::Impl& m) {
    const auto& c = m.config;
    const int64_t C = c.dim, F = c.hiddenDim;
    const std::string root = m.named.count("transformer.wte.weight") ? "transformer." : "";
    m.embed = expectShape(m, root + "wte.weight", {c.vocabSize, C});
    m.posEmbed = expectShape(m, root + "wpe.weight", {c.maxContext, C});
    m.finalNorm = expectShape(m, root + "ln_f.weight", {C});
    m.finalNormBias = expectShape(m, root + "ln_f.bias", {C});
    m.lmHead = m.named.count("lm_head.weight")
                   ? Matrix(expectShape(m, "lm_head.weight", {c.vocabSize, C}))
                   : m.embed;
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = root + "h." + std::to_string(l) + ".";
        LayerWeights w;
        w.attnNorm = expectShape(m, p + "ln_1.weight", {C});
        w.attnNormBias = expectShape(m, p + "ln_1.bias", {C});
        // Conv1D weights are stored [in, out]; the forward pass wants [out, in].
        auto qkv = expectShape(m, p + "attn.c_attn.weight", {C, 3 * C}).t().contiguous();
        auto qkvb = expectShape(m, p + "attn.c_attn.bias", {3 * C});
        w.wq = qkv.narrow(0, 0, C).contiguous();
        w.wk = qkv.narrow(0, C, C).contiguous();
        w.wv = qkv.narrow(0, 2 * C, C).contiguous();
        w.bq = qkvb.narrow(0, 0, C).contiguous();
        w.bk = qkvb.narrow(0, C, C).contiguous();
        w.bv = qkvb.narrow(0, 2 * C, C).contiguous();
        w.wo = expectShape(m, p + "attn.c_proj.weight", {C, C}).t().contiguous();
        w.bo = expectShape(m, p + "attn.c_proj.bias", {C});
        w.ffnNorm = expectShape(m, p + "ln_2.weight", {C});
        w.ffnNormBias = expectShape(m, p + "ln_2.bias", {C});
        w.wUp = expectShape(m, p + "mlp.c_fc.weight", {C, F}).t().contiguous();
        w.bUp = expectShape(m, p + "mlp.c_fc.bias", {F});
        w.wDown = expectShape(m, p + "mlp.c_proj.weight", {F, C}).t().contiguous();
        w.bDown = expectShape(m, p + "mlp.c_proj.bias", {C});
        m.layers.push_back(std::move(w));
    }
}

at::Device parseDevice(const std::string& name) {
    if (name.empty() || name == "cpu")
        return at::kCPU;
    if (name.rfind("cuda", 0) == 0) {
        if (!at::hasCUDA())
            throw KvError("device '" + name +
                          "' requested, but this libtorch has no CUDA support or no GPU is "
                          "visible (available: cpu)");
        int index = 0;
        if (name.size() > 5 && name[4] == ':')
            index = std::stoi(name.substr(5));
        if (index < 0 || index >= static_cast<int>(at::getNumGPUs()))
            throw KvError("device '" + name + "' does not exist (" +
                          std::to_string(at::getNumGPUs()) + " CUDA devices)");
        return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    }
    throw KvError("unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
}

bool isGguf(const std::string& path) {
    return readFileHead(path, 4) == "GGUF"; // refuses FIFOs and devices
}

// A file named *.gguf (any case), which the caller means as GGUF whatever its bytes.
bool hasGgufName(const std::string& path) {
    std::string ext = fs::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return ext == ".gguf";
}

// "starts with the bytes 7f 45 4c 46" / "is empty" / "holds 2 bytes": what a file begins with.
std::string describeHead(const std::string& path) {
    const std::string head = readFileHead(path, 4);
    if (head.empty())
        return "is empty";
    std::string hex;
    char buf[4];
    for (unsigned char c : head) {
        std::snprintf(buf, sizeof buf, "%02x", c);
        hex += (hex.empty() ? "" : " ") + std::string(buf);
    }
    return (head.size() < 4 ? "holds only the bytes " : "starts with the bytes ") + hex;
}

std::string weightFingerprint(const at::Tensor& t) {
    auto c = t.contiguous();
    return hex64(hash64(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size()));
}

} // namespace

at::Tensor randomWeight(const ModelConfig& config, const std::string& name,
                        const std::vector<int64_t>& shape, at::Generator& gen, double stddev) {
    auto normal = [&](std::vector<int64_t> s) {
        return at::normal(0.0, stddev, s, gen, at::TensorOptions().dtype(at::kFloat));
    };
    if (name.ends_with("norm.weight")) {
        const bool variedNorms = config.qkNorm || config.postNorms;
        return variedNorms ? 1.0 + 5.0 * normal(shape) : at::ones(shape);
    }
    return normal(shape);
}

// Random weights, drawn in one order from one generator: a seed gives the weights it always
// gave. A llama-family model's:
void addRandomLlamaWeights(const ModelConfig& c, std::map<std::string, at::Tensor>& w,
                           at::Generator& gen, double stddev) {
    auto add = [&](const std::string& name) {
        w[name] = randomWeight(c, name, *llamaWeightShape(c, name), gen, stddev);
    };
    add("model.embed_tokens.weight");
    add("model.norm.weight");
    if (!c.tiedEmbeddings)
        add("lm_head.weight");
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight");
        add(p + "post_attention_layernorm.weight");
        if (c.postNorms) {
            add(p + "pre_feedforward_layernorm.weight");
            add(p + "post_feedforward_layernorm.weight");
        }
        if (c.qkNorm) {
            add(p + "self_attn.q_norm.weight");
            add(p + "self_attn.k_norm.weight");
        }
        add(p + "self_attn.q_proj.weight");
        add(p + "self_attn.k_proj.weight");
        add(p + "self_attn.v_proj.weight");
        add(p + "self_attn.o_proj.weight");
        if (c.attentionBias) {
            add(p + "self_attn.q_proj.bias");
            add(p + "self_attn.k_proj.bias");
            add(p + "self_attn.v_proj.bias");
        }
        add(p + "mlp.gate_proj.weight");
        add(p + "mlp.up_proj.weight");
        add(p + "mlp.down_proj.weight");
    }
}

// GPT-2's, in its checkpoints' names and Conv1D [in, out] layout (bindGpt2): LayerNorm scales
// 1, every other weight and bias drawn.
void addRandomGpt2Weights(const ModelConfig& c, std::map<std::string, at::Tensor>& w,
                          at::Generator& gen, double stddev) {
    const int64_t C = c.dim, F = c.hiddenDim;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
        w[name] = name.find("ln_") != std::string::npos && name.ends_with(".weight")
                      ? at::ones(shape)
                      : at::normal(0.0, stddev, shape, gen, at::TensorOptions().dtype(at::kFloat));
    };
    add("transformer.wte.weight", {c.vocabSize, C});
    add("transformer.wpe.weight", {c.maxContext, C});
    add("transformer.ln_f.weight", {C});
    add("transformer.ln_f.bias", {C});
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = "transformer.h." + std::to_string(l) + ".";
        add(p + "ln_1.weight", {C});
        add(p + "ln_1.bias", {C});
        add(p + "attn.c_attn.weight", {C, 3 * C});
        add(p + "attn.c_attn.bias", {3 * C});
        add(p + "attn.c_proj.weight", {C, C});
        add(p + "attn.c_proj.bias", {C});
        add(p + "ln_2.weight", {C});
        add(p + "ln_2.bias", {C});
        add(p + "mlp.c_fc.weight", {C, F});
        add(p + "mlp.c_fc.bias", {F});
        add(p + "mlp.c_proj.weight", {F, C});
        add(p + "mlp.c_proj.bias", {C});
    }
}

const ArchitectureOps* findArchitecture(const std::string& name) {
    static const ArchitectureOps kArchitectures[] = {
        {"llama", bindLlama, forwardLlama, forwardLlamaFrom, projectKvLlama, true,
         addRandomLlamaWeights, false},
        {"gpt2", bindGpt2, forwardGpt2, forwardGpt2From, projectKvGpt2, false, addRandomGpt2Weights,
         true},
    };
    for (const auto& a : kArchitectures)
        if (name == a.name)
            return &a;
    return nullptr;
}

void Model::Impl::bind() {
    layers.clear();
    arch = findArchitecture(config.architecture);
    if (!arch)
        throw KvError(path + ": unsupported architecture '" + config.architecture + "'");
    arch->bind(*this);
}

bool Model::usesRope() const {
    return m_impl->arch && m_impl->arch->rope;
}

void Model::configureThreads() {
    static std::once_flag once;
    std::call_once(once, [] {
        // KVSCOPE_THREADS overrides the core count (libtorch defaults to 1 thread here).
        int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        if (const char* env = std::getenv("KVSCOPE_THREADS"); env && std::atoi(env) > 0)
            n = std::atoi(env);
        at::set_num_threads(n);
#if defined(__GLIBC__)
        // Freed blocks of up to 32 MB stay in the heap for the next pass instead of going back
        // to the kernel: a prompt chunk's attention scores and activations are blocks of
        // several MB, freshly faulted in each time otherwise (a 512-token prefill of the
        // 12x768 model spent ~10 % of its time in page faults).
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
    });
}

int Model::setThreads(int n) {
    const int previous = at::get_num_threads();
    at::set_num_threads(std::max(1, n));
    return previous;
}

std::vector<std::string> Model::availableDevices() {
    std::vector<std::string> d{"cpu"};
    if (at::hasCUDA())
        for (size_t i = 0; i < at::getNumGPUs(); ++i)
            d.push_back("cuda:" + std::to_string(i));
    return d;
}

Result<std::shared_ptr<const Model>> Model::load(const std::string& path,
                                                 const LoadOptions& options) {
    return catchToResult([&]() -> std::shared_ptr<const Model> {
        configureThreads();
        if (!fs::exists(path))
            throw KvError(path + ": no such file or folder");
        LoadedCheckpoint ck;
        if (fs::is_directory(path))
            ck = loadHfFolder(path);
        else if (fs::path(path).filename() == "config.json")
            ck = loadHfFolder(fs::path(path).parent_path().string());
        else if (isGguf(path))
            ck = loadGguf(path);
        else if (hasGgufName(path))
            throw KvError(path + ": not a GGUF file: it " + describeHead(path) +
                          ", not the magic \"GGUF\" (another format renamed, or a download that "
                          "is not a model)");
        else
            ck = loadLlama2c(path);
        validateConfig(ck.config, path);

        auto impl = std::make_unique<Impl>();
        impl->config = ck.config;
        impl->path = path;
        impl->named = std::move(ck.weights);
        impl->quantized = std::move(ck.quantized);
        impl->sources = std::move(ck.sources);
        impl->device = parseDevice(options.device);
        if (!options.dtype.empty())
            impl->dtype = parseDtype(options.dtype, "--dtype");
        else if (impl->device.is_cuda())
            impl->dtype =
                parseDtype(ck.config.weightDtype == "f16" || ck.config.weightDtype == "bf16"
                               ? ck.config.weightDtype
                               : "f32",
                           path);
        else {
            impl->dtype = at::kFloat;
            impl->keepStoredMatrices = true;
        }
        if (!options.cacheDtype.empty())
            impl->cacheType = parseDtype(options.cacheDtype, "--cache-dtype");
        impl->bind();
        impl->placeOwnedWeights(ck.mappings, options.weightsOnHugePages);
        impl->computeFingerprints();
        for (const auto& [name, t] : impl->named)
            for (const auto& map : ck.mappings)
                if (usesMapping(t, *map)) {
                    impl->mappedBytes += int64_t(t.nbytes());
                    break;
                }

        std::string tokPath =
            options.tokenizerPath.empty() ? ck.tokenizerPath : options.tokenizerPath;
        if (!tokPath.empty()) {
            auto tok = tok::Tokenizer::fromFile(tokPath);
            if (!tok)
                throw KvError(tok.message());
            if (tok.value()->vocabSize() > impl->config.vocabSize)
                throw KvError(tokPath + ": tokenizer has " +
                              std::to_string(tok.value()->vocabSize()) +
                              " tokens but the model's vocabulary has " +
                              std::to_string(impl->config.vocabSize));
            impl->tokenizer = tok.value();
        } else if (options.requireTokenizer) {
            throw KvError(path + ": no tokenizer found; pass one with --tokenizer");
        }
        return std::make_shared<const Model>(std::move(impl));
    });
}

Result<std::shared_ptr<const Model>> Model::createRandom(const ModelConfig& config, uint64_t seed,
                                                         const std::string& device, double stddev) {
    return catchToResult([&]() -> std::shared_ptr<const Model> {
        configureThreads();
        validateConfig(config, "random model");
        const ArchitectureOps* arch = findArchitecture(config.architecture);
        if (!(std::isfinite(stddev) && stddev > 0))
            throw KvError("random model: the weights' standard deviation " +
                          std::to_string(stddev) + " must be a finite positive number");
        if (!arch || !arch->randomWeights)
            throw KvError("random model: the " + config.architecture +
                          " architecture has no random-weight builder");
        auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
        const auto& c = config;
        auto impl = std::make_unique<Impl>();
        impl->config = config;
        impl->config.sourceFormat = "random";
        impl->path = "random:" + std::to_string(seed);
        arch->randomWeights(c, impl->named, gen, stddev);
        impl->device = parseDevice(device);
        impl->dtype = at::kFloat;
        impl->bind();
        impl->placeOwnedWeights({});
        impl->computeFingerprints();
        return std::make_shared<const Model>(std::move(impl));
    });
}

Model::Model(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Model::~Model() = default;

const ModelConfig& Model::config() const {
    return m_impl->config;
}
const std::string& Model::path() const {
    return m_impl->path;
}
std::string Model::device() const {
    return m_impl->device.str();
}
std::string Model::computeDtype() const {
    return dtypeName(m_impl->dtype);
}
std::string Model::cacheDtype() const {
    return dtypeName(m_impl->cacheDtype());
}
std::shared_ptr<const tok::Tokenizer> Model::tokenizer() const {
    return m_impl->tokenizer;
}

void Model::Impl::computeFingerprints() {
    weightInfos.clear();
    for (const auto& [name, t] : named) {
        // A quantized weight: its logical shape, its ggml type ("q4_k") and its stored bytes.
        const auto q = quantized.find(name);
        std::string dtype = dtypeName(t.scalar_type());
        if (q != quantized.end()) {
            dtype = gguf::typeName(q->second.type);
            std::transform(dtype.begin(), dtype.end(), dtype.begin(), ::tolower);
        }
        weightInfos.push_back({name, q != quantized.end() ? q->second.shape : t.sizes().vec(),
                               dtype, weightFingerprint(t)});
    }
    Hasher h;
    h.updateField(toJson(config).dump());
    for (const auto& w : weightInfos) {
        h.updateField(w.name);
        h.updateField(w.fingerprint);
    }
    modelFingerprint = hex64(h.digest());
}

std::vector<WeightInfo> Model::weights() const {
    return m_impl->weightInfos;
}

std::string Model::fingerprint() const {
    return m_impl->modelFingerprint;
}

int64_t Model::mappedWeightBytes() const {
    return m_impl->mappedBytes;
}

void Model::Impl::placeOwnedWeights(const std::vector<std::shared_ptr<const MappedFile>>& mappings,
                                    bool mappedToo) {
    if (!device.is_cpu())
        return;
    std::vector<at::Tensor*> slots = boundWeights();
    for (auto& [name, t] : named)
        slots.push_back(&t);
    constexpr int64_t kMinBytes = 64 << 10;
    auto owned = [&](const at::Tensor& t) {
        if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() || t.requires_grad() ||
            int64_t(t.nbytes()) < kMinBytes)
            return false;
        return mappedToo || std::none_of(mappings.begin(), mappings.end(),
                                         [&](const auto& map) { return usesMapping(t, *map); });
    };
    // The tensors to move, each storage once (a tied lm_head is the embedding itself).
    std::vector<at::Tensor> moving;
    std::set<const void*> seen;
    for (at::Tensor* t : slots)
        if (owned(*t) && seen.insert(t->data_ptr()).second)
            moving.push_back(*t);
    if (moving.empty())
        return;
    std::vector<TensorSpec> specs;
    for (const auto& t : moving)
        specs.push_back({t.sizes().vec(), t.scalar_type()});
    std::vector<at::Tensor> placed = emptyOnLargePages(specs);
    for (size_t i = 0; i < moving.size(); ++i) {
        placed[i].copy_(moving[i]);
        const void* old = moving[i].data_ptr();
        const auto oldSizes = moving[i].sizes().vec();
        const std::size_t oldBytes = moving[i].nbytes();
        moving[i] = at::Tensor(); // the last reference is a slot's: released below
        for (at::Tensor* t : slots)
            if (t->defined() && t->data_ptr() == old && t->sizes().vec() == oldSizes &&
                t->scalar_type() == placed[i].scalar_type() && t->is_contiguous())
                *t = placed[i];
        for (const auto& map : mappings)
            map->release(old, oldBytes); // file pages: given back (no-op for other memory)
    }
}

std::vector<at::Tensor*> Model::Impl::boundWeights() {
    std::vector<at::Tensor*> all{&embed.t, &posEmbed, &finalNorm, &finalNormBias, &lmHead.t};
    for (auto& w : layers)
        for (at::Tensor* t :
             {&w.attnNorm, &w.attnNormBias, &w.wq.t,       &w.wk.t, &w.wv.t,    &w.wo.t,
              &w.bq,       &w.bk,           &w.bv,         &w.bo,   &w.ffnNorm, &w.ffnNormBias,
              &w.wGate.t,  &w.wUp.t,        &w.wDown.t,    &w.bUp,  &w.bDown,   &w.qNorm,
              &w.kNorm,    &w.postAttnNorm, &w.postFfnNorm})
            all.push_back(t);
    return all;
}

int64_t Model::computeWeightBytes() const {
    std::set<const void*> seen; // tied embeddings and shared storage count once
    int64_t n = 0;
    for (const at::Tensor* t : m_impl->boundWeights())
        if (t->defined() && seen.insert(t->data_ptr()).second)
            n += int64_t(t->nbytes());
    return n;
}

int64_t Model::parameterCount() const {
    int64_t n = 0;
    for (const auto& [name, t] : m_impl->named) {
        const auto q = m_impl->quantized.find(name);
        n += q == m_impl->quantized.end()
                 ? t.numel()
                 : std::accumulate(q->second.shape.begin(), q->second.shape.end(), int64_t{1},
                                   std::multiplies<>());
    }
    return n;
}

} // namespace kvscope
