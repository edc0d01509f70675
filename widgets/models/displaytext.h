// The display form of the small values core reports, written once so that every panel shows
// them alike: a token's text, a generation's stop reason, a lineage edge's parameters.
// Pure functions of their arguments (no core recomputation): they only format what core gave.
#pragma once

#include <QString>

namespace kvscope::widgets {

// A token as every panel shows it (token strip, drift, induction, transplant, positions): its
// decoded text with whitespace and control characters made visible — space "·", newline "⏎",
// tab "⇥", other control characters as their control picture ("␍") — and "∅" for no text.
// `text` is the decoded text (what the tokenizer prints), never a raw vocabulary piece.
QString displayToken(const QString& text);

// A generation's stop reason ("steps", "eos", "bos", "context_full", "cancelled") as words
// for a sentence ("stopped at end of text"); empty for "steps" — all the asked-for steps ran,
// which the step count already says. Unknown reasons are returned as they are.
QString stopReasonText(const QString& reason);

// A lineage edge's parameters (the compact JSON object core records, e.g.
// {"at":12,"dropped_tokens":3,"logits":"recomputed"}) as readable text:
// "at 12 · dropped 3 tokens · logits recomputed". Known keys read as words, in a fixed order
// (what was done first, the sampler last); others as "key value". Empty for no parameters;
// text that is not a JSON object is returned as it is.
QString parametersText(const QString& json);

} // namespace kvscope::widgets
