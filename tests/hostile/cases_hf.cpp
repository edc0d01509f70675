// Hugging Face folders (made by `kvscope-cli convert`): model.safetensors (header length,
// JSON header, dtypes, shapes, offsets), config.json (head counts, context, RoPE, types),
// tokenizer.json (model, vocab, merges, regexes, nesting) and tokenizer_config.json.
// Each case is a folder holding links to the valid files and one damaged file.
#include "families.h"
#include "jsonbomb.h"

#include <limits>
#include <map>

namespace kvscope::hostile {

namespace {

using ojson = nlohmann::ordered_json;

const char* const kHfFiles[] = {"config.json", "model.safetensors", "tokenizer.json",
                                "tokenizer_config.json", "generation_config.json"};

struct Ctx {
    Corpus& c;
    std::size_t rot = 0;

    // A model folder in a new case dir with `file` replaced by `content`.
    void add(const std::string& family, const std::string& reader, const std::string& tag,
             const std::string& file, const Bytes& content, const std::string& note,
             Expect e = Expect::Refuse, std::vector<std::string> fields = {},
             std::string cmd = {}) {
        const auto dir = c.newCaseDir();
        const auto model = dir / ("hf-" + tag);
        fs::create_directories(model);
        for (const char* f : kHfFiles)
            if (f != file && fs::exists(fs::path(c.bases().hf) / f))
                fs::create_symlink(fs::path(c.bases().hf) / f, model / f);
        writeAll(model / file, content);
        if (cmd.empty()) {
            static const std::vector<std::string> cmds = {"info",     "generate",   "logits",
                                                          "convert",  "verify",     "induction",
                                                          "continue", "transplant", "replay"};
            cmd = cmds[rot++ % cmds.size()];
        }
        std::vector<std::string> args =
            cmd == "tokenize" ? modelArgs(cmd, (model / file).string(), c.bases(), dir)
                              : modelArgs(cmd, model.string(), c.bases(), dir);
        // The folder is the path the user gave: naming it (or the file) names the input.
        addCase(c, dir,
                {family,
                 reader,
                 args,
                 e,
                 {file, model.filename().string()},
                 std::move(fields),
                 (model / file).string(),
                 note});
    }
    void addText(const std::string& family, const std::string& reader, const std::string& tag,
                 const std::string& file, const std::string& text, const std::string& note,
                 Expect e = Expect::Refuse, std::vector<std::string> fields = {},
                 std::string cmd = {}) {
        add(family, reader, tag, file, Bytes(text.begin(), text.end()), note, e, std::move(fields),
            std::move(cmd));
    }
};

// --- model.safetensors -------------------------------------------------------------------

Bytes assemble(const std::string& header, const Bytes& data, bool pad = true) {
    std::string h = header;
    if (pad)
        while (h.size() % 8)
            h += ' ';
    Bytes b(8 + h.size() + data.size());
    putLE<std::uint64_t>(b, 0, h.size());
    std::copy(h.begin(), h.end(), b.begin() + 8);
    std::copy(data.begin(), data.end(), b.begin() + 8 + static_cast<std::ptrdiff_t>(h.size()));
    return b;
}

void safetensorsCases(Ctx& x) {
    const Bytes base = readAll(fs::path(x.c.bases().hf) / "model.safetensors");
    const auto n = getLE<std::uint64_t>(base, 0);
    const std::string headerText(base.begin() + 8,
                                 base.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    const Bytes data(base.begin() + 8 + static_cast<std::ptrdiff_t>(n), base.end());
    const ojson header = ojson::parse(headerText);
    const std::string file = "model.safetensors";

    for (std::size_t at : truncationPoints(base.size(), {8, 8 + n / 2, 8 + n, 8 + n + 131072}, 10))
        x.add("safetensors.truncate", "safetensors", "trunc-" + std::to_string(at), file,
              Bytes(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(at)),
              "cut to " + std::to_string(at) + " bytes");
    for (int i = 0; i < 6; ++i) {
        Bytes b = base;
        const std::size_t at = 8 + x.c.below(n);
        b[at] ^= static_cast<std::uint8_t>(1u << x.c.below(8));
        x.add("safetensors.bitflip", "safetensors", "flip-" + std::to_string(at), file, b,
              "bit flip in the JSON header at " + std::to_string(at), Expect::Either);
    }
    const std::uint64_t lengths[] = {
        0, 1, 7, n - 1, base.size(), base.size() - 7, ~0ull, 1ull << 63, 100'000'001};
    for (std::uint64_t v : lengths) {
        Bytes b = base;
        putLE<std::uint64_t>(b, 0, v);
        x.add("safetensors.headerlen", "safetensors", "hlen-" + std::to_string(v), file, b,
              "header length " + std::to_string(v), Expect::Refuse, {"header"});
    }

    // Edits of the first tensor's entry (model.embed_tokens.weight [512, 64] F32).
    const std::string t0 = "model.embed_tokens.weight";
    auto edit = [&](const std::string& tag, const std::string& field, ojson value,
                    Expect e = Expect::Refuse) {
        ojson h = header;
        if (field.empty())
            h[t0] = value;
        else
            h[t0][field] = value;
        x.add("safetensors.header", "safetensors", tag, file, assemble(h.dump(), data),
              t0 + (field.empty() ? "" : "." + field) + " = " + value.dump(), e, {t0});
    };
    edit("dtype-F4", "dtype", "F4");
    edit("dtype-number", "dtype", 12);
    edit("dtype-BF16", "dtype", "BF16");
    edit("dtype-I64", "dtype", "I64");
    edit("shape-negative", "shape", {-1, 64});
    edit("shape-huge", "shape", {1LL << 62, 4});
    edit("shape-overflow", "shape", {1LL << 32, 1LL << 32});
    edit("shape-string", "shape", "512,64");
    edit("shape-512x65", "shape", {512, 65});
    edit("shape-33-dims", "shape", std::vector<int>(33, 1));
    edit("offsets-reversed", "data_offsets", {131072, 0});
    edit("offsets-past-end", "data_offsets", {0, data.size() + 1000});
    edit("offsets-negative", "data_offsets", {-8, 131064});
    edit("offsets-overlap", "data_offsets", {256, 131328});
    edit("offsets-misaligned", "data_offsets", {1, 131073});
    edit("entry-string", "", "x");
    edit("entry-empty", "", ojson::object());

    auto whole = [&](const std::string& tag, const std::string& text, const std::string& note,
                     Expect e = Expect::Refuse, bool pad = true) {
        x.add("safetensors.header", "safetensors", tag, file, assemble(text, data, pad), note, e);
    };
    whole("header-array", "[]", "header is an array");
    whole("header-null", "null", "header is null");
    whole("header-empty-object", "{}", "no tensors at all");
    whole("header-invalid-json", headerText.substr(0, n / 2), "header JSON cut in half",
          Expect::Refuse, false);
    whole("header-nul-padding", header.dump() + std::string(8 - header.dump().size() % 8, '\0'),
          "NUL padding after the JSON", Expect::Either, false);
    whole("header-trailing", header.dump() + " garbage", "text after the JSON object");
    whole("header-bad-utf8", "{\"\xff\xfe\":" + header.dump().substr(1), "invalid UTF-8 key");
    {
        std::string dup = header.dump();
        const std::string entry = "\"" + t0 + "\":" + header[t0].dump();
        dup.insert(1, entry + ",");
        whole("duplicate-tensor", dup, "the first tensor listed twice", Expect::Either);
    }
    {
        ojson h = header;
        h["__metadata__"] = {{"format", 123}};
        whole("metadata-number", h.dump(), "__metadata__ value is a number", Expect::Either);
        h["__metadata__"] = ojson::array();
        whole("metadata-array", h.dump(), "__metadata__ is an array", Expect::Either);
    }
    {
        std::string h = header.dump();
        h.insert(1, "\"__metadata__x\":" + deepArrays(100000) + ",");
        whole("deep-nesting", h, "an entry nested 100,000 levels deep");
    }
    {
        ojson h = header;
        for (int i = 0; i < 60000; ++i)
            h["extra." + std::to_string(i)] = {
                {"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
        whole("60k-empty-tensors", h.dump(), "60,000 extra zero-size tensors", Expect::Either);
    }
}

// --- config.json -------------------------------------------------------------------------

void configCases(Ctx& x) {
    const ojson base = ojson::parse(readAll(fs::path(x.c.bases().hf) / "config.json"));
    const std::string file = "config.json";
    struct Edit {
        std::string tag, key;
        ojson value; // discarded() = remove the key
        Expect expect;
    };
    const double inf = std::numeric_limits<double>::infinity();
    (void)inf;
    std::vector<Edit> edits = {
        {"hidden-63", "hidden_size", 63, Expect::Refuse},
        {"hidden-0", "hidden_size", 0, Expect::Refuse},
        {"heads-7", "num_attention_heads", 7, Expect::Refuse},
        {"heads-0", "num_attention_heads", 0, Expect::Refuse},
        {"kv-3", "num_key_value_heads", 3, Expect::Refuse},
        {"kv-0", "num_key_value_heads", 0, Expect::Refuse},
        {"headdim-7", "head_dim", 7, Expect::Refuse},
        {"headdim-16", "head_dim", 16, Expect::Refuse},
        {"ctx-0", "max_position_embeddings", 0, Expect::Refuse},
        {"ctx-2^40", "max_position_embeddings", 1LL << 40, Expect::Either},
        {"vocab-513", "vocab_size", 513, Expect::Refuse},
        {"vocab-2^40", "vocab_size", 1LL << 40, Expect::Refuse},
        {"layers-0", "num_hidden_layers", 0, Expect::Either},
        {"layers-1e9", "num_hidden_layers", 1000000000, Expect::Refuse},
        {"ffn-0", "intermediate_size", 0, Expect::Refuse},
        {"eps-negative", "rms_norm_eps", -1.0, Expect::Either},
        {"theta-0", "rope_theta", 0.0, Expect::Refuse},
        {"theta-negative", "rope_theta", -10000.0, Expect::Refuse},
        {"scaling-linear-0", "rope_scaling", {{"type", "linear"}, {"factor", 0}}, Expect::Refuse},
        {"scaling-llama3-partial", "rope_scaling", {{"rope_type", "llama3"}}, Expect::Refuse},
        {"scaling-yarn-negative",
         "rope_scaling",
         {{"rope_type", "yarn"}, {"factor", -2.0}},
         Expect::Refuse},
        {"scaling-unknown",
         "rope_scaling",
         {{"rope_type", "warp"}, {"factor", 2.0}},
         Expect::Refuse},
        {"modeltype-gpt2", "model_type", "gpt2", Expect::Refuse},
        {"arch-empty", "architectures", ojson::array(), Expect::Either},
        {"arch-number", "architectures", {123}, Expect::Refuse},
        {"arch-unknown", "architectures", {"MambaForCausalLM"}, Expect::Refuse},
        {"tie-string", "tie_word_embeddings", "yes", Expect::Refuse},
        {"eos-negative", "eos_token_id", -5, Expect::Either},
        {"act-unknown", "hidden_act", "swishy", Expect::Refuse},
    };
    // The engine's names for the keys (ModelConfig), which an error may use instead.
    const std::map<std::string, std::vector<std::string>> synonyms = {
        {"hidden_size", {"dim"}},
        {"num_attention_heads", {"n_heads", "heads"}},
        {"num_key_value_heads", {"n_kv_heads", "kv heads"}},
        {"head_dim", {"head dim"}},
        {"max_position_embeddings", {"max_context", "context"}},
        {"vocab_size", {"vocab"}},
        {"num_hidden_layers", {"n_layers", "layers"}},
        {"intermediate_size", {"hidden_dim", "ffn"}},
        {"rms_norm_eps", {"norm_eps", "eps"}},
        {"rope_theta", {"theta"}},
        {"rope_scaling", {"scaling"}},
        {"model_type", {"model type"}},
        {"architectures", {"architecture"}},
        {"torch_dtype", {"dtype"}},
        {"tie_word_embeddings", {"tied"}},
        {"bos_token_id", {"bos"}},
        {"eos_token_id", {"eos"}},
        {"hidden_act", {"activation"}}};
    for (const auto& e : edits) {
        ojson j = base;
        j[e.key] = e.value;
        std::vector<std::string> fields = {e.key};
        if (auto it = synonyms.find(e.key); it != synonyms.end())
            fields.insert(fields.end(), it->second.begin(), it->second.end());
        fields.push_back("tensor '"); // a weight whose shape disagrees is named instead
        x.addText("hf.config", "hf-config", e.tag, file, j.dump(2), e.key + " = " + e.value.dump(),
                  e.expect, fields);
    }
    for (const char* key : {"num_attention_heads", "vocab_size"}) {
        ojson j = base;
        j.erase(key);
        x.addText("hf.config", "hf-config", std::string("missing-") + key, file, j.dump(2),
                  std::string(key) + " removed", Expect::Either, {key});
    }
    x.addText("hf.config", "hf-config", "not-object", file, "[1,2,3]", "config is an array");
    x.addText("hf.config", "hf-config", "empty", file, "", "empty config.json");
    x.addText("hf.config", "hf-config", "truncated", file, base.dump(2).substr(0, 100),
              "config.json cut at 100 bytes");
    x.addText("hf.config", "hf-config", "nan-literal", file,
              "{\"hidden_size\": NaN, \"rope_theta\": Infinity}", "NaN literal (not JSON)");
    x.addText("hf.config", "hf-config", "deep-nesting", file,
              "{\"x\":" + deepObjects(100000) + "," + base.dump().substr(1),
              "an unknown key nested 100,000 levels deep");
    {
        std::string big = base.dump();
        big.insert(1, "\"x\":" + manyObjects(300000) + ",");
        x.addText("hf.config", "hf-config", "300k-objects", file, big,
                  "an unknown key holding 300,000 objects", Expect::Either);
    }
}

// --- tokenizer.json / tokenizer_config.json ----------------------------------------------

void tokenizerCases(Ctx& x) {
    const ojson base = ojson::parse(readAll(fs::path(x.c.bases().hf) / "tokenizer.json"));
    const std::string file = "tokenizer.json";
    auto add = [&](const std::string& tag, const ojson& j, const std::string& note, Expect e,
                   std::vector<std::string> fields, int variant) {
        x.addText("hf.tokenizer", "tokenizer-json", tag, file, j.dump(), note, e, std::move(fields),
                  variant % 2 ? "tokenize" : "generate");
    };
    int v = 0;
    auto modelEdit = [&](const std::string& tag, const std::string& key, ojson value, Expect e) {
        ojson j = base;
        j["model"][key] = value;
        add(tag, j, "model." + key + " = " + value.dump().substr(0, 60), e, {key}, v++);
    };
    modelEdit("model-type-unknown", "type", "Unigram2", Expect::Refuse);
    modelEdit("model-type-number", "type", 7, Expect::Refuse);
    modelEdit("vocab-array", "vocab", {1, 2, 3}, Expect::Refuse);
    modelEdit("vocab-empty", "vocab", ojson::object(), Expect::Refuse);
    {
        ojson vocab = base["model"]["vocab"];
        vocab["<0x41>"] = 1LL << 40;
        modelEdit("vocab-id-huge", "vocab", vocab, Expect::Refuse);
        vocab = base["model"]["vocab"];
        vocab["<0x41>"] = -7;
        modelEdit("vocab-id-negative", "vocab", vocab, Expect::Refuse);
        vocab = base["model"]["vocab"];
        vocab["<0x41>"] = "7";
        modelEdit("vocab-id-string", "vocab", vocab, Expect::Refuse);
        vocab = base["model"]["vocab"];
        for (auto& [k, id] : vocab.items())
            id = 5; // every token the same id
        modelEdit("vocab-same-id", "vocab", vocab, Expect::Either);
    }
    modelEdit("merges-unknown-tokens", "merges", {"zz qq", "qq zz"}, Expect::Either);
    modelEdit("merges-three-parts", "merges", {"a b c"}, Expect::Refuse);
    modelEdit("merges-number", "merges", {1, 2}, Expect::Refuse);
    modelEdit("unk-missing", "unk_token", "<nope>", Expect::Either);
    {
        ojson j = base;
        j["added_tokens"][0]["id"] = 1LL << 31;
        add("added-id-2^31", j, "added_tokens[0].id = 2^31", Expect::Refuse, {"added_tokens", "id"},
            v++);
        j = base;
        j["added_tokens"][0]["id"] = -1;
        add("added-id-negative", j, "added_tokens[0].id = -1", Expect::Refuse,
            {"added_tokens", "id"}, v++);
        j = base;
        j["added_tokens"][0]["content"] = "";
        add("added-empty", j, "added_tokens[0].content = \"\"", Expect::Either, {"added_tokens"},
            v++);
        j = base;
        j["added_tokens"] = "none";
        add("added-string", j, "added_tokens is a string", Expect::Refuse, {"added_tokens"}, v++);
    }
    auto section = [&](const std::string& tag, const std::string& key, ojson value, Expect e) {
        ojson j = base;
        j[key] = value;
        add(tag, j, key + " = " + value.dump().substr(0, 80), e, {key, "type"}, v++);
    };
    section("normalizer-unknown", "normalizer", {{"type", "Frobnicate"}}, Expect::Refuse);
    section("normalizer-replace-empty", "normalizer",
            {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "xx"}},
            Expect::Either);
    section("normalizer-replace-fanout", "normalizer",
            {{"type", "Sequence"},
             {"normalizers",
              std::vector<ojson>(
                  40, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "  "}})}},
            Expect::Either);
    section("normalizer-bad-regex", "normalizer",
            {{"type", "Replace"}, {"pattern", {{"Regex", "(("}}}, {"content", "x"}},
            Expect::Refuse);
    section("pretok-catastrophic", "pre_tokenizer",
            {{"type", "Split"},
             {"pattern", {{"Regex", "(a+)+$"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            Expect::Either);
    section("pretok-bad-regex", "pre_tokenizer",
            {{"type", "Split"}, {"pattern", {{"Regex", "[z-a]"}}}, {"behavior", "Isolated"}},
            Expect::Refuse);
    section("pretok-unknown", "pre_tokenizer", {{"type", "Mystery"}}, Expect::Refuse);
    section("decoder-unknown", "decoder", {{"type", "Mystery"}}, Expect::Refuse);
    section("postproc-missing-special", "post_processor",
            ojson::parse(R"({"type": "TemplateProcessing",
                             "single": [{"SpecialToken": {"id": "<nope>", "type_id": 0}},
                                        {"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [], "special_tokens": {}})"),
            Expect::Refuse);
    section("normalizer-deep", "normalizer", ojson::parse([] {
                std::string s;
                for (int i = 0; i < 3000; ++i)
                    s += "{\"type\":\"Sequence\",\"normalizers\":[";
                s += "{\"type\":\"Lowercase\"}";
                for (int i = 0; i < 3000; ++i)
                    s += "]}";
                return s;
            }()),
            Expect::Either);
    x.addText("hf.tokenizer", "tokenizer-json", "deep-nesting", file,
              "{\"x\":" + deepArrays(100000) + "," + base.dump().substr(1),
              "an unknown key nested 100,000 levels deep", Expect::Refuse, {}, "tokenize");
    x.addText("hf.tokenizer", "tokenizer-json", "not-object", file, "\"tokenizer\"",
              "tokenizer.json is a string", Expect::Refuse, {}, "tokenize");
    x.addText("hf.tokenizer", "tokenizer-json", "truncated", file, base.dump().substr(0, 5000),
              "cut at 5000 bytes", Expect::Refuse, {}, "generate");
    x.addText("hf.tokenizer", "tokenizer-json", "empty", file, "", "empty file", Expect::Refuse, {},
              "info");

    // tokenizer_config.json: chat templates that fan out, odd special-token entries.
    const ojson cfg = ojson::parse(readAll(fs::path(x.c.bases().hf) / "tokenizer_config.json"));
    auto cfgEdit = [&](const std::string& tag, const std::string& key, ojson value, Expect e,
                       std::string cmd) {
        ojson j = cfg;
        j[key] = value;
        x.addText("hf.tokenizer-config", "tokenizer-config", tag, "tokenizer_config.json", j.dump(),
                  key + " = " + value.dump().substr(0, 80), e, {key}, std::move(cmd));
    };
    cfgEdit("template-fanout", "chat_template",
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
            "{% endfor %}{{ ns.s }}",
            Expect::Either, "info");
    cfgEdit("template-number", "chat_template", 42, Expect::Either, "info");
    cfgEdit("template-list-bad", "chat_template", {{{"name", 1}}}, Expect::Either, "generate");
    cfgEdit("bos-object-number", "bos_token", {{"content", 123}}, Expect::Either, "generate");
    cfgEdit("bos-unknown", "bos_token", "<nope>", Expect::Either, "generate");
    cfgEdit("maxlen-huge", "model_max_length", 1e30, Expect::Either, "info");
    cfgEdit("addbos-string", "add_bos_token", "yes", Expect::Either, "generate");
    x.addText("hf.tokenizer-config", "tokenizer-config", "cfg-not-object", "tokenizer_config.json",
              "[]", "tokenizer_config.json is an array", Expect::Either, {}, "generate");
    x.addText("hf.tokenizer-config", "generation-config", "gencfg-types", "generation_config.json",
              "{\"bos_token_id\":\"x\",\"eos_token_id\":[[1]],\"temperature\":\"hot\"}",
              "generation_config.json with wrong types", Expect::Either, {}, "generate");
}

} // namespace

void addHfCases(Corpus& c) {
    Ctx x{c};
    safetensorsCases(x);
    configCases(x);
    tokenizerCases(x);
}

} // namespace kvscope::hostile
