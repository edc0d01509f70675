// Parses `source` as a chat template and renders it with a small fixed conversation, plain
// and with the segment map (see check.h). Limits are lower than the defaults so that one
// input stays fast; they are checked the same way.
#pragma once

#include "check.h"
#include "chat/template.h"

namespace kvscope::fuzz {

inline Status exerciseChatTemplate(std::string source, const std::string& name) {
    auto t = chat::Template::parse(std::move(source), name);
    if (!t)
        return t.message().empty() ? Status::error("a parse error without a message")
                                   : Status::ok();
    const auto messages = nlohmann::ordered_json::parse(R"([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi <b>there</b> \u00e9"},
        {"role": "assistant", "content": "Hello!", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "user", "content": [{"type": "text", "text": "And 2+2?"}]}
    ])");
    chat::RenderOptions options;
    options.addGenerationPrompt = true;
    options.extraVariables = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"tools", nullptr}};
    options.now = std::tm{};
    options.maxOutputBytes = 1u << 20;
    options.maxLoopIterations = 100'000;
    options.maxMacroDepth = 32;
    const auto text = t.value().render(messages, options);
    if (!text)
        return Status::ok(); // raise_exception's message is exactly what the template says
    if (text.value().size() > options.maxOutputBytes)
        return Status::error("rendered " + std::to_string(text.value().size()) +
                             " bytes past maxOutputBytes");
    const auto segmented = t.value().renderWithSegments(messages, options);
    if (!segmented)
        return Status::ok();
    std::size_t at = 0;
    for (const chat::Segment& s : segmented.value().segments) {
        if (s.begin != at || s.end <= s.begin)
            return Status::error("segments are not contiguous and non-empty");
        at = s.end;
    }
    if (at != segmented.value().text.size())
        return Status::error("segments do not cover the rendered text");
    return Status::ok();
}

} // namespace kvscope::fuzz
