// Hugging Face past_key_values (safetensors) as snapshots (hfstate.h).
#include "state/interop/hfstate.h"

#include "engine/model.h"
#include "engine/session.h"
#include "formats/jsonerror.h"
#include "formats/safetensors.h"
#include "state/ledger/manifest.h"
#include "state/verify/restore.h"
#include "util/hash.h"

#include <cstring>
#include <filesystem>
#include <regex>

namespace kvscope::state::hf {

namespace {

std::string dtypeOf(safetensors::DType t) {
    switch (t) {
    case safetensors::DType::F32:
        return "f32";
    case safetensors::DType::F16:
        return "f16";
    case safetensors::DType::BF16:
        return "bf16";
    default:
        return {};
    }
}

// An integer vector tensor ([1, n] or [n], I64 or I32) as int64 values.
std::optional<std::vector<int64_t>> integers(const safetensors::File& f, const char* name,
                                             std::string& problem) {
    const auto* t = f.tensor(name);
    if (!t)
        return std::nullopt;
    const bool batched = t->shape.size() == 2 && t->shape[0] == 1;
    if (!(t->shape.size() == 1 || batched) ||
        (t->dtype != safetensors::DType::I64 && t->dtype != safetensors::DType::I32)) {
        problem = std::string(name) + " is " + std::string(safetensors::dtypeName(t->dtype)) +
                  " of rank " + std::to_string(t->shape.size()) + " (expected I64 or I32 [1, n])";
        return std::nullopt;
    }
    const auto bytes = f.data(*t);
    const auto n = static_cast<std::size_t>(t->elementCount());
    std::vector<int64_t> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (t->dtype == safetensors::DType::I64) {
            std::memcpy(&out[i], bytes.data() + i * 8, 8);
        } else {
            int32_t v;
            std::memcpy(&v, bytes.data() + i * 4, 4);
            out[i] = v;
        }
    }
    return out;
}

} // namespace

Imported importSafetensors(const std::string& path, std::shared_ptr<const Model> modelPtr) {
    Imported out;
    const std::string file = std::filesystem::path(path).filename().string();
    // What is known before the file is read: a failed open still says what was tried.
    out.source = {{"format", "safetensors"}, {"file", file}};
    auto opened = safetensors::File::open(path);
    if (!opened) {
        out.violations.push_back(makeViolation("import.file", opened.message()));
        return out;
    }
    const safetensors::File& f = opened.value();
    const auto& meta = f.metadata();
    const auto fmt = meta.find("format");
    const bool ours = fmt != meta.end() && fmt->second == "kvscope-state";
    uint64_t fileHash = 0;
    {
        Hasher h;
        for (const auto& t : f.tensors()) {
            h.updateField(t.name);
            const auto d = f.data(t);
            h.update(d.data(), d.size());
        }
        fileHash = h.digest();
    }
    out.source = {{"engine", ours ? "kvscope" : "transformers"},
                  {"format", "safetensors"},
                  {"version", ours ? "kvscope-state" : "past_key_values"},
                  {"file", file},
                  {"hash", hex64(fileHash)}};
    auto layout = [&](const std::string& msg) {
        out.violations.push_back(makeViolation("import.layout", file + ": " + msg));
    };
    if (!modelPtr) {
        layout("past_key_values record no model: give the model they were computed with");
        return out;
    }
    const Model& model = *modelPtr;
    const ModelConfig& mc = model.config();

    // past_key_values.{layer}.key|value, layers 0..L-1 with nothing missing.
    static const std::regex kName(R"(past_key_values\.(\d{1,5})\.(key|value))");
    std::map<int, std::pair<const safetensors::TensorInfo*, const safetensors::TensorInfo*>> layers;
    for (const auto& t : f.tensors()) {
        std::smatch m;
        if (!std::regex_match(t.name, m, kName))
            continue;
        auto& slot = layers[std::stoi(m[1].str())];
        (m[2].str() == "key" ? slot.first : slot.second) = &t;
    }
    if (layers.empty()) {
        layout("no past_key_values.{layer}.key/value tensors");
        return out;
    }
    if (static_cast<int64_t>(layers.size()) != mc.nLayers ||
        layers.rbegin()->first + 1 != mc.nLayers) {
        layout(std::to_string(layers.size()) + " layers of past_key_values (up to layer " +
               std::to_string(layers.rbegin()->first) + "); the model has " +
               std::to_string(mc.nLayers));
        return out;
    }
    std::string dtype;
    int64_t length = -1;
    std::vector<LayerKv> kv;
    for (const auto& [l, pair] : layers) {
        for (const auto* t : {pair.first, pair.second}) {
            const std::string which =
                "past_key_values." + std::to_string(l) + (t == pair.first ? ".key" : ".value");
            if (!t) {
                layout(which + " is missing");
                return out;
            }
            auto shape = t->shape;
            if (shape.size() == 4 && shape[0] == 1)
                shape.erase(shape.begin());
            if (shape.size() != 3 || shape[0] != mc.nKvHeads || shape[2] != mc.headDim) {
                std::string got;
                for (auto d : t->shape)
                    got += (got.empty() ? "" : ", ") + std::to_string(d);
                layout(which + " has shape [" + got + "]; the model's cache is [1, " +
                       std::to_string(mc.nKvHeads) + ", length, " + std::to_string(mc.headDim) +
                       "]");
                return out;
            }
            const std::string dt = dtypeOf(t->dtype);
            if (dt.empty() || (!dtype.empty() && dt != dtype) ||
                (length >= 0 && shape[1] != length)) {
                layout(which + " is " + std::string(safetensors::dtypeName(t->dtype)) +
                       " of length " + std::to_string(shape[1]) +
                       "; every layer's K and V must share one float dtype (F32, F16, BF16) and "
                       "one length");
                return out;
            }
            dtype = dt;
            length = shape[1];
        }
        const auto k = f.data(*pair.first), v = f.data(*pair.second);
        kv.push_back({makeBytes({k.begin(), k.end()}), makeBytes({v.begin(), v.end()})});
    }

    out.source["cache_type"] = {{"k", dtype}, {"v", dtype}};
    out.source["cells"] = length;
    Snapshot s;
    s.config = mc;
    s.computeDtype = model.computeDtype();
    s.modelPath = model.path();
    s.cacheDtype = dtype;
    s.cacheDevice = "cpu";
    s.kvHeads = mc.nKvHeads;
    s.headDim = mc.headDim;
    s.cacheLength = length;
    s.layers = std::move(kv);
    std::vector<std::string> assumed;
    std::string problem;
    if (auto ids = integers(f, "input_ids", problem)) {
        for (int64_t id : *ids)
            s.tokens.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    } else {
        assumed.push_back(problem.empty() ? "no input_ids: the token buffer is unknown" : problem);
    }
    problem.clear();
    if (auto pos = integers(f, "position_ids", problem)) {
        s.positions = *pos;
    } else {
        assumed.push_back(problem.empty() ? "no position_ids: positions taken as 0..length-1"
                                          : problem);
        for (int64_t i = 0; i < length; ++i)
            s.positions.push_back(i);
    }
    problem.clear();
    if (auto mask = integers(f, "attention_mask", problem)) {
        for (int64_t m : *mask)
            s.mask.push_back(m == 0 ? 0 : m == 1 ? 1 : 2); // 2: named by mask.values
    } else {
        assumed.push_back(problem.empty() ? "no attention_mask: every cached position visible"
                                          : problem);
        s.mask.assign(static_cast<std::size_t>(length), 1);
    }
    s.nextPosition = s.positions.empty() ? 0 : s.positions.back() + 1;
    if (const auto* t = f.tensor("last_logits"); t && t->dtype == safetensors::DType::F32)
        s.lastLogits = f.readF32("last_logits");
    // kvscope's own export carries its ledger: the sampler, prompt meta and next position.
    nlohmann::json parent;
    if (ours) {
        if (const auto m = meta.find("kvscope_manifest"); m != meta.end()) {
            try {
                const Snapshot led = snapshotFromManifest(
                    parseJsonText(m->second, file + ": metadata kvscope_manifest"));
                s.hasSampler = led.hasSampler;
                s.sampler = led.sampler;
                s.rngState = led.rngState;
                s.prompt = led.prompt;
                s.nextPosition = led.nextPosition;
                s.cacheSourceType = led.cacheSourceType;
                parent = led.lineage.id;
            } catch (const std::exception& e) {
                assumed.push_back("its metadata kvscope_manifest is unreadable (" +
                                  describeJsonError(e) +
                                  "); the sampler and prompt meta are "
                                  "not restored");
            }
        }
    }
    if (s.prompt.segments.empty() && !s.tokens.empty()) {
        s.prompt.bosId = mc.bosId;
        s.prompt.bosHandling = s.tokens[0] == mc.bosId ? "explicit" : "none";
        s.prompt.segments.push_back(
            {0, static_cast<int64_t>(s.tokens.size()), "", "unsegmented", -1});
    }
    std::string logits = s.lastLogits.empty() ? "absent" : "stored";
    if (s.lastLogits.empty() && static_cast<int64_t>(s.tokens.size()) == length && length > 0) {
        auto cache = cacheFromSnapshot(s, model.device());
        if (cache) {
            Session session(modelPtr, std::move(cache).value(), s.tokens, s.nextPosition, {});
            if (auto r = session.recomputeLastStep()) {
                s.lastLogits = std::move(r).value();
                logits = "recomputed";
            }
        }
    }
    s.fingerprints = fingerprintsOf(model);
    nlohmann::json params = out.source;
    params["logits"] = logits;
    if (!parent.is_null())
        params["exported_from"] = parent;
    s.lineage = newLineage(model.device(), "", "import", params);
    std::string note = "the state is bound to " +
                       std::filesystem::path(model.path()).filename().string() +
                       " and checked against it by its layer-0 keys (cache.provenance); the "
                       "last logits are " +
                       logits;
    for (const auto& a : assumed)
        note += "; " + a;
    out.violations.push_back(makeViolation(
        "import.absent",
        (ours ? "" : "past_key_values record no model identity or sampler: ") + note));
    out.source["logits"] = logits;
    out.snapshot = std::move(s);
    return out;
}

bool isPastKeyValuesFile(const std::string& path) {
    if (std::filesystem::path(path).extension() != ".safetensors")
        return false;
    auto f = safetensors::File::open(path);
    if (!f)
        return false;
    for (const auto& t : f.value().tensors())
        if (t.name.rfind("past_key_values.", 0) == 0)
            return true;
    return false;
}

} // namespace kvscope::state::hf
