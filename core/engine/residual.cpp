#include "engine/residual.h"

#include "engine/modelimpl.h"
#include "engine/observer.h"
#include "engine/session.h"
#include "engine/tensorconv.h"

namespace kvscope {

namespace {

// Records "embed" and every "resid" but the last layer's: the stream entering each layer.
class ResidualRecorder : public Observer {
public:
    explicit ResidualRecorder(int64_t layers) : entering(size_t(layers)) {}
    bool wants(std::string_view name, int layer) const override {
        return name == "embed" || (name == "resid" && layer + 1 < int(entering.size()));
    }
    void observe(std::string_view name, int layer, const HostTensor& value) override {
        entering[name == "embed" ? 0 : size_t(layer + 1)] = value;
    }
    std::vector<HostTensor> entering;
};

void checkResidual(const Model::Impl& m, const HostTensor& r, int64_t T, const std::string& what) {
    if (r.shape.size() != 2 || r.dim(0) != T || r.dim(1) != m.config.dim)
        throw KvError(what + " has shape [" +
                      [&] {
                          std::string s;
                          for (auto d : r.shape)
                              s += (s.empty() ? "" : ", ") + std::to_string(d);
                          return s;
                      }() +
                      "], expected [" + std::to_string(T) + ", " + std::to_string(m.config.dim) +
                      "]");
}

at::Tensor onDevice(const Model::Impl& m, const HostTensor& r) {
    return fromHost(r).to(m.device).to(m.dtype);
}

} // namespace

Result<std::vector<HostTensor>> residualStream(const std::shared_ptr<const Model>& model,
                                               std::span<const int32_t> tokens) {
    ResidualRecorder rec(model->config().nLayers);
    Session s(model);
    s.setObserver(&rec);
    if (Status st = s.feed(tokens); !st)
        return Result<std::vector<HostTensor>>::error(st.message());
    return std::move(rec.entering);
}

Result<KvCache> projectCache(const Model& model, const std::vector<HostTensor>& residuals,
                             const std::vector<int64_t>& positions) {
    return catchToResult([&]() -> KvCache {
        const Model::Impl& m = model.impl();
        const int64_t T = int64_t(positions.size()), L = m.config.nLayers;
        if (int64_t(residuals.size()) != L)
            throw KvError("residual checkpoint: " + std::to_string(residuals.size()) +
                          " residuals for a model of " + std::to_string(L) + " layers");
        at::NoGradGuard noGrad;
        std::vector<at::Tensor> keys, values;
        for (int l = 0; l < int(L); ++l) {
            checkResidual(m, residuals[size_t(l)], T,
                          "residual checkpoint: the residual entering layer " + std::to_string(l));
            auto [k, v] = m.arch->projectKv(m, l, onDevice(m, residuals[size_t(l)]), positions);
            // In the cache dtype the model's sessions use (LoadOptions::cacheDtype).
            keys.push_back(k.to(m.cacheDtype()).contiguous());
            values.push_back(v.to(m.cacheDtype()).contiguous());
        }
        auto impl = std::make_shared<KvCache::Impl>();
        impl->assign(std::move(keys), std::move(values), positions,
                     std::vector<uint8_t>(size_t(T), 1));
        return KvCache(impl);
    });
}

Result<KvCache> rebuildFromLayer(const Model& model, int from, const HostTensor& residual,
                                 const KvCache& below) {
    return catchToResult([&]() -> KvCache {
        const Model::Impl& m = model.impl();
        const int64_t T = below.length(), L = m.config.nLayers;
        if (from < 0 || from >= L)
            throw KvError("residual checkpoint: layer " + std::to_string(from) + " is outside 0.." +
                          std::to_string(L - 1));
        if (below.layers() != L)
            throw KvError("residual checkpoint: the cache has " + std::to_string(below.layers()) +
                          " layers, the model " + std::to_string(L));
        checkResidual(m, residual, T,
                      "residual checkpoint: the residual entering layer " + std::to_string(from));
        at::NoGradGuard noGrad;
        KvCache::Impl fresh;
        m.arch->forwardFrom(m, onDevice(m, residual), from, below.positions(), fresh, nullptr,
                            LogitRows::Last); // the logits are not used
        auto out = below.impl().clone();
        // The rebuilt layers in the dtype of the layers kept (a cache holds one dtype).
        const at::ScalarType keep = out->k.empty() ? m.cacheDtype() : out->k[0].scalar_type();
        for (int64_t l = from; l < L; ++l) {
            out->k[size_t(l)] = fresh.keys(l, T).to(keep).clone();
            out->v[size_t(l)] = fresh.values(l, T).to(keep).clone();
        }
        return KvCache(out);
    });
}

} // namespace kvscope
