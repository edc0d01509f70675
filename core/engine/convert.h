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
    std::string dtype; // "", "f32", "f16", "bf16" ("" keeps the checkpoint dtype, q8_0 -> f32);
                       // GGUF also a gguf::quantMix name: "q8_0", "q4_0", "q4_k_m", …
    bool overwrite = false; // replace files in an existing model folder
};

// Writes the folder; refuses to touch a folder that already holds a model unless
// overwrite is set. Every file is written atomically.
Status convertToHuggingFace(const Model& model, const std::string& outDir,
                            const ConvertOptions& options = {});

// Writes a llama-family model (llama, mistral; no attention biases) as one GGUF v3 file llama.cpp
// loads: its tensor names and shapes, q/k rows permuted back to llama.cpp's adjacent-pair RoPE
// order, norms in f32 and the other weights in `options.dtype` ("" or "f32", "f16", "bf16", or
// a quantized mix: the tensors llama-quantize writes from the f32 file, byte for byte, with
// its types per tensor and general.file_type; formats/ggufquantize.h), the
// llama.* hyperparameters, and the tokenizer: a byte-level BPE tokenizer with GPT-2's
// pre-tokenizer (the bundled demo model's) as tokenizer.ggml.model "gpt2" / pre "gpt-2" with its
// tokens, token types (special -> control), merges, BOS/EOS ids, add_bos_token and chat template;
// a model without a tokenizer as "no_vocab". Other tokenizers are refused by name (llama.cpp
// would tokenize them differently). Refuses to replace an existing file unless overwrite.
Status convertToGguf(const Model& model, const std::string& outPath,
                     const ConvertOptions& options = {});

// Writes a llama model as a llama2.c checkpoint (the legacy version-0 export run.c reads): the
// 7-field header (a negative vocab_size when the classifier is not shared), f32 weights in
// run.c's order, q/k rows back in its adjacent-pair RoPE order, the unused RoPE tables. What
// run.c fixes must already hold (RoPE theta 10000 without scaling, RMSNorm eps 1e-5, no
// biases, head_dim = dim / n_heads); otherwise refused, naming the field. The tokenizer is not
// written (llama2.c keeps it in its own file).
Status convertToLlama2c(const Model& model, const std::string& outPath,
                        const ConvertOptions& options = {});

} // namespace kvscope
