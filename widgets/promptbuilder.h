// PromptBuilder: turns the session panel's prompt (raw text or system/user chat messages) into
// token ids with one segment label per token, the colours of the token strip.
//
// Chat mode renders the tokenizer's chat template with the generation prompt and encodes the
// result without adding special tokens (as transformers' apply_chat_template does: the
// template writes BOS itself). Segment labels come from the template's byte ranges; a token
// belongs to the segment its first decoded byte falls in. Without a tokenizer the text is read
// as whitespace-separated token ids. Thread-safe (pure function of its inputs).
#pragma once

#include "viewdata.h"

#include <memory>
#include <vector>

namespace kvscope::tok {
class Tokenizer;
}

namespace kvscope::widgets {

struct BuiltPrompt {
    std::vector<int32_t> ids;
    std::vector<QString> segments; // one per id
    QString error;                 // non-empty: nothing to feed, say why
};

BuiltPrompt buildPrompt(const PromptRequest& request,
                        const std::shared_ptr<const kvscope::tok::Tokenizer>& tokenizer);

} // namespace kvscope::widgets
