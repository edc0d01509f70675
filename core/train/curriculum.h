// Recall curriculum: training windows that can only be predicted by looking back.
//
// A small model trained on natural text for a few million tokens learns which words are
// likely, but not to reuse what its context already said: names are predicted from their
// corpus frequency, not from the sentence before. Two kinds of window teach the look-back
// (the circuits called induction heads: attend to the token after an earlier occurrence of
// the current token and copy it):
//
//  - renamed: the recurring proper nouns of a natural window (tokens like " Moses" that the
//    corpus writes capitalised far more often than lower case) are replaced, consistently
//    across the window, by invented names of 1-3 tokens (" Ab" + "ish" + "ur"). The first
//    mention is not scored (nothing could predict an invented name); every later mention is,
//    and only the context can say which name comes.
//  - repeated (Fill): after a short natural prefix (at most 16 tokens), a segment of 4-16
//    tokens drawn at random from the window itself repeats to the end of the window; the first copy
//    and the first token of the second are not scored, the rest is predictable only by copying —
//    the classic task on which induction heads form (Olsson et al. 2022), and a dense signal: a
//    window has up to ~T copy targets where a renamed one has a handful.
//
//  - repeated (Twice): a segment of 8-32 such tokens written twice into a natural window,
//    natural text between: one earlier mention to recall from, as in real text; the first
//    copy and the first token of the second are not scored.
//
// Each row also marks its `recall` tokens (later mentions, repeated copies), which the
// trainer's recall probe scores on held-out text.
//
// Everything is deterministic given the generator. The header is torch-free.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

namespace kvscope::tok {
class Tokenizer;
}

namespace kvscope::train {

struct TokenPools {
    std::vector<int32_t> nameStarts;         // " X..." : a space, an upper-case letter, letters
    std::vector<int32_t> namePieces;         // "abc": 2-4 lower-case letters, no space
    std::vector<int32_t> words;              // " abc": a space and 2+ lower-case letters
    std::unordered_set<int32_t> properNouns; // name starts the corpus rarely writes lower case
    bool usable() const {
        return nameStarts.size() >= 8 && namePieces.size() >= 8 && words.size() >= 8;
    }
};

// Classifies the vocabulary by its decoded text; `corpus` (token ids) decides which
// capitalised word starts are proper nouns: capitalised at least 8 times and at least 10x as
// often as the same word in lower case.
TokenPools buildTokenPools(const tok::Tokenizer& tokenizer, std::span<const int32_t> corpus);

struct CurriculumRow {
    std::vector<int32_t> tokens; // exactly T
    std::vector<uint8_t> scored; // 1: the loss counts this token as a target
    std::vector<uint8_t> recall; // 1: predicting it needs an earlier token of the window
    int64_t recallCount() const;
};

// A natural window: tokens src[0..T), all scored, none recall.
CurriculumRow naturalRow(std::span<const int32_t> src, int64_t T);

// src must hold at least T tokens (the window consumes at most T of them).
CurriculumRow renamedRow(std::span<const int32_t> src, int64_t T, const TokenPools& pools,
                         std::mt19937_64& rng, int maxNames = 3);
enum class SegmentRepeats {
    Fill,  // the segment over and over to the end of the window (the induction-forming task)
    Twice, // two copies with natural text between (one-shot recall, as in real text)
};
CurriculumRow repeatedRow(std::span<const int32_t> src, int64_t T, const TokenPools& pools,
                          std::mt19937_64& rng, SegmentRepeats repeats = SegmentRepeats::Fill);

} // namespace kvscope::train
