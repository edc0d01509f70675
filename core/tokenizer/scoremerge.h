// SentencePiece-style BPE by piece scores (internal): repeatedly merge the adjacent pair whose
// concatenation is a vocabulary piece with the highest score (leftmost on ties) until no pair
// qualifies. This is what llama2.c run.c encode() and llama.cpp's SPM tokenizer do; a heap
// keeps it O(n log n) instead of run.c's rescan per merge, with the same result.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::tok {

struct ScoredSymbol {
    std::string text; // bytes used to form concatenations
    int32_t id = -1;  // vocabulary id, -1 when text is not a piece
};

struct PieceScore {
    int32_t id;
    float score;
};

// lookup(text) -> the piece and its score, or nullopt when text is not in the vocabulary.
// Pairs whose piece score is not > minScore are never merged (run.c starts from -1e10).
using PieceLookup = std::function<std::optional<PieceScore>(std::string_view)>;

std::vector<ScoredSymbol> mergeByScore(std::vector<ScoredSymbol> symbols, const PieceLookup& lookup,
                                       float minScore = -1e10f);

} // namespace kvscope::tok
