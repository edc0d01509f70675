// `survive`: the survival lab (core: state/probes/survive.h). One policy at one budget, with
// the compressed state saved when asked, or the sweep over every policy, budget and layer.
#include "clicommon.h"
#include "state/ledger/snapshotio.h"
#include "state/probes/eviction.h"
#include "state/probes/survive.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace kvscope::cli {

namespace {

using namespace kvscope::state;

struct SurviveArgs {
    std::string snapshot, policy = "full", output;
    double budget = 1.0;
    std::vector<std::string> params;
    std::vector<double> budgets{0.125, 0.25, 0.5, 0.75};
    std::vector<int> layers;
    std::vector<std::string> allocations{"uniform", "pyramid", "head-adaptive"};
    int steps = 32;
    bool sweep = false, json = false, markdown = false;
    ModelOptions model;
    // The flags given on the command line, by name ("--budget", ...): a flag of one run is
    // refused with --sweep and a flag of the sweep without it, instead of being ignored.
    std::vector<std::string> given;
    bool has(const std::string& flag) const {
        return std::find(given.begin(), given.end(), flag) != given.end();
    }
};

// The bounds of survive()'s steps (state/probes/survive.cpp), checked here so that a wrong
// -n is a usage error naming the flag before the model loads.
constexpr int kMaxSteps = 1 << 16;

std::string number(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
}

// A budget is a share of the cached slots in (0, 1] or, above 1, a whole slot count (how
// compress() reads it; 1 is the share "every slot", so a count starts at 2). `slots` is the
// snapshot's cache length, or 0 before it is known. Usage error naming the flag otherwise.
void checkBudget(double b, const std::string& flag, int64_t slots) {
    const bool share = b > 0 && b <= 1;
    const bool count = b > 1 && b == std::floor(b) && (slots == 0 || b <= double(slots));
    if (share || count)
        return;
    std::string counts = "or a whole slot count of 2 or more";
    if (slots == 1)
        counts = "(the snapshot caches 1 slot: no count above 1)";
    else if (slots > 1)
        counts = "or a whole slot count 2.." + std::to_string(slots) + " (the snapshot caches " +
                 std::to_string(slots) + " slots)";
    throw CliFailure{flag + " " + number(b) + ": a share of the cached slots in (0, 1] " + counts,
                     kExitUsage};
}

// What can be checked before anything is loaded: which flags go together, every budget's
// form, the step count, the allocations. The bounds that need the snapshot (slot counts) or
// the model (layers) follow in checkAgainst().
void checkFlags(const SurviveArgs& a) {
    if (a.sweep) {
        for (const char* one : {"--policy", "--budget", "--param"})
            if (a.has(one))
                throw CliFailure{std::string(one) +
                                     " sets one run: not with --sweep (--budgets, --allocations "
                                     "and --layers set the sweep's runs)",
                                 kExitUsage};
    } else {
        for (const char* many : {"--budgets", "--allocations", "--layers"})
            if (a.has(many))
                throw CliFailure{std::string(many) +
                                     " sets the sweep's runs: use it with --sweep (--budget sets "
                                     "one run's budget)",
                                 kExitUsage};
    }
    if (a.steps < 1 || a.steps > kMaxSteps)
        throw CliFailure{"-n/--steps " + std::to_string(a.steps) + " is outside 1.." +
                             std::to_string(kMaxSteps),
                         kExitUsage};
    if (a.sweep) {
        for (double b : a.budgets)
            checkBudget(b, "--budgets", 0);
        const auto& known = evictionAllocations();
        for (const auto& al : a.allocations)
            if (std::find(known.begin(), known.end(), al) == known.end()) {
                std::string names;
                for (const auto& n : known)
                    names += (names.empty() ? "" : ", ") + n;
                throw CliFailure{"--allocations " + al + ": not an allocation (" + names + ")",
                                 kExitUsage};
            }
        return;
    }
    checkBudget(a.budget, "--budget", 0);
    const auto& policies = survivalPolicies();
    const bool known = std::find(policies.begin(), policies.end(), a.policy) != policies.end();
    if (known && !isEvictionPolicy(a.policy) && a.budget != 1)
        throw CliFailure{"--budget " + number(a.budget) + ": policy " + a.policy +
                             " keeps every slot; a budget applies to the eviction policies",
                         kExitUsage};
}

// The bounds that need the snapshot and the model: a slot count within the cache, the sweep's
// layers within the model's.
void checkAgainst(const SurviveArgs& a, const Snapshot& source, const Model& model) {
    if (a.sweep) {
        for (double b : a.budgets)
            checkBudget(b, "--budgets", source.cacheLength);
        const int64_t layers = model.config().nLayers;
        for (int l : a.layers)
            if (l < 0 || l >= layers)
                throw CliFailure{"--layers " + std::to_string(l) + " is outside 0.." +
                                     std::to_string(layers - 1) + " (the model's layers)",
                                 kExitUsage};
        return;
    }
    checkBudget(a.budget, "--budget", source.cacheLength);
}

std::map<std::string, std::string> paramsOrFail(const std::vector<std::string>& given) {
    std::map<std::string, std::string> out;
    for (const auto& kv : given) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
            throw CliFailure{"--param " + kv + ": expected NAME=VALUE", kExitUsage};
        out[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    return out;
}

void printOne(const SurviveResult& r) {
    std::cout << "policy " << r.policy;
    // runSetting(): "25 %" for a share, "25 slots" for a count, as the sweep's table says it.
    const std::string budget = runSetting(r.policy, r.budget, r.parameters);
    if (isEvictionPolicy(r.policy) && r.keptPerHead.empty())
        std::cout << " at budget " << budget << " (" << r.keptTokens.size() << " slots kept)";
    else if (isEvictionPolicy(r.policy))
        std::cout << " at budget " << budget << " (" << r.budgetSlots
                  << " slots per head: " << r.keptTokens.size() << " kept by some head, "
                  << *std::min_element(r.keptPerHead.begin(), r.keptPerHead.end()) << ".."
                  << *std::max_element(r.keptPerHead.begin(), r.keptPerHead.end()) << " per head)";
    for (const auto& [k, v] : r.parameters.items())
        std::cout << ", " << k << "=" << (v.is_string() ? v.get<std::string>() : v.dump());
    std::cout << "\nbytes kept " << r.bytesKept << " of " << r.bytesFull << " ("
              << std::setprecision(3)
              << 100.0 * double(r.bytesKept) / double(std::max<uint64_t>(1, r.bytesFull))
              << " %), built in " << r.buildSeconds << " s\n";
    std::cout << "over " << r.steps << " teacher-forced steps: KL mean " << r.kl.mean << ", median "
              << r.kl.median << ", p99 " << r.kl.p99 << ", max " << r.kl.max
              << " nats; top-1 agreement " << r.top1Agreement * 100 << " %; mean dp(ref) "
              << r.meanDeltaP << "; perplexity ratio " << r.pplRatio << "\n";
    std::cout << "first greedy divergence: "
              << (r.firstDivergence < 0 ? std::string("none")
                                        : "step " + std::to_string(r.firstDivergence))
              << "\n";
    for (const auto& p : r.recall) {
        std::cout << "recall " << (p.name == "needle" ? "needle at depth " : p.name);
        if (p.name == "needle")
            std::cout << p.depth;
        std::cout << ": answer loss " << std::setprecision(3) << p.compressedLoss
                  << " nats (full state " << p.fullLoss << "), top-1 " << p.compressed * 100
                  << " % (full " << p.full * 100 << " %)\n";
    }
}

void cmdSurvive(const SurviveArgs& a) {
    checkFlags(a);
    if (!a.output.empty()) {
        if (a.sweep)
            throw CliFailure{"-o/--output saves one compressed state: not with --sweep",
                             kExitUsage};
        checkOutputPath(a.output, "--output");
    }
    if (a.markdown && !a.sweep)
        throw CliFailure{"--markdown prints the sweep's table: use it with --sweep", kExitUsage};
    if (a.json && a.markdown)
        throw CliFailure{"--json and --markdown: choose one", kExitUsage};
    const Snapshot source = loadSnapshotOrFail(a.snapshot);
    auto model = loadModelOrFail(a.model, false);
    checkAgainst(a, source, *model);
    if (a.sweep) {
        SweepOptions o;
        o.budgets = a.budgets;
        o.layers = a.layers;
        o.allocations = a.allocations;
        o.steps = a.steps;
        auto r = state::sweep(source, model, o);
        if (!r)
            throw CliFailure{r.message()};
        if (a.json)
            printJson(sweepToJson(r.value()));
        else
            std::cout << sweepToMarkdown(r.value());
        return;
    }
    SurviveOptions o;
    o.policy = a.policy;
    o.budget = a.budget;
    o.params = paramsOrFail(a.params);
    o.steps = a.steps;
    Compressed compressed;
    auto r = state::survive(source, model, o, &compressed);
    if (!r)
        throw CliFailure{r.message()};
    if (!a.output.empty())
        if (Status st = state::save(compressed.snapshot, a.output); !st)
            throw CliFailure{st.message()};
    if (a.json) {
        auto j = r.value().toJson();
        if (!a.output.empty())
            j["output"] = {{"path", a.output}, {"id", compressed.snapshot.lineage.id}};
        printJson(j);
        return;
    }
    printOne(r.value());
    if (!a.output.empty())
        std::cout << "saved " << a.output << " (" << compressed.snapshot.lineage.id << ")\n";
}

} // namespace

void registerSurviveCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "survive",
        "Compress a state (eviction, quantization, residual checkpoints) and measure how it "
        "continues");
    auto a = std::make_shared<SurviveArgs>();
    cmd->add_option("snapshot", a->snapshot, "Snapshot file (.kvsnap)")->required();
    addModelOptions(cmd, a->model);
    std::string names;
    for (const auto& n : survivalPolicies())
        names += (names.empty() ? "" : ", ") + n;
    cmd->add_option("--policy", a->policy, "Policy: " + names)->capture_default_str();
    cmd->add_option("--budget", a->budget,
                    "Eviction: the share of the cached slots kept, in (0, 1], or a whole slot "
                    "count of 2 or more (at most the snapshot's cached slots)")
        ->capture_default_str();
    cmd->add_option("--param", a->params,
                    "Policy parameter NAME=VALUE (sinks, recent, window, pool, seed, horizon, "
                    "allocation=uniform|pyramid|head-adaptive, bits, group, residual, kv, "
                    "layer)");
    cmd->add_option("-n,--steps", a->steps, "Teacher-forced continuation steps (1..65536)")
        ->capture_default_str();
    cmd->add_option("-o,--output", a->output, "Save the compressed state (.kvsnap)");
    cmd->add_flag("--sweep", a->sweep,
                  "Every policy at every budget (eviction), 2/4/8 bits (quantization) and "
                  "layer (residual-at)");
    cmd->add_option("--budgets", a->budgets, "Sweep budgets, each as --budget takes it")
        ->capture_default_str();
    cmd->add_option("--layers", a->layers, "Sweep: residual-at's layers (default: every layer)");
    cmd->add_option("--allocations", a->allocations,
                    "Sweep: budget allocations for h2o, tova, snapkv and knorm")
        ->capture_default_str();
    cmd->add_flag("--markdown", a->markdown, "Sweep: the frontier as a Markdown table");
    addJsonFlag(cmd, a->json);
    cmd->callback([a, cmd] {
        a->given.clear();
        for (const char* flag :
             {"--policy", "--budget", "--param", "--budgets", "--allocations", "--layers"})
            if (cmd->get_option(flag)->count() > 0)
                a->given.emplace_back(flag);
        cmdSurvive(*a);
    });
}

} // namespace kvscope::cli
