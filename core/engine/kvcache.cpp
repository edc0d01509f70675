#include "engine/kvcacheimpl.h"
#include "engine/kvcacheraw.h"
#include "engine/tensorconv.h"

#include <algorithm>
#include <cstring>

namespace kvscope {

void KvCache::Impl::reserve(int64_t nLayers, int64_t kvHeads, int64_t headDim, int64_t extra,
                            at::ScalarType dtype, at::Device device, double growth) {
    if (appendAside)
        return; // nothing is written into the tensors (attend())
    const int64_t needed = length + extra;
    // Layers may differ in spare room (a cache built with headroom, then one layer replaced
    // exactly sized): the smallest decides.
    int64_t room = k.empty() ? 0 : capacity();
    for (std::size_t l = 0; l < k.size(); ++l)
        room = std::min({room, k[l].size(1), v[l].size(1)});
    // A cache that holds slots keeps its dtype: a restored f16 cache under a model whose fresh
    // caches are f32 continues in f16, as the session that made it did (its new slots rounded
    // the same way). `dtype` is a fresh cache's. One on another device moves on its first
    // extension.
    if (!k.empty())
        dtype = k[0].scalar_type();
    if (!k.empty() && room >= needed && k[0].device() == device)
        return;
    const int64_t cap = std::max<int64_t>(
        needed, std::max<int64_t>(64, static_cast<int64_t>(double(capacity()) * growth)));
    auto opts = at::TensorOptions().dtype(dtype).device(device);
    std::vector<at::Tensor> nk, nv;
    // Every layer's keys and values in one buffer on huge pages (CPU): decoding reads the
    // whole cache once per token. Slots past the length are never read: no zeroing.
    std::vector<at::Tensor> fresh;
    if (device.is_cpu())
        fresh = emptyOnLargePages(std::vector<TensorSpec>(
            static_cast<size_t>(2 * nLayers), TensorSpec{{kvHeads, cap, headDim}, dtype}));
    for (int64_t l = 0; l < nLayers; ++l) {
        auto kt = device.is_cpu() ? fresh[static_cast<size_t>(2 * l)]
                                  : at::empty({kvHeads, cap, headDim}, opts);
        auto vt = device.is_cpu() ? fresh[static_cast<size_t>(2 * l + 1)]
                                  : at::empty({kvHeads, cap, headDim}, opts);
        if (length > 0 && l < static_cast<int64_t>(k.size())) {
            kt.narrow(1, 0, length).copy_(keys(l, length));
            vt.narrow(1, 0, length).copy_(values(l, length));
        }
        nk.push_back(kt);
        nv.push_back(vt);
    }
    k = std::move(nk);
    v = std::move(nv);
    fileBacked = false;
}

std::shared_ptr<KvCache::Impl> KvCache::Impl::clone() const {
    auto c = std::make_shared<Impl>();
    c->length = length;
    c->positions = positions;
    c->mask = mask;
    c->headMask = headMask;
    for (size_t l = 0; l < k.size(); ++l) {
        c->k.push_back(keys(static_cast<int64_t>(l), length).clone());
        c->v.push_back(values(static_cast<int64_t>(l), length).clone());
    }
    return c;
}

void KvCache::Impl::assign(std::vector<at::Tensor> keys, std::vector<at::Tensor> values,
                           std::vector<int64_t> pos, std::vector<uint8_t> m) {
    k = std::move(keys);
    v = std::move(values);
    length = static_cast<int64_t>(pos.size());
    positions = std::move(pos);
    mask = std::move(m);
    fileBacked = false;
}

std::vector<uint8_t> KvCache::Impl::headMaskPrefix(int64_t n) const {
    if (headMask.empty())
        return {};
    const int64_t rows = static_cast<int64_t>(k.size()) * kvHeadCount();
    std::vector<uint8_t> out;
    out.reserve(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = headMask.begin() + r * length;
        out.insert(out.end(), row, row + n);
    }
    return out;
}

void KvCache::Impl::appendHeadMask(int64_t extra) {
    if (headMask.empty() || extra <= 0)
        return;
    // Called before `length` grows: rows of `length` become rows of length + extra.
    const int64_t rows = static_cast<int64_t>(k.size()) * kvHeadCount();
    std::vector<uint8_t> out;
    out.reserve(static_cast<size_t>(rows * (length + extra)));
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = headMask.begin() + r * length;
        out.insert(out.end(), row, row + length);
        out.insert(out.end(), static_cast<size_t>(extra), uint8_t{1});
    }
    headMask = std::move(out);
}

KvCache::KvCache() : m_impl(std::make_shared<Impl>()) {}
KvCache::KvCache(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}
KvCache::~KvCache() = default;
KvCache::KvCache(const KvCache&) = default;
KvCache& KvCache::operator=(const KvCache&) = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

bool KvCache::usesFileMapping() const {
    return m_impl->fileBacked;
}

KvCache::Impl& KvCache::mutableImpl() {
    if (m_impl.use_count() > 1)
        m_impl = m_impl->clone();
    return *m_impl;
}

int64_t KvCache::layers() const {
    return static_cast<int64_t>(m_impl->k.size());
}
int64_t KvCache::length() const {
    return m_impl->length;
}
int64_t KvCache::kvHeads() const {
    return m_impl->k.empty() ? 0 : m_impl->k[0].size(0);
}
int64_t KvCache::headDim() const {
    return m_impl->k.empty() ? 0 : m_impl->k[0].size(2);
}
std::string KvCache::dtype() const {
    return m_impl->k.empty() ? "f32" : dtypeName(m_impl->k[0].scalar_type());
}
std::string KvCache::device() const {
    return m_impl->k.empty() ? "cpu" : m_impl->k[0].device().str();
}
const std::vector<int64_t>& KvCache::positions() const {
    return m_impl->positions;
}
const std::vector<uint8_t>& KvCache::mask() const {
    return m_impl->mask;
}
int64_t KvCache::visibleSlots() const {
    return int64_t(std::count(m_impl->mask.begin(), m_impl->mask.end(), uint8_t(1)));
}
const std::vector<uint8_t>& KvCache::headMask() const {
    return m_impl->headMask;
}

Status KvCache::setHeadMask(std::vector<uint8_t> headMask) {
    const int64_t want = layers() * kvHeads() * length();
    if (!headMask.empty() && static_cast<int64_t>(headMask.size()) != want)
        return Status::error(
            "cache: the head mask has " + std::to_string(headMask.size()) +
            " entries, expected layers x kv heads x slots = " + std::to_string(want));
    for (size_t i = 0; i < headMask.size(); ++i)
        if (headMask[i] > 1)
            return Status::error("cache: head mask entry " + std::to_string(i) + " is " +
                                 std::to_string(headMask[i]) + " (0 or 1)");
    mutableImpl().headMask = std::move(headMask);
    return {};
}

HostTensor KvCache::key(int layer) const {
    return toHost(m_impl->keys(layer, m_impl->length));
}
HostTensor KvCache::value(int layer) const {
    return toHost(m_impl->values(layer, m_impl->length));
}
HostTensor KvCache::keyNorms(int layer) const {
    return toHost(m_impl->keys(layer, m_impl->length).to(at::kFloat).norm(2, {-1}));
}
HostTensor KvCache::valueNorms(int layer) const {
    return toHost(m_impl->values(layer, m_impl->length).to(at::kFloat).norm(2, {-1}));
}

namespace {
std::vector<uint8_t> rawBytes(const at::Tensor& t) {
    auto c = t.detach().to(at::kCPU).contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    return std::vector<uint8_t>(p, p + c.numel() * c.element_size());
}
} // namespace

std::vector<uint8_t> KvCache::rawKey(int layer) const {
    return rawBytes(m_impl->keys(layer, m_impl->length));
}
std::vector<uint8_t> KvCache::rawValue(int layer) const {
    return rawBytes(m_impl->values(layer, m_impl->length));
}

Result<KvCache> kvCacheFromViews(const std::string& dtype, const std::string& device,
                                 int64_t kvHeads, int64_t headDim, std::vector<int64_t> positions,
                                 std::vector<uint8_t> mask, std::span<const RawLayerView> layers,
                                 int64_t headroom, bool inPlace) {
    return catchToResult([&]() -> KvCache {
        const auto st = parseDtype(dtype, "cache dtype");
        const at::Device dev(device.empty() ? std::string("cpu") : device);
        const int64_t len = static_cast<int64_t>(positions.size());
        if (mask.size() != positions.size())
            throw KvError("cache: mask has " + std::to_string(mask.size()) +
                          " entries but there are " + std::to_string(len) + " positions");
        if (kvHeads <= 0 || headDim <= 0 || kvHeads > 4096 || headDim > 4096)
            throw KvError("cache: kv_heads " + std::to_string(kvHeads) + " / head_dim " +
                          std::to_string(headDim) + " out of range");
        const size_t elem = at::elementSize(st);
        const uint64_t expected = static_cast<uint64_t>(kvHeads * len * headDim) * elem;
        for (size_t l = 0; l < layers.size(); ++l)
            for (int kv = 0; kv < 2; ++kv) {
                const auto& b = kv == 0 ? layers[l].key : layers[l].value;
                if (b.size() != expected)
                    throw KvError("cache: layer " + std::to_string(l) + (kv == 0 ? " K" : " V") +
                                  " has " + std::to_string(b.size()) + " bytes; [" +
                                  std::to_string(kvHeads) + ", " + std::to_string(len) + ", " +
                                  std::to_string(headDim) + "] x " + dtype + " needs " +
                                  std::to_string(expected));
            }
        // Slots past `len` are never read (every reader narrows to the length).
        const int64_t cap = len + std::max<int64_t>(0, headroom);
        const auto opts = at::TensorOptions().dtype(st).device(dev);
        std::vector<at::Tensor> ks, vs;
        // Each distinct source mapping is mapped once more for the cache (see RawLayerView).
        std::vector<std::pair<const MappedFile*, std::shared_ptr<const MappedFile>>> remaps;
        bool fileBacked = false;
        auto mapInPlace = [&](const RawLayerView& layer, std::span<const uint8_t> b) -> at::Tensor {
            const auto& file = layer.file;
            if (!inPlace || !file || !dev.is_cpu() || len == 0 || !file->canMapAgain() ||
                !file->contains(b.data(), b.size()))
                return {};
            auto it = std::find_if(remaps.begin(), remaps.end(),
                                   [&](const auto& r) { return r.first == file.get(); });
            if (it == remaps.end()) {
                remaps.emplace_back(file.get(), file->mapAgain());
                it = remaps.end() - 1;
            }
            const std::uint8_t* p = it->second->data() + (b.data() - file->data());
            it->second->prefault(p, b.size());
            return mappedTensor(it->second, p, {kvHeads, len, headDim}, st);
        };
        for (const auto& layer : layers) {
            for (int kv = 0; kv < 2; ++kv) {
                const auto& b = kv == 0 ? layer.key : layer.value;
                if (auto mapped = mapInPlace(layer, b); mapped.defined()) {
                    (kv == 0 ? ks : vs).push_back(std::move(mapped));
                    fileBacked = true;
                    layer.file->release(b.data(), b.size()); // the remap holds its own pages
                    continue;
                }
                auto t = at::empty({kvHeads, cap, headDim}, opts);
                if (len > 0) {
                    // from_blob borrows the bytes (no copy); copy_ does the one real copy.
                    auto src =
                        at::from_blob(const_cast<uint8_t*>(b.data()), {kvHeads, len, headDim},
                                      at::TensorOptions().dtype(st));
                    t.narrow(1, 0, len).copy_(src);
                    if (layer.file && layer.file->contains(b.data(), b.size()))
                        layer.file->release(b.data(), b.size());
                }
                (kv == 0 ? ks : vs).push_back(std::move(t));
            }
        }
        auto impl = std::make_shared<KvCache::Impl>();
        impl->k = std::move(ks);
        impl->v = std::move(vs);
        impl->length = len;
        impl->positions = std::move(positions);
        impl->mask = std::move(mask);
        impl->fileBacked = fileBacked;
        return KvCache(impl);
    });
}

Result<KvCache> KvCache::fromRaw(const std::string& dtype, const std::string& device,
                                 int64_t kvHeads, int64_t headDim, std::vector<int64_t> positions,
                                 std::vector<uint8_t> mask, const std::vector<RawLayer>& layers) {
    std::vector<RawLayerView> views;
    views.reserve(layers.size());
    for (const auto& l : layers)
        views.push_back({l.key, l.value, nullptr});
    // Exactly sized, as before: callers of fromRaw build caches to inspect, not to extend.
    return kvCacheFromViews(dtype, device, kvHeads, headDim, std::move(positions), std::move(mask),
                            views, 0);
}

KvCache KvCache::truncated(int64_t n) const {
    n = std::clamp<int64_t>(n, 0, m_impl->length);
    auto c = std::make_shared<Impl>();
    std::vector<at::Tensor> ks, vs;
    // A little headroom: a truncated cache is usually extended next (rewind and continue,
    // the equivalence probe), and appending to an exactly sized cache re-copies all of it.
    constexpr int64_t kHeadroom = 64;
    auto copyWithRoom = [&](const at::Tensor& src) {
        auto t = at::empty({src.size(0), n + kHeadroom, src.size(2)}, src.options());
        t.narrow(1, 0, n).copy_(src);
        return t;
    };
    for (size_t l = 0; l < m_impl->k.size(); ++l) {
        ks.push_back(copyWithRoom(m_impl->keys(static_cast<int64_t>(l), n)));
        vs.push_back(copyWithRoom(m_impl->values(static_cast<int64_t>(l), n)));
    }
    c->assign(std::move(ks), std::move(vs),
              std::vector<int64_t>(m_impl->positions.begin(), m_impl->positions.begin() + n),
              std::vector<uint8_t>(m_impl->mask.begin(), m_impl->mask.begin() + n));
    c->headMask = m_impl->headMaskPrefix(n);
    return KvCache(c);
}

KvCache KvCache::convertedTo(const std::string& dtype) const {
    const auto st = parseDtype(dtype, "cache dtype");
    auto c = std::make_shared<Impl>();
    std::vector<at::Tensor> ks, vs;
    for (size_t l = 0; l < m_impl->k.size(); ++l) {
        ks.push_back(m_impl->keys(static_cast<int64_t>(l), m_impl->length).to(st).clone());
        vs.push_back(m_impl->values(static_cast<int64_t>(l), m_impl->length).to(st).clone());
    }
    c->assign(std::move(ks), std::move(vs), m_impl->positions, m_impl->mask);
    c->headMask = m_impl->headMask;
    return KvCache(c);
}

Result<KvCache> KvCache::withLayer(int layer, const HostTensor& key,
                                   const HostTensor& value) const {
    return catchToResult([&]() -> KvCache {
        if (layer < 0 || layer >= layers())
            throw KvError("cache: layer " + std::to_string(layer) + " does not exist (" +
                          std::to_string(layers()) + " layers)");
        const std::vector<int64_t> shape{kvHeads(), length(), headDim()};
        if (key.shape != shape || value.shape != shape)
            throw KvError("cache: replacement K/V for layer " + std::to_string(layer) +
                          " has the wrong shape");
        auto c = m_impl->clone();
        const auto st = c->k[static_cast<size_t>(layer)].scalar_type();
        const auto dev = c->k[static_cast<size_t>(layer)].device();
        c->k[static_cast<size_t>(layer)] = fromHost(key).to(dev, st);
        c->v[static_cast<size_t>(layer)] = fromHost(value).to(dev, st);
        return KvCache(c);
    });
}

Result<KvCache> KvCache::withPositions(std::vector<int64_t> positions,
                                       std::vector<uint8_t> mask) const {
    if (static_cast<int64_t>(positions.size()) != length() ||
        static_cast<int64_t>(mask.size()) != length())
        return Result<KvCache>::error("cache: positions/mask must have " +
                                      std::to_string(length()) + " entries");
    auto c = m_impl->clone();
    c->positions = std::move(positions);
    c->mask = std::move(mask);
    return KvCache(c);
}

} // namespace kvscope
