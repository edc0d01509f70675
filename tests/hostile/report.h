// Verdicts of the hostile run and their report: per-case classification, the tables printed
// at the end, and results.json.
#pragma once

#include "corpus.h"
#include "runner.h"

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::hostile {

// Worst first. Crash, Hang, Memory, Damage, Unclear and Accepted fail the run; the others are
// reported.
enum class Verdict {
    Crash,             // ended by a signal
    Hang,              // killed at the wall-clock limit
    Memory,            // peak RSS above the limit for a small input
    Damage,            // a writer changed or left debris beside an existing special file
    Unclear,           // failed without naming the file/field, or with internal text
    Accepted,          // exit 0 on an input that must be refused (Case::mustRefuse)
    UnexpectedSuccess, // exit 0 where a refusal was expected
    UnexpectedRefusal, // exit != 0 where success was expected (a control or a legal input)
    Clean
};
const std::vector<Verdict>& allVerdicts();
std::string verdictName(Verdict v);
bool isFailure(Verdict v);

struct Thresholds {
    std::uint64_t maxRssKb = 1024 * 1024;        // 1 GiB
    std::uint64_t smallInputBytes = 10ull << 20; // the memory rule applies below this
};

struct Outcome {
    Verdict verdict = Verdict::Clean;
    std::vector<std::string> reasons; // why (every rule that matched, worst first)
    RunResult run;
    std::string post; // the case's post-check problem, if any
};

Outcome classify(const Case& c, RunResult run, std::string post, const Thresholds& t);

// The command line as a shell would take it, run in the case's folder (for reproducing it).
std::string shellLine(const std::string& cli, const Case& c);

// Tables per family, reader and command, then every failing case.
void printReport(std::ostream& out, const std::string& cli, const std::vector<Case>& cases,
                 const std::vector<Outcome>& outcomes, double seconds);
nlohmann::json resultsJson(const std::string& cli, const std::vector<Case>& cases,
                           const std::vector<Outcome>& outcomes, double seconds);

} // namespace kvscope::hostile
