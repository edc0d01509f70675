// KvCache: the explicit key/value cache of one sequence, as a value.
//
// Layout per layer: K and V are [kv_heads, length, head_dim], keys stored AFTER RoPE in the
// "half" (Hugging Face rotate_half) layout. Alongside: the position of every cached token
// (not necessarily 0..length-1: a restored or spliced cache may carry others) and the
// attention mask over cached slots (1 = may be attended to).
//
// Copies are cheap and copy-on-write: a copy shares tensors until one side is modified, so
// forking a session costs nothing until the branches diverge. A KvCache is not thread-safe
// for concurrent modification; const use from several threads is fine.
#pragma once

#include "engine/hosttensor.h"
#include "util/status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvscope {

class KvCache {
public:
    KvCache();
    ~KvCache();
    KvCache(const KvCache&);
    KvCache& operator=(const KvCache&);
    KvCache(KvCache&&) noexcept;
    KvCache& operator=(KvCache&&) noexcept;

    bool empty() const { return length() == 0; }
    int64_t layers() const;
    int64_t length() const; // cached positions
    int64_t kvHeads() const;
    int64_t headDim() const;
    std::string dtype() const;  // "f32", "f16", "bf16"
    std::string device() const; // "cpu", "cuda:0"
    const std::vector<int64_t>& positions() const;
    const std::vector<uint8_t>& mask() const;
    int64_t visibleSlots() const; // mask entries that are 1 (the slots a query may attend to)
    // Per-head visibility beside the slot mask: empty (every KV head sees every slot the mask
    // allows), or layers() * kvHeads() * length() bytes, [layer][kv_head][slot] row-major,
    // 1 = that layer's KV head (and the query heads of its group) may attend to the slot.
    // An eviction with a non-uniform budget allocation (probes/survive.h) keeps different
    // slots per head: the cache holds the union, the head mask says which head kept which.
    // Slots appended by later forward passes are visible to every head.
    const std::vector<uint8_t>& headMask() const;
    // Replaces the head mask (empty clears it); errors when the size is not
    // layers() * kvHeads() * length() or an entry is not 0/1. Copy-on-write like every edit.
    Status setHeadMask(std::vector<uint8_t> headMask);

    // Whether some layer is a loaded snapshot's bytes used in place (restored from a mapped
    // .kvsnap without a copy: kvcacheraw.h). The first extension copies the cache, and this
    // turns false.
    bool usesFileMapping() const;

    // Copies of one layer's K or V as float32 [kv_heads, length, head_dim].
    HostTensor key(int layer) const;
    HostTensor value(int layer) const;
    // L2 norm of each cached vector: [kv_heads, length]. Cheap summary for heatmaps.
    HostTensor keyNorms(int layer) const;
    HostTensor valueNorms(int layer) const;

    // Exact bytes of one layer's K or V in the cache dtype, contiguous [kv_heads, length,
    // head_dim], copied to the host. What snapshots store.
    std::vector<uint8_t> rawKey(int layer) const;
    std::vector<uint8_t> rawValue(int layer) const;

    // Builds a cache from raw per-layer bytes (as rawKey/rawValue return them). Shapes and
    // sizes are checked: every layer's K and V must hold kvHeads * positions.size() *
    // headDim elements of `dtype` ("f32", "f16", "bf16"). Errors name the layer.
    struct RawLayer {
        std::vector<uint8_t> key, value;
    };
    static Result<KvCache> fromRaw(const std::string& dtype, const std::string& device,
                                   int64_t kvHeads, int64_t headDim, std::vector<int64_t> positions,
                                   std::vector<uint8_t> mask, const std::vector<RawLayer>& layers);

    // A copy holding only the first n positions (n <= length), head mask included. Shares
    // nothing mutable.
    KvCache truncated(int64_t n) const;
    // A copy whose tensors are converted to another dtype ("f32", "f16", "bf16").
    KvCache convertedTo(const std::string& dtype) const;
    // A copy with layer `layer`'s K and V replaced by float data [kv_heads, length, head_dim]
    // (converted to the cache dtype). Used by patching and fault injection.
    Result<KvCache> withLayer(int layer, const HostTensor& key, const HostTensor& value) const;
    // Positions and mask replaced (sizes must equal length()).
    Result<KvCache> withPositions(std::vector<int64_t> positions, std::vector<uint8_t> mask) const;

    // Implementation (core-internal, holds libtorch tensors).
    struct Impl;
    const Impl& impl() const { return *m_impl; }
    Impl& mutableImpl(); // detaches (copy-on-write) first
    explicit KvCache(std::shared_ptr<Impl> impl);

private:
    std::shared_ptr<Impl> m_impl;
};

} // namespace kvscope
