// The llama2.c tokenizer .bin (karpathy/llama2.c tokenizer.py export), internal.
//
// File layout (little-endian): int32 max_token_length, then per token: float32 score,
// int32 byte length, the bytes. The token count is not stored; it is the number of records.
// Encoding and decoding follow run.c exactly (see llama2ctokenizer.cpp).
#pragma once

#include "tokenizer/tokenizer.h"

#include <unordered_map>

namespace kvscope::tok {

class Llama2cTokenizer final : public Tokenizer {
public:
    // Parses a file's bytes; throws KvError naming the file (path's file name) and the record
    // on malformed input.
    static std::shared_ptr<const Tokenizer> load(std::span<const std::uint8_t> bytes,
                                                 const std::string& path);

    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const override;
    std::string decode(std::span<const int32_t> ids, bool skipSpecialTokens) const override;
    std::string decodeNext(int32_t prev, int32_t id) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(m_pieces.size()); }
    std::optional<int32_t> bosId() const override { return kBos; }
    std::optional<int32_t> eosId() const override { return kEos; }
    std::string tokenText(int32_t id) const override;
    bool isSpecial(int32_t id) const override { return id >= 0 && id <= kEos; }
    std::string kind() const override { return "llama2c"; }
    std::string fingerprint() const override { return m_fingerprint; }
    std::optional<std::string> chatTemplate() const override { return std::nullopt; }
    std::string sourcePath() const override { return m_path; }

    // The raw records, for exportHuggingFace: pieces as stored (raw spaces, "\n<s>\n").
    const std::vector<std::string>& pieces() const { return m_pieces; }
    const std::vector<float>& scores() const { return m_scores; }

    static constexpr int32_t kBos = 1;
    static constexpr int32_t kEos = 2;

private:
    int32_t lookup(std::string_view piece) const;

    std::string m_path;
    std::vector<std::string> m_pieces;
    std::vector<float> m_scores;
    std::unordered_map<std::string, int32_t> m_index;
    int32_t m_maxTokenLength = 0;
    std::string m_fingerprint;
};

} // namespace kvscope::tok
