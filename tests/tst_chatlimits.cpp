// Tests of the chat template engine's limits (core/chat/budget.h, the "Limits:" paragraph of
// chat/template.h): one hostile template per class an external hostile corpus found (macros
// that fan out, values that double in a loop, padding and repetition, filters that grow or
// explode their input, deep nesting) fails instead of hanging or exhausting memory, fast,
// with bounded memory, and with a message that names the template, the line and the limit;
// and a long legitimate conversation still renders with room to spare.
#include "chat/template.h"

#include <QElapsedTimer>
#include <QTest>
#include <ctime>
#include <fstream>
#include <regex>

using namespace kvscope;
using namespace kvscope::chat;
using ojson = nlohmann::ordered_json;

namespace {

const char* const kName = "chat_template.jinja";
// A hostile render stops after at most ~1 s of CPU (10M steps); the measured worst case is
// 0.7 s. The wall-clock bound leaves room for a loaded machine (ctest -j on shared cores).
constexpr double kMaxCpuSeconds = 1.5;
constexpr qint64 kMaxWallMs = 3000;
// Time and memory are checked in optimized builds without sanitizers only (the asan preset is
// a Debug build, 10-20x slower, with shadow memory); elsewhere they are printed.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVSCOPE_TEST_SANITIZED
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(KVSCOPE_TEST_SANITIZED) || !defined(NDEBUG)
constexpr bool kCheckCosts = false;
#else
constexpr bool kCheckCosts = true;
#endif
constexpr long kMaxGrowthKiB = 300 * 1024; // peak memory a hostile render may add

// A field of /proc/self/status in KiB ("VmHWM", "VmRSS"); -1 where unavailable.
long statusKiB(const char* field) {
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::string key = std::string(field) + ":";
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0)
            return std::stol(line.substr(key.size()));
    return -1;
}

// Resets VmHWM to the current RSS (Linux clear_refs "5"); false where not permitted, in which
// case the growth measured below is only a lower bound (an earlier peak hides it).
bool resetPeak() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    out.flush();
    return static_cast<bool>(out);
}

double cpuSeconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Measured {
    Result<std::string> out = Result<std::string>::error("not rendered");
    qint64 wallMs = 0;
    double cpu = 0;
    long growthKiB = 0;
};

Measured renderMeasured(const Template& tpl, const ojson& messages,
                        const RenderOptions& options = {}) {
    Measured m;
    resetPeak();
    const long before = statusKiB("VmRSS");
    const double cpu0 = cpuSeconds();
    QElapsedTimer timer;
    timer.start();
    m.out = tpl.render(messages, options);
    m.wallMs = timer.elapsed();
    m.cpu = cpuSeconds() - cpu0;
    m.growthKiB = statusKiB("VmHWM") - before;
    return m;
}

ojson oneUserMessage() {
    return ojson::parse(R"([{"role": "user", "content": "hi"}])");
}

// A conversation of n turns after a system prompt, ~100 bytes a message.
ojson conversation(int n) {
    ojson m = ojson::array();
    m.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
    for (int i = 0; i < n; ++i)
        m.push_back({{"role", i % 2 ? "assistant" : "user"},
                     {"content", "Message " + std::to_string(i) + ": " + std::string(90, 'x')}});
    return m;
}

// The messages no failure may show: C++ internals instead of a sentence about the template.
void verifyNoInternals(const std::string& message) {
    for (const char* internal : {"bad_alloc", "std::", "basic_string", "stoll", "stoul",
                                 "length_error", "vector::", "variant"})
        QVERIFY2(message.find(internal) == std::string::npos, message.c_str());
}

QByteArray q(const std::string& s) {
    return QByteArray::fromStdString(s);
}

} // namespace

class TestChatLimits : public QObject {
    Q_OBJECT
private slots:
    void hostileTemplates_data();
    void hostileTemplates();
    void deepNestingFailsToParse_data();
    void deepNestingFailsToParse();
    void limitsComeFromRenderOptions();
    void unnamedTemplateNamesTheLine();
    void memoryIsLiveNotCumulative();
    void internalErrorsNeverLeak();
    void longConversationRenders();
};

void TestChatLimits::hostileTemplates_data() {
    QTest::addColumn<QByteArray>("source");
    QTest::addColumn<int>("line");
    QTest::addColumn<QByteArray>("limit"); // substring of the message after "render stopped: "

    const QByteArray steps = "the step budget of 10000000 was used up";
    const QByteArray memory = "hold more than 67108864 bytes (the memory budget)";
    const QByteArray string = "a string value exceeds the limit of 33554432 bytes";
    const QByteArray items = "a list or dict exceeds the limit of 1000000 items";

    // A macro calling itself twice per level: 2^30 calls, each within the recursion limit.
    QTest::newRow("macro fan-out") << QByteArray("{% macro f(n) %}\n"
                                                 "{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}"
                                                 "{% endif %}\n"
                                                 "{% endmacro %}\n"
                                                 "{{ f(30) }}")
                                   << 2 << steps;
    QTest::newRow("caller fan-out")
        << QByteArray("{% macro twice() %}{{ caller() }}{{ caller() }}{% endmacro %}\n"
                      "{% macro f(n) %}\n"
                      "{% if n > 0 %}{% call twice() %}{{ f(n - 1) }}{% endcall %}{% endif %}\n"
                      "{% endmacro %}\n"
                      "{{ f(18) }}")
        << 3 << steps;
    // Values that double in a loop.
    QTest::newRow("list doubling") << QByteArray("{% set ns = namespace(x=[1]) %}\n"
                                                 "{% for i in range(64) %}\n"
                                                 "{% set ns.x = ns.x + ns.x %}\n"
                                                 "{% endfor %}")
                                   << 3 << items;
    QTest::newRow("string doubling with ~") << QByteArray("{% set ns = namespace(x='ab') %}\n"
                                                          "{% for i in range(64) %}\n"
                                                          "{% set ns.x = ns.x ~ ns.x %}\n"
                                                          "{% endfor %}")
                                            << 3 << string;
    QTest::newRow("string repetition") << QByteArray("x\n{{ 'a' * 10**9 }}") << 2 << string;
    QTest::newRow("list of big strings") << QByteArray("{% set ns = namespace(x=[]) %}\n"
                                                       "{% for i in range(1000) %}\n"
                                                       "{% set ns.x = ns.x + ['a' * 30000000] %}\n"
                                                       "{% endfor %}")
                                         << 3 << memory;
    QTest::newRow("dict growth") << QByteArray("{% set ns = namespace(d={}) %}\n"
                                               "{% for i in range(100000) %}\n"
                                               "{% set ns.d = dict(ns.d, **{('k' ~ i): i}) %}\n"
                                               "{% endfor %}")
                                 << 3 << steps;
    // Shared sublists: 40 allocations that print as 2^40 leaves or compare 2^40 times.
    QTest::newRow("shared list printed")
        << QByteArray("{% set ns = namespace(x=[1]) %}\n"
                      "{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}\n"
                      "{{ ns.x|tojson }}")
        << 3 << steps;
    QTest::newRow("shared list compared")
        << QByteArray("{% set ns = namespace(x=[1], y=[1]) %}\n"
                      "{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}"
                      "{% set ns.y = [ns.y, ns.y] %}{% endfor %}\n"
                      "{{ ns.x == ns.y }}")
        << 3 << steps;
    // Filters and methods that grow their input.
    QTest::newRow("join growth") << QByteArray("{% set ns = namespace(x=['ab', 'cd']) %}\n"
                                               "{% for i in range(64) %}\n"
                                               "{% set ns.x = [ns.x|join(ns.x|join('-')), 'z'] %}\n"
                                               "{% endfor %}")
                                 << 3 << memory;
    QTest::newRow("replace growth") << QByteArray("{% set ns = namespace(x='aa') %}\n"
                                                  "{% for i in range(64) %}\n"
                                                  "{% set ns.x = ns.x|replace('a', 'aaaa') %}\n"
                                                  "{% endfor %}")
                                    << 3 << memory;
    QTest::newRow("replace explosion")
        << QByteArray("{% set s = 'a' * 1000000 %}\n{{ s.replace('a', s) }}") << 2 << string;
    QTest::newRow("center width") << QByteArray("\n\n{{ 'x'|center(10**12) }}") << 3 << string;
    QTest::newRow("printf padding") << QByteArray("{{ '%999999999d' % 1 }}") << 1 << string;
    QTest::newRow("format growth") << QByteArray("{% set ns = namespace(x='ab') %}\n"
                                                 "{% for i in range(64) %}\n"
                                                 "{% set ns.x = '{}{}'.format(ns.x, ns.x) %}\n"
                                                 "{% endfor %}")
                                   << 3 << string;
    QTest::newRow("indent width") << QByteArray("{{ 'a\\nb'|indent(10**9) }}") << 1 << string;
    QTest::newRow("indent growth")
        << QByteArray("{% set ns = namespace(x='a\\nb') %}\n"
                      "{% for i in range(64) %}\n"
                      "{% set ns.x = ns.x|indent(1000, true, true) ~ '\\n' ~ ns.x %}\n"
                      "{% endfor %}")
        << 3 << memory;
    QTest::newRow("list of a long string") << QByteArray("{% set s = 'ab' * 10000000 %}\n"
                                                         "{{ s|list|length }}")
                                           << 2 << items;
    QTest::newRow("split into many parts")
        << QByteArray("{% set s = ',' * 30000000 %}\n{{ s.split(',')|length }}") << 2 << items;
    QTest::newRow("range") << QByteArray("{{ range(10**12)|length }}") << 1
                           << QByteArray("MAX_RANGE (100000)");
    // Work without growth.
    QTest::newRow("sort in a loop") << QByteArray("{% set l = range(100000)|list %}\n"
                                                  "{% for i in range(1000) %}\n"
                                                  "{% set x = l|sort(reverse=true) %}\n"
                                                  "{% endfor %}")
                                    << 3 << steps;
    QTest::newRow("scan a long string")
        << QByteArray("{% set s = 'x' * 30000000 %}\n"
                      "{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}")
        << 2 << steps;
    QTest::newRow("nested loops") << QByteArray("{% for i in range(100000) %}\n"
                                                "{% for j in range(100000) %}{% endfor %}\n"
                                                "{% endfor %}")
                                  << 2 << QByteArray("exceeded 1000000 loop iterations");
    QTest::newRow("output") << QByteArray("{% for i in range(100000) %}\n"
                                          "{{ 'x' * 100000 }}\n"
                                          "{% endfor %}")
                            << 2 << QByteArray("the output exceeds the limit of 33554432 bytes");
    QTest::newRow("macro recursion") << QByteArray("{% macro f(n) %}\n{{ f(n + 1) }}\n"
                                                   "{% endmacro %}{{ f(0) }}")
                                     << 2 << QByteArray("macro 'f' recursed more than 64 levels");
    QTest::newRow("deep value") << QByteArray("{% set ns = namespace(x=[]) %}\n"
                                              "{% for i in range(1000) %}\n"
                                              "{% set ns.x = [ns.x] %}\n"
                                              "{% endfor %}")
                                << 3 << QByteArray("value nested more than 256 levels deep");
}

void TestChatLimits::hostileTemplates() {
    QFETCH(QByteArray, source);
    QFETCH(int, line);
    QFETCH(QByteArray, limit);
    auto tpl = Template::parse(source.toStdString(), kName);
    QVERIFY2(tpl, tpl.message().c_str());
    const Measured m = renderMeasured(tpl.value(), oneUserMessage());
    qInfo("%5lld ms wall, %.2f s CPU, +%ld MiB peak: %s", m.wallMs, m.cpu, m.growthKiB / 1024,
          m.out ? "(rendered)" : m.out.message().c_str());
    QVERIFY2(!m.out, "the hostile template rendered");
    const std::string& msg = m.out.message();
    const std::string prefix =
        std::string(kName) + ":" + std::to_string(line) + ": render stopped: ";
    QVERIFY2(msg.rfind(prefix, 0) == 0, ("want prefix: " + prefix + "\ngot: " + msg).c_str());
    QVERIFY2(msg.find(limit.toStdString()) != std::string::npos, msg.c_str());
    verifyNoInternals(msg);
    if (!kCheckCosts)
        return;
    QVERIFY2(m.wallMs < kMaxWallMs, qPrintable(QString("took %1 ms").arg(m.wallMs)));
    QVERIFY2(m.cpu < kMaxCpuSeconds, qPrintable(QString("took %1 s CPU").arg(m.cpu)));
    QVERIFY2(m.growthKiB < kMaxGrowthKiB,
             qPrintable(QString("peak memory grew by %1 MiB").arg(m.growthKiB / 1024)));
}

void TestChatLimits::deepNestingFailsToParse_data() {
    QTest::addColumn<QByteArray>("source");
    QTest::newRow("100000 (") << QByteArray("x\n{{ " + QByteArray(100000, '(') + "1" +
                                            QByteArray(100000, ')') + " }}");
    QTest::newRow("100000 [") << QByteArray("x\n{{ " + QByteArray(100000, '[') +
                                            QByteArray(100000, ']') + " }}");
    QTest::newRow("100000 {") << QByteArray("x\n{{ " + QByteArray("{'a': ").repeated(100000) + "1" +
                                            QByteArray(100000, '}') + " }}");
    QTest::newRow("100000 calls") << QByteArray("x\n{{ " + QByteArray("f(").repeated(100000) +
                                                QByteArray(100000, ')') + " }}");
    QTest::newRow("100000 filter arguments")
        << QByteArray("x\n{{ " + QByteArray("x|default(").repeated(100000) + "1" +
                      QByteArray(100000, ')') + " }}");
    QTest::newRow("100000 conditionals")
        << QByteArray("x\n{{ " + QByteArray("1 if x else ").repeated(100000) + "2 }}");
    QTest::newRow("100000 blocks") << QByteArray("x\n" + QByteArray("{% if x %}").repeated(100000));
}

void TestChatLimits::deepNestingFailsToParse() {
    // The parser's nesting limit keeps both its own recursion and the evaluator's bounded.
    QFETCH(QByteArray, source);
    QElapsedTimer timer;
    timer.start();
    auto tpl = Template::parse(source.toStdString(), kName);
    QVERIFY(!tpl);
    QVERIFY2(!kCheckCosts || timer.elapsed() < kMaxWallMs,
             qPrintable(QString("%1 ms").arg(timer.elapsed())));
    QVERIFY2(std::regex_search(tpl.message(),
                               std::regex(std::string("^") + kName +
                                          ":2:[0-9]+: template nested too deeply \\(more than "
                                          "200 levels\\)")),
             tpl.message().c_str());
}

void TestChatLimits::limitsComeFromRenderOptions() {
    auto tpl = Template::parse("{% for i in range(10000) %}{{ i }}{% endfor %}", kName).value();
    RenderOptions o;
    o.maxSteps = 1000;
    auto out = tpl.render(ojson::array(), o);
    QVERIFY(!out);
    QVERIFY2(out.message().find("the step budget of 1000 was used up") != std::string::npos,
             out.message().c_str());
    o = {};
    o.maxLoopIterations = 50;
    QVERIFY(tpl.render(ojson::array(), o).message().find("exceeded 50 loop iterations") !=
            std::string::npos);
    o = {};
    o.maxOutputBytes = 100;
    QVERIFY(tpl.render(ojson::array(), o).message().find("output exceeds the limit of 100") !=
            std::string::npos);

    auto strings = Template::parse("{% set s = 'x' * 1000 %}{% set t = [s ~ 'a', s ~ 'b'] %}"
                                   "{{ t|length }}",
                                   kName)
                       .value();
    o = {};
    o.maxStringBytes = 999;
    QVERIFY(strings.render(ojson::array(), o).message().find("limit of 999 bytes") !=
            std::string::npos);
    o = {};
    o.maxMemoryBytes = 2500;
    QVERIFY(strings.render(ojson::array(), o).message().find("more than 2500 bytes") !=
            std::string::npos);
    o.maxMemoryBytes = 10000;
    QCOMPARE(strings.render(ojson::array(), o).value(), std::string("2"));
    o = {};
    o.maxItems = 3;
    QVERIFY(Template::parse("{{ [1, 2, 3, 4] }}", kName)
                .value()
                .render(ojson::array(), o)
                .message()
                .find("exceeds the limit of 3 items") != std::string::npos);
    o = {};
    o.maxMacroDepth = 3;
    QVERIFY(Template::parse("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}", kName)
                .value()
                .render(ojson::array(), o)
                .message()
                .find("recursed more than 3 levels") != std::string::npos);
}

void TestChatLimits::unnamedTemplateNamesTheLine() {
    auto out = Template::parse("a\nb\n{{ 'x' * 10**12 }}").value().render(ojson::array());
    QVERIFY(!out);
    QVERIFY2(out.message().rfind("line 3: render stopped: ", 0) == 0, out.message().c_str());
    // Other errors keep their form.
    out = Template::parse("a\n{{ x.y }}", kName).value().render(ojson::array());
    QCOMPARE(out.message(), std::string(kName) + ": 'x' is undefined (line 2)");
}

void TestChatLimits::memoryIsLiveNotCumulative() {
    // 30 strings of 10 MB built and dropped one after another: 300 MB in all, never more than
    // two at once, well within the 64 MiB budget (the step budget is raised: this much
    // copying is 19M steps).
    auto tpl = Template::parse("{% for i in range(30) %}{% set s = 'a' * 10000000 %}"
                               "{{ s|length }} {% endfor %}",
                               kName)
                   .value();
    RenderOptions o;
    o.maxSteps = 100'000'000;
    const Measured m = renderMeasured(tpl, ojson::array(), o);
    QVERIFY2(m.out, m.out.message().c_str());
    QCOMPARE(m.out.value().substr(0, 9), std::string("10000000 "));
}

void TestChatLimits::internalErrorsNeverLeak() {
    // Each of these used to surface a C++ library message (stoll, stoul, std::bad_alloc).
    for (const char* src :
         {"{{ [1]|map(attribute='99999999999999999999999')|list }}",
          "{{ '{99999999999999999999999}'.format(1) }}", "{{ 'a'.zfill(10**12) }}",
          "{{ 'ab'.split('') }}", "{{ ('x' * 1000000)|indent(10**15) }}",
          "{{ 'x'|tojson(indent=10**15) }}", "{{ '' * 10**18 }}{{ ([] * 10**18)|length }}"}) {
        auto out = Template::parse(src, kName).value().render(ojson::array());
        verifyNoInternals(out ? out.value() : out.message());
    }
    // Integer edges the fuzzer's UBSan found (undefined behaviour, not limits): each renders a
    // clean error or Python's answer where it fits in 64 bits.
    for (const char* src :
         {"{{ (-9223372036854775807 - 1)|abs }}", "{{ [9223372036854775807, 1]|sum }}",
          "{{ range(9223372036854775807)|list|length }}",
          "{{ range(0, 9223372036854775807)|length }}", "{{ '%d' % 1e300 }}",
          "{{ '%i' % -1e19 }}"}) {
        auto out = Template::parse(src, kName).value().render(ojson::array());
        QVERIFY2(!out, src);
        verifyNoInternals(out.message());
    }
    QCOMPARE(Template::parse("{{ 1e300|int }}").value().render(ojson::array()).value(),
             std::string("0"));
    QCOMPARE(Template::parse("{{ 1e300|string|int }} {{ '-1e19'|int(7) }} {{ '1e18'|int }} "
                             "{{ '%d' % 2.9e18 }}")
                 .value()
                 .render(ojson::array())
                 .value(),
             std::string("0 7 1000000000000000000 2900000000000000000"));
    QCOMPARE(
        Template::parse("{{ (-5)|abs }}{{ [2, 3]|sum }}").value().render(ojson::array()).value(),
        std::string("55"));
    QCOMPARE(Template::parse("{{ '' * 10**18 }}{{ ([] * 10**18)|length }}")
                 .value()
                 .render(ojson::array())
                 .value(),
             std::string("0"));
}

void TestChatLimits::longConversationRenders() {
    // A ChatML-style template with the usual constructs (loop variables, filters, a macro,
    // a namespace) renders 2,000 messages exactly, fast, and within a tenth of each default
    // budget (the defaults leave at least tenfold headroom).
    const std::string src =
        "{%- macro header(role) %}<|im_start|>{{ role }}\n{% endmacro -%}\n"
        "{%- set ns = namespace(turns=0) -%}\n"
        "{%- for m in messages -%}\n"
        "{%- if m.role == 'system' and not loop.first %}{{ raise_exception('system first') }}"
        "{% endif -%}\n"
        "{%- if m.role == 'user' %}{% set ns.turns = ns.turns + 1 %}{% endif -%}\n"
        "{{ header(m.role) }}{{ m.content|trim }}<|im_end|>\n"
        "{% endfor -%}\n"
        "{%- if add_generation_prompt %}{{ header('assistant') }}{% endif -%}\n"
        "{{- '' if ns.turns == 1000 else raise_exception('turns: ' ~ ns.turns) }}";
    auto tpl = Template::parse(src, kName);
    QVERIFY2(tpl, tpl.message().c_str());
    const ojson messages = conversation(2000);
    std::string want;
    for (const auto& m : messages)
        want += "<|im_start|>" + m["role"].get<std::string>() + "\n" +
                m["content"].get<std::string>() + "<|im_end|>\n";
    want += "<|im_start|>assistant\n";

    RenderOptions tenth;
    tenth.addGenerationPrompt = true;
    const RenderOptions defaults = tenth;
    tenth.maxSteps = defaults.maxSteps / 10;
    tenth.maxMemoryBytes = defaults.maxMemoryBytes / 10;
    tenth.maxLoopIterations = defaults.maxLoopIterations / 10;
    const Measured m = renderMeasured(tpl.value(), messages, tenth);
    qInfo("2,000 messages: %lld ms wall, %.3f s CPU, %zu bytes", m.wallMs, m.cpu,
          m.out ? m.out.value().size() : 0);
    QVERIFY2(m.out, m.out.message().c_str());
    QCOMPARE(q(m.out.value()), q(want));
    QVERIFY2(!kCheckCosts || m.wallMs < 1000, qPrintable(QString("took %1 ms").arg(m.wallMs)));
}

QTEST_GUILESS_MAIN(TestChatLimits)
#include "tst_chatlimits.moc"
