// State surgery: fork, truncate, patch, splice (surgery.h). Byte-level work on the snapshot's
// raw K/V buffers ([kv_heads, length, head_dim] per layer); the model is used only to recompute
// logits, to continue forks, and (through engine/rerotate.h) to re-rotate moved keys.
#include "state/surgery/surgery.h"

#include "engine/rerotate.h"
#include "engine/session.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvscope::state {

namespace {

using Json = nlohmann::json;

Json segmentJson(const TokenSegment& s) {
    return {{"begin", s.begin},
            {"end", s.end},
            {"role", s.role},
            {"kind", s.kind},
            {"message_index", s.messageIndex}};
}

Json segmentsJson(const std::vector<TokenSegment>& v) {
    Json a = Json::array();
    for (const auto& s : v)
        a.push_back(segmentJson(s));
    return a;
}

std::string decodeIds(const Model* model, int32_t prev, const std::vector<int32_t>& ids) {
    if (!model || !model->tokenizer())
        return {};
    const auto tok = model->tokenizer();
    std::string text;
    for (int32_t id : ids) {
        text += tok->decodeNext(prev, id);
        prev = id;
    }
    return text;
}

// Rows [begin, end) of every head of one layer's K or V ([kvHeads, len, headDim]).
std::vector<uint8_t> gatherRows(std::span<const uint8_t> src, int64_t kvHeads, int64_t len,
                                int64_t headDim, std::size_t es, int64_t begin, int64_t end) {
    const std::size_t row = static_cast<std::size_t>(headDim) * es;
    const auto n = static_cast<std::size_t>(end - begin);
    std::vector<uint8_t> out(static_cast<std::size_t>(kvHeads) * n * row);
    for (int64_t h = 0; h < kvHeads; ++h)
        std::memcpy(out.data() + static_cast<std::size_t>(h) * n * row,
                    src.data() + (static_cast<std::size_t>(h * len + begin)) * row, n * row);
    return out;
}

// Concatenates [kvHeads, len_i, headDim] pieces along the length.
std::vector<uint8_t>
concatRows(const std::vector<std::pair<const std::vector<uint8_t>*, int64_t>>& parts,
           int64_t kvHeads, int64_t headDim, std::size_t es) {
    const std::size_t row = static_cast<std::size_t>(headDim) * es;
    int64_t total = 0;
    for (const auto& p : parts)
        total += p.second;
    std::vector<uint8_t> out(static_cast<std::size_t>(kvHeads * total) * row);
    for (int64_t h = 0; h < kvHeads; ++h) {
        uint8_t* dst = out.data() + static_cast<std::size_t>(h * total) * row;
        for (const auto& [bytes, n] : parts) {
            const std::size_t chunk = static_cast<std::size_t>(n) * row;
            if (chunk)
                std::memcpy(dst, bytes->data() + static_cast<std::size_t>(h) * chunk, chunk);
            dst += chunk;
        }
    }
    return out;
}

// The last step recomputed from the state's own cache: the cache truncated to n-1 positions,
// then the last token fed at its recorded position (what checkEquivalence compares against).
std::vector<float> recomputeLastLogits(const Snapshot& s, const std::shared_ptr<const Model>& model,
                                       const std::string& what) {
    const auto n = static_cast<int64_t>(s.tokens.size());
    if (n == 0)
        throw KvError(what + ": the state holds no tokens");
    auto cache = cacheFromSnapshot(s, model->device());
    if (!cache)
        throw KvError(what + ": " + cache.message());
    Session probe(model, cache.value().truncated(n - 1),
                  std::vector<int32_t>(s.tokens.begin(), s.tokens.end() - 1), s.positions.back(),
                  {});
    const int32_t last[1] = {s.tokens.back()};
    if (Status st = probe.feed(last); !st)
        throw KvError(what + ": recomputing the last step's logits failed: " + st.message());
    return probe.lastLogits();
}

// Refuses a model the snapshot cannot run on (config, cache shape, weights): recomputing
// logits with another model would produce logits that belong to no state. Findings about the
// cache's contents (cache.provenance: keys that are not this text's — exactly what a patch or
// a splice may legitimately produce) and the tokenizer do not prevent the computation.
void requireModelFits(const Snapshot& s, const Model& model, const std::string& what) {
    auto blocks = [](const std::string& id) {
        return id.rfind("model.", 0) == 0 || id.rfind("weights.", 0) == 0 || id == "cache.shape";
    };
    std::string errors;
    int count = 0;
    for (const auto& v : validateAgainstModel(s, model))
        if (v.severity == Severity::Error && blocks(v.id) && ++count <= 4)
            errors += (errors.empty() ? "" : "; ") + v.id + ": " + v.message;
    if (count > 4) // a wrong model differs in every weight: the first findings say enough
        errors += "; and " + std::to_string(count - 4) + " more (`verify` lists them all)";
    if (!errors.empty())
        throw KvError(what + " does not fit the model " + model.path() + " (" + errors + ")");
}

void requireSameCacheShape(const Snapshot& a, const Snapshot& b, const std::string& op) {
    auto field = [&](const std::string& name, const std::string& va, const std::string& vb) {
        if (va != vb)
            throw KvError(op + ": the snapshots' caches differ in " + name + " (target " + va +
                          ", source " + vb + ")");
    };
    field("cache.layers", std::to_string(a.layers.size()), std::to_string(b.layers.size()));
    field("cache.kv_heads", std::to_string(a.kvHeads), std::to_string(b.kvHeads));
    field("cache.head_dim", std::to_string(a.headDim), std::to_string(b.headDim));
    field("cache.dtype", a.cacheDtype, b.cacheDtype);
}

// A float setting as the decimal the user typed (0.9f is recorded as 0.9, not 0.8999999761).
double rounded(float v) {
    return std::round(static_cast<double>(v) * 1e6) / 1e6;
}

void throwIf(const Status& st) {
    if (!st)
        throw KvError(st.message());
}

// Patch and splice move K/V rows between states; a per-head eviction's head mask would have
// to move with them row by row. Refused by name until that is built.
Status refuseHeadMask(const Snapshot& s, const std::string& what) {
    if (s.headMask.empty())
        return Status::ok();
    return Status::error(what + " carries a head mask (an eviction that kept different slots "
                                "per layer or head): patch and splice work on states whose "
                                "heads all see the same slots");
}

} // namespace

std::size_t cacheElementSize(const std::string& dtype) {
    return dtype == "f32" ? 4 : (dtype == "f16" || dtype == "bf16") ? 2 : 0;
}

Status checkSurgeryShape(const Snapshot& s, const std::string& what) {
    const auto n = static_cast<int64_t>(s.tokens.size());
    auto fail = [&](const std::string& m) { return Status::error(what + ": " + m); };
    if (cacheElementSize(s.cacheDtype) == 0)
        return fail("cache.dtype '" + s.cacheDtype + "' is not f32, f16 or bf16");
    if (s.cacheLength != n)
        return fail("cache.length " + std::to_string(s.cacheLength) + " differs from the " +
                    std::to_string(n) + " tokens");
    if (static_cast<int64_t>(s.positions.size()) != n)
        return fail("positions.count " + std::to_string(s.positions.size()) + " differs from the " +
                    std::to_string(n) + " tokens");
    if (static_cast<int64_t>(s.mask.size()) != n)
        return fail("mask.length " + std::to_string(s.mask.size()) + " differs from the " +
                    std::to_string(n) + " tokens");
    if (!s.headMask.empty() && static_cast<int64_t>(s.headMask.size()) !=
                                   static_cast<int64_t>(s.layers.size()) * s.kvHeads * n)
        return fail("head_mask holds " + std::to_string(s.headMask.size()) +
                    " entries, expected layers x kv heads x " + std::to_string(n));
    if (s.kvHeads <= 0 || s.headDim <= 0)
        return fail("cache.kv_heads " + std::to_string(s.kvHeads) + " / cache.head_dim " +
                    std::to_string(s.headDim) + " must be positive");
    if (n > 0 && s.layers.empty())
        return fail("cache.layers: the snapshot holds tokens but no cache layers");
    const uint64_t expected = s.expectedLayerBytes();
    for (std::size_t l = 0; l < s.layers.size(); ++l)
        for (int kv = 0; kv < 2; ++kv) {
            const Bytes& b = kv == 0 ? s.layers[l].key : s.layers[l].value;
            if (!b || b->size() != expected)
                return fail("layers." + std::to_string(l) + (kv == 0 ? ".k" : ".v") + " holds " +
                            std::to_string(b ? b->size() : 0) + " bytes, expected " +
                            std::to_string(expected));
        }
    return Status::ok();
}

// ---------------------------------------------------------------- fork

Json ForkResult::toJson() const {
    Json a = Json::array();
    for (const auto& b : branches) {
        Json j = {{"id", b.snapshot.lineage.id},
                  {"seed", b.seed},
                  {"tokens", b.snapshot.tokens.size()},
                  {"parameters", b.snapshot.lineage.parameters}};
        if (!b.stopReason.empty()) {
            j["generated"] = b.generated;
            j["text"] = b.text;
            j["stop_reason"] = b.stopReason;
        }
        a.push_back(std::move(j));
    }
    return {{"source_id", sourceId}, {"branches", a}};
}

Result<ForkResult> fork(const Snapshot& source, const ForkOptions& o,
                        std::shared_ptr<const Model> model) {
    return catchToResult([&]() -> ForkResult {
        if (o.branches < 1 || o.branches > 1024)
            throw KvError("fork: branches = " + std::to_string(o.branches) + " must be in 1..1024");
        if (o.steps < 0)
            throw KvError("fork: steps = " + std::to_string(o.steps) + " must not be negative");
        if (o.steps > 0 && !model)
            throw KvError("fork: continuing branches (steps > 0) needs a model");
        SamplerSettings base = source.hasSampler ? source.sampler : SamplerSettings{1.0f};
        if (o.temperature)
            base.temperature = *o.temperature;
        if (o.topP)
            base.topP = *o.topP;
        if (o.topK)
            base.topK = *o.topK;
        if (Status st = checkSamplerSettings(base, "fork"); !st)
            throw KvError(st.message());
        const uint64_t seedBase = o.seedBase ? *o.seedBase : base.seed + 1;
        ForkResult r;
        r.sourceId = source.lineage.id;
        for (int i = 0; i < o.branches; ++i) {
            ForkBranch b;
            b.seed = seedBase + static_cast<uint64_t>(i);
            SamplerSettings settings = base;
            settings.seed = b.seed;
            const Sampler seeded(settings); // RNG state exactly as a fresh sampler seeds it
            Json params = {{"branch", i},
                           {"branches", o.branches},
                           {"seed", b.seed},
                           {"seed_base", seedBase},
                           {"steps", o.steps},
                           {"temperature", rounded(settings.temperature)},
                           {"top_p", rounded(settings.topP)},
                           {"top_k", settings.topK}};
            Snapshot branch = source; // shares every K/V buffer with the source
            branch.hasSampler = true;
            branch.sampler = settings;
            branch.rngState = seeded.rngState();
            if (o.steps == 0) {
                branch.lineage =
                    newLineage(source.lineage.device, source.lineage.id, "fork", params);
                b.snapshot = std::move(branch);
            } else {
                auto restored = restore(branch, model, {.force = o.force, .validate = {}});
                if (!restored)
                    throw KvError("fork: branch " + std::to_string(i) + ": " + restored.message());
                auto& rs = restored.value();
                auto gen = rs.session.generate(o.steps, rs.sampler);
                if (!gen)
                    throw KvError("fork: branch " + std::to_string(i) + ": " + gen.message());
                b.generated = gen.value().tokens;
                b.stopReason = gen.value().stopReason;
                b.text = decodeIds(model.get(), source.tokens.empty() ? -1 : source.tokens.back(),
                                   b.generated);
                params["generated"] = b.generated.size();
                params["stop_reason"] = b.stopReason;
                CaptureOptions co;
                co.sampler = &rs.sampler;
                co.prompt = source.prompt;
                co.parentId = source.lineage.id;
                co.operation = "fork";
                co.parameters = params;
                co.parent = &source;
                auto snap = capture(rs.session, co);
                if (!snap)
                    throw KvError("fork: branch " + std::to_string(i) + ": " + snap.message());
                b.snapshot = std::move(snap).value();
            }
            r.branches.push_back(std::move(b));
        }
        return r;
    });
}

// ---------------------------------------------------------------- truncate

Json TruncateReport::toJson() const {
    return {{"at", at},
            {"original_tokens", originalTokens},
            {"kept_tokens", at},
            {"dropped_count", droppedTokens.size()},
            {"dropped_tokens", droppedTokens},
            {"dropped_text", droppedText},
            {"segments_removed", segmentsJson(segmentsRemoved)},
            {"segments_clipped", segmentsJson(segmentsClipped)},
            {"prompt_tokens", {{"before", promptTokensBefore}, {"after", promptTokensAfter}}}};
}

Result<TruncateResult> truncate(const Snapshot& s, int64_t at, std::shared_ptr<const Model> model) {
    return catchToResult([&]() -> TruncateResult {
        if (!model)
            throw KvError("truncate: a model is needed to recompute the last step's logits");
        throwIf(checkSurgeryShape(s, "truncate"));
        const auto n = static_cast<int64_t>(s.tokens.size());
        if (at < 1 || at > n)
            throw KvError("truncate: at = " + std::to_string(at) + " is out of range (1.." +
                          std::to_string(n) + " for a state of " + std::to_string(n) + " tokens)");
        requireModelFits(s, *model, "truncate: the snapshot");
        const std::size_t es = cacheElementSize(s.cacheDtype);
        const auto k = static_cast<std::size_t>(at);
        TruncateResult r;
        Snapshot& t = r.snapshot;
        t = s;
        t.cacheLength = at;
        for (auto& l : t.layers) {
            l.key = makeBytes(gatherRows(*l.key, s.kvHeads, n, s.headDim, es, 0, at));
            l.value = makeBytes(gatherRows(*l.value, s.kvHeads, n, s.headDim, es, 0, at));
        }
        t.tokens.resize(k);
        t.positions.resize(k);
        t.mask.resize(k);
        if (!s.headMask.empty()) { // each (layer, head) row keeps its first `at` slots
            t.headMask.clear();
            for (size_t row = 0; row < s.layers.size() * size_t(s.kvHeads); ++row)
                t.headMask.insert(t.headMask.end(), s.headMask.begin() + long(row * size_t(n)),
                                  s.headMask.begin() + long(row * size_t(n) + k));
        }
        if (at < n)
            t.nextPosition = t.positions.back() + 1;
        auto& rep = r.report;
        rep.at = at;
        rep.originalTokens = n;
        rep.droppedTokens.assign(s.tokens.begin() + at, s.tokens.end());
        rep.droppedText = decodeIds(model.get(), s.tokens[k - 1], rep.droppedTokens);
        t.prompt.segments.clear();
        for (const auto& seg : s.prompt.segments) {
            if (seg.begin >= at) {
                rep.segmentsRemoved.push_back(seg);
                continue;
            }
            TokenSegment c = seg;
            if (c.end > at) {
                rep.segmentsClipped.push_back(seg);
                c.end = at;
            }
            t.prompt.segments.push_back(c);
        }
        rep.promptTokensBefore = s.prompt.promptTokens;
        t.prompt.promptTokens = std::min(s.prompt.promptTokens, at);
        rep.promptTokensAfter = t.prompt.promptTokens;
        t.lastLogits = recomputeLastLogits(t, model, "truncate");
        t.lineage = newLineage(
            model->device(), s.lineage.id, "truncate",
            {{"at", at}, {"dropped_tokens", rep.droppedTokens.size()}, {"logits", "recomputed"}});
        return r;
    });
}

// ---------------------------------------------------------------- patch

Json PatchReport::toJson() const {
    Json j = {{"layer", layer},
              {"head", head},
              {"begin", begin},
              {"end", end},
              {"source_id", sourceId},
              {"key_elements_changed", keyElementsChanged},
              {"value_elements_changed", valueElementsChanged},
              {"logits", logitsRecomputed ? "recomputed" : "stale"},
              {"notes", notes}};
    if (logitChange)
        j["logit_change"] = state::toJson(*logitChange);
    return j;
}

Result<PatchResult> patch(const Snapshot& a, const Snapshot& b, const PatchOptions& o,
                          std::shared_ptr<const Model> model) {
    return catchToResult([&]() -> PatchResult {
        requireSameCacheShape(a, b, "patch");
        throwIf(checkSurgeryShape(a, "patch: target"));
        throwIf(checkSurgeryShape(b, "patch: source"));
        throwIf(refuseHeadMask(a, "patch: the target"));
        throwIf(refuseHeadMask(b, "patch: the source"));
        const auto nLayers = static_cast<int>(a.layers.size());
        if (o.layer < 0 || o.layer >= nLayers)
            throw KvError("patch: layer = " + std::to_string(o.layer) +
                          " is out of range (the snapshots have " + std::to_string(nLayers) +
                          " layers: 0.." + std::to_string(nLayers - 1) + ")");
        if (o.head < -1 || o.head >= a.kvHeads)
            throw KvError("patch: head = " + std::to_string(o.head) +
                          " is out of range (KV heads 0.." + std::to_string(a.kvHeads - 1) + ")");
        const int64_t na = a.cacheLength, nb = b.cacheLength;
        int64_t begin = o.begin, end = o.end;
        if (begin < 0 && end < 0) {
            if (na != nb)
                throw KvError("patch: positions: patching all positions needs equal lengths "
                              "(target " +
                              std::to_string(na) + ", source " + std::to_string(nb) +
                              "); give a range both cover");
            begin = 0;
            end = na;
        }
        if (begin < 0 || end <= begin || end > na || end > nb)
            throw KvError("patch: positions " + std::to_string(begin) + ":" + std::to_string(end) +
                          " is not a non-empty range that both snapshots cover (target " +
                          std::to_string(na) + ", source " + std::to_string(nb) + " positions)");
        if (model)
            requireModelFits(a, *model, "patch: the target snapshot");

        PatchResult r;
        Snapshot& t = r.snapshot;
        t = a;
        auto& rep = r.report;
        rep.layer = o.layer;
        rep.head = o.head;
        rep.begin = begin;
        rep.end = end;
        rep.sourceId = b.lineage.id;
        const std::size_t es = cacheElementSize(a.cacheDtype);
        const std::size_t row = static_cast<std::size_t>(a.headDim) * es;
        const int64_t h0 = o.head < 0 ? 0 : o.head, h1 = o.head < 0 ? a.kvHeads : o.head + 1;
        const auto li = static_cast<std::size_t>(o.layer);
        for (int kv = 0; kv < 2; ++kv) {
            const auto& src = kv == 0 ? *b.layers[li].key : *b.layers[li].value;
            std::vector<uint8_t> dst =
                (kv == 0 ? a.layers[li].key : a.layers[li].value)->toVector();
            int64_t changed = 0;
            for (int64_t h = h0; h < h1; ++h)
                for (int64_t p = begin; p < end; ++p) {
                    const uint8_t* from = src.data() + static_cast<std::size_t>(h * nb + p) * row;
                    uint8_t* to = dst.data() + static_cast<std::size_t>(h * na + p) * row;
                    for (std::size_t e = 0; e < row; e += es)
                        changed += std::memcmp(from + e, to + e, es) != 0;
                    std::memcpy(to, from, row);
                }
            (kv == 0 ? rep.keyElementsChanged : rep.valueElementsChanged) = changed;
            (kv == 0 ? t.layers[li].key : t.layers[li].value) = makeBytes(std::move(dst));
        }
        if (a.fingerprints.model != b.fingerprints.model)
            rep.notes.push_back("the source was captured from another model (fingerprint " +
                                b.fingerprints.model + " vs " + a.fingerprints.model + ")");
        if (!std::equal(a.tokens.begin() + begin, a.tokens.begin() + end, b.tokens.begin() + begin))
            rep.notes.push_back("the snapshots' tokens differ in the patched range: the K/V put "
                                "in belong to other text");
        if (!std::equal(a.positions.begin() + begin, a.positions.begin() + end,
                        b.positions.begin() + begin))
            rep.notes.push_back("the snapshots' positions differ in the patched range: the keys "
                                "put in were rotated for the source's positions");
        Json params = {{"source_id", b.lineage.id},
                       {"layer", o.layer},
                       {"head", o.head},
                       {"begin", begin},
                       {"end", end}};
        if (!o.sourceFile.empty())
            params["source_file"] = o.sourceFile;
        if (model && !t.tokens.empty()) {
            t.lastLogits = recomputeLastLogits(t, model, "patch");
            rep.logitsRecomputed = true;
            rep.logitChange = compareLogits(a.lastLogits, t.lastLogits);
            params["logits"] = "recomputed";
        } else {
            params["logits"] = "stale";
            rep.notes.push_back("no model: the target's last-step logits are kept and are stale "
                                "(verify reports logits.equivalence)");
        }
        t.lineage =
            newLineage(model ? model->device() : a.lineage.device, a.lineage.id, "patch", params);
        return r;
    });
}

// ---------------------------------------------------------------- splice

Json SpliceReport::toJson() const {
    return {
        {"begin", begin},
        {"end", end},
        {"at", at},
        {"source_id", sourceId},
        {"inserted", inserted},
        {"fragment_shift", fragmentShift},
        {"tail_shift", tailShift},
        {"rerotated",
         {{"fragment_positions", rerotatedFragmentKeys}, {"tail_positions", rerotatedTailKeys}}},
        {"validation", validation.toJson()},
        {"drift", {{"cache", state::toJson(drift)}, {"next_logits", state::toJson(logitDrift)}}}};
}

Result<SpliceResult> splice(const Snapshot& a, const Snapshot& b, const SpliceOptions& o,
                            std::shared_ptr<const Model> model) {
    return catchToResult([&]() -> SpliceResult {
        if (!model)
            throw KvError("splice: a model is needed (key re-rotation, logits, drift)");
        requireSameCacheShape(a, b, "splice");
        throwIf(checkSurgeryShape(a, "splice: target"));
        throwIf(checkSurgeryShape(b, "splice: source"));
        throwIf(refuseHeadMask(a, "splice: the target"));
        throwIf(refuseHeadMask(b, "splice: the source"));
        const int64_t na = a.cacheLength, nb = b.cacheLength;
        if (o.begin < 0 || o.end <= o.begin || o.end > nb)
            throw KvError("splice: range " + std::to_string(o.begin) + ":" + std::to_string(o.end) +
                          " is not a non-empty token range of the source (" + std::to_string(nb) +
                          " tokens)");
        if (o.at < 0 || o.at > na)
            throw KvError("splice: at = " + std::to_string(o.at) + " is out of range (0.." +
                          std::to_string(na) + " for a target of " + std::to_string(na) +
                          " tokens)");
        const int64_t len = o.end - o.begin;
        const int64_t n = na + len;
        if (a.config.maxContext > 0 && n > a.config.maxContext)
            throw KvError("splice: the result would hold " + std::to_string(n) +
                          " tokens, more than the model's context of " +
                          std::to_string(a.config.maxContext));
        requireModelFits(a, *model, "splice: the target snapshot");
        const auto P = static_cast<std::size_t>(o.at);
        const int64_t base = o.at > 0 ? a.positions[P - 1] + 1 : (na > 0 ? a.positions[0] : 0);

        SpliceResult r;
        auto& rep = r.report;
        rep.begin = o.begin;
        rep.end = o.end;
        rep.at = o.at;
        rep.sourceId = b.lineage.id;
        rep.inserted = len;
        rep.fragmentShift = base - b.positions[static_cast<std::size_t>(o.begin)];
        rep.tailShift = o.at < na ? len : 0;

        std::vector<int64_t> fragFrom(b.positions.begin() + o.begin, b.positions.begin() + o.end);
        std::vector<int64_t> fragTo(static_cast<std::size_t>(len));
        for (int64_t k = 0; k < len; ++k)
            fragTo[static_cast<std::size_t>(k)] = base + k;
        std::vector<int64_t> tailFrom(a.positions.begin() + o.at, a.positions.end());
        std::vector<int64_t> tailTo = tailFrom;
        for (auto& p : tailTo)
            p += len;
        for (std::size_t k = 0; k < fragFrom.size(); ++k)
            rep.rerotatedFragmentKeys += fragFrom[k] != fragTo[k];
        rep.rerotatedTailKeys = static_cast<int64_t>(tailFrom.size());
        if ((rep.rerotatedFragmentKeys > 0 || rep.rerotatedTailKeys > 0) &&
            !usesRotaryPositions(*model))
            throw KvError("splice: " + model->config().architecture +
                          " uses learned absolute positions, so cached keys cannot be moved; "
                          "this splice would move " +
                          std::to_string(rep.rerotatedFragmentKeys) + " fragment and " +
                          std::to_string(rep.rerotatedTailKeys) +
                          " tail positions (only a splice that keeps every position works)");

        Snapshot& t = r.snapshot;
        t = a;
        const std::size_t es = cacheElementSize(a.cacheDtype);
        for (std::size_t l = 0; l < a.layers.size(); ++l) {
            for (int kv = 0; kv < 2; ++kv) {
                const auto& ab = kv == 0 ? *a.layers[l].key : *a.layers[l].value;
                const auto& bb = kv == 0 ? *b.layers[l].key : *b.layers[l].value;
                auto prefix = gatherRows(ab, a.kvHeads, na, a.headDim, es, 0, o.at);
                auto frag = gatherRows(bb, b.kvHeads, nb, b.headDim, es, o.begin, o.end);
                auto tail = gatherRows(ab, a.kvHeads, na, a.headDim, es, o.at, na);
                if (kv == 0) {
                    auto f = rerotateKeys(*model, int64_t(l), a.cacheDtype, a.kvHeads, a.headDim,
                                          frag, fragFrom, fragTo);
                    if (!f)
                        throw KvError("splice: layer " + std::to_string(l) +
                                      " fragment: " + f.message());
                    frag = std::move(f).value();
                    auto tl = rerotateKeys(*model, int64_t(l), a.cacheDtype, a.kvHeads, a.headDim,
                                           tail, tailFrom, tailTo);
                    if (!tl)
                        throw KvError("splice: layer " + std::to_string(l) +
                                      " tail: " + tl.message());
                    tail = std::move(tl).value();
                }
                auto joined = concatRows({{&prefix, o.at}, {&frag, len}, {&tail, na - o.at}},
                                         a.kvHeads, a.headDim, es);
                (kv == 0 ? t.layers[l].key : t.layers[l].value) = makeBytes(std::move(joined));
            }
        }
        t.cacheLength = n;
        auto insertAt = [&](const auto& target, const auto& source) {
            std::remove_cvref_t<decltype(target)> out(target.begin(), target.begin() + o.at);
            out.insert(out.end(), source.begin() + o.begin, source.begin() + o.end);
            out.insert(out.end(), target.begin() + o.at, target.end());
            return out;
        };
        t.tokens = insertAt(a.tokens, b.tokens);
        t.mask = insertAt(a.mask, b.mask);
        t.positions = std::vector<int64_t>(a.positions.begin(), a.positions.begin() + o.at);
        t.positions.insert(t.positions.end(), fragTo.begin(), fragTo.end());
        t.positions.insert(t.positions.end(), tailTo.begin(), tailTo.end());
        t.nextPosition = na == 0 ? base + len : a.nextPosition + len;

        // Segments: the target's, split at the insertion point and shifted behind it; the
        // source's segments over the fragment, clipped and moved to the insertion point.
        std::vector<TokenSegment> segs;
        for (const auto& s : a.prompt.segments)
            if (s.begin < o.at) {
                TokenSegment c = s;
                c.end = std::min(s.end, o.at);
                segs.push_back(c);
            }
        for (const auto& s : b.prompt.segments) {
            const int64_t lo = std::max(s.begin, o.begin), hi = std::min(s.end, o.end);
            if (lo < hi) {
                TokenSegment c = s;
                c.begin = lo - o.begin + o.at;
                c.end = hi - o.begin + o.at;
                segs.push_back(c);
            }
        }
        for (const auto& s : a.prompt.segments)
            if (s.end > o.at) {
                TokenSegment c = s;
                c.begin = std::max(s.begin, o.at) + len;
                c.end = s.end + len;
                segs.push_back(c);
            }
        t.prompt.segments = std::move(segs);
        if (o.at <= a.prompt.promptTokens)
            t.prompt.promptTokens = a.prompt.promptTokens + len;

        t.lastLogits = recomputeLastLogits(t, model, "splice");
        t.lineage = newLineage(model->device(), a.lineage.id, "splice",
                               {{"source_id", b.lineage.id},
                                {"begin", o.begin},
                                {"end", o.end},
                                {"at", o.at},
                                {"inserted", len},
                                {"shift", rep.fragmentShift},
                                {"logits", "recomputed"}});
        rep.validation = validate(t, model.get());

        // Drift against recomputing the spliced text in place: one prefill at 0..n-1.
        Session fresh(model);
        if (Status st = fresh.feed(t.tokens); !st)
            throw KvError("splice: recomputing the spliced text failed: " + st.message());
        auto spliced = cacheFromSnapshot(t, model->device());
        if (!spliced)
            throw KvError("splice: " + spliced.message());
        const double threshold = t.cacheDtype == "f32" ? 1e-3 : t.cacheDtype == "f16" ? 2e-2 : 1e-1;
        rep.drift = compareCaches(spliced.value(), fresh.cache(), threshold);
        rep.logitDrift = compareLogits(fresh.lastLogits(), t.lastLogits);
        return r;
    });
}

} // namespace kvscope::state
