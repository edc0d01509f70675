// Building a KvCache from borrowed raw bytes — the restore fast path.
//
// KvCache::fromRaw takes owning byte vectors; restoring a snapshot already holds its K/V as
// shared immutable buffers, and copying those into vectors first cost a full pass over the
// cache. kvCacheFromViews copies each layer exactly once, straight into the cache's own
// tensors, and leaves `headroom` free slots after the restored positions so that the next
// decode steps append without reallocating (and re-copying) the whole cache.
//
// Thread-safety: a free function; the views must stay valid for the duration of the call.
#pragma once

#include "engine/kvcache.h"

#include <span>

namespace kvscope {

struct RawLayerView {
    std::span<const uint8_t> key, value; // [kv_heads, positions, head_dim] in the cache dtype
};

// Same checks and errors as KvCache::fromRaw (sizes per layer, dtype, shape bounds).
Result<KvCache> kvCacheFromViews(const std::string& dtype, const std::string& device,
                                 int64_t kvHeads, int64_t headDim, std::vector<int64_t> positions,
                                 std::vector<uint8_t> mask, std::span<const RawLayerView> layers,
                                 int64_t headroom = 64);

} // namespace kvscope
