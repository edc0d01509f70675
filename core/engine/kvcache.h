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

    // Copies of one layer's K or V as float32 [kv_heads, length, head_dim].
    HostTensor key(int layer) const;
    HostTensor value(int layer) const;
    // L2 norm of each cached vector: [kv_heads, length]. Cheap summary for heatmaps.
    HostTensor keyNorms(int layer) const;
    HostTensor valueNorms(int layer) const;

    // Implementation (core-internal, holds libtorch tensors).
    struct Impl;
    const Impl& impl() const { return *m_impl; }
    Impl& mutableImpl(); // detaches (copy-on-write) first
    explicit KvCache(std::shared_ptr<Impl> impl);

private:
    std::shared_ptr<Impl> m_impl;
};

} // namespace kvscope
