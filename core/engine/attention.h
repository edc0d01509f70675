// Attention on demand: the probabilities of one (layer, query head) computed from the cache.
//
// A forward pass can report every layer's attention probabilities ("attn_probs", [H, T, P]),
// but keeping them is quadratic in the context: 30 layers x 9 heads x 4,096^2 floats is
// 18 GB. What a pattern needs is much smaller: the queries of that layer (recorded once,
// [T, H, D], 0.3 GB for the same session) and the keys, which the cache already holds. The
// pattern of any (layer, head) is then softmax(q k^T / sqrt(D)) under the causal mask and the
// cache's own mask, computed in one matrix product — no forward pass over the prefix.
//
// QueryRecorder is the Observer that keeps the queries ("q", post-RoPE, exactly what the
// forward pass multiplied with the keys). attentionPattern() does the product. Both are used
// by the GUI's attention view and by `kvscope-cli attention`.
#pragma once

#include "engine/kvcache.h"
#include "engine/observer.h"
#include "util/largebuffer.h"
#include "util/status.h"

#include <cstdint>
#include <span>
#include <vector>

namespace kvscope {

class Model;

class QueryRecorder : public Observer {
public:
    // Recording stops (complete() turns false) once the rows would exceed budgetBytes;
    // onlyLayer >= 0 records just that layer.
    explicit QueryRecorder(int64_t budgetBytes = int64_t(1) << 30, int onlyLayer = -1);

    bool wants(std::string_view name, int layer) const override;
    void observe(std::string_view name, int layer, const HostTensor& value) override;

    void clear();
    // Keeps the rows of the first n tokens (after a truncate or a failed feed).
    void truncate(int64_t n);
    // False once a row was dropped for the budget: the rows no longer match the tokens.
    bool complete() const { return m_complete; }
    void setComplete(bool complete) { m_complete = complete; }
    int heads() const { return m_heads; }
    int64_t headDim() const { return m_headDim; }
    // Recorded query rows of `layer` (tokens fed while recording).
    int64_t rows(int layer) const;
    // [rows(layer), heads, headDim] row-major; empty for a layer never recorded.
    std::span<const float> queries(int layer) const;
    int64_t bytes() const { return m_bytes; }

private:
    int64_t m_budget;
    int m_onlyLayer;
    int64_t m_bytes = 0;
    bool m_complete = true;
    int m_heads = 0;
    int64_t m_headDim = 0;
    std::vector<std::vector<float>> m_layers; // [layer] -> [rows, heads, headDim]
};

struct AttentionPattern {
    int layer = 0;
    int head = 0;   // query head
    int kvHead = 0; // the KV head its group reads
    int64_t queries = 0;
    int64_t keys = 0;
    // [queries, keys] row-major. Query row t is the t-th of the last `queries` tokens; slots it
    // cannot see (visible() false) hold 0, and a row that sees nothing is all 0.
    LargeVector<float> probs;
    std::vector<uint8_t>
        mask; // [keys], the cache's mask and kvHead's head mask (1 = may be attended to)
    // A sliding-window layer's window (0: the layer sees its whole past) and the slots'
    // positions, which the window is measured in.
    int64_t window = 0;
    std::vector<int64_t> positions; // [keys] when window > 0

    // Whether query row q could see key slot k: k <= keys - queries + q (causal, in slot
    // order), the cache's mask allows k, and on a sliding layer k's position lies less than
    // `window` before the query's. The one statement of the rule; views ask it.
    bool visible(int64_t q, int64_t k) const {
        const int64_t self = keys - queries + q;
        return k <= self && (mask.empty() || mask[size_t(k)] != 0) &&
               (window <= 0 || positions[size_t(self)] - positions[size_t(k)] < window);
    }
    // [queries, keys], 1 where !visible(q, k): the overlay a view greys (built row by row).
    LargeVector<uint8_t> hiddenCells() const;
};

// The probabilities of query head `head` at `layer` for the queries `q` ([queries, H, D],
// as QueryRecorder::queries returns them: the last `queries` tokens of the cache) over every
// slot of `cache`. Errors name the layer/head or the shape that does not fit the model.
Result<AttentionPattern> attentionPattern(const Model& model, const KvCache& cache,
                                          std::span<const float> q, int64_t queries, int layer,
                                          int head);

// What attending to a slot can write: for every query head h of `layer` and every cached slot
// t, the L2 norm of the slot's value pushed through h's slice of the output projection,
// |W_O[:, h*D:(h+1)*D] v_t| (v_t read from the KV head h's group reads; no bias, and no
// output norm of models that have one: the attention block's contribution before it).
// Returns [H, T] float32. Multiplied by h's attention probability of slot t it is how far that
// head moves the residual stream towards the slot's value: the slot-attribution estimate
// (state/probes/attribution.h). Computed as sqrt(v^T (W_h^T W_h) v) with W_h^T W_h ([D, D],
// float64) formed once per head, so the cost is C x D^2 per head plus D^2 per slot, not
// C x D per slot; a quantized or 16-bit W_O is widened whole, one layer at a time (every row
// holds a column of each head). Errors name the layer or the cache that does not fit.
Result<HostTensor> valueOutputNorms(const Model& model, const KvCache& cache, int layer);

} // namespace kvscope
