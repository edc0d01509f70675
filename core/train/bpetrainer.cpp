#include "train/bpetrainer.h"

#include "chat/template.h"
#include "tokenizer/hfcomponents.h"
#include "tokenizer/unicode.h"
#include "util/fileio.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

namespace kvscope::train {

namespace {

using OJson = nlohmann::ordered_json;

// The pre-tokenizer section written into tokenizer.json; the trainer splits with the very
// component the loader builds from it, so training and encoding see the same pieces.
OJson preTokenizerJson() {
    return {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", true}};
}

// Splits the corpus into chunks that the GPT-2 regex cannot join across: a cut after a '\n'
// that is followed by a non-space byte (no pattern alternative spans "\nX").
std::vector<std::string_view> chunks(std::string_view text) {
    std::vector<std::string_view> out;
    size_t start = 0;
    for (size_t i = 0; i + 1 < text.size(); ++i) {
        const unsigned char next = static_cast<unsigned char>(text[i + 1]);
        if (text[i] == '\n' && next != ' ' && next != '\n' && next != '\t' && next != '\r' &&
            next < 0x80 && i + 1 - start >= (1 << 16)) {
            out.push_back(text.substr(start, i + 1 - start));
            start = i + 1;
        }
    }
    if (start < text.size())
        out.push_back(text.substr(start));
    return out;
}

// Splits a byte-level piece ("Ġthe") into its symbols, one GPT-2 byte character each.
std::vector<std::string> byteSymbols(const std::string& piece) {
    std::vector<std::string> s;
    for (size_t i = 0; i < piece.size();) {
        const size_t n = tok::uni::seqLen(static_cast<unsigned char>(piece[i]));
        s.push_back(piece.substr(i, n));
        i += n;
    }
    return s;
}

uint64_t pairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Word {
    std::vector<int32_t> symbols;
    int64_t count = 0;
};

class MergeLearner {
public:
    MergeLearner(std::vector<Word> words, std::vector<std::string> symbolText)
        : m_words(std::move(words)), m_text(std::move(symbolText)) {
        for (size_t i = 0; i < m_text.size(); ++i)
            m_id.emplace(m_text[i], static_cast<int32_t>(i));
        for (size_t w = 0; w < m_words.size(); ++w)
            addPairs(static_cast<int32_t>(w), +1);
    }

    // Learns merges until `wanted` new symbols exist (a merge whose text another merge already
    // produced reuses that symbol, as HF's trainer does); returns them as (left, right).
    std::vector<std::pair<int32_t, int32_t>>
    learn(int64_t wanted, int64_t minFrequency,
          const std::function<void(int64_t, int64_t)>& onProgress) {
        std::vector<std::pair<int32_t, int32_t>> merges;
        const size_t firstNew = m_text.size();
        while (static_cast<int64_t>(m_text.size() - firstNew) < wanted) {
            uint64_t best = 0;
            int64_t bestCount = 0;
            for (const auto& [key, count] : m_pairCount) {
                if (count > bestCount || (count == bestCount && count > 0 && before(key, best))) {
                    best = key;
                    bestCount = count;
                }
            }
            if (bestCount < std::max<int64_t>(1, minFrequency))
                break;
            const int32_t a = static_cast<int32_t>(best >> 32);
            const int32_t b = static_cast<int32_t>(best & 0xffffffffu);
            std::string joined = m_text[a] + m_text[b];
            auto [it, isNew] = m_id.emplace(joined, static_cast<int32_t>(m_text.size()));
            if (isNew)
                m_text.push_back(std::move(joined));
            const int32_t merged = it->second;
            merges.emplace_back(a, b);
            applyMerge(a, b, merged);
            if (onProgress && merges.size() % 256 == 0)
                onProgress(static_cast<int64_t>(merges.size()), wanted);
        }
        return merges;
    }

    const std::vector<std::string>& symbolText() const { return m_text; }

private:
    // Tie-break: the pair whose (left, right) texts sort first by bytes.
    bool before(uint64_t x, uint64_t y) const {
        const auto& xl = m_text[x >> 32];
        const auto& yl = m_text[y >> 32];
        if (xl != yl)
            return xl < yl;
        return m_text[x & 0xffffffffu] < m_text[y & 0xffffffffu];
    }

    void addPairs(int32_t w, int sign) {
        const Word& word = m_words[static_cast<size_t>(w)];
        for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
            const uint64_t key = pairKey(word.symbols[i], word.symbols[i + 1]);
            int64_t& c = m_pairCount[key];
            c += sign * word.count;
            if (sign > 0)
                m_where[key].push_back(w);
            else if (c == 0)
                m_pairCount.erase(key);
        }
    }

    void applyMerge(int32_t a, int32_t b, int32_t merged) {
        const uint64_t key = pairKey(a, b);
        auto it = m_where.find(key);
        if (it == m_where.end())
            return;
        std::vector<int32_t> words = std::move(it->second);
        m_where.erase(it);
        std::sort(words.begin(), words.end());
        words.erase(std::unique(words.begin(), words.end()), words.end());
        for (int32_t w : words) {
            Word& word = m_words[static_cast<size_t>(w)];
            bool has = false;
            for (size_t i = 0; i + 1 < word.symbols.size() && !has; ++i)
                has = word.symbols[i] == a && word.symbols[i + 1] == b;
            if (!has) // stale entry: an earlier merge already rewrote this word
                continue;
            addPairs(w, -1);
            std::vector<int32_t> out;
            out.reserve(word.symbols.size());
            for (size_t i = 0; i < word.symbols.size(); ++i) {
                if (i + 1 < word.symbols.size() && word.symbols[i] == a &&
                    word.symbols[i + 1] == b) {
                    out.push_back(merged);
                    ++i;
                } else {
                    out.push_back(word.symbols[i]);
                }
            }
            word.symbols = std::move(out);
            addPairs(w, +1);
        }
    }

    std::vector<Word> m_words;
    std::vector<std::string> m_text;
    std::unordered_map<std::string, int32_t> m_id;
    std::unordered_map<uint64_t, int64_t> m_pairCount;
    std::unordered_map<uint64_t, std::vector<int32_t>> m_where;
};

OJson addedToken(int32_t id, const std::string& content) {
    return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", false}, {"special", true}};
}

} // namespace

std::string demoChatTemplate() {
    return "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
           "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
           "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
}

Result<BpeResult> trainBpe(const std::string& corpusIn, const BpeOptions& o,
                           const std::function<void(int64_t, int64_t)>& onProgress) {
    return catchToResult([&]() -> BpeResult {
        const auto nSpecial = static_cast<int32_t>(o.specialTokens.size());
        if (o.vocabSize < nSpecial + 256 || o.vocabSize > (1 << 24))
            throw KvError("train-tokenizer: --vocab-size " + std::to_string(o.vocabSize) +
                          " must be between " + std::to_string(nSpecial + 256) +
                          " (special tokens + 256 bytes) and 16777216");
        std::set<std::string> seen;
        for (const auto& s : o.specialTokens)
            if (s.empty() || !seen.insert(s).second)
                throw KvError("train-tokenizer: special token '" + s +
                              "' is empty or listed twice");
        for (const auto* t : {&o.bosToken, &o.eosToken})
            if (!t->empty() && !seen.count(*t))
                throw KvError("train-tokenizer: '" + *t + "' is not one of the special tokens");

        const std::string corpus =
            tok::uni::isValid(corpusIn) ? corpusIn : tok::uni::lossy(corpusIn);
        const std::string where = "train-tokenizer: pre_tokenizer";
        const auto pre = tok::hf::makePreTokenizer(preTokenizerJson(), where);

        // Count identical pieces (std::map: a deterministic order for the word list).
        std::map<std::string, int64_t> pieceCount;
        for (std::string_view chunk : chunks(corpus)) {
            tok::hf::Pieces pieces{{std::string(chunk), true, -1}};
            pre->apply(pieces);
            for (auto& p : pieces)
                ++pieceCount[p.text];
        }

        // Symbols 0..255: the byte characters in byte order.
        std::vector<std::string> symbolText(256);
        std::unordered_map<std::string, int32_t> byteSymbol;
        for (int b = 0; b < 256; ++b) {
            symbolText[b] = tok::uni::byteToChar(static_cast<unsigned char>(b));
            byteSymbol[symbolText[b]] = b;
        }
        std::vector<Word> words;
        words.reserve(pieceCount.size());
        for (const auto& [text, count] : pieceCount) {
            Word w;
            w.count = count;
            for (const auto& s : byteSymbols(text))
                w.symbols.push_back(byteSymbol.at(s));
            words.push_back(std::move(w));
        }

        BpeResult r;
        r.corpusBytes = static_cast<int64_t>(corpus.size());
        r.uniquePieces = static_cast<int64_t>(words.size());
        MergeLearner learner(std::move(words), std::move(symbolText));
        const int64_t wanted = o.vocabSize - nSpecial - 256;
        const auto merges = learner.learn(wanted, o.minFrequency, onProgress);
        const auto& text = learner.symbolText();

        // vocab: specials, bytes, merged symbols in creation order (symbol id + nSpecial).
        OJson vocab = OJson::object();
        for (int32_t i = 0; i < nSpecial; ++i)
            vocab[o.specialTokens[static_cast<size_t>(i)]] = i;
        for (size_t s = 0; s < text.size(); ++s) {
            if (vocab.contains(text[s]))
                throw KvError("train-tokenizer: special token '" + text[s] +
                              "' collides with a byte-level symbol");
            vocab[text[s]] = static_cast<int32_t>(s) + nSpecial;
        }
        OJson mergeList = OJson::array();
        for (const auto& [a, b] : merges) {
            r.merges.emplace_back(text[a], text[b]);
            mergeList.push_back(text[a] + " " + text[b]);
        }
        r.vocabSize = nSpecial + static_cast<int32_t>(text.size());

        OJson added = OJson::array();
        for (int32_t i = 0; i < nSpecial; ++i)
            added.push_back(addedToken(i, o.specialTokens[static_cast<size_t>(i)]));
        OJson post = {{"type", "ByteLevel"},
                      {"add_prefix_space", true},
                      {"trim_offsets", false},
                      {"use_regex", true}};
        if (!o.bosToken.empty()) {
            const int32_t bosId = vocab[o.bosToken].get<int32_t>();
            OJson tmpl = {
                {"type", "TemplateProcessing"},
                {"single",
                 {{{"SpecialToken", {{"id", o.bosToken}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                {"pair",
                 {{{"SpecialToken", {{"id", o.bosToken}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", o.bosToken}, {"type_id", 1}}}},
                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                {"special_tokens",
                 {{o.bosToken, {{"id", o.bosToken}, {"ids", {bosId}}, {"tokens", {o.bosToken}}}}}}};
            post = {{"type", "Sequence"}, {"processors", {post, tmpl}}};
        }
        OJson tj = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", preTokenizerJson()},
                    {"post_processor", post},
                    {"decoder",
                     {{"type", "ByteLevel"},
                      {"add_prefix_space", true},
                      {"trim_offsets", true},
                      {"use_regex", true}}},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", false},
                      {"vocab", vocab},
                      {"merges", mergeList}}}};
        r.tokenizerJson = tj.dump(2, ' ', false) + "\n";

        OJson decoderMap = OJson::object();
        for (int32_t i = 0; i < nSpecial; ++i) {
            OJson t = addedToken(i, o.specialTokens[static_cast<size_t>(i)]);
            t.erase("id");
            decoderMap[std::to_string(i)] = t;
        }
        OJson cfg = {{"added_tokens_decoder", decoderMap},
                     {"bos_token", o.bosToken.empty() ? OJson(nullptr) : OJson(o.bosToken)},
                     {"eos_token", o.eosToken.empty() ? OJson(nullptr) : OJson(o.eosToken)},
                     {"add_bos_token", !o.bosToken.empty()},
                     {"add_eos_token", false},
                     {"chat_template", demoChatTemplate()},
                     {"clean_up_tokenization_spaces", false},
                     {"model_max_length", o.modelMaxLength},
                     {"tokenizer_class", "PreTrainedTokenizerFast"}};
        r.tokenizerConfigJson = cfg.dump(2, ' ', false) + "\n";

        // The chat template must render with kvscope's own Jinja engine.
        auto tmpl = chat::Template::parse(demoChatTemplate(), "chat_template");
        if (!tmpl)
            throw KvError("train-tokenizer: chat template: " + tmpl.message());
        chat::RenderOptions ro;
        ro.addGenerationPrompt = true;
        ro.extraVariables = {{"bos_token", o.bosToken}, {"eos_token", o.eosToken}};
        auto rendered = tmpl.value().render(
            nlohmann::ordered_json::array({{{"role", "user"}, {"content", "x"}}}), ro);
        if (!rendered)
            throw KvError("train-tokenizer: chat template: " + rendered.message());
        return r;
    });
}

Status writeBpe(const BpeResult& r, const std::string& tokenizerPath) {
    return catchToStatus([&] {
        namespace fs = std::filesystem;
        const fs::path p(tokenizerPath);
        const fs::path cfg =
            (p.has_parent_path() ? p.parent_path() : fs::path(".")) / "tokenizer_config.json";
        if (p.has_parent_path())
            fs::create_directories(p.parent_path());
        writeFileAtomic(p.string(), r.tokenizerJson.data(), r.tokenizerJson.size());
        writeFileAtomic(cfg.string(), r.tokenizerConfigJson.data(), r.tokenizerConfigJson.size());
    });
}

} // namespace kvscope::train
