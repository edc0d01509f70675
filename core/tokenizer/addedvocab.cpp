#include "tokenizer/addedvocab.h"

#include "tokenizer/unicode.h"

namespace kvscope::tok::hf {

namespace {

// Rust regex \w (Unicode): alphabetic, marks, decimal numbers, connector punctuation.
bool isWordChar(char32_t c) {
    return c == U'_' || uni::isAlphanumeric(c);
}

char32_t lastChar(std::string_view s) {
    std::size_t b = s.size() - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80)
        --b;
    return uni::next(s, b);
}

} // namespace

AddedVocab::AddedVocab(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : m_tokens(std::move(tokens)) {
    std::vector<std::pair<std::string, std::size_t>> raw, normalized;
    for (std::size_t i = 0; i < m_tokens.size(); ++i) {
        AddedToken& t = m_tokens[i];
        t.decodeText = t.normalized && normalizer ? normalizer->normalize(t.content) : t.content;
        m_byId[t.id] = i;
        m_byContent[t.content] = i;
        if (t.content.empty())
            continue;
        if (!t.normalized)
            raw.emplace_back(t.content, i);
        else
            normalized.emplace_back(t.decodeText, i); // empty ones are ignored
    }
    m_raw = LongestMatch(std::move(raw));
    m_normalized = LongestMatch(std::move(normalized));
}

const AddedToken* AddedVocab::byId(int32_t id) const {
    const auto it = m_byId.find(id);
    return it == m_byId.end() ? nullptr : &m_tokens[it->second];
}

const AddedToken* AddedVocab::byContent(std::string_view content) const {
    const auto it = m_byContent.find(std::string(content));
    return it == m_byContent.end() ? nullptr : &m_tokens[it->second];
}

void AddedVocab::split(Pieces& pieces, const LongestMatch& m) const {
    if (m.empty())
        return;
    Pieces out;
    for (auto& p : pieces) {
        if (p.token >= 0) {
            out.push_back(std::move(p));
            continue;
        }
        const std::string& s = p.text;
        std::size_t startOffset = 0;
        auto emit = [&](std::size_t b, std::size_t e, int32_t token) {
            if (e > b)
                out.push_back({s.substr(b, e - b), p.atStart && b == 0, token});
        };
        for (std::size_t pos = 0; pos < s.size();) {
            const auto hit = m.at(s, pos);
            if (!hit) {
                ++pos;
                continue;
            }
            const AddedToken& tok = m_tokens[hit->value];
            std::size_t start = pos, stop = pos + hit->length;
            pos = stop; // matches never overlap, even when this one is discarded
            if (tok.singleWord) {
                const bool startSpace = start == 0 || !isWordChar(lastChar(s.substr(0, start)));
                std::size_t k = stop;
                const bool stopSpace = stop == s.size() || !isWordChar(uni::next(s, k));
                if (!startSpace || !stopSpace)
                    continue;
            }
            if (tok.lstrip) {
                std::size_t newStart = start;
                while (newStart > 0 && uni::isWhitespace(lastChar(s.substr(0, newStart)))) {
                    --newStart;
                    while (newStart > 0 && (static_cast<unsigned char>(s[newStart]) & 0xC0) == 0x80)
                        --newStart;
                }
                start = std::max(newStart, startOffset);
            }
            if (tok.rstrip) {
                std::size_t k = stop;
                while (k < s.size()) {
                    std::size_t j = k;
                    if (!uni::isWhitespace(uni::next(s, j)))
                        break;
                    k = j;
                }
                stop = k;
            }
            if (startOffset < start)
                emit(startOffset, start, -1);
            out.push_back({s.substr(start, stop - start), p.atStart && start == 0, tok.id});
            startOffset = stop;
            pos = std::max(pos, stop);
        }
        if (startOffset < s.size())
            emit(startOffset, s.size(), -1);
    }
    pieces = std::move(out);
}

Pieces AddedVocab::extractAndNormalize(std::string_view text, const Normalizer* normalizer) const {
    Pieces pieces;
    if (!text.empty())
        pieces.push_back({std::string(text), true, -1});
    split(pieces, m_raw);
    for (auto& p : pieces)
        if (p.token < 0 && normalizer)
            p.text = normalizer->normalize(std::move(p.text));
    Pieces nonEmpty;
    for (auto& p : pieces)
        if (!p.text.empty())
            nonEmpty.push_back(std::move(p));
    split(nonEmpty, m_normalized);
    return nonEmpty;
}

} // namespace kvscope::tok::hf
