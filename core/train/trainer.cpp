// The trainer: a Model::Impl whose weights are autograd leaves, trained through the engine's
// forwardLlamaBatch (engine/llama.cpp), with an AdamW written over ATen tensors (torch::optim
// would pull the whole C++ frontend into this library for ~20 lines of arithmetic).
#include "train/trainer.h"

#include "train/curriculum.h"
#include "train/trainoptions.h"

#include "engine/forwardcommon.h"
#include "engine/modelimpl.h"
#include "engine/tensorconv.h"
#include "formats/jsonerror.h"
#include "formats/safetensors.h"
#include "formats/safetensorswriter.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <ATen/CPUGeneratorImpl.h>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

namespace kvscope::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

std::vector<int32_t> tokenizeFile(const tok::Tokenizer& tok, const std::string& path,
                                  const char* option) {
    std::string text;
    try {
        text = readFileText(path, 1ull << 30);
    } catch (const std::exception& e) {
        throw KvError(std::string("train: ") + option + " " + e.what());
    }
    tok::EncodeOptions eo;
    eo.addSpecialTokens = false;
    return tok.encode(text, eo);
}

safetensors::DType storeDtype(const std::string& d) {
    return d == "bf16"  ? safetensors::DType::BF16
           : d == "f16" ? safetensors::DType::F16
                        : safetensors::DType::F32;
}

} // namespace

struct Trainer::Impl {
    TrainOptions opt;
    std::shared_ptr<const tok::Tokenizer> tokenizer;
    std::vector<int32_t> trainTokens, validTokens;
    int32_t bos = 0, eos = -1;
    std::string corpusFingerprint;
    Model::Impl model; // named weights are the autograd leaves; bound views alias them
    std::map<std::string, at::Tensor> expAvg, expAvgSq;
    int64_t step = 0;
    json history = json::array();
    TokenPools pools; // the recall curriculum's vocabulary classes

    // One row of a batch: where its window starts in the corpus and what is done to it.
    enum class RowKind { Natural, Renamed, Repeated };
    struct RowPlan {
        int64_t offset = 0;
        int64_t period = 0; // > 0: the window repeats its first `period` tokens (copyFraction)
        RowKind kind = RowKind::Natural;
        uint64_t seed = 0; // the row's own generator (renamed and repeated rows)
        SegmentRepeats repeats = SegmentRepeats::Fill;
    };

    // A row's token stream s[0..T) and which targets count. Natural text s[t] = toks[o + t];
    // with a period L its first L tokens over and over (s[t] = toks[o + t mod L]); renamed and
    // repeated rows come from the recall curriculum (train/curriculum.h).
    CurriculumRow rowFor(const std::vector<int32_t>& toks, const RowPlan& plan, int64_t T) const {
        const std::span<const int32_t> src(toks.data() + plan.offset, static_cast<size_t>(T));
        if (plan.kind != RowKind::Natural) {
            std::mt19937_64 rng(plan.seed);
            return plan.kind == RowKind::Renamed ? renamedRow(src, T, pools, rng)
                                                 : repeatedRow(src, T, pools, rng, plan.repeats);
        }
        CurriculumRow row = naturalRow(src, T);
        if (plan.period > 0)
            for (int64_t t = 0; t < T; ++t)
                row.tokens[static_cast<size_t>(t)] = src[static_cast<size_t>(t % plan.period)];
        return row;
    }

    // Inputs BOS + s[0..T-1), targets s[0..T) ([B, T] each); a target the row does not score
    // (or, with onlyRecall, one that is not a recall token) is -100, which the loss ignores.
    std::pair<at::Tensor, at::Tensor> window(const std::vector<int32_t>& toks,
                                             const std::vector<RowPlan>& plans, int64_t T,
                                             bool onlyRecall = false) const {
        const auto B = static_cast<int64_t>(plans.size());
        auto in = at::empty({B, T}, at::kLong), tgt = at::empty({B, T}, at::kLong);
        auto* pi = in.data_ptr<int64_t>();
        auto* pt = tgt.data_ptr<int64_t>();
        for (int64_t b = 0; b < B; ++b) {
            const CurriculumRow row = rowFor(toks, plans[static_cast<size_t>(b)], T);
            pi[b * T] = bos;
            for (int64_t t = 0; t < T; ++t) {
                const auto i = static_cast<size_t>(t);
                if (t + 1 < T)
                    pi[b * T + t + 1] = row.tokens[i];
                const bool count = onlyRecall ? row.recall[i] != 0 : row.scored[i] != 0;
                pt[b * T + t] = count ? row.tokens[i] : -100;
            }
        }
        return {in, tgt};
    }

    // The rows of a step (a generator per step, so resumed runs take the same batches).
    std::vector<RowPlan> batchFor(int64_t forStep) const {
        std::mt19937_64 rng(splitmix64(opt.seed ^ splitmix64(static_cast<uint64_t>(forStep))));
        const int64_t T = windowAt(forStep);
        const auto range = static_cast<uint64_t>(static_cast<int64_t>(trainTokens.size()) - T + 1);
        // Short windows: more of them, the same tokens per step.
        std::vector<RowPlan> plans(static_cast<size_t>(opt.batchSize * (opt.shape.context / T)));
        for (auto& p : plans)
            p.offset = static_cast<int64_t>(rng() % range);
        // Drawn per window (so a fraction below 1/B still repeats some windows), with a random
        // period in [T/16, T/2]: a fixed period could be solved by attending a fixed distance
        // back, which would not generalize; a varying one needs content-based induction heads.
        const int64_t lo = std::max<int64_t>(1, T / 16), hi = std::max<int64_t>(lo, T / 2);
        if (opt.copyFraction > 0)
            for (auto& p : plans) {
                const bool rep = static_cast<double>(rng() >> 11) * 0x1.0p-53 < opt.copyFraction;
                const auto period =
                    lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
                p.period = rep ? period : 0;
            }
        // The recall curriculum draws from its own generator, so runs without it take exactly
        // the batches they took before it existed.
        const bool warm = opt.shortWindow > 0 && forStep < opt.shortWindowSteps;
        const double segment = warm && opt.shortWindowSegmentFraction >= 0
                                   ? opt.shortWindowSegmentFraction
                                   : opt.segmentFraction;
        if (opt.renameFraction > 0 || segment > 0) {
            std::mt19937_64 krng(splitmix64(opt.seed ^ 0x726563616c6cull) ^
                                 splitmix64(static_cast<uint64_t>(forStep)));
            for (auto& p : plans) {
                const double u = static_cast<double>(krng() >> 11) * 0x1.0p-53;
                p.seed = krng();
                if (u < opt.renameFraction)
                    p.kind = RowKind::Renamed;
                else if (u < opt.renameFraction + segment)
                    p.kind = RowKind::Repeated;
                if (p.kind != RowKind::Natural)
                    p.period = 0;
                // After a sequence-length warmup the segments recur once, as in real text.
                if (opt.shortWindow > 0 && !warm)
                    p.repeats = SegmentRepeats::Twice;
            }
        }
        return plans;
    }

    // The training window of a step: opt.shortWindow during the sequence-length warmup.
    int64_t windowAt(int64_t forStep) const {
        return opt.shortWindow > 0 && forStep < opt.shortWindowSteps ? opt.shortWindow
                                                                     : opt.shape.context;
    }

    // The validation windows: W fixed offsets evenly spaced over the held-out tokens.
    std::vector<RowPlan> validationPlans(int64_t T) const {
        const auto n = static_cast<int64_t>(validTokens.size());
        const int64_t W = opt.evalWindows;
        std::vector<RowPlan> plans;
        for (int64_t i = 0; i < W; ++i)
            plans.push_back({W == 1 ? 0 : i * (n - T) / (W - 1), 0, RowKind::Natural, 0});
        return plans;
    }

    double lrAt(int64_t s) const { // s: 0-based step index
        if (s < opt.warmupSteps)
            return opt.lr * static_cast<double>(s + 1) / static_cast<double>(opt.warmupSteps);
        const double span = static_cast<double>(std::max<int64_t>(1, opt.steps - opt.warmupSteps));
        const double progress = std::min(1.0, static_cast<double>(s - opt.warmupSteps) / span);
        return opt.minLr + 0.5 * (opt.lr - opt.minLr) * (1.0 + std::cos(M_PI * progress));
    }

    // Mean cross-entropy over the targets that are not -100.
    at::Tensor loss(const at::Tensor& in, const at::Tensor& tgt) const {
        auto logits = forwardLlamaBatch(model, in); // [B, T, V]
        return at::cross_entropy_loss(logits.view({-1, model.config.vocabSize}), tgt.view({-1}), {},
                                      at::Reduction::Mean, -100);
    }

    // One optimisation step; returns (loss, grad norm before clipping).
    std::pair<double, double> trainStep() {
        auto [in, tgt] = window(trainTokens, batchFor(step), windowAt(step));
        for (auto& [name, p] : model.named)
            p.mutable_grad() = at::Tensor();
        at::Tensor l = loss(in, tgt);
        l.backward();
        at::NoGradGuard noGrad;
        double sq = 0;
        for (auto& [name, p] : model.named)
            if (p.grad().defined())
                sq += p.grad().pow(2).sum().item<double>();
        const double norm = std::sqrt(sq);
        const double scale = opt.gradClip > 0 && norm > opt.gradClip ? opt.gradClip / norm : 1.0;
        const double lr = lrAt(step);
        const int64_t t = step + 1;
        const double bc1 = 1.0 - std::pow(opt.beta1, static_cast<double>(t));
        const double bc2 = 1.0 - std::pow(opt.beta2, static_cast<double>(t));
        for (auto& [name, p] : model.named) {
            at::Tensor g = p.grad();
            if (!g.defined())
                continue;
            if (scale != 1.0)
                g = g * scale;
            at::Tensor& m = expAvg.at(name);
            at::Tensor& v = expAvgSq.at(name);
            m.mul_(opt.beta1).add_(g, 1.0 - opt.beta1);
            v.mul_(opt.beta2).addcmul_(g, g, 1.0 - opt.beta2);
            if (p.dim() >= 2 && opt.weightDecay > 0) // matrices and embeddings; not norms
                p.mul_(1.0 - lr * opt.weightDecay);
            at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(opt.adamEps);
            p.addcdiv_(m, denom, -lr / bc1);
        }
        ++step;
        return {l.item<double>(), norm};
    }

    // Mean loss over the validation windows' scored (or recall) targets, batch by batch.
    double meanLoss(const std::vector<RowPlan>& plans, int64_t T, bool onlyRecall) const {
        at::NoGradGuard noGrad;
        double total = 0;
        int64_t counted = 0;
        for (size_t b = 0; b < plans.size(); b += static_cast<size_t>(opt.batchSize)) {
            const size_t e = std::min(plans.size(), b + static_cast<size_t>(opt.batchSize));
            std::vector<RowPlan> part(plans.begin() + static_cast<long>(b),
                                      plans.begin() + static_cast<long>(e));
            auto [in, tgt] = window(validTokens, part, T, onlyRecall);
            const int64_t n = tgt.ne(-100).sum().item<int64_t>();
            if (n == 0)
                continue;
            total += loss(in, tgt).item<double>() * static_cast<double>(n);
            counted += n;
        }
        return counted > 0 ? total / static_cast<double>(counted) : 0.0;
    }

    double validationLoss() const {
        const int64_t T =
            std::min<int64_t>(opt.shape.context, static_cast<int64_t>(validTokens.size()));
        return meanLoss(validationPlans(T), T, false);
    }

    // The recall probe: the loss on the tokens that only the context predicts, in held-out
    // windows made by the recall curriculum with a fixed generator (the same rows in every
    // run and at every step, whatever the training options): renamed proper nouns at their
    // later mentions, and the second copy of a repeated random segment.
    RecallLoss recallLoss() const {
        const int64_t T =
            std::min<int64_t>(opt.shape.context, static_cast<int64_t>(validTokens.size()));
        RecallLoss r;
        if (!pools.usable() || T < 20)
            return r;
        for (RowKind kind : {RowKind::Renamed, RowKind::Repeated}) {
            auto plans = validationPlans(T);
            std::mt19937_64 rng(0x70726f6265ull + static_cast<uint64_t>(kind));
            for (auto& p : plans) {
                p.kind = kind;
                p.seed = rng();
                p.repeats = SegmentRepeats::Twice; // one earlier copy, as in real text
            }
            (kind == RowKind::Renamed ? r.names : r.segments) = meanLoss(plans, T, true);
        }
        return r;
    }

    void initModel(bool randomWeights) {
        auto& c = model.config;
        const auto& s = opt.shape;
        c.architecture = "llama";
        c.hfArchitecture = "LlamaForCausalLM";
        c.sourceFormat = "hf";
        c.dim = s.dim;
        c.hiddenDim = s.hiddenDim;
        c.nLayers = s.nLayers;
        c.nHeads = s.nHeads;
        c.nKvHeads = s.nKvHeads;
        c.headDim = s.dim / s.nHeads;
        c.vocabSize = tokenizer->vocabSize();
        c.maxContext = s.context;
        c.normEps = s.normEps;
        c.ropeTheta = s.ropeTheta;
        c.tiedEmbeddings = s.tiedEmbeddings;
        c.bosId = bos;
        c.eosId = eos;
        validateConfig(c, "train");
        model.path = opt.outputDir;
        model.device = at::kCPU;
        model.dtype = at::kFloat;
        if (randomWeights) {
            auto gen = at::make_generator<at::CPUGeneratorImpl>(opt.seed);
            const double outStd = 0.02 / std::sqrt(2.0 * static_cast<double>(s.nLayers));
            auto normal = [&](std::vector<int64_t> shape, double std) {
                return at::normal(0.0, std, shape, gen, at::TensorOptions().dtype(at::kFloat));
            };
            const int64_t C = c.dim, F = c.hiddenDim, Q = c.nHeads * c.headDim,
                          KV = c.nKvHeads * c.headDim;
            auto& w = model.named;
            w["model.embed_tokens.weight"] = normal({c.vocabSize, C}, 0.02);
            if (!c.tiedEmbeddings)
                w["lm_head.weight"] = normal({c.vocabSize, C}, 0.02);
            w["model.norm.weight"] = at::ones({C});
            for (int64_t l = 0; l < c.nLayers; ++l) {
                const std::string p = "model.layers." + std::to_string(l) + ".";
                w[p + "input_layernorm.weight"] = at::ones({C});
                w[p + "post_attention_layernorm.weight"] = at::ones({C});
                w[p + "self_attn.q_proj.weight"] = normal({Q, C}, 0.02);
                w[p + "self_attn.k_proj.weight"] = normal({KV, C}, 0.02);
                w[p + "self_attn.v_proj.weight"] = normal({KV, C}, 0.02);
                w[p + "self_attn.o_proj.weight"] = normal({C, Q}, outStd);
                w[p + "mlp.gate_proj.weight"] = normal({F, C}, 0.02);
                w[p + "mlp.up_proj.weight"] = normal({F, C}, 0.02);
                w[p + "mlp.down_proj.weight"] = normal({C, F}, outStd);
            }
        }
        for (auto& [name, p] : model.named) {
            p = p.to(at::kFloat).contiguous().detach().requires_grad_(true);
            expAvg.emplace(name, at::zeros_like(p).detach());
            expAvgSq.emplace(name, at::zeros_like(p).detach());
        }
        model.bind(); // the bound views are the leaves themselves (same device and dtype)
    }

    void writeJson(const fs::path& p, const std::string& text) const {
        writeFileAtomic(p.string(), text.data(), text.size());
    }

    void saveModel(const fs::path& dir) const {
        fs::create_directories(dir);
        const auto& c = model.config;
        safetensors::Writer w;
        w.setMetadata("format", "pt");
        for (const auto& [name, p] : model.named) {
            auto t = p.detach().contiguous();
            w.addTensor(name, t.sizes().vec(),
                        std::span<const float>(t.data_ptr<float>(), static_cast<size_t>(t.numel())),
                        storeDtype(opt.saveDtype));
        }
        if (auto st = w.write((dir / "model.safetensors").string()); !st)
            throw KvError(st.message());
        const char* torchDtype = opt.saveDtype == "bf16"  ? "bfloat16"
                                 : opt.saveDtype == "f16" ? "float16"
                                                          : "float32";
        nlohmann::json gen = huggingFaceGenerationConfig(c);
        gen.update({{"do_sample", true},
                    {"temperature", 0.8},
                    {"top_p", 0.95},
                    {"max_length", c.maxContext}});
        writeJson(dir / "generation_config.json", gen.dump(2) + "\n");
        // The tokenizer files travel with the model (copied byte for byte).
        const fs::path tokSrc(opt.tokenizerPath);
        const auto tokBytes = readFileBytes(tokSrc.string(), 1ull << 30);
        writeFileAtomic((dir / "tokenizer.json").string(), tokBytes.data(), tokBytes.size());
        const fs::path cfgSrc = tokSrc.parent_path() / "tokenizer_config.json";
        if (fs::exists(cfgSrc)) {
            const auto b = readFileBytes(cfgSrc.string(), 1ull << 26);
            writeFileAtomic((dir / "tokenizer_config.json").string(), b.data(), b.size());
        }
        // config.json last: its presence marks a complete folder (as convert writes it).
        writeJson(dir / "config.json", huggingFaceConfig(c, torchDtype).dump(2) + "\n");
    }

    void saveCheckpoint(const fs::path& dir) const {
        saveModel(dir);
        safetensors::Writer w;
        for (const auto& [prefix, moments] :
             {std::pair{"exp_avg.", &expAvg}, std::pair{"exp_avg_sq.", &expAvgSq}})
            for (const auto& [name, t] : *moments)
                w.addTensor(
                    prefix + name, t.sizes().vec(),
                    std::span<const float>(t.data_ptr<float>(), static_cast<size_t>(t.numel())));
        if (auto st = w.write((dir / "optimizer.safetensors").string()); !st)
            throw KvError(st.message());
        // The exact f32 weights (model.safetensors may be bf16).
        safetensors::Writer ws;
        for (const auto& [name, p] : model.named) {
            auto t = p.detach().contiguous();
            ws.addTensor(
                name, t.sizes().vec(),
                std::span<const float>(t.data_ptr<float>(), static_cast<size_t>(t.numel())));
        }
        if (auto st = ws.write((dir / "weights_f32.safetensors").string()); !st)
            throw KvError(st.message());
        json state = {{"step", step},
                      {"options", optionsToJson(opt)},
                      {"corpus_fingerprint", corpusFingerprint},
                      {"history", history}};
        writeJson(dir / "trainer_state.json", state.dump(2) + "\n");
    }

    static std::map<std::string, at::Tensor> readTensors(const fs::path& file) {
        auto opened = safetensors::Checkpoint::open(file.string());
        if (!opened)
            throw KvError(opened.message());
        std::map<std::string, at::Tensor> out;
        const auto& ck = opened.value();
        for (const auto& name : ck.tensorNames()) {
            const auto* info = ck.tensor(name);
            if (info->dtype != safetensors::DType::F32)
                throw KvError(file.string() + ": tensor '" + name + "' is not F32");
            auto span = ck.fileOf(name)->data(*info);
            out[name] =
                at::from_blob(const_cast<uint8_t*>(span.data()), info->shape, at::kFloat).clone();
        }
        return out;
    }
};

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainOptions& options) {
    return catchToResult([&]() -> std::unique_ptr<Trainer> {
        auto impl = std::make_unique<Impl>();
        impl->opt = options;
        json resumeState;
        if (!options.resumeFrom.empty()) {
            const fs::path statePath = fs::path(options.resumeFrom) / "trainer_state.json";
            try {
                resumeState = json::parse(readFileText(statePath.string(), 1 << 26));
                optionsFromJson(resumeState.at("options"), impl->opt);
            } catch (const json::exception& e) {
                throw KvError("train: --resume " + statePath.string() + ": " +
                              describeJsonError(e));
            }
        }
        auto& o = impl->opt;
        if (o.corpusPath.empty())
            throw KvError("train: --corpus is required");
        if (o.tokenizerPath.empty())
            throw KvError("train: --tokenizer is required");
        if (o.checkpointDir.empty())
            o.checkpointDir = (fs::path(o.outputDir) / "checkpoint").string();
        checkOptions(o);

        Model::configureThreads();
        if (o.threads > 0)
            Model::setThreads(o.threads);
        at::manual_seed(o.seed);

        auto tok = tok::Tokenizer::fromFile(o.tokenizerPath);
        if (!tok)
            throw KvError("train: --tokenizer " + tok.message());
        impl->tokenizer = tok.value();
        if (!impl->tokenizer->bosId())
            throw KvError("train: --tokenizer " + o.tokenizerPath +
                          ": has no BOS token (every training window starts with one)");
        impl->bos = *impl->tokenizer->bosId();
        impl->eos = impl->tokenizer->eosId().value_or(-1);

        auto all = tokenizeFile(*impl->tokenizer, o.corpusPath, "--corpus");
        if (!o.validationPath.empty()) {
            impl->trainTokens = std::move(all);
            impl->validTokens = tokenizeFile(*impl->tokenizer, o.validationPath, "--valid");
        } else {
            const auto n = all.size();
            const auto cut = n - static_cast<size_t>(static_cast<double>(n) * o.validFraction);
            impl->trainTokens.assign(all.begin(), all.begin() + static_cast<long>(cut));
            impl->validTokens.assign(all.begin() + static_cast<long>(cut), all.end());
        }
        if (static_cast<int64_t>(impl->trainTokens.size()) < o.shape.context)
            throw KvError("train: --corpus " + o.corpusPath + ": " +
                          std::to_string(impl->trainTokens.size()) +
                          " training tokens, fewer than one window (--context " +
                          std::to_string(o.shape.context) + ")");
        if (impl->validTokens.size() < 2)
            throw KvError("train: the validation text has fewer than 2 tokens");
        impl->pools = buildTokenPools(*impl->tokenizer, impl->trainTokens);
        if ((o.renameFraction > 0 || o.segmentFraction > 0 || o.shortWindowSegmentFraction > 0) &&
            !impl->pools.usable())
            throw KvError("train: --tokenizer " + o.tokenizerPath +
                          ": too few plain word tokens for the recall curriculum "
                          "(--rename-fraction/--segment-fraction)");
        Hasher h;
        h.update(impl->trainTokens.data(), impl->trainTokens.size() * sizeof(int32_t));
        h.update(impl->validTokens.data(), impl->validTokens.size() * sizeof(int32_t));
        impl->corpusFingerprint = hex64(h.digest());

        if (options.resumeFrom.empty()) {
            impl->initModel(true);
        } else {
            const fs::path dir(options.resumeFrom);
            if (resumeState.value("corpus_fingerprint", "") != impl->corpusFingerprint)
                throw KvError("train: --resume " + options.resumeFrom +
                              ": the corpus or tokenizer differs from the checkpoint's (" +
                              o.corpusPath + ")");
            impl->model.named = Impl::readTensors(dir / "weights_f32.safetensors");
            impl->initModel(false);
            auto moments = Impl::readTensors(dir / "optimizer.safetensors");
            for (auto& [name, p] : impl->model.named) {
                for (const auto& [prefix, target] : {std::pair{"exp_avg.", &impl->expAvg},
                                                     std::pair{"exp_avg_sq.", &impl->expAvgSq}}) {
                    auto it = moments.find(prefix + name);
                    if (it == moments.end() || it->second.sizes() != p.sizes())
                        throw KvError("train: --resume " + options.resumeFrom +
                                      "/optimizer.safetensors: missing or mis-shaped '" +
                                      std::string(prefix) + name + "'");
                    target->at(name) = it->second;
                }
            }
            impl->step = resumeState.at("step").get<int64_t>();
            impl->history = resumeState.value("history", json::array());
        }
        return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
    });
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<TrainSummary> Trainer::run(const std::function<bool(const TrainProgress&)>& onProgress) {
    return catchToResult([&]() -> TrainSummary {
        auto& d = *m_impl;
        const auto& o = d.opt;
        const auto start = std::chrono::steady_clock::now();
        const int64_t firstStep = d.step;
        const int64_t tokensPerStep = o.batchSize * o.shape.context;
        double lossSum = 0, lastLoss = 0;
        int64_t lossCount = 0;
        bool stopped = false;
        while (d.step < o.steps && !stopped) {
            const double lr = d.lrAt(d.step);
            auto [loss, norm] = d.trainStep();
            if (!std::isfinite(loss))
                throw KvError("train: the loss became " + std::to_string(loss) + " at step " +
                              std::to_string(d.step) + " (try a lower --lr)");
            lossSum += loss;
            ++lossCount;
            const bool evalNow =
                d.step == o.steps || (o.evalEvery > 0 && d.step % o.evalEvery == 0);
            const bool logNow = evalNow || (o.logEvery > 0 && d.step % o.logEvery == 0);
            if (logNow) {
                TrainProgress p;
                p.step = d.step;
                p.steps = o.steps;
                p.loss = lossSum / static_cast<double>(lossCount);
                p.lr = lr;
                p.gradNorm = norm;
                p.elapsedSeconds =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                p.tokensPerSecond = static_cast<double>((d.step - firstStep) * tokensPerStep) /
                                    std::max(1e-9, p.elapsedSeconds);
                json rec = {{"step", d.step}, {"loss", p.loss}, {"lr", lr}};
                if (evalNow) {
                    p.validLoss = d.validationLoss();
                    rec["valid_loss"] = *p.validLoss;
                    if (o.recallProbe) {
                        p.recall = d.recallLoss();
                        rec["recall_names"] = p.recall->names;
                        rec["recall_segments"] = p.recall->segments;
                    }
                }
                d.history.push_back(rec);
                lastLoss = p.loss;
                lossSum = 0;
                lossCount = 0;
                if (onProgress && !onProgress(p))
                    stopped = true;
            }
            if (!stopped && o.checkpointEvery > 0 && d.step % o.checkpointEvery == 0 &&
                d.step < o.steps)
                d.saveCheckpoint(o.checkpointDir);
        }
        if (lossCount > 0)
            lastLoss = lossSum / static_cast<double>(lossCount);
        d.saveCheckpoint(o.checkpointDir);
        if (!stopped)
            d.saveModel(o.outputDir);
        TrainSummary s;
        s.steps = d.step;
        s.parameters = parameterCount();
        s.trainTokens = static_cast<int64_t>(d.trainTokens.size());
        s.validTokens = static_cast<int64_t>(d.validTokens.size());
        s.finalLoss = lastLoss;
        s.finalValidLoss = d.validationLoss();
        s.finalRecall = d.recallLoss();
        s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        s.outputDir = stopped ? o.checkpointDir : o.outputDir;
        return s;
    });
}

Status Trainer::saveModel(const std::string& dir) const {
    return catchToStatus([&] { m_impl->saveModel(dir); });
}

Status Trainer::saveCheckpoint(const std::string& dir) const {
    return catchToStatus([&] { m_impl->saveCheckpoint(dir); });
}

Result<std::vector<float>> Trainer::logits(std::span<const int32_t> tokens) const {
    return catchToResult([&]() -> std::vector<float> {
        const auto& c = m_impl->model.config;
        const auto n = static_cast<int64_t>(tokens.size());
        if (n == 0 || n > c.maxContext)
            throw KvError("train: logits: need 1.." + std::to_string(c.maxContext) + " tokens");
        auto in = at::empty({1, n}, at::kLong);
        for (int64_t i = 0; i < n; ++i) {
            const int32_t id = tokens[static_cast<size_t>(i)];
            if (id < 0 || id >= c.vocabSize)
                throw KvError("train: logits: token id " + std::to_string(id) +
                              " is outside the vocabulary");
            in.data_ptr<int64_t>()[i] = id;
        }
        at::NoGradGuard noGrad;
        auto out = forwardLlamaBatch(m_impl->model, in).contiguous();
        const float* p = out.data_ptr<float>();
        return std::vector<float>(p, p + out.numel());
    });
}

double Trainer::validationLoss() const {
    return m_impl->validationLoss();
}

RecallLoss Trainer::recallLoss() const {
    return m_impl->recallLoss();
}

int64_t Trainer::step() const {
    return m_impl->step;
}

int64_t Trainer::parameterCount() const {
    int64_t n = 0;
    for (const auto& [name, p] : m_impl->model.named)
        n += p.numel();
    return n;
}

std::string Trainer::weightsFingerprint() const {
    Hasher h;
    for (const auto& [name, p] : m_impl->model.named) {
        auto t = p.detach().contiguous();
        h.updateField(name);
        h.update(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
    }
    return hex64(h.digest());
}

const TrainOptions& Trainer::options() const {
    return m_impl->opt;
}

} // namespace kvscope::train
