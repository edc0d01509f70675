// State surgery commands: fork, tree, truncate, patch, splice, diff (core/state/surgery/surgery.h,
// diff.h, lineagetree.h). A thin layer: load snapshots (and the model where the operation
// needs one), call the core function, save the new snapshot(s) atomically, print the report.
// Nothing is written when an operation fails, so an existing output file is never damaged.
// All take --json. Exit codes: 0 ok, 1 failure (bad input names the file and field), 2 usage.
#include "clicommon.h"
#include "state/surgery/diff.h"
#include "state/surgery/lineagetree.h"
#include "state/ledger/snapshotio.h"
#include "state/surgery/surgery.h"

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>

namespace kvscope::cli {

namespace {

using namespace kvscope::state;
namespace fs = std::filesystem;

Snapshot loadOrFail(const std::string& path) {
    auto s = state::load(path);
    if (!s)
        throw CliFailure{s.message() + " (run `kvscope-cli verify` for the full report)"};
    return std::move(s).value();
}

// "a:b" -> [a, b). Usage error (exit 2) when malformed.
std::pair<int64_t, int64_t> parseRange(const std::string& text, const std::string& option) {
    const auto colon = text.find(':');
    try {
        if (colon == std::string::npos)
            throw std::invalid_argument("no colon");
        std::size_t ia = 0, ib = 0;
        const std::string sa = text.substr(0, colon), sb = text.substr(colon + 1);
        const int64_t a = std::stoll(sa, &ia), b = std::stoll(sb, &ib);
        if (ia != sa.size() || ib != sb.size())
            throw std::invalid_argument("trailing characters");
        return {a, b};
    } catch (const std::exception&) {
        throw CliFailure{option + " '" + text + "' is not a range BEGIN:END (e.g. 3:7)",
                         kExitUsage};
    }
}

void saveOrFail(const Snapshot& s, const std::string& path) {
    if (Status st = save(s, path); !st)
        throw CliFailure{st.message()};
}

std::string stemOf(const std::string& path) {
    return fs::path(path).stem().string();
}

// ---- fork

struct ForkArgs {
    std::string snapshot, outDir;
    ModelOptions model;
    int branches = 2;
    int steps = 0;
    std::optional<uint64_t> seedBase;
    std::optional<float> temperature, topP;
    std::optional<int32_t> topK;
    bool force = false;
    bool json = false;
};

void cmdFork(const ForkArgs& a) {
    if (a.steps > 0 && a.model.model.empty())
        throw CliFailure{"fork: --steps needs --model", kExitUsage};
    const Snapshot src = loadOrFail(a.snapshot);
    std::shared_ptr<const Model> model;
    if (!a.model.model.empty())
        model = loadModelOrFail(a.model, false);
    ForkOptions o;
    o.branches = a.branches;
    o.steps = a.steps;
    o.seedBase = a.seedBase;
    o.temperature = a.temperature;
    o.topP = a.topP;
    o.topK = a.topK;
    o.force = a.force;
    auto r = state::fork(src, o, model);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    std::error_code ec;
    fs::create_directories(a.outDir, ec);
    if (!fs::is_directory(a.outDir))
        throw CliFailure{a.outDir + ": cannot create the output folder" +
                         (ec ? " (" + ec.message() + ")" : std::string())};
    nlohmann::json j = r.value().toJson();
    const std::string stem = stemOf(a.snapshot);
    for (std::size_t i = 0; i < r.value().branches.size(); ++i) {
        const std::string out =
            (fs::path(a.outDir) / (stem + "-fork" + std::to_string(i) + ".kvsnap")).string();
        saveOrFail(r.value().branches[i].snapshot, out);
        j["branches"][i]["file"] = out;
    }
    if (a.json) {
        printJson(j);
        return;
    }
    for (const auto& b : j["branches"]) {
        std::cout << b["file"].get<std::string>() << "  seed " << b["seed"] << "  " << b["tokens"]
                  << " tokens";
        if (b.contains("text"))
            std::cout << "  +" << b["generated"].size() << ": " << b["text"].get<std::string>();
        std::cout << "\n";
    }
}

// ---- tree

void cmdTree(const std::string& dir, bool json) {
    auto t = scanLineageTree(dir);
    if (!t)
        throw CliFailure{t.message()};
    if (json)
        std::cout << t.value().toJsonText() << "\n";
    else
        std::cout << t.value().toText();
}

// ---- truncate

struct TruncateArgs {
    std::string snapshot, out;
    ModelOptions model;
    int64_t at = 0;
    bool json = false;
};

void cmdTruncate(const TruncateArgs& a) {
    const Snapshot src = loadOrFail(a.snapshot);
    auto model = loadModelOrFail(a.model, false);
    auto r = state::truncate(src, a.at, model);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    saveOrFail(r.value().snapshot, a.out);
    const auto& rep = r.value().report;
    if (a.json) {
        printJson(
            {{"output", a.out}, {"id", r.value().snapshot.lineage.id}, {"report", rep.toJson()}});
        return;
    }
    std::cout << a.out << ": kept " << rep.at << " of " << rep.originalTokens << " tokens; dropped "
              << rep.droppedTokens.size();
    if (!rep.droppedText.empty())
        std::cout << ": \"" << rep.droppedText << "\"";
    std::cout << "\nsegments removed " << rep.segmentsRemoved.size() << ", clipped "
              << rep.segmentsClipped.size() << "; prompt tokens " << rep.promptTokensBefore
              << " -> " << rep.promptTokensAfter << "; last-step logits recomputed\n";
}

// ---- patch

struct PatchArgs {
    std::string target, source, out, positions;
    ModelOptions model;
    int layer = 0;
    int head = -1;
    bool json = false;
};

void cmdPatch(const PatchArgs& a) {
    PatchOptions o;
    o.layer = a.layer;
    o.head = a.head;
    if (!a.positions.empty())
        std::tie(o.begin, o.end) = parseRange(a.positions, "--positions");
    o.sourceFile = fs::path(a.source).filename().string();
    const Snapshot ta = loadOrFail(a.target), tb = loadOrFail(a.source);
    std::shared_ptr<const Model> model;
    if (!a.model.model.empty())
        model = loadModelOrFail(a.model, false);
    auto r = state::patch(ta, tb, o, model);
    if (!r)
        throw CliFailure{a.target + " <- " + a.source + ": " + r.message()};
    saveOrFail(r.value().snapshot, a.out);
    const auto& rep = r.value().report;
    if (a.json) {
        printJson(
            {{"output", a.out}, {"id", r.value().snapshot.lineage.id}, {"report", rep.toJson()}});
        return;
    }
    std::cout << a.out << ": layer " << rep.layer << ", "
              << (rep.head < 0 ? std::string("all heads") : "head " + std::to_string(rep.head))
              << ", positions " << rep.begin << ":" << rep.end << " from " << a.source << "\n"
              << "elements changed: K " << rep.keyElementsChanged << ", V "
              << rep.valueElementsChanged << "\n";
    if (rep.logitChange)
        std::cout << "last-step logits recomputed: KL(old || new) " << rep.logitChange->kl
                  << ", max |dlogit| " << rep.logitChange->maxAbs << ", top-1 "
                  << (rep.logitChange->top1Agree ? "unchanged" : "changed") << "\n";
    for (const auto& n : rep.notes)
        std::cout << "note: " << n << "\n";
}

// ---- splice

struct SpliceArgs {
    std::string target, source, out, range;
    ModelOptions model;
    int64_t at = 0;
    bool json = false;
};

void cmdSplice(const SpliceArgs& a) {
    SpliceOptions o;
    std::tie(o.begin, o.end) = parseRange(a.range, "--range");
    o.at = a.at;
    const Snapshot ta = loadOrFail(a.target), tb = loadOrFail(a.source);
    auto model = loadModelOrFail(a.model, false);
    auto r = state::splice(ta, tb, o, model);
    if (!r)
        throw CliFailure{a.target + " <- " + a.source + ": " + r.message()};
    saveOrFail(r.value().snapshot, a.out);
    const auto& rep = r.value().report;
    if (a.json) {
        printJson(
            {{"output", a.out}, {"id", r.value().snapshot.lineage.id}, {"report", rep.toJson()}});
        return;
    }
    std::cout << a.out << ": inserted " << rep.inserted << " tokens (source " << rep.begin << ":"
              << rep.end << ") at " << rep.at << "; fragment moved by " << rep.fragmentShift
              << ", tail by " << rep.tailShift << "; keys re-rotated at "
              << rep.rerotatedFragmentKeys << " fragment + " << rep.rerotatedTailKeys
              << " tail positions\nvalidation: " << (rep.validation.ok() ? "ok" : "FAILED") << " ("
              << rep.validation.violations.size() << " finding(s))\n"
              << "drift vs recomputing the text in place:\n"
              << "layer  max|dK|      max|dV|      cos K      cos V\n";
    for (const auto& d : rep.drift.layers)
        std::cout << std::setw(5) << d.layer << "  " << std::setw(11) << d.keyMaxAbs << "  "
                  << std::setw(11) << d.valueMaxAbs << "  " << std::setw(9) << d.keyCosine << "  "
                  << std::setw(9) << d.valueCosine << "\n";
    std::cout << "next-step logits: KL(recomputed || spliced) " << rep.logitDrift.kl
              << ", max |dlogit| " << rep.logitDrift.maxAbs << ", top-1 "
              << (rep.logitDrift.top1Agree ? "agrees" : "differs") << "\n";
}

// ---- diff

void cmdDiff(const std::string& pa, const std::string& pb, bool heads, bool json) {
    const Snapshot a = loadOrFail(pa), b = loadOrFail(pb);
    const DiffReport d = state::diff(a, b);
    // A head mask whose entries have no (layer, head, slot) to be compared at (diff.h's
    // `invalid`) is bad input, refused as load() refuses what it finds itself.
    if (!d.invalid.empty()) {
        std::string why;
        for (const auto& i : d.invalid)
            why += (why.empty() ? "" : "; ") + (i.side == "a" ? pa : pb) + ": " + i.violation.id +
                   ": " + i.violation.message;
        throw CliFailure{why + " (not compared; run `kvscope-cli verify` for the full report)"};
    }
    if (json) {
        printJson(d.toJson());
        return;
    }
    if (!d.sameModel)
        std::cout << "models       differ: a was made with " << d.modelA << ", b with " << d.modelB
                  << " (their token ids belong to different vocabularies)\n";
    std::cout << "tokens       a " << d.tokensA << ", b " << d.tokensB << "; common prefix "
              << d.commonPrefix;
    if (d.firstDivergence >= 0)
        std::cout << "; first divergence at " << d.firstDivergence << " (a " << d.tokenA << ", b "
                  << d.tokenB << ")";
    else
        std::cout << "; identical";
    std::cout << "\n";
    auto sequence = [](const char* name, const SequenceDiff& q) {
        std::cout << name << "a " << q.lengthA << ", b " << q.lengthB << "; " << q.differ << " of "
                  << q.compared << " differ";
        if (q.firstDifferingIndex >= 0)
            std::cout << ", first at index " << q.firstDifferingIndex;
        if (q.offset)
            std::cout << " (every one shifted by " << *q.offset << ")";
        std::cout << "\n";
    };
    sequence("positions    ", d.positions);
    std::cout << "next pos     a " << d.nextPositionA << ", b " << d.nextPositionB
              << (d.nextPositionA == d.nextPositionB ? "" : " (differ)") << "\n";
    sequence("mask         ", d.mask);
    sequence("head mask    ", d.headMask);
    if (!d.cacheMismatch.empty()) {
        std::cout << "cache        not compared: " << d.cacheMismatch << "\n";
    } else {
        std::cout << "cache        " << d.comparedPositions << " positions compared, max |d| "
                  << d.maxAbs;
        if (d.firstDivergingLayer >= 0)
            std::cout << "; above " << d.tolerance << " first in layer " << d.firstDivergingLayer
                      << ", from position " << d.firstDivergingPosition;
        std::cout << "\nlayer head  max|dK|      relL2 K      cos K      max|dV|      "
                     "relL2 V      cos V\n";
        auto row = [](const std::string& l, const std::string& h, const KvDelta& k,
                      const KvDelta& v) {
            std::cout << std::setw(5) << l << " " << std::setw(4) << h << "  " << std::setw(11)
                      << k.maxAbs << "  " << std::setw(11) << k.relL2 << "  " << std::setw(9)
                      << k.cosine << "  " << std::setw(11) << v.maxAbs << "  " << std::setw(11)
                      << v.relL2 << "  " << std::setw(9) << v.cosine << "\n";
        };
        for (const auto& l : d.layers) {
            row(std::to_string(l.layer), "all", l.key, l.value);
            if (heads)
                for (const auto& h : l.heads)
                    row("", std::to_string(h.head), h.key, h.value);
        }
    }
    std::cout << "logits       max |d| "
              << (d.logitsMaxAbs < 0 ? std::string("(sizes differ)")
                                     : std::to_string(d.logitsMaxAbs))
              << "\nfields       " << d.fields.size() << " differ (" << d.manifestDifferences()
              << " besides the lineage's id and time)\n";
    const std::string verdict = d.verdict();
    std::cout << "state        "
              << (verdict == "identical" ? "identical"
                  : verdict == "same"
                      ? "the same state (" + std::to_string(d.manifestDifferences()) +
                            " manifest fields differ; K/V and logits within " +
                            std::to_string(d.tolerance) + ")"
                      : std::string("differs"))
              << "\n";
    auto shortDump = [](const nlohmann::json& v) {
        std::string t = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        return t.size() > 100 ? t.substr(0, 97) + "..." : t;
    };
    for (const auto& f : d.fields)
        std::cout << "  " << f.field << ": " << shortDump(f.a) << " -> " << shortDump(f.b) << "\n";
}

} // namespace

void registerSurgeryCommands(CLI::App& app) {
    {
        auto* cmd = app.add_subcommand(
            "fork",
            "Branch a snapshot N ways, each with its own sampler seed (optionally continued)");
        auto a = std::make_shared<ForkArgs>();
        cmd->add_option("snapshot", a->snapshot, "Snapshot file (.kvsnap)")->required();
        cmd->add_option("-n,--branches", a->branches, "Number of branches")->capture_default_str();
        addModelOptions(cmd, a->model, false);
        cmd->add_option("--steps", a->steps,
                        "Continue each branch this many tokens (needs --model)")
            ->capture_default_str();
        cmd->add_option("--seed-base", a->seedBase,
                        "Branch i samples with seed SEED_BASE + i (default: source seed + 1)");
        cmd->add_option("--temperature", a->temperature, "Branch temperature (default: source's)");
        cmd->add_option("--top-p", a->topP, "Branch top-p (default: source's)");
        cmd->add_option("--top-k", a->topK, "Branch top-k (default: source's)");
        cmd->add_flag("--force", a->force,
                      "With --steps: restore even when verification finds errors");
        cmd->add_option("-o,--output", a->outDir, "Output folder (<name>-fork<i>.kvsnap)")
            ->required();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdFork(*a); });
    }
    {
        auto* cmd = app.add_subcommand("tree", "Print the lineage tree of a folder of snapshots");
        auto dir = std::make_shared<std::string>();
        auto json = std::make_shared<bool>(false);
        cmd->add_option("dir", *dir, "Folder holding .kvsnap files")->required();
        addJsonFlag(cmd, *json);
        cmd->callback([=] { cmdTree(*dir, *json); });
    }
    {
        auto* cmd = app.add_subcommand(
            "truncate", "Rewind a snapshot to its first N tokens (logits recomputed)");
        auto a = std::make_shared<TruncateArgs>();
        cmd->add_option("snapshot", a->snapshot, "Snapshot file (.kvsnap)")->required();
        cmd->add_option("--at", a->at, "Keep tokens 0..N-1 (1 <= N <= length)")->required();
        addModelOptions(cmd, a->model);
        cmd->add_option("-o,--output", a->out, "Output snapshot")->required();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdTruncate(*a); });
    }
    {
        auto* cmd = app.add_subcommand(
            "patch", "Replace one layer's K/V (or one KV head's) with another snapshot's");
        auto a = std::make_shared<PatchArgs>();
        cmd->add_option("snapshot", a->target, "Target snapshot (A)")->required();
        cmd->add_option("--from", a->source, "Source snapshot (B)")->required();
        cmd->add_option("--layer", a->layer, "Layer to patch")->required();
        cmd->add_option("--head", a->head, "KV head to patch (default: all)")
            ->check(CLI::NonNegativeNumber);
        cmd->add_option("--positions", a->positions, "Position range BEGIN:END (default: all)");
        addModelOptions(cmd, a->model, false);
        cmd->add_option("-o,--output", a->out, "Output snapshot")->required();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdPatch(*a); });
    }
    {
        auto* cmd = app.add_subcommand(
            "splice", "Insert another snapshot's cache fragment, re-rotating moved keys");
        auto a = std::make_shared<SpliceArgs>();
        cmd->add_option("snapshot", a->target, "Target snapshot (A)")->required();
        cmd->add_option("--from", a->source, "Source snapshot (B)")->required();
        cmd->add_option("--range", a->range, "Source token range BEGIN:END")->required();
        cmd->add_option("--at", a->at, "Insert before target token P (0..length)")->required();
        addModelOptions(cmd, a->model);
        cmd->add_option("-o,--output", a->out, "Output snapshot")->required();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdSplice(*a); });
    }
    {
        auto* cmd = app.add_subcommand("diff", "Compare two snapshots: tokens, K/V, manifest");
        auto pa = std::make_shared<std::string>(), pb = std::make_shared<std::string>();
        auto heads = std::make_shared<bool>(false);
        auto json = std::make_shared<bool>(false);
        cmd->add_option("a", *pa, "First snapshot")->required();
        cmd->add_option("b", *pb, "Second snapshot")->required();
        cmd->add_flag("--heads", *heads, "Print every KV head's delta (JSON always has them)");
        addJsonFlag(cmd, *json);
        cmd->callback([=] { cmdDiff(*pa, *pb, *heads, *json); });
    }
}

} // namespace kvscope::cli
