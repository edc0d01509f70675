#include "engine/attention.h"

#include "engine/kvcacheimpl.h"
#include "engine/modelimpl.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <algorithm>
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

LargeVector<uint8_t> AttentionPattern::hiddenCells() const {
    LargeVector<uint8_t> hidden(size_t(queries * keys), 0);
    std::vector<int64_t> maskedSlots;
    for (int64_t k = 0; k < int64_t(mask.size()) && k < keys; ++k)
        if (mask[size_t(k)] == 0)
            maskedSlots.push_back(k);
    for (int64_t q = 0; q < queries; ++q) {
        uint8_t* row = hidden.data() + q * keys;
        const int64_t last = std::clamp<int64_t>(keys - queries + q, -1, keys - 1);
        std::fill(row + last + 1, row + keys, uint8_t(1)); // after the query's own slot
        for (int64_t k : maskedSlots)
            row[k] = 1;
        if (window > 0 && last >= 0)
            for (int64_t k = 0; k <= last; ++k)
                if (positions[size_t(last)] - positions[size_t(k)] >= window)
                    row[k] = 1; // outside a sliding layer's window
    }
    return hidden;
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
        if (P == 0 && queries == 0) { // nothing fed yet: an empty pattern, not an error
            AttentionPattern empty;
            empty.layer = layer;
            empty.head = head;
            empty.kvHead = int(head / std::max<int64_t>(1, c.kvGroups()));
            return empty;
        }
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
        out.mask = cache.mask();
        if (int64_t(out.mask.size()) != P)
            out.mask.assign(size_t(P), 1);
        // A head-level eviction: this KV head sees only the slots it kept.
        if (const auto& hm = cache.headMask(); int64_t(hm.size()) == c.nLayers * keys.dim(0) * P)
            for (int64_t j = 0; j < P; ++j)
                if (hm[size_t((int64_t(layer) * keys.dim(0) + out.kvHead) * P + j)] == 0)
                    out.mask[size_t(j)] = 0;
        std::vector<int64_t> maskedSlots;
        for (int64_t j = 0; j < P; ++j)
            if (out.mask[size_t(j)] == 0)
                maskedSlots.push_back(j);
        if (c.isSliding(layer)) {
            out.window = c.slidingWindow;
            out.positions = cache.positions();
            if (int64_t(out.positions.size()) != P)
                throw KvError("attention: the cache records " +
                              std::to_string(out.positions.size()) + " positions for " +
                              std::to_string(P) + " slots");
        }
        // The scale goes on the queries ([T, D]), not on the [T, P] scores.
        const auto qt = (at::from_blob(const_cast<float*>(q.data()), {queries, H, D}, at::kFloat)
                             .select(1, head) *
                         c.scoreScale())
                            .contiguous(); // [T, D]
        const double softcap = c.attnSoftcap;
        const auto kt =
            at::from_blob(const_cast<float*>(keys.data.data()), {keys.dim(0), P, D}, at::kFloat)
                .select(0, out.kvHead)
                .contiguous(); // [P, D]
        // Row t sees slots j <= P - T + t (causal in slot order). Blocks of rows compute only
        // the slots their last row can see (about half of the square), straight into `probs`;
        // the rest of each row stays 0. The blocks are fixed, so the result does not depend on
        // how many threads share them.
        out.probs.resize(size_t(queries * P)); // zeros
        const int64_t offset = P - queries;
        constexpr int64_t kBlock = 128;
        const float ninf = -std::numeric_limits<float>::infinity();
        at::parallel_for(0, (queries + kBlock - 1) / kBlock, 1, [&](int64_t b0, int64_t b1) {
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t r0 = b * kBlock, r1 = std::min(queries, r0 + kBlock);
                const int64_t seen = offset + r1; // slots the block's last row sees
                auto block =
                    at::from_blob(out.probs.data() + r0 * P, {r1 - r0, seen}, {P, 1}, at::kFloat);
                at::mm_out(block, qt.slice(0, r0, r1), kt.slice(0, 0, seen).t());
                if (softcap > 0)
                    block.div_(softcap).tanh_().mul_(softcap); // Gemma 2, as the forward pass
                for (int64_t t = r0; t < r1; ++t) {
                    float* row = out.probs.data() + t * P;
                    std::fill(row + offset + t + 1, row + seen, ninf); // after its own slot
                    for (int64_t j : maskedSlots)
                        if (j < seen)
                            row[j] = ninf;
                    if (out.window > 0)
                        for (int64_t j = 0; j <= offset + t; ++j)
                            if (out.positions[size_t(offset + t)] - out.positions[size_t(j)] >=
                                out.window)
                                row[j] = ninf;
                }
                block.copy_(at::softmax(block, 1));
            }
        });
        if (!maskedSlots.empty()) {
            // A row that sees no slot is all 0 (softmax gave NaN); NaN from the data itself
            // (a corrupted cache) stays NaN, so the view can show it.
            int64_t firstSeen = P;
            for (int64_t j = 0; j < P && firstSeen == P; ++j)
                if (out.mask[size_t(j)] != 0)
                    firstSeen = j;
            for (int64_t t = 0; t < queries; ++t)
                if (offset + t < firstSeen)
                    std::fill_n(out.probs.data() + t * P, P, 0.0f);
        }
        return out;
    });
}

Result<HostTensor> valueOutputNorms(const Model& model, const KvCache& cache, int layer) {
    return catchToResult([&]() -> HostTensor {
        const auto& c = model.config();
        if (layer < 0 || layer >= c.nLayers)
            throw KvError("attention: layer " + std::to_string(layer) + " is outside 0.." +
                          std::to_string(c.nLayers - 1));
        if (cache.layers() != c.nLayers)
            throw KvError("attention: the cache has " + std::to_string(cache.layers()) +
                          " layers, the model " + std::to_string(c.nLayers));
        const int64_t H = c.nHeads, D = c.headDim, T = cache.length();
        const int64_t group = std::max<int64_t>(1, c.kvGroups());
        if (cache.kvHeads() != c.nKvHeads || (T > 0 && cache.headDim() != D))
            throw KvError("attention: layer " + std::to_string(layer) + " of the cache holds " +
                          std::to_string(cache.kvHeads()) + " KV heads of " +
                          std::to_string(cache.headDim()) + ", the model " +
                          std::to_string(c.nKvHeads) + " of " + std::to_string(D));
        HostTensor out;
        out.shape = {H, T};
        out.data.assign(size_t(H * T), 0.0f);
        if (T == 0)
            return out;
        at::NoGradGuard noGrad;
        const Matrix& wo = model.impl().layers.at(size_t(layer)).wo;
        // [C, H * D] float64 on the CPU: a quantized matrix widened as ggml reads it.
        const at::Tensor w =
            (wo.quantized() ? widenMatrix(wo) : wo.t).to(at::kCPU).to(at::kDouble).contiguous();
        if (w.dim() != 2 || w.size(1) != H * D)
            throw KvError("attention: the output projection of layer " + std::to_string(layer) +
                          " is not [dim, heads x head_dim]");
        const at::Tensor v =
            cache.impl().values(layer, T).to(at::kCPU).to(at::kDouble).contiguous(); // [KVH, T, D]
        for (int64_t h = 0; h < H; ++h) {
            const at::Tensor wh = w.narrow(1, h * D, D);          // [C, D]
            const at::Tensor gram = at::mm(wh.t(), wh);           // [D, D]
            const at::Tensor vh = v.select(0, h / group);         // [T, D]
            const at::Tensor sq = (at::mm(vh, gram) * vh).sum(1); // [T]: |W_h v|^2
            const at::Tensor norms = sq.clamp_min(0).sqrt().to(at::kFloat).contiguous();
            std::copy_n(norms.data_ptr<float>(), T, out.data.begin() + h * T);
        }
        return out;
    });
}

} // namespace kvscope
