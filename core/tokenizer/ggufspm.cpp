#include "tokenizer/ggufspm.h"

#include "tokenizer/scoremerge.h"
#include "tokenizer/unicode.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace kvscope::tok {

namespace {
const std::string kSpace = "\xE2\x96\x81"; // U+2581, SentencePiece's visible space

std::string escapeSpaces(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 8);
    for (char c : s)
        if (c == ' ')
            out += kSpace;
        else
            out += c;
    return out;
}

std::string unescapeSpaces(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size();) {
        if (s.compare(i, kSpace.size(), kSpace) == 0) {
            out += ' ';
            i += kSpace.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}
} // namespace

GgufSpmTokenizer::GgufSpmTokenizer(SpmVocab vocab, std::string path,
                                   std::optional<std::string> chatTemplate, std::string fingerprint)
    : m_v(std::move(vocab)), m_path(std::move(path)), m_chatTemplate(std::move(chatTemplate)),
      m_fingerprint(std::move(fingerprint)) {
    m_v.types.resize(m_v.pieces.size(), 1);
    m_v.scores.resize(m_v.pieces.size(), 0.0f);
    std::vector<std::pair<std::string, std::size_t>> special; // longest wins, then lowest id
    for (std::size_t i = 0; i < m_v.pieces.size(); ++i) {
        m_index.emplace(m_v.pieces[i], static_cast<int32_t>(i));
        if (m_v.types[i] == kTypeControl || m_v.types[i] == kTypeUserDefined)
            special.emplace_back(m_v.pieces[i], i);
    }
    m_special = LongestMatch(std::move(special));
    m_byteIds.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto it = m_index.find(std::string_view(name)); it != m_index.end())
            m_byteIds[b] = it->second;
        else if (auto it1 = m_index.find(std::string(1, static_cast<char>(b)));
                 it1 != m_index.end())
            m_byteIds[b] = it1->second; // llama.cpp falls back to the single-byte piece
    }
}

std::string GgufSpmTokenizer::tokenText(int32_t id) const {
    return id >= 0 && id < vocabSize() ? m_v.pieces[id] : std::string();
}

bool GgufSpmTokenizer::isSpecial(int32_t id) const {
    return id >= 0 && id < vocabSize() && m_v.types[id] == kTypeControl;
}

int GgufSpmTokenizer::byteValue(int32_t id) const {
    if (id < 0 || id >= vocabSize() || m_v.types[id] != kTypeByte)
        return -1;
    const std::string& p = m_v.pieces[id];
    if (p.size() == 1)
        return static_cast<unsigned char>(p[0]);
    return uni::byteToken(p); // -1 for a malformed "<0x..>" piece: decoded as text
}

// llm_tokenizer_spm: one symbol per UTF-8 character, best-score merges, then pieces that are
// not in the vocabulary (single characters) become their byte tokens.
void GgufSpmTokenizer::tokenizeText(std::string text, std::vector<int32_t>& out) const {
    std::vector<ScoredSymbol> symbols;
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t n =
            std::min(uni::seqLen(static_cast<unsigned char>(text[i])), text.size() - i);
        symbols.push_back({text.substr(i, n), -1});
        i += n;
    }
    const auto merged = mergeByScore(
        std::move(symbols),
        [this](std::string_view s) -> std::optional<PieceScore> {
            const auto it = m_index.find(s);
            if (it == m_index.end())
                return std::nullopt;
            return PieceScore{it->second, m_v.scores[it->second]};
        },
        -std::numeric_limits<float>::infinity());
    for (const auto& s : merged) {
        if (const auto it = m_index.find(s.text); it != m_index.end()) {
            out.push_back(it->second);
            continue;
        }
        for (unsigned char b : s.text) {
            if (m_byteIds[b] >= 0)
                out.push_back(m_byteIds[b]);
            else if (m_v.unk)
                out.push_back(*m_v.unk);
        }
    }
}

std::vector<int32_t> GgufSpmTokenizer::encode(std::string_view rawText,
                                              const EncodeOptions& options) const {
    const std::string text = uni::isValid(rawText) ? std::string(rawText) : uni::lossy(rawText);
    std::vector<int32_t> out;
    if (options.addSpecialTokens && m_v.addBos && m_v.bos)
        out.push_back(*m_v.bos);
    // Control and user-defined tokens in the text are matched first (longest at each
    // position, as llama.cpp's tokenizer_st_partition with parse_special).
    bool prevSpecial = true;
    std::size_t start = 0;
    auto flushText = [&](std::size_t end) {
        if (end <= start)
            return;
        std::string fragment = m_v.addSpacePrefix && prevSpecial ? " " : "";
        fragment.append(text, start, end - start);
        tokenizeText(escapeSpaces(fragment), out);
        prevSpecial = false;
    };
    for (std::size_t pos = 0; pos < text.size();) {
        const auto hit = m_special.at(text, pos);
        if (!hit) {
            ++pos;
            continue;
        }
        flushText(pos);
        out.push_back(static_cast<int32_t>(hit->value));
        prevSpecial = true;
        pos += hit->length;
        start = pos;
    }
    flushText(text.size());
    if (options.addSpecialTokens && m_v.addEos && m_v.eos)
        out.push_back(*m_v.eos);
    return out;
}

std::string GgufSpmTokenizer::decodeNext(int32_t prev, int32_t id) const {
    if (id < 0 || id >= vocabSize())
        return {};
    if (const int b = byteValue(id); b >= 0)
        return std::string(1, static_cast<char>(b));
    std::string piece = unescapeSpaces(m_v.pieces[id]);
    if ((prev < 0 || (m_v.bos && prev == *m_v.bos)) && m_v.addSpacePrefix && !piece.empty() &&
        piece[0] == ' ')
        piece.erase(0, 1);
    return piece;
}

// Like HF's Llama decoder (Replace ▁, ByteFallback, Fuse, Strip one leading space).
std::string GgufSpmTokenizer::decode(std::span<const int32_t> ids, bool skipSpecialTokens) const {
    std::string out, bytes;
    auto flush = [&] {
        out += uni::isValid(bytes) ? bytes : std::string();
        if (!uni::isValid(bytes))
            for (std::size_t i = 0; i < bytes.size(); ++i)
                out += "\xEF\xBF\xBD";
        bytes.clear();
    };
    for (const int32_t id : ids) {
        if (id < 0 || id >= vocabSize() || (skipSpecialTokens && isSpecial(id)))
            continue;
        if (const int b = byteValue(id); b >= 0) {
            bytes += static_cast<char>(b);
            continue;
        }
        flush();
        out += unescapeSpaces(m_v.pieces[id]);
    }
    flush();
    if (m_v.addSpacePrefix && !out.empty() && out[0] == ' ')
        out.erase(0, 1);
    return out;
}

} // namespace kvscope::tok
