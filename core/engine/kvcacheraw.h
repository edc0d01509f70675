// Building a KvCache from borrowed raw bytes — the restore fast path.
//
// KvCache::fromRaw takes owning byte vectors; restoring a snapshot already holds its K/V as
// shared immutable buffers, and copying those into vectors first cost a full pass over the
// cache. kvCacheFromViews copies each layer exactly once, straight into the cache's own
// tensors, and leaves `headroom` free slots after the restored positions so that the next
// decode steps append without reallocating (and re-copying) the whole cache. Layers that lie
// in a file mapping (RawLayerView::file) are not copied at all on the CPU.
//
// Thread-safety: a free function; the views must stay valid for the duration of the call.
#pragma once

#include "engine/kvcache.h"

#include <memory>
#include <span>

namespace kvscope {

class MappedFile;

struct RawLayerView {
    std::span<const uint8_t> key, value; // [kv_heads, positions, head_dim] in the cache dtype
    // The file mapping both spans lie in, when they do (a loaded snapshot's blobs). A CPU cache
    // is then built over a second, copy-on-write mapping of the same file (MappedFile::
    // mapAgain): no copy at all, and whatever the session later writes in place stays private
    // to the cache. Such a cache has no headroom: its first extension copies it (as any full
    // cache is copied when it grows).
    std::shared_ptr<const MappedFile> file;
};

// Same checks and errors as KvCache::fromRaw (sizes per layer, dtype, shape bounds).
// `inPlace` false: file-backed layers are copied too (into tensors with `headroom`), for a
// caller that appends right away, which would otherwise copy the mapped cache to extend it.
// Either way, the pages of a file-backed layer's source mapping are given back once the layer
// is built (MappedFile::release: the bytes stay readable from the file), so that the source
// and the cache's own copy or mapping are not both resident.
Result<KvCache> kvCacheFromViews(const std::string& dtype, const std::string& device,
                                 int64_t kvHeads, int64_t headDim, std::vector<int64_t> positions,
                                 std::vector<uint8_t> mask, std::span<const RawLayerView> layers,
                                 int64_t headroom = 64, bool inPlace = true);

} // namespace kvscope
