// Byte-level BPE tokenizer trainer: learns merges from a text corpus and writes a standard
// Hugging Face tokenizer.json (model BPE with vocab + merges, ByteLevel pre-tokenizer with the
// GPT-2 split regex, ByteLevel decoder, BOS added by a TemplateProcessing post-processor) and
// a tokenizer_config.json beside it (bos/eos tokens, a simple chat template).
//
// Algorithm: the corpus is split exactly as the written tokenizer will split it (the same
// ByteLevel pre-tokenizer component the tokenizer loader builds), identical pieces are counted,
// and merges are learned greedily: each round merges the most frequent adjacent pair of
// symbols, ties broken by the byte order of (left, right). Vocabulary ids: the special tokens
// first, then the 256 byte symbols in byte order, then one token per merge in merge order.
// The output bytes depend only on the corpus and the options (no hash-order dependence).
//
// Thread-safety: free functions without shared state; safe to call concurrently.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvscope::train {

struct BpeOptions {
    int32_t vocabSize = 4096; // total, including special tokens and the 256 byte symbols
    int64_t minFrequency = 2; // a pair seen fewer times is never merged
    std::vector<std::string> specialTokens = {"<|bos|>", "<|eos|>", "<|system|>", "<|user|>",
                                              "<|assistant|>"};
    std::string bosToken = "<|bos|>"; // added before every encoded text; "" for none
    std::string eosToken = "<|eos|>"; // end of a chat turn / of a generation
    int64_t modelMaxLength = 256;     // tokenizer_config.json model_max_length
};

struct BpeResult {
    std::string tokenizerJson;                               // the file's bytes
    std::string tokenizerConfigJson;                         // tokenizer_config.json's bytes
    std::vector<std::pair<std::string, std::string>> merges; // in merge order (byte-level text)
    int32_t vocabSize = 0; // may be below the request when the corpus runs out of pairs
    int64_t corpusBytes = 0;
    int64_t uniquePieces = 0;
};

// The chat template written into tokenizer_config.json:
//   <|bos|><|user|>\n{content}<|eos|>\n<|assistant|>\n...
std::string demoChatTemplate();

// Trains on `corpus` (UTF-8; invalid bytes are replaced by U+FFFD as the tokenizer does).
// Errors: a vocabulary smaller than specials + 256, duplicate or empty special tokens.
// `onProgress(mergesDone, mergesWanted)` is called now and then.
Result<BpeResult> trainBpe(const std::string& corpus, const BpeOptions& options,
                           const std::function<void(int64_t, int64_t)>& onProgress = {});

// Writes result.tokenizerJson to `tokenizerPath` and tokenizer_config.json into the same
// folder, atomically (an existing file is untouched when writing fails).
Status writeBpe(const BpeResult& result, const std::string& tokenizerPath);

} // namespace kvscope::train
