// Chat templates: the Jinja2 `chat_template` of a Hugging Face tokenizer, rendered the way
// transformers' apply_chat_template renders it, plus a segment map of the rendered text.
//
// Rendering matches Python jinja2 3.1 configured like transformers: ImmutableSandboxedEnvironment
// with trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, the loopcontrols
// extension ({% break %}/{% continue %}), a no-op {% generation %} block, and the globals
// raise_exception(message), strftime_now(format), range (sandbox-capped at 100000), namespace
// and dict. The tojson filter is transformers' json.dumps(x, ensure_ascii=False, indent,
// separators, sort_keys), so it preserves key order: pass messages as nlohmann::ordered_json
// (a plain nlohmann::json converts implicitly, with its keys sorted).
//
// Variables: `messages`, `add_generation_prompt` and everything in extraVariables
// (bos_token, eos_token, tools, documents, date_string, enable_thinking, ...). Note that
// transformers itself also passes tools=None and documents=None when none are given; put
// them in extraVariables to reproduce that (templates that test `tools is defined` differ).
//
// Not supported: {% include %}/{% extends %}/{% import %}, recursive loops, *args/**kwargs in
// calls, Python bigints (ints are 64-bit), locale-aware case mapping beyond Latin, Greek and
// Cyrillic, and generator objects (select/map/... return lists, so `{{ x|map(...) }}` prints
// a list where Python prints "<generator object ...>").
//
// Limits: a hostile template stops with an error instead of hanging or exhausting memory
// (the bounds Python jinja2's sandbox leaves open). Per render, in RenderOptions (defaults):
//   maxSteps 10,000,000       work: every statement, expression, loop iteration and macro
//                             call, and filter/method/operator work in proportion to the bytes
//                             and items it reads and writes; about 1 s of rendering at most
//   maxMemoryBytes 64 MiB     strings, lists and dicts the template has built and still holds
//                             (the caller's messages and variables are not counted)
//   maxStringBytes 32 MiB     each string value built; maxItems 1,000,000: each list or dict
//   maxOutputBytes 32 MiB     the rendered text
//   maxLoopIterations 1,000,000, maxMacroDepth 64 (recursion)
// and fixed: expressions and blocks nest at most 200 levels (parse time), evaluation at most
// 1200 levels, values 256 levels, range() at most 100,000 items (jinja2's MAX_RANGE). The 15
// real templates in ../shared/chat-templates render a 2,000-message conversation with under
// 310,000 steps and 90 KiB of values. A syntax error reads "<name>:<line>:<column>: ...", a
// limit "<name>:<line>: render stopped: <the limit and its value>", e.g. "chat_template:3:
// render stopped: the step budget of 10000000 was used up (a loop or macro fans out)".
//
// Thread-safety: a Template is immutable after parse(); render() may run concurrently.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::chat {

// A byte range [begin, end) of the rendered text.
//
// The map is built by prefix rendering: messages[0..i) are rendered for every i (without the
// generation prompt) and the growth from i-1 to i is attributed to message i, including its
// role header and end-of-turn tokens. Text rendered for an empty conversation (a BOS token,
// a fixed preamble) is "scaffold"; what add_generation_prompt appends after the last message
// is "generation_prompt". This needs each shorter rendering to be a prefix of the next; a
// fixed tail every rendering ends with (Phi-3 appends eos_token without a generation
// prompt) is stripped first and, when it is all that follows the last message, is scaffold.
// Each message's content must also land in its own segment (checked when it appears in the
// text at all). Templates that break this (Llama 2 and Mistral v0.2 render the system prompt
// inside the first user turn; templates that drop reasoning from earlier turns or raise on
// partial conversations) get one segment of kind "unsegmented" (role "", messageIndex -1)
// over the conversation, then a generation_prompt segment when the rendering without it is an
// exact prefix. Segments are sorted, contiguous, non-empty and cover the text exactly. Cost:
// messages.size() + 2 extra renders.
struct Segment {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::string role;      // message role; "assistant" for the generation prompt; "" otherwise
    int messageIndex = -1; // index into messages; -1 for scaffold, generation prompt, unsegmented
    std::string kind;      // "message" | "generation_prompt" | "scaffold" | "unsegmented"
};

struct Rendered {
    std::string text;
    std::vector<Segment> segments;
};

struct RenderOptions {
    bool addGenerationPrompt = false;
    // Leave `add_generation_prompt` undefined instead (renderers that omit the kwarg, like the
    // huggingface.js tests; transformers always passes it).
    bool undefinedAddGenerationPrompt = false;
    nlohmann::ordered_json extraVariables = nlohmann::ordered_json::object();
    // The calendar time strftime_now() formats; unset: the local time at render.
    std::optional<std::tm> now;
    // Limits of one render (see "Limits:" above). The defaults are far above what the real
    // templates need for a long conversation.
    std::size_t maxOutputBytes = 32u << 20;    // the rendered text
    std::size_t maxStringBytes = 32u << 20;    // each string value the template builds
    std::size_t maxItems = 1'000'000;          // each list or dict the template builds
    std::size_t maxMemoryBytes = 64u << 20;    // all values the template holds at once
    std::uint64_t maxSteps = 10'000'000;       // work
    std::size_t maxLoopIterations = 1'000'000; // over the whole render
    int maxMacroDepth = 64;
};

struct ParsedTemplate; // AST, defined in template.cpp

class Template {
public:
    // Syntax errors read "<name>:<line>:<column>: <message>" (name omitted when empty).
    static Result<Template> parse(std::string source, std::string name = {});

    // `messages` is a JSON array of objects ({"role": ..., "content": ...}, tool calls, ...).
    // A template's raise_exception(msg) reads "<name>:<line>: the template raised: msg" (msg
    // cut at 1,000 bytes); a limit reads "<name>:<line>: render stopped: ..." ("line <N>: ..."
    // when unnamed); other failures read "<name>: <message> (line N)". No internal exception
    // text (bad_alloc, ...) reaches a message.
    Result<std::string> render(const nlohmann::ordered_json& messages,
                               const RenderOptions& options = {}) const;
    Result<Rendered> renderWithSegments(const nlohmann::ordered_json& messages,
                                        const RenderOptions& options = {}) const;

    const std::string& source() const { return m_source; }
    const std::string& name() const { return m_name; }
    std::string hash() const; // hex64 (XXH3) of source()

private:
    Template() = default;
    std::string m_source;
    std::string m_name;
    std::shared_ptr<const ParsedTemplate> m_parsed;
};

} // namespace kvscope::chat
