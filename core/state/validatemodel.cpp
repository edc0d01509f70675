// Invariant checks of a snapshot against the model it is to be restored on: config and RoPE,
// cache shape/dtype/device, every weight fingerprint, tokenizer and chat template.
#include "state/validate.h"

#include "engine/model.h"
#include "tokenizer/tokenizer.h"
#include "util/hash.h"

#include <map>
#include <regex>

namespace kvscope::state {

namespace {

// Config fields that describe where a checkpoint came from rather than the math it does.
bool informationalField(const std::string& key) {
    return key == "source_format" || key == "hf_architecture" || key == "weight_dtype";
}
bool ropeField(const std::string& key) {
    return key == "rope_theta" || key == "rope_scaling" || key == "rope_layout";
}

void checkConfig(const Snapshot& s, const ModelConfig& mc, std::vector<Violation>& out) {
    const nlohmann::json a = toJson(s.config);
    const nlohmann::json b = toJson(mc);
    std::string configDiffs, ropeDiffs;
    for (const auto& [key, value] : b.items()) {
        if (informationalField(key))
            continue;
        const auto it = a.find(key);
        if (it != a.end() && *it == value)
            continue;
        std::string& list = ropeField(key) ? ropeDiffs : configDiffs;
        list += (list.empty() ? "" : ", ") + key + " " + (it == a.end() ? "missing" : it->dump()) +
                " -> " + value.dump();
    }
    if (!configDiffs.empty())
        out.push_back(
            makeViolation("model.config", "config differs (snapshot -> model): " + configDiffs));
    if (!ropeDiffs.empty())
        out.push_back(
            makeViolation("positions.rope", "RoPE differs (snapshot -> model): " + ropeDiffs));
}

void checkCache(const Snapshot& s, const Model& model, std::vector<Violation>& out) {
    const ModelConfig& mc = model.config();
    if (!s.layers.empty() || s.cacheLength > 0) {
        if (static_cast<int64_t>(s.layers.size()) != mc.nLayers)
            out.push_back(makeViolation("cache.shape",
                                        "the cache has " + std::to_string(s.layers.size()) +
                                            " layers, the model " + std::to_string(mc.nLayers)));
        if (s.kvHeads != mc.nKvHeads)
            out.push_back(makeViolation("cache.shape",
                                        "the cache has " + std::to_string(s.kvHeads) +
                                            " kv heads, the model " + std::to_string(mc.nKvHeads)));
        if (s.headDim != mc.headDim)
            out.push_back(
                makeViolation("cache.shape", "the cache has head_dim " + std::to_string(s.headDim) +
                                                 ", the model " + std::to_string(mc.headDim)));
    }
    if (s.cacheDtype != model.computeDtype())
        out.push_back(makeViolation("cache.compute_dtype", "the cache is " + s.cacheDtype +
                                                               ", the model computes in " +
                                                               model.computeDtype()));
    if (s.lineage.device != model.device() && !s.lineage.device.empty())
        out.push_back(makeViolation("cache.device", "captured on " + s.lineage.device +
                                                        ", restoring on " + model.device()));
    if (!s.lastLogits.empty() && static_cast<int64_t>(s.lastLogits.size()) != mc.vocabSize)
        out.push_back(
            makeViolation("logits.shape", std::to_string(s.lastLogits.size()) +
                                              " logits stored; the model's vocabulary has " +
                                              std::to_string(mc.vocabSize)));
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.tokens[i] < 0 || s.tokens[i] >= mc.vocabSize) {
            out.push_back(makeViolation("tokens.range",
                                        "token " + std::to_string(i) + " = " +
                                            std::to_string(s.tokens[i]) +
                                            " is outside the model's vocabulary",
                                        -1, -1, static_cast<int64_t>(i)));
            break;
        }
    }
}

std::string weightCheckId(const std::string& name) {
    if (name.find("embed_tokens") != std::string::npos || name.find("wte") != std::string::npos ||
        name.find("wpe") != std::string::npos)
        return "weights.embedding";
    if (name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos)
        return "weights.norm";
    if (name.find("self_attn") != std::string::npos || name.find(".attn.") != std::string::npos)
        return "weights.attention";
    return "weights.other";
}

int weightLayer(const std::string& name) {
    static const std::regex re(R"((?:layers|h)\.(\d+)\.)");
    std::smatch m;
    if (std::regex_search(name, m, re))
        return std::stoi(m[1].str());
    return -1;
}

void checkWeights(const Snapshot& s, const Model& model, std::vector<Violation>& out) {
    if (s.fingerprints.weights.empty() && s.fingerprints.model.empty())
        return;
    std::map<std::string, const WeightFingerprint*> stored;
    for (const auto& w : s.fingerprints.weights)
        stored[w.name] = &w;
    const auto now = model.weights();
    std::vector<std::string> missing, extra;
    int differing = 0;
    constexpr int kMaxListed = 24; // one per tensor up to this many, then a summary
    for (const auto& w : now) {
        auto it = stored.find(w.name);
        if (it == stored.end()) {
            extra.push_back(w.name);
            continue;
        }
        const WeightFingerprint& sw = *it->second;
        stored.erase(it);
        if (sw.fingerprint == w.fingerprint && sw.shape == w.shape)
            continue;
        if (++differing > kMaxListed)
            continue;
        std::string why = sw.shape != w.shape
                              ? "shape differs"
                              : "fingerprint " + sw.fingerprint + " -> " + w.fingerprint;
        out.push_back(
            makeViolation(weightCheckId(w.name), w.name + ": " + why, weightLayer(w.name)));
    }
    for (const auto& [name, _] : stored)
        missing.push_back(name);
    if (differing > kMaxListed)
        out.push_back(makeViolation("weights.other", std::to_string(differing - kMaxListed) +
                                                         " more weight tensors differ"));
    if (!missing.empty() || !extra.empty()) {
        std::string msg;
        if (!missing.empty())
            msg += std::to_string(missing.size()) +
                   " captured tensor(s) absent from the model (first: " + missing[0] + ")";
        if (!extra.empty())
            msg += std::string(msg.empty() ? "" : "; ") + std::to_string(extra.size()) +
                   " model tensor(s) not in the snapshot (first: " + extra[0] + ")";
        out.push_back(makeViolation("weights.missing", msg));
    }
    if (differing == 0 && missing.empty() && extra.empty() && !s.fingerprints.model.empty() &&
        s.fingerprints.model != model.fingerprint())
        out.push_back(makeViolation("model.fingerprint", "model fingerprint " +
                                                             s.fingerprints.model + " -> " +
                                                             model.fingerprint()));
}

void checkTokenizer(const Snapshot& s, const Model& model, std::vector<Violation>& out) {
    const auto tok = model.tokenizer();
    const auto& f = s.fingerprints;
    if (!tok || f.tokenizer.empty()) {
        if (static_cast<bool>(tok) != !f.tokenizer.empty())
            out.push_back(
                makeViolation("tokenizer.missing", tok ? "the snapshot recorded no tokenizer"
                                                       : "the model has no tokenizer"));
        return;
    }
    if (tok->fingerprint() != f.tokenizer)
        out.push_back(makeViolation("tokenizer.fingerprint",
                                    "tokenizer fingerprint " + f.tokenizer + " (" +
                                        f.tokenizerKind + ") -> " + tok->fingerprint() + " (" +
                                        tok->kind() + ", " + tok->sourcePath() + ")"));
    // Only a prompt built with the tokenizer's own template (name "tokenizer") must match it;
    // a template given from a file is recorded but not the tokenizer's business.
    if (!s.prompt.chatTemplateHash.empty() && s.prompt.chatTemplateName == "tokenizer") {
        const auto t = tok->chatTemplate();
        const std::string now = t ? hex64(hash64(*t)) : "";
        if (now != s.prompt.chatTemplateHash)
            out.push_back(makeViolation("prompt.template_hash",
                                        "the prompt was built with template " +
                                            s.prompt.chatTemplateName + " (" +
                                            s.prompt.chatTemplateHash + "); the tokenizer's is " +
                                            (now.empty() ? "absent" : now)));
    }
}

} // namespace

std::vector<Violation> validateAgainstModel(const Snapshot& s, const Model& model) {
    std::vector<Violation> out;
    try {
        checkConfig(s, model.config(), out);
        checkCache(s, model, out);
        checkWeights(s, model, out);
        checkTokenizer(s, model, out);
    } catch (const std::exception& e) {
        // The model side should never throw; if it does, report it instead of crashing.
        out.push_back(
            makeViolation("model.config", std::string("could not inspect the model: ") + e.what()));
    }
    return out;
}

} // namespace kvscope::state
