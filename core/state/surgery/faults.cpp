// The fault lab (faults.h): the fault registry, each fault's transformation, the forced
// session a runtime would continue from, and the lab that verifies and measures them all.
#include "state/surgery/faults.h"

#include "engine/model.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/verifyfile.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace kvscope::state {

namespace {

namespace fs = std::filesystem;

// --- the registry --------------------------------------------------------------------------

const std::vector<FaultInfo> kFaults = {
    {"position-offset",
     "every cached position and the next position shifted by one (keys stay rotated at their "
     "true positions): an off-by-one position record",
     "positions.offset",
     false,
     {{"offset", "1", "shift added to every position and to the next position (non-zero)"}}},
    {"stale-next-position",
     "the next position was not advanced past the last cached token (stale cache_position): "
     "the next token is rotated onto an occupied position",
     "positions.next",
     false,
     {{"behind", "1", "how many positions the next position lags (1..cache length)"}}},
    {"foreign-cache",
     "K/V computed for the same tokens by another model of the same geometry (default: random "
     "weights), with the original model's fingerprints: the silent wrong-model restore",
     "cache.provenance",
     false,
     {{"seed", "7", "seed of the random-weight model (when no other model is given)"}}},
    {"tokenizer-swapped",
     "the tokenizer fingerprint replaced by another tokenizer's (--tokenizer T, default a "
     "built-in byte-level tokenizer): new text would be encoded with other ids",
     "tokenizer.fingerprint",
     true,
     {}},
    {"dtype-roundtrip",
     "cache values rounded through f16 (or bf16) and back to f32 while the manifest still "
     "says f32: precision lost behind the manifest's back",
     "cache.precision",
     false,
     {{"via", "f16", "the narrow dtype of the round trip: f16 or bf16"}}},
    {"duplicate-bos",
     "a second BOS at the prompt boundary (template rendered one, the tokenizer added another); "
     "the state is recomputed over the doubled BOS",
     "prompt.duplicate_bos",
     false,
     {}},
    {"truncated-cache",
     "the K/V cut to fewer positions while the token buffer, positions, mask and next position "
     "were not fixed",
     "cache.length",
     false,
     {{"drop", "", "positions cut from the end of the cache (default: a quarter, at least 1)"}}},
    {"leaked-state",
     "the cache was not reset between sessions: a previous session's K/V (default: the same "
     "tokens once more) sit in front of this one's, which was computed on top of them",
     "cache.length",
     false,
     {{"previous", "",
       "tokens of the previous session, the first N of this one's (default: all)"}}},
    {"corrupt-layer",
     "one layer's K/V overwritten with noise (or zeros) at every position",
     "logits.equivalence",
     false,
     {{"layer", "", "the layer (default: the middle one)"},
      {"mode", "noise", "noise | zeros"},
      {"scale", "1", "noise standard deviation relative to the layer's RMS"},
      {"seed", "1", "noise seed"},
      {"which", "kv", "k | v | kv"}}},
    {"wrong-rope-theta",
     "keys rotated with another RoPE theta than the model's (a runtime computed the cache with "
     "the wrong theta; the stored config is right, the keys are not)",
     "positions.rope",
     false,
     {{"theta", "", "the wrong theta (default: 500000, or 10000 when the model uses 500000)"}}},
};

// --- parameters ----------------------------------------------------------------------------

class Params {
public:
    Params(const FaultInfo& f, const std::map<std::string, std::string>& given)
        : m_fault(f), m_given(given) {
        for (const auto& [k, _] : given) {
            const bool known = std::any_of(f.params.begin(), f.params.end(),
                                           [&](const FaultParam& p) { return p.name == k; });
            if (!known) {
                std::string names;
                for (const auto& p : f.params)
                    names += (names.empty() ? "" : ", ") + p.name;
                throw KvError("fault " + f.name + ": unknown parameter '" + k + "' (" +
                              (names.empty() ? std::string("it takes none") : "known: " + names) +
                              ")");
            }
        }
    }
    bool has(const std::string& k) const { return m_given.count(k) > 0; }
    std::string str(const std::string& k) const {
        if (auto it = m_given.find(k); it != m_given.end())
            return it->second;
        for (const auto& p : m_fault.params)
            if (p.name == k)
                return p.defaultValue;
        return {};
    }
    int64_t integer(const std::string& k, int64_t fallback, int64_t lo, int64_t hi) const {
        const std::string v = str(k);
        if (v.empty())
            return fallback;
        std::size_t used = 0;
        int64_t x = 0;
        try {
            x = std::stoll(v, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != v.size())
            throw KvError("fault " + m_fault.name + ": parameter " + k + "='" + v +
                          "' is not an integer");
        if (x < lo || x > hi)
            throw KvError("fault " + m_fault.name + ": parameter " + k + "=" + v + " is outside " +
                          std::to_string(lo) + ".." + std::to_string(hi));
        return x;
    }
    double real(const std::string& k, double fallback, double lo, double hi) const {
        const std::string v = str(k);
        if (v.empty())
            return fallback;
        std::size_t used = 0;
        double x = 0;
        try {
            x = std::stod(v, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != v.size() || !std::isfinite(x))
            throw KvError("fault " + m_fault.name + ": parameter " + k + "='" + v +
                          "' is not a number");
        if (x < lo || x > hi)
            throw KvError("fault " + m_fault.name + ": parameter " + k + "=" + v + " is outside " +
                          std::to_string(lo) + ".." + std::to_string(hi));
        return x;
    }
    std::string choice(const std::string& k, std::initializer_list<const char*> allowed) const {
        const std::string v = str(k);
        std::string list;
        for (const char* a : allowed) {
            if (v == a)
                return v;
            list += (list.empty() ? "" : ", ") + std::string(a);
        }
        throw KvError("fault " + m_fault.name + ": parameter " + k + "='" + v + "' is not one of " +
                      list);
    }

private:
    const FaultInfo& m_fault;
    const std::map<std::string, std::string>& m_given;
};

// --- helpers -------------------------------------------------------------------------------

void requireCache(const Snapshot& s, const std::string& fault) {
    if (s.cacheLength <= 0 || s.layers.empty())
        throw KvError("fault " + fault + ": the snapshot holds no cached positions");
    if (s.expectedLayerBytes() == 0)
        throw KvError("fault " + fault + ": the snapshot's cache dtype '" + s.cacheDtype +
                      "' or shape is not usable");
    for (std::size_t l = 0; l < s.layers.size(); ++l)
        if (!s.layers[l].key || !s.layers[l].value ||
            s.layers[l].key->size() != s.expectedLayerBytes() ||
            s.layers[l].value->size() != s.expectedLayerBytes())
            throw KvError("fault " + fault + ": layer " + std::to_string(l) +
                          " K/V blob does not match the cache shape (verify the snapshot first)");
    if (static_cast<int64_t>(s.positions.size()) != s.cacheLength ||
        static_cast<int64_t>(s.mask.size()) != s.cacheLength)
        throw KvError("fault " + fault +
                      ": positions/mask do not match the cache length (verify the snapshot "
                      "first)");
    if (!s.headMask.empty())
        throw KvError("fault " + fault +
                      ": the state carries a head mask (an eviction that kept different slots "
                      "per head); the fault lab starts from a state a session made");
}

const Model& requireModel(const FaultContext& c, const std::string& fault) {
    if (!c.model)
        throw KvError("fault " + fault + " recomputes state and needs the model (--model)");
    return *c.model;
}

KvCache cpuCache(const Snapshot& s) {
    auto c = cacheFromSnapshot(s, "cpu");
    if (!c)
        throw KvError(c.message());
    return std::move(c).value();
}

// Stores a (CPU) cache's raw bytes back into the snapshot's layers.
void storeLayers(Snapshot& s, const KvCache& cache) {
    s.layers.clear();
    for (int64_t l = 0; l < cache.layers(); ++l) {
        const int li = static_cast<int>(l);
        s.layers.push_back({makeBytes(cache.rawKey(li)), makeBytes(cache.rawValue(li))});
    }
}

Sampler samplerOf(const Snapshot& s) {
    Sampler sampler(s.hasSampler ? s.sampler : SamplerSettings{});
    if (s.hasSampler)
        sampler.setRngState(s.rngState);
    return sampler;
}

// A session over `tokens` computed from scratch (positions 0..), or throws naming `what`.
Session recompute(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                  const std::string& what) {
    Session session(model);
    if (Status st = session.feed(tokens); !st)
        throw KvError(what + ": " + st.message());
    return session;
}

// --- the faults ----------------------------------------------------------------------------

void positionOffset(Snapshot& s, const Params& p, nlohmann::json& rec) {
    const int64_t maxCtx = std::max<int64_t>(s.config.maxContext, 1);
    const int64_t offset = p.integer("offset", 1, -maxCtx, maxCtx);
    if (offset == 0)
        throw KvError("fault position-offset: parameter offset must not be 0");
    if (!s.positions.empty() && s.positions.front() + offset < 0)
        throw KvError("fault position-offset: offset " + std::to_string(offset) +
                      " would make the first position negative");
    for (auto& pos : s.positions)
        pos += offset;
    s.nextPosition += offset;
    rec["offset"] = offset;
}

void staleNext(Snapshot& s, const Params& p, nlohmann::json& rec) {
    const int64_t behind = p.integer("behind", 1, 1, std::max<int64_t>(s.cacheLength, 1));
    s.nextPosition -= behind;
    rec["behind"] = behind;
}

// K/V of the same tokens from another model of the same geometry.
void foreignCache(Snapshot& s, const FaultContext& c, const Params& p, nlohmann::json& rec) {
    std::shared_ptr<const Model> other = c.otherModel;
    const ModelConfig& cfg = c.model ? c.model->config() : s.config;
    if (!other) {
        const auto seed = static_cast<uint64_t>(p.integer("seed", 7, 0, INT64_MAX));
        auto r = Model::createRandom(cfg, seed, "cpu");
        if (!r)
            throw KvError("fault foreign-cache: creating the random-weight model: " + r.message());
        other = r.value();
        rec["seed"] = seed;
        rec["other_model"] = "random weights";
    } else {
        if (p.has("seed"))
            throw KvError("fault foreign-cache: parameter seed applies only without another model");
        rec["other_model"] = other->path();
    }
    const ModelConfig& oc = other->config();
    if (oc.nLayers != static_cast<int64_t>(s.layers.size()) || oc.nKvHeads != s.kvHeads ||
        oc.headDim != s.headDim)
        throw KvError("fault foreign-cache: the other model " + other->path() + " has " +
                      std::to_string(oc.nLayers) + " layers, " + std::to_string(oc.nKvHeads) +
                      " kv heads, head_dim " + std::to_string(oc.headDim) +
                      "; the snapshot's cache has " + std::to_string(s.layers.size()) + ", " +
                      std::to_string(s.kvHeads) + ", " + std::to_string(s.headDim) +
                      " (a foreign cache must have the same geometry)");
    Session session = recompute(other, s.tokens, "fault foreign-cache: the other model");
    KvCache cache = session.cache();
    if (cache.dtype() != s.cacheDtype)
        cache = cache.convertedTo(s.cacheDtype);
    if (cache.length() != s.cacheLength)
        throw KvError("fault foreign-cache: the snapshot's cache length " +
                      std::to_string(s.cacheLength) + " differs from its " +
                      std::to_string(s.tokens.size()) + " tokens");
    storeLayers(s, cache);
}

// A byte-level llama2.c tokenizer of `vocab` pieces, written to a temp file and loaded (the
// only way to construct a tokenizer is from a file).
std::shared_ptr<const tok::Tokenizer> builtinTokenizer(int64_t vocab) {
    if (vocab < 260)
        vocab = 260;
    std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
    char buf[16];
    for (int b = 0; b < 256; ++b) {
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        pieces.emplace_back(buf);
    }
    const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
    for (std::size_t i = 0; static_cast<int64_t>(pieces.size()) < vocab; ++i)
        pieces.push_back(std::string(1, letters[i % letters.size()]) +
                         std::string(1, letters[(i / letters.size()) % letters.size()]) +
                         std::to_string(i / (letters.size() * letters.size())));
    std::random_device rd;
    const fs::path path =
        fs::temp_directory_path() / ("kvscope-faults-tok-" + std::to_string(rd()) + ".bin");
    {
        std::ofstream f(path, std::ios::binary);
        int32_t maxLen = 0;
        for (const auto& piece : pieces)
            maxLen = std::max<int32_t>(maxLen, static_cast<int32_t>(piece.size()));
        f.write(reinterpret_cast<const char*>(&maxLen), 4);
        for (std::size_t i = 0; i < pieces.size(); ++i) {
            const float score = i < 259 ? 0.0f : -static_cast<float>(i);
            const auto len = static_cast<int32_t>(pieces[i].size());
            f.write(reinterpret_cast<const char*>(&score), 4);
            f.write(reinterpret_cast<const char*>(&len), 4);
            f.write(pieces[i].data(), len);
        }
        if (!f)
            throw KvError("fault tokenizer-swapped: cannot write the built-in tokenizer to " +
                          path.string());
    }
    auto tok = tok::Tokenizer::fromFile(path.string());
    std::error_code ec;
    fs::remove(path, ec);
    if (!tok)
        throw KvError("fault tokenizer-swapped: the built-in tokenizer: " + tok.message());
    return tok.value();
}

void tokenizerSwapped(Snapshot& s, const FaultContext& c, nlohmann::json& rec) {
    auto tok = c.otherTokenizer ? c.otherTokenizer : builtinTokenizer(s.config.vocabSize);
    if (tok->fingerprint() == s.fingerprints.tokenizer)
        throw KvError("fault tokenizer-swapped: the other tokenizer (" + tok->sourcePath() +
                      ") is the snapshot's own (same fingerprint " + s.fingerprints.tokenizer +
                      ")");
    rec["tokenizer"] = c.otherTokenizer ? tok->sourcePath() : std::string("built-in byte-level");
    rec["original_fingerprint"] = s.fingerprints.tokenizer;
    s.fingerprints.tokenizer = tok->fingerprint();
    s.fingerprints.tokenizerKind = tok->kind();
    if (auto t = tok->chatTemplate(); !t)
        s.fingerprints.chatTemplate.clear();
}

void dtypeRoundtrip(Snapshot& s, const Params& p, nlohmann::json& rec) {
    if (s.cacheDtype != "f32")
        throw KvError("fault dtype-roundtrip: the cache is already " + s.cacheDtype +
                      " (the fault needs an f32 cache)");
    const std::string via = p.choice("via", {"f16", "bf16"});
    KvCache cache = cpuCache(s).convertedTo(via).convertedTo("f32");
    storeLayers(s, cache);
    rec["via"] = via;
}

void duplicateBos(Snapshot& s, const FaultContext& c, nlohmann::json& rec) {
    const Model& model = requireModel(c, "duplicate-bos");
    const int32_t bos = s.prompt.bosId >= 0 ? s.prompt.bosId : s.config.bosId;
    if (bos < 0)
        throw KvError("fault duplicate-bos: the model has no BOS token (config bos_id)");
    // Tokens 0 and 1 become BOS: one more in front when the prompt already starts with BOS.
    const int64_t added = !s.tokens.empty() && s.tokens[0] == bos ? 1 : 2;
    std::vector<int32_t> tokens(static_cast<std::size_t>(added), bos);
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    if (static_cast<int64_t>(tokens.size()) > model.config().maxContext)
        throw KvError("fault duplicate-bos: " + std::to_string(tokens.size()) +
                      " tokens exceed the model's context");
    Session session = recompute(c.model, tokens, "fault duplicate-bos: recomputing");
    Sampler sampler = samplerOf(s);
    CaptureOptions co;
    co.sampler = s.hasSampler ? &sampler : nullptr;
    co.prompt = s.prompt;
    for (auto& seg : co.prompt.segments) {
        seg.begin = seg.begin == 0 ? 0 : seg.begin + added;
        seg.end += added;
    }
    co.prompt.promptTokens += added;
    auto snap = capture(session, co);
    if (!snap)
        throw KvError("fault duplicate-bos: " + snap.message());
    Snapshot out = std::move(snap).value();
    out.hasSampler = s.hasSampler;
    out.lineage = s.lineage;
    s = std::move(out);
    rec["bos"] = bos;
    rec["added"] = added;
}

void truncatedCache(Snapshot& s, const Params& p, nlohmann::json& rec) {
    const int64_t n = s.cacheLength;
    if (n < 2)
        throw KvError("fault truncated-cache: needs at least 2 cached positions");
    const int64_t drop = p.integer("drop", std::max<int64_t>(1, n / 4), 1, n - 1);
    KvCache cache = cpuCache(s).truncated(n - drop);
    storeLayers(s, cache);
    s.cacheLength = n - drop; // tokens, positions, mask, next position and logits stay
    rec["drop"] = drop;
}

void leakedState(Snapshot& s, const FaultContext& c, const Params& p, nlohmann::json& rec) {
    const Model& model = requireModel(c, "leaked-state");
    const auto n = static_cast<int64_t>(s.tokens.size());
    const int64_t prev = p.integer("previous", n, 1, n);
    if (prev + n > model.config().maxContext)
        throw KvError("fault leaked-state: " + std::to_string(prev) + " previous + " +
                      std::to_string(n) + " tokens exceed the model's context " +
                      std::to_string(model.config().maxContext) + " (lower `previous`)");
    std::vector<int32_t> previous(s.tokens.begin(), s.tokens.begin() + prev);
    Session session = recompute(c.model, previous, "fault leaked-state: the previous session");
    if (Status st = session.feed(s.tokens); !st)
        throw KvError("fault leaked-state: this session on top of the previous one: " +
                      st.message());
    // The ledger was reset (tokens, prompt meta are this session's) but the cache was not.
    const KvCache& cache = session.cache();
    storeLayers(s, cache.dtype() == s.cacheDtype ? cache : cache.convertedTo(s.cacheDtype));
    s.cacheLength = cache.length();
    s.positions = cache.positions();
    s.mask = cache.mask();
    s.nextPosition = session.nextPosition();
    s.lastLogits = session.lastLogits();
    rec["previous"] = prev;
}

void corruptLayer(Snapshot& s, const Params& p, nlohmann::json& rec) {
    const auto L = static_cast<int64_t>(s.layers.size());
    const int layer = static_cast<int>(p.integer("layer", L / 2, 0, L - 1));
    const std::string mode = p.choice("mode", {"noise", "zeros"});
    const std::string which = p.choice("which", {"kv", "k", "v"});
    const double scale = p.real("scale", 1.0, 1e-6, 1e6);
    const auto seed = static_cast<uint64_t>(p.integer("seed", 1, 0, INT64_MAX));
    if (mode == "zeros" && (p.has("scale") || p.has("seed")))
        throw KvError("fault corrupt-layer: scale and seed apply only to mode=noise");
    const KvCache cache = cpuCache(s);
    HostTensor k = cache.key(layer), v = cache.value(layer);
    std::mt19937_64 rng(seed);
    auto corrupt = [&](HostTensor& t) {
        if (mode == "zeros") {
            std::fill(t.data.begin(), t.data.end(), 0.0f);
            return;
        }
        double ss = 0;
        for (float x : t.data)
            ss += static_cast<double>(x) * x;
        const double rms = t.data.empty() ? 0 : std::sqrt(ss / static_cast<double>(t.data.size()));
        std::normal_distribution<double> noise(0.0, scale * (rms > 0 ? rms : 1.0));
        for (float& x : t.data)
            x = static_cast<float>(x + noise(rng));
    };
    if (which != "v")
        corrupt(k);
    if (which != "k")
        corrupt(v);
    auto changed = cache.withLayer(layer, k, v);
    if (!changed)
        throw KvError("fault corrupt-layer: " + changed.message());
    storeLayers(s, changed.value());
    rec["layer"] = layer;
    rec["mode"] = mode;
    rec["which"] = which;
    if (mode == "noise") {
        rec["scale"] = scale;
        rec["seed"] = seed;
    }
}

void wrongRopeTheta(Snapshot& s, const Params& p, nlohmann::json& rec) {
    const ModelConfig& c = s.config;
    if (c.architecture == "gpt2")
        throw KvError("fault wrong-rope-theta: GPT-2 has no RoPE (learned absolute positions)");
    if (c.ropeScaling.type != "none")
        throw KvError("fault wrong-rope-theta: rope_scaling '" + c.ropeScaling.type +
                      "' is not supported by this fault (only unscaled RoPE)");
    if (c.ropeLayout != "half")
        throw KvError("fault wrong-rope-theta: cache key layout '" + c.ropeLayout +
                      "' is not the half layout");
    const double theta0 = c.ropeTheta;
    const double theta1 =
        p.real("theta", std::abs(theta0 - 500000.0) < 1 ? 10000.0 : 500000.0, 1.0, 1e12);
    if (theta1 == theta0)
        throw KvError("fault wrong-rope-theta: theta " + std::to_string(theta1) +
                      " is the model's own");
    const int64_t D = s.headDim, H = s.kvHeads, T = s.cacheLength;
    if (D % 2 != 0)
        throw KvError("fault wrong-rope-theta: odd head_dim " + std::to_string(D));
    const int64_t half = D / 2;
    KvCache cache = cpuCache(s);
    for (int l = 0; l < static_cast<int>(s.layers.size()); ++l) {
        HostTensor k = cache.key(l);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t) {
                const double pos = static_cast<double>(s.positions[static_cast<std::size_t>(t)]);
                float* x = k.data.data() + (h * T + t) * D;
                for (int64_t i = 0; i < half; ++i) {
                    const double e = static_cast<double>(2 * i) / static_cast<double>(D);
                    // Undo the rotation by theta0 at `pos`, apply theta1's: rotate by the
                    // difference of the two angles.
                    const double a = pos * (std::pow(theta1, -e) - std::pow(theta0, -e));
                    const double x1 = x[i], x2 = x[i + half];
                    x[i] = static_cast<float>(x1 * std::cos(a) - x2 * std::sin(a));
                    x[i + half] = static_cast<float>(x2 * std::cos(a) + x1 * std::sin(a));
                }
            }
        auto changed = cache.withLayer(l, k, cache.value(l));
        if (!changed)
            throw KvError("fault wrong-rope-theta: " + changed.message());
        cache = std::move(changed).value();
    }
    storeLayers(s, cache);
    rec["theta"] = theta1;
    rec["model_theta"] = theta0;
}

} // namespace

const std::vector<FaultInfo>& allFaults() {
    return kFaults;
}

const FaultInfo* findFault(std::string_view name) {
    for (const auto& f : kFaults)
        if (f.name == name)
            return &f;
    return nullptr;
}

nlohmann::json toJson(const FaultInfo& f) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : f.params)
        params.push_back({{"name", p.name}, {"default", p.defaultValue}, {"help", p.help}});
    return {{"name", f.name},
            {"description", f.description},
            {"check", f.check},
            {"metadata_only", f.metadataOnly},
            {"params", params}};
}

Result<Snapshot> injectFault(std::string_view name, const Snapshot& clean,
                             const FaultContext& context) {
    return catchToResult([&]() -> Snapshot {
        const FaultInfo* f = findFault(name);
        if (!f) {
            std::string names;
            for (const auto& x : kFaults)
                names += (names.empty() ? "" : ", ") + x.name;
            throw KvError("unknown fault '" + std::string(name) + "' (known: " + names + ")");
        }
        const Params p(*f, context.params);
        requireCache(clean, f->name);
        if (context.model &&
            context.model->config().nLayers != static_cast<int64_t>(clean.layers.size()))
            throw KvError("fault " + f->name + ": the snapshot's cache has " +
                          std::to_string(clean.layers.size()) + " layers, the model " +
                          std::to_string(context.model->config().nLayers) +
                          " (inject into a snapshot of this model)");
        Snapshot s = clean; // shares the immutable blobs; faults replace, never write through
        nlohmann::json rec = nlohmann::json::object();
        if (f->name == "position-offset")
            positionOffset(s, p, rec);
        else if (f->name == "stale-next-position")
            staleNext(s, p, rec);
        else if (f->name == "foreign-cache")
            foreignCache(s, context, p, rec);
        else if (f->name == "tokenizer-swapped")
            tokenizerSwapped(s, context, rec);
        else if (f->name == "dtype-roundtrip")
            dtypeRoundtrip(s, p, rec);
        else if (f->name == "duplicate-bos")
            duplicateBos(s, context, rec);
        else if (f->name == "truncated-cache")
            truncatedCache(s, p, rec);
        else if (f->name == "leaked-state")
            leakedState(s, context, p, rec);
        else if (f->name == "corrupt-layer")
            corruptLayer(s, p, rec);
        else if (f->name == "wrong-rope-theta")
            wrongRopeTheta(s, p, rec);
        else
            throw KvError("fault " + f->name + " has no implementation"); // registry bug
        nlohmann::json params{{"fault", f->name}};
        for (const auto& [k, v] : rec.items())
            params[k] = v;
        s.lineage = newLineage(clean.lineage.device, clean.lineage.id, "fault", params);
        return s;
    });
}

Result<Session> forcedSession(const Snapshot& faulty, std::shared_ptr<const Model> model) {
    Snapshot s = faulty;
    // A cache cut without fixing positions/mask: the runtime can attend only to what is
    // cached, at the positions recorded for those slots; the next position stays as recorded.
    if (s.cacheLength >= 0 && static_cast<int64_t>(s.positions.size()) > s.cacheLength &&
        static_cast<int64_t>(s.mask.size()) > s.cacheLength) {
        s.positions.resize(static_cast<std::size_t>(s.cacheLength));
        s.mask.resize(static_cast<std::size_t>(s.cacheLength));
    }
    auto r = restore(s, std::move(model), {.force = true, .validate = {}});
    if (!r)
        return r.status();
    return std::move(r.value().session);
}

nlohmann::json toJson(const FaultLabRow& r) {
    auto num = [](double x) {
        return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf");
    };
    nlohmann::json j{{"fault", r.fault},
                     {"check", r.check},
                     {"caught", r.caught},
                     {"found", r.found},
                     {"metadata_only", r.metadataOnly},
                     {"drift",
                      {{"steps", r.steps},
                       {"kl_step0", num(r.klStep0)},
                       {"kl_step1", num(r.klStep1)},
                       {"max_kl", num(r.maxKl)},
                       {"first_diverging_step", r.firstDivergingStep},
                       {"effect", r.effect()}}}};
    if (r.equivalence)
        j["equivalence"] = toJson(*r.equivalence);
    j["stage"] = stageName(r.stage);
    if (!r.error.empty())
        j["error"] = r.error;
    return j;
}

std::string stageName(FaultLabRow::Stage s) {
    switch (s) {
    case FaultLabRow::Stage::Measured:
        return "measured";
    case FaultLabRow::Stage::NotInjected:
        return "not-injected";
    case FaultLabRow::Stage::NotSaved:
        return "not-saved";
    case FaultLabRow::Stage::Refused:
        return "refused";
    case FaultLabRow::Stage::ContinuationFailed:
        return "continuation-failed";
    }
    return "measured";
}

FaultLabRow measureFault(std::string_view name, const Snapshot& clean, const FaultContext& context,
                         const Session& base, int steps, const std::string& file) {
    FaultLabRow row;
    row.fault = std::string(name);
    if (const FaultInfo* f = findFault(name)) {
        row.check = f->check;
        row.metadataOnly = f->metadataOnly;
    }
    auto faulty = injectFault(name, clean, context);
    if (!faulty) {
        row.stage = FaultLabRow::Stage::NotInjected;
        row.error = faulty.message();
        return row;
    }
    if (Status st = save(faulty.value(), file); !st) {
        row.stage = FaultLabRow::Stage::NotSaved;
        row.error = "saving " + file + ": " + st.message();
        return row;
    }
    const VerifyResult v = verifyFile(file, context.model);
    row.found = v.report.findings();
    row.caught = v.report.has(row.check);
    row.equivalence = v.equivalence;

    auto session = forcedSession(faulty.value(), context.model);
    if (!session) {
        row.stage = FaultLabRow::Stage::Refused;
        row.error = "forced restore: " + session.message();
        return row;
    }
    const Sampler greedy(SamplerSettings{0.0f, 0.9f, 0, 42});
    auto d = drift(base, session.value(), steps, greedy);
    if (!d) {
        row.stage = FaultLabRow::Stage::ContinuationFailed;
        row.error = d.message();
        return row;
    }
    const auto& measured = d.value().steps;
    row.steps = static_cast<int>(measured.size());
    row.klStep0 = measured.empty() ? 0 : measured[0].logits.kl;
    row.klStep1 = measured.size() < 2 ? 0 : measured[1].logits.kl;
    row.maxKl = d.value().maxKl;
    row.firstDivergingStep = d.value().firstDivergingStep;
    return row;
}

Result<std::vector<FaultLabRow>> faultLab(const Snapshot& clean, const FaultContext& context,
                                          const FaultLabOptions& options) {
    if (!context.model)
        return Result<std::vector<FaultLabRow>>::error("fault lab: no model");
    if (options.steps < 2 || options.steps > 4096)
        return Result<std::vector<FaultLabRow>>::error(
            "fault lab: steps " + std::to_string(options.steps) + " is outside 2..4096");
    for (const auto& name : options.faults)
        if (!findFault(name))
            return Result<std::vector<FaultLabRow>>::error("fault lab: unknown fault '" + name +
                                                           "'");
    auto base = restore(clean, context.model);
    if (!base)
        return Result<std::vector<FaultLabRow>>::error("fault lab: the clean snapshot: " +
                                                       base.message());
    fs::path dir = options.workDir;
    bool ownDir = false;
    std::error_code ec;
    if (dir.empty()) {
        std::random_device rd;
        dir = fs::temp_directory_path() / ("kvscope-faultlab-" + std::to_string(rd()));
        ownDir = true;
    }
    fs::create_directories(dir, ec);
    if (ec)
        return Result<std::vector<FaultLabRow>>::error("fault lab: cannot create " + dir.string() +
                                                       ": " + ec.message());

    std::vector<FaultLabRow> rows;
    for (const auto& f : kFaults) {
        if (!options.faults.empty() &&
            std::find(options.faults.begin(), options.faults.end(), f.name) == options.faults.end())
            continue;
        FaultContext ctx = context;
        ctx.params.clear(); // defaults: the documented fault
        const fs::path file = dir / (f.name + ".kvsnap");
        rows.push_back(
            measureFault(f.name, clean, ctx, base.value().session, options.steps, file.string()));
        if (ownDir)
            fs::remove(file, ec);
    }
    if (ownDir)
        fs::remove_all(dir, ec);
    return rows;
}

} // namespace kvscope::state
