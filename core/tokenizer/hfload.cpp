// Loading a Hugging Face tokenizer.json (+ tokenizer_config.json beside it).
#include "tokenizer/hftokenizer.h"
#include "tokenizer/loaders.h"

#include "formats/jsonerror.h"

#include "util/fileio.h"
#include "util/hash.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace kvscope::tok {

namespace {

using hf::Json;

Json parseJson(std::string_view text, const std::string& path) {
    return parseJsonText(text, path);
}

// j[key] for a JSON object j that may lack the key or not be an object: null then.
// (operator[] on a const json with a missing key is undefined behaviour in nlohmann_json.)
const Json& memberOrNull(const Json& j, const char* key) {
    static const Json null;
    if (!j.is_object())
        return null;
    const auto it = j.find(key);
    return it == j.end() ? null : *it;
}

std::optional<std::string> optString(const Json& j, const char* key, const std::string& where) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return std::nullopt;
    if (!it->is_string())
        throw KvError(where + "." + key + ": expected a string or null");
    return it->get<std::string>();
}

// tokenizer_config.json's bos_token/eos_token: a string or {"content": ...}.
std::optional<std::string> configToken(const Json& cfg, const char* key) {
    const auto it = cfg.find(key);
    if (it == cfg.end())
        return std::nullopt;
    if (it->is_string())
        return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    return std::nullopt;
}

std::optional<std::string> configChatTemplate(const Json& cfg, const std::string& where) {
    const auto it = cfg.find("chat_template");
    if (it == cfg.end() || it->is_null())
        return std::nullopt;
    if (it->is_string())
        return it->get<std::string>();
    if (it->is_array()) { // [{"name": "default", "template": ...}, ...]
        for (const auto& t : *it)
            if (memberOrNull(t, "name") == "default" && memberOrNull(t, "template").is_string())
                return memberOrNull(t, "template").get<std::string>();
        if (!it->empty() && memberOrNull((*it)[0], "template").is_string())
            return memberOrNull((*it)[0], "template").get<std::string>();
    }
    throw KvError(where + ".chat_template: expected a string or a list of named templates");
}

bool containsType(const Json& j, const std::string& type) {
    if (j.is_object()) {
        if (j.contains("type") && j["type"] == type)
            return true;
        for (const auto& [k, v] : j.items())
            if (containsType(v, type))
                return true;
    } else if (j.is_array()) {
        for (const auto& v : j)
            if (containsType(v, type))
                return true;
    }
    return false;
}

} // namespace

std::shared_ptr<const Tokenizer> loadHfJson(const std::string& path) {
    const std::string text = readFileText(path);
    const fs::path configPath = fs::path(path).parent_path() / "tokenizer_config.json";
    if (!fs::is_regular_file(configPath))
        return loadHfJson(text, path, nullptr, {});
    const std::string configText = readFileText(configPath.string());
    return loadHfJson(text, path, &configText, configPath.string());
}

std::shared_ptr<const Tokenizer> loadHfJson(std::string_view text, const std::string& path,
                                            const std::string* configText,
                                            const std::string& configPath) {
    const Json j = parseJson(text, path);
    const std::string& w = path;
    if (!j.is_object())
        throw KvError(w + ": expected a JSON object at the top level");
    const Json& model = hf::member(j, "model", w);
    const std::string mw = w + ": model";
    std::string type = model.contains("type") ? hf::getString(model, "type", mw) : "BPE";
    if (type != "BPE")
        throw KvError("unsupported model type '" + type + "' in " + path +
                      " (kvscope supports BPE tokenizers)");
    const Json& vocabJson = hf::member(model, "vocab", mw);
    if (!vocabJson.is_object())
        throw KvError(mw + ".vocab: expected an object {token: id}");
    const Json addedJson = j.value("added_tokens", Json::array());
    if (!addedJson.is_array())
        throw KvError(w + ": added_tokens: expected an array");
    // Ids index tables as large as the highest id, so they must be dense: below the number of
    // vocab and added_tokens entries (added tokens fill the vocab's holes), and below 2^26.
    const int64_t idLimit =
        std::min<int64_t>(1 << 26, static_cast<int64_t>(vocabJson.size() + addedJson.size()));
    auto checkId = [&](const Json& id, const std::string& where) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= idLimit)
            throw KvError(where + ": " + id.dump() + " is not an id in 0.." +
                          std::to_string(idLimit - 1) + " (ids must be below the " +
                          std::to_string(idLimit) + " entries of model.vocab and added_tokens)");
        return id.get<int32_t>();
    };
    TokenIndex vocab;
    vocab.reserve(vocabJson.size());
    for (const auto& [piece, id] : vocabJson.items())
        vocab.emplace(piece, checkId(id, mw + ".vocab[\"" + piece + "\"]"));
    BpeOptions opt;
    opt.unkToken = optString(model, "unk_token", mw);
    opt.continuingSubwordPrefix = optString(model, "continuing_subword_prefix", mw).value_or("");
    opt.endOfWordSuffix = optString(model, "end_of_word_suffix", mw).value_or("");
    opt.fuseUnk = hf::getBool(model, "fuse_unk", false, mw);
    opt.byteFallback = hf::getBool(model, "byte_fallback", false, mw);
    opt.ignoreMerges = hf::getBool(model, "ignore_merges", false, mw);
    const auto merges = hf::parseMerges(hf::member(model, "merges", mw), mw + ".merges");

    hf::Pipeline p;
    p.model = std::make_unique<BpeModel>(std::move(vocab), merges, opt, mw);
    p.normalizer = hf::makeNormalizer(j.value("normalizer", Json()), w + ": normalizer");
    p.preTokenizer = hf::makePreTokenizer(j.value("pre_tokenizer", Json()), w + ": pre_tokenizer");
    p.decoder = hf::makeDecoder(j.value("decoder", Json()), w + ": decoder");
    p.postProcessor =
        hf::makePostProcessor(j.value("post_processor", Json()), w + ": post_processor", {});

    const double encodeGrowth = (p.normalizer ? p.normalizer->growth() : 1) *
                                (p.preTokenizer ? p.preTokenizer->growth() : 1);
    const double decodeGrowth = p.decoder ? p.decoder->growth() : 1;
    for (const auto& [stages, growth] :
         {std::pair{"normalizer and pre_tokenizer", encodeGrowth}, {"decoder", decodeGrowth}})
        if (growth > hf::kMaxTextGrowth)
            throw KvError(w + ": the " + stages + " can make a text up to " +
                          std::to_string(static_cast<std::uint64_t>(std::min(growth, 1e18))) +
                          " times longer (their Replace, Prepend and Metaspace strings); kvscope "
                          "refuses more than " +
                          std::to_string(static_cast<int>(hf::kMaxTextGrowth)));

    std::vector<hf::AddedToken> added;
    for (std::size_t i = 0; i < addedJson.size(); ++i) {
        const Json& a = addedJson[i];
        const std::string aw = w + ": added_tokens[" + std::to_string(i) + "]";
        hf::AddedToken t;
        t.content = hf::getString(a, "content", aw);
        t.id = checkId(hf::member(a, "id", aw), aw + ".id");
        t.special = hf::getBool(a, "special", false, aw);
        t.lstrip = hf::getBool(a, "lstrip", false, aw);
        t.rstrip = hf::getBool(a, "rstrip", false, aw);
        t.singleWord = hf::getBool(a, "single_word", false, aw);
        t.normalized = hf::getBool(a, "normalized", !t.special, aw);
        added.push_back(std::move(t));
    }
    p.added = hf::AddedVocab(std::move(added), p.normalizer.get());

    hf::Metadata meta;
    meta.path = path;
    Json config;
    if (configText) {
        config = parseJson(*configText, configPath);
        if (!config.is_object())
            throw KvError(configPath + ": expected a JSON object");
        meta.chatTemplate = configChatTemplate(config, configPath);
    }
    const Json& preTokenizer = memberOrNull(j, "pre_tokenizer");
    const Json& decoder = memberOrNull(j, "decoder");
    const bool byteLevel =
        containsType(preTokenizer, "ByteLevel") || containsType(decoder, "ByteLevel");
    const bool sentencePiece = opt.byteFallback || containsType(preTokenizer, "Metaspace") ||
                               containsType(decoder, "Metaspace") ||
                               containsType(memberOrNull(j, "normalizer"), "Prepend");
    meta.kind = byteLevel ? "hf-bpe-bytelevel" : sentencePiece ? "hf-bpe-sentencepiece" : "hf-bpe";

    auto tok = std::make_shared<hf::HfTokenizer>(std::move(p), meta);
    const hf::AddedVocab& addedIndex = tok->addedVocab();
    for (const int32_t id : tok->postProcessor().addedIds())
        if (!tok->model().piece(id) && !addedIndex.byId(id))
            throw KvError(w + ": post_processor: token id " + std::to_string(id) +
                          " is neither in model.vocab nor in added_tokens");
    Hasher h;
    h.updateField("hf-tokenizer.json");
    // The model section is hashed from its parsed form (vocab in id order, merges in rank
    // order, the options): dumping 280k merges back to JSON would cost more than the parse.
    for (int32_t id = 0; id < tok->vocabSize(); ++id)
        h.updateField(tok->tokenText(id));
    for (const auto& [a, b] : merges) {
        h.updateField(a);
        h.updateField(b);
    }
    Json modelOptions = Json::object();
    for (const auto& [key, value] : model.items())
        if (key != "vocab" && key != "merges")
            modelOptions[key] = value;
    h.updateField(modelOptions.dump());
    for (const char* key :
         {"normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"})
        h.updateField(j.contains(key) ? j[key].dump() : "null");
    h.updateField(meta.chatTemplate.value_or(""));
    tok->setFingerprint(hex64(h.digest()));

    // BOS/EOS: tokenizer_config.json names them; otherwise the usual names.
    auto resolve = [&](const char* key,
                       std::initializer_list<const char*> names) -> std::optional<int32_t> {
        if (config.is_object() && config.contains(key)) { // null means "none"
            const auto name = configToken(config, key);
            const int32_t id = name ? tok->tokenId(*name) : -1;
            return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
        }
        for (const char* n : names) // only added tokens: "<s>" may be plain text elsewhere
            if (const hf::AddedToken* t = addedIndex.byContent(n))
                return t->id;
        return std::nullopt;
    };
    tok->setBosEos(resolve("bos_token", {"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"}),
                   resolve("eos_token", {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"}));
    return tok;
}

} // namespace kvscope::tok
