// Snapshot: the whole state ledger of one session ("Big 8 + 4", LEDGER.md) as a value.
//
// A Snapshot records everything a transformer needs to continue a generation — the K/V
// cache of every layer in its exact dtype, the token buffer, the position of every cached
// token and the next position, the attention mask, the last-step logits, the sampler
// settings and RNG state, the prompt meta (chat template, segment map, BOS handling) — plus
// the fingerprints of what must not change under it (model config, every weight tensor,
// tokenizer, chat template) and its lineage (id, parent, operation, versions, device).
//
// Tensor data is held through shared pointers to immutable byte buffers (owned, or in place
// in a loaded file's mapping), so copying a Snapshot is cheap and a copy may be handed to
// other threads. Fields are public so that tools (and the fault lab) can build altered
// snapshots; nothing here checks consistency —
// that is validate()'s job (validate.h).
//
// File I/O (.kvsnap, streamed through core/snapfile) is in snapshotio.h; the manifest
// layout is documented in LEDGER.md.
#pragma once

#include "engine/modelconfig.h"
#include "engine/sampler.h"
#include "util/status.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvscope {
class MappedFile;
class Model;
class Session;
} // namespace kvscope

namespace kvscope::state {

// Version of the ledger manifest (the "manifest" document inside the .kvsnap container;
// the container has its own format version). Readers refuse newer versions.
// Version 2 added the head mask; a state without one is still written as version 1, so that
// older readers open it, and one with a head mask is refused by them instead of being
// restored without it.
inline constexpr int kLedgerVersion = 2;

// Index of the first element of `bytes`, read as `dtype` ("f32", "f16" or "bf16"; anything
// else counts as bf16), whose exponent bits are all ones (NaN or infinity); the element count
// when there is none. Runs at memory speed (a branch-free, vectorised inner loop).
uint64_t firstNonFinite(const std::string& dtype, std::span<const uint8_t> bytes);

// What a pass that already read a tensor's bytes found (load() scans a cache blob while its
// checksum reads it), so that validate() need not read them again.
struct FiniteScan {
    std::string dtype;           // the element type the bytes were read as
    uint64_t firstNonFinite = 0; // as firstNonFinite(dtype, bytes)
};

// The immutable bytes of one tensor: owned, or borrowed in place from a loaded snapshot's file
// mapping (load() does so for blobs stored uncompressed, as fp32 caches are), so that loading
// and restoring a large cache copies nothing. Either way the bytes never change.
class ByteBuffer {
public:
    ByteBuffer() = default;
    explicit ByteBuffer(std::vector<uint8_t> owned)
        : m_owned(std::move(owned)), m_view(m_owned.data(), m_owned.size()) {}
    ByteBuffer(std::span<const uint8_t> borrowed, std::shared_ptr<const MappedFile> file,
               std::optional<FiniteScan> scan = std::nullopt)
        : m_view(borrowed), m_file(std::move(file)), m_scan(std::move(scan)) {}
    ByteBuffer(const ByteBuffer&) = delete; // shared through Bytes, never copied by accident
    ByteBuffer& operator=(const ByteBuffer&) = delete;

    const uint8_t* data() const { return m_view.data(); }
    std::size_t size() const { return m_view.size(); }
    bool empty() const { return m_view.empty(); }
    const uint8_t* begin() const { return m_view.data(); }
    const uint8_t* end() const { return m_view.data() + m_view.size(); }
    uint8_t operator[](std::size_t i) const { return m_view[i]; }
    std::span<const uint8_t> span() const { return m_view; }
    operator std::span<const uint8_t>() const { return m_view; }
    std::vector<uint8_t> toVector() const { return {begin(), end()}; }
    // Equal bytes (wherever they are held).
    friend bool operator==(const ByteBuffer& a, const ByteBuffer& b) {
        return std::ranges::equal(a.m_view, b.m_view);
    }
    // The file mapping the bytes lie in; null when they are owned.
    const std::shared_ptr<const MappedFile>& file() const { return m_file; }
    // A finiteness scan of these very bytes made when they were loaded (the bytes never
    // change, so it stays true); none when nobody scanned them.
    const std::optional<FiniteScan>& finiteScan() const { return m_scan; }

private:
    std::vector<uint8_t> m_owned;
    std::span<const uint8_t> m_view;
    std::shared_ptr<const MappedFile> m_file;
    std::optional<FiniteScan> m_scan;
};

using Bytes = std::shared_ptr<const ByteBuffer>;

// One layer of the cache: raw bytes of K and V, each [kv_heads, length, head_dim] row-major
// in the cache dtype (little-endian), keys post-RoPE in the "half" layout.
struct LayerKv {
    Bytes key;
    Bytes value;
};

// A token range [begin, end) of the token buffer and what produced it.
struct TokenSegment {
    int64_t begin = 0;
    int64_t end = 0;
    std::string role; // system | user | assistant | tool | "" (scaffold)
    std::string kind; // message | generation_prompt | scaffold | unsegmented | prompt | generated
    int messageIndex = -1; // index into the chat messages, -1 when not a message
    bool operator==(const TokenSegment&) const = default;
};

struct PromptMeta {
    std::string systemPrompt;           // empty when none
    std::string chatTemplateName;       // empty: the prompt was not built from a chat template
    std::string chatTemplateHash;       // chat::Template::hash() of the template used
    std::vector<TokenSegment> segments; // sorted, non-overlapping token ranges
    // "tokenizer": the tokenizer added BOS; "template": the chat template rendered it;
    // "none": the prompt has no BOS; "explicit": the caller passed ids including it.
    std::string bosHandling = "none";
    int32_t bosId = -1;
    int64_t promptTokens = 0; // tokens of the prompt (the rest were generated)
};

struct WeightFingerprint {
    std::string name; // Hugging Face name, e.g. model.layers.0.self_attn.q_proj.weight
    std::vector<int64_t> shape;
    std::string dtype;
    std::string fingerprint;
    bool operator==(const WeightFingerprint&) const = default;
};

struct Fingerprints {
    std::string model;  // Model::fingerprint(): config + every weight
    std::string config; // hash of the model config JSON
    std::vector<WeightFingerprint> weights;
    std::string tokenizer; // Tokenizer::fingerprint(); empty when the model had none
    std::string tokenizerKind;
    std::string chatTemplate; // hash of the tokenizer's own chat template; empty when none
};

struct Lineage {
    std::string id;                    // 32 hex digits, unique per snapshot
    std::string parentId;              // empty for a root
    std::string operation = "capture"; // capture | fork | truncate | patch | splice | ...
    nlohmann::json parameters = nlohmann::json::object();
    std::string createdAt; // ISO 8601 UTC, e.g. 2024-05-01T12:00:00Z
    std::string kvscopeVersion;
    std::string libtorchVersion; // empty when unknown
    std::string device;          // where the state was computed, e.g. cpu, cuda:0
};

struct Snapshot {
    // --- KV cache ---
    std::string cacheDtype = "f32"; // f32 | f16 | bf16
    std::string cacheDevice = "cpu";
    int64_t kvHeads = 0;
    int64_t headDim = 0;
    int64_t cacheLength = 0;     // cached positions (the middle dim of every K/V)
    std::vector<LayerKv> layers; // one per model layer
    // The coarsest element type the values were stored in before they reached this ledger,
    // when that was not kvscope: "f16", "bf16", "q8_0", "q4_0", ... for a state imported from a
    // llama.cpp cache; empty when they were computed here (or stored as f32). Widens the key
    // provenance tolerance; a recorded f16/bf16 rounding is not reported as cache.precision.
    std::string cacheSourceType;
    // --- positional state ---
    std::vector<int64_t> positions; // position of every cached token (size cacheLength)
    int64_t nextPosition = 0;
    // --- token buffer and mask ---
    std::vector<int32_t> tokens; // every token id processed, in order
    std::vector<uint8_t> mask;   // over cached slots, 1 = may be attended to
    // Empty, or [layers, kv_heads, cacheLength] (KvCache::headMask()): which slots each layer's
    // KV head may attend to beside `mask`; written by an eviction whose budget allocation
    // differs per layer or head (probes/survive.h), and recorded in its lineage.
    std::vector<uint8_t> headMask;
    // --- model ---
    ModelConfig config;
    std::string computeDtype = "f32";
    std::string modelPath; // informational
    // --- logits of the last step (vocab entries; empty when nothing was fed) ---
    std::vector<float> lastLogits;
    // --- sampler ---
    bool hasSampler = false;
    SamplerSettings sampler;
    uint64_t rngState = 0;
    // --- prompt meta, fingerprints, lineage ---
    PromptMeta prompt;
    Fingerprints fingerprints;
    Lineage lineage;

    // Bytes of one layer's K (or V) as the manifest's shape and dtype say.
    uint64_t expectedLayerBytes() const;
    // Raw K/V bytes in all layers.
    uint64_t cacheBytes() const;
};

struct CaptureOptions {
    const Sampler* sampler = nullptr; // settings + RNG state to record (optional)
    PromptMeta prompt;                // segments may stop short: the rest becomes "generated"
    std::string parentId;
    std::string operation = "capture";
    nlohmann::json parameters = nlohmann::json::object();
    // The state the session continues, when there is one: its recorded kept tokens (an
    // eviction's deliberate gaps, carryKeptTokens()) stay recorded in the capture.
    const Snapshot* parent = nullptr;
    // False: the layers' K/V are left null (one entry per cache layer) for a writer that
    // copies them from the session layer by layer as it writes (saveCapture()).
    bool cacheBytes = true;
};

// The fingerprints of `model` as capture() records them (model, config, every weight,
// tokenizer and its chat template).
Fingerprints fingerprintsOf(const Model& model);

// Captures the complete ledger of a live session. Copies the cache to the host (the
// session is not modified). Errors: an empty model or a cache that cannot be read.
Result<Snapshot> capture(const Session& session, const CaptureOptions& options = {});

// The model a snapshot was made with, as views and reports name it: the file or folder name of
// its recorded model path, else its architecture.
std::string modelName(const Snapshot& s);

// Prompt meta for a plain (non-chat) prompt of `promptTokens` ids.
PromptMeta plainPromptMeta(const std::vector<int32_t>& promptTokens, int32_t bosId,
                           std::string bosHandling = "tokenizer");

// A fresh lineage entry (new id, current time, this build's versions) for `device`.
Lineage newLineage(const std::string& device, std::string parentId = {},
                   std::string operation = "capture",
                   nlohmann::json parameters = nlohmann::json::object());

// The token indices whose cache slots the lineage records as kept ("kept_tokens": an eviction's
// gaps are intended: probes/survive.h), when the snapshot carries such a record that fits
// its cache (one strictly increasing index per slot, each a processed token); empty
// otherwise. Verify maps slot i to token keptTokens[i] with it.
std::vector<int64_t> recordedKeptTokens(const Snapshot& s);
// A state continued from an evicted one (`parent` records its kept tokens) keeps the record:
// the parent's kept indices and every token fed since, in `child`'s lineage parameters
// ("kept_tokens"), when child's slots are exactly those. Otherwise child is left as it is.
void carryKeptTokens(const Snapshot& parent, Snapshot& child);
// The kept tokens carryKeptTokens() would record for a session continued from `parent` to
// `tokens` processed tokens with these cache `positions` (the live session's, before any
// capture); empty when `parent` records none or the slots are not exactly those.
std::vector<int64_t> keptTokensAfter(const Snapshot& parent, int64_t tokens,
                                     const std::vector<int64_t>& positions);

// This build's version strings.
std::string kvscopeVersion();
std::string libtorchVersion(); // empty when the build did not know it

// Wraps bytes into the shared immutable form.
inline Bytes makeBytes(std::vector<uint8_t> v) {
    return std::make_shared<const ByteBuffer>(std::move(v));
}

} // namespace kvscope::state
