// kvscope tokenizers: text <-> token ids, agreeing exactly with the reference implementations
// (Hugging Face `tokenizers` for tokenizer.json, llama2.c run.c for its tokenizer .bin,
// llama.cpp for GGUF-embedded vocabularies).
//
// Qt-free and torch-free. A Tokenizer is immutable after load; every const member function is
// safe to call from several threads at once. Errors at load time are returned as Result values
// whose message names the file and the field or line ("tokenizer.json: model.merges[18917]:
// ...").
#pragma once

#include "util/status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::tok {

struct EncodeOptions {
    // true: add the model's special tokens (BOS, template tokens), like HF
    // `add_special_tokens=True` or llama2.c's BOS. false == HF add_special_tokens=False.
    bool addSpecialTokens = true;
};

class Tokenizer {
public:
    virtual ~Tokenizer();

    // Loads a tokenizer and detects its kind from the content:
    //  - a folder: its tokenizer.json (or tokenizer.bin / tok*.bin / a single *.gguf);
    //  - a tokenizer.json (Hugging Face `tokenizers`; tokenizer_config.json beside it is read
    //    for chat_template, bos/eos tokens and add_bos_token);
    //  - a GGUF file with an embedded vocabulary (tokenizer.ggml.*);
    //  - a llama2.c tokenizer .bin.
    static Result<std::shared_ptr<const Tokenizer>> fromFile(const std::string& path);
    // The same detection and loaders over a file's bytes already in memory (fuzzers, tests):
    // `name` stands in for the path in errors and sourcePath(). No tokenizer_config.json is
    // read for a tokenizer.json given this way.
    static Result<std::shared_ptr<const Tokenizer>> fromMemory(std::vector<std::uint8_t> bytes,
                                                               std::string name = "<memory>");

    // Text (UTF-8; invalid sequences are replaced by U+FFFD first) -> token ids.
    virtual std::vector<int32_t> encode(std::string_view text,
                                        const EncodeOptions& options = {}) const = 0;
    // Token ids -> text, like HF `decode(ids, skip_special_tokens)`. Unknown ids are skipped.
    virtual std::string decode(std::span<const int32_t> ids,
                               bool skipSpecialTokens = false) const = 0;
    // Streaming: the bytes that token `id` adds when it follows `prev` (prev < 0: first token).
    // Concatenating decodeNext over a generation prints it incrementally; the pieces may split
    // a UTF-8 character across calls. For the llama2.c kind this is run.c's decode(): the
    // leading space of the piece after BOS is dropped and <0xNN> becomes the raw byte.
    virtual std::string decodeNext(int32_t prev, int32_t id) const;

    virtual int32_t vocabSize() const = 0;
    virtual std::optional<int32_t> bosId() const = 0;
    virtual std::optional<int32_t> eosId() const = 0;
    // The raw vocabulary piece (e.g. "Ġthe", "▁the", "<0x0A>", "<s>"); "" for an unknown id.
    // Bytes as the file holds them: not always valid UTF-8 (llama2.c exports of byte-level
    // vocabularies store partial characters), so callers that print or serialize it as JSON
    // must escape or replace invalid sequences.
    virtual std::string tokenText(int32_t id) const = 0;
    // Control / special tokens (BOS, EOS, chat markers): HF `special: true` added tokens,
    // GGUF token_type control, llama2.c ids 0..2.
    virtual bool isSpecial(int32_t id) const = 0;
    // "llama2c", "hf-bpe-bytelevel", "hf-bpe-sentencepiece", "hf-bpe", "gguf-llama",
    // "gguf-gpt2".
    virtual std::string kind() const = 0;
    // 16 hex digits; a hash of everything that changes the id mapping (vocab, merges or
    // scores, special/added tokens and their flags, normalizer, pre-tokenizer, post-processor,
    // decoder) and the chat template. Stable across runs and platforms.
    virtual std::string fingerprint() const = 0;
    // The chat template (Jinja source), when the file ships one.
    virtual std::optional<std::string> chatTemplate() const = 0;
    // The file the tokenizer was loaded from (a folder resolves to the file inside it).
    virtual std::string sourcePath() const = 0;
};

} // namespace kvscope::tok
