#include "attentionrecorder.h"

#include <algorithm>

namespace kvscope::widgets {

AttentionRecorder::AttentionRecorder(int64_t budgetBytes, int onlyLayer)
    : m_budget(budgetBytes), m_onlyLayer(onlyLayer) {}

bool AttentionRecorder::wants(std::string_view name, int layer) const {
    return m_complete && name == "attn_probs" && (m_onlyLayer < 0 || layer == m_onlyLayer);
}

void AttentionRecorder::observe(std::string_view name, int layer,
                                const kvscope::HostTensor& value) {
    if (name != "attn_probs" || layer < 0 || value.shape.size() != 3)
        return;
    // value: [H, T, P]
    const int64_t H = value.dim(0), T = value.dim(1), P = value.dim(2);
    const int64_t bytes = H * T * P * int64_t(sizeof(float));
    if (m_bytes + bytes > m_budget) {
        m_complete = false; // the caller recomputes from tokens from now on
        return;
    }
    m_bytes += bytes;
    m_heads = int(H);
    if (m_layers.size() <= size_t(layer))
        m_layers.resize(size_t(layer) + 1);
    auto& rows = m_layers[size_t(layer)];
    for (int64_t t = 0; t < T; ++t) {
        Row row;
        row.keys = P;
        row.data.resize(size_t(H * P));
        for (int64_t h = 0; h < H; ++h) {
            const float* src = value.data.data() + (h * T + t) * P;
            std::copy(src, src + P, row.data.begin() + h * P);
        }
        rows.push_back(std::move(row));
    }
}

void AttentionRecorder::clear() {
    m_layers.clear();
    m_bytes = 0;
    m_complete = true;
}

void AttentionRecorder::truncate(int64_t n) {
    for (auto& rows : m_layers) {
        while (int64_t(rows.size()) > n) {
            m_bytes -= int64_t(rows.back().data.size() * sizeof(float));
            rows.pop_back();
        }
    }
}

const std::vector<AttentionRecorder::Row>& AttentionRecorder::rows(int layer) const {
    static const std::vector<Row> none;
    return layer >= 0 && size_t(layer) < m_layers.size() ? m_layers[size_t(layer)] : none;
}

} // namespace kvscope::widgets
