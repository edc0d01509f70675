#include "state/ledger/manifest.h"

#include <sstream>

namespace kvscope::state {

namespace {

using json = nlohmann::json;

// Limits applied to manifest numbers before anything is sized from them (they match the
// engine's own config limits, see validateConfig).
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxLength = int64_t{1} << 24;
constexpr int64_t kMaxVocab = int64_t{1} << 22;

const json& at(const json& j, const char* key, const std::string& where) {
    if (!j.is_object())
        throw KvError("manifest: " + where + " is not an object");
    auto it = j.find(key);
    if (it == j.end())
        throw KvError("manifest: missing field " + where + "." + key);
    return *it;
}

std::string str(const json& j, const char* key, const std::string& where) {
    const json& v = at(j, key, where);
    if (!v.is_string())
        throw KvError("manifest: " + where + "." + key + " is not a string");
    return v.get<std::string>();
}

std::string optStr(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t integer(const json& j, const char* key, const std::string& where, int64_t lo, int64_t hi) {
    const json& v = at(j, key, where);
    if (!v.is_number_integer())
        throw KvError("manifest: " + where + "." + key + " is not an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
        throw KvError("manifest: " + where + "." + key + " = " + v.dump() + " is outside " +
                      std::to_string(lo) + ".." + std::to_string(hi));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
        throw KvError("manifest: " + where + "." + key + " = " + std::to_string(x) +
                      " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
}

} // namespace

std::string layerBlobName(std::size_t layer, bool value) {
    return "layers." + std::to_string(layer) + (value ? ".v" : ".k");
}

json toManifest(const Snapshot& s) {
    json segments = json::array();
    for (const auto& g : s.prompt.segments)
        segments.push_back({{"begin", g.begin},
                            {"end", g.end},
                            {"role", g.role},
                            {"kind", g.kind},
                            {"message_index", g.messageIndex}});
    json weights = json::array();
    for (const auto& w : s.fingerprints.weights)
        weights.push_back({{"name", w.name},
                           {"shape", w.shape},
                           {"dtype", w.dtype},
                           {"fingerprint", w.fingerprint}});
    json lineage{{"id", s.lineage.id},
                 {"parent_id", s.lineage.parentId},
                 {"operation", s.lineage.operation},
                 {"parameters", s.lineage.parameters},
                 {"created_at", s.lineage.createdAt},
                 {"kvscope_version", s.lineage.kvscopeVersion},
                 {"device", s.lineage.device}};
    if (!s.lineage.libtorchVersion.empty())
        lineage["libtorch_version"] = s.lineage.libtorchVersion;
    json j{
        {"kvscope_ledger", kLedgerVersion},
        {"lineage", lineage},
        {"model",
         {{"config", toJson(s.config)}, {"compute_dtype", s.computeDtype}, {"path", s.modelPath}}},
        {"cache",
         {{"layers", s.layers.size()},
          {"kv_heads", s.kvHeads},
          {"head_dim", s.headDim},
          {"length", s.cacheLength},
          {"dtype", s.cacheDtype},
          {"device", s.cacheDevice},
          {"layout",
           "[kv_heads, length, head_dim] per layer; keys after RoPE (rotate_half layout)"},
          {"key_blob", "layers.{layer}.k"},
          {"value_blob", "layers.{layer}.v"}}},
        {"positions",
         {{"count", s.positions.size()},
          {"next", s.nextPosition},
          {"blob", "positions"},
          {"rope",
           {{"theta", s.config.ropeTheta},
            {"scaling", s.config.ropeScaling.type},
            {"layout", s.config.ropeLayout},
            {"max_context", s.config.maxContext}}}}},
        {"tokens", {{"count", s.tokens.size()}, {"blob", "tokens"}}},
        {"mask", {{"length", s.mask.size()}, {"blob", "mask"}}},
        {"logits", {{"count", s.lastLogits.size()}, {"blob", "logits"}}},
        {"prompt",
         {{"system_prompt", s.prompt.systemPrompt},
          {"chat_template",
           {{"name", s.prompt.chatTemplateName}, {"hash", s.prompt.chatTemplateHash}}},
          {"segments", segments},
          {"bos", {{"handling", s.prompt.bosHandling}, {"id", s.prompt.bosId}}},
          {"prompt_tokens", s.prompt.promptTokens}}},
        {"fingerprints",
         {{"model", s.fingerprints.model},
          {"config", s.fingerprints.config},
          {"tokenizer", s.fingerprints.tokenizer},
          {"tokenizer_kind", s.fingerprints.tokenizerKind},
          {"chat_template", s.fingerprints.chatTemplate},
          {"weights", weights}}},
    };
    if (s.hasSampler)
        j["sampler"] = {{"temperature", s.sampler.temperature},
                        {"top_p", s.sampler.topP},
                        {"top_k", s.sampler.topK},
                        {"seed", std::to_string(s.sampler.seed)},
                        {"rng_state", std::to_string(s.rngState)}};
    return j;
}

Snapshot snapshotFromManifest(const json& m) {
    if (!m.is_object())
        throw KvError("manifest: the ledger is missing (the file holds no kvscope manifest)");
    const int64_t version = integer(m, "kvscope_ledger", "", 0, INT32_MAX);
    if (version < 1 || version > kLedgerVersion)
        throw KvError("ledger version " + std::to_string(version) +
                      " is not supported by this kvscope (supports 1.." +
                      std::to_string(kLedgerVersion) + "); upgrade kvscope");
    Snapshot s;
    const json& lin = at(m, "lineage", "");
    s.lineage.id = optStr(lin, "id");
    s.lineage.parentId = optStr(lin, "parent_id");
    s.lineage.operation = optStr(lin, "operation");
    if (auto it = lin.find("parameters"); it != lin.end())
        s.lineage.parameters = *it;
    s.lineage.createdAt = optStr(lin, "created_at");
    s.lineage.kvscopeVersion = optStr(lin, "kvscope_version");
    s.lineage.libtorchVersion = optStr(lin, "libtorch_version");
    s.lineage.device = optStr(lin, "device");

    const json& model = at(m, "model", "");
    s.config = modelConfigFromJson(at(model, "config", "model"));
    s.computeDtype = str(model, "compute_dtype", "model");
    s.modelPath = optStr(model, "path");

    const json& c = at(m, "cache", "");
    const int64_t layers = integer(c, "layers", "cache", 0, kMaxLayers);
    s.layers.resize(static_cast<std::size_t>(layers));
    s.kvHeads = integer(c, "kv_heads", "cache", 0, kMaxHeads);
    s.headDim = integer(c, "head_dim", "cache", 0, kMaxHeadDim);
    s.cacheLength = integer(c, "length", "cache", 0, kMaxLength);
    s.cacheDtype = str(c, "dtype", "cache");
    s.cacheDevice = str(c, "device", "cache");

    const json& p = at(m, "positions", "");
    integer(p, "count", "positions", 0, kMaxLength);
    s.nextPosition = integer(p, "next", "positions", INT64_MIN / 2, INT64_MAX / 2);
    integer(at(m, "tokens", ""), "count", "tokens", 0, kMaxLength);
    integer(at(m, "mask", ""), "length", "mask", 0, kMaxLength);
    integer(at(m, "logits", ""), "count", "logits", 0, kMaxVocab);

    const json& pr = at(m, "prompt", "");
    s.prompt.systemPrompt = optStr(pr, "system_prompt");
    if (auto it = pr.find("chat_template"); it != pr.end() && it->is_object()) {
        s.prompt.chatTemplateName = optStr(*it, "name");
        s.prompt.chatTemplateHash = optStr(*it, "hash");
    }
    const json& segs = at(pr, "segments", "prompt");
    if (!segs.is_array() || segs.size() > static_cast<std::size_t>(kMaxLength))
        throw KvError("manifest: prompt.segments is not an array");
    for (const auto& g : segs)
        s.prompt.segments.push_back(
            {integer(g, "begin", "prompt.segments[]", 0, kMaxLength),
             integer(g, "end", "prompt.segments[]", 0, kMaxLength), optStr(g, "role"),
             optStr(g, "kind"),
             static_cast<int>(integer(g, "message_index", "prompt.segments[]", -1, INT32_MAX))});
    const json& bos = at(pr, "bos", "prompt");
    s.prompt.bosHandling = str(bos, "handling", "prompt.bos");
    s.prompt.bosId = static_cast<int32_t>(integer(bos, "id", "prompt.bos", -1, INT32_MAX));
    s.prompt.promptTokens = integer(pr, "prompt_tokens", "prompt", 0, kMaxLength);

    const json& f = at(m, "fingerprints", "");
    s.fingerprints.model = optStr(f, "model");
    s.fingerprints.config = optStr(f, "config");
    s.fingerprints.tokenizer = optStr(f, "tokenizer");
    s.fingerprints.tokenizerKind = optStr(f, "tokenizer_kind");
    s.fingerprints.chatTemplate = optStr(f, "chat_template");
    const json& ws = at(f, "weights", "fingerprints");
    if (!ws.is_array())
        throw KvError("manifest: fingerprints.weights is not an array");
    for (const auto& w : ws) {
        WeightFingerprint wf{str(w, "name", "fingerprints.weights[]"),
                             {},
                             optStr(w, "dtype"),
                             str(w, "fingerprint", "fingerprints.weights[]")};
        const json& shape = at(w, "shape", "fingerprints.weights[]");
        if (!shape.is_array())
            throw KvError("manifest: fingerprints.weights[].shape is not an array");
        for (const auto& d : shape)
            wf.shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
        s.fingerprints.weights.push_back(std::move(wf));
    }

    if (auto it = m.find("sampler"); it != m.end() && it->is_object()) {
        const json& sj = *it;
        s.hasSampler = true;
        try {
            s.sampler.temperature = at(sj, "temperature", "sampler").get<float>();
            s.sampler.topP = at(sj, "top_p", "sampler").get<float>();
            s.sampler.topK = at(sj, "top_k", "sampler").get<int32_t>();
            s.sampler.seed = std::stoull(str(sj, "seed", "sampler"));
            s.rngState = std::stoull(str(sj, "rng_state", "sampler"));
        } catch (const KvError&) {
            throw;
        } catch (const std::exception&) {
            throw KvError("manifest: sampler has a field of the wrong type");
        }
        // continue/fork replay these settings: a NaN or 1e-40 temperature is refused here.
        if (Status st = checkSamplerSettings(s.sampler, "manifest: sampler"); !st)
            throw KvError(st.message());
    }
    return s;
}

std::string describeManifest(const json& m) {
    std::ostringstream o;
    try {
        const Snapshot s = snapshotFromManifest(m);
        const auto& c = s.config;
        o << "snapshot     " << s.lineage.id << " (" << s.lineage.operation
          << (s.lineage.parentId.empty() ? "" : ", parent " + s.lineage.parentId) << ")\n"
          << "created      " << s.lineage.createdAt << " by kvscope " << s.lineage.kvscopeVersion
          << " on " << s.lineage.device << "\n"
          << "model        " << c.architecture << " " << c.nLayers << " layers, dim " << c.dim
          << ", " << c.nHeads << "/" << c.nKvHeads << " heads, vocab " << c.vocabSize
          << (s.modelPath.empty() ? "" : " (" + s.modelPath + ")") << "\n"
          << "cache        " << s.layers.size() << " x [" << s.kvHeads << ", " << s.cacheLength
          << ", " << s.headDim << "] " << s.cacheDtype << " on " << s.cacheDevice << "\n"
          << "tokens       " << m["tokens"]["count"] << " (prompt " << s.prompt.promptTokens
          << "), next position " << s.nextPosition << "\n"
          << "prompt       bos " << s.prompt.bosHandling << ", " << s.prompt.segments.size()
          << " segment(s)"
          << (s.prompt.chatTemplateName.empty() ? "" : ", template " + s.prompt.chatTemplateName)
          << "\n"
          << "fingerprints model " << s.fingerprints.model << ", tokenizer "
          << (s.fingerprints.tokenizer.empty() ? "none" : s.fingerprints.tokenizer) << ", "
          << s.fingerprints.weights.size() << " weights\n";
        if (s.hasSampler)
            o << "sampler      temperature " << s.sampler.temperature << ", top-p "
              << s.sampler.topP << ", top-k " << s.sampler.topK << ", seed " << s.sampler.seed
              << "\n";
    } catch (const std::exception& e) {
        o << "manifest     unreadable: " << e.what() << "\n";
    }
    return o.str();
}

} // namespace kvscope::state
