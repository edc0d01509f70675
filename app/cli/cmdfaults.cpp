// Fault lab and transplant commands: `fault list`, `fault inject`, `fault lab`, `transplant`.
// All take --json. Exit codes: 0 ok, 1 failure (including a lab where a fault is not caught
// or shows no effect), 2 usage (unknown fault, bad parameter, output == input).
#include "clicommon.h"
#include "state/surgery/faults.h"
#include "state/ledger/snapshotio.h"
#include "state/probes/transplant.h"
#include "tokenizer/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace kvscope::cli {

namespace {

using namespace kvscope::state;
namespace fs = std::filesystem;

const FaultInfo& faultOrFail(const std::string& name) {
    if (const FaultInfo* f = findFault(name))
        return *f;
    std::string names;
    for (const auto& f : allFaults())
        names += (names.empty() ? "" : ", ") + f.name;
    throw CliFailure{"unknown fault '" + name + "' (known: " + names + "; see `fault list`)",
                     kExitUsage};
}

std::map<std::string, std::string> paramsOrFail(const FaultInfo& f,
                                                const std::vector<std::string>& given) {
    std::map<std::string, std::string> out;
    for (const auto& kv : given) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
            throw CliFailure{"--param expects KEY=VALUE, got '" + kv + "'", kExitUsage};
        const std::string key = kv.substr(0, eq);
        bool known = false;
        for (const auto& p : f.params)
            known = known || p.name == key;
        if (!known) {
            std::string names;
            for (const auto& p : f.params)
                names += (names.empty() ? "" : ", ") + p.name;
            throw CliFailure{
                "fault " + f.name + " has no parameter '" + key + "' (" +
                    (names.empty() ? std::string("it takes none") : "parameters: " + names) + ")",
                kExitUsage};
        }
        out[key] = kv.substr(eq + 1);
    }
    return out;
}

struct FaultModelArgs {
    std::string model;
    std::string device = "cpu";
    std::string cacheDtype;     // as addModelOptions' --cache-dtype
    std::string otherTokenizer; // tokenizer-swapped
    std::string otherModel;     // foreign-cache
};

void addFaultModelOptions(CLI::App* cmd, FaultModelArgs& a, bool modelRequired) {
    auto* m = cmd->add_option("-m,--model", a.model,
                              "The snapshot's model (needed by faults that recompute state)");
    if (modelRequired)
        m->required();
    cmd->add_option("--device", a.device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--cache-dtype", a.cacheDtype,
                    "KV cache dtype of the states the faults recompute: f32, f16, bf16 "
                    "(default: the compute dtype)")
        ->check(cacheDtypeCheck());
    cmd->add_option("-t,--tokenizer", a.otherTokenizer,
                    "tokenizer-swapped: the tokenizer to swap in (default: a built-in "
                    "byte-level one)");
    cmd->add_option("--other-model", a.otherModel,
                    "foreign-cache: a model of the same geometry whose K/V to use (default: "
                    "random weights)");
}

FaultContext contextOrFail(const FaultModelArgs& a) {
    FaultContext c;
    if (!a.model.empty())
        c.model = loadModelOrFail({a.model, "", a.device, "", false, a.cacheDtype}, false);
    if (!a.otherModel.empty())
        c.otherModel =
            loadModelOrFail({a.otherModel, "", a.device, "", false, a.cacheDtype}, false);
    if (!a.otherTokenizer.empty()) {
        auto t = tok::Tokenizer::fromFile(a.otherTokenizer);
        if (!t)
            throw CliFailure{t.message()};
        c.otherTokenizer = t.value();
    }
    return c;
}

void cmdFaultList(bool json) {
    if (json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& f : allFaults())
            arr.push_back(toJson(f));
        printJson({{"faults", arr}});
        return;
    }
    for (const auto& f : allFaults()) {
        std::cout << std::left << std::setw(22) << f.name << std::setw(24) << f.check
                  << f.description << "\n";
        for (const auto& p : f.params)
            std::cout << std::setw(24) << ""
                      << "--param " << p.name << "="
                      << (p.defaultValue.empty() ? "<derived>" : p.defaultValue) << "  " << p.help
                      << "\n";
    }
}

struct InjectArgs {
    std::string fault, snapshot, output;
    FaultModelArgs model;
    std::vector<std::string> params;
    bool json = false;
};

bool sameFile(const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(b, ec) && fs::equivalent(a, b, ec))
        return true;
    return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

void cmdFaultInject(const InjectArgs& a) {
    const FaultInfo& f = faultOrFail(a.fault);
    FaultContext ctx;
    ctx.params = paramsOrFail(f, a.params);
    if (sameFile(a.snapshot, a.output))
        throw CliFailure{"fault inject: the output " + a.output +
                             " is the input snapshot; write the faulty state elsewhere",
                         kExitUsage};
    const Snapshot clean = loadSnapshotOrFail(a.snapshot);
    FaultContext loaded = contextOrFail(a.model);
    loaded.params = ctx.params;
    auto faulty = injectFault(f.name, clean, loaded);
    if (!faulty)
        throw CliFailure{a.snapshot + ": " + faulty.message()};
    if (Status st = save(faulty.value(), a.output); !st)
        throw CliFailure{st.message()};
    if (a.json) {
        printJson({{"fault", f.name},
                   {"check", f.check},
                   {"input", a.snapshot},
                   {"output", a.output},
                   {"lineage",
                    {{"id", faulty.value().lineage.id},
                     {"parent_id", faulty.value().lineage.parentId},
                     {"operation", faulty.value().lineage.operation},
                     {"parameters", faulty.value().lineage.parameters}}}});
        return;
    }
    std::cout << "wrote " << a.output << ": " << f.name << " "
              << faulty.value().lineage.parameters.dump() << "\n"
              << "verify should report " << f.check << ": kvscope-cli verify " << a.output
              << " --model <model>\n";
}

struct LabArgs {
    std::string snapshot;
    FaultModelArgs model;
    int steps = 16;
    std::vector<std::string> faults;
    bool json = false;
    bool markdown = false;
};

std::string fmt(double x) {
    if (!std::isfinite(x))
        return "inf";
    if (x == 0)
        return "0";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", x);
    return buf;
}

void cmdFaultLab(const LabArgs& a) {
    for (const auto& f : a.faults)
        faultOrFail(f);
    if (a.steps < 2 || a.steps > 4096)
        throw CliFailure{"--steps must be within 2..4096", kExitUsage};
    const Snapshot clean = loadSnapshotOrFail(a.snapshot);
    const FaultContext ctx = contextOrFail(a.model);
    auto rows = faultLab(clean, ctx, {.steps = a.steps, .workDir = {}, .faults = a.faults});
    if (!rows)
        throw CliFailure{a.snapshot + ": " + rows.message()};
    bool allGood = true;
    for (const auto& r : rows.value())
        allGood = allGood && r.error.empty() && r.caught && (r.metadataOnly || r.effect());
    if (a.json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : rows.value())
            arr.push_back(toJson(r));
        printJson({{"snapshot", a.snapshot},
                   {"model", a.model.model},
                   {"steps", a.steps},
                   {"all_caught", allGood},
                   {"faults", arr}});
    } else if (a.markdown) {
        std::cout << "| fault | check | verify reports | KL step 0 | KL step 1 | max KL | first "
                     "diverging token |\n|---|---|---|---|---|---|---|\n";
        for (const auto& r : rows.value()) {
            std::string found;
            for (const auto& id : r.found)
                found += (found.empty() ? "" : ", ") + ("`" + id + "`");
            std::cout << "| `" << r.fault << "` | `" << r.check << "`"
                      << (r.caught ? "" : " (MISSED)") << " | " << found << " | ";
            if (!r.error.empty()) {
                std::cout << stageName(r.stage) << ": " << r.error << " | | | |\n";
                continue;
            }
            std::cout << fmt(r.klStep0) << " | " << fmt(r.klStep1) << " | " << fmt(r.maxKl) << " | "
                      << (r.firstDivergingStep < 0 ? "none in " + std::to_string(r.steps) +
                                                         (r.metadataOnly ? " (metadata only)" : "")
                                                   : "step " + std::to_string(r.firstDivergingStep))
                      << " |\n";
        }
    } else {
        std::cout << std::left << std::setw(21) << "fault" << std::setw(24) << "check"
                  << std::setw(7) << "caught" << std::setw(11) << "KL step0" << std::setw(11)
                  << "KL step1" << std::setw(11) << "max KL"
                  << "first diverging   verify reports\n";
        for (const auto& r : rows.value()) {
            std::string found;
            for (const auto& id : r.found)
                found += (found.empty() ? "" : " ") + id;
            std::cout << std::setw(21) << r.fault << std::setw(24) << r.check << std::setw(7)
                      << (r.caught ? "yes" : "NO");
            if (!r.error.empty()) {
                std::cout << stageName(r.stage) << ": " << r.error << "\n";
                continue;
            }
            std::cout << std::setw(11) << fmt(r.klStep0) << std::setw(11) << fmt(r.klStep1)
                      << std::setw(11) << fmt(r.maxKl) << std::setw(18)
                      << (r.firstDivergingStep < 0 ? "none" : std::to_string(r.firstDivergingStep))
                      << found << "\n";
        }
        std::cout << (allGood ? "every fault was named by verify and measured"
                              : "NOT every fault was caught / measured")
                  << " (drift: greedy, " << a.steps << " steps)\n";
    }
    if (!allGood) {
        // Which fault, and why, with the file: a refusal (e.g. a head-masked state a fault
        // cannot be injected into) says what refused.
        std::string why;
        for (const auto& r : rows.value()) {
            std::string w = !r.error.empty()                  ? stageName(r.stage) + ": " + r.error
                            : !r.caught                       ? "not caught by " + r.check
                            : !(r.metadataOnly || r.effect()) ? "no effect on the continuation"
                                                              : "";
            if (!w.empty())
                why += (why.empty() ? "" : "; ") + r.fault + ": " + w;
        }
        throw CliFailure{a.snapshot + ": fault lab: " + why, kExitFailure};
    }
}

struct TransplantArgs {
    ModelOptions model;
    std::string recipient, donor, recipientSnapshot, donorSnapshot;
    int layer = 0;
    std::string positions = "all";
    int steps = 8;
    bool json = false;
};

std::vector<int32_t> promptOrFail(const Model& model, const std::string& text,
                                  const std::string& snapshot, const char* role) {
    if (text.empty() == snapshot.empty())
        throw CliFailure{std::string("transplant: give exactly one of --") + role + " and --" +
                             role + "-snapshot",
                         kExitUsage};
    if (!snapshot.empty())
        return loadSnapshotOrFail(snapshot).tokens; // residuals are recomputed from the tokens
    auto tok = model.tokenizer();
    if (!tok)
        throw CliFailure{std::string("transplant: the model has no tokenizer to encode --") + role +
                         "; give --tokenizer or --" + role + "-snapshot"};
    return tok->encode(text);
}

void cmdTransplant(const TransplantArgs& a) {
    TransplantOptions o;
    if (a.positions == "all")
        o.positions = TransplantPositions::All;
    else if (a.positions == "last")
        o.positions = TransplantPositions::Last;
    else
        throw CliFailure{"--positions must be all or last, got '" + a.positions + "'", kExitUsage};
    o.layer = a.layer;
    o.steps = a.steps;
    auto model = loadModelOrFail(a.model, false);
    if (a.layer < 0 || a.layer >= model->config().nLayers)
        throw CliFailure{"--layer " + std::to_string(a.layer) + " is outside 0.." +
                             std::to_string(model->config().nLayers - 1),
                         kExitUsage};
    const auto recipient = promptOrFail(*model, a.recipient, a.recipientSnapshot, "recipient");
    const auto donor = promptOrFail(*model, a.donor, a.donorSnapshot, "donor");
    auto r = transplant(model, recipient, donor, o);
    if (!r)
        throw CliFailure{r.message()};
    const auto& t = r.value();
    if (a.json) {
        printJson(toJson(t));
        return;
    }
    std::cout << "transplant of the residual after layer " << t.layer << " ("
              << transplantPositionsName(t.positions) << " positions; recipient "
              << t.recipientTokens << " tokens, donor " << t.donorTokens << ")\n"
              << "KL(donor || transplanted)     " << fmt(t.vsDonor.kl) << "  (top-1 "
              << (t.vsDonor.top1Agree ? "agrees" : "differs") << ")\n"
              << "KL(original || transplanted)  " << fmt(t.vsOriginal.kl) << "\n"
              << "KL(donor || original)         " << fmt(t.donorVsOriginal.kl) << "\n";
    for (const auto& p : t.persistence) {
        std::cout << "\n" << p.intervention << ":";
        if (!p.skipped.empty()) {
            std::cout << " skipped, " << p.skipped << "\n";
            continue;
        }
        std::cout << "\nstep  token  KL to donor  KL to original  = donor  = original\n";
        for (const auto& s : p.steps)
            std::cout << std::right << std::setw(4) << s.step << "  " << std::setw(5) << s.token
                      << "  " << std::setw(11) << fmt(s.klDonor) << "  " << std::setw(14)
                      << fmt(s.klOriginal) << "  " << std::setw(7)
                      << (s.matchesDonor ? "yes" : "no") << "  " << std::setw(10)
                      << (s.matchesOriginal ? "yes" : "no") << "\n";
    }
}

} // namespace

void registerFaultCommands(CLI::App& app) {
    auto* fault = app.add_subcommand("fault", "The fault lab: inject documented restore failures");
    fault->require_subcommand(1);
    {
        auto* cmd = fault->add_subcommand("list", "List the faults and the check naming each");
        auto json = std::make_shared<bool>(false);
        addJsonFlag(cmd, *json);
        cmd->callback([json] { cmdFaultList(*json); });
    }
    {
        auto* cmd = fault->add_subcommand("inject", "Write a copy of a snapshot with a fault");
        auto a = std::make_shared<InjectArgs>();
        cmd->add_option("fault", a->fault, "Fault name (see `fault list`)")->required();
        cmd->add_option("snapshot", a->snapshot, "Clean snapshot (.kvsnap)")->required();
        cmd->add_option("-o,--output", a->output, "Faulty snapshot to write")->required();
        addFaultModelOptions(cmd, a->model, false);
        cmd->add_option("--param", a->params, "Fault parameter KEY=VALUE (repeatable)");
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdFaultInject(*a); });
    }
    {
        auto* cmd = fault->add_subcommand(
            "lab", "Inject every fault, verify each through a file and measure its drift");
        auto a = std::make_shared<LabArgs>();
        cmd->add_option("snapshot", a->snapshot, "Clean snapshot (.kvsnap)")->required();
        addFaultModelOptions(cmd, a->model, true);
        cmd->add_option("-n,--steps", a->steps, "Drift steps (greedy)")->capture_default_str();
        cmd->add_option("--fault", a->faults, "Only these faults (repeatable)");
        cmd->add_flag("--markdown", a->markdown, "Print the table as Markdown");
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdFaultLab(*a); });
    }
    {
        auto* cmd = app.add_subcommand(
            "transplant", "Transplant the residual stream at a layer from a donor run");
        auto a = std::make_shared<TransplantArgs>();
        addModelOptions(cmd, a->model);
        cmd->add_option("--recipient", a->recipient, "Recipient prompt text");
        cmd->add_option("--donor", a->donor, "Donor prompt text");
        cmd->add_option("--recipient-snapshot", a->recipientSnapshot,
                        "Recipient tokens from a snapshot (instead of --recipient)");
        cmd->add_option("--donor-snapshot", a->donorSnapshot,
                        "Donor tokens from a snapshot (instead of --donor)");
        cmd->add_option("-l,--layer", a->layer, "Residual after this layer")->required();
        cmd->add_option("--positions", a->positions, "all | last")->capture_default_str();
        cmd->add_option("-n,--steps", a->steps, "Persistence steps K (0: none)")
            ->capture_default_str();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdTransplant(*a); });
    }
}

} // namespace kvscope::cli
