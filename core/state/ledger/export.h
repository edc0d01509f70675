// Export of a snapshot's state to safetensors, for Python users:
//   past_key_values.<layer>.key / .value  [1, kv_heads, length, head_dim], cache dtype
//   input_ids       I64 [1, n]         the token buffer
//   position_ids    I64 [1, length]    position of every cached token
//   attention_mask  I64 [1, length]    1 = attend
//   last_logits     F32 [1, vocab]     when stored
// and in __metadata__: "format" = "kvscope-state", "kvscope_manifest" = the ledger manifest
// JSON (LEDGER.md), "next_position", "key_layout". Keys are post-RoPE (rotate_half layout),
// as Hugging Face's DynamicCache stores them. Written atomically.
// Thread-safety: free function.
#pragma once

#include "state/ledger/snapshot.h"

namespace kvscope::state {

// Refuses (KvError naming head_mask) a snapshot whose per-head mask hides a slot from a head,
// or whose head mask is malformed: neither llama.cpp's cells nor past_key_values can say
// that a head does not see a slot, so a reader would attend to slots the state evicted.
// `format` names the target in the message. Every export calls it.
void requireVisibleToEveryHead(const Snapshot& s, const std::string& format);

Status exportSafetensors(const Snapshot& s, const std::string& path);

} // namespace kvscope::state
