// `attribute`: how much the next token depends on each cached slot of a snapshot
// (state::attribute, core: state/probes/attribution.h): leave-one-slot-out ablation beside the
// attention x |W_O v| estimate, and their rank correlation. This file only formats.
#include "clicommon.h"
#include "cmdlens.h"

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
    bool heads = false; // --heads: direct logit attribution (cmdlens.cpp) instead of slots
    int32_t token = -1; // --heads: the token whose logit is split; -1: the top-1
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
    std::printf("next token %d %s (log p %.3g), recomputed over %zu cached slots; %lld ablated\n",
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
    // The modes: slot attribution (cmdAttributeSlots, the default) and --heads, the direct logit
    // attribution over heads and MLPs (runHeadAttribution, cmdlens.cpp), chosen here.
    cmd->add_flag("--heads", a->heads,
                  "Direct logit attribution instead: the next token's logit over the restored "
                  "cache split into the embedding, every attention head, the attention biases, "
                  "every MLP and the final norm's bias, the final norm's scale frozen (--top "
                  "parts listed; see `lens`)");
    auto* token = cmd->add_option("--token", a->token,
                                  "With --heads: the token whose logit is split (default: the "
                                  "top-1 of the restored last step)");
    cmd->callback([a, token] {
        if (token->count() > 0 && !a->heads)
            throw CliFailure{"--token names the token --heads splits: give --heads with it",
                             kExitUsage};
        if (token->count() > 0 && a->token < 0)
            throw CliFailure{"--token " + std::to_string(a->token) +
                                 " is not a token id: give 0 or more, or leave it out for the "
                                 "top-1",
                             kExitUsage};
        if (a->heads)
            runHeadAttribution({.snapshot = a->snapshot,
                                .model = a->model,
                                .token = a->token,
                                .top = a->top,
                                .force = a->force,
                                .json = a->json});
        else
            cmdAttributeSlots(*a);
    });
}

} // namespace kvscope::cli
