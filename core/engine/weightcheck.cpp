// Checks of loaded weights: their shapes against the config (every loader, before a weight
// is reshaped or permuted, so libtorch never reports a shape first), and their finiteness
// (on demand only, when an output turned out NaN: a load-time scan would read every weight
// twice on every load).
#include "engine/modelimpl.h"
#include "util/status.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace kvscope {

std::string shapeText(const std::vector<int64_t>& shape) {
    std::string r = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        r += (i ? ", " : "") + std::to_string(shape[i]);
    return r + "]";
}

std::optional<std::vector<int64_t>> llamaWeightShape(const ModelConfig& c,
                                                     const std::string& name) {
    const int64_t C = c.dim, F = c.hiddenDim, V = c.vocabSize;
    const int64_t Q = c.nHeads * c.headDim, KV = c.nKvHeads * c.headDim;
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
        return std::vector<int64_t>{V, C};
    if (name == "model.norm.weight")
        return std::vector<int64_t>{C};
    static const std::string kLayers = "model.layers.";
    if (name.rfind(kLayers, 0) != 0)
        return std::nullopt;
    const auto dot = name.find('.', kLayers.size());
    const std::string layer = name.substr(kLayers.size(), dot - kLayers.size());
    if (dot == std::string::npos || layer.empty() || layer.size() > 7 ||
        layer.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(layer) >= c.nLayers)
        return std::nullopt; // not a layer the forward pass reads
    const std::string rest = name.substr(dot + 1);
    if (rest == "input_layernorm.weight" || rest == "post_attention_layernorm.weight" ||
        rest == "self_attn.o_proj.bias")
        return std::vector<int64_t>{C};
    // Gemma 2/3: four norms a layer (HF names them after where they sit).
    if (rest == "pre_feedforward_layernorm.weight" || rest == "post_feedforward_layernorm.weight")
        return std::vector<int64_t>{C};
    if (rest == "self_attn.q_norm.weight" || rest == "self_attn.k_norm.weight")
        return std::vector<int64_t>{c.headDim};
    if (rest == "self_attn.q_proj.weight")
        return std::vector<int64_t>{Q, C};
    if (rest == "self_attn.k_proj.weight" || rest == "self_attn.v_proj.weight")
        return std::vector<int64_t>{KV, C};
    if (rest == "self_attn.o_proj.weight")
        return std::vector<int64_t>{C, Q};
    if (rest == "self_attn.q_proj.bias")
        return std::vector<int64_t>{Q};
    if (rest == "self_attn.k_proj.bias" || rest == "self_attn.v_proj.bias")
        return std::vector<int64_t>{KV};
    if (rest == "mlp.gate_proj.weight" || rest == "mlp.up_proj.weight")
        return std::vector<int64_t>{F, C};
    if (rest == "mlp.down_proj.weight")
        return std::vector<int64_t>{C, F};
    // Phi-3's fused projections, split at load (splitFusedWeights).
    if (rest == "self_attn.qkv_proj.weight")
        return std::vector<int64_t>{Q + 2 * KV, C};
    if (rest == "mlp.gate_up_proj.weight")
        return std::vector<int64_t>{2 * F, C};
    return std::nullopt;
}

void splitFusedWeights(const ModelConfig& c, LoadedCheckpoint& ck) {
    const int64_t Q = c.nHeads * c.headDim, KV = c.nKvHeads * c.headDim, F = c.hiddenDim;
    auto split = [&](const std::string& fused, std::vector<std::pair<std::string, int64_t>> parts) {
        const auto it = ck.weights.find(fused);
        if (it == ck.weights.end())
            return;
        const at::Tensor whole = it->second;
        const auto src = ck.sources.find(fused);
        const auto quant = ck.quantized.find(fused);
        int64_t row = 0;
        for (const auto& [name, rows] : parts) {
            // Rows of a row-major matrix: a contiguous view, still in the file's mapping
            // (quantized rows as well: a row is whole blocks).
            ck.weights[name] = whole.narrow(0, row, rows);
            if (quant != ck.quantized.end())
                ck.quantized[name] = {quant->second.type, {rows, quant->second.shape.at(1)}};
            if (src != ck.sources.end()) {
                WeightSource s = src->second;
                s.name += " (rows " + std::to_string(row) + ".." + std::to_string(row + rows) + ")";
                if (s.fileOffset >= 0)
                    s.fileOffset += row * whole.size(1) * s.elementBytes;
                ck.sources[name] = s;
            }
            row += rows;
        }
        ck.weights.erase(fused);
        ck.sources.erase(fused);
        ck.quantized.erase(fused);
    };
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        split(p + "self_attn.qkv_proj.weight", {{p + "self_attn.q_proj.weight", Q},
                                                {p + "self_attn.k_proj.weight", KV},
                                                {p + "self_attn.v_proj.weight", KV}});
        split(p + "mlp.gate_up_proj.weight",
              {{p + "mlp.gate_proj.weight", F}, {p + "mlp.up_proj.weight", F}});
    }
}

void checkLlamaWeightShape(const ModelConfig& c, const std::string& hfName,
                           const std::vector<int64_t>& hfShape, const std::string& file,
                           const std::string& fileName, bool reversedInFile) {
    const auto expected = llamaWeightShape(c, hfName);
    if (!expected || *expected == hfShape)
        return;
    auto shown = [&](std::vector<int64_t> s) {
        if (reversedInFile)
            std::reverse(s.begin(), s.end());
        return shapeText(s);
    };
    throw KvError(file + ": tensor '" + fileName + "' has shape " + shown(hfShape) +
                  " but the config implies " + shown(*expected));
}

std::string findNonFiniteWeight(const Model::Impl& m) {
    // File order where known (the first damaged tensor a reader of the file would meet), then
    // any others by name.
    std::vector<std::pair<int, const std::string*>> order;
    for (const auto& [name, t] : m.named) {
        const auto src = m.sources.find(name);
        order.emplace_back(src == m.sources.end() ? INT_MAX : src->second.order, &name);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& entry : order) {
        const std::string& name = *entry.second;
        at::Tensor t = m.named.at(name);
        if (const auto q = m.quantized.find(name); q != m.quantized.end())
            t = widenMatrix(Matrix(t.contiguous(), q->second.type, q->second.shape.at(1)));
        if (!t.is_floating_point() || t.numel() == 0)
            continue;
        const auto src = m.sources.find(name);
        const WeightSource* s = src == m.sources.end() ? nullptr : &src->second;
        // Element indices as stored in the file: undo the load-time row permutation.
        at::Tensor x =
            s && s->permutedHeads > 0 ? permuteHalfToInterleaved(t, s->permutedHeads) : t;
        const at::Tensor flat = x.reshape({-1});
        const at::Tensor bad = at::isfinite(flat).logical_not();
        if (!bad.any().item<bool>())
            continue;
        const int64_t i = bad.to(at::kByte).argmax().item<int64_t>(); // the first one
        const double v = flat[i].item<double>();
        std::string msg = (s ? s->file : m.path) + ": tensor '" + (s ? s->name : name) +
                          "' holds " +
                          (std::isnan(v) ? "NaN"
                           : v > 0       ? "+Inf"
                                         : "-Inf") +
                          " at element " + std::to_string(i);
        if (s && s->fileOffset >= 0 && s->elementBytes > 0)
            msg +=
                " (byte " + std::to_string(s->fileOffset + i * s->elementBytes) + " of the file)";
        return msg;
    }
    return {};
}

} // namespace kvscope
