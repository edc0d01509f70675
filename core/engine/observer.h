// Observer: the one hook through which kvscope watches a model run.
//
// The forward pass reports every named intermediate through it, so capture, views and
// patching never edit model code (llama.cpp's `cb(cur, name, il)` idea). Names and shapes
// (T = tokens in this forward call, P = cached positions after it, H = heads,
// KVH = kv heads, D = head_dim, C = model dim):
//   "embed"       layer -1   [T, C]        token (+ position for GPT-2) embeddings
//   "attn_norm"   layer l    [T, C]        input of attention after the norm
//   "q"           layer l    [H, T, D]     queries after RoPE
//   "k", "v"      layer l    [KVH, T, D]   new keys (after RoPE) and values
//   "attn_probs"  layer l    [H, T, P]     attention probabilities over all cached positions
//   "attn_out"    layer l    [T, C]        attention block output (after o_proj)
//   "ffn_out"     layer l    [T, C]        MLP block output
//   "resid"       layer l    [T, C]        residual stream after layer l
//   "logits"      layer -1   [T, vocab]
// Observers are called on the thread that runs the forward pass.
#pragma once

#include "engine/hosttensor.h"

#include <string_view>

namespace kvscope {

class Observer {
public:
    virtual ~Observer() = default;
    // Return true for the intermediates you want; only those are copied to the host.
    virtual bool wants(std::string_view name, int layer) const = 0;
    virtual void observe(std::string_view name, int layer, const HostTensor& value) = 0;
};

} // namespace kvscope
