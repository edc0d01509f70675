// `localize`: which K/V differences between two states of the same tokens change the next
// step (state::localize; the GUI's Diff panel "What matters?" calls the same function).
#include "clicommon.h"

#include "state/ledger/snapshotio.h"
#include "state/probes/localize.h"

#include <cstdio>

namespace kvscope::cli {

namespace {

struct LocalizeArgs {
    std::string a, b;
    ModelOptions model;
    std::string profile = "same-device";
    int mapBlocks = 16;
    int maxEvaluations = 512;
    bool json = false;
};

std::string headText(int head) {
    return head < 0 ? "all heads" : "kv head " + std::to_string(head);
}

void cmdLocalize(const LocalizeArgs& a) {
    const auto profile = profileOrFail(a.profile);
    if (a.mapBlocks < 0)
        throw CliFailure{"--map-blocks " + std::to_string(a.mapBlocks) +
                             " is negative: give 0 (no map) or more blocks",
                         kExitUsage};
    if (a.maxEvaluations < 1)
        throw CliFailure{"--max-evaluations " + std::to_string(a.maxEvaluations) +
                             ": the search needs at least 1 forward step",
                         kExitUsage};
    auto model = loadModelOrFail(a.model, false);
    const state::Snapshot sa = loadSnapshotOrFail(a.a);
    std::optional<state::Snapshot> sb;
    if (!a.b.empty())
        sb = loadSnapshotOrFail(a.b);
    auto r = state::localize(
        sa, sb ? &*sb : nullptr, model,
        {.profile = profile, .mapBlocks = a.mapBlocks, .maxEvaluations = a.maxEvaluations});
    if (!r) {
        const std::string files = a.a + (a.b.empty() ? "" : ", " + a.b);
        throw CliFailure{files + ": " + r.message()};
    }
    const auto& res = r.value();
    if (a.json) {
        printJson(state::toJson(res));
        return;
    }
    std::printf("%s\n", res.summary.c_str());
    std::printf("reference: %s; next token %d fed to both; KL(B || A) %.4g, tolerance %.3g (%s)\n",
                res.reference == "replay" ? "A's tokens replayed" : "B", res.probeToken,
                res.klBefore, res.tolerance, state::profileName(res.profile).c_str());
    std::printf("every layer patched from B: KL %.4g\n", res.klAllLayers);
    if (!res.otherDifferences.empty()) {
        std::printf("A and B also differ in:");
        for (const auto& d : res.otherDifferences)
            std::printf(" %s", d.c_str());
        std::printf("\n");
    }
    std::printf("\npatch (layer, heads, slots)          KL after   KL removed\n");
    for (const auto& p : res.patches)
        std::printf("%-6s layer %-3d %-12s [%lld, %lld)  %-10.4g %.4g\n",
                    p.stage == "minimal" ? "*" : "", p.layer, headText(p.head).c_str(),
                    static_cast<long long>(p.first), static_cast<long long>(p.end), p.klAfter,
                    p.klRemoved);
    if (!res.minimal.empty())
        std::printf("* the minimal set: KL %.4g with all of them applied\n", res.klAfter);
    std::printf("%d forward steps\n", res.evaluations);
}

} // namespace

void registerLocalizeCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "localize", "Which K/V differences between two states of the same tokens change the "
                    "next step: per-layer patches from B into A, then the smallest set of "
                    "(layer, head, slot range) patches that brings KL under the tolerance");
    auto a = std::make_shared<LocalizeArgs>();
    cmd->add_option("a", a->a, "The suspect .kvsnap (restored forcibly)")->required();
    cmd->add_option("b", a->b,
                    "The reference .kvsnap with the same tokens (default: A's tokens replayed)");
    addModelOptions(cmd, a->model);
    cmd->add_option("--profile", a->profile,
                    "Tolerance profile of the KL bound: exact, same-device, cross-device")
        ->capture_default_str();
    cmd->add_option("--map-blocks", a->mapBlocks,
                    "Slot blocks of the layer x slot map (each block patched alone); 0: no map")
        ->capture_default_str();
    cmd->add_option("--max-evaluations", a->maxEvaluations,
                    "A cap on the search's forward steps (the per-layer passes included, the map "
                    "not): past it the slot ranges stay whole")
        ->capture_default_str();
    addJsonFlag(cmd, a->json);
    cmd->callback([a] { cmdLocalize(*a); });
}

} // namespace kvscope::cli
