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
//   "attn_heads"  layer l    [T, H*D]      each query head's attention output (probs x V)
//                                          before o_proj, head h in columns h*D..(h+1)*D-1
//   "attn_out"    layer l    [T, C]        attention block output (after o_proj and, where
//                                          the model has one, its output norm)
//   "ffn_out"     layer l    [T, C]        MLP block output (after its output norm, if any)
//   "resid"       layer l    [T, C]        residual stream after layer l
//   "logits"      layer -1   [T, vocab]    after the final norm, output matrix, soft-cap
// Observers are called on the thread that runs the forward pass.
//
// Interventions: an observer may also REPLACE an intermediate it wants (activation patching,
// the residual-stream transplant of state::transplant). After observe(), replace() is called
// with a mutable host copy; returning true makes the forward pass continue with `value`
// instead (it must keep the shape; it is converted back to the model's device and dtype).
// Replacing "k"/"v" changes what is appended to the cache; replacing "resid" at layer l
// changes what layers l+1.. (and the K/V they cache) see. The default replaces nothing, so
// a read-only observer costs one virtual call per wanted intermediate, and a session without
// an observer runs no hook code at all.
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
    // Called after observe() for the same intermediate: return true to continue the forward
    // pass with the (possibly edited) `value`. A shape change is an error of the feed.
    virtual bool replace(std::string_view name, int layer, HostTensor& value) {
        (void)name;
        (void)layer;
        (void)value;
        return false;
    }
};

} // namespace kvscope
