#include "state/ledger/export.h"

#include "formats/safetensorswriter.h"
#include "state/ledger/manifest.h"

#include <cstring>

namespace kvscope::state {

namespace {

template <typename T> std::vector<uint8_t> asBytes(const std::vector<T>& v) {
    std::vector<uint8_t> out(v.size() * sizeof(T));
    if (!v.empty())
        std::memcpy(out.data(), v.data(), out.size());
    return out;
}

} // namespace

void requireVisibleToEveryHead(const Snapshot& s, const std::string& format) {
    if (s.headMask.empty())
        return;
    const auto layers = static_cast<int64_t>(s.layers.size());
    const int64_t T = s.cacheLength, H = s.kvHeads;
    if (static_cast<int64_t>(s.headMask.size()) != layers * H * T)
        throw KvError("export: head_mask holds " + std::to_string(s.headMask.size()) +
                      " entries, not one per (layer, KV head, slot) (" + std::to_string(layers) +
                      " x " + std::to_string(H) + " x " + std::to_string(T) + "); " + format +
                      " cannot be written from it");
    for (std::size_t i = 0; i < s.headMask.size(); ++i) {
        if (s.headMask[i] == 1)
            continue;
        const int64_t row = static_cast<int64_t>(i) / T;
        const std::string where = "slot " + std::to_string(static_cast<int64_t>(i) % T) +
                                  " of layer " + std::to_string(row / H) + " KV head " +
                                  std::to_string(row % H);
        if (s.headMask[i] != 0)
            throw KvError("export: head_mask entry for " + where + " is " +
                          std::to_string(s.headMask[i]) + ", not 0 or 1");
        throw KvError("export: head_mask hides " + where + ": " + format +
                      " has no per-head mask, so every head would attend to the slots this "
                      "state evicted; export the state before eviction, or one evicted with the "
                      "uniform allocation");
    }
}

Status exportSafetensors(const Snapshot& s, const std::string& path) {
    return catchToStatus([&] {
        requireVisibleToEveryHead(s, "past_key_values");
        using safetensors::DType;
        DType kv;
        if (s.cacheDtype == "f32")
            kv = DType::F32;
        else if (s.cacheDtype == "f16")
            kv = DType::F16;
        else if (s.cacheDtype == "bf16")
            kv = DType::BF16;
        else
            throw KvError("export: cache dtype '" + s.cacheDtype + "' is not f32, f16 or bf16");
        safetensors::Writer w;
        const std::vector<int64_t> shape{1, s.kvHeads, s.cacheLength, s.headDim};
        for (std::size_t l = 0; l < s.layers.size(); ++l) {
            const auto& layer = s.layers[l];
            if (!layer.key || !layer.value)
                throw KvError("export: layer " + std::to_string(l) + " has no data");
            const std::string base = "past_key_values." + std::to_string(l);
            w.addTensor(base + ".key", kv, shape, layer.key->toVector());
            w.addTensor(base + ".value", kv, shape, layer.value->toVector());
        }
        const std::vector<int64_t> ids(s.tokens.begin(), s.tokens.end());
        const std::vector<int64_t> mask(s.mask.begin(), s.mask.end());
        w.addTensor("input_ids", DType::I64, {1, static_cast<int64_t>(ids.size())}, asBytes(ids));
        w.addTensor("position_ids", DType::I64, {1, static_cast<int64_t>(s.positions.size())},
                    asBytes(s.positions));
        w.addTensor("attention_mask", DType::I64, {1, static_cast<int64_t>(mask.size())},
                    asBytes(mask));
        if (!s.lastLogits.empty())
            w.addTensor("last_logits", DType::F32, {1, static_cast<int64_t>(s.lastLogits.size())},
                        asBytes(s.lastLogits));
        w.setMetadata("format", "kvscope-state");
        w.setMetadata("kvscope_manifest", toManifest(s).dump());
        w.setMetadata("next_position", std::to_string(s.nextPosition));
        w.setMetadata("key_layout", "post-rope, rotate_half");
        if (Status st = w.write(path); !st)
            throw KvError(st.message());
    });
}

} // namespace kvscope::state
