// HF added tokens (internal): tokens matched in the text before the model runs, with the
// flags special, lstrip, rstrip, single_word and normalized (HF AddedVocabulary).
#pragma once

#include "tokenizer/hfcomponents.h"
#include "tokenizer/longestmatch.h"

#include <unordered_map>

namespace kvscope::tok::hf {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool singleWord = false;
    bool normalized = true;
    // What decode() emits: HF decodes a `normalized` token as its normalized content
    // ("<unk>" -> "▁<unk>" under a Prepend normalizer); otherwise the content.
    std::string decodeText;
};

class AddedVocab {
public:
    AddedVocab() = default;
    // normalizer (may be null) turns the contents of `normalized` tokens into their patterns.
    AddedVocab(std::vector<AddedToken> tokens, const Normalizer* normalizer);

    // HF extract_and_normalize: split on non-normalized tokens in the raw text, normalize
    // the remaining pieces, then split them on the normalized tokens.
    Pieces extractAndNormalize(std::string_view text, const Normalizer* normalizer) const;

    const AddedToken* byId(int32_t id) const;
    const AddedToken* byContent(std::string_view content) const;
    const std::vector<AddedToken>& tokens() const { return m_tokens; }

private:
    // Splits on the tokens m finds (its values are indices into m_tokens).
    void split(Pieces& pieces, const LongestMatch& m) const;

    std::vector<AddedToken> m_tokens;
    std::unordered_map<int32_t, std::size_t> m_byId;
    std::unordered_map<std::string, std::size_t> m_byContent;
    LongestMatch m_raw, m_normalized;
};

} // namespace kvscope::tok::hf
