#include "tokenizer/llama2ctokenizer.h"
#include "tokenizer/loaders.h"
#include "tokenizer/scoremerge.h"

#include "util/fileio.h"
#include "util/hash.h"

#include <cstring>
#include <filesystem>

namespace kvscope::tok {

std::shared_ptr<const Tokenizer> Llama2cTokenizer::load(std::span<const std::uint8_t> bytes,
                                                        const std::string& path) {
    const std::string name = std::filesystem::path(path).filename().string();
    ByteReader r(bytes.data(), bytes.size(), name);
    auto t = std::make_shared<Llama2cTokenizer>();
    t->m_path = path;
    t->m_maxTokenLength = r.i32("max_token_length");
    if (t->m_maxTokenLength <= 0 || t->m_maxTokenLength > (1 << 16))
        r.fail("max_token_length", "value " + std::to_string(t->m_maxTokenLength) +
                                       " is not in 1..65536 (not a llama2.c tokenizer .bin?)");
    while (r.remaining() > 0) {
        const std::string field = "token[" + std::to_string(t->m_pieces.size()) + "]";
        const float score = r.f32((field + ".score").c_str());
        const int32_t len = r.i32((field + ".length").c_str());
        if (len < 0 || len > t->m_maxTokenLength)
            r.fail(field + ".length", "value " + std::to_string(len) +
                                          " is outside 0..max_token_length (" +
                                          std::to_string(t->m_maxTokenLength) + ")");
        t->m_pieces.push_back(r.bytes(static_cast<std::size_t>(len), (field + ".bytes").c_str()));
        t->m_scores.push_back(score);
    }
    if (t->m_pieces.size() < 3)
        throw KvError(name + ": only " + std::to_string(t->m_pieces.size()) +
                      " tokens; a llama2.c tokenizer needs at least <unk>, BOS and EOS");
    Hasher h;
    h.updateField("llama2c");
    for (std::size_t i = 0; i < t->m_pieces.size(); ++i) {
        t->m_index.emplace(t->m_pieces[i], static_cast<int32_t>(i));
        h.updateField(t->m_pieces[i]);
        h.update(&t->m_scores[i], sizeof(float));
    }
    t->m_fingerprint = hex64(h.digest());
    return t;
}

int32_t Llama2cTokenizer::lookup(std::string_view piece) const {
    const auto it = m_index.find(std::string(piece));
    return it == m_index.end() ? -1 : it->second;
}

std::string Llama2cTokenizer::tokenText(int32_t id) const {
    return id >= 0 && id < vocabSize() ? m_pieces[id] : std::string();
}

// run.c encode(text, bos, eos=0): BOS, the dummy-prefix " " token, one token per UTF-8
// code point (byte fallback: byte + 3), then greedy best-score merges over the whole list
// (BOS included, as run.c does).
std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text,
                                              const EncodeOptions& options) const {
    std::vector<ScoredSymbol> symbols;
    auto pushId = [&](int32_t id) { symbols.push_back({m_pieces[id], id}); };
    auto pushBytes = [&](std::string_view bytes) {
        for (unsigned char b : bytes) {
            const int32_t id = b + 3;
            if (id < vocabSize())
                pushId(id);
        }
    };
    if (options.addSpecialTokens)
        pushId(kBos);
    if (!text.empty()) {
        if (const int32_t space = lookup(" "); space >= 0)
            pushId(space);
        else
            pushBytes(" ");
    }
    std::string buffer;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if ((c & 0xC0) != 0x80)
            buffer.clear();
        buffer += static_cast<char>(c);
        const bool nextIsContinuation =
            i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
        if (nextIsContinuation && buffer.size() < 4)
            continue;
        if (const int32_t id = lookup(buffer); id >= 0)
            pushId(id);
        else
            pushBytes(buffer);
        buffer.clear();
    }
    const auto merged = mergeByScore(std::move(symbols), [this](std::string_view s) {
        const int32_t id = lookup(s);
        return id < 0 ? std::nullopt : std::optional<PieceScore>({id, m_scores[id]});
    });
    std::vector<int32_t> ids;
    ids.reserve(merged.size());
    for (const auto& s : merged)
        ids.push_back(s.id);
    return ids;
}

// run.c decode(prev, token): drop the leading space of the piece after BOS; a "<0xNN>" piece
// is the raw byte NN.
std::string Llama2cTokenizer::decodeNext(int32_t prev, int32_t id) const {
    if (id < 0 || id >= vocabSize())
        return {};
    std::string_view piece = m_pieces[id];
    if (prev == kBos && !piece.empty() && piece[0] == ' ')
        piece.remove_prefix(1);
    if (piece.size() >= 4 && piece.substr(0, 3) == "<0x" &&
        std::isxdigit((unsigned char)piece[3])) {
        int value = 0;
        for (std::size_t k = 3; k < 5 && k < piece.size() && std::isxdigit((unsigned char)piece[k]);
             ++k)
            value = value * 16 + (std::isdigit((unsigned char)piece[k])
                                      ? piece[k] - '0'
                                      : (std::toupper((unsigned char)piece[k]) - 'A' + 10));
        return std::string(1, static_cast<char>(value));
    }
    return std::string(piece);
}

// The whole sequence is decoded as if it followed BOS, so the SentencePiece dummy-prefix
// space is dropped whether or not the ids start with BOS: decode(encode(s), true) == s.
std::string Llama2cTokenizer::decode(std::span<const int32_t> ids, bool skipSpecialTokens) const {
    std::string out;
    int32_t prev = kBos;
    for (const int32_t id : ids) {
        if (!(skipSpecialTokens && isSpecial(id)))
            out += decodeNext(prev, id);
        prev = id;
    }
    return out;
}

} // namespace kvscope::tok

namespace kvscope::tok {
std::shared_ptr<const Tokenizer> loadLlama2c(std::span<const std::uint8_t> bytes,
                                             const std::string& path) {
    return Llama2cTokenizer::load(bytes, path);
}
std::shared_ptr<const Tokenizer> loadLlama2c(const std::string& path) {
    return Llama2cTokenizer::load(readFileBytes(path, 1ull << 30), path);
}
} // namespace kvscope::tok
