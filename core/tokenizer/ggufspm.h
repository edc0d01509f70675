// llama.cpp's SentencePiece tokenizer for GGUF files with tokenizer.ggml.model = "llama"
// (internal): pieces with scores and token types, merges by score (see scoremerge.h),
// "<0xNN>" byte fallback, control/user-defined tokens matched in the text first.
#pragma once

#include "tokenizer/bpemodel.h"
#include "tokenizer/longestmatch.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::tok {

struct SpmVocab {
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<int32_t> types; // llama.cpp token types: 1 normal .. 6 byte
    std::optional<int32_t> bos, eos, unk;
    bool addBos = true;
    bool addEos = false;
    bool addSpacePrefix = true;
};

class GgufSpmTokenizer final : public Tokenizer {
public:
    GgufSpmTokenizer(SpmVocab vocab, std::string path, std::optional<std::string> chatTemplate,
                     std::string fingerprint);

    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const override;
    std::string decode(std::span<const int32_t> ids, bool skipSpecialTokens) const override;
    std::string decodeNext(int32_t prev, int32_t id) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(m_v.pieces.size()); }
    std::optional<int32_t> bosId() const override { return m_v.bos; }
    std::optional<int32_t> eosId() const override { return m_v.eos; }
    std::string tokenText(int32_t id) const override;
    bool isSpecial(int32_t id) const override;
    std::string kind() const override { return "gguf-llama"; }
    std::string fingerprint() const override { return m_fingerprint; }
    std::optional<std::string> chatTemplate() const override { return m_chatTemplate; }
    std::string sourcePath() const override { return m_path; }

    // The GGUF vocabulary as loaded (scores and types padded to the piece count).
    const SpmVocab& vocab() const { return m_v; }

    static constexpr int32_t kTypeControl = 3;
    static constexpr int32_t kTypeUserDefined = 4;
    static constexpr int32_t kTypeByte = 6;

private:
    void tokenizeText(std::string text, std::vector<int32_t>& out) const;
    int byteValue(int32_t id) const; // 0..255 for byte tokens, else -1

    SpmVocab m_v;
    TokenIndex m_index;
    std::vector<int32_t> m_byteIds;
    LongestMatch m_special; // control + user-defined pieces -> their ids
    std::string m_path;
    std::optional<std::string> m_chatTemplate;
    std::string m_fingerprint;
};

} // namespace kvscope::tok
