// .kvsnap snapshots. Container level (hand-built, checksums valid so the lie is what the reader
// meets): truncations, bit flips, header fields, blob-table entries, duplicate names, zstd
// frames that claim gigabytes. Ledger level (written with snapfile::Writer): a wrong type in
// every manifest field, out-of-range numbers, missing keys, stored sampler settings, huge
// shapes, hundreds of thousands of objects, 100,000-level nesting, lying blob contents.
#include "families.h"
#include "jsonbomb.h"

#include "snapfile/reader.h"
#include "snapfile/writer.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace kvscope::hostile {

namespace {

using json = nlohmann::json;

struct Blob {
    snapfile::BlobInfo info;
    Bytes data; // raw bytes
};

struct Ctx {
    explicit Ctx(Corpus& corpus) : c(corpus) {}
    Corpus& c;
    Bytes file;              // base.kvsnap
    KvsnapParts parts;       // its blob area and document
    json manifest;           // its ledger manifest
    std::vector<Blob> blobs; // its decoded blobs
    std::size_t rot = 0;

    std::string nextCommand() { return snapshotCommands()[rot++ % snapshotCommands().size()]; }

    // Registers a case for the snapshot already written at `path` in `dir`.
    void addFor(const fs::path& dir, const fs::path& path, const std::string& family,
                const std::string& note, Expect e, std::vector<std::string> fields,
                std::string cmd) {
        if (cmd.empty())
            cmd = nextCommand();
        if (cmd == "tree") // tree lists a bad file as a problem and still succeeds
            e = Expect::Either;
        addCase(c, dir,
                {family,
                 "kvsnap",
                 snapshotArgs(cmd, path.string(), c.bases(), dir),
                 e,
                 {},
                 std::move(fields),
                 path.string(),
                 note});
    }
    void addBytes(const std::string& family, const std::string& tag, const Bytes& b,
                  const std::string& note, Expect e = Expect::Refuse,
                  std::vector<std::string> fields = {}, std::string cmd = {}) {
        const auto dir = c.newCaseDir();
        const auto path = dir / (tag + ".kvsnap");
        writeAll(path, b);
        addFor(dir, path, family, note, e, std::move(fields), std::move(cmd));
    }
    // Written by the project's writer: `m` as the manifest, `bl` as the blobs.
    void addWritten(const std::string& family, const std::string& tag, const json& m,
                    const std::vector<Blob>& bl, const std::string& note, Expect e = Expect::Refuse,
                    std::vector<std::string> fields = {}, std::string cmd = {}) {
        const auto dir = c.newCaseDir();
        const auto path = dir / (tag + ".kvsnap");
        auto w = snapfile::Writer::create(path.string());
        if (!w)
            throw std::runtime_error(w.message());
        for (const auto& b : bl)
            if (Status s = w.value()->addBlob(b.info.name, b.info.dtype, b.info.shape,
                                              b.data.data(), b.data.size());
                !s)
                throw std::runtime_error(s.message());
        if (Status s = w.value()->finish(m); !s)
            throw std::runtime_error(s.message());
        addFor(dir, path, family, note, e, std::move(fields), std::move(cmd));
    }
    // The base document with its manifest replaced, as raw text inserted after "manifest":{.
    Bytes withManifestText(const std::string& insertion) const {
        std::string doc = parts.document.dump();
        const std::string key = "\"manifest\":{";
        const auto at = doc.find(key);
        doc.insert(at + key.size(), insertion);
        return buildKvsnap(parts.blobArea, doc);
    }
};

// --- container --------------------------------------------------------------------------

void containerCases(Ctx& x) {
    const Bytes& base = x.file;
    const auto moff = getLE<std::uint64_t>(base, 32);
    std::vector<std::size_t> marks = {64, moff, moff + 1};
    for (const auto& b : x.blobs)
        marks.push_back(b.info.offset + b.info.storedBytes / 2);
    for (std::size_t at : truncationPoints(base.size(), marks, 12))
        x.addBytes("kvsnap.truncate", "trunc-" + std::to_string(at),
                   Bytes(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(at)),
                   "cut to " + std::to_string(at) + " bytes");
    for (int i = 0; i < 12; ++i) {
        Bytes b = base;
        const std::size_t at = i < 4 ? x.c.below(64) : x.c.below(base.size());
        b[at] ^= static_cast<std::uint8_t>(1u << x.c.below(8));
        x.addBytes("kvsnap.bitflip", "flip-" + std::to_string(at), b,
                   "one bit flipped at byte " + std::to_string(at));
    }

    // Header fields, header checksum recomputed.
    struct H {
        const char* tag;
        std::size_t at;
        int width;
        std::uint64_t value;
        Expect expect;
        const char* field;
    };
    const std::uint64_t size = base.size();
    const H hs[] = {
        {"version-0", 8, 4, 0, Expect::Refuse, "version"},
        {"version-2", 8, 4, 2, Expect::Refuse, "version"},
        {"headersize-0", 12, 4, 0, Expect::Refuse, "header"},
        {"headersize-65", 12, 4, 65, Expect::Refuse, "header"},
        {"required-bit0", 16, 8, 1, Expect::Refuse, "feature"},
        {"required-bit63", 16, 8, 1ull << 63, Expect::Refuse, "feature"},
        {"optional-all", 24, 8, ~0ull, Expect::Succeed, ""},
        {"moff-0", 32, 8, 0, Expect::Refuse, "manifest"},
        {"moff-63", 32, 8, 63, Expect::Refuse, "manifest"},
        {"moff-max", 32, 8, ~0ull, Expect::Refuse, "manifest"},
        {"moff-minus1", 32, 8, moff - 1, Expect::Refuse, "manifest"},
        {"msize-0", 40, 8, 0, Expect::Refuse, "manifest"},
        {"msize-max", 40, 8, ~0ull, Expect::Refuse, "manifest"},
        {"msize-2x", 40, 8, 2 * size, Expect::Refuse, "manifest"},
        {"msize-65MiB", 40, 8, 65ull << 20, Expect::Refuse, "manifest"},
    };
    for (const auto& h : hs) {
        Bytes b = base;
        if (h.width == 4)
            putLE<std::uint32_t>(b, h.at, static_cast<std::uint32_t>(h.value));
        else
            putLE<std::uint64_t>(b, h.at, h.value);
        resealKvsnapHeader(b);
        x.addBytes("kvsnap.header", h.tag, b,
                   std::string("header field at ") + std::to_string(h.at) + " = " +
                       std::to_string(h.value) + " (header checksum recomputed)",
                   h.expect,
                   h.field[0] ? std::vector<std::string>{h.field} : std::vector<std::string>{});
    }
    {
        Bytes b = base;
        putLE<std::uint64_t>(b, 48, 0x1234);
        resealKvsnapHeader(b);
        x.addBytes("kvsnap.header", "manifest-checksum", b, "manifest_xxh3 wrong", Expect::Refuse,
                   {"checksum"});
    }

    // Blob-table entries (valid checksums everywhere). Entry 0 is layers.0.k (raw f32),
    // the last is logits (zstd, shuffled).
    const json doc = x.parts.document;
    const std::size_t last = doc["kvsnap"]["blobs"].size() - 1;
    auto table = [&](const std::string& tag, std::size_t index, const std::string& key, json v,
                     Expect e = Expect::Refuse) {
        json d = doc;
        if (key.empty())
            d["kvsnap"]["blobs"][index] = v;
        else if (v.is_discarded())
            d["kvsnap"]["blobs"][index].erase(key);
        else
            d["kvsnap"]["blobs"][index][key] = v;
        const std::string name = doc["kvsnap"]["blobs"][index]["name"];
        x.addBytes("kvsnap.blobtable", tag, buildKvsnap(x.parts.blobArea, d.dump()),
                   "blob '" + name + "'" + (key.empty() ? "" : "." + key) + " = " +
                       (v.is_discarded() ? std::string("(removed)") : v.dump().substr(0, 60)),
                   e, {name, key.empty() ? "entry" : key, "entry 0"});
    };
    const std::uint64_t fileEnd = base.size();
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{{"offset-63", 63},
                                                                   {"offset-end", fileEnd},
                                                                   {"offset-max", ~0ull},
                                                                   {"offset-plus1", 65},
                                                                   {"offset-negative", -64},
                                                                   {"offset-string", "64"}})
        table(tag, 0, "offset", v);
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{
             {"stored-0", 0}, {"stored-plus1", 1665}, {"stored-max", ~0ull}})
        table(tag, 0, "stored_bytes", v);
    for (auto [tag, v] :
         std::vector<std::pair<std::string, json>>{{"raw-plus4", 1668}, {"raw-max", ~0ull}})
        table(tag, 0, "raw_bytes", v);
    for (auto [tag, v] :
         std::vector<std::pair<std::string, json>>{{"shape-negative", {-4, 13, 8}},
                                                   {"shape-huge", {4, 13, 8, 1ll << 40}},
                                                   {"shape-rank33", std::vector<int>(33, 1)},
                                                   {"shape-overflow", {1ll << 62, 1ll << 62}},
                                                   {"shape-mismatch", {4, 13}},
                                                   {"shape-float", {4.5, 13, 8}}})
        table(tag, 0, "shape", v);
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{
             {"dtype-f8", "f8"}, {"dtype-number", 3}, {"dtype-bool", "bool"}})
        table(tag, 0, "dtype", v);
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{
             {"compression-lz4", "lz4"}, {"compression-zstd-on-raw", "zstd"}})
        table(tag, 0, "compression", v);
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{
             {"shuffle-3", 3}, {"shuffle-2^27", 1 << 27}, {"shuffle-2", 2}})
        table(tag, last, "shuffle_block", v);
    // Legal (FORMAT.md): a shuffle block of one f32 element is the identity, so the blob reads.
    table("shuffle-on-raw", 0, "shuffle_block", 4, Expect::Either);
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{
             {"xxh3-nothex", "xyz"}, {"xxh3-upper", "4A62CB14BCC68C85"}})
        table(tag, 0, "stored_xxh3", v);
    table("rawxxh3-wrong", last, "raw_xxh3", "0000000000000000");
    for (auto [tag, v] :
         std::vector<std::pair<std::string, json>>{{"name-empty", ""},
                                                   {"name-long", std::string(5000, 'n')},
                                                   {"name-nul", std::string("layers.0.k\0x", 12)}})
        table(tag, 0, "name", v);
    for (const char* key : {"offset", "dtype", "shape", "name"})
        table(std::string("missing-") + key, 0, key, json(json::value_t::discarded));
    table("entry-string", 0, "", "layers.0.k");
    table("entry-null", 0, "", nullptr);
    {
        json d = doc;
        d["kvsnap"]["blobs"][1]["name"] = "layers.0.k";
        x.addBytes("kvsnap.blobtable", "duplicate-name", buildKvsnap(x.parts.blobArea, d.dump()),
                   "two blobs named layers.0.k", Expect::Refuse, {"layers.0.k"});
        d = doc;
        std::swap(d["kvsnap"]["blobs"][0], d["kvsnap"]["blobs"][1]);
        x.addBytes("kvsnap.blobtable", "order-swapped", buildKvsnap(x.parts.blobArea, d.dump()),
                   "first two table entries swapped", Expect::Refuse, {"offset"});
        d = doc;
        d["kvsnap"]["blobs"].erase(3);
        x.addBytes("kvsnap.blobtable", "entry-dropped", buildKvsnap(x.parts.blobArea, d.dump()),
                   "entry layers.1.v dropped (gap)", Expect::Refuse, {"layers"});
    }
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{{"blobs-object", json::object()},
                                                                   {"blobs-null", nullptr}}) {
        json d = doc;
        d["kvsnap"]["blobs"] = v;
        x.addBytes("kvsnap.blobtable", tag, buildKvsnap(x.parts.blobArea, d.dump()),
                   "kvsnap.blobs = " + v.dump(), Expect::Refuse, {"blobs"});
    }
    for (auto [tag, v] : std::vector<std::pair<std::string, json>>{
             {"fv-2", 2}, {"fv-missing", json(json::value_t::discarded)}}) {
        json d = doc;
        if (v.is_discarded())
            d["kvsnap"].erase("format_version");
        else
            d["kvsnap"]["format_version"] = v;
        x.addBytes("kvsnap.blobtable", tag, buildKvsnap(x.parts.blobArea, d.dump()),
                   "kvsnap.format_version " + (v.is_discarded() ? "removed" : v.dump()),
                   Expect::Refuse, {"format_version"});
    }
    {
        json d = doc;
        d["kvsnap"] = "table";
        x.addBytes("kvsnap.blobtable", "kvsnap-string", buildKvsnap(x.parts.blobArea, d.dump()),
                   "the kvsnap table is a string", Expect::Refuse, {"kvsnap"});
        x.addBytes("kvsnap.blobtable", "document-array", buildKvsnap(x.parts.blobArea, "[1,2]"),
                   "the document is an array", Expect::Refuse, {});
        x.addBytes("kvsnap.blobtable", "document-nan",
                   buildKvsnap(x.parts.blobArea, "{\"kvsnap\": NaN}"), "the document is not JSON",
                   Expect::Refuse, {});
    }
}

// A consistent ledger whose tensors are zstd frames of zeros: `length` cached positions,
// every blob exactly what the manifest implies. With length 2^24 the file is ~1 MB and
// decodes to ~21 GB.
Bytes zeroBombSnapshot(const Ctx& x, std::int64_t length, bool lyingFrames) {
    json m = x.manifest;
    const std::int64_t layers = m["cache"]["layers"], kv = m["cache"]["kv_heads"],
                       hd = m["cache"]["head_dim"];
    m["cache"]["length"] = length;
    m["positions"]["count"] = length;
    m["positions"]["next"] = length;
    m["tokens"]["count"] = length;
    m["mask"]["length"] = length;
    Bytes area;
    json table = json::array();
    auto add = [&](const std::string& name, const std::string& dtype,
                   std::vector<std::int64_t> shape, std::uint64_t raw) {
        const Bytes frame = lyingFrames
                                ? zstdLyingFrame(raw, static_cast<std::size_t>(raw / 32000 + 1))
                                : zstdZeroFrame(raw);
        table.push_back(blobEntry(name, dtype, shape, 64 + area.size(), frame, "zstd", raw));
        area.insert(area.end(), frame.begin(), frame.end());
    };
    for (std::int64_t l = 0; l < layers; ++l)
        for (const char* kind : {".k", ".v"})
            add("layers." + std::to_string(l) + kind, "f32", {kv, length, hd},
                static_cast<std::uint64_t>(kv * length * hd * 4));
    add("tokens", "i32", {length}, static_cast<std::uint64_t>(length) * 4);
    add("positions", "i64", {length}, static_cast<std::uint64_t>(length) * 8);
    add("mask", "u8", {length}, static_cast<std::uint64_t>(length));
    add("logits", "f32", {512}, 2048);
    json doc = {{"kvsnap", {{"format_version", 1}, {"writer", "hostile"}, {"blobs", table}}},
                {"manifest", m}};
    return buildKvsnap(area, doc.dump());
}

void bombCases(Ctx& x) {
    // One blob: layers.0.k as a 2 GiB zero frame while the manifest says 13 positions.
    {
        json d = x.parts.document;
        const Bytes frame = zstdZeroFrame(2ull << 30);
        Bytes area;
        json blobs = json::array();
        for (std::size_t i = 0; i < x.blobs.size(); ++i) {
            const auto& b = x.blobs[i];
            const Bytes stored = i == 0 ? frame
                                        : Bytes(x.parts.blobArea.begin() +
                                                    static_cast<std::ptrdiff_t>(b.info.offset - 64),
                                                x.parts.blobArea.begin() +
                                                    static_cast<std::ptrdiff_t>(
                                                        b.info.offset - 64 + b.info.storedBytes));
            json e = d["kvsnap"]["blobs"][i];
            e["offset"] = 64 + area.size();
            if (i == 0) {
                e = blobEntry(b.info.name, "f32", {4, 1 << 24, 8}, 64 + area.size(), frame, "zstd",
                              2ull << 30);
            }
            blobs.push_back(e);
            area.insert(area.end(), stored.begin(), stored.end());
        }
        d["kvsnap"]["blobs"] = blobs;
        const Bytes file = buildKvsnap(area, d.dump());
        for (const char* cmd : {"verify", "export"})
            x.addBytes(
                "kvsnap.bomb", std::string("k0-2GiB-") + cmd, file,
                "layers.0.k: a 64 KiB zstd frame of 2 GiB zeros, manifest still 13 positions",
                Expect::Refuse, {"layers.0.k"}, cmd);
    }
    for (const auto& [length, lying, tag] :
         std::vector<std::tuple<std::int64_t, bool, std::string>>{{1 << 24, false, "zero-2^24"},
                                                                  {1 << 20, false, "zero-2^20"},
                                                                  {1 << 22, true, "lying-2^22"}}) {
        const Bytes file = zeroBombSnapshot(x, length, lying);
        const std::vector<const char*> cmds =
            length == (1 << 24) ? std::vector<const char*>{"verify", "continue", "export", "diff"}
                                : std::vector<const char*>{"verify", "replay", "truncate"};
        for (const char* cmd : cmds)
            x.addBytes("kvsnap.bomb", tag + "-" + cmd, file,
                       "consistent ledger of " + std::to_string(length) +
                           " positions, every blob a zstd frame " +
                           (lying ? "that declares the size but holds 1/32000 of it"
                                  : "of zeros (~32768x expansion)"),
                       Expect::Refuse, {}, cmd);
    }
}

// --- ledger -----------------------------------------------------------------------------

// Every leaf/container of the manifest as (JSON pointer, value), fingerprints.weights cut to
// its first entry (the other entries are the same shape).
void walkManifest(const json& j, const std::string& ptr,
                  std::vector<std::pair<std::string, json>>& out) {
    if (!ptr.empty())
        out.emplace_back(ptr, j);
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it)
            walkManifest(it.value(), ptr + "/" + it.key(), out);
    } else if (j.is_array()) {
        const std::size_t n =
            ptr == "/fingerprints/weights" ? std::min<std::size_t>(1, j.size()) : j.size();
        for (std::size_t i = 0; i < n; ++i)
            walkManifest(j[i], ptr + "/" + std::to_string(i), out);
    }
}

// "/cache/layers" -> "cache.layers"; "/prompt/segments/0/begin" -> "prompt.segments[0].begin"
// ("prompt.segments[].begin" with anyIndex).
std::string dotted(const std::string& ptr, bool anyIndex = false) {
    std::string out;
    std::size_t i = 1;
    while (i <= ptr.size()) {
        const std::size_t j = std::min(ptr.find('/', i), ptr.size());
        const std::string part = ptr.substr(i, j - i);
        if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
            out += anyIndex ? "[]" : "[" + part + "]";
        else
            out += (out.empty() ? "" : ".") + part;
        i = j + 1;
    }
    return out;
}

json wrongType(const json& v) {
    switch (v.type()) {
    case json::value_t::string:
        return 12345;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
        return "12";
    case json::value_t::boolean:
        return "true";
    case json::value_t::object:
        return json::array({1, 2});
    case json::value_t::array:
        return json{{"a", 1}};
    default:
        return json::object();
    }
}

void ledgerCases(Ctx& x) {
    std::vector<std::pair<std::string, json>> leaves;
    walkManifest(x.manifest, "", leaves);
    auto leafName = [](const std::string& ptr) { return ptr.substr(ptr.rfind('/') + 1); };
    std::size_t k = 0;
    // A wrong type in every field (of model.config, which is the model loader's own format
    // checked elsewhere, every sixth; of the second prompt segment and the weight shapes, none:
    // they repeat the first segment's and the weight entry's types).
    std::size_t configLeaf = 0;
    for (const auto& [ptr, v] : leaves) {
        if (ptr.rfind("/model/config/", 0) == 0 && configLeaf++ % 6)
            continue;
        if (ptr.rfind("/prompt/segments/1", 0) == 0 ||
            ptr.rfind("/fingerprints/weights/0/shape/", 0) == 0)
            continue;
        json m = x.manifest;
        const json w = wrongType(v);
        m[json::json_pointer(ptr)] = w;
        x.addWritten("kvsnap.ledger.type", "type" + std::to_string(k++), m, x.blobs,
                     dotted(ptr) + " = " + w.dump() + " (was " + v.dump().substr(0, 40) + ")",
                     Expect::Refuse, {dotted(ptr), dotted(ptr, true), leafName(ptr)});
    }
    // Out-of-range numbers in every integer field.
    const json values[] = {-1, 1ll << 62, ~0ull};
    std::size_t vi = 0;
    for (const auto& [ptr, v] : leaves) {
        if (!v.is_number_integer() || ptr.find("/weights/") != std::string::npos ||
            ptr.find("/segments/1/") != std::string::npos)
            continue;
        // One out-of-range value per field, rotating (two for the cache geometry).
        const bool geometry = ptr.rfind("/cache/", 0) == 0;
        for (std::size_t n = 0; n < (geometry ? 2u : 1u); ++n) {
            const json& nv = values[(vi++) % 3];
            if (nv == v)
                continue;
            json m = x.manifest;
            m[json::json_pointer(ptr)] = nv;
            // -1 is legal for a few fields (bos id, message_index).
            const bool maybeLegal = nv == -1;
            x.addWritten("kvsnap.ledger.range", "range" + std::to_string(k++), m, x.blobs,
                         dotted(ptr) + " = " + nv.dump(),
                         maybeLegal ? Expect::Either : Expect::Refuse,
                         {dotted(ptr), leafName(ptr)});
        }
    }
    // Missing keys: every key of the first level, every fourth one of the second.
    std::size_t second = 0;
    for (const auto& [ptr, v] : leaves) {
        if (std::count(ptr.begin(), ptr.end(), '/') == 2 && second++ % 4)
            continue;
        if (std::count(ptr.begin(), ptr.end(), '/') > 2 ||
            ptr.find("/weights/") != std::string::npos || ptr.rfind("/model/config/", 0) == 0)
            continue;
        json m = x.manifest;
        const auto p = json::json_pointer(ptr);
        m[p.parent_pointer()].erase(leafName(ptr));
        x.addWritten("kvsnap.ledger.missing", "missing" + std::to_string(k++), m, x.blobs,
                     dotted(ptr) + " removed", Expect::Either, {dotted(ptr), leafName(ptr)});
    }
    // Whole-manifest shapes.
    x.addWritten("kvsnap.ledger.shape", "manifest-null", nullptr, x.blobs, "no ledger at all");
    x.addWritten("kvsnap.ledger.shape", "manifest-empty", json::object(), x.blobs, "empty ledger");
    x.addWritten("kvsnap.ledger.shape", "manifest-string", "ledger", x.blobs, "ledger is a string");
    for (int v : {0, 2, 1000}) {
        json m = x.manifest;
        m["kvscope_ledger"] = v;
        x.addWritten("kvsnap.ledger.shape", "ledger-v" + std::to_string(v), m, x.blobs,
                     "kvscope_ledger = " + std::to_string(v), Expect::Refuse, {"ledger"});
    }

    // Sampler settings stored in the snapshot.
    const std::vector<std::tuple<std::string, std::string, json, Expect>> sampler = {
        {"temp-1e-40", "temperature", 1e-40, Expect::Refuse},
        {"temp-1e300", "temperature", 1e300, Expect::Refuse},
        {"temp-negative", "temperature", -1.0, Expect::Refuse},
        {"temp-null", "temperature", nullptr, Expect::Refuse},
        {"temp-nan-string", "temperature", "nan", Expect::Refuse},
        {"topp-null", "top_p", nullptr, Expect::Refuse},
        {"topp-1.5", "top_p", 1.5, Expect::Refuse},
        {"topk-negative", "top_k", -5, Expect::Refuse},
        {"topk-2^40", "top_k", 1ll << 40, Expect::Refuse},
        {"seed-abc", "seed", "abc", Expect::Refuse},
        {"seed-negative", "seed", "-1", Expect::Either},
        {"seed-overflow", "seed", "99999999999999999999999", Expect::Refuse},
        {"rng-0", "rng_state", "0", Expect::Either},
        {"rng-number", "rng_state", 42, Expect::Refuse},
    };
    std::size_t s = 0;
    for (const auto& [tag, key, v, e] : sampler) {
        json m = x.manifest;
        m["sampler"][key] = v;
        m["sampler"]["temperature"] = key == "temperature" ? v : json(0.8);
        static const char* const cmds[] = {"continue", "fork", "inspect", "continue"};
        x.addWritten("kvsnap.sampler", "sampler-" + tag, m, x.blobs,
                     "sampler." + key + " = " + v.dump() +
                         (key == "temperature" ? "" : ", temperature 0.8"),
                     std::string(cmds[s % 4]) == "inspect" ? Expect::Either : e, {"sampler", key},
                     cmds[s % 4]);
        ++s;
    }
    // NaN / Infinity as JSON-looking literals (not JSON: the parser must refuse them cleanly).
    for (const char* lit : {"NaN", "-Infinity", "1e99999"})
        x.addBytes("kvsnap.sampler", std::string("sampler-literal-") + lit,
                   x.withManifestText(std::string("\"sampler_x\":{\"temperature\":") + lit + "},"),
                   std::string("a sampler-like entry holding the literal ") + lit, Expect::Refuse,
                   {}, "continue");

    // Huge shapes within the manifest's own limits; the blobs stay small.
    {
        json m = x.manifest;
        m["cache"]["layers"] = 1024;
        m["cache"]["kv_heads"] = 4096;
        m["cache"]["head_dim"] = 4096;
        m["cache"]["length"] = 1 << 24;
        for (const char* cmd : {"verify", "continue", "export", "diff", "inspect"})
            x.addWritten("kvsnap.ledger.huge", std::string("huge-cache-") + cmd, m, x.blobs,
                         "cache 1024 layers x 4096 kv heads x 2^24 x 4096 (blobs unchanged)",
                         std::string(cmd) == "inspect" ? Expect::Either : Expect::Refuse,
                         {"cache", "layers", "shape"}, cmd);
        m = x.manifest;
        m["logits"]["count"] = 1 << 22;
        x.addWritten("kvsnap.ledger.huge", "logits-2^22", m, x.blobs, "logits.count 2^22, blob 512",
                     Expect::Refuse, {"logits"}, "verify");
        m = x.manifest;
        m["model"]["config"]["max_context"] = 1ll << 40;
        m["positions"]["rope"]["max_context"] = 1ll << 40;
        x.addWritten("kvsnap.ledger.huge", "context-2^40", m, x.blobs, "max_context 2^40",
                     Expect::Either, {"max_context", "context"}, "continue");
        m = x.manifest;
        m["model"]["config"]["vocab_size"] = 1 << 22;
        x.addWritten("kvsnap.ledger.huge", "vocab-2^22", m, x.blobs, "model vocab_size 2^22",
                     Expect::Either, {"vocab"}, "verify");
    }
    for (const auto& [tag, next] : std::vector<std::pair<std::string, std::int64_t>>{
             {"next-huge", std::numeric_limits<std::int64_t>::max() / 2 - 1},
             {"next-negative", -5}}) {
        json m = x.manifest;
        m["positions"]["next"] = next;
        for (const char* cmd : {"continue", "fork", "splice"}) {
            x.addWritten("kvsnap.ledger.range", tag + "-force-" + cmd, m, x.blobs,
                         "positions.next = " + std::to_string(next) + ", restored with --force",
                         Expect::Either, {"positions", "next"}, cmd);
            auto& c = x.c.cases().back();
            if (c.command == "continue" || c.command == "fork")
                c.args.push_back("--force");
        }
    }

    // Big and deep JSON inside the manifest.
    {
        const std::string many = manyObjects(300000);
        x.addBytes("kvsnap.ledger.big", "unknown-300k-inspect",
                   x.withManifestText("\"x_unknown\":" + many + ","),
                   "an unknown key holding 300,000 objects (~3.6 MB)", Expect::Succeed, {},
                   "inspect");
        for (const char* cmd : {"verify", "diff", "tree"})
            x.addBytes("kvsnap.ledger.big", std::string("unknown-300k-") + cmd,
                       x.withManifestText("\"x_unknown\":" + many + ","),
                       "an unknown key holding 300,000 objects (~3.6 MB)", Expect::Either, {}, cmd);
        json m = x.manifest;
        std::string doc = x.parts.document.dump();
        const std::string key = "\"parameters\":{}";
        const auto at = doc.find(key);
        if (at != std::string::npos) {
            doc.replace(at, key.size(), "\"parameters\":{\"steps\":" + many + "}");
            const Bytes file = buildKvsnap(x.parts.blobArea, doc);
            for (const char* cmd : {"inspect", "tree", "diff", "fork"})
                x.addBytes("kvsnap.ledger.big", std::string("params-300k-") + cmd, file,
                           "lineage.parameters holding 300,000 objects", Expect::Either, {}, cmd);
        }
    }
    for (const auto& [tag, text] : std::vector<std::pair<std::string, std::string>>{
             {"deep-arrays-100k", deepArrays(100000)},
             {"deep-objects-100k", deepObjects(100000)},
             {"deep-arrays-1M", deepArrays(1000000)}}) {
        const bool million = tag.find("1M") != std::string::npos;
        for (const char* cmd : {"inspect", "verify", "tree", "diff"}) {
            if (million && std::string(cmd) != "inspect")
                continue;
            x.addBytes("kvsnap.ledger.deep", tag + "-" + cmd,
                       x.withManifestText("\"x_deep\":" + text + ","),
                       "an unknown key nested " + tag.substr(tag.rfind('-') + 1) + " levels deep",
                       Expect::Refuse, {"nest", "deep", "depth"}, cmd);
        }
    }
    {
        std::string doc = x.parts.document.dump();
        const std::string key = "\"parameters\":{}";
        doc.replace(doc.find(key), key.size(), "\"parameters\":" + deepObjects(100000));
        x.addBytes("kvsnap.ledger.deep", "params-deep-100k", buildKvsnap(x.parts.blobArea, doc),
                   "lineage.parameters nested 100,000 levels deep", Expect::Refuse,
                   {"nest", "deep", "depth"}, "tree");
    }
    {
        json m = x.manifest;
        m["prompt"]["system_prompt"] = std::string(5 << 20, 'S');
        x.addWritten("kvsnap.ledger.big", "system-prompt-5MB", m, x.blobs, "a 5 MB system prompt",
                     Expect::Either, {}, "diff");
        m = x.manifest;
        json segs = json::array();
        for (int i = 0; i < 60000; ++i)
            segs.push_back({{"begin", i % 13},
                            {"end", 13 - i % 13},
                            {"role", "user"},
                            {"kind", "prompt"},
                            {"message_index", -1}});
        m["prompt"]["segments"] = segs;
        x.addWritten("kvsnap.ledger.big", "segments-60k", m, x.blobs,
                     "60,000 overlapping, reversed prompt segments", Expect::Either, {}, "verify");
        x.addBytes("kvsnap.ledger.big", "invalid-utf8",
                   x.withManifestText("\"x_text\":\"\xff\xfe\xc0\","),
                   "invalid UTF-8 in a manifest string", Expect::Refuse, {}, "inspect");
    }
}

// Blob contents that lie while the table and the ledger agree on shapes.
void contentCases(Ctx& x) {
    auto withBlob = [&](const std::string& name, auto mutate) {
        auto bl = x.blobs;
        for (auto& b : bl)
            if (b.info.name == name)
                mutate(b.data);
        return bl;
    };
    auto i32s = [](Bytes& d, std::int32_t v, std::size_t at) { putLE<std::int32_t>(d, at * 4, v); };
    const std::vector<
        std::tuple<std::string, std::string, std::vector<Blob>, std::vector<std::string>>>
        lies = {
            {"token-999999",
             "a token id past the vocabulary",
             withBlob("tokens", [&](Bytes& d) { i32s(d, 999999, 4); }),
             {"token"}},
            {"token-negative",
             "a negative token id",
             withBlob("tokens", [&](Bytes& d) { i32s(d, -7, 2); }),
             {"token"}},
            {"positions-decreasing",
             "positions 12..0",
             withBlob("positions",
                      [](Bytes& d) {
                          for (std::size_t i = 0; i < d.size() / 8; ++i)
                              putLE<std::int64_t>(d, i * 8,
                                                  static_cast<std::int64_t>(d.size() / 8 - 1 - i));
                      }),
             {"position"}},
            {"positions-huge",
             "positions near 2^62",
             withBlob("positions",
                      [](Bytes& d) {
                          for (std::size_t i = 0; i < d.size() / 8; ++i)
                              putLE<std::int64_t>(
                                  d, i * 8, (std::int64_t{1} << 62) + static_cast<std::int64_t>(i));
                      }),
             {"position"}},
            {"mask-7",
             "mask entries 7",
             withBlob("mask", [](Bytes& d) { std::fill(d.begin(), d.end(), 7); }),
             {"mask"}},
            {"mask-zero",
             "every slot masked",
             withBlob("mask", [](Bytes& d) { std::fill(d.begin(), d.end(), 0); }),
             {"mask"}},
            {"kv-nan",
             "NaN keys in layer 2",
             withBlob("layers.2.k",
                      [](Bytes& d) {
                          for (std::size_t i = 0; i < d.size() / 4; ++i)
                              putLE<std::uint32_t>(d, i * 4, 0x7fc00000u);
                      }),
             {"cache", "nonfinite", "NaN"}},
            {"kv-huge",
             "values 3e38 in layer 0 values",
             withBlob("layers.0.v",
                      [](Bytes& d) {
                          for (std::size_t i = 0; i < d.size() / 4; ++i)
                              putLE<float>(d, i * 4, 3e38f);
                      }),
             {}},
            {"logits-nan",
             "NaN logits",
             withBlob("logits",
                      [](Bytes& d) {
                          for (std::size_t i = 0; i < d.size() / 4; ++i)
                              putLE<std::uint32_t>(d, i * 4, 0x7fc00000u);
                      }),
             {"logits"}},
        };
    static const char* const cmds[] = {"continue", "verify", "replay", "truncate",  "splice",
                                       "drift",    "fork",   "patch",  "fault lab", "diff"};
    std::size_t i = 0;
    for (const auto& [tag, note, bl, fields] : lies) {
        x.addWritten("kvsnap.content", tag, x.manifest, bl, note, Expect::Either, fields,
                     cmds[i % std::size(cmds)]);
        ++i;
    }
    // The same lies forced through a restore.
    for (const auto& [tag, note, bl, fields] : lies) {
        x.addWritten("kvsnap.content", tag + "-force", x.manifest, bl, note + ", continue --force",
                     Expect::Either, fields, "continue");
        x.c.cases().back().args.push_back("--force");
    }
}

// Valid snapshots of another model (aidreams260K: 4 layers, 4 KV heads of 16) used where a
// snapshot of stories260K is expected.
void foreignCases(Ctx& x) {
    const Bases& b = x.c.bases();
    const std::string& m = b.llama2c;
    const std::vector<std::pair<std::vector<std::string>, Expect>> cmds = {
        {{"diff", b.snapshot, b.snapshotFar}, Expect::Either},
        {{"drift", b.snapshot, b.snapshotFar, "-m", m, "-n", "2"}, Expect::Refuse},
        {{"patch", b.snapshot, "--from", b.snapshotFar, "--layer", "1", "--positions", "0:5", "-m",
          m, "-o", "out.kvsnap"},
         Expect::Refuse},
        {{"splice", b.snapshot, "--from", b.snapshotFar, "--range", "1:3", "--at", "2", "-m", m,
          "-o", "out.kvsnap"},
         Expect::Refuse},
        {{"continue", b.snapshotFar, "-m", m, "-n", "2", "--force"}, Expect::Refuse},
        {{"replay", b.snapshotFar, "-m", m}, Expect::Refuse},
        {{"truncate", b.snapshotFar, "--at", "3", "-m", m, "-o", "out.kvsnap"}, Expect::Refuse},
        {{"fork", b.snapshotFar, "-n", "2", "--steps", "1", "-m", m, "--force", "-o", "forks"},
         Expect::Refuse},
        {{"fault", "inject", "foreign-cache", b.snapshot, "-m", m, "--other-model", b.aidreams,
          "-o", "out.kvsnap"},
         Expect::Refuse},
        {{"fault", "lab", b.snapshotFar, "-m", m, "-n", "2", "--fault", "position-offset"},
         Expect::Refuse},
    };
    for (const auto& [args, e] : cmds) {
        const auto dir = x.c.newCaseDir();
        const bool otherModel = args.size() > 2 && args[1] == "inject";
        addCase(x.c, dir,
                {"kvsnap.foreign",
                 "kvsnap",
                 args,
                 e,
                 otherModel ? std::vector<std::string>{"aidreams260K.bin"}
                            : std::vector<std::string>{"far.kvsnap"},
                 {},
                 otherModel ? b.aidreams : b.snapshotFar,
                 "a snapshot (or model) of aidreams260K where stories260K's is expected"});
    }
}

} // namespace

void addKvsnapCases(Corpus& c) {
    Ctx x(c);
    x.file = readAll(c.bases().snapshot);
    x.parts = splitKvsnap(x.file);
    x.manifest = x.parts.document["manifest"];
    auto r = snapfile::Reader::open(c.bases().snapshot);
    if (!r)
        throw std::runtime_error(r.message());
    for (const auto& info : r.value().blobs()) {
        auto data = r.value().readBlob(info.name);
        if (!data)
            throw std::runtime_error(data.message());
        x.blobs.push_back({info, std::move(data).value()});
    }
    containerCases(x);
    bombCases(x);
    ledgerCases(x);
    contentCases(x);
    foreignCases(x);
}

} // namespace kvscope::hostile
