// `insights`: the compendium's 80 claims (core: insights/registry.h) and their experiments on
// a loaded model (insights/lab.h). `insights list` shows the registry; `insights run N...` or
// `--all` runs the experiments and prints their measurements and computed verdicts.
#include "clicommon.h"

#include "insights/lab.h"
#include "insights/registry.h"
#include "state/ledger/snapshotio.h"

#include <cctype>
#include <filesystem>

#include <iomanip>
#include <optional>
#include <iostream>
#include <set>
#include <sstream>

namespace kvscope::cli {

namespace {

using namespace kvscope::insights;

struct ListArgs {
    int tier = 0; // 0: every tier (when --tier is not given)
    bool tierGiven = false;
    std::string cls;
    bool json = false;
};

struct RunArgs {
    std::vector<int> numbers;
    bool all = false, json = false, markdown = false;
    std::string evidenceDir; // --save-evidence
    ModelOptions model;
};

// A file name part from an evidence role: lower-case letters and digits, runs of anything
// else as one '-'.
std::string slug(const std::string& role) {
    std::string out;
    for (unsigned char c : role) {
        if (std::isalnum(c))
            out += char(std::tolower(c));
        else if (!out.empty() && out.back() != '-')
            out += '-';
    }
    while (!out.empty() && out.back() == '-')
        out.pop_back();
    return out.empty() ? "state" : out;
}

// Writes the evidence states of `r` under `dir` (insight-N-K-role.kvsnap) and returns the
// paths, in the result's order.
std::vector<std::string> saveEvidence(const ExperimentResult& r, const std::string& dir) {
    std::vector<std::string> files;
    for (size_t k = 0; k < r.states.size(); ++k) {
        const std::string path =
            (std::filesystem::path(dir) /
             ("insight-" + std::to_string(r.number) + "-" + std::to_string(k + 1) + "-" +
              slug(r.states[k].role) + ".kvsnap"))
                .string();
        if (Status s = state::save(r.states[k].snapshot, path); !s)
            throw CliFailure{"--save-evidence: " + s.message()};
        files.push_back(path);
    }
    return files;
}

const Insight& insightOrFail(int n) {
    const Insight* i = findInsight(n);
    if (!i)
        throw CliFailure{"insights: there is no insight " + std::to_string(n) + " (1..80)",
                         kExitUsage};
    return *i;
}

void cmdList(const ListArgs& a) {
    if (a.tierGiven && (a.tier < 1 || a.tier > 8))
        throw CliFailure{"--tier " + std::to_string(a.tier) + ": tiers are 1..8", kExitUsage};
    if (!a.cls.empty() && a.cls != "measurable" && a.cls != "definitional" &&
        a.cls != "not-testable")
        throw CliFailure{"--class " + a.cls + ": measurable, definitional or not-testable",
                         kExitUsage};
    nlohmann::json rows = nlohmann::json::array();
    std::ostringstream text;
    int lastTier = 0;
    for (const Insight& i : registry()) {
        if ((a.tier && i.tier != a.tier) || (!a.cls.empty() && className(i.cls) != a.cls))
            continue;
        if (a.json) {
            nlohmann::json j = toJson(i, nullptr);
            j["note"] = i.note;
            j["has_experiment"] = hasExperiment(i.number);
            rows.push_back(j);
            continue;
        }
        if (i.tier != lastTier)
            text << (lastTier ? "\n" : "") << "Tier " << i.tier << " · " << i.tierName << "\n";
        lastTier = i.tier;
        text << std::setw(4) << i.number << "  " << std::left << std::setw(13) << className(i.cls)
             << std::right << i.claim << "\n";
    }
    if (a.json)
        printJson({{"insights", rows}});
    else
        std::cout << text.str();
}

void printResult(const Insight& i, const ExperimentResult* r, const std::string& error) {
    std::cout << "#" << i.number << " (tier " << i.tier << ", " << className(i.cls) << ") "
              << i.claim << "\n";
    if (!error.empty()) {
        std::cout << "  error: " << error << "\n";
        return;
    }
    if (!r) {
        std::cout << "  " << (i.note.empty() ? "no experiment" : i.note) << "\n";
        return;
    }
    std::cout << "  verdict: " << verdictName(r->verdict) << "\n";
    for (const auto& m : r->measurements)
        std::cout << "  " << m.name << " = " << std::setprecision(4) << m.value
                  << (m.unit.empty() ? "" : " " + m.unit)
                  << (m.note.empty() ? "" : "  (" + m.note + ")") << "\n";
    std::cout << "  " << r->why << "\n";
    if (!r->evidence.empty())
        std::cout << "  see: " << r->evidence << "\n";
}

void cmdRun(const RunArgs& a) {
    if (a.all == !a.numbers.empty())
        throw CliFailure{"insights run: give insight numbers or --all", kExitUsage};
    if (a.json && a.markdown)
        throw CliFailure{"--json and --markdown: choose one", kExitUsage};
    std::vector<const Insight*> wanted;
    if (a.all)
        for (const Insight& i : registry())
            wanted.push_back(&i);
    std::set<int> seen;
    for (int n : a.numbers)
        if (seen.insert(n).second)
            wanted.push_back(&insightOrFail(n));
    if (!a.evidenceDir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(a.evidenceDir, ec);
        if (ec || !std::filesystem::is_directory(a.evidenceDir))
            throw CliFailure{"--save-evidence " + a.evidenceDir + ": not a folder" +
                             (ec ? " (" + ec.message() + ")" : std::string())};
    }
    auto model = loadModelOrFail(a.model, true);
    auto ctx = makeLabContext(model);
    if (!ctx)
        throw CliFailure{"insights: " + ctx.message()};

    struct Row {
        const Insight* insight;
        std::optional<ExperimentResult> result;
        std::string error;
        std::vector<std::string> evidenceFiles;
    };
    std::vector<Row> rows;
    bool failed = false;
    for (const Insight* i : wanted) {
        Row row{i, std::nullopt, {}, {}};
        if (hasExperiment(i->number)) {
            auto r = runExperiment(i->number, ctx.value());
            if (r) {
                row.result = std::move(r.value());
                if (!a.evidenceDir.empty())
                    row.evidenceFiles = saveEvidence(*row.result, a.evidenceDir);
            } else
                row.error = r.message();
            failed |= !r;
        }
        rows.push_back(std::move(row));
    }
    if (a.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const Row& r : rows) {
            nlohmann::json j = toJson(*r.insight, r.result ? &*r.result : nullptr);
            if (!r.error.empty())
                j["error"] = r.error;
            for (size_t k = 0; k < r.evidenceFiles.size(); ++k)
                j["evidence_states"][k]["file"] = r.evidenceFiles[k];
            out.push_back(j);
        }
        printJson({{"insights", out}});
    } else if (a.markdown) {
        std::vector<std::pair<const Insight*, const ExperimentResult*>> table;
        for (const Row& r : rows)
            table.emplace_back(r.insight, r.result ? &*r.result : nullptr);
        std::cout << toMarkdownTable(table);
    } else {
        for (size_t k = 0; k < rows.size(); ++k) {
            if (k)
                std::cout << "\n";
            printResult(*rows[k].insight, rows[k].result ? &*rows[k].result : nullptr,
                        rows[k].error);
            for (const std::string& f : rows[k].evidenceFiles)
                std::cout << "  evidence: " << f << "\n";
        }
    }
    if (failed)
        throw CliFailure{"insights: some experiments failed (see their errors)"};
}

} // namespace

void registerInsightsCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "insights", "The compendium's 80 claims about transformer state, each classified, and "
                    "experiments that decide the measurable ones on a loaded model");
    cmd->require_subcommand(1);

    auto list = std::make_shared<ListArgs>();
    auto* l = cmd->add_subcommand("list", "The registry: number, tier, class and claim");
    auto* tier = l->add_option("--tier", list->tier, "Only this tier (1..8)");
    l->add_option("--class", list->cls, "Only measurable, definitional or not-testable");
    addJsonFlag(l, list->json);
    l->callback([list, tier] {
        list->tierGiven = tier->count() > 0;
        cmdList(*list);
    });

    auto run = std::make_shared<RunArgs>();
    auto* r = cmd->add_subcommand(
        "run", "Run the experiments of insights N... (or --all) on the model and print their "
               "measurements and computed verdicts; exit 0 when every one ran");
    r->add_option("numbers", run->numbers, "Insight numbers (1..80)");
    r->add_flag("--all", run->all, "Every insight (the 80 rows; experiments where there are)");
    addModelOptions(r, run->model);
    r->add_flag("--markdown", run->markdown, "A Markdown table: #, claim, class, verdict, key");
    r->add_option("--save-evidence", run->evidenceDir,
                  "Write the states each experiment shows its effect on to this folder "
                  "(insight-N-K-role.kvsnap), for drift, diff, verify or the GUI");
    addJsonFlag(r, run->json);
    r->callback([run] { cmdRun(*run); });
}

} // namespace kvscope::cli
