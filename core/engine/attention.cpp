#include "engine/attention.h"

#include "engine/model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace kvscope {

QueryRecorder::QueryRecorder(int64_t budgetBytes, int onlyLayer)
    : m_budget(budgetBytes), m_onlyLayer(onlyLayer) {}

bool QueryRecorder::wants(std::string_view name, int layer) const {
    return m_complete && name == "q" && layer >= 0 && (m_onlyLayer < 0 || layer == m_onlyLayer);
}

void QueryRecorder::observe(std::string_view name, int layer, const HostTensor& value) {
    if (!wants(name, layer) || value.shape.size() != 3)
        return;
    // value: [H, T, D]; stored per token as [T, H, D] so that truncate() is a resize.
    const int64_t H = value.dim(0), T = value.dim(1), D = value.dim(2);
    if ((m_heads != 0 && (H != m_heads || D != m_headDim))) {
        m_complete = false; // another model's rows: nothing recorded can be trusted
        return;
    }
    const int64_t bytes = H * T * D * int64_t(sizeof(float));
    if (m_bytes + bytes > m_budget) {
        m_complete = false;
        return;
    }
    m_bytes += bytes;
    m_heads = int(H);
    m_headDim = D;
    if (m_layers.size() <= size_t(layer))
        m_layers.resize(size_t(layer) + 1);
    auto& rows = m_layers[size_t(layer)];
    const size_t at = rows.size();
    rows.resize(at + size_t(H * T * D));
    float* dst = rows.data() + at;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            const float* src = value.data.data() + (h * T + t) * D;
            std::copy(src, src + D, dst + (t * H + h) * D);
        }
}

void QueryRecorder::clear() {
    m_layers.clear();
    m_bytes = 0;
    m_complete = true;
    m_heads = 0;
    m_headDim = 0;
}

void QueryRecorder::truncate(int64_t n) {
    const int64_t row = int64_t(m_heads) * m_headDim;
    for (auto& rows : m_layers)
        if (row > 0 && int64_t(rows.size()) > n * row) {
            m_bytes -= int64_t((rows.size() - size_t(n * row)) * sizeof(float));
            rows.resize(size_t(n * row));
        }
}

int64_t QueryRecorder::rows(int layer) const {
    const int64_t row = int64_t(m_heads) * m_headDim;
    return row > 0 ? int64_t(queries(layer).size()) / row : 0;
}

std::span<const float> QueryRecorder::queries(int layer) const {
    if (layer < 0 || size_t(layer) >= m_layers.size())
        return {};
    return m_layers[size_t(layer)];
}

Result<AttentionPattern> attentionPattern(const Model& model, const KvCache& cache,
                                          std::span<const float> q, int64_t queries, int layer,
                                          int head) {
    return catchToResult([&]() -> AttentionPattern {
        const auto& c = model.config();
        if (layer < 0 || layer >= c.nLayers)
            throw KvError("attention: layer " + std::to_string(layer) + " is outside 0.." +
                          std::to_string(c.nLayers - 1));
        if (head < 0 || head >= c.nHeads)
            throw KvError("attention: query head " + std::to_string(head) + " is outside 0.." +
                          std::to_string(c.nHeads - 1));
        const int64_t H = c.nHeads, D = c.headDim, P = cache.length();
        if (cache.layers() != c.nLayers)
            throw KvError("attention: the cache has " + std::to_string(cache.layers()) +
                          " layers, the model " + std::to_string(c.nLayers));
        if (queries < 0 || queries > P)
            throw KvError("attention: " + std::to_string(queries) + " query rows for a cache of " +
                          std::to_string(P) + " slots");
        if (int64_t(q.size()) != queries * H * D)
            throw KvError("attention: the queries hold " + std::to_string(q.size()) +
                          " values, expected " + std::to_string(queries) + " x " +
                          std::to_string(H) + " heads x " + std::to_string(D));
        AttentionPattern out;
        out.layer = layer;
        out.head = head;
        out.kvHead = int(head / std::max<int64_t>(1, c.kvGroups()));
        out.queries = queries;
        out.keys = P;
        if (queries == 0 || P == 0)
            return out;

        at::NoGradGuard noGrad;
        const HostTensor keys = cache.key(layer); // [KVH, P, D] float32
        if (keys.shape.size() != 3 || keys.dim(1) != P || keys.dim(2) != D)
            throw KvError("attention: layer " + std::to_string(layer) +
                          " of the cache does not have the model's head size");
        auto qt = at::from_blob(const_cast<float*>(q.data()), {queries, H, D}, at::kFloat)
                      .select(1, head); // [T, D], strided
        auto kt =
            at::from_blob(const_cast<float*>(keys.data.data()), {keys.dim(0), P, D}, at::kFloat)
                .select(0, out.kvHead);                                          // [P, D]
        auto scores = at::matmul(qt, kt.transpose(0, 1)) / std::sqrt(double(D)); // [T, P]

        // Visible: j <= P - T + t (causal, in slot order) and the cache's mask allows j.
        auto rows = at::arange(queries, at::kLong).unsqueeze(1) + (P - queries);
        auto cols = at::arange(P, at::kLong).unsqueeze(0);
        auto visible = cols <= rows;
        const auto& mask = cache.mask();
        if (int64_t(mask.size()) == P) {
            auto m = at::from_blob(const_cast<uint8_t*>(mask.data()), {1, P}, at::kByte) != 0;
            visible = visible.logical_and(m);
        }
        scores.masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
        auto probs = at::softmax(scores, -1);
        // A row that sees no slot is all 0 (softmax would give NaN); NaN from the data itself
        // (a corrupted cache) stays NaN, so the view can show it.
        probs.masked_fill_(visible.any(-1, true).logical_not(), 0.0);
        probs = probs.contiguous();
        out.probs.resize(size_t(queries * P));
        std::memcpy(out.probs.data(), probs.data_ptr<float>(), out.probs.size() * sizeof(float));
        auto vis = visible.to(at::kByte).contiguous();
        out.visible.resize(size_t(queries * P));
        std::memcpy(out.visible.data(), vis.data_ptr<uint8_t>(), out.visible.size());
        return out;
    });
}

} // namespace kvscope
