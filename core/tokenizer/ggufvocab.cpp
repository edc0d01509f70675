// Tokenizers embedded in GGUF files (tokenizer.ggml.*): "llama" (SentencePiece by scores)
// and "gpt2" (byte-level BPE with merges and a pre-tokenizer chosen by tokenizer.ggml.pre).
#include "tokenizer/loaders.h"

#include "tokenizer/ggufspm.h"
#include "tokenizer/hftokenizer.h"
#include "tokenizer/unicode.h"

#include "util/hash.h"

#include "formats/gguf.h"

namespace kvscope::tok {

namespace {

using hf::Json;

// HF pre-tokenizer pipelines equivalent to the tokenizer.json of the model family that
// llama.cpp names in tokenizer.ggml.pre (llama-vocab.cpp keeps regex lists for the same).
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The letter class of deepseek-llm's tokenizer.json, escaped: several of its code points
// (e.g. U+1FD3, U+2126, U+212A) would be changed by an editor's Unicode normalization.
const char* const kDeepseekLlmLetters =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-"
    "\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-"
    "\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-"
    "\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";

Json split(const std::string& regex, const char* behavior = "Isolated") {
    return {{"type", "Split"},
            {"pattern", {{"Regex", regex}}},
            {"behavior", behavior},
            {"invert", false}};
}
Json byteLevel(bool useRegex) {
    return {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", useRegex}};
}
Json digits(bool individual) {
    return {{"type", "Digits"}, {"individual_digits", individual}};
}
Json sequence(std::initializer_list<Json> items) {
    Json list = Json::array();
    for (const auto& i : items)
        list.push_back(i);
    return {{"type", "Sequence"}, {"pretokenizers", list}};
}

struct PrePipeline {
    Json preTokenizer;
    Json normalizer; // null for none
    bool ignoreMerges = false;
};

PrePipeline prePipeline(const std::string& pre) {
    if (pre == "llama-bpe" || pre == "llama3" || pre == "dbrx" || pre == "smaug-bpe")
        return {sequence({split(kLlama3Regex), byteLevel(false)}), nullptr, pre != "dbrx"};
    if (pre == "qwen2" || pre == "deepseek-r1-qwen")
        return {sequence({split(kQwen2Regex), byteLevel(false)}), {{"type", "NFC"}}, false};
    if (pre == "falcon")
        return {sequence({{{"type", "Punctuation"}, {"behavior", "Contiguous"}},
                          byteLevel(true),
                          digits(false),
                          split("[0-9][0-9][0-9]")}),
                nullptr, false};
    if (pre == "deepseek-llm")
        return {sequence({split("[\r\n]"), split(kDeepseekLlmLetters),
                          split("\\s?[!-/"
                                ":-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{"
                                "3000}-\\x{3002}]+"),
                          split("\\s+$"),
                          split("[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"),
                          digits(true), byteLevel(false)}),
                nullptr, false};
    if (pre == "deepseek-coder")
        return {sequence({split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"),
                          split("[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"),
                          digits(true), byteLevel(false)}),
                nullptr, false};
    if (pre == "starcoder" || pre == "refact" || pre == "smollm" || pre == "command-r" ||
        pre == "codeshell" || pre == "exaone" || pre == "minerva-7b")
        return {sequence({digits(true), byteLevel(true)}), nullptr, false};
    if (pre == "mpt" || pre == "gpt-neox" || pre == "olmo")
        return {byteLevel(true), {{"type", "NFC"}}, false};
    // "default", "gpt-2", "jina-*", and files without tokenizer.ggml.pre: the GPT-2 regex.
    return {byteLevel(true), nullptr, false};
}

std::optional<int32_t> optId(const gguf::File& f, const char* key, std::size_t count) {
    const gguf::Value* v = f.find(key);
    if (!v)
        return std::nullopt;
    const auto id = v->asI64();
    if (!id || *id < 0 || static_cast<std::size_t>(*id) >= count)
        return std::nullopt; // llama.cpp also ignores out-of-range special ids
    return static_cast<int32_t>(*id);
}

bool optBool(const gguf::File& f, const char* key, bool fallback) {
    const gguf::Value* v = f.find(key);
    return v && v->asBool() ? *v->asBool() : fallback;
}

} // namespace

std::shared_ptr<const Tokenizer> loadGguf(const std::string& path) {
    auto opened = gguf::File::open(path);
    if (!opened)
        throw KvError(opened.message());
    return loadGguf(opened.value());
}

std::shared_ptr<const Tokenizer> loadGguf(const gguf::File& f) {
    const std::string& path = f.path();
    if (!f.has("tokenizer.ggml.model"))
        throw KvError(path + ": no embedded tokenizer (metadata 'tokenizer.ggml.model' missing)");
    const std::string model = f.getString("tokenizer.ggml.model");
    const std::vector<std::string>& tokens = f.getStringArray("tokenizer.ggml.tokens");
    if (tokens.empty())
        throw KvError(path + ": metadata 'tokenizer.ggml.tokens' is empty");
    std::vector<int32_t> types;
    if (f.has("tokenizer.ggml.token_type")) {
        types = f.getI32Array("tokenizer.ggml.token_type");
        if (types.size() != tokens.size())
            throw KvError(path + ": metadata 'tokenizer.ggml.token_type' has " +
                          std::to_string(types.size()) + " entries for " +
                          std::to_string(tokens.size()) + " tokens");
    }
    std::optional<std::string> chatTemplate;
    if (f.has("tokenizer.chat_template"))
        chatTemplate = f.getString("tokenizer.chat_template");
    const std::string pre = f.has("tokenizer.ggml.pre") ? f.getString("tokenizer.ggml.pre") : "";

    Hasher h;
    h.updateField("gguf-tokenizer");
    h.updateField(model);
    h.updateField(pre);
    for (const auto& t : tokens)
        h.updateField(t);
    h.update(types.data(), types.size() * sizeof(int32_t));
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                            "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                            "tokenizer.ggml.add_space_prefix"})
        h.updateField(f.has(key) ? f.find(key)->toDisplayString() : "-");
    h.updateField(chatTemplate.value_or(""));

    if (model == "llama") {
        SpmVocab v;
        v.pieces = tokens;
        if (f.has("tokenizer.ggml.scores")) {
            v.scores = f.getF32Array("tokenizer.ggml.scores");
            if (v.scores.size() != tokens.size())
                throw KvError(path + ": metadata 'tokenizer.ggml.scores' has " +
                              std::to_string(v.scores.size()) + " entries for " +
                              std::to_string(tokens.size()) + " tokens");
        }
        h.update(v.scores.data(), v.scores.size() * sizeof(float));
        v.types = types;
        v.bos = optId(f, "tokenizer.ggml.bos_token_id", tokens.size());
        v.eos = optId(f, "tokenizer.ggml.eos_token_id", tokens.size());
        v.unk = optId(f, "tokenizer.ggml.unknown_token_id", tokens.size());
        v.addBos = optBool(f, "tokenizer.ggml.add_bos_token", true);
        v.addEos = optBool(f, "tokenizer.ggml.add_eos_token", false);
        v.addSpacePrefix = optBool(f, "tokenizer.ggml.add_space_prefix", true);
        return std::make_shared<GgufSpmTokenizer>(std::move(v), path, chatTemplate,
                                                  hex64(h.digest()));
    }
    if (model != "gpt2")
        throw KvError(path + ": unsupported tokenizer.ggml.model '" + model +
                      "' (kvscope supports 'llama' and 'gpt2')");

    const std::vector<std::string>& mergeLines = f.getStringArray("tokenizer.ggml.merges");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(mergeLines.size());
    for (std::size_t i = 0; i < mergeLines.size(); ++i) {
        const std::string& m = mergeLines[i];
        const std::size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (space == std::string::npos)
            throw KvError(path + ": tokenizer.ggml.merges[" + std::to_string(i) + "]: \"" + m +
                          "\" is not two tokens separated by a space");
        merges.emplace_back(m.substr(0, space), m.substr(space + 1));
        h.updateField(m);
    }
    TokenIndex vocab;
    vocab.reserve(tokens.size());
    std::vector<hf::AddedToken> added;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        vocab.emplace(tokens[i], static_cast<int32_t>(i));
        const int32_t type = types.empty() ? 1 : types[i];
        // A control token is matched in the text before the pre-tokenizer's regex runs; one
        // that is not valid UTF-8 (GGUF strings are not checked) could split a character and
        // hand PCRE2 invalid UTF-8, which it must never see. Such a token keeps its id but is
        // not matched in text.
        if ((type == GgufSpmTokenizer::kTypeControl ||
             type == GgufSpmTokenizer::kTypeUserDefined) &&
            !tokens[i].empty() && uni::isValid(tokens[i])) {
            hf::AddedToken t;
            t.content = tokens[i];
            t.id = static_cast<int32_t>(i);
            t.special = type == GgufSpmTokenizer::kTypeControl;
            t.normalized = false;
            added.push_back(std::move(t));
        }
    }
    const PrePipeline pp = prePipeline(pre);
    BpeOptions opt;
    opt.ignoreMerges = pp.ignoreMerges;
    hf::Pipeline p;
    p.model = std::make_unique<BpeModel>(std::move(vocab), merges, opt, path + ": tokenizer.ggml");
    hf::Metadata meta;
    meta.bos = optId(f, "tokenizer.ggml.bos_token_id", tokens.size());
    meta.eos = optId(f, "tokenizer.ggml.eos_token_id", tokens.size());
    // BOS/EOS per tokenizer.ggml.add_bos_token / add_eos_token, as the TemplateProcessing a
    // tokenizer.json would hold (kept in meta.sections for exportHuggingFace).
    auto named = [&](std::optional<int32_t> id, const char* addKey) {
        return id && optBool(f, addKey, false)
                   ? std::optional<hf::NamedToken>(hf::NamedToken{tokens[*id], *id})
                   : std::nullopt;
    };
    const auto addBos = named(meta.bos, "tokenizer.ggml.add_bos_token");
    const auto addEos = named(meta.eos, "tokenizer.ggml.add_eos_token");
    const Json byteLevelPost = {{"type", "ByteLevel"},
                                {"add_prefix_space", true},
                                {"trim_offsets", false},
                                {"use_regex", true}};
    meta.sections = {{"normalizer", pp.normalizer},
                     {"pre_tokenizer", pp.preTokenizer},
                     {"post_processor",
                      addBos || addEos
                          ? Json{{"type", "Sequence"},
                                 {"processors",
                                  Json::array({byteLevelPost, hf::bosEosTemplate(addBos, addEos)})}}
                          : byteLevelPost},
                     {"decoder",
                      {{"type", "ByteLevel"},
                       {"add_prefix_space", true},
                       {"trim_offsets", true},
                       {"use_regex", true}}}};
    p.normalizer = hf::makeNormalizer(meta.sections["normalizer"], "normalizer");
    p.preTokenizer = hf::makePreTokenizer(meta.sections["pre_tokenizer"], "pre_tokenizer");
    p.postProcessor = hf::makePostProcessor(meta.sections["post_processor"], "post_processor", {});
    p.decoder = hf::makeDecoder(meta.sections["decoder"], "decoder");
    meta.kind = "gguf-gpt2";
    meta.path = path;
    meta.fingerprint = hex64(h.digest());
    meta.chatTemplate = chatTemplate;
    p.added = hf::AddedVocab(std::move(added), p.normalizer.get());
    return std::make_shared<hf::HfTokenizer>(std::move(p), std::move(meta));
}

} // namespace kvscope::tok
