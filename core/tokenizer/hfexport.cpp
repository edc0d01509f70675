// exportHuggingFace (see hfexport.h). The tokenizer.json is assembled from small ordered JSON
// sections plus the vocab and merges, which are written line by line: building them as an
// nlohmann::ordered_json would make inserting 128k vocab keys quadratic.
#include "tokenizer/hfexport.h"

#include "tokenizer/ggufspm.h"
#include "tokenizer/hftokenizer.h"
#include "tokenizer/llama2ctokenizer.h"

#include "util/fileio.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace kvscope::tok {

namespace {

using hf::Json;
using OJson = nlohmann::ordered_json;

const std::string kSpace = "\xE2\x96\x81"; // U+2581, SentencePiece's visible space

struct AddedSpec {
    int32_t id = -1;
    std::string content;
    bool special = true;
    bool lstrip = false;
    bool rstrip = false;
    bool singleWord = false;
    bool normalized = false;
};

// Everything a BPE tokenizer.json holds.
struct BpeFile {
    std::vector<std::optional<std::string>> vocab; // by id; nullopt for an id without a piece
    std::vector<std::pair<std::string, std::string>> merges;
    OJson modelOptions; // the "model" keys other than vocab and merges, in HF's order
    std::vector<AddedSpec> added;
    OJson normalizer, preTokenizer, postProcessor, decoder;
};

struct ConfigSpec {
    std::string tokenizerClass;
    bool sentencePiece = false;
    bool addBos = false;
    bool addEos = false;
    std::optional<std::string> bos, eos, unk;
    std::optional<std::string> chatTemplate;
    std::vector<AddedSpec> added;
};

std::string quoted(const std::string& s, const std::string& what) {
    try {
        return OJson(s).dump();
    } catch (const OJson::type_error&) {
        throw KvError(what + " is not valid UTF-8, which a tokenizer.json cannot hold");
    }
}

// A JSON value with "type" first and the other keys sorted, as HF's files read.
OJson ordered(const Json& j) {
    if (j.is_object()) {
        OJson o = OJson::object();
        if (j.contains("type"))
            o["type"] = ordered(j["type"]);
        for (const auto& [k, v] : j.items())
            if (k != "type")
                o[k] = ordered(v);
        return o;
    }
    if (j.is_array()) {
        OJson a = OJson::array();
        for (const auto& v : j)
            a.push_back(ordered(v));
        return a;
    }
    return OJson::parse(j.dump());
}

OJson optString(const std::optional<std::string>& s) {
    return s ? OJson(*s) : OJson();
}

std::string writeTokenizerJson(const BpeFile& f) {
    OJson top = OJson::object();
    top["version"] = "1.0";
    top["truncation"] = nullptr;
    top["padding"] = nullptr;
    OJson added = OJson::array();
    for (const AddedSpec& a : f.added)
        added.push_back({{"id", a.id},
                         {"content", a.content},
                         {"single_word", a.singleWord},
                         {"lstrip", a.lstrip},
                         {"rstrip", a.rstrip},
                         {"normalized", a.normalized},
                         {"special", a.special}});
    top["added_tokens"] = std::move(added);
    top["normalizer"] = f.normalizer;
    top["pre_tokenizer"] = f.preTokenizer;
    top["post_processor"] = f.postProcessor;
    top["decoder"] = f.decoder;
    OJson model = f.modelOptions;
    const std::string vocabMark = "@@kvscope-vocab@@", mergesMark = "@@kvscope-merges@@";
    model["vocab"] = vocabMark;
    model["merges"] = mergesMark;
    top["model"] = std::move(model);
    std::string text = top.dump(2);

    // The vocab and merges sit at depth 2 of the pretty-printed file.
    const std::string item = "\n      ", close = "\n    ";
    std::string vocab = "{";
    TokenIndex seen;
    for (std::size_t id = 0; id < f.vocab.size(); ++id) {
        if (!f.vocab[id])
            continue;
        const std::string& piece = *f.vocab[id];
        const auto [it, fresh] = seen.emplace(piece, static_cast<int32_t>(id));
        if (!fresh)
            throw KvError("token " + std::to_string(id) + " (\"" + piece +
                          "\") repeats the piece of token " + std::to_string(it->second) +
                          "; a tokenizer.json vocab needs distinct pieces");
        vocab += (vocab.size() > 1 ? "," : "") + item +
                 quoted(piece, "token " + std::to_string(id)) + ": " + std::to_string(id);
    }
    vocab += vocab.size() > 1 ? close + "}" : "}";
    // "a b" strings, as most files spell merges, unless a piece contains a space: then the
    // [a, b] pairs of tokenizers >= 0.20, which older readers do not accept.
    const bool pairs = std::any_of(f.merges.begin(), f.merges.end(), [](const auto& m) {
        return m.first.find(' ') != std::string::npos || m.second.find(' ') != std::string::npos;
    });
    std::string merges = "[";
    for (std::size_t i = 0; i < f.merges.size(); ++i) {
        const auto& [a, b] = f.merges[i];
        const std::string what = "merge " + std::to_string(i);
        merges += (i ? "," : "") + item +
                  (pairs ? "[" + quoted(a, what) + ", " + quoted(b, what) + "]"
                         : quoted(a + " " + b, what));
    }
    merges += f.merges.empty() ? "]" : close + "]";

    for (const auto& [mark, body] : {std::pair{vocabMark, vocab}, std::pair{mergesMark, merges}}) {
        const std::size_t at = text.find('"' + mark + '"');
        text.replace(at, mark.size() + 2, body);
    }
    return text + "\n";
}

std::string writeConfig(const ConfigSpec& c) {
    OJson j = OJson::object();
    j["add_bos_token"] = c.addBos;
    j["add_eos_token"] = c.addEos;
    OJson decoderMap = OJson::object();
    for (const AddedSpec& a : c.added)
        decoderMap[std::to_string(a.id)] = {{"content", a.content},        {"lstrip", a.lstrip},
                                            {"normalized", a.normalized},  {"rstrip", a.rstrip},
                                            {"single_word", a.singleWord}, {"special", a.special}};
    j["added_tokens_decoder"] = std::move(decoderMap);
    j["bos_token"] = optString(c.bos);
    if (c.chatTemplate)
        j["chat_template"] = *c.chatTemplate;
    j["clean_up_tokenization_spaces"] = false;
    j["eos_token"] = optString(c.eos);
    if (c.sentencePiece)
        j["legacy"] = true; // LlamaTokenizerFast: keep the file's Prepend normalizer as is
    j["pad_token"] = nullptr;
    if (c.sentencePiece)
        j["sp_model_kwargs"] = OJson::object();
    j["tokenizer_class"] = c.tokenizerClass;
    j["unk_token"] = optString(c.unk);
    return j.dump(2) + "\n";
}

// --- SentencePiece BPE by scores (llama2c, gguf-llama) ---------------------------------------

struct SpmSource {
    std::vector<std::string> pieces; // as HF spells them: "▁" for spaces, <unk>/<s>/</s>
    std::vector<float> scores;
    std::vector<AddedSpec> added;
    std::optional<int32_t> bos, eos, unk;
    bool addBos = true;
    bool addEos = false;
    bool addSpacePrefix = true;
    std::optional<std::string> chatTemplate;
};

// transformers' SentencePieceExtractor: every split of every piece into two pieces that are
// both in the vocabulary, sorted by the piece's score, highest first. HF's BPE applies the
// lowest rank first, which is SentencePiece's (and run.c's) highest score first. Equal scores
// are ordered by (left id, right id), as the extractor that wrote Llama-2's tokenizer.json did
// (it matters only for pieces sharing a score, e.g. Llama-2's runs of "▁"): the export of
// Llama-2's vocabulary is then HF's file, merge for merge. Newer transformers break such ties
// differently; neither reproduces SentencePiece's leftmost-first rule for them.
std::vector<std::pair<std::string, std::string>> mergesFromScores(const SpmSource& s) {
    TokenIndex index;
    for (std::size_t id = 0; id < s.pieces.size(); ++id)
        index.emplace(s.pieces[id], static_cast<int32_t>(id));
    struct Merge {
        float score;
        int32_t left, right;
    };
    std::vector<Merge> all;
    for (std::size_t id = 0; id < s.pieces.size(); ++id) {
        const std::string_view piece = s.pieces[id];
        for (std::size_t k = 1; k < piece.size(); ++k) {
            if ((static_cast<unsigned char>(piece[k]) & 0xC0) == 0x80)
                continue; // split at code points, like Python's str slicing
            const auto l = index.find(piece.substr(0, k));
            const auto r = index.find(piece.substr(k));
            if (l != index.end() && r != index.end())
                all.push_back({s.scores[id], l->second, r->second});
        }
    }
    std::sort(all.begin(), all.end(), [](const Merge& a, const Merge& b) {
        if (a.score != b.score)
            return a.score > b.score;
        return std::pair(a.left, a.right) < std::pair(b.left, b.right);
    });
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(all.size());
    for (const Merge& m : all)
        merges.emplace_back(s.pieces[m.left], s.pieces[m.right]);
    return merges;
}

HfTokenizerFiles exportSpm(const SpmSource& s) {
    BpeFile f;
    f.vocab.assign(s.pieces.begin(), s.pieces.end());
    f.merges = mergesFromScores(s);
    f.modelOptions = {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", s.unk ? OJson(s.pieces[*s.unk]) : OJson()},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", true},
                      {"byte_fallback", true},
                      {"ignore_merges", false}};
    f.added = s.added;
    const OJson replaceSpace = {
        {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
    if (s.addSpacePrefix) {
        // Per piece of text between added tokens, as llama.cpp adds the prefix after each
        // special token and run.c once at the start (it has no added tokens to split on).
        OJson list = OJson::array();
        list.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
        list.push_back(replaceSpace);
        f.normalizer = {{"type", "Sequence"}, {"normalizers", std::move(list)}};
    } else {
        f.normalizer = replaceSpace;
    }
    auto named = [&](std::optional<int32_t> id, bool add) {
        return id && add ? std::optional<hf::NamedToken>(hf::NamedToken{s.pieces[*id], *id})
                         : std::nullopt;
    };
    f.postProcessor = ordered(hf::bosEosTemplate(named(s.bos, s.addBos), named(s.eos, s.addEos)));
    OJson decoders = OJson::array();
    decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}});
    decoders.push_back({{"type", "ByteFallback"}});
    decoders.push_back({{"type", "Fuse"}});
    if (s.addSpacePrefix)
        decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    f.decoder = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};

    ConfigSpec c;
    c.tokenizerClass = "LlamaTokenizer";
    c.sentencePiece = true;
    c.addBos = s.addBos && s.bos;
    c.addEos = s.addEos && s.eos;
    auto name = [&](std::optional<int32_t> id) {
        return id ? std::optional<std::string>(s.pieces[*id]) : std::nullopt;
    };
    c.bos = name(s.bos);
    c.eos = name(s.eos);
    c.unk = name(s.unk);
    c.chatTemplate = s.chatTemplate;
    c.added = s.added;
    return {writeTokenizerJson(f), writeConfig(c)};
}

SpmSource fromLlama2c(const Llama2cTokenizer& t) {
    SpmSource s;
    s.pieces = t.pieces();
    s.scores = t.scores();
    // tokenizer.py wrote "▁" as a raw space and BOS/EOS as "\n<s>\n" / "\n</s>\n".
    for (std::string& piece : s.pieces) {
        std::string out;
        for (char c : piece)
            out += c == ' ' ? kSpace : std::string(1, c);
        piece = std::move(out);
    }
    const char* const names[] = {"<unk>", "<s>", "</s>"};
    for (int32_t id = 0; id < 3; ++id) {
        s.pieces[id] = names[id];
        s.added.push_back({id, names[id]});
    }
    s.unk = 0;
    s.bos = Llama2cTokenizer::kBos;
    s.eos = Llama2cTokenizer::kEos;
    return s;
}

std::string trimmed(std::string_view s) {
    const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
    while (!s.empty() && ws(s.front()))
        s.remove_prefix(1);
    while (!s.empty() && ws(s.back()))
        s.remove_suffix(1);
    return std::string(s);
}

SpmSource fromGgufSpm(const GgufSpmTokenizer& t) {
    const SpmVocab& v = t.vocab();
    SpmSource s;
    s.pieces = v.pieces;
    s.scores = v.scores;
    s.bos = v.bos;
    s.eos = v.eos;
    s.unk = v.unk;
    s.addBos = v.addBos;
    s.addEos = v.addEos;
    s.addSpacePrefix = v.addSpacePrefix;
    s.chatTemplate = t.chatTemplate();
    // A file converted from llama2c may still spell BOS "\n<s>\n": use the usual names when
    // they are free.
    using Named = std::pair<std::optional<int32_t>, std::string>;
    for (const auto& [id, name] :
         {Named{v.unk, "<unk>"}, Named{v.bos, "<s>"}, Named{v.eos, "</s>"}})
        if (id && s.pieces[*id] != name && trimmed(s.pieces[*id]) == name &&
            std::find(s.pieces.begin(), s.pieces.end(), name) == s.pieces.end())
            s.pieces[*id] = name;
    // Control and user-defined tokens are matched in the text before the model runs, in
    // llama.cpp and (as added tokens) in HF; only control tokens are special.
    for (std::size_t id = 0; id < s.pieces.size(); ++id) {
        const int32_t type = v.types[id];
        if ((type == GgufSpmTokenizer::kTypeControl ||
             type == GgufSpmTokenizer::kTypeUserDefined) &&
            !s.pieces[id].empty())
            s.added.push_back(
                {static_cast<int32_t>(id), s.pieces[id], type == GgufSpmTokenizer::kTypeControl});
    }
    return s;
}

// --- Hugging Face pipelines --------------------------------------------------------------------

std::vector<AddedSpec> addedOf(const hf::HfTokenizer& t) {
    std::vector<AddedSpec> out;
    for (const hf::AddedToken& a : t.addedVocab().tokens())
        out.push_back({a.id, a.content, a.special, a.lstrip, a.rstrip, a.singleWord, a.normalized});
    std::sort(out.begin(), out.end(),
              [](const AddedSpec& a, const AddedSpec& b) { return a.id < b.id; });
    return out;
}

ConfigSpec genericConfig(const hf::HfTokenizer& t) {
    ConfigSpec c;
    c.tokenizerClass = "PreTrainedTokenizerFast";
    // What the post-processor adds around a sequence (the template is applied to empty input).
    const std::vector<int32_t> ids = t.encode("", EncodeOptions{true});
    c.addBos = t.bosId() && !ids.empty() && ids.front() == *t.bosId();
    c.addEos = t.eosId() && !ids.empty() && ids.back() == *t.eosId();
    auto name = [&](std::optional<int32_t> id) {
        return id ? std::optional<std::string>(t.tokenText(*id)) : std::nullopt;
    };
    c.bos = name(t.bosId());
    c.eos = name(t.eosId());
    c.unk = t.model().options().unkToken;
    c.chatTemplate = t.chatTemplate();
    c.added = addedOf(t);
    return c;
}

// A pipeline built from tokenizer.json sections kept by its loader (GGUF gpt2).
HfTokenizerFiles exportSections(const hf::HfTokenizer& t) {
    const BpeModel& m = t.model();
    const Json& sections = t.metadata().sections;
    BpeFile f;
    f.vocab.resize(static_cast<std::size_t>(m.idLimit()));
    for (int32_t id = 0; id < m.idLimit(); ++id)
        if (const std::string* p = m.piece(id))
            f.vocab[id] = *p;
    for (const auto& [a, b] : m.mergesByRank())
        f.merges.emplace_back(*m.piece(a), *m.piece(b));
    const BpeOptions& o = m.options();
    auto nonEmpty = [](const std::string& s) { return s.empty() ? OJson() : OJson(s); };
    f.modelOptions = {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", optString(o.unkToken)},
                      {"continuing_subword_prefix", nonEmpty(o.continuingSubwordPrefix)},
                      {"end_of_word_suffix", nonEmpty(o.endOfWordSuffix)},
                      {"fuse_unk", o.fuseUnk},
                      {"byte_fallback", o.byteFallback},
                      {"ignore_merges", o.ignoreMerges}};
    f.added = addedOf(t);
    auto section = [&](const char* key) {
        return sections.contains(key) ? ordered(sections[key]) : OJson();
    };
    f.normalizer = section("normalizer");
    f.preTokenizer = section("pre_tokenizer");
    f.postProcessor = section("post_processor");
    f.decoder = section("decoder");
    return {writeTokenizerJson(f), writeConfig(genericConfig(t))};
}

// A tokenizer.json source: its files as they are.
HfTokenizerFiles exportSource(const hf::HfTokenizer& t) {
    HfTokenizerFiles files;
    files.tokenizerJson = readFileText(t.sourcePath());
    const fs::path config = fs::path(t.sourcePath()).parent_path() / "tokenizer_config.json";
    files.tokenizerConfigJson =
        fs::is_regular_file(config) ? readFileText(config.string()) : writeConfig(genericConfig(t));
    return files;
}

} // namespace

Result<HfTokenizerFiles> exportHuggingFace(const Tokenizer& tokenizer) {
    return catchToResult([&]() -> HfTokenizerFiles {
        try {
            if (const auto* l = dynamic_cast<const Llama2cTokenizer*>(&tokenizer))
                return exportSpm(fromLlama2c(*l));
            if (const auto* g = dynamic_cast<const GgufSpmTokenizer*>(&tokenizer))
                return exportSpm(fromGgufSpm(*g));
            if (const auto* h = dynamic_cast<const hf::HfTokenizer*>(&tokenizer))
                return h->metadata().sections.is_null() ? exportSource(*h) : exportSections(*h);
        } catch (const std::exception& e) {
            throw KvError(tokenizer.sourcePath() + ": exporting as tokenizer.json: " + e.what());
        }
        throw KvError(tokenizer.sourcePath() + ": tokenizer kind '" + tokenizer.kind() +
                      "' cannot be exported as tokenizer.json");
    });
}

} // namespace kvscope::tok
