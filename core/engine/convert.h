// Converting a loaded model to a Hugging Face folder (config.json, model.safetensors,
// generation_config.json, tokenizer.json + tokenizer_config.json).
//
// Weights are written in the HF layout kvscope holds them in (q/k rows already permuted to
// rotate_half), so loading the folder through the HF path gives the same logits as the
// original: that is how the HF loader is tested on real weights.
#pragma once

#include "engine/model.h"

namespace kvscope {

struct ConvertOptions {
    std::string dtype;      // "", "f32", "f16", "bf16": "" keeps the checkpoint dtype (q8_0 -> f32)
    bool overwrite = false; // replace files in an existing model folder
};

// Writes the folder; refuses to touch a folder that already holds a model unless
// overwrite is set. Every file is written atomically.
Status convertToHuggingFace(const Model& model, const std::string& outDir,
                            const ConvertOptions& options = {});

} // namespace kvscope
