// Exporting any loaded tokenizer as a standard Hugging Face tokenizer folder
// (tokenizer.json + tokenizer_config.json), e.g. for `kvscope-cli convert --to hf`.
//
// What each kind becomes:
//  - "llama2c" and "gguf-llama" (SentencePiece BPE by scores): a Llama-2-style tokenizer.json:
//    BPE with byte_fallback and fuse_unk, "▁" for spaces, merges derived from the scores the way
//    HF's SentencePiece converter does, normalizer Prepend("▁") + Replace(" " -> "▁") (the dummy
//    prefix; Replace only when the GGUF sets add_space_prefix = false), TemplateProcessing for
//    BOS/EOS, decoder Replace + ByteFallback + Fuse + Strip, control tokens as special added
//    tokens. llama2c's ids 0/1/2 are spelled <unk>, <s>, </s>.
//  - "gguf-gpt2": byte-level BPE with the file's merges and the pre-tokenizer that
//    tokenizer.ggml.pre names (the same sections kvscope tokenizes with).
//  - "hf-*": the original tokenizer.json and tokenizer_config.json, read again from
//    sourcePath() (a config is generated when the source folder has none).
//
// The exported files load back (kvscope or HF `tokenizers`) to the same ids and decoded text,
// with one documented difference: llama2c's run.c never treats "<s>" typed in the text as a
// special token, HF does; and run.c decodes BOS/EOS as "\n<s>\n" / "\n</s>\n".
//
// Thread-safety: a pure function of the (immutable) tokenizer; safe from any thread.
#pragma once

#include "tokenizer/tokenizer.h"

#include <string>

namespace kvscope::tok {

// The contents of the two files (UTF-8 JSON text), to be written side by side in one folder.
struct HfTokenizerFiles {
    std::string tokenizerJson;
    std::string tokenizerConfigJson;
};

// Errors: a vocabulary HF cannot represent (duplicate pieces, invalid UTF-8 in a piece), an HF
// source file that can no longer be read, or a tokenizer kind this build does not know.
Result<HfTokenizerFiles> exportHuggingFace(const Tokenizer& tokenizer);

} // namespace kvscope::tok
