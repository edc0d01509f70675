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

std::string fieldName(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
}

// "a number", "an object", ... for messages about a field of the wrong type.
std::string typeWithArticle(const json& v) {
    const std::string t = v.type_name();
    return (t == "object" || t == "array" ? "an " : "a ") + t;
}

[[noreturn]] void wrongType(const json& v, const std::string& field, const char* expected) {
    throw KvError("manifest: " + field + " is " + typeWithArticle(v) + ", expected " + expected);
}

const json& at(const json& j, const char* key, const std::string& where) {
    if (!j.is_object())
        throw KvError("manifest: " + (where.empty() ? std::string("the ledger") : where) + " is " +
                      typeWithArticle(j) + ", expected an object");
    auto it = j.find(key);
    if (it == j.end())
        throw KvError("manifest: missing field " + fieldName(where, key));
    return *it;
}

const json& object(const json& j, const char* key, const std::string& where) {
    const json& v = at(j, key, where);
    if (!v.is_object())
        wrongType(v, fieldName(where, key), "an object");
    return v;
}

const json* optObject(const json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end())
        return nullptr;
    if (!it->is_object())
        wrongType(*it, fieldName(where, key), "an object");
    return &*it;
}

std::string str(const json& j, const char* key, const std::string& where) {
    const json& v = at(j, key, where);
    if (!v.is_string())
        wrongType(v, fieldName(where, key), "a string");
    return v.get<std::string>();
}

// An optional string field: absent reads as "", any other type is refused (a fingerprint or a
// lineage id of the wrong type must not read as "unknown").
std::string optStr(const json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end())
        return {};
    if (!it->is_string())
        wrongType(*it, fieldName(where, key), "a string");
    return it->get<std::string>();
}

// A descriptive field this kvscope writes with one fixed value and reads by that value (blob
// names): if present, it must say what the reader will do.
void fixedStr(const json& j, const char* key, const std::string& where, const std::string& value) {
    const std::string got = optStr(j, key, where);
    if (j.contains(key) && got != value)
        throw KvError("manifest: " + fieldName(where, key) + " = \"" + got + "\", expected \"" +
                      value + "\" (this kvscope reads the blob by that name)");
}

int64_t integer(const json& j, const char* key, const std::string& where, int64_t lo, int64_t hi) {
    const json& v = at(j, key, where);
    const std::string field = fieldName(where, key);
    if (!v.is_number_integer())
        wrongType(v, field, "an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
        throw KvError("manifest: " + field + " = " + v.dump() + " is outside " +
                      std::to_string(lo) + ".." + std::to_string(hi));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
        throw KvError("manifest: " + field + " = " + std::to_string(x) + " is outside " +
                      std::to_string(lo) + ".." + std::to_string(hi));
    return x;
}

double number(const json& j, const char* key, const std::string& where) {
    const json& v = at(j, key, where);
    if (!v.is_number())
        wrongType(v, fieldName(where, key), "a number");
    return v.get<double>();
}

// A 64-bit unsigned integer stored as a decimal string (JSON numbers lose bits past 2^53).
uint64_t decimalU64(const json& j, const char* key, const std::string& where) {
    const std::string text = str(j, key, where);
    const std::string field = fieldName(where, key);
    if (text.empty() || text.size() > 20 ||
        text.find_first_not_of("0123456789") != std::string::npos)
        throw KvError("manifest: " + field + " = \"" + text.substr(0, 40) +
                      "\" is not a decimal number of 0..18446744073709551615");
    uint64_t x = 0;
    for (char c : text) {
        const uint64_t d = static_cast<uint64_t>(c - '0');
        if (x > (UINT64_MAX - d) / 10)
            throw KvError("manifest: " + field + " = \"" + text +
                          "\" is larger than 18446744073709551615");
        x = x * 10 + d;
    }
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
        {"kvscope_ledger", s.headMask.empty() ? 1 : kLedgerVersion},
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
    if (!s.cacheSourceType.empty())
        j["cache"]["source_type"] = s.cacheSourceType;
    if (!s.headMask.empty())
        j["head_mask"] = {
            {"count", s.headMask.size()},
            {"layout", "[layers, kv_heads, length], 1 = the head may attend to the slot"},
            {"blob", "head_mask"}};
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
    const json& lin = object(m, "lineage", "");
    s.lineage.id = optStr(lin, "id", "lineage");
    s.lineage.parentId = optStr(lin, "parent_id", "lineage");
    s.lineage.operation = optStr(lin, "operation", "lineage");
    if (auto it = lin.find("parameters"); it != lin.end())
        s.lineage.parameters = *it;
    s.lineage.createdAt = optStr(lin, "created_at", "lineage");
    s.lineage.kvscopeVersion = optStr(lin, "kvscope_version", "lineage");
    s.lineage.libtorchVersion = optStr(lin, "libtorch_version", "lineage");
    s.lineage.device = optStr(lin, "device", "lineage");

    const json& model = object(m, "model", "");
    s.config = modelConfigFromJson(object(model, "config", "model"));
    // The limits a loaded model meets: a stored config no model could have is refused before
    // anything is sized from it or compared with it.
    validateConfig(s.config, "manifest: model.config");
    s.computeDtype = str(model, "compute_dtype", "model");
    s.modelPath = optStr(model, "path", "model");

    const json& c = object(m, "cache", "");
    const int64_t layers = integer(c, "layers", "cache", 0, kMaxLayers);
    s.layers.resize(static_cast<std::size_t>(layers));
    s.kvHeads = integer(c, "kv_heads", "cache", 0, kMaxHeads);
    s.headDim = integer(c, "head_dim", "cache", 0, kMaxHeadDim);
    s.cacheLength = integer(c, "length", "cache", 0, kMaxLength);
    s.cacheDtype = str(c, "dtype", "cache");
    s.cacheDevice = str(c, "device", "cache");
    (void)optStr(c, "layout", "cache");
    s.cacheSourceType = optStr(c, "source_type", "cache");
    fixedStr(c, "key_blob", "cache", "layers.{layer}.k");
    fixedStr(c, "value_blob", "cache", "layers.{layer}.v");

    const json& p = object(m, "positions", "");
    integer(p, "count", "positions", 0, kMaxLength);
    s.nextPosition = integer(p, "next", "positions", INT64_MIN / 2, INT64_MAX / 2);
    fixedStr(p, "blob", "positions", "positions");
    if (const json* rope = optObject(p, "rope", "positions")) {
        // A copy of model.config's RoPE fields for readers of the manifest; the config is the
        // one compared, so the copy only has to be well-formed.
        if (rope->contains("theta"))
            (void)number(*rope, "theta", "positions.rope");
        (void)optStr(*rope, "scaling", "positions.rope");
        (void)optStr(*rope, "layout", "positions.rope");
        if (rope->contains("max_context"))
            (void)integer(*rope, "max_context", "positions.rope", 0, INT64_MAX);
    }
    const json& tokens = object(m, "tokens", "");
    integer(tokens, "count", "tokens", 0, kMaxLength);
    fixedStr(tokens, "blob", "tokens", "tokens");
    const json& mask = object(m, "mask", "");
    integer(mask, "length", "mask", 0, kMaxLength);
    fixedStr(mask, "blob", "mask", "mask");
    if (const json* hm = optObject(m, "head_mask", "")) {
        if (version < 2)
            throw KvError("manifest: head_mask needs ledger version 2, the file says " +
                          std::to_string(version));
        integer(*hm, "count", "head_mask", 0, kMaxLayers * kMaxHeads * kMaxLength);
        (void)optStr(*hm, "layout", "head_mask");
        fixedStr(*hm, "blob", "head_mask", "head_mask");
    }
    const json& logits = object(m, "logits", "");
    integer(logits, "count", "logits", 0, kMaxVocab);
    fixedStr(logits, "blob", "logits", "logits");

    const json& pr = object(m, "prompt", "");
    s.prompt.systemPrompt = optStr(pr, "system_prompt", "prompt");
    if (const json* t = optObject(pr, "chat_template", "prompt")) {
        s.prompt.chatTemplateName = optStr(*t, "name", "prompt.chat_template");
        s.prompt.chatTemplateHash = optStr(*t, "hash", "prompt.chat_template");
    }
    const json& segs = at(pr, "segments", "prompt");
    if (!segs.is_array())
        wrongType(segs, "prompt.segments", "an array");
    if (segs.size() > static_cast<std::size_t>(kMaxLength))
        throw KvError("manifest: prompt.segments has " + std::to_string(segs.size()) +
                      " entries, more than the " + std::to_string(kMaxLength) +
                      " positions a cache can hold");
    for (std::size_t i = 0; i < segs.size(); ++i) {
        const json& g = segs[i];
        const std::string where = "prompt.segments[" + std::to_string(i) + "]";
        s.prompt.segments.push_back(
            {integer(g, "begin", where, 0, kMaxLength), integer(g, "end", where, 0, kMaxLength),
             optStr(g, "role", where), optStr(g, "kind", where),
             static_cast<int>(integer(g, "message_index", where, -1, INT32_MAX))});
    }
    const json& bos = object(pr, "bos", "prompt");
    s.prompt.bosHandling = str(bos, "handling", "prompt.bos");
    s.prompt.bosId = static_cast<int32_t>(integer(bos, "id", "prompt.bos", -1, INT32_MAX));
    s.prompt.promptTokens = integer(pr, "prompt_tokens", "prompt", 0, kMaxLength);

    const json& f = object(m, "fingerprints", "");
    s.fingerprints.model = optStr(f, "model", "fingerprints");
    s.fingerprints.config = optStr(f, "config", "fingerprints");
    s.fingerprints.tokenizer = optStr(f, "tokenizer", "fingerprints");
    s.fingerprints.tokenizerKind = optStr(f, "tokenizer_kind", "fingerprints");
    s.fingerprints.chatTemplate = optStr(f, "chat_template", "fingerprints");
    const json& ws = at(f, "weights", "fingerprints");
    if (!ws.is_array())
        wrongType(ws, "fingerprints.weights", "an array");
    for (std::size_t i = 0; i < ws.size(); ++i) {
        const json& w = ws[i];
        const std::string where = "fingerprints.weights[" + std::to_string(i) + "]";
        WeightFingerprint wf{
            str(w, "name", where), {}, optStr(w, "dtype", where), str(w, "fingerprint", where)};
        const json& shape = at(w, "shape", where);
        if (!shape.is_array())
            wrongType(shape, where + ".shape", "an array");
        if (shape.size() > 32)
            throw KvError("manifest: " + where + ".shape has " + std::to_string(shape.size()) +
                          " dimensions (at most 32)");
        for (std::size_t d = 0; d < shape.size(); ++d) {
            if (!shape[d].is_number_integer() || shape[d].get<int64_t>() < 0)
                throw KvError("manifest: " + where + ".shape[" + std::to_string(d) +
                              "] = " + shape[d].dump() + " is not a dimension (an integer >= 0)");
            wf.shape.push_back(shape[d].get<int64_t>());
        }
        s.fingerprints.weights.push_back(std::move(wf));
    }

    if (const json* sj = optObject(m, "sampler", "")) {
        s.hasSampler = true;
        s.sampler.temperature = static_cast<float>(number(*sj, "temperature", "sampler"));
        s.sampler.topP = static_cast<float>(number(*sj, "top_p", "sampler"));
        s.sampler.topK = static_cast<int32_t>(integer(*sj, "top_k", "sampler", 0, INT32_MAX));
        s.sampler.seed = decimalU64(*sj, "seed", "sampler");
        s.rngState = decimalU64(*sj, "rng_state", "sampler");
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
