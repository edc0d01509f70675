#include "state/ledger/chatprompt.h"

#include <algorithm>

namespace kvscope::state {

namespace {

int64_t commonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    std::size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n])
        ++n;
    return static_cast<int64_t>(n);
}

} // namespace

Result<ChatPrompt> buildChatPrompt(const tok::Tokenizer& tokenizer, const chat::Template& tmpl,
                                   const nlohmann::ordered_json& messages,
                                   const ChatPromptOptions& options) {
    return catchToResult([&]() -> ChatPrompt {
        chat::RenderOptions ro = options.render;
        if (!ro.extraVariables.is_object())
            ro.extraVariables = nlohmann::ordered_json::object();
        if (auto bos = tokenizer.bosId(); bos && !ro.extraVariables.contains("bos_token"))
            ro.extraVariables["bos_token"] = tokenizer.tokenText(*bos);
        if (auto eos = tokenizer.eosId(); eos && !ro.extraVariables.contains("eos_token"))
            ro.extraVariables["eos_token"] = tokenizer.tokenText(*eos);
        auto rendered = tmpl.renderWithSegments(messages, ro);
        if (!rendered)
            throw KvError(rendered.message());
        ChatPrompt out;
        out.text = rendered.value().text;
        out.textSegments = rendered.value().segments;
        const tok::EncodeOptions noSpecial{.addSpecialTokens = false};
        out.tokens = tokenizer.encode(out.text, noSpecial);

        int64_t prev = 0;
        for (const auto& seg : out.textSegments) {
            int64_t end = static_cast<int64_t>(out.tokens.size());
            if (seg.end < out.text.size()) {
                const auto prefix =
                    tokenizer.encode(std::string_view(out.text).substr(0, seg.end), noSpecial);
                end = commonPrefix(prefix, out.tokens);
            }
            end = std::max(end, prev);
            if (end > prev)
                out.meta.segments.push_back({prev, end, seg.role, seg.kind, seg.messageIndex});
            prev = end;
        }
        const int32_t bos = tokenizer.bosId().value_or(-1);
        out.meta.bosId = bos;
        const bool hasBos = bos >= 0 && !out.tokens.empty() && out.tokens[0] == bos;
        out.meta.bosHandling = hasBos ? "template" : "none";
        if (!hasBos && options.addBosIfMissing && bos >= 0) {
            out.tokens.insert(out.tokens.begin(), bos);
            for (auto& s : out.meta.segments) {
                s.begin += 1;
                s.end += 1;
            }
            out.meta.segments.insert(out.meta.segments.begin(), {0, 1, "", "scaffold", -1});
            out.meta.bosHandling = "tokenizer";
        }
        out.meta.promptTokens = static_cast<int64_t>(out.tokens.size());
        out.meta.chatTemplateName = options.templateName;
        out.meta.chatTemplateHash = tmpl.hash();
        for (const auto& m : messages) {
            if (m.is_object() && m.value("role", "") == "system" && m.contains("content") &&
                m["content"].is_string()) {
                out.meta.systemPrompt = m["content"].get<std::string>();
                break;
            }
        }
        return out;
    });
}

} // namespace kvscope::state
