// The snapshot-only invariant checks and the check catalogue. Checks against a model are in
// validatemodel.cpp; file-level checks in verifyfile.cpp.
#include "state/verify/validate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvscope::state {

namespace {

using S = Severity;

// The catalogue. Order is the order checks run in; ids are stable (tests, CLI JSON and the
// GUI key on them).
const std::vector<CheckInfo> kChecks = {
    {"file.unreadable", S::Error, "file", "The file could not be opened or read."},
    {"file.magic", S::Error, "KV format version",
     "The file does not start with the .kvsnap magic bytes: it is not a kvscope snapshot."},
    {"format.version", S::Error, "KV format version",
     "The file (container or ledger) declares a format version newer than this kvscope "
     "understands. Reading it anyway could misinterpret fields; upgrade kvscope."},
    {"format.features", S::Error, "KV format version",
     "The file requires format features this kvscope does not implement."},
    {"file.truncated", S::Error, "file",
     "The file is shorter (or longer) than its header says: it was cut off (an interrupted "
     "copy or download) or has data appended."},
    {"file.header", S::Error, "file",
     "A header field is impossible for any snapshot (the manifest starting inside the "
     "64-byte header), though the header's checksum matches: the header was written wrong or "
     "forged, so nothing it locates can be read."},
    {"file.checksum", S::Error, "file",
     "Stored bytes do not match their checksum: the file was corrupted after it was written. "
     "Nothing in a corrupted blob can be trusted."},
    {"manifest.invalid", S::Error, "file",
     "The ledger manifest is missing a field or has one of the wrong type or range."},
    {"cache.blob", S::Error, "KV cache",
     "A K/V blob is missing or its shape disagrees with the manifest's cache shape."},
    {"cache.dtype", S::Error, "KV cache",
     "The stored K/V element type disagrees with the dtype the manifest declares (or is not "
     "one kvscope supports). Reinterpreting the bytes would produce garbage keys and values."},
    {"cache.shape", S::Error, "KV cache",
     "The cache's layer count, kv-head count or head dim differs from the model's: the cache "
     "was produced by a different architecture."},
    {"cache.compute_dtype", S::Warning, "KV cache",
     "The cache dtype differs from the one this model's sessions make (its compute dtype, or "
     "--cache-dtype); a restored session continues in the cache's own dtype, but a replay of "
     "the tokens builds a cache of the model's, so replay and drift compare across dtypes."},
    {"cache.device", S::Note, "KV cache",
     "The state was computed on another device; bit-exactness is not expected, judge "
     "equivalence with the cross-device tolerance profile."},
    {"cache.provenance", S::Error, "KV cache",
     "The layer-0 keys stored for sampled cached tokens are not what this model computes for "
     "those tokens at their positions (layer-0 keys depend only on the token, its position and "
     "the layer-0 weights, so they can be recomputed one token at a time). The cache was "
     "computed by other weights than the fingerprints claim, or was overwritten."},
    {"cache.length", S::Error, "input token buffer",
     "The cache holds a different number of positions than tokens were processed: tokens "
     "were dropped or added without updating the cache (or the reverse)."},
    {"cache.nonfinite", S::Error, "KV cache",
     "A key or value is NaN or infinite; every attention score that touches it is poisoned."},
    {"cache.precision", S::Warning, "KV cache",
     "The manifest says f32, but every non-zero key and value of a layer is exactly "
     "representable in f16 (or bf16): the cache went through a narrower dtype and back. "
     "Genuine f32 activations are almost never f16-exact (about 1 in 8192 values), so this "
     "is a dtype round trip behind the manifest's back; continued logits drift from the "
     "original run."},
    {"positions.count", S::Error, "positional state",
     "The number of stored positions differs from the cache length / token count."},
    {"positions.order", S::Error, "positional state",
     "Positions must strictly increase along the cache; a repeated or decreasing position "
     "means RoPE rotated two keys as if they were at the same or reversed places."},
    {"positions.range", S::Error, "positional state",
     "A recorded position is negative, or at or beyond the model's maximum context. No token "
     "of this model was ever rotated there: the layer-0 keys cannot be recomputed at such a "
     "position to prove where they were rotated, and every new token would be placed relative "
     "to a position that does not exist. The position record was damaged or forged."},
    {"positions.contiguous", S::Warning, "positional state",
     "Positions skip values. This is legitimate only after deliberate splicing; otherwise "
     "tokens were dropped without fixing positions (a truncated cache without position fix)."},
    {"positions.start", S::Warning, "positional state",
     "The first cached position is not 0: the whole sequence is offset, as with a stale "
     "cache_position."},
    {"positions.offset", S::Error, "positional state",
     "The cached keys were rotated at other positions than the recorded ones (recomputed "
     "layer-0 keys match at the slot index, not at the recorded position): the position "
     "record is shifted, so every new token is rotated to a distance its cached context never "
     "had and attention changes. The root cause of a wrong next-token distribution."},
    {"positions.next", S::Error, "positional state",
     "The next position is not one past the last cached position: the next token would be "
     "rotated to the wrong place (off-by-one restores)."},
    {"positions.context", S::Error, "positional state",
     "The next position is at or beyond the model's maximum context."},
    {"positions.rope", S::Error, "positional state",
     "RoPE parameters (theta, scaling, layout) differ from the model's, or the stored "
     "layer-0 keys are rotated by other angles than the model's RoPE gives at their recorded "
     "positions (their rotation-invariant pair norms match a recomputation, their angles do "
     "not): cached keys were rotated differently from the queries that will attend to them."},
    {"mask.shape", S::Error, "attention mask",
     "The attention mask does not have one entry per cached position."},
    {"mask.values", S::Error, "attention mask", "Mask entries must be 0 or 1."},
    {"mask.padding", S::Note, "attention mask",
     "Some cached slots are masked out (padding); they are invisible to later tokens."},
    {"head_mask.shape", S::Error, "attention mask",
     "The head mask does not hold one entry per layer, KV head and cached slot."},
    {"head_mask.values", S::Error, "attention mask", "Head mask entries must be 0 or 1."},
    {"head_mask.partial", S::Note, "attention mask",
     "Some KV heads see only part of the cached slots: an eviction kept different slots per "
     "layer or head (its budget allocation is in the lineage). Each head attends to what it "
     "kept; the slots appended later are seen by every head."},
    {"tokens.range", S::Error, "input token buffer",
     "A token id lies outside the model's vocabulary."},
    {"logits.missing", S::Warning, "logits",
     "No last-step logits are stored, so equivalence after restore cannot be judged."},
    {"logits.shape", S::Error, "logits",
     "The stored logits do not have one entry per vocabulary token."},
    {"logits.nonfinite", S::Error, "logits", "A stored logit is NaN or infinite."},
    {"logits.equivalence", S::Error, "logits",
     "Recomputing the last step from the restored state does not reproduce the stored logits "
     "within the tolerance profile: the restored state is not the captured one."},
    {"model.architecture", S::Error, "model config",
     "The model is of another architecture than the one the state was captured with; its "
     "forward pass cannot read this cache."},
    {"model.config", S::Error, "model config",
     "The model's architecture config differs from the one the state was captured with."},
    {"model.fingerprint", S::Note, "model config",
     "The model's overall fingerprint differs although every weight and every config field "
     "that changes the math match: the same model from another source (e.g. a converted "
     "copy; provenance fields such as source_format differ)."},
    {"weights.missing", S::Error, "model config",
     "The model's set of weight tensors differs from the captured model's."},
    {"weights.embedding", S::Error, "token embeddings",
     "The token embedding table differs: the same ids now map to different vectors."},
    {"weights.norm", S::Error, "norm weights", "A normalisation weight differs."},
    {"weights.attention", S::Error, "attention weights (Q,K,V,O)",
     "An attention projection differs: cached keys/values were produced by other weights "
     "than the queries that will read them."},
    {"weights.other", S::Error, "model config",
     "A weight tensor (MLP, output head) differs from the captured model's."},
    {"tokenizer.fingerprint", S::Error, "tokenizer state",
     "The tokenizer differs (vocab, merges, special tokens, normalizer or chat template): "
     "new text would be encoded to ids the cached state never meant."},
    {"tokenizer.missing", S::Warning, "tokenizer state",
     "The snapshot or the model has no tokenizer, so tokenizer identity cannot be checked."},
    {"prompt.template_hash", S::Warning, "prompt injection meta",
     "The chat template the prompt was built with differs from the tokenizer's current one; "
     "continuing the conversation would format turns differently."},
    {"prompt.duplicate_bos", S::Warning, "prompt injection meta",
     "The prompt starts with two BOS tokens (template rendered one and the tokenizer added "
     "another); models see an input they were not trained on."},
    {"prompt.missing_bos", S::Warning, "prompt injection meta",
     "The meta says BOS was added but the token buffer does not start with it."},
    {"prompt.segments", S::Warning, "prompt injection meta",
     "The segment map is not sorted, overlaps, or points outside the token buffer."},
    {"sampler.missing", S::Note, "sampler",
     "No sampler state was recorded; seeded continuations cannot be replayed exactly."},
    {"import.file", S::Error, "file",
     "Another engine's state file (a llama.cpp state, a past_key_values .safetensors) cannot "
     "be read: a count, size or type id that cannot be, a header that lies, or a file that ends "
     "early. The message names the file and the field."},
    {"import.layout", S::Error, "KV cache",
     "A llama.cpp state does not fit the model: its layer count, row sizes, head layout or cache "
     "type differ from what the model's shapes imply, or it uses a layout kvscope does not "
     "import (several streams for one sequence, media chunks, MLA)."},
    {"import.misaligned_blocks", S::Error, "KV cache",
     "llama.cpp cached K in a block-quantized type whose 32-element blocks do not divide the "
     "head size. Without flash attention (the only way llama.cpp accepts it) its per-head views "
     "of the cache hold no whole block, so every attention score it computed was 0: attention "
     "was uniform, and the K/V of every layer above the first are not what the model computes. "
     "The state continues differently in any correct engine."},
    {"import.sequences", S::Warning, "KV cache",
     "The llama.cpp state holds cells of other sequences; they were left out of the import."},
    {"import.trailing", S::Warning, "file",
     "Bytes follow the llama.cpp state. llama.cpp ignores them in a sequence file and refuses "
     "a session file with them; they may be the rest of another file."},
    {"import.absent", S::Note, "model config",
     "llama.cpp records no model identity, logits, sampler or prompt boundaries. The imported "
     "state is bound to the model it was imported with and checked against it by its layer-0 "
     "keys; the last logits are recomputed."},
};

// Checks whose violations can never be forced (Violation::structural): the parts of the
// state do not fit together or onto the model's shapes.
const std::vector<CheckInfo> kCatalogue = [] {
    static const char* const structural[] = {
        "file.unreadable", "file.magic",       "format.version", "format.features",
        "file.truncated",  "file.header",      "file.checksum",  "manifest.invalid",
        "cache.blob",      "cache.dtype",      "cache.shape",    "positions.count",
        "mask.shape",      "tokens.range",     "logits.shape",   "model.architecture",
        "head_mask.shape", "head_mask.values", "import.file",    "import.layout",
        "positions.range"};
    std::vector<CheckInfo> out = kChecks;
    for (auto& c : out)
        c.structural =
            std::find(std::begin(structural), std::end(structural), c.id) != std::end(structural);
    return out;
}();

void checkFinite(const Snapshot& s, std::vector<Violation>& out) {
    const std::size_t es = s.cacheDtype == "f32" ? 4 : 2;
    const uint64_t expected = s.expectedLayerBytes();
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
        for (int kv = 0; kv < 2; ++kv) {
            const Bytes& b = kv == 0 ? s.layers[l].key : s.layers[l].value;
            if (!b || b->size() != expected || s.cacheLength <= 0 || s.headDim <= 0)
                continue; // reported by the shape checks
            const uint64_t n = b->size() / es;
            // load() scanned a borrowed blob while checksumming it: no second pass.
            const auto& scan = b->finiteScan();
            const uint64_t e = scan && scan->dtype == s.cacheDtype
                                   ? scan->firstNonFinite
                                   : firstNonFinite(s.cacheDtype, b->span());
            if (e < n) {
                const auto perHead = static_cast<uint64_t>(s.cacheLength * s.headDim);
                const int head = static_cast<int>(e / perHead);
                const auto pos = static_cast<int64_t>((e / static_cast<uint64_t>(s.headDim)) %
                                                      static_cast<uint64_t>(s.cacheLength));
                out.push_back(makeViolation("cache.nonfinite",
                                            "layer " + std::to_string(l) + (kv ? " V" : " K") +
                                                " head " + std::to_string(head) + " position " +
                                                std::to_string(pos) + " is NaN or Inf",
                                            static_cast<int>(l), head, pos));
                // one per tensor is enough to point at it
            }
        }
    }
}

// Whether an f32 value (bits) survives a round trip through f16 / bf16 unchanged.
bool f16Exact(uint32_t u) {
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a == 0)
        return true;
    const int e = static_cast<int>(a >> 23) - 127;
    if (e > 15 || e < -24 || (a >> 23) == 0)
        return false; // beyond f16's range, below its smallest subnormal, or f32 subnormal
    // Normal f16 (e >= -14) keeps 10 mantissa bits; a subnormal one 10 - (-14 - e).
    const int dropped = 13 + (e < -14 ? -14 - e : 0);
    return (a & ((1u << dropped) - 1u)) == 0;
}
bool bf16Exact(uint32_t u) {
    return (u & 0xFFFFu) == 0;
}

// An f32 cache whose every non-zero finite value in a layer is f16- (or bf16-) exact went
// through that dtype. Layers with fewer than 64 non-zero values are not judged.
void checkPrecision(const Snapshot& s, std::vector<Violation>& out) {
    if (s.cacheDtype != "f32")
        return;
    const uint64_t expected = s.expectedLayerBytes();
    std::vector<int> f16Layers, bf16Layers;
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
        uint64_t nonzero = 0;
        bool allF16 = true, allBf16 = true;
        // A genuine f32 value is almost never f16/bf16-exact, so a clean cache leaves this
        // loop after its first few values; only a rounded one is read to the end.
        for (int kv = 0; kv < 2 && (allF16 || allBf16); ++kv) {
            const Bytes& b = kv == 0 ? s.layers[l].key : s.layers[l].value;
            if (!b || b->size() != expected)
                continue; // reported by the shape checks
            for (uint64_t off = 0; off + 4 <= b->size() && (allF16 || allBf16); off += 4) {
                uint32_t u;
                std::memcpy(&u, b->data() + off, 4);
                if ((u & 0x7FFFFFFFu) == 0 || (u & 0x7F800000u) == 0x7F800000u)
                    continue;
                ++nonzero;
                allF16 = allF16 && f16Exact(u);
                allBf16 = allBf16 && bf16Exact(u);
            }
        }
        if (nonzero < 64)
            continue;
        if (allBf16)
            bf16Layers.push_back(static_cast<int>(l));
        else if (allF16)
            f16Layers.push_back(static_cast<int>(l));
    }
    auto report = [&](const std::vector<int>& layers, const char* narrow) {
        // A rounding the ledger records (an imported f16 llama.cpp cache) is no surprise.
        if (layers.empty() || s.cacheSourceType == narrow)
            return;
        std::string list;
        for (int l : layers)
            list += (list.empty() ? "" : ", ") + std::to_string(l);
        out.push_back(makeViolation(
            "cache.precision",
            "the cache is declared f32 but every non-zero K/V value of " +
                std::string(layers.size() == s.layers.size() ? "every layer" : "layer(s) " + list) +
                " is exactly representable in " + narrow + ": it was rounded through " + narrow,
            layers.front()));
    };
    report(f16Layers, "f16");
    report(bf16Layers, "bf16");
}

void checkHeadMask(const Snapshot& s, std::vector<Violation>& out) {
    if (s.headMask.empty())
        return;
    const int64_t rows = static_cast<int64_t>(s.layers.size()) * s.kvHeads;
    if (static_cast<int64_t>(s.headMask.size()) != rows * s.cacheLength) {
        out.push_back(makeViolation("head_mask.shape",
                                    "the head mask has " + std::to_string(s.headMask.size()) +
                                        " entries for " + std::to_string(s.layers.size()) +
                                        " layers x " + std::to_string(s.kvHeads) + " KV heads x " +
                                        std::to_string(s.cacheLength) + " cached slots"));
        return;
    }
    int64_t hidden = 0, firstLayer = -1;
    for (std::size_t i = 0; i < s.headMask.size(); ++i) {
        if (s.headMask[i] > 1) {
            const int64_t row = static_cast<int64_t>(i) / s.cacheLength;
            out.push_back(makeViolation(
                "head_mask.values",
                "head mask entry (layer " + std::to_string(row / s.kvHeads) + ", KV head " +
                    std::to_string(row % s.kvHeads) + ", slot " +
                    std::to_string(static_cast<int64_t>(i) % s.cacheLength) + ") is " +
                    std::to_string(s.headMask[i]),
                static_cast<int>(row / s.kvHeads), -1, static_cast<int64_t>(i) % s.cacheLength));
            return;
        }
        if (s.headMask[i] == 0 && hidden++ == 0)
            firstLayer = static_cast<int64_t>(i) / s.cacheLength / s.kvHeads;
    }
    if (hidden > 0)
        out.push_back(makeViolation("head_mask.partial",
                                    std::to_string(hidden) + " of " +
                                        std::to_string(s.headMask.size()) +
                                        " (layer, KV head, slot) entries are hidden from their "
                                        "head",
                                    static_cast<int>(firstLayer)));
}

void checkPositions(const Snapshot& s, std::vector<Violation>& out) {
    const auto n = static_cast<int64_t>(s.positions.size());
    // A recorded eviction keeps each slot at its token's index: those gaps are intended (a
    // gap anywhere else is still reported).
    const std::vector<int64_t> kept = recordedKeptTokens(s);
    const bool intendedGaps =
        !kept.empty() && n == static_cast<int64_t>(kept.size()) && s.positions == kept;
    if (n != s.cacheLength)
        out.push_back(makeViolation("positions.count",
                                    std::to_string(n) + " positions stored for " +
                                        std::to_string(s.cacheLength) + " cached tokens (" +
                                        std::to_string(s.tokens.size()) + " tokens processed)",
                                    -1, -1, std::min(n, s.cacheLength)));
    // A position outside [0, context) is reported once, at the first such slot; a negative
    // start is that finding, not an offset start.
    const int64_t context = s.config.maxContext;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t p = s.positions[static_cast<size_t>(i)];
        if (p < 0 || (context > 0 && p >= context)) {
            out.push_back(makeViolation(
                "positions.range",
                "position of cached token " + std::to_string(i) + " is " + std::to_string(p) +
                    (p < 0 ? " (negative)"
                           : ", at or beyond the maximum context " + std::to_string(context)),
                -1, -1, i));
            break;
        }
    }
    if (n > 0 && s.positions[0] > 0 && !intendedGaps)
        out.push_back(makeViolation("positions.start",
                                    "first cached position is " + std::to_string(s.positions[0]) +
                                        ", expected 0",
                                    -1, -1, 0));
    bool gapReported = false;
    for (int64_t i = 1; i < n; ++i) {
        const int64_t prev = s.positions[static_cast<size_t>(i - 1)];
        const int64_t cur = s.positions[static_cast<size_t>(i)];
        if (cur <= prev) {
            out.push_back(makeViolation("positions.order",
                                        "position of token " + std::to_string(i) + " is " +
                                            std::to_string(cur) + ", not after " +
                                            std::to_string(prev),
                                        -1, -1, i));
            break;
        }
        if (cur != prev + 1 && !gapReported && !intendedGaps) {
            gapReported = true;
            out.push_back(makeViolation("positions.contiguous",
                                        "positions jump from " + std::to_string(prev) + " to " +
                                            std::to_string(cur) + " at token " + std::to_string(i),
                                        -1, -1, i));
        }
    }
    const int64_t expectedNext = n > 0 ? s.positions.back() + 1 : 0;
    if (s.nextPosition != expectedNext)
        out.push_back(makeViolation("positions.next",
                                    "next position is " + std::to_string(s.nextPosition) +
                                        " but the last cached position is " +
                                        (n > 0 ? std::to_string(s.positions.back()) : "none") +
                                        " (expected " + std::to_string(expectedNext) + ")",
                                    -1, -1, n));
    if (s.config.maxContext > 0 && s.nextPosition > s.config.maxContext)
        out.push_back(makeViolation("positions.context", "next position " +
                                                             std::to_string(s.nextPosition) +
                                                             " exceeds the maximum context " +
                                                             std::to_string(s.config.maxContext)));
}

void checkPrompt(const Snapshot& s, std::vector<Violation>& out) {
    const int32_t bos = s.prompt.bosId >= 0 ? s.prompt.bosId : s.config.bosId;
    if (bos >= 0 && s.tokens.size() >= 2 && s.tokens[0] == bos && s.tokens[1] == bos)
        out.push_back(makeViolation("prompt.duplicate_bos",
                                    "tokens 0 and 1 are both BOS (" + std::to_string(bos) + ")", -1,
                                    -1, 1));
    const bool claimsBos =
        s.prompt.bosHandling == "tokenizer" || s.prompt.bosHandling == "template";
    if (claimsBos && bos >= 0 && (s.tokens.empty() || s.tokens[0] != bos))
        out.push_back(makeViolation(
            "prompt.missing_bos",
            "BOS handling is '" + s.prompt.bosHandling + "' but token 0 is not BOS", -1, -1, 0));
    int64_t prevEnd = 0;
    const auto n = static_cast<int64_t>(s.tokens.size());
    for (std::size_t i = 0; i < s.prompt.segments.size(); ++i) {
        const auto& seg = s.prompt.segments[i];
        if (seg.begin < prevEnd || seg.end < seg.begin || seg.end > n) {
            out.push_back(makeViolation("prompt.segments",
                                        "segment " + std::to_string(i) + " [" +
                                            std::to_string(seg.begin) + ", " +
                                            std::to_string(seg.end) +
                                            ") is out of order or "
                                            "outside the " +
                                            std::to_string(n) + " tokens",
                                        -1, -1, seg.begin));
            break;
        }
        prevEnd = seg.end;
    }
}

} // namespace

std::string severityName(Severity s) {
    switch (s) {
    case Severity::Note:
        return "note";
    case Severity::Warning:
        return "warning";
    case Severity::Error:
        return "error";
    }
    return "error";
}

nlohmann::json toJson(const Violation& v) {
    nlohmann::json j{{"id", v.id},
                     {"severity", severityName(v.severity)},
                     {"item", v.item},
                     {"message", v.message},
                     {"explanation", v.explanation},
                     {"structural", v.structural}};
    if (v.layer >= 0)
        j["layer"] = v.layer;
    if (v.head >= 0)
        j["head"] = v.head;
    if (v.position >= 0)
        j["position"] = v.position;
    return j;
}

const std::vector<CheckInfo>& allChecks() {
    return kCatalogue;
}

Violation makeViolation(std::string_view id, std::string message, int layer, int head,
                        int64_t position) {
    Violation v;
    v.id = std::string(id);
    v.message = std::move(message);
    v.layer = layer;
    v.head = head;
    v.position = position;
    auto it = std::find_if(kCatalogue.begin(), kCatalogue.end(),
                           [&](const CheckInfo& c) { return c.id == id; });
    if (it != kCatalogue.end()) {
        v.severity = it->severity;
        v.item = it->item;
        v.explanation = it->explanation;
        v.structural = it->structural;
    } else {
        v.item = "unknown";
    }
    return v;
}

bool Report::hasStructural() const {
    return std::any_of(violations.begin(), violations.end(),
                       [](const Violation& v) { return v.structural; });
}

bool Report::hasErrors() const {
    return std::any_of(violations.begin(), violations.end(),
                       [](const Violation& v) { return v.severity == Severity::Error; });
}
bool Report::has(std::string_view id) const {
    return find(id) != nullptr;
}
const Violation* Report::find(std::string_view id) const {
    for (const auto& v : violations)
        if (v.id == id)
            return &v;
    return nullptr;
}
Severity Report::worst() const {
    Severity w = Severity::Note;
    for (const auto& v : violations)
        w = std::max(w, v.severity);
    return w;
}

int Report::count(Severity s) const {
    return int(std::count_if(violations.begin(), violations.end(),
                             [s](const Violation& v) { return v.severity == s; }));
}

std::vector<std::string> Report::findings() const {
    std::vector<std::string> out;
    for (const auto& v : violations)
        if (v.severity != Severity::Note && std::find(out.begin(), out.end(), v.id) == out.end())
            out.push_back(v.id);
    return out;
}

nlohmann::json Report::toJson() const {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& v : violations)
        arr.push_back(state::toJson(v));
    return {{"ok", ok()}, {"forceable", forceable()}, {"violations", arr}};
}

std::vector<Violation> validateSnapshot(const Snapshot& s, const ValidateOptions& options) {
    std::vector<Violation> out;
    if (s.cacheDtype != "f32" && s.cacheDtype != "f16" && s.cacheDtype != "bf16")
        out.push_back(makeViolation("cache.dtype",
                                    "cache dtype '" + s.cacheDtype + "' is not f32, f16 or bf16"));
    const uint64_t expected = s.expectedLayerBytes();
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
        for (int kv = 0; kv < 2; ++kv) {
            const Bytes& b = kv == 0 ? s.layers[l].key : s.layers[l].value;
            const uint64_t have = b ? b->size() : 0;
            if (have != expected)
                out.push_back(makeViolation(
                    "cache.blob",
                    "layer " + std::to_string(l) + (kv ? " V" : " K") + " holds " +
                        std::to_string(have) + " bytes; [" + std::to_string(s.kvHeads) + ", " +
                        std::to_string(s.cacheLength) + ", " + std::to_string(s.headDim) + "] " +
                        s.cacheDtype + " needs " + std::to_string(expected),
                    static_cast<int>(l)));
        }
    }
    const auto nTokens = static_cast<int64_t>(s.tokens.size());
    // An eviction the lineage records (survive) caches fewer slots than tokens on purpose.
    if (s.cacheLength != nTokens && recordedKeptTokens(s).empty())
        out.push_back(makeViolation("cache.length",
                                    "the cache holds " + std::to_string(s.cacheLength) +
                                        " positions but " + std::to_string(nTokens) +
                                        " tokens were processed",
                                    -1, -1, std::min(s.cacheLength, nTokens)));
    checkPositions(s, out);
    if (static_cast<int64_t>(s.mask.size()) != s.cacheLength) {
        out.push_back(makeViolation("mask.shape",
                                    "the mask has " + std::to_string(s.mask.size()) +
                                        " entries for " + std::to_string(s.cacheLength) +
                                        " cached positions (expected [1, " +
                                        std::to_string(s.cacheLength) + "])",
                                    -1, -1, static_cast<int64_t>(s.mask.size())));
    }
    int64_t masked = 0, firstMasked = -1;
    for (std::size_t i = 0; i < s.mask.size(); ++i) {
        if (s.mask[i] > 1) {
            out.push_back(makeViolation("mask.values",
                                        "mask entry " + std::to_string(i) + " is " +
                                            std::to_string(s.mask[i]),
                                        -1, -1, static_cast<int64_t>(i)));
            break;
        }
        if (s.mask[i] == 0 && masked++ == 0)
            firstMasked = static_cast<int64_t>(i);
    }
    if (masked > 0)
        out.push_back(makeViolation("mask.padding",
                                    std::to_string(masked) +
                                        " cached slot(s) are masked, the "
                                        "first at " +
                                        std::to_string(firstMasked),
                                    -1, -1, firstMasked));
    checkHeadMask(s, out);
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.tokens[i] < 0 || (s.config.vocabSize > 0 && s.tokens[i] >= s.config.vocabSize)) {
            out.push_back(makeViolation("tokens.range",
                                        "token " + std::to_string(i) + " = " +
                                            std::to_string(s.tokens[i]) + " is outside 0.." +
                                            std::to_string(s.config.vocabSize - 1),
                                        -1, -1, static_cast<int64_t>(i)));
            break;
        }
    }
    if (s.lastLogits.empty()) {
        if (nTokens > 0)
            out.push_back(makeViolation("logits.missing", "no last-step logits stored"));
    } else if (static_cast<int64_t>(s.lastLogits.size()) != s.config.vocabSize) {
        out.push_back(makeViolation("logits.shape", std::to_string(s.lastLogits.size()) +
                                                        " logits stored for a "
                                                        "vocabulary of " +
                                                        std::to_string(s.config.vocabSize)));
    } else if (options.checkFinite) {
        for (std::size_t i = 0; i < s.lastLogits.size(); ++i) {
            if (!std::isfinite(s.lastLogits[i])) {
                out.push_back(makeViolation(
                    "logits.nonfinite", "logit of token " + std::to_string(i) + " is not finite"));
                break;
            }
        }
    }
    if (options.checkFinite) {
        checkFinite(s, out);
        checkPrecision(s, out);
    }
    checkPrompt(s, out);
    // An empty state has nothing to continue identically: no note for it.
    if (!s.hasSampler && !s.tokens.empty())
        out.push_back(makeViolation("sampler.missing", "no sampler settings or RNG state stored"));
    return out;
}

Report validate(const Snapshot& s, const Model* model, const ValidateOptions& options) {
    Report r;
    r.violations = validateSnapshot(s, options);
    if (model) {
        auto more = validateAgainstModel(s, *model);
        r.violations.insert(r.violations.end(), more.begin(), more.end());
    }
    return r;
}

} // namespace kvscope::state
