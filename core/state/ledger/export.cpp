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

Status exportSafetensors(const Snapshot& s, const std::string& path) {
    return catchToStatus([&] {
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
