// Core-internal: the libtorch representation behind KvCache. Include only from core .cpp
// files (it pulls in torch headers).
#pragma once

#include "engine/kvcache.h"

#include <ATen/ATen.h>

namespace kvscope {

struct KvCache::Impl {
    // Per layer [kv_heads, capacity, head_dim]; slots [0, length) are valid.
    std::vector<at::Tensor> k, v;
    int64_t length = 0;
    std::vector<int64_t> positions; // size == length
    std::vector<uint8_t> mask;      // size == length
    // Empty, or [layers][kv_heads][length] (KvCache::headMask()): which slots each layer's KV
    // head may attend to, beside `mask`.
    std::vector<uint8_t> headMask;
    // Some layer's K/V are a loaded snapshot's bytes, used in place from a copy-on-write file
    // mapping (kvCacheFromViews); false once the cache was reallocated or copied.
    bool fileBacked = false;
    // The forward pass leaves the tensors alone: the new tokens' K/V are attended to beside the
    // cached slots, not written after them (the equivalence probe over a file-backed cache,
    // where a write would cost a copy-on-write fault per touched page). reserve() is a no-op.
    bool appendAside = false;

    // Makes room for `extra` more slots in every layer: a new capacity of at least `growth`
    // times the old one (amortized; doubling by default). Growing is a copy, and the old and
    // new buffers are resident together: a caller that knows how many tokens a run appends (a
    // prompt, a generate call) asks for those with a smaller growth. `dtype` is an empty
    // cache's: one that holds tensors keeps theirs.
    void reserve(int64_t nLayers, int64_t kvHeads, int64_t headDim, int64_t extra,
                 at::ScalarType dtype, at::Device device, double growth = 2.0);
    int64_t capacity() const { return k.empty() ? 0 : k[0].size(1); }
    at::Tensor keys(int64_t layer, int64_t len) const { return k[layer].narrow(1, 0, len); }
    at::Tensor values(int64_t layer, int64_t len) const { return v[layer].narrow(1, 0, len); }
    // Whether slot j of layer l is visible to KV head h by the head mask (mask aside).
    bool headVisible(int64_t l, int64_t h, int64_t j) const {
        return headMask.empty() ||
               headMask[static_cast<size_t>((l * kvHeadCount() + h) * length + j)] != 0;
    }
    int64_t kvHeadCount() const { return k.empty() ? 0 : k[0].size(0); }
    // The head mask of the first n slots (empty when there is none).
    std::vector<uint8_t> headMaskPrefix(int64_t n) const;
    // Extends the head mask (when there is one) by `extra` visible slots per (layer, head):
    // slots a forward pass appends are seen by every head.
    void appendHeadMask(int64_t extra);
    // Deep copy of the valid slots (capacity trimmed to length).
    std::shared_ptr<Impl> clone() const;
    // Replace the cache contents with tensors of exactly [kv_heads, length, head_dim] each.
    void assign(std::vector<at::Tensor> keys, std::vector<at::Tensor> values,
                std::vector<int64_t> positions, std::vector<uint8_t> mask);
};

} // namespace kvscope
