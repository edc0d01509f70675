// render-chat: templates that fan out (doubling strings and lists, macro recursion, nested
// loops, recursive loops), deep nesting in the template source, broken templates, and hostile
// messages files rendered through the real templates of shared/chat-templates.
#include "families.h"
#include "jsonbomb.h"

namespace kvscope::hostile {

namespace {

struct Ctx {
    Corpus& c;
    void add(const std::string& family, const std::string& tag, const std::string& tmpl,
             const std::string& messages, const std::string& note, Expect e,
             std::vector<std::string> extra = {}, bool damagedIsMessages = false) {
        const auto dir = c.newCaseDir();
        const auto t = dir / (tag + ".jinja");
        const auto m = dir / (tag + "-messages.json");
        writeText(t, tmpl);
        writeText(m, messages);
        std::vector<std::string> args = {"render-chat", "--template", t.string(), "--messages",
                                         m.string()};
        args.insert(args.end(), extra.begin(), extra.end());
        addCase(c, dir,
                {family,
                 damagedIsMessages ? "chat-messages" : "chat-template",
                 args,
                 e,
                 {t.filename().string(), m.filename().string()},
                 {},
                 (damagedIsMessages ? m : t).string(),
                 note});
    }
};

const char* const kMessages =
    R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Tell me a story"}])";

void fanout(Ctx& x) {
    const std::vector<std::tuple<std::string, std::string, std::string>> templates = {
        {"string-doubling",
         "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}{{ ns.s|length }}",
         "a string doubled 64 times"},
        {"string-doubling-silent",
         "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
         "{% endfor %}done",
         "a string doubled 64 times, never printed"},
        {"list-doubling",
         "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
         "{% endfor %}{{ ns.l|length }}",
         "a list doubled 64 times"},
        {"replace-fanout",
         "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s|replace('a', "
         "'aa') %}{% endfor %}{{ ns.s|length }}",
         "replace('a','aa') 64 times"},
        {"string-times-1e12", "{{ ('x' * 1000000000000)|length }}", "'x' * 10^12"},
        {"list-times-1e10", "{{ ([1, 2] * 10000000000)|length }}", "[1,2] * 10^10"},
        {"content-times-1e9", "{{ messages[0]['content'] * 1000000000 }}", "content * 10^9"},
        {"macro-recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
         "a macro calling itself forever"},
        {"macro-binary-fanout",
         "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
         "{{ f(0) }}",
         "a macro calling itself twice, 60 levels (2^60 calls)"},
        {"macro-call-block",
         "{% macro f(n) %}{{ caller() }}{{ caller() }}{% endmacro %}{% call f(1) %}{% call f(2) %}"
         "{% call f(3) %}x{% endcall %}{% endcall %}{% endcall %}",
         "nested call blocks"},
        {"nested-loops",
         "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "10^10 loop iterations, no output"},
        {"range-1e12", "{% for i in range(1000000000000) %}{% endfor %}", "range(10^12)"},
        {"range-negative-step", "{{ range(0, 10, 0)|list }}", "range with step 0"},
        {"recursive-loop", "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
         "a recursive loop over the same list forever"},
        {"join-fanout", "{{ (range(100000)|join(',')) * 100000 }}", "a 600 KB string * 10^5"},
        {"tojson-self",
         "{% set ns = namespace(d={'a': 1}) %}{% for i in range(200) %}{% set ns.d = {'a': ns.d, "
         "'b': ns.d} %}{% endfor %}{{ ns.d|tojson }}",
         "a dict whose two keys hold the previous dict, 200 times (2^200 leaves as JSON)"},
        {"dictsort-fanout",
         "{% set ns = namespace(d={'a': 1}) %}{% for i in range(300) %}{% set ns.d = {'a': ns.d} "
         "%}{% endfor %}{{ ns.d|dictsort }}",
         "dicts nested 300 deep"},
        {"raise-1MB", "{{ raise_exception('x' * 1000000) }}", "raise_exception with 1 MB"},
    };
    for (const auto& [tag, tmpl, note] : templates)
        x.add("chat.fanout", tag, tmpl, kMessages, note,
              // Legal: three nested call blocks render eight 'x' (jinja2 does the same).
              tag == "range-negative-step" || tag == "macro-call-block" ? Expect::Either
                                                                        : Expect::Refuse);
}

void structure(Ctx& x) {
    std::string ifs, parens, filters;
    for (int i = 0; i < 100000; ++i)
        ifs += "{% if true %}";
    for (int i = 0; i < 100000; ++i)
        ifs += "{% endif %}";
    parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
    filters = "{{ 'a'";
    for (int i = 0; i < 100000; ++i)
        filters += "|upper";
    filters += " }}";
    std::string lists = "{{ " + deepArrays(100000) + " }}";
    std::string dicts = "{{ ";
    for (int i = 0; i < 100000; ++i)
        dicts += "{'a': ";
    dicts += "1" + std::string(100000, '}') + " }}";
    std::string unary = "{{ " + std::string(100000, '-') + "1 }}";
    std::string nots;
    for (int i = 0; i < 100000; ++i)
        nots += "not ";
    nots = "{{ " + nots + "true }}";
    std::string attrs = "{{ messages";
    for (int i = 0; i < 100000; ++i)
        attrs += "[0]";
    attrs += " }}";
    const std::vector<std::tuple<std::string, std::string, std::string, Expect>> templates = {
        {"deep-if-100k", ifs, "{% if %} nested 100,000 deep", Expect::Refuse},
        {"deep-parens-100k", parens, "parentheses nested 100,000 deep", Expect::Refuse},
        {"filter-chain-100k", filters, "100,000 filters in a chain", Expect::Either},
        {"deep-list-literal", lists, "a list literal nested 100,000 deep", Expect::Refuse},
        {"deep-dict-literal", dicts, "a dict literal nested 100,000 deep", Expect::Refuse},
        {"unary-minus-100k", unary, "100,000 unary minus", Expect::Refuse},
        {"not-100k", nots, "100,000 'not'", Expect::Refuse},
        {"subscripts-100k", attrs, "100,000 subscripts", Expect::Refuse},
        {"unterminated-expr", "{{ messages", "unterminated {{", Expect::Refuse},
        {"unterminated-block", "{% for m in messages %}{{ m }}", "missing endfor", Expect::Refuse},
        {"unterminated-string", "{{ 'abc }}", "unterminated string", Expect::Refuse},
        {"open-braces-1MB", std::string(1 << 20, '{'), "1 MB of '{'", Expect::Either},
        {"invalid-utf8", "{{ '\xff\xfe' }}\xc0\xaf", "invalid UTF-8", Expect::Either},
        {"nul-bytes", std::string("{{ 'a\0b' }}\0\0", 14), "NUL bytes", Expect::Either},
        {"unknown-tag", "{% include 'other.jinja' %}", "include", Expect::Refuse},
        {"empty", "", "an empty template", Expect::Either},
        {"undefined-call", "{{ nothing() }}", "calling an undefined name", Expect::Refuse},
        {"division-zero", "{{ 1 / 0 }}{{ 1 // 0 }}{{ 1 % 0 }}", "division by zero", Expect::Refuse},
        {"int-overflow", "{{ 9223372036854775807 + 1 }}{{ 2 ** 100000 }}", "integer overflow",
         Expect::Either},
        {"huge-literal", "{{ 99999999999999999999999999999999999999 }}",
         "an integer literal past 64 bits", Expect::Either},
        {"format-fanout", "{{ '%s' % ('%s' * 1000000) }}", "printf-style format", Expect::Either},
    };
    for (const auto& [tag, tmpl, note, e] : templates)
        x.add("chat.structure", tag, tmpl, kMessages, note, e);
}

void messages(Ctx& x) {
    const std::string dir = x.c.bases().data + "/chat-templates/";
    const std::vector<std::string> templates = {
        "chatml.jinja",          "llama-3.1-8b-instruct.jinja", "mistral-7b-instruct-v0.3.jinja",
        "gemma-2-2b-it.jinja",   "qwen2.5-7b-instruct.jinja",   "phi-3.5-mini-instruct.jinja",
        "llama-2-7b-chat.jinja", "smollm2-135m-instruct.jinja"};
    std::string many = "[";
    for (int i = 0; i < 100000; ++i)
        many += std::string(i ? "," : "") + R"({"role":")" + (i % 2 ? "assistant" : "user") +
                R"(","content":"m)" + std::to_string(i) + "\"}";
    many += "]";
    const std::vector<std::tuple<std::string, std::string, std::string>> files = {
        {"not-array", R"({"role": "user", "content": "hi"})", "messages is an object"},
        {"content-null", R"([{"role": "user", "content": null}])", "content null"},
        {"content-number", R"([{"role": "user", "content": 5}])", "content a number"},
        {"content-list",
         R"([{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]}])",
         "content a list of parts"},
        {"role-missing", R"([{"content": "hi"}])", "role missing"},
        {"role-odd", R"([{"role": "wizard", "content": "hi"}, {"role": "user", "content": "x"}])",
         "an unknown role"},
        {"deep-content", "[{\"role\":\"user\",\"content\":" + deepArrays(100000) + "}]",
         "content nested 100,000 deep"},
        {"deep-tool-args",
         "[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\",\"arguments\":" +
             deepObjects(50000) + "}}]}]",
         "tool call arguments nested 50,000 deep"},
        {"100k-messages", many, "100,000 messages (~3 MB)"},
        {"5MB-content", "[{\"role\":\"user\",\"content\":\"" + std::string(5 << 20, 'x') + "\"}]",
         "one 5 MB message"},
        {"invalid-json", "[{\"role\": \"user\", \"content\": \"hi\"", "truncated JSON"},
        {"empty-file", "", "an empty file"},
        {"nan", R"([{"role": "user", "content": NaN}])", "a NaN literal"},
        {"invalid-utf8", "[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]", "invalid UTF-8"},
        {"bom", "\xef\xbb\xbf[{\"role\":\"user\",\"content\":\"hi\"}]", "a UTF-8 byte-order mark"},
        {"empty-array", "[]", "no messages"},
    };
    std::size_t i = 0;
    for (const auto& [tag, text, note] : files) {
        const std::string t = templates[i++ % templates.size()];
        const std::string tmpl = [&] {
            const Bytes b = readAll(dir + t);
            return std::string(b.begin(), b.end());
        }();
        x.add("chat.messages", tag + "-" + t.substr(0, t.find('.')), tmpl, text,
              note + " through " + t, Expect::Either, {"--add-generation-prompt"}, true);
    }
    // --set values.
    const std::vector<std::pair<std::vector<std::string>, std::string>> sets = {
        {{"--set", "x="}, "empty value"},
        {{"--set", "=1"}, "empty name"},
        {{"--set", "noequals"}, "no '='"},
        {{"--set", "messages=5"}, "messages overridden by a number"},
        {{"--set", "add_generation_prompt=[[[1]]]"}, "add_generation_prompt a nested list"},
        // One argument is at most 128 KiB (MAX_ARG_STRLEN).
        {{"--set", "x=" + deepArrays(60000)}, "a value nested 60,000 deep"},
        {{"--set", "bos_token=" + std::string(120000, 'b')}, "a 120 KB bos_token"},
    };
    for (const auto& [args, note] : sets) {
        const Bytes b = readAll(dir + "llama-3.1-8b-instruct.jinja");
        x.add("chat.set", "set-" + std::to_string(i++), std::string(b.begin(), b.end()), kMessages,
              "--set: " + note, Expect::Either, args);
        x.c.cases().back().names.push_back("--set");
    }
}

} // namespace

void addChatCases(Corpus& c) {
    Ctx x{c};
    fanout(x);
    structure(x);
    messages(x);
}

} // namespace kvscope::hostile
