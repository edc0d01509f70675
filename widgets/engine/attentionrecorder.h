// AttentionRecorder: an engine Observer that keeps the "attn_probs" rows of every forward pass,
// so the attention panel shows the pattern the live run actually computed.
//
// Rows are stored per layer and query token: row t of layer l is [heads, P_t] where P_t is the
// cache length after token t was fed (keys it could see). Recording stops (and the recorder
// reports incomplete()) once the stored rows exceed a memory budget; the attention view then
// recomputes the layer from the token buffer instead. Engine thread only.
#pragma once

#include "engine/observer.h"

#include <cstdint>
#include <vector>

namespace kvscope::widgets {

class AttentionRecorder : public kvscope::Observer {
public:
    // onlyLayer >= 0 records just that layer (used for recomputation).
    explicit AttentionRecorder(int64_t budgetBytes = 256ll << 20, int onlyLayer = -1);

    struct Row {
        int64_t keys = 0;        // P_t
        std::vector<float> data; // [heads, keys]
    };

    bool wants(std::string_view name, int layer) const override;
    void observe(std::string_view name, int layer, const kvscope::HostTensor& value) override;

    void clear();
    // Keeps rows of the first n query tokens (after a truncate or a failed feed).
    void truncate(int64_t n);
    // False once a row was dropped for the budget: rows no longer match the token buffer.
    bool complete() const { return m_complete; }
    void setComplete(bool complete) { m_complete = complete; }
    int heads() const { return m_heads; }
    const std::vector<Row>& rows(int layer) const;

private:
    int64_t m_budget;
    int m_onlyLayer;
    int64_t m_bytes = 0;
    bool m_complete = true;
    int m_heads = 0;
    std::vector<std::vector<Row>> m_layers;
};

} // namespace kvscope::widgets
