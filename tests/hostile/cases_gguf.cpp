// GGUF models (stories260K.gguf): truncations, bit flips and lying fields patched into the
// binary layout (counts, string lengths, value/array types, array counts, n_dims, dims, tensor
// types, offsets), then semantic lies written with the project's own GGUF writer (head counts
// that do not divide, odd RoPE dims, context 0 or 2^40, broken vocabularies, missing tensors).
#include "families.h"

#include "formats/gguf.h"
#include "formats/ggufwriter.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>

namespace kvscope::hostile {

namespace {

// Byte offsets of every field of a GGUF file, found by walking it.
struct GgufLayout {
    struct Kv {
        std::string key;
        std::size_t keyLenAt = 0, typeAt = 0, valueAt = 0;
        std::uint32_t type = 0;
        std::size_t arrayTypeAt = 0, arrayCountAt = 0; // for arrays
    };
    struct TensorInfo {
        std::string name;
        std::size_t nameLenAt = 0, nDimsAt = 0, dimsAt = 0, typeAt = 0, offsetAt = 0;
        std::uint32_t nDims = 0;
    };
    std::vector<Kv> kvs;
    std::vector<TensorInfo> tensors;
    std::size_t infosEnd = 0;
};

std::size_t scalarSize(std::uint32_t t) {
    static const std::size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sizes[t] : 0;
}

GgufLayout walk(const Bytes& f) {
    GgufLayout l;
    std::size_t o = 8;
    const auto nt = getLE<std::uint64_t>(f, o);
    const auto nkv = getLE<std::uint64_t>(f, o + 8);
    o += 16;
    auto str = [&](std::size_t& at) {
        const auto n = getLE<std::uint64_t>(f, at);
        std::string s(reinterpret_cast<const char*>(f.data() + at + 8), n);
        at += 8 + n;
        return s;
    };
    for (std::uint64_t i = 0; i < nkv; ++i) {
        GgufLayout::Kv kv;
        kv.keyLenAt = o;
        kv.key = str(o);
        kv.typeAt = o;
        kv.type = getLE<std::uint32_t>(f, o);
        o += 4;
        kv.valueAt = o;
        if (kv.type == 8) {
            str(o);
        } else if (kv.type == 9) {
            kv.arrayTypeAt = o;
            kv.arrayCountAt = o + 4;
            const auto et = getLE<std::uint32_t>(f, o);
            const auto n = getLE<std::uint64_t>(f, o + 4);
            o += 12;
            if (et == 8)
                for (std::uint64_t k = 0; k < n; ++k)
                    str(o);
            else
                o += n * scalarSize(et);
        } else {
            o += scalarSize(kv.type);
        }
        l.kvs.push_back(kv);
    }
    for (std::uint64_t i = 0; i < nt; ++i) {
        GgufLayout::TensorInfo t;
        t.nameLenAt = o;
        t.name = str(o);
        t.nDimsAt = o;
        t.nDims = getLE<std::uint32_t>(f, o);
        o += 4;
        t.dimsAt = o;
        o += 8 * t.nDims;
        t.typeAt = o;
        o += 4;
        t.offsetAt = o;
        o += 8;
        l.tensors.push_back(t);
    }
    l.infosEnd = o;
    return l;
}

const GgufLayout::Kv& kvNamed(const GgufLayout& l, const std::string& key) {
    for (const auto& kv : l.kvs)
        if (kv.key == key)
            return kv;
    throw std::runtime_error("stories260K.gguf has no key " + key);
}

struct Ctx {
    Corpus& c;
    std::size_t rot = 0;
    std::string nextCmd() {
        // tokenize reads only the vocabulary: it is chosen where the vocabulary is the point.
        static const std::vector<std::string> cmds = {"info",   "generate",  "logits",  "convert",
                                                      "verify", "induction", "continue"};
        return cmds[rot++ % cmds.size()];
    }
    void add(const std::string& family, const std::string& name, const Bytes& b,
             const std::string& note, Expect e = Expect::Refuse,
             std::vector<std::string> fields = {}, std::string cmd = {}) {
        const auto dir = c.newCaseDir();
        const auto path = dir / name;
        writeAll(path, b);
        if (cmd.empty())
            cmd = nextCmd();
        addCase(c, dir,
                {family,
                 "gguf",
                 modelArgs(cmd, path.string(), c.bases(), dir),
                 e,
                 {},
                 std::move(fields),
                 path.string(),
                 note});
    }
};

void binaryCases(Ctx& x, const Bytes& base) {
    const GgufLayout l = walk(base);
    // Truncations at field boundaries: header, each of the first keys, tensor infos, data.
    std::vector<std::size_t> marks = {24,
                                      l.kvs[1].keyLenAt,
                                      l.kvs[3].valueAt,
                                      l.tensors[0].nameLenAt,
                                      l.tensors[5].offsetAt,
                                      l.infosEnd,
                                      base.size() - 100};
    for (std::size_t at : truncationPoints(base.size(), marks, 14))
        x.add("gguf.truncate", "trunc-" + std::to_string(at) + ".gguf",
              Bytes(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(at)),
              "cut to " + std::to_string(at) + " bytes");

    // Bit flips in the structured part (header, metadata, tensor infos).
    for (int i = 0; i < 10; ++i) {
        Bytes b = base;
        const std::size_t at =
            i < 4 ? 4 + 4 * static_cast<std::size_t>(i) : 24 + x.c.below(l.infosEnd - 24);
        const int bit = static_cast<int>(x.c.below(8));
        b[at] ^= static_cast<std::uint8_t>(1u << bit);
        x.add("gguf.bitflip", "flip-" + std::to_string(at) + "-" + std::to_string(bit) + ".gguf", b,
              "bit " + std::to_string(bit) + " of byte " + std::to_string(at), Expect::Either);
    }

    auto patch64 = [&](const std::string& family, const std::string& tag, std::size_t at,
                       std::uint64_t v, std::vector<std::string> fields,
                       Expect e = Expect::Refuse) {
        Bytes b = base;
        putLE<std::uint64_t>(b, at, v);
        x.add(family, tag + ".gguf", b, tag + " (u64 at " + std::to_string(at) + ")", e,
              std::move(fields));
    };
    auto patch32 = [&](const std::string& family, const std::string& tag, std::size_t at,
                       std::uint32_t v, std::vector<std::string> fields,
                       Expect e = Expect::Refuse) {
        Bytes b = base;
        putLE<std::uint32_t>(b, at, v);
        x.add(family, tag + ".gguf", b, tag + " (u32 at " + std::to_string(at) + ")", e,
              std::move(fields));
    };
    const std::uint64_t max64 = std::numeric_limits<std::uint64_t>::max();
    for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{49}, std::uint64_t{1} << 32,
                            std::uint64_t{1} << 63, max64})
        patch64("gguf.lie.counts", "n_tensors=" + std::to_string(v), 8, v, {"tensor"},
                v == 0 ? Expect::Either : Expect::Refuse);
    for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{20}, std::uint64_t{1} << 40, max64})
        patch64("gguf.lie.counts", "n_kv=" + std::to_string(v), 16, v, {"metadata", "kv"});
    for (std::uint32_t v : {1u, 2u, 4u, 0xFFFFFFFFu, 0x03000000u})
        patch32("gguf.lie.version", "version=" + std::to_string(v), 4, v, {"version"},
                v == 2 ? Expect::Either : Expect::Refuse);

    const auto& first = l.kvs[0];
    const auto& arch = kvNamed(l, "general.architecture");
    const auto& tokModel = kvNamed(l, "tokenizer.ggml.model");
    const auto& ctx = kvNamed(l, "llama.context_length");
    const auto& tokens = kvNamed(l, "tokenizer.ggml.tokens");
    const auto& scores = kvNamed(l, "tokenizer.ggml.scores");
    for (std::uint64_t v : {std::uint64_t{1} << 63, static_cast<std::uint64_t>(base.size() + 1)})
        patch64("gguf.lie.strings", "keylen0=" + std::to_string(v), first.keyLenAt, v,
                {"key", "metadata key #"});
    for (std::uint64_t v : {std::uint64_t{0}, max64})
        patch64("gguf.lie.strings", "keylen-arch=" + std::to_string(v), arch.keyLenAt, v,
                {"key", "metadata key #"});
    for (std::uint64_t v : {std::uint64_t{1000000}, std::uint64_t{1} << 63, max64})
        patch64("gguf.lie.strings", "strlen-arch=" + std::to_string(v), arch.valueAt, v,
                {"general.architecture", "metadata key #"});
    for (std::uint32_t v : {13u, 0xFFFFFFFFu, 9u})
        patch32("gguf.lie.valuetype", "type-tokmodel=" + std::to_string(v), tokModel.typeAt, v,
                {"tokenizer.ggml.model"});
    for (std::uint32_t v : {8u, 9u, 10u})
        patch32("gguf.lie.valuetype", "type-ctx=" + std::to_string(v), ctx.typeAt, v,
                {"llama.context_length", "metadata key #"});
    for (std::uint32_t v : {9u, 13u, 6u, 0xFFFFFFFFu})
        patch32("gguf.lie.array", "tokens-elemtype=" + std::to_string(v), tokens.arrayTypeAt, v,
                {"tokenizer.ggml.tokens", "metadata key #"});
    for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{513}, std::uint64_t{1} << 61, max64})
        patch64("gguf.lie.array", "tokens-count=" + std::to_string(v), tokens.arrayCountAt, v,
                {"tokenizer.ggml.tokens", "metadata key #"});
    for (std::uint64_t v : {std::uint64_t{1} << 62, std::uint64_t{511}})
        patch64("gguf.lie.array", "scores-count=" + std::to_string(v), scores.arrayCountAt, v,
                {"tokenizer.ggml.scores", "metadata key #"});

    const auto& t0 = l.tensors[0]; // token_embd.weight [64, 512]
    const std::vector<std::string> t0names = {t0.name, "embed_tokens", "tensor #0"};
    const auto& t1 = l.tensors[1];
    const auto& tl = l.tensors.back();
    for (std::uint32_t v : {0u, 9u, 0xFFFFFFFFu})
        patch32("gguf.lie.tensor", "ndims=" + std::to_string(v), t0.nDimsAt, v, t0names);
    for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{65}, std::uint64_t{1} << 62, max64})
        patch64("gguf.lie.tensor", "dim0=" + std::to_string(v), t0.dimsAt, v, t0names);
    {
        Bytes b = base; // 2^32 x 2^32 elements: the product overflows 64 bits
        putLE<std::uint64_t>(b, t0.dimsAt, std::uint64_t{1} << 32);
        putLE<std::uint64_t>(b, t0.dimsAt + 8, std::uint64_t{1} << 32);
        x.add("gguf.lie.tensor", "dims-overflow.gguf", b, "dims 2^32 x 2^32", Expect::Refuse,
              t0names);
    }
    for (std::uint32_t v : {77u, 12u, 1u})
        patch32("gguf.lie.tensor", "type=" + std::to_string(v), t0.typeAt, v, t0names);
    for (std::uint32_t v : {12u, 2u})
        patch32("gguf.lie.tensor", "type-last=" + std::to_string(v), tl.typeAt, v, {tl.name});
    const auto off1 = getLE<std::uint64_t>(base, t1.offsetAt);
    for (std::uint64_t v :
         {static_cast<std::uint64_t>(base.size()), max64, std::uint64_t{1}, off1, max64 - 31})
        patch64("gguf.lie.offset", "offset0=" + std::to_string(v), t0.offsetAt, v, t0names);
    patch64("gguf.lie.offset", "offset-last-past-end", tl.offsetAt,
            getLE<std::uint64_t>(base, tl.offsetAt) + 4096, {tl.name});

    // Two entries with one name: rename a key / tensor into an existing one of equal length.
    auto renameInto = [&](std::size_t lenAt, const std::string& from, const std::string& to,
                          const std::string& tag) {
        Bytes b = base;
        if (from.size() == to.size())
            std::memcpy(b.data() + lenAt + 8, to.data(), to.size());
        x.add("gguf.duplicate", tag + ".gguf", b, "'" + from + "' renamed '" + to + "'",
              Expect::Refuse, {to});
    };
    std::map<std::size_t, const GgufLayout::Kv*> byLen;
    for (const auto& kv : l.kvs) {
        if (auto it = byLen.find(kv.key.size()); it != byLen.end()) {
            renameInto(kv.keyLenAt, kv.key, it->second->key, "duplicate-key");
            break;
        }
        byLen[kv.key.size()] = &kv;
    }
    for (const auto& t : l.tensors)
        if (t.name == "blk.0.attn_v.weight")
            renameInto(t.nameLenAt, t.name, "blk.0.attn_k.weight", "duplicate-tensor");
}

// Rewrites the model through gguf::File + gguf::Writer with one change.
struct Rewrite {
    const gguf::File& src;
    std::map<std::string, std::optional<gguf::Value>> set; // nullopt: drop the key
    std::vector<std::string> dropTensors;
    std::function<void(gguf::Writer&)> extraTensors;
    std::function<bool(const gguf::TensorInfo&, gguf::Writer&)> tensorOverride;
    std::uint32_t alignment = 32;

    Bytes bytes() const {
        gguf::Writer w(alignment);
        for (const auto& [k, v] : src.metadata()) {
            auto it = set.find(k);
            if (it == set.end())
                w.set(k, v);
            else if (it->second)
                w.set(k, *it->second);
        }
        for (const auto& [k, v] : set)
            if (v && !src.has(k))
                w.set(k, *v);
        for (const auto& t : src.tensors()) {
            if (std::find(dropTensors.begin(), dropTensors.end(), t.name) != dropTensors.end())
                continue;
            if (tensorOverride && tensorOverride(t, w))
                continue;
            w.addTensor(t.name, t.dims, t.type, src.readRaw(t));
        }
        if (extraTensors)
            extraTensors(w);
        return w.toBytes();
    }
};

void semanticCases(Ctx& x) {
    auto opened = gguf::File::open(x.c.bases().gguf);
    if (!opened)
        throw std::runtime_error(opened.message());
    const gguf::File& src = opened.value();
    using V = gguf::Value;
    auto u32 = [](std::uint32_t v) { return V::scalar<std::uint32_t>(v); };
    auto u64 = [](std::uint64_t v) { return V::scalar<std::uint64_t>(v); };
    auto f32 = [](float v) { return V::scalar<float>(v); };
    auto str = [](std::string s) { return V::string(std::move(s)); };

    struct KeyCase {
        std::string tag, key;
        std::optional<V> value;
        Expect expect;
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<KeyCase> keyCases = {
        {"heads=7", "llama.attention.head_count", u32(7), Expect::Refuse},
        {"heads=2^31", "llama.attention.head_count", u32(1u << 31), Expect::Refuse},
        {"heads=64", "llama.attention.head_count", u32(64), Expect::Refuse},
        {"kvheads=3", "llama.attention.head_count_kv", u32(3), Expect::Refuse},
        {"kvheads=0", "llama.attention.head_count_kv", u32(0), Expect::Refuse},
        {"kvheads=16", "llama.attention.head_count_kv", u32(16), Expect::Refuse},
        {"kvheads-missing", "llama.attention.head_count_kv", std::nullopt, Expect::Either},
        {"embd=63", "llama.embedding_length", u32(63), Expect::Refuse},
        {"ctx=0", "llama.context_length", u32(0), Expect::Refuse},
        {"ctx=1", "llama.context_length", u32(1), Expect::Either},
        {"ctx=2^40", "llama.context_length", u64(std::uint64_t{1} << 40), Expect::Either},
        {"ctx=2^64-1", "llama.context_length", u64(~std::uint64_t{0}), Expect::Refuse},
        {"blocks=6", "llama.block_count", u32(6), Expect::Refuse},
        {"blocks=1024", "llama.block_count", u32(1024), Expect::Refuse},
        {"ropedim=7", "llama.rope.dimension_count", u32(7), Expect::Refuse},
        {"ropedim=1000", "llama.rope.dimension_count", u32(1000), Expect::Refuse},
        {"ropedim=6", "llama.rope.dimension_count", u32(6), Expect::Either},
        {"ffn=0", "llama.feed_forward_length", u32(0), Expect::Refuse},
        {"eps=nan", "llama.attention.layer_norm_rms_epsilon", f32(nan), Expect::Refuse},
        {"eps=-1", "llama.attention.layer_norm_rms_epsilon", f32(-1), Expect::Either},
        {"theta=0", "llama.rope.freq_base", f32(0), Expect::Refuse},
        {"theta=nan", "llama.rope.freq_base", f32(nan), Expect::Refuse},
        {"theta=inf", "llama.rope.freq_base", f32(inf), Expect::Refuse},
        {"rope-scaling=yarn-0", "llama.rope.scaling.factor", f32(0), Expect::Either},
        {"arch=gpt2", "general.architecture", str("gpt2"), Expect::Refuse},
        {"arch-u32", "general.architecture", u32(1), Expect::Refuse},
        {"arch-missing", "general.architecture", std::nullopt, Expect::Refuse},
        {"tokmodel=bert", "tokenizer.ggml.model", str("bert"), Expect::Either},
        {"tokens-missing", "tokenizer.ggml.tokens", std::nullopt, Expect::Either},
        {"tokens-u32", "tokenizer.ggml.tokens", V::array(std::vector<std::uint32_t>(512, 7u)),
         Expect::Either},
        {"tokens-10", "tokenizer.ggml.tokens",
         V::stringArray({"<unk>", "<s>", "</s>", "a", "b", "c", "d", "e", "f", "g"}),
         Expect::Either},
        {"tokens-empty", "tokenizer.ggml.tokens", V::stringArray({}), Expect::Either},
        {"scores-nan", "tokenizer.ggml.scores", V::array(std::vector<float>(512, nan)),
         Expect::Either},
        {"scores-short", "tokenizer.ggml.scores", V::array(std::vector<float>(5, 0.0f)),
         Expect::Either},
        {"tokentype-99", "tokenizer.ggml.token_type", V::array(std::vector<std::int32_t>(512, 99)),
         Expect::Either},
        {"tokentype-short", "tokenizer.ggml.token_type", V::array(std::vector<std::int32_t>(3, 1)),
         Expect::Either},
        {"bos=100000", "tokenizer.ggml.bos_token_id", u32(100000), Expect::Either},
        {"template-fanout", "tokenizer.chat_template",
         str("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s "
             "%}{% endfor %}{{ ns.s }}"),
         Expect::Either},
    };
    // What an error about a key may call it: the key's last part or the engine's name.
    const std::map<std::string, std::vector<std::string>> synonyms = {
        {"head_count", {"n_heads", "heads"}},
        {"head_count_kv", {"n_kv_heads", "kv heads", "kv_heads"}},
        {"embedding_length", {"dim", "hidden"}},
        {"context_length", {"context"}},
        {"block_count", {"layers"}},
        {"dimension_count", {"rope", "head_dim"}},
        {"feed_forward_length", {"ffn", "hidden_dim"}},
        {"layer_norm_rms_epsilon", {"eps"}},
        {"freq_base", {"theta"}},
        {"factor", {"scaling"}},
        {"architecture", {"arch"}},
        {"model", {"tokenizer"}},
        {"tokens", {"tokenizer", "vocab"}},
        {"scores", {"tokenizer"}},
        {"token_type", {"tokenizer"}},
        {"bos_token_id", {"bos"}},
        {"eos_token_id", {"eos"}},
        {"chat_template", {"template"}}};
    for (const auto& k : keyCases) {
        Rewrite r{src, {{k.key, k.value}}, {}, {}, {}};
        const std::string leaf = k.key.substr(k.key.rfind('.') + 1);
        std::vector<std::string> fields = {leaf};
        if (auto it = synonyms.find(leaf); it != synonyms.end())
            fields.insert(fields.end(), it->second.begin(), it->second.end());
        fields.push_back("tensor '"); // a weight whose shape disagrees is named instead
        if (!k.value)
            fields.clear(); // a missing key shows up as whatever needs it
        const bool vocab = k.key.rfind("tokenizer.", 0) == 0;
        x.add("gguf.semantic", k.tag + ".gguf", r.bytes(), k.key + ": " + k.tag, k.expect, fields,
              vocab ? (x.rot++ % 2 ? "tokenize" : "generate") : std::string());
        if (k.tag == "ctx=2^40" || k.tag == "ropedim=6" || k.tag == "heads=64")
            x.add("gguf.semantic", k.tag + "-gen.gguf", r.bytes(), k.key + ": " + k.tag, k.expect,
                  fields, "generate");
    }
    for (std::uint32_t a : {0u, 3u, 1u << 31, 1u, 64u}) {
        Rewrite r{src, {{"general.alignment", u32(a)}}, {}, {}, {}};
        r.alignment = a == 0 || a == 3 || a == (1u << 31) ? 32 : a;
        x.add("gguf.semantic", "alignment=" + std::to_string(a) + ".gguf", r.bytes(),
              "general.alignment " + std::to_string(a),
              a == 1 || a == 64 ? Expect::Either : Expect::Refuse, {"alignment"});
    }
    // Tensors: missing, renamed, wrong shape with matching bytes, unsupported types.
    std::size_t tc = 0;
    auto tensorCase = [&](const std::string& tag, Rewrite r, Expect e,
                          std::vector<std::string> fields) {
        x.add("gguf.tensors", tag + ".gguf", r.bytes(), tag, e, std::move(fields),
              tc++ % 2 ? "info" : "generate");
    };
    tensorCase("missing-attn_q", Rewrite{src, {}, {"blk.0.attn_q.weight"}, {}, {}}, Expect::Refuse,
               {"attn_q", "q_proj"});
    tensorCase("missing-output_norm", Rewrite{src, {}, {"output_norm.weight"}, {}, {}},
               Expect::Refuse, {"output_norm", "model.norm"});
    tensorCase("extra-tensor",
               Rewrite{src,
                       {},
                       {},
                       [](gguf::Writer& w) {
                           std::vector<float> z(32, 0.0f);
                           w.addTensor("blk.99.attn_q.weight", {32}, z);
                       },
                       {}},
               Expect::Either, {});
    auto reshape = [&](const std::string& name, std::vector<std::int64_t> dims) {
        return [name, dims](const gguf::TensorInfo& t, gguf::Writer& w) {
            if (t.name != name)
                return false;
            std::int64_t n = 1;
            for (auto d : dims)
                n *= d;
            w.addTensor(t.name, dims, std::vector<float>(static_cast<std::size_t>(n), 0.01f));
            return true;
        };
    };
    tensorCase("attn_q-64x65", Rewrite{src, {}, {}, {}, reshape("blk.0.attn_q.weight", {64, 65})},
               Expect::Refuse, {"attn_q", "q_proj"});
    tensorCase("embd-3d", Rewrite{src, {}, {}, {}, reshape("token_embd.weight", {64, 8, 64})},
               Expect::Refuse, {"token_embd", "embed_tokens"});
    tensorCase("norm-scalar", Rewrite{src, {}, {}, {}, reshape("output_norm.weight", {})},
               Expect::Refuse, {"output_norm", "model.norm"});
    auto retype = [](const std::string& name, gguf::TensorType type) {
        return [=](const gguf::TensorInfo& t, gguf::Writer& w) {
            if (!name.empty() && t.name != name)
                return false;
            const auto traits = gguf::typeTraits(type);
            if (t.dims.empty() || t.dims[0] % traits->blockSize != 0)
                return false; // this type cannot describe the tensor: keep it as it was
            const auto n = static_cast<std::size_t>(t.elementCount());
            w.addTensor(
                t.name, t.dims, type,
                std::vector<std::uint8_t>(n / traits->blockSize * traits->blockBytes, 0x11));
            return true;
        };
    };
    tensorCase("embd-q5_0",
               Rewrite{src, {}, {}, {}, retype("token_embd.weight", gguf::TensorType::Q5_0)},
               Expect::Refuse, {"token_embd", "Q5_0"});
    tensorCase("all-q8_0-garbage", Rewrite{src, {}, {}, {}, retype("", gguf::TensorType::Q8_0)},
               Expect::Either, {});
    tensorCase("all-i32", Rewrite{src, {}, {}, {}, retype("", gguf::TensorType::I32)},
               Expect::Refuse, {"I32", "type"});
    tensorCase("all-f16-garbage", Rewrite{src, {}, {}, {}, retype("", gguf::TensorType::F16)},
               Expect::Either, {});
}

} // namespace

void addGgufCases(Corpus& c) {
    Ctx x{c};
    const Bytes base = readAll(c.bases().gguf);
    binaryCases(x, base);
    semanticCases(x);
}

} // namespace kvscope::hostile
