// `attribute`: how much the next token depends on each cached slot of a snapshot
// (state::attribute, core: state/probes/attribution.h): leave-one-slot-out ablation beside the
// attention x |W_O v| estimate, and their rank correlation. This file only formats.
#include "clicommon.h"

#include "state/probes/attribution.h"

#include <cmath>
#include <cstdio>

namespace kvscope::cli {

namespace {

struct AttributeArgs {
    std::string snapshot;
    ModelOptions model;
    int top = 10; // slots listed, largest ablation effect first
    bool force = false;
    bool json = false;
};

// The token text as JSON would quote it (newlines and quotes visible in a table).
std::string quoted(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The default mode: slot attribution.
void cmdAttributeSlots(const AttributeArgs& a) {
    if (a.top < 1) // known before anything is loaded
        throw CliFailure{"--top " + std::to_string(a.top) + " lists no slot: give 1 or more slots",
                         kExitUsage};
    auto model = loadModelOrFail(a.model, false);
    const state::Snapshot s = loadSnapshotOrFail(a.snapshot);
    auto r = state::attribute(s, model, {.top = a.top}, a.force);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    const state::AttributionResult& res = r.value();
    if (a.json) {
        printJson(state::toJson(res));
        return;
    }
    std::printf("next token %d %s (log p %.4f), recomputed over %zu cached slots; %lld ablated\n",
                res.topToken, quoted(res.topText).c_str(), res.topLogp, res.bySlot.size(),
                static_cast<long long>(res.ablated));
    if (std::isfinite(res.rankCorrelation))
        std::printf("rank correlation, ablation KL vs estimate (Spearman): %.3f\n",
                    res.rankCorrelation);
    else
        std::printf("rank correlation: none (fewer than two ablated slots, or a constant "
                    "column)\n");
    std::printf("%6s %8s %7s  %-16s %12s %12s %12s\n", "slot", "position", "token", "text",
                "ablation KL", "dlogp(top)", "estimate");
    for (int64_t slot : res.ranked) {
        const auto& x = res.bySlot[size_t(slot)];
        std::printf("%6lld %8lld %7d  %-16s %12.4e %12.4e %12.4e\n", static_cast<long long>(x.slot),
                    static_cast<long long>(x.position), x.token, quoted(x.text).c_str(),
                    x.ablationKl, x.deltaLogp, x.estimate);
    }
}

} // namespace

void registerAttributeCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "attribute", "How much the next token depends on each cached slot of a snapshot: "
                     "leave-one-slot-out ablation (KL, change in log p of the top token) beside "
                     "the attention x |value . W_O| estimate, and their rank correlation");
    auto a = std::make_shared<AttributeArgs>();
    cmd->add_option("snapshot", a->snapshot, ".kvsnap file")->required();
    addModelOptions(cmd, a->model);
    cmd->add_option("--top", a->top,
                    "Slots listed by ablation effect (text output; --json lists every slot and "
                    "ranks the top ones), 1 or more")
        ->capture_default_str();
    cmd->add_flag("--force", a->force,
                  "Restore despite semantic errors (structural ones always refuse)");
    addJsonFlag(cmd, a->json);
    // Other modes of this command (direct head attribution, --heads) add their flag above and
    // their own function beside cmdAttributeSlots, chosen here.
    cmd->callback([a] { cmdAttributeSlots(*a); });
}

} // namespace kvscope::cli
