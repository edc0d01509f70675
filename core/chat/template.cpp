#include "chat/template.h"

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/parser.h"
#include "chat/strutil.h"
#include "util/hash.h"

#include <chrono>

namespace kvscope::chat {

struct ParsedTemplate {
    Body body;
};

namespace {

std::tm localNow() {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
}

std::string withName(const std::string& name, const std::string& message, const char* sep) {
    return name.empty() ? message : name + sep + message;
}

// "<name>:<line>: render stopped: ..." for a limit; "<name>: <message> (line N)" otherwise.
std::string located(const std::string& name, const LocatedError& e) {
    const std::string line = std::to_string(e.line());
    if (e.limit())
        return (name.empty() ? "line " + line : name + ":" + line) + ": " + e.what();
    return withName(name, std::string(e.what()) + " (line " + line + ")", ": ");
}

// "<name>:<line>: the template raised: <message>" ("line N: ..." when unnamed). A message
// longer than 1,000 bytes is cut at a character boundary and its full size said.
std::string raised(const std::string& name, const TemplateError& e) {
    constexpr std::size_t kMaxShown = 1000;
    std::string message = e.what();
    if (message.size() > kMaxShown) {
        std::size_t cut = kMaxShown;
        while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
            --cut; // not inside a UTF-8 sequence
        message =
            message.substr(0, cut) + "... (" + std::to_string(message.size()) + " bytes in all)";
    }
    const std::string line = std::to_string(e.line());
    return (name.empty() ? "line " + line : name + ":" + line) +
           ": the template raised: " + message;
}

Limits limitsOf(const RenderOptions& o) {
    Limits l;
    l.maxOutputBytes = o.maxOutputBytes;
    l.maxStringBytes = o.maxStringBytes;
    l.maxItems = o.maxItems;
    l.maxMemoryBytes = o.maxMemoryBytes;
    l.maxSteps = o.maxSteps;
    l.maxLoopIterations = o.maxLoopIterations;
    l.maxMacroDepth = o.maxMacroDepth;
    return l;
}

} // namespace

Result<Template> Template::parse(std::string source, std::string name) {
    try {
        auto parsed = std::make_shared<ParsedTemplate>();
        parsed->body = parseTemplate(source);
        Template t;
        t.m_source = std::move(source);
        t.m_name = std::move(name);
        t.m_parsed = std::move(parsed);
        return t;
    } catch (const KvError& e) {
        return Result<Template>::error(withName(name, e.what(), ":"));
    } catch (const std::bad_alloc&) {
        return Result<Template>::error(withName(name, "parse stopped: out of memory", ": "));
    } catch (const std::exception&) {
        return Result<Template>::error(
            withName(name, "internal error in the template parser", ": "));
    }
}

std::string Template::hash() const {
    return hex64(hash64(m_source));
}

Result<std::string> Template::render(const nlohmann::ordered_json& messages,
                                     const RenderOptions& options) const {
    try {
        if (!options.extraVariables.is_object())
            return Result<std::string>::error("extraVariables must be a JSON object");
        // Declared first: it must outlive every value the render meters (value.h, Metered).
        Budget budget(limitsOf(options));
        auto globals = std::make_shared<Scope>();
        addGlobals(*globals);
        for (auto it = options.extraVariables.begin(); it != options.extraVariables.end(); ++it)
            globals->vars[it.key()] = Value::fromJson(it.value());
        globals->vars["messages"] = Value::fromJson(messages);
        if (!options.undefinedAddGenerationPrompt)
            globals->vars["add_generation_prompt"] = Value(options.addGenerationPrompt);
        // The caller's variables above are not metered; what the template builds is.
        const Budget::Install install(budget);
        Interpreter interpreter(budget, options.now ? *options.now : localNow());
        return interpreter.render(m_parsed->body, globals);
    } catch (const TemplateError& e) {
        return Result<std::string>::error(raised(m_name, e));
    } catch (const LocatedError& e) {
        return Result<std::string>::error(located(m_name, e));
    } catch (const KvError& e) {
        return Result<std::string>::error(withName(m_name, e.what(), ": "));
    } catch (const std::bad_alloc&) {
        return Result<std::string>::error(withName(m_name, "render stopped: out of memory", ": "));
    } catch (const std::exception&) {
        return Result<std::string>::error(
            withName(m_name, "internal error in the template engine", ": "));
    }
}

namespace {

bool startsWith(const std::string& s, const std::string& prefix) {
    return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

void addSegment(std::vector<Segment>& out, std::size_t begin, std::size_t end, std::string role,
                int index, const char* kind) {
    if (end > begin)
        out.push_back(Segment{begin, end, std::move(role), index, kind});
}

} // namespace

Result<Rendered> Template::renderWithSegments(const nlohmann::ordered_json& messages,
                                              const RenderOptions& options) const {
    auto full = render(messages, options);
    if (!full)
        return full.status();
    Rendered r;
    r.text = std::move(full).value();
    const std::string& text = r.text;

    RenderOptions noGen = options;
    noGen.addGenerationPrompt = false;
    const std::size_t n = messages.is_array() ? messages.size() : 0;

    // renders[i]: messages[0..i) without the generation prompt; renders[0] may fail.
    std::vector<std::optional<std::string>> renders(n + 1);
    bool complete = messages.is_array();
    nlohmann::ordered_json prefix = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i <= n && complete; ++i) {
        if (i > 0)
            prefix.push_back(messages[i - 1]);
        auto part = i == n ? render(messages, noGen) : render(prefix, noGen);
        if (part)
            renders[i] = std::move(part).value();
        else
            complete = i == 0;
    }

    // Try the plain prefix property first (tail ""), then strip the shortest fixed tail that
    // every rendering ends with (Phi-3 appends eos_token when there is no generation prompt).
    std::vector<std::size_t> ends; // ends[i]: end of messages[0..i) in `text`
    std::size_t tailLen = 0;
    if (complete && n > 0) {
        const std::string& last = *renders[n];
        std::size_t common = last.size();
        for (std::size_t i = 1; i < n; ++i) {
            std::size_t k = 0;
            const std::string& ri = *renders[i];
            while (k < common && k < ri.size() &&
                   ri[ri.size() - 1 - k] == last[last.size() - 1 - k])
                ++k;
            common = k;
        }
        for (std::size_t t = 0; t <= common && ends.empty(); ++t) {
            std::vector<std::size_t> e(n + 1, 0);
            bool ok = true;
            for (std::size_t i = 1; i <= n && ok; ++i) {
                e[i] = renders[i]->size() - t;
                const std::string& next = i == n ? text : *renders[i + 1];
                ok = e[i] >= e[i - 1] && next.compare(0, e[i], *renders[i], 0, e[i]) == 0;
            }
            ok = ok && e[1] <= text.size() && text.compare(0, e[n], *renders[n], 0, e[n]) == 0;
            if (!ok)
                continue;
            const auto& empty = renders[0];
            if (empty && empty->size() >= t && empty->size() - t <= e[1] &&
                renders[1]->compare(0, empty->size() - t, *empty, 0, empty->size() - t) == 0)
                e[0] = empty->size() - t;
            ends = std::move(e);
            tailLen = t;
        }
    }

    // The prefix property can hold while a template still moves text between turns (Mistral
    // v0.2 renders the system prompt inside the first user turn). Require each message's
    // content, when it appears in the conversation at all, to appear inside its own segment.
    for (std::size_t i = 0; !ends.empty() && i < n; ++i) {
        const auto& m = messages[i];
        if (!m.is_object() || !m.contains("content") || !m["content"].is_string())
            continue;
        const std::string content =
            str::strip(m["content"].get<std::string>(), nullptr, true, true);
        if (content.empty() || text.find(content) == std::string::npos)
            continue;
        if (text.substr(ends[i], ends[i + 1] - ends[i]).find(content) == std::string::npos)
            ends.clear();
    }

    if (!ends.empty()) {
        addSegment(r.segments, 0, ends[0], "", -1, "scaffold");
        for (std::size_t i = 0; i < n; ++i) {
            const auto& m = messages[i];
            std::string role = m.is_object() && m.contains("role") && m["role"].is_string()
                                   ? m["role"].get<std::string>()
                                   : std::string();
            addSegment(r.segments, ends[i], ends[i + 1], std::move(role), static_cast<int>(i),
                       "message");
        }
        // What follows the last message: the generation prompt, or a fixed tail (scaffold)
        // when that is all there is.
        const std::string_view rest = std::string_view(text).substr(ends[n]);
        const bool isTail =
            rest == std::string_view(*renders[n]).substr(renders[n]->size() - tailLen);
        addSegment(r.segments, ends[n], text.size(), isTail ? "" : "assistant", -1,
                   isTail ? "scaffold" : "generation_prompt");
        return r;
    }

    // Fallback: one segment for the conversation, plus the generation prompt when the
    // rendering without it is an exact prefix.
    std::size_t conversationEnd = text.size();
    if (options.addGenerationPrompt && renders[n] && startsWith(text, *renders[n]))
        conversationEnd = renders[n]->size();
    addSegment(r.segments, 0, conversationEnd, "", -1, "unsegmented");
    addSegment(r.segments, conversationEnd, text.size(), "assistant", -1, "generation_prompt");
    return r;
}

} // namespace kvscope::chat
