// Float to ggml's quantized types, byte for byte as llama-quantize writes them, and
// llama-quantize's choice of type for each tensor of a model.
//
// quantize() reproduces ggml's reference quantizers (quantize_row_<type>_ref in
// ggml-quants.c), which are what ggml_quantize_chunk, and so llama-quantize, runs when it is
// given no importance matrix. quantizedType() reproduces llama.cpp's llama_tensor_get_type for
// the file types kvscope writes (QuantMix), for the tensor names `convert --to gguf` writes.
//
// Pure functions of their arguments; safe to call from any thread.
#pragma once

#include "formats/gguf.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvscope::gguf {

// True for the types quantize() makes: Q4_0, Q5_0, Q5_1, Q8_0 (blocks of 32) and Q4_K, Q5_K,
// Q6_K (super-blocks of 256).
bool canQuantize(TensorType type);

// `values` in `type`'s storage format: what ggml's reference quantizer writes for them, bit for
// bit. Blocks are quantized independently, so a matrix may be passed whole (its rows being
// whole blocks) or a row at a time. `values.size()` must be a multiple of the type's block
// size (typeTraits(type)->blockSize); throws KvError otherwise or for a type canQuantize()
// refuses. Non-finite inputs give some bytes (no crash, no meaning). Large inputs are split
// over the machine's cores. Q8_0's per-element error is at most about 0.57 · d (half a step
// plus the fp16 rounding of d = max|x| / 127).
std::vector<std::uint8_t> quantize(TensorType type, std::span<const float> values);

// A quantized file type kvscope writes, named as `convert --out-dtype` takes it.
struct QuantMix {
    std::string_view name;          // "q4_k_m"
    TensorType base;                // the matrices' type before promotions and fallbacks
    std::uint32_t fileType;         // general.file_type: llama.cpp's enum llama_ftype
    bool pure;                      // llama-quantize --pure: no per-tensor promotions
    std::string_view llamaQuantize; // the same file from an f32 GGUF: llama-quantize's arguments
};

// The mix called `name` (q4_0, q8_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m), or nullopt.
std::optional<QuantMix> quantMix(std::string_view name);
// Their names, comma separated, for messages and help.
std::string_view quantMixNames();

// What llama-quantize's choice depends on besides the tensor itself.
struct QuantModel {
    std::int64_t nLayers = 0; // blk.0 … blk.(nLayers-1), one attn_v (or attn_qkv) and
                              // one ffn_down each
    bool hasOutput = true;    // an output.weight tensor; false: token_embd is also the output
    bool llama70B = false;    // llama.cpp's "70B" (arch llama, 80 layers, fewer KV heads than
                              // heads): its attn_v is raised from Q4_K to Q5_K
};

// The type llama-quantize gives the f32 tensor `name` with `dims` (GGUF order: dims[0] is the
// row length) when it makes `mix`: F32 for a tensor it leaves as it is (vectors, norms, names
// not ending in "weight"); otherwise mix.base, raised for the tensors llama.cpp's K-quant mixes
// give more bits (output, tied token_embd, attn_v and ffn_down in the layers use_more_bits
// picks), and replaced by llama.cpp's fallback (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, then
// F16) when a row is not whole blocks of it.
TensorType quantizedType(const QuantMix& mix, const QuantModel& model, std::string_view name,
                         std::span<const std::int64_t> dims);

} // namespace kvscope::gguf
