#include "engine/kvcacheimpl.h"
#include "engine/tensorconv.h"

namespace kvscope {

void KvCache::Impl::reserve(int64_t nLayers, int64_t kvHeads, int64_t headDim, int64_t extra,
                            at::ScalarType dtype, at::Device device) {
    const int64_t needed = length + extra;
    if (!k.empty() && capacity() >= needed)
        return;
    int64_t cap = std::max<int64_t>(needed, std::max<int64_t>(64, capacity() * 2));
    auto opts = at::TensorOptions().dtype(dtype).device(device);
    std::vector<at::Tensor> nk, nv;
    for (int64_t l = 0; l < nLayers; ++l) {
        auto kt = at::zeros({kvHeads, cap, headDim}, opts);
        auto vt = at::zeros({kvHeads, cap, headDim}, opts);
        if (length > 0 && l < static_cast<int64_t>(k.size())) {
            kt.narrow(1, 0, length).copy_(keys(l, length));
            vt.narrow(1, 0, length).copy_(values(l, length));
        }
        nk.push_back(kt);
        nv.push_back(vt);
    }
    k = std::move(nk);
    v = std::move(nv);
}

std::shared_ptr<KvCache::Impl> KvCache::Impl::clone() const {
    auto c = std::make_shared<Impl>();
    c->length = length;
    c->positions = positions;
    c->mask = mask;
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
}

KvCache::KvCache() : m_impl(std::make_shared<Impl>()) {}
KvCache::KvCache(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}
KvCache::~KvCache() = default;
KvCache::KvCache(const KvCache&) = default;
KvCache& KvCache::operator=(const KvCache&) = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

KvCache::Impl& KvCache::mutableImpl() {
    if (m_impl.use_count() > 1)
        m_impl = m_impl->clone();
    return *m_impl;
}

int64_t KvCache::layers() const { return static_cast<int64_t>(m_impl->k.size()); }
int64_t KvCache::length() const { return m_impl->length; }
int64_t KvCache::kvHeads() const { return m_impl->k.empty() ? 0 : m_impl->k[0].size(0); }
int64_t KvCache::headDim() const { return m_impl->k.empty() ? 0 : m_impl->k[0].size(2); }
std::string KvCache::dtype() const {
    return m_impl->k.empty() ? "f32" : dtypeName(m_impl->k[0].scalar_type());
}
std::string KvCache::device() const {
    return m_impl->k.empty() ? "cpu" : m_impl->k[0].device().str();
}
const std::vector<int64_t>& KvCache::positions() const { return m_impl->positions; }
const std::vector<uint8_t>& KvCache::mask() const { return m_impl->mask; }

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

} // namespace kvscope
