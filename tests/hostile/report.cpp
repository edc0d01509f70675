#include "report.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

namespace kvscope::hostile {

const std::vector<Verdict>& allVerdicts() {
    static const std::vector<Verdict> v = {Verdict::Crash,
                                           Verdict::Hang,
                                           Verdict::Memory,
                                           Verdict::Damage,
                                           Verdict::Unclear,
                                           Verdict::Accepted,
                                           Verdict::UnexpectedSuccess,
                                           Verdict::UnexpectedRefusal,
                                           Verdict::Clean};
    return v;
}

std::string verdictName(Verdict v) {
    switch (v) {
    case Verdict::Crash:
        return "crash";
    case Verdict::Hang:
        return "hang";
    case Verdict::Memory:
        return "memory";
    case Verdict::Damage:
        return "damage";
    case Verdict::Unclear:
        return "unclear";
    case Verdict::Accepted:
        return "accepted";
    case Verdict::UnexpectedSuccess:
        return "unexpected-success";
    case Verdict::UnexpectedRefusal:
        return "unexpected-refusal";
    case Verdict::Clean:
        return "clean";
    }
    return "?";
}

bool isFailure(Verdict v) {
    return v == Verdict::Crash || v == Verdict::Hang || v == Verdict::Memory ||
           v == Verdict::Damage || v == Verdict::Unclear || v == Verdict::Accepted;
}

namespace {

// Text that only a programmer should see: an exception type, a library's message, a stack.
const char* const kInternal[] = {"std::bad_alloc",
                                 "basic_string",
                                 "terminate called",
                                 "Exception raised from",
                                 "frame #",
                                 "vector::_M",
                                 "nlohmann",
                                 "[json.exception",
                                 "c10::",
                                 "Assertion `",
                                 "AddressSanitizer",
                                 "std::out_of_range",
                                 "std::length_error",
                                 "what():"};
// std::stoll & co. throw with just their own name as the message.
const char* const kBareNames[] = {"stoll", "stoull", "stoul", "stoi", "stof", "stod"};

std::string normalized(std::string s) {
    for (char& ch : s) {
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (ch == '_' || ch == '-')
            ch = ' ';
    }
    return s;
}

bool containsAny(const std::string& text, const std::vector<std::string>& needles, bool loose) {
    const std::string t = loose ? normalized(text) : text;
    for (const auto& n : needles)
        if (!n.empty() && t.find(loose ? normalized(n) : n) != std::string::npos)
            return true;
    return false;
}

bool wordIn(const std::string& text, const std::string& word) {
    for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
        const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
        const std::size_t e = at + word.size();
        const bool right = e >= text.size() || !std::isalnum(static_cast<unsigned char>(text[e]));
        if (left && right)
            return true;
    }
    return false;
}

std::string oneLine(std::string s, std::size_t max) {
    for (char& ch : s)
        if (ch == '\n' || ch == '\r' || ch == '\t')
            ch = ' ';
    if (s.size() > max)
        s = s.substr(0, max) + "...";
    return s;
}

std::string signalName(int sig) {
    const char* d = strsignal(sig);
    return "signal " + std::to_string(sig) + (d ? std::string(" (") + d + ")" : "");
}

} // namespace

Outcome classify(const Case& c, RunResult run, std::string post, const Thresholds& t) {
    Outcome o;
    o.post = std::move(post);
    std::vector<std::pair<Verdict, std::string>> found;
    const std::string text = run.stderrHead + "\n" + run.stdoutHead;
    if (!run.started) {
        found.emplace_back(Verdict::Crash, "could not start: " + run.stderrHead);
    } else if (run.timedOut) {
        found.emplace_back(Verdict::Hang,
                           "killed after " + std::to_string(run.wallSeconds).substr(0, 5) + " s");
    } else if (run.signal != 0) {
        found.emplace_back(Verdict::Crash, signalName(run.signal));
    }
    const bool small = c.inputBytes < t.smallInputBytes;
    const std::uint64_t rssLimit = c.maxRssKb ? c.maxRssKb : t.maxRssKb;
    if (run.maxRssKb > rssLimit && (small || c.maxRssKb))
        found.emplace_back(Verdict::Memory, "peak RSS " + std::to_string(run.maxRssKb / 1024) +
                                                " MB for a " + std::to_string(c.inputBytes) +
                                                "-byte input");
    if (!o.post.empty())
        found.emplace_back(Verdict::Damage, o.post);
    const bool exited = run.started && !run.timedOut && run.signal == 0;
    if (exited && run.exitCode != 0) {
        for (const char* marker : kInternal)
            if (text.find(marker) != std::string::npos)
                found.emplace_back(Verdict::Unclear, std::string("internal text '") + marker + "'");
        for (const char* w : kBareNames)
            if (wordIn(run.stderrHead, w))
                found.emplace_back(Verdict::Unclear,
                                   std::string("bare library message '") + w + "'");
        if (!c.names.empty() && !containsAny(text, c.names, false))
            found.emplace_back(Verdict::Unclear, "does not name " + c.names.front());
        if (!c.fields.empty() && !containsAny(text, c.fields, true))
            found.emplace_back(Verdict::Unclear,
                               "does not name the field (" + c.fields.front() + ")");
        if (run.exitCode != 1 && run.exitCode != 2)
            found.emplace_back(Verdict::Unclear, "exit code " + std::to_string(run.exitCode));
        if (c.expect == Expect::Succeed)
            found.emplace_back(Verdict::UnexpectedRefusal, "exit " + std::to_string(run.exitCode));
    }
    if (exited)
        for (const auto& f : c.forbidden)
            if (containsAny(text, {f}, true))
                found.emplace_back(Verdict::Unclear, "names the wrong thing: '" + f + "'");
    if (exited && run.exitCode == 0) {
        if (c.cleanOnSuccess)
            for (const char* marker : kInternal)
                if (text.find(marker) != std::string::npos)
                    found.emplace_back(Verdict::Unclear,
                                       std::string("internal text '") + marker + "' on success");
        if (!c.successMustSay.empty() && !containsAny(text, c.successMustSay, true))
            found.emplace_back(Verdict::Unclear,
                               "succeeded without saying so (" + c.successMustSay.front() + ")");
        if (c.expect == Expect::Refuse)
            found.emplace_back(c.mustRefuse ? Verdict::Accepted : Verdict::UnexpectedSuccess,
                               c.mustRefuse ? "exit 0 on an input that must be refused" : "exit 0");
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    o.verdict = found.empty() ? Verdict::Clean : found.front().first;
    for (const auto& [v, why] : found)
        o.reasons.push_back(verdictName(v) + ": " + why);
    o.run = std::move(run);
    return o;
}

std::string shellLine(const std::string& cli, const Case& c) {
    auto quote = [](const std::string& s) {
        if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-.,/:=+@%") == std::string::npos)
            return s;
        std::string q = "'";
        for (char ch : s)
            q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
        return q + "'";
    };
    auto command = [&](const std::vector<std::string>& args) {
        std::string line = quote(cli);
        for (const auto& a : args) {
            const std::string q = quote(a);
            line += " " + (q.size() > 200
                               ? q.substr(0, 60) + "...<" + std::to_string(a.size()) + " bytes>'"
                               : q);
        }
        return line;
    };
    std::string line = "cd " + quote(c.dir) + " && ";
    for (const auto& step : c.setup)
        line += command(step) + " ; ";
    return line + command(c.args);
}

namespace {

// Wide enough for the column's title.
int columnWidth(Verdict v) {
    return v == Verdict::UnexpectedSuccess || v == Verdict::UnexpectedRefusal ? 12
           : v == Verdict::Accepted                                           ? 10
                                                                              : 8;
}

struct Row {
    std::map<Verdict, int> counts;
    int total = 0;
    std::uint64_t maxRssKb = 0;
    double maxWall = 0;
};

void table(std::ostream& out, const std::string& title, const std::map<std::string, Row>& rows) {
    out << "\n" << title << "\n";
    out << std::left << std::setw(34) << "" << std::right << std::setw(6) << "cases";
    for (Verdict v : allVerdicts())
        out << std::setw(columnWidth(v))
            << (v == Verdict::UnexpectedSuccess   ? "unexp-ok"
                : v == Verdict::UnexpectedRefusal ? "unexp-fail"
                                                  : verdictName(v));
    out << std::setw(9) << "max MB" << std::setw(8) << "max s"
        << "\n";
    Row sum;
    for (const auto& [name, r] : rows) {
        out << std::left << std::setw(34) << name.substr(0, 33) << std::right << std::setw(6)
            << r.total;
        for (Verdict v : allVerdicts()) {
            const auto it = r.counts.find(v);
            const int n = it == r.counts.end() ? 0 : it->second;
            out << std::setw(columnWidth(v)) << (n ? std::to_string(n) : std::string("."));
            sum.counts[v] += n;
        }
        out << std::setw(9) << r.maxRssKb / 1024 << std::setw(8) << std::fixed
            << std::setprecision(1) << r.maxWall << "\n";
        sum.total += r.total;
        sum.maxRssKb = std::max(sum.maxRssKb, r.maxRssKb);
        sum.maxWall = std::max(sum.maxWall, r.maxWall);
    }
    out << std::left << std::setw(34) << "total" << std::right << std::setw(6) << sum.total;
    for (Verdict v : allVerdicts())
        out << std::setw(columnWidth(v)) << sum.counts[v];
    out << std::setw(9) << sum.maxRssKb / 1024 << std::setw(8) << sum.maxWall << "\n";
}

} // namespace

void printReport(std::ostream& out, const std::string& cli, const std::vector<Case>& cases,
                 const std::vector<Outcome>& outcomes, double seconds) {
    std::map<std::string, Row> byFamily, byReader, byCommand;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        for (auto* m : {&byFamily, &byReader, &byCommand}) {
            const std::string& key = m == &byFamily   ? cases[i].family
                                     : m == &byReader ? cases[i].reader
                                                      : cases[i].command;
            Row& r = (*m)[key];
            r.total++;
            r.counts[outcomes[i].verdict]++;
            r.maxRssKb = std::max(r.maxRssKb, outcomes[i].run.maxRssKb);
            r.maxWall = std::max(r.maxWall, outcomes[i].run.wallSeconds);
        }
    }
    table(out, "By class (corpus family)", byFamily);
    table(out, "By reader (the hostile input's format)", byReader);
    table(out, "By command", byCommand);

    for (Verdict v : allVerdicts()) {
        if (v == Verdict::Clean)
            continue;
        bool header = false;
        for (std::size_t i = 0; i < cases.size(); ++i) {
            if (outcomes[i].verdict != v)
                continue;
            if (!header) {
                out << "\n== " << verdictName(v) << (isFailure(v) ? " (FAIL)" : " (reported)")
                    << " ==\n";
                header = true;
            }
            const auto& c = cases[i];
            const auto& r = outcomes[i].run;
            out << c.id << "  " << c.family << "  [" << c.command << "]  " << c.note << "\n"
                << "    $ " << shellLine(cli, c) << "\n"
                << "    exit " << (r.signal ? signalName(r.signal) : std::to_string(r.exitCode))
                << ", " << std::fixed << std::setprecision(2) << r.wallSeconds << " s, "
                << r.maxRssKb / 1024 << " MB\n";
            for (const auto& why : outcomes[i].reasons)
                out << "    " << why << "\n";
            if (!r.stderrHead.empty())
                out << "    stderr: " << oneLine(r.stderrHead, 400) << "\n";
        }
    }
    std::map<Verdict, int> total;
    int failures = 0;
    double cpu = 0;
    for (const auto& o : outcomes) {
        total[o.verdict]++;
        failures += isFailure(o.verdict);
        cpu += o.run.cpuSeconds;
    }
    out << "\nSummary: " << cases.size() << " cases in " << std::fixed << std::setprecision(0)
        << seconds << " s (children used " << cpu << " s of CPU):";
    for (Verdict v : allVerdicts())
        out << " " << total[v] << " " << verdictName(v) << ",";
    out << " => " << (failures ? "FAIL (" + std::to_string(failures) + " failing cases)" : "PASS")
        << "\n";
}

nlohmann::json resultsJson(const std::string& cli, const std::vector<Case>& cases,
                           const std::vector<Outcome>& outcomes, double seconds) {
    nlohmann::json list = nlohmann::json::array();
    std::map<std::string, int> totals;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& c = cases[i];
        const auto& o = outcomes[i];
        totals[verdictName(o.verdict)]++;
        // Invalid UTF-8 (a cut in the middle of a character, a hostile argument) is replaced
        // when the document is written (hostile.cpp dumps with error_handler_t::replace).
        auto clip = [](const std::string& s, std::size_t n) { return s.substr(0, n); };
        nlohmann::json args = nlohmann::json::array();
        for (const auto& a : c.args)
            args.push_back(clip(a, 300));
        list.push_back({{"id", c.id},
                        {"family", c.family},
                        {"reader", c.reader},
                        {"command", c.command},
                        {"args", args},
                        {"shell", clip(shellLine(cli, c), 2000)},
                        {"expect", c.expect == Expect::Refuse    ? "refuse"
                                   : c.expect == Expect::Succeed ? "succeed"
                                                                 : "either"},
                        {"must_refuse", c.mustRefuse},
                        {"note", clip(c.note, 500)},
                        {"input", clip(c.input, 500)},
                        {"input_bytes", c.inputBytes},
                        {"verdict", verdictName(o.verdict)},
                        {"failure", isFailure(o.verdict)},
                        {"reasons", o.reasons},
                        {"exit_code", o.run.exitCode},
                        {"signal", o.run.signal},
                        {"timed_out", o.run.timedOut},
                        {"wall_s", o.run.wallSeconds},
                        {"cpu_s", o.run.cpuSeconds},
                        {"max_rss_kb", o.run.maxRssKb},
                        {"stdout_bytes", o.run.stdoutBytes},
                        {"stderr", clip(o.run.stderrHead, 4000)},
                        {"post_check", o.post}});
    }
    double cpu = 0;
    for (const auto& o : outcomes)
        cpu += o.run.cpuSeconds;
    return {{"cli", cli},
            {"seconds", seconds},
            {"cpu_seconds", cpu},
            {"totals", totals},
            {"cases", list}};
}

} // namespace kvscope::hostile
