// Hugging Face past_key_values as kvscope snapshots: a safetensors file holding
// `past_key_values.{layer}.key` and `.value`, each [1, kv_heads, length, head_dim] (or without
// the batch dimension) in F32, F16 or BF16 — what `kvscope-cli export --format safetensors`
// writes, and what a few lines of Python write from a transformers DynamicCache (README).
// Optional tensors: `input_ids` [1, n], `position_ids` [1, length], `attention_mask`
// [1, length] (I64 or I32), `last_logits` [1, vocab] (F32). Keys are taken as post-RoPE in the
// rotate_half layout, as transformers caches them.
//
// The bytes of K/V are kept in their dtype (an export -> import round trip is bit-exact). What
// is missing is recorded, not invented: positions default to 0..length-1 and the mask to all
// ones (both noted), absent logits are recomputed and marked so, absent token ids leave the
// token buffer empty (the validation core then names the mismatch). A file kvscope exported also
// carries its ledger manifest: the sampler, prompt meta and next position come back from it.
//
// Thread-safety: free functions.
#pragma once

#include "state/interop/imported.h"

#include <memory>
#include <string>

namespace kvscope {
class Model;
}

namespace kvscope::state::hf {

Imported importSafetensors(const std::string& path, std::shared_ptr<const Model> model);

// True when `path` is a readable safetensors file holding past_key_values tensors (a cache, not
// a checkpoint): how `verify` and the GUI's File > Open tell the two apart.
bool isPastKeyValuesFile(const std::string& path);

} // namespace kvscope::state::hf
