// llama2.c checkpoints (7 x int32 header + f32 weights, core/engine/loadllama2c.cpp) and
// llama2.c tokenizer.bin files (max_token_length, then score/length/bytes per token).
#include "families.h"

#include <cmath>
#include <limits>

namespace kvscope::hostile {

namespace {

const char* const kHeaderFields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                      "n_kv_heads", "vocab_size", "seq_len"};

struct Header {
    std::int32_t dim, hidden, layers, heads, kvHeads, vocab, seqLen;
};

// A complete checkpoint whose size matches its header (so the loader gets past the size
// check); weights small and deterministic unless `fill` says otherwise.
Bytes makeLlama2c(const Header& h, Corpus& c, float fill = 0.0f, bool useFill = false) {
    const std::int64_t C = h.dim, F = h.hidden, L = h.layers, hd = h.dim / std::max(1, h.heads);
    const std::int64_t kvDim = h.kvHeads * hd;
    const std::int64_t V = std::abs(static_cast<std::int64_t>(h.vocab));
    const bool shared = h.vocab > 0;
    const std::int64_t floats = V * C + L * C + L * C * C + 2 * L * C * kvDim + L * C * C + L * C +
                                3 * L * C * F + C + h.seqLen * hd + (shared ? 0 : V * C);
    Bytes b;
    for (std::int32_t v : {h.dim, h.hidden, h.layers, h.heads, h.kvHeads, h.vocab, h.seqLen})
        appendLE<std::int32_t>(b, v);
    b.resize(28 + static_cast<std::size_t>(floats) * 4);
    float* w = reinterpret_cast<float*>(b.data() + 28);
    for (std::int64_t i = 0; i < floats; ++i)
        w[i] = useFill ? fill : (static_cast<float>(c.below(2001)) - 1000.0f) * 2e-5f + 0.01f;
    return b;
}

// `pairedWithTokenizer`: the model loads, so an error may be about the pair (the tokenizer
// beside it does not fit the model) and may name either file.
void addModelFile(Corpus& c, const std::string& family, const std::string& name, const Bytes& model,
                  const std::string& command, Expect expect, const std::string& note,
                  std::vector<std::string> fields = {}, bool pairedWithTokenizer = false) {
    const auto dir = c.newCaseDir();
    const auto path = dir / name;
    writeAll(path, model);
    fs::copy_file(c.bases().llama2cTok, dir / "tokenizer.bin");
    std::vector<std::string> names = {name};
    if (pairedWithTokenizer)
        names.push_back("tokenizer.bin");
    addCase(c, dir,
            {family, "llama2c", modelArgs(command, path.string(), c.bases(), dir), expect,
             std::move(names), std::move(fields), path.string(), note});
}

void addTokenizerFile(Corpus& c, const std::string& family, const std::string& name,
                      const Bytes& tok, int variant, Expect expect, const std::string& note,
                      std::vector<std::string> fields = {}) {
    const auto dir = c.newCaseDir();
    const auto path = dir / name;
    writeAll(path, tok);
    std::vector<std::string> args;
    switch (variant % 4) {
    case 0:
        args = {"tokenize", "-t", path.string(), "--text", "Once upon a time, a cat \xc3\xa9!"};
        break;
    case 1: // found beside the model: the model is a link in the case folder
        fs::create_symlink(c.bases().llama2c, dir / "model.bin");
        fs::rename(path, dir / "tokenizer.bin");
        args = modelArgs("generate", (dir / "model.bin").string(), c.bases(), dir);
        addCase(c, dir,
                {family,
                 "llama2c-tokenizer",
                 args,
                 expect,
                 {"tokenizer.bin"},
                 std::move(fields),
                 (dir / "tokenizer.bin").string(),
                 note + " (found beside the model)"});
        return;
    case 2:
        args = {"info", "-m", c.bases().llama2c, "-t", path.string()};
        break;
    default:
        args = {"logits", "-m", c.bases().llama2c, "-t", path.string(), "-p", "Once upon a time"};
        break;
    }
    addCase(
        c, dir,
        {family, "llama2c-tokenizer", args, expect, {}, std::move(fields), path.string(), note});
}

void modelCases(Corpus& c) {
    const Bytes base = readAll(c.bases().llama2c);
    const auto& cmds = modelCommands();
    std::size_t rot = 0;
    auto nextCmd = [&] { return cmds[rot++ % cmds.size()]; };

    // Truncations: header fields, the end of the embedding table, the end of the weights.
    const std::size_t embEnd = 28 + 512 * 64 * 4;
    for (std::size_t at : truncationPoints(base.size(), {28, embEnd, base.size() - 512 * 4}, 14)) {
        Bytes b(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(at));
        addModelFile(c, "llama2c.truncate", "trunc-" + std::to_string(at) + ".bin", b, nextCmd(),
                     Expect::Refuse, "cut to " + std::to_string(at) + " bytes");
    }
    // Appended bytes: the size check must notice.
    {
        Bytes b = base;
        b.insert(b.end(), 4, 0);
        addModelFile(c, "llama2c.truncate", "appended.bin", b, "info", Expect::Refuse,
                     "4 bytes appended");
    }

    // Header lies at the original file size.
    // 0, -1 and INT32_MAX in every field; INT32_MIN and 2^24+1 in every other one.
    const std::int32_t values[] = {0, -1, std::numeric_limits<std::int32_t>::max(),
                                   std::numeric_limits<std::int32_t>::min(), (1 << 24) + 1};
    for (int f = 0; f < 7; ++f)
        for (int vi = 0; vi < 5; ++vi) {
            if (vi >= 3 && (f + vi) % 2)
                continue;
            const std::int32_t v = values[vi];
            Bytes b = base;
            putLE<std::int32_t>(b, 4 * static_cast<std::size_t>(f), v);
            addModelFile(c, "llama2c.header",
                         std::string(kHeaderFields[f]) + "=" + std::to_string(v) + ".bin", b,
                         nextCmd(), Expect::Refuse,
                         std::string("header ") + kHeaderFields[f] + " = " + std::to_string(v),
                         {kHeaderFields[f]});
        }
    // Bit flips: a high and a middle bit of every header field, then exponent bits of weights.
    for (int f = 0; f < 7; ++f)
        for (int bit : {f % 2 ? 12 : 30}) {
            Bytes b = base;
            b[4 * f + bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
            addModelFile(c, "llama2c.bitflip",
                         "flip-" + std::string(kHeaderFields[f]) + "-" + std::to_string(bit) +
                             ".bin",
                         b, nextCmd(), Expect::Refuse,
                         std::string("bit ") + std::to_string(bit) + " of " + kHeaderFields[f]);
        }
    for (int i = 0; i < 6; ++i) {
        Bytes b = base;
        const std::size_t fl = 28 + 4 * c.below((base.size() - 28) / 4);
        b[fl + 3] ^= 0x40; // exponent MSB: 0.01 becomes ~3e36, -0.0 stays finite
        if (i % 2)
            putLE<std::uint32_t>(b, fl, 0x7fc00000u); // NaN
        addModelFile(c, "llama2c.bitflip", "weight-" + std::to_string(fl) + ".bin", b,
                     i % 2 ? "generate" : "logits", Expect::Either,
                     std::string(i % 2 ? "NaN" : "exponent bit flipped") + " in the float at " +
                         std::to_string(fl));
    }

    // Consistent headers (size matches) that describe impossible or extreme models.
    struct Shape {
        const char* name;
        Header h;
        Expect expect;
        const char* field;
    };
    const Shape shapes[] = {
        {"heads-not-dividing-dim", {64, 172, 1, 7, 7, 512, 16}, Expect::Refuse, "n_heads"},
        {"kv-not-dividing-heads", {64, 172, 1, 8, 3, 512, 16}, Expect::Refuse, "n_kv_heads"},
        {"kv-more-than-heads", {64, 172, 1, 4, 8, 512, 16}, Expect::Refuse, "n_kv_heads"},
        {"odd-head-dim", {24, 32, 1, 8, 8, 512, 16}, Expect::Refuse, "n_heads"},
        {"head-dim-2", {16, 16, 1, 8, 8, 512, 16}, Expect::Either, ""},
        {"context-1", {16, 16, 1, 2, 2, 512, 1}, Expect::Either, ""},
        {"context-1M", {2, 2, 1, 1, 1, 512, 1000000}, Expect::Either, ""},
        {"vocab-1M", {2, 2, 1, 1, 1, 1000000, 16}, Expect::Either, ""},
        {"vocab-3", {16, 16, 1, 2, 2, 3, 16}, Expect::Either, ""},
        {"vocab-600", {16, 16, 1, 2, 2, 600, 16}, Expect::Either, ""},
        {"unshared-classifier", {16, 16, 1, 2, 2, -512, 16}, Expect::Either, ""},
        {"1024-layers", {2, 2, 1024, 1, 1, 512, 16}, Expect::Either, ""},
        {"hidden-1", {16, 1, 1, 2, 2, 512, 16}, Expect::Either, ""},
    };
    std::size_t n = 0;
    for (const auto& s : shapes)
        for (const char* cmd : {"generate", "verify"}) {
            // verify (a stories260K snapshot against this model) for every third valid shape
            if (std::string(cmd) == "verify" && (s.expect == Expect::Refuse || n++ % 3))
                continue;
            addModelFile(c, "llama2c.shape", std::string(s.name) + ".bin", makeLlama2c(s.h, c), cmd,
                         std::string(cmd) == "verify" ? Expect::Either : s.expect,
                         std::string("consistent header: ") + s.name,
                         s.field[0] ? std::vector<std::string>{s.field}
                                    : std::vector<std::string>{},
                         s.expect != Expect::Refuse);
        }
    const Header small{16, 16, 1, 2, 2, 512, 16};
    const std::pair<const char*, float> fills[] = {{"nan", std::numeric_limits<float>::quiet_NaN()},
                                                   {"inf", std::numeric_limits<float>::infinity()},
                                                   {"huge", 3e38f},
                                                   {"denormal", 1e-40f},
                                                   {"zero", 0.0f}};
    for (const auto& [name, v] : fills)
        for (const char* cmd : {"generate", "induction"})
            addModelFile(c, "llama2c.values", std::string("weights-") + name + ".bin",
                         makeLlama2c(small, c, v, true), cmd,
                         std::string(name) == "nan" || std::string(name) == "inf" ? Expect::Refuse
                                                                                  : Expect::Either,
                         std::string("every weight ") + name);
    {
        Bytes b = base;
        std::memcpy(b.data(), "ak42", 4);
        addModelFile(c, "llama2c.header", "ak42.bin", b, "info", Expect::Refuse,
                     "llama2.c version-1 magic");
    }
}

Bytes tokenizerBytes(int maxLen, const std::vector<std::pair<float, std::string>>& pieces) {
    Bytes b;
    appendLE<std::int32_t>(b, maxLen);
    for (const auto& [score, s] : pieces) {
        appendLE<float>(b, score);
        appendLE<std::int32_t>(b, static_cast<std::int32_t>(s.size()));
        b.insert(b.end(), s.begin(), s.end());
    }
    return b;
}

void tokenizerCases(Corpus& c) {
    const Bytes base = readAll(c.bases().llama2cTok);
    // Offsets of every token's length field, walking the file.
    std::vector<std::size_t> lengthAt;
    for (std::size_t o = 4; o + 8 <= base.size();) {
        lengthAt.push_back(o + 4);
        o += 8 + static_cast<std::size_t>(getLE<std::int32_t>(base, o + 4));
    }
    int variant = 0;
    for (std::size_t at : truncationPoints(base.size(), {4, lengthAt[3], lengthAt[100]}, 10)) {
        Bytes b(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(at));
        addTokenizerFile(c, "tokbin.truncate", "tok-trunc-" + std::to_string(at) + ".bin", b,
                         variant++, Expect::Refuse, "cut to " + std::to_string(at) + " bytes");
    }
    for (std::int32_t v : {0, -1, 65537, std::numeric_limits<std::int32_t>::max(), 1}) {
        Bytes b = base;
        putLE<std::int32_t>(b, 0, v);
        addTokenizerFile(c, "tokbin.lie", "tok-maxlen-" + std::to_string(v) + ".bin", b, variant++,
                         Expect::Refuse, "max_token_length = " + std::to_string(v),
                         {"max_token_length"});
    }
    for (std::size_t k : {std::size_t{0}, std::size_t{100}, lengthAt.size() - 1})
        for (std::int32_t v : {-1, std::numeric_limits<std::int32_t>::max()}) {
            Bytes b = base;
            putLE<std::int32_t>(b, lengthAt[k], v);
            addTokenizerFile(c, "tokbin.lie",
                             "tok-len" + std::to_string(k) + "-" + std::to_string(v) + ".bin", b,
                             variant++, Expect::Refuse,
                             "token[" + std::to_string(k) + "].length = " + std::to_string(v),
                             {"token[" + std::to_string(k) + "]"});
        }
    // Legal but odd vocabularies: NaN scores, empty pieces, duplicates, only specials, long
    // pieces, many more tokens than the model has.
    std::vector<std::pair<float, std::string>> pieces;
    for (std::size_t o = 4; o + 8 <= base.size();) {
        const auto len = getLE<std::int32_t>(base, o + 4);
        pieces.emplace_back(getLE<float>(base, o),
                            std::string(reinterpret_cast<const char*>(base.data() + o + 8),
                                        static_cast<std::size_t>(len)));
        o += 8 + static_cast<std::size_t>(len);
    }
    auto variantOf = [&](const char* name, auto mutate, Expect e, int maxLen = 64) {
        auto p = pieces;
        mutate(p);
        addTokenizerFile(c, "tokbin.vocab", std::string("tok-") + name + ".bin",
                         tokenizerBytes(maxLen, p), variant++, e, name);
    };
    variantOf(
        "nan-scores",
        [](auto& p) {
            for (auto& x : p)
                x.first = NAN;
        },
        Expect::Either);
    variantOf(
        "inf-scores",
        [](auto& p) {
            for (auto& x : p)
                x.first = INFINITY;
        },
        Expect::Either);
    variantOf(
        "empty-pieces",
        [](auto& p) {
            for (auto& x : p)
                x.second.clear();
        },
        Expect::Either);
    variantOf(
        "all-duplicates",
        [](auto& p) {
            for (auto& x : p)
                x.second = "a";
        },
        Expect::Either);
    variantOf(
        "three-tokens", [](auto& p) { p.resize(3); }, Expect::Either);
    variantOf(
        "two-tokens", [](auto& p) { p.resize(2); }, Expect::Refuse);
    variantOf(
        "no-tokens", [](auto& p) { p.clear(); }, Expect::Refuse);
    variantOf(
        "invalid-utf8",
        [](auto& p) {
            for (std::size_t i = 3; i < p.size(); ++i)
                p[i].second += "\xff\xc0";
        },
        Expect::Either);
    variantOf(
        "100k-tokens",
        [](auto& p) {
            for (int i = 0; p.size() < 100000; ++i)
                p.emplace_back(static_cast<float>(-i), std::to_string(i) + "w");
        },
        Expect::Either);
    variantOf(
        "long-pieces",
        [](auto& p) {
            p.resize(100);
            for (std::size_t i = 3; i < p.size(); ++i)
                p[i].second = std::string(60000, static_cast<char>('a' + i % 26));
        },
        Expect::Either, 65536);
    variantOf(
        "merge-chain",
        [](auto& p) {
            // Every prefix of "aaaa..." is a token with a rising score: a long merge chain.
            p.resize(3);
            for (int i = 1; i <= 2000; ++i)
                p.emplace_back(static_cast<float>(i),
                               std::string(static_cast<std::size_t>(i), 'a'));
        },
        Expect::Either, 4096);
}

} // namespace

void addLlama2cCases(Corpus& c) {
    modelCases(c);
    tokenizerCases(c);
}

} // namespace kvscope::hostile
