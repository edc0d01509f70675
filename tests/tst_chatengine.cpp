// Unit tests of the chat-template engine (kvscope::chat) that need no shared data: expressions,
// filters, tests, whitespace control and statements against strings produced by Python jinja2
// 3.1.6, syntax and runtime errors with their locations, the API, and hostile templates and
// messages (nesting, loops, output and memory bombs, overflow). The real templates are tst_chat.
#include "chat/template.h"
#include "chattest.h"
#include "util/hash.h"

#include <QTest>
#include <nlohmann/json.hpp>
#include <regex>

using namespace kvscope;
using namespace kvscope::chat;
using ojson = nlohmann::ordered_json;
using chattest::firstDifference;
using chattest::kSetANow;
using chattest::s;

namespace {

// Renders `src` with `vars` as its variables (their "messages" as the messages).
Result<std::string> renderSource(const std::string& src, const ojson& vars = ojson::object(),
                                 RenderOptions opt = {}) {
    auto tpl = Template::parse(src);
    if (!tpl)
        return tpl.status();
    opt.extraVariables = vars;
    if (!opt.now)
        opt.now = kSetANow;
    ojson messages = vars.contains("messages") ? vars["messages"] : ojson::array();
    return tpl.value().render(messages, opt);
}

} // namespace

class TestChatEngine : public QObject {
    Q_OBJECT

private slots:
    void engine_data();
    void engine();
    void syntaxErrors_data();
    void syntaxErrors();
    void runtimeErrors();
    void apiBasics();

    void hostileInput_data();
    void hostileInput();
    void hostileMessages();
};

void TestChatEngine::engine_data() {
    QTest::addColumn<QByteArray>("source");
    QTest::addColumn<QByteArray>("vars");
    QTest::addColumn<QByteArray>("expected");
    auto addRow = [](const char* name, const char* source, const char* vars, const char* expected) {
        QTest::newRow(name) << QByteArray(source) << QByteArray(vars) << QByteArray(expected);
    };
    addRow("ws/trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", "{}", "yes\nend");
    addRow("ws/lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\ny", "{}", "  x\ny");
    addRow("ws/minus", "a   {{- 'b' -}}   c {%- if true -%}  d  {%- endif -%}  e", "{}", "abcde");
    addRow("ws/plus_keeps", "a\n  {%+ if true +%}\nb{% endif %}", "{}", "a\n  \nb");
    addRow("ws/comment", "a\n  {# note #}\nb {#- x -#} c", "{}", "a\nbc");
    addRow("ws/trailing_newline_dropped", "x\n", "{}", "x");
    addRow("ws/var_no_trim", "{{ 'a' }}\n{{ 'b' }}", "{}", "a\nb");
    addRow("ws/crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", "{}", "a\nb\n");
    addRow("ws/raw", "{% raw %}{{ not evaluated }}{% endraw %}", "{}", "{{ not evaluated }}");
    addRow("loop/vars",
           "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
           "loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
           "{\"xs\": [\"a\", \"b\", \"c\"]}", "10TrueFalse332;21FalseFalse321;32FalseTrue310;");
    addRow("loop/prev_next",
           "{% for x in xs %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}]{% endfor %}",
           "{\"xs\": [1, 2, 3]}", "[|1|2][1|2|3][2|3|]");
    addRow("loop/filter_else",
           "{% for x in xs if x > 1 %}{{ x }}:{{ loop.length }} {% else %}none{% endfor %}|{% for "
           "x in [] %}x{% else %}empty{% endfor %}",
           "{\"xs\": [1, 2, 3]}", "2:2 3:2 |empty");
    addRow("loop/unpack_items",
           "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k, v in d|items %}{{ k "
           "}}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
           "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1,a=2,|ba|ba");
    addRow("loop/break_continue",
           "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% "
           "break %}{% endif %}{{ i }}{% endfor %}",
           "{}", "0134");
    addRow("loop/scope",
           "{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
           "{}", "12121");
    addRow("loop/cycle", "{% for i in range(4) %}{{ loop.cycle('a','b') }}{% endfor %}", "{}",
           "abab");
    addRow("loop/string_iter", "{% for c in 'héllo' %}{{ c }}.{% endfor %}", "{}", "h.é.l.l.o.");
    addRow(
        "ns/attribute",
        "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' "
        "%}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} "
        "{{ ns.n }}",
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
        "\"content\": \"Hi there\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]}",
        "True 3");
    addRow(
        "set/block",
        "{% set x %}Hello {{ name }}{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}",
        "{\"name\": \"W\"}", "[Hello W]ABC");
    addRow("set/tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", "{}",
           "12(1, 2)");
    addRow("macro/basic",
           "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') "
           "}} {{ greet('B', punct='?') }} {{ greet(name='C') }}",
           "{}", "Hi A! Hi B? Hi C!");
    addRow("macro/recursion",
           "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% "
           "endmacro %}{{ fact(5) }}",
           "{}", "120");
    addRow("macro/call_block",
           "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call "
           "wrap('b') %}bold {{ 1 + 1 }}{% endcall %}",
           "{}", "<b>bold 2</b>");
    addRow("macro/caller_args",
           "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% "
           "call(item) each([1,2]) %}<{{ item }}>{% endcall %}",
           "{}", "<1><2>");
    addRow("filter/block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", "{}", "ABC D");
    addRow("filter/block_chain", "{% filter replace('a', 'b')|upper %}aXa{% endfilter %}", "{}",
           "BXB");
    addRow("call/star_args",
           "{% macro two(a, b) %}{{ a }}-{{ b }}{% endmacro %}{% set ps = [[1, 2]] %}{{ ps|length "
           "}}:{{ two(*ps[0]) }}|{{ two(**{'b': 'y', 'a': 'x'}) }}",
           "{}", "1:1-2|x-y");
    addRow("filter/strings",
           "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ "
           "'hello world'|capitalize }}|{{ 'hello-woRLD it\\'s'|title }}|{{ 'a b  c'|wordcount "
           "}}|{{ 'aXbX'|replace('X', '-') }}|{{ 'aXbX'|replace('X', '-', 1) }}",
           "{}", "a b|a|AB|ab|Hello world|Hello-World It's|3|a-b-|a-bX");
    addRow("filter/length",
           "{{ xs|length }} {{ xs|count }} {{ 'héllo'|length }} {{ d|length }} {{ "
           "undefined_thing|length }}",
           "{\"xs\": [1, 2], \"d\": {\"a\": 1}}", "2 2 5 1 0");
    addRow("filter/first_last_join",
           "{{ xs|first }} {{ xs|last }} {{ xs|join(', ') }} {{ xs|join }} {{ ms|join('/', "
           "attribute='role') }}",
           "{\"xs\": [\"a\", \"b\", \"c\"], \"ms\": [{\"role\": \"system\", \"content\": \"Be "
           "brief.\"}, {\"role\": \"user\", \"content\": \"Hi there\"}, {\"role\": \"assistant\", "
           "\"content\": \"Hello!\"}]}",
           "a c a, b, c abc system/user/assistant");
    addRow("filter/default",
           "{{ missing|default('dflt') }} {{ missing|d('d2') }} {{ ''|default('e', true) }} {{ "
           "'v'|default('x') }} {{ none|default('n') }}",
           "{}", "dflt d2 e v None");
    addRow("filter/tojson",
           "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ "
           "'é\"\\n'|tojson }}|{{ [1, 2.5, none, true]|tojson }}|{{ {}|tojson(indent=2) }}|{{ "
           "d|tojson(separators=(',', ':')) }}",
           "{\"d\": {\"z\": 1, \"a\": [1, {\"b\": null}], \"s\": \"x\"}}",
           "{\"z\": 1, \"a\": [1, {\"b\": null}], \"s\": \"x\"}|{\n  \"z\": 1,\n  \"a\": [\n    "
           "1,\n    {\n      \"b\": null\n    }\n  ],\n  \"s\": \"x\"\n}|{\"a\": [1, {\"b\": "
           "null}], \"s\": \"x\", \"z\": 1}|\"é\\\"\\n\"|[1, 2.5, null, "
           "true]|{}|{\"z\":1,\"a\":[1,{\"b\":null}],\"s\":\"x\"}");
    addRow("filter/numbers",
           "{{ '42'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '2.5'|float }} {{ "
           "3|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') "
           "}} {{ 7|string ~ 'x' }}",
           "{}", "42 3 0 7 2.5 3.0 3 2.0 3.14 3.0 7x");
    addRow("filter/list_items_dictsort",
           "{{ 'ab'|list }} {{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value', "
           "reverse=true) }}",
           "{\"d\": {\"b\": 1, \"A\": 3, \"c\": 2}}",
           "['a', 'b'] [('b', 1), ('A', 3), ('c', 2)] [('A', 3), ('b', 1), ('c', 2)] [('A', 3), "
           "('c', 2), ('b', 1)]");
    addRow("filter/select",
           "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ "
           "ms|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }} {{ "
           "[1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('even')|list }} {{ "
           "ms|selectattr('missing')|list }} {{ ['a','B']|map('upper')|list }}",
           "{\"ms\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
           "\"content\": \"Hi there\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]}",
           "['Hi there'] system,assistant [1, 3] [1, 3] [] ['A', 'B']");
    addRow("filter/unique_sort_minmax",
           "{{ ['b','A','a','c']|unique|list }} {{ ['b','A','c']|sort }} {{ "
           "[3,1,2]|sort(reverse=true) }} {{ ms|sort(attribute='role')|map(attribute='role')|list "
           "}} {{ [3,1,2]|max }} {{ [3,1,2]|min }} {{ [1,2,3]|sum }} {{ [3,1]|reverse|list }} {{ "
           "'abc'|reverse }}",
           "{\"ms\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
           "\"content\": \"Hi there\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]}",
           "['b', 'A', 'c'] ['A', 'b', 'c'] [3, 2, 1] ['assistant', 'system', 'user'] 3 1 6 [1, 3] "
           "cba");
    addRow("filter/indent_escape",
           "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, "
           "blank=true) }}|{{ '<a href=\"x\">&\\''|escape }}|{{ '<b>'|safe }}|{{ 'x'|center(5) "
           "}}|{{ '%s-%d' % ('a', 3) }}|{{ '%05.1f'|format(3.14159) }}",
           "{}",
           "a\n  b\n\n  c|  a\n  b|a\n  \n  b|&lt;a href=&#34;x&#34;&gt;&amp;&#39;|<b>|  x  "
           "|a-3|003.1");
    addRow("slice/basic",
           "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ 'hello'[1:3] }} {{ "
           "'héllo'[::-1] }} {{ xs[-1] }} {{ xs[5] }} {{ xs[1:100] }} {{ xs[-100:1] }} {{ "
           "'abc'[-1] }}",
           "{\"xs\": [1, 2, 3, 4]}",
           "[2, 3, 4] [1, 2, 3] [4, 3, 2, 1] [1, 3] el olléh 4  [2, 3, 4] [1] c");
    addRow(
        "test/types",
        "{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping "
        "}} {{ xs is iterable }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ xs is "
        "sequence }} {{ true is boolean }} {{ true is true }} {{ false is false }} {{ 1 is true }} "
        "{{ s is not string }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is eq "
        "1 }} {{ 'a' is in 'abc' }} {{ 2 is gt 1 }} {{ range is callable }} {{ 'abc' is lower }}",
        "{\"x\": 1, \"n\": null, \"s\": \"str\", \"d\": {}, \"xs\": [1]}",
        "True True True True True True True True True True True True True False False True True "
        "True True True True True True");
    addRow("expr/operators",
           "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} "
           "{{ -7 % 3 }} {{ 2 ** 10 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 < "
           "2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in ['a','b'] }} {{ 'x' not in 'abc' }} {{ 'k' in {'k': "
           "1} }} {{ not true }} {{ true and 'x' }} {{ false or 'y' }} {{ none or 0 }} {{ -2 ** 2 "
           "}} {{ 1 == 1.0 }} {{ 1.5 + 1 }} {{ 10 / 5 }}",
           "{}",
           "7 9 3.5 3 -4 1 2 1024 a1None abab [1, 2] True False True True True False x y 0 4 True "
           "2.5 2.0");
    addRow("expr/ternary", "{{ 'yes' if flag else 'no' }} {{ 'a' if not flag }}|{{ 'x' if flag }}",
           "{\"flag\": true}", "yes |x");
    addRow("expr/literals",
           "{{ [1, 'two', 3.0, none, true, (1, 2), {'k': 'v'}] }} {{ 'it\\'s' }} {{ \"say "
           "\\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 1_000 }} {{ 1e3 }} {{ 'a' 'b' }} {{ 0.1 + 0.2 }} "
           "{{ 1e-7 }} {{ 123456789012345678.0 }}",
           "{}",
           "[1, 'two', 3.0, None, True, (1, 2), {'k': 'v'}] it's say \"hi\" tab\there 1000 1000.0 "
           "ab 0.30000000000000004 1e-07 1.2345678901234568e+17");
    addRow("expr/attr_item",
           "{{ m.role }} {{ m['content'] }} {{ ms[0].role }} {{ ms.0.role }} {{ m.missing }}|{{ "
           "m.get('role') }} {{ m.get('x', 'dflt') }} {{ m.get('x') }} {{ m.keys()|list }} {{ "
           "m.values()|list }}",
           "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"ms\": [{\"role\": \"system\", "
           "\"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi there\"}, "
           "{\"role\": \"assistant\", \"content\": \"Hello!\"}]}",
           "user hi system system |user dflt None ['role', 'content'] ['user', 'hi']");
    addRow("methods/str",
           "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() "
           "}}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ "
           "'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Ab'.upper() }}{{ "
           "'Ab'.lower() }}|{{ \"it's a test\".title() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ "
           "'x</think>y'.split('</think>')[-1] }}|{{ '{} and {name}'.format(1, name='n') }}|{{ "
           "'abc'.find('c') }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'hello'.capitalize() }}|{{ "
           "'12'.isdigit() }}|{{ 'abab'.count('ab') }}",
           "{}",
           "x|hi|x|x|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|True|True|ABab|It'S A "
           "Test|bba|y|1 and n|2|['a-b', 'c']|Hello|True|2");
    addRow("globals/range_dict",
           "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, "
           "b='x') }} {{ namespace(a=1).a }}",
           "{}", "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1, 'b': 'x'} 1");
    addRow("globals/strftime", "{{ strftime_now('%Y-%m-%d %H:%M %b %B %a %A %d %j') }}", "{}",
           "2024-07-26 12:00 Jul July Fri Friday 26 208");
    addRow("undefined/behaviour",
           "[{{ nothing }}] {{ nothing is defined }} {{ not nothing }} {% if nothing %}t{% else "
           "%}f{% endif %} {{ nothing|default('z') }} {% for x in nothing %}x{% endfor %} {{ "
           "(nothing ~ 'a') }} {{ ms[9] is defined }} {{ 'a' in nothing }}",
           "{\"ms\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
           "\"content\": \"Hi there\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]}",
           "[] False True f z  a False False");
    addRow("repr/python",
           "{{ xs }} {{ d }} {{ none }} {{ true }} {{ 1.0 }} {{ 's' }} {{ [\"it's\", 'q\"d', "
           "'both\\'\"', 'nl\\n'] }} {{ (1,) }}",
           "{\"xs\": [1, \"a\", null, true, 2.5], \"d\": {\"k\": \"v\", \"n\": {\"x\": []}}}",
           "[1, 'a', None, True, 2.5] {'k': 'v', 'n': {'x': []}} None True 1.0 s [\"it's\", "
           "'q\"d', 'both\\'\"', 'nl\\n'] (1,)");
    addRow("misc/with_generation",
           "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{% generation %}gen{% endgeneration "
           "%}{{ a is defined }}",
           "{}", "3genFalse");
    addRow("misc/set_in_if_leaks", "{% if true %}{% set v = 'in' %}{% endif %}{{ v }}", "{}", "in");
    addRow("misc/dict_literal_in_output", "{{ {'a': {'b': 1}} }}", "{}", "{'a': {'b': 1}}");
    addRow("err/raise", "{% if true %}{{ raise_exception('Bad roles: ' ~ 1) }}{% endif %}", "{}",
           "ERROR: TemplateError: Bad roles: 1");
    addRow("err/undefined_attr", "{{ nothing.attr }}", "{}",
           "ERROR: UndefinedError: 'nothing' is undefined");
    addRow("err/undefined_call_on_missing", "{{ m.missing.deeper }}", "{\"m\": {}}",
           "ERROR: UndefinedError: 'dict object' has no attribute 'missing'");
    addRow("err/add_str_int", "{{ 'a' + 1 }}", "{}",
           "ERROR: TypeError: can only concatenate str (not \"int\") to str");
    addRow("err/div_zero", "{{ 1 / 0 }}", "{}", "ERROR: ZeroDivisionError: division by zero");
    addRow("err/unsafe", "{{ xs.append(1) }}", "{\"xs\": [1]}",
           "ERROR: SecurityError: access to attribute 'append' of 'list' object is unsafe.");
    addRow("err/range", "{{ range(200000)|length }}", "{}",
           "ERROR: OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
           "(100000).");
}

void TestChatEngine::engine() {
    QFETCH(QByteArray, source);
    QFETCH(QByteArray, vars);
    QFETCH(QByteArray, expected);
    auto out = renderSource(s(source), ojson::parse(s(vars)));
    const std::string want = s(expected);
    if (want.rfind("ERROR: ", 0) == 0) {
        QVERIFY2(!out, out ? out.value().c_str() : "");
        const std::string msg = want.substr(want.find(": ", 7) + 2);
        QVERIFY2(out.message().find(msg) != std::string::npos,
                 ("got: " + out.message() + "\nwant: " + msg).c_str());
        return;
    }
    QVERIFY2(out, out.message().c_str());
    QVERIFY2(out.value() == want, firstDifference(out.value(), want).c_str());
}

void TestChatEngine::syntaxErrors_data() {
    QTest::addColumn<QByteArray>("source");
    QTest::addColumn<QByteArray>("expected"); // message prefix: "line:column: ..."
    QTest::newRow("unterminated variable")
        << QByteArray("ab\n{{ x ") << QByteArray("2:1: unexpected end of template: missing '}}'");
    QTest::newRow("unterminated block")
        << QByteArray("{% if x ") << QByteArray("1:1: unexpected end of template: missing '%}'");
    QTest::newRow("unterminated comment")
        << QByteArray("x\n\n {# note") << QByteArray("3:2: unterminated comment");
    QTest::newRow("unterminated string")
        << QByteArray("{{ 'abc }}") << QByteArray("1:4: unterminated string literal");
    QTest::newRow("missing endif") << QByteArray("{% if x %}\nyes")
                                   << QByteArray("2:4: unexpected end of template, expected 'elif' "
                                                 "or 'else' or 'endif' (block opened at line 1)");
    QTest::newRow("mismatched end")
        << QByteArray("{% for x in y %}\n{% endif %}")
        << QByteArray("2:4: Encountered unknown tag 'endif'. Jinja was looking for the following "
                      "tags: 'endfor' or 'else'.");
    QTest::newRow("unknown tag") << QByteArray("{% include 'x' %}")
                                 << QByteArray("1:4: Encountered unknown tag 'include'.");
    QTest::newRow("dangling operator")
        << QByteArray("{{ 1 + }}") << QByteArray("1:8: unexpected end of print statement");
    QTest::newRow("two expressions")
        << QByteArray("{{ a b }}") << QByteArray("1:6: expected end of print statement, got 'b'");
    QTest::newRow("filter without name")
        << QByteArray("{{ x | }}")
        << QByteArray("1:8: expected a name, got end of print statement");
    QTest::newRow("for without in")
        << QByteArray("{% for x y %}{% endfor %}") << QByteArray("1:10: expected 'in', got 'y'");
    QTest::newRow("bad character")
        << QByteArray("{{ a ? b }}") << QByteArray("1:6: unexpected character '?'");
    QTest::newRow("unclosed paren")
        << QByteArray("{{ (1 }}") << QByteArray("1:7: unexpected '}', expected ')'");
}

void TestChatEngine::syntaxErrors() {
    QFETCH(QByteArray, source);
    QFETCH(QByteArray, expected);
    auto tpl = Template::parse(s(source));
    QVERIFY(!tpl);
    QVERIFY2(tpl.message().rfind(s(expected), 0) == 0,
             ("got: " + tpl.message() + "\nwant: " + s(expected)).c_str());
    auto named = Template::parse(s(source), "my-model");
    QVERIFY(named.message().rfind("my-model:" + s(expected), 0) == 0);
}

void TestChatEngine::runtimeErrors() {
    // raise_exception: the template's message, located.
    auto tpl = Template::parse("{% if messages[0].role == 'system' %}{{ raise_exception('System "
                               "role not supported') }}{% endif %}",
                               "gemma");
    QVERIFY(tpl);
    const ojson sys = ojson::parse(R"([{"role":"system","content":"x"}])");
    auto out = tpl.value().render(sys);
    QVERIFY(!out);
    QCOMPARE(out.message(), std::string("gemma:1: the template raised: System role not supported"));
    // A huge message is cut (at a character boundary) and its size said.
    auto huge = Template::parse("\n{{ raise_exception('é' * 600000) }}", "big");
    QVERIFY(huge);
    out = huge.value().render(ojson::array());
    QVERIFY(!out);
    QVERIFY(out.message().rfind("big:2: the template raised: éé", 0) == 0);
    QVERIFY(out.message().size() < 1100);
    QVERIFY2(out.message().find("... (1200000 bytes in all)") != std::string::npos,
             out.message().c_str());
    // Other errors name the template and the line.
    auto bad = Template::parse("line one\n{{ nothing.attr }}", "t");
    out = bad.value().render(ojson::array());
    QCOMPARE(out.message(), std::string("t: 'nothing' is undefined (line 2)"));
    out = Template::parse("{{ x|nosuchfilter }}").value().render(ojson::array());
    QVERIFY(out.message().find("No filter named 'nosuchfilter'.") != std::string::npos);
    // extraVariables must be an object.
    RenderOptions opt;
    opt.extraVariables = ojson::array();
    QVERIFY(!Template::parse("x").value().render(ojson::array(), opt));
}

void TestChatEngine::apiBasics() {
    const std::string src = "{% for m in messages %}{{ m.content }}{% endfor %}";
    auto tpl = Template::parse(src, "plain");
    QVERIFY(tpl);
    QCOMPARE(tpl.value().source(), src);
    QCOMPARE(tpl.value().name(), std::string("plain"));
    QCOMPARE(tpl.value().hash(), hex64(hash64(src)));
    // A plain (sorted) nlohmann::json converts implicitly.
    const nlohmann::json plain = nlohmann::json::parse(
        R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])");
    QCOMPARE(tpl.value().render(plain).value(), std::string("ab"));
    // Key order is preserved through tojson with ordered_json.
    RenderOptions opt;
    opt.extraVariables = ojson::parse(R"({"tools":[{"z":1,"a":2}]})");
    QCOMPARE(Template::parse("{{ tools|tojson }}").value().render(ojson::array(), opt).value(),
             std::string(R"([{"z": 1, "a": 2}])"));
    // Unset `now` uses the local clock: only check the shape.
    auto year = Template::parse("{{ strftime_now('%Y') }}").value().render(ojson::array());
    QVERIFY(std::regex_match(year.value(), std::regex("[0-9]{4}")));
    // Templates render concurrently-safe from a const object: a second render is identical.
    QCOMPARE(tpl.value().render(plain).value(), tpl.value().render(plain).value());
}

void TestChatEngine::hostileInput_data() {
    QTest::addColumn<QByteArray>("source");
    QTest::addColumn<QByteArray>("expected"); // substring of the error
    QTest::newRow("10k nested parens")
        << QByteArray("{{ " + QByteArray(10000, '(') + "1" + QByteArray(10000, ')') + " }}")
        << QByteArray("nested too deeply");
    QTest::newRow("10k nested lists")
        << QByteArray("{{ " + QByteArray(10000, '[') + QByteArray(10000, ']') + " }}")
        << QByteArray("nested too deeply");
    QTest::newRow("10k nested ifs")
        << QByteArray("{% if true %}").repeated(10000) << QByteArray("nested too deeply");
    QTest::newRow("10k nots") << QByteArray("{{ " + QByteArray("not ").repeated(10000) + "x }}")
                              << QByteArray("nested too deeply");
    QTest::newRow("10k attribute chain")
        << QByteArray("{{ x" + QByteArray(".a").repeated(10000) + " }}")
        << QByteArray("nested too deeply");
    QTest::newRow("10k additions")
        << QByteArray("{{ 1" + QByteArray(" + 1").repeated(10000) + " }}")
        << QByteArray("nested too deeply");
    QTest::newRow("10k filters") << QByteArray("{{ x" + QByteArray("|trim").repeated(10000) + " }}")
                                 << QByteArray("nested too deeply");
    QTest::newRow("unterminated tag at end") << QByteArray("abc {%") << QByteArray("1:5:");
    QTest::newRow("lone brace pairs") << QByteArray("{{{{%%}}") << QByteArray("1:");
    QTest::newRow("huge range") << QByteArray("{{ range(1000000000)|length }}")
                                << QByteArray("Range too big");
    QTest::newRow("nested big loops")
        << QByteArray(
               "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
        << QByteArray("loop iterations");
    QTest::newRow("output bomb")
        << QByteArray("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}")
        << QByteArray("exceeds the limit");
    QTest::newRow("string doubling")
        << QByteArray("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s "
                      "~ ns.s %}{% endfor %}")
        << QByteArray("exceeds the limit");
    QTest::newRow("string repeat")
        << QByteArray("{{ 'ab' * 1000000000000000000 }}") << QByteArray("exceeds the limit");
    QTest::newRow("list repeat") << QByteArray("{{ ([1] * 100000) * 100000 }}")
                                 << QByteArray("exceeds the limit");
    QTest::newRow("macro recursion")
        << QByteArray("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
        << QByteArray("recursed more than");
    QTest::newRow("mutual recursion") << QByteArray("{% macro a() %}{{ b() }}{% endmacro %}{% "
                                                    "macro b() %}{{ a() }}{% endmacro %}{{ a() }}")
                                      << QByteArray("recursed more than");
    QTest::newRow("self-containing namespace")
        << QByteArray("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}")
        << QByteArray("levels deep");
    QTest::newRow("deeply nested list")
        << QByteArray("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = "
                      "[ns.x] %}{% endfor %}")
        << QByteArray("levels deep");
    QTest::newRow("int overflow") << QByteArray("{{ 9223372036854775807 + 1 }}")
                                  << QByteArray("overflow");
    QTest::newRow("pow overflow") << QByteArray("{{ 10 ** 100 }}") << QByteArray("overflow");
    QTest::newRow("min int floor div")
        << QByteArray("{{ (-9223372036854775807 - 1) // -1 }}") << QByteArray("overflow");
}

void TestChatEngine::hostileInput() {
    QFETCH(QByteArray, source);
    QFETCH(QByteArray, expected);
    auto tpl = Template::parse(s(source));
    Result<std::string> out =
        tpl ? tpl.value().render(ojson::array()) : Result<std::string>(tpl.status());
    QVERIFY2(!out, "hostile template rendered successfully");
    QVERIFY2(out.message().find(s(expected)) != std::string::npos, out.message().c_str());
}

void TestChatEngine::hostileMessages() {
    // 100k nested arrays as a message's content: an error, not a stack overflow.
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    const ojson messages = ojson::array({{{"role", "user"}, {"content", ojson::parse(deep)}}});
    auto out = Template::parse("{{ messages[0].content }}").value().render(messages);
    QVERIFY(!out);
    QVERIFY2(out.message().find("nested more than") != std::string::npos, out.message().c_str());
    // Non-string contents are passed through with Python semantics.
    const ojson odd =
        ojson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                       {"role": "user", "content": null}, {"role": 7}])");
    out = Template::parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}")
              .value()
              .render(odd);
    QCOMPARE(out.value(), std::string("user:[{'type': 'text', 'text': 'hi'}];user:None;7:;"));
}

QTEST_GUILESS_MAIN(TestChatEngine)
#include "tst_chatengine.moc"
