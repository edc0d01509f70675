#include "tokenizer/hftokenizer.h"

#include "tokenizer/unicode.h"

namespace kvscope::tok::hf {

HfTokenizer::HfTokenizer(Pipeline pipeline, Metadata meta)
    : m_p(std::move(pipeline)), m_meta(std::move(meta)) {
    m_vocabSize = m_p.model->idLimit();
    for (const auto& t : m_p.added.tokens())
        m_vocabSize = std::max(m_vocabSize, t.id + 1);
}

int32_t HfTokenizer::tokenId(std::string_view text) const {
    if (const AddedToken* t = m_p.added.byContent(text))
        return t->id;
    return m_p.model->find(text).value_or(-1);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text,
                                         const EncodeOptions& options) const {
    const std::string valid = uni::isValid(text) ? std::string(text) : uni::lossy(text);
    Pieces pieces = m_p.added.extractAndNormalize(valid, m_p.normalizer.get());
    if (m_p.preTokenizer)
        m_p.preTokenizer->apply(pieces);
    std::vector<int32_t> ids;
    ids.reserve(valid.size() / 3 + 4);
    for (const auto& p : pieces) {
        if (p.token >= 0)
            ids.push_back(p.token);
        else
            m_p.model->tokenize(p.text, ids);
    }
    m_p.postProcessor->apply(ids, options.addSpecialTokens);
    return ids;
}

std::string HfTokenizer::tokenText(int32_t id) const {
    if (const AddedToken* t = m_p.added.byId(id))
        return t->content;
    const std::string* p = m_p.model->piece(id);
    return p ? *p : std::string();
}

bool HfTokenizer::isSpecial(int32_t id) const {
    const AddedToken* t = m_p.added.byId(id);
    return t && t->special;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skipSpecialTokens) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const int32_t id : ids) {
        if (const AddedToken* t = m_p.added.byId(id)) {
            if (!(skipSpecialTokens && t->special))
                tokens.push_back(t->decodeText);
        } else if (const std::string* p = m_p.model->piece(id)) {
            tokens.push_back(*p);
        }
    }
    if (!m_p.decoder) {
        std::string out;
        for (std::size_t i = 0; i < tokens.size(); ++i)
            out += (i ? " " : "") + tokens[i];
        return out;
    }
    m_p.decoder->apply(tokens);
    std::string out;
    for (const auto& t : tokens)
        out += t;
    return out;
}

std::string HfTokenizer::decodeNext(int32_t prev, int32_t id) const {
    // Byte-level and byte-fallback pieces may hold part of a UTF-8 character: return their raw
    // bytes so that a stream of them concatenates to the right text.
    const std::string* piece = m_p.added.byId(id) ? nullptr : m_p.model->piece(id);
    if (piece && m_p.decoder && m_p.decoder->isByteLevel()) {
        std::string bytes;
        for (std::size_t i = 0; i < piece->size();) {
            const int b = uni::charToByte(uni::next(*piece, i));
            if (b < 0)
                return *piece;
            bytes += static_cast<char>(b);
        }
        return bytes;
    }
    if (piece && m_p.model->options().byteFallback)
        if (const int b = uni::byteToken(*piece); b >= 0)
            return std::string(1, static_cast<char>(b));
    return Tokenizer::decodeNext(prev, id);
}

std::vector<std::pair<std::string, std::string>> parseMerges(const Json& merges,
                                                             const std::string& where) {
    if (!merges.is_array())
        throw KvError(where + ": expected an array");
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
        const Json& m = merges[i];
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            const std::size_t space = s.find(' ');
            if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                throw KvError(where + "[" + std::to_string(i) + "]: \"" + s +
                              "\" is not two tokens separated by one space (merges line " +
                              std::to_string(i + 1) + " is invalid or ambiguous)");
            out.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            throw KvError(where + "[" + std::to_string(i) +
                          "]: expected \"a b\" or [\"a\", \"b\"], got " + m.dump());
        }
    }
    return out;
}

} // namespace kvscope::tok::hf
