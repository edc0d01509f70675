#include "train/trainoptions.h"

#include "util/status.h"

namespace kvscope::train {

using nlohmann::json;

namespace {

json shapeToJson(const ModelShape& s) {
    return {{"dim", s.dim},
            {"n_layers", s.nLayers},
            {"n_heads", s.nHeads},
            {"n_kv_heads", s.nKvHeads},
            {"hidden_dim", s.hiddenDim},
            {"context", s.context},
            {"rope_theta", s.ropeTheta},
            {"norm_eps", s.normEps},
            {"tied_embeddings", s.tiedEmbeddings}};
}

ModelShape shapeFromJson(const json& j) {
    ModelShape s;
    s.dim = j.at("dim").get<int64_t>();
    s.nLayers = j.at("n_layers").get<int64_t>();
    s.nHeads = j.at("n_heads").get<int64_t>();
    s.nKvHeads = j.at("n_kv_heads").get<int64_t>();
    s.hiddenDim = j.at("hidden_dim").get<int64_t>();
    s.context = j.at("context").get<int64_t>();
    s.ropeTheta = j.at("rope_theta").get<double>();
    s.normEps = j.at("norm_eps").get<double>();
    s.tiedEmbeddings = j.at("tied_embeddings").get<bool>();
    return s;
}

} // namespace

json optionsToJson(const TrainOptions& o) {
    return {{"corpus", o.corpusPath},
            {"validation", o.validationPath},
            {"valid_fraction", o.validFraction},
            {"tokenizer", o.tokenizerPath},
            {"shape", shapeToJson(o.shape)},
            {"steps", o.steps},
            {"batch_size", o.batchSize},
            {"copy_fraction", o.copyFraction},
            {"rename_fraction", o.renameFraction},
            {"segment_fraction", o.segmentFraction},
            {"short_window", o.shortWindow},
            {"short_window_steps", o.shortWindowSteps},
            {"short_window_segment_fraction", o.shortWindowSegmentFraction},
            {"lr", o.lr},
            {"min_lr", o.minLr},
            {"warmup_steps", o.warmupSteps},
            {"weight_decay", o.weightDecay},
            {"beta1", o.beta1},
            {"beta2", o.beta2},
            {"adam_eps", o.adamEps},
            {"grad_clip", o.gradClip},
            {"seed", o.seed},
            {"eval_windows", o.evalWindows},
            {"save_dtype", o.saveDtype}};
}

// The training options recorded in a checkpoint; run-control options (output, checkpoint
// folder, threads, logging cadence) stay the caller's.
void optionsFromJson(const json& j, TrainOptions& o) {
    o.corpusPath = j.at("corpus").get<std::string>();
    o.validationPath = j.at("validation").get<std::string>();
    o.validFraction = j.at("valid_fraction").get<double>();
    o.tokenizerPath = j.at("tokenizer").get<std::string>();
    o.shape = shapeFromJson(j.at("shape"));
    o.steps = j.at("steps").get<int64_t>();
    o.batchSize = j.at("batch_size").get<int64_t>();
    o.copyFraction = j.value("copy_fraction", 0.0);
    o.renameFraction = j.value("rename_fraction", 0.0);
    o.segmentFraction = j.value("segment_fraction", 0.0);
    o.shortWindow = j.value("short_window", int64_t{0});
    o.shortWindowSteps = j.value("short_window_steps", int64_t{0});
    o.shortWindowSegmentFraction = j.value("short_window_segment_fraction", -1.0);
    o.lr = j.at("lr").get<double>();
    o.minLr = j.at("min_lr").get<double>();
    o.warmupSteps = j.at("warmup_steps").get<int64_t>();
    o.weightDecay = j.at("weight_decay").get<double>();
    o.beta1 = j.at("beta1").get<double>();
    o.beta2 = j.at("beta2").get<double>();
    o.adamEps = j.at("adam_eps").get<double>();
    o.gradClip = j.at("grad_clip").get<double>();
    o.seed = j.at("seed").get<uint64_t>();
    o.evalWindows = j.at("eval_windows").get<int64_t>();
    o.saveDtype = j.at("save_dtype").get<std::string>();
}

void checkOptions(const TrainOptions& o) {
    auto bad = [](const std::string& opt, const std::string& why) {
        throw KvError("train: " + opt + " " + why);
    };
    const auto& s = o.shape;
    if (s.dim <= 0 || s.dim > 8192)
        bad("--dim " + std::to_string(s.dim), "must be in 1..8192");
    if (s.nLayers <= 0 || s.nLayers > 128)
        bad("--layers " + std::to_string(s.nLayers), "must be in 1..128");
    if (s.nHeads <= 0 || s.dim % s.nHeads != 0 || (s.dim / s.nHeads) % 2 != 0)
        bad("--heads " + std::to_string(s.nHeads),
            "must divide --dim into an even head size (RoPE rotates pairs)");
    if (s.nKvHeads <= 0 || s.nHeads % s.nKvHeads != 0)
        bad("--kv-heads " + std::to_string(s.nKvHeads), "must divide --heads");
    if (s.hiddenDim <= 0 || s.hiddenDim > 65536)
        bad("--ffn " + std::to_string(s.hiddenDim), "must be in 1..65536");
    if (s.context < 2 || s.context > 65536)
        bad("--context " + std::to_string(s.context), "must be in 2..65536");
    if (!(s.ropeTheta > 0) || !(s.normEps > 0))
        bad("--rope-theta/--norm-eps", "must be positive");
    if (o.steps < 0 || o.batchSize <= 0 || o.batchSize > 4096)
        bad("--steps/--batch", "must be non-negative / in 1..4096");
    if (!(o.lr > 0) || !(o.minLr >= 0) || o.minLr > o.lr || o.warmupSteps < 0)
        bad("--lr/--min-lr/--warmup", "must satisfy lr > 0, 0 <= min-lr <= lr, warmup >= 0");
    if (!(o.weightDecay >= 0) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) ||
        !(o.adamEps > 0) || !(o.gradClip >= 0))
        bad("AdamW settings", "out of range (0 <= beta < 1, eps > 0, weight decay, clip >= 0)");
    if (!(o.copyFraction >= 0 && o.copyFraction <= 1))
        bad("--copy-fraction", "must be in [0, 1]");
    if (!(o.renameFraction >= 0 && o.segmentFraction >= 0 &&
          o.renameFraction + o.segmentFraction <= 1))
        bad("--rename-fraction/--segment-fraction", "must be >= 0 and sum to at most 1");
    if (o.shortWindow != 0 &&
        (o.shortWindow < 2 || o.shortWindow >= s.context || s.context % o.shortWindow != 0))
        bad("--short-window " + std::to_string(o.shortWindow),
            "must divide --context and be in 2..context-1 (0: off)");
    if (o.shortWindowSegmentFraction > 1 ||
        (o.shortWindowSegmentFraction >= 0 && o.renameFraction + o.shortWindowSegmentFraction > 1))
        bad("--short-window-segment-fraction",
            "must be <= 1 and sum with --rename-fraction to at most 1 (< 0: --segment-fraction)");
    if (o.shortWindowSteps < 0)
        bad("--short-window-steps", "must be >= 0");
    if (o.validationPath.empty() && !(o.validFraction > 0 && o.validFraction < 0.5))
        bad("--valid-fraction", "must be in (0, 0.5) when no --valid file is given");
    if (o.saveDtype != "f32" && o.saveDtype != "bf16" && o.saveDtype != "f16")
        bad("--save-dtype " + o.saveDtype, "must be f32, bf16 or f16");
    if (o.outputDir.empty())
        bad("-o/--output", "is required");
    if (o.evalWindows <= 0)
        bad("--eval-windows", "must be positive");
}

} // namespace kvscope::train
