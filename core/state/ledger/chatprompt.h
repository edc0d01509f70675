// Chat prompts: messages -> chat template rendering -> token ids, with the segment map
// (which token ranges are system / user / assistant / scaffold / generation prompt) that
// snapshots record in their prompt meta.
//
// The text is rendered with chat::Template::renderWithSegments (byte ranges) and encoded
// the way transformers' apply_chat_template(tokenize=True) does: without adding special
// tokens (the template renders BOS itself when the model wants one). Byte ranges become
// token ranges by prefix encoding: a boundary at byte b falls after the tokens of
// encode(text[0, b)) when those are a prefix of the whole encoding; a token that straddles
// a boundary (a merge across it) goes to the later segment.
//
// Thread-safety: pure function over immutable tokenizer/template.
#pragma once

#include "chat/template.h"
#include "state/ledger/snapshot.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::state {

struct ChatPromptOptions {
    chat::RenderOptions render; // bos_token / eos_token default to the tokenizer's pieces
    // Prepend the tokenizer's BOS when the rendered text does not encode to one (llama2.c
    // style models whose templates do not render it).
    bool addBosIfMissing = false;
    // Recorded as the template name; "tokenizer" marks the tokenizer's own template (then
    // verify compares its hash with the tokenizer's current template).
    std::string templateName = "tokenizer";
};

struct ChatPrompt {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<chat::Segment> textSegments; // byte ranges of text
    PromptMeta meta;                         // token-range segments, template name/hash, BOS
};

Result<ChatPrompt> buildChatPrompt(const tok::Tokenizer& tokenizer, const chat::Template& tmpl,
                                   const nlohmann::ordered_json& messages,
                                   const ChatPromptOptions& options = {});

} // namespace kvscope::state
