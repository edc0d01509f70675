// `branches`: two states that share a prefix, aligned at the branch point, with the KL between
// their next-token distributions at every step after it (state::compareBranches; the GUI's
// Branches panel calls the same function).
#include "clicommon.h"

#include "state/probes/branches.h"
#include "tokenizer/tokenizer.h"

#include <cstdio>

namespace kvscope::cli {

namespace {

struct BranchesArgs {
    std::string a, b;
    ModelOptions model;
    bool json = false;
};

std::string text(const tok::Tokenizer* tok, int32_t id) {
    if (id < 0)
        return "";
    if (!tok)
        return std::to_string(id);
    const int32_t one[1] = {id};
    return nlohmann::json(tok->decode(one)).dump();
}

std::string kl(const std::optional<double>& x) {
    if (!x)
        return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", *x);
    return buf;
}

void cmdBranches(const BranchesArgs& a) {
    auto model = loadModelOrFail(a.model, false);
    const state::Snapshot sa = loadSnapshotOrFail(a.a);
    const state::Snapshot sb = loadSnapshotOrFail(a.b);
    auto r = state::compareBranches(sa, sb, model);
    if (!r)
        throw CliFailure{a.a + ", " + a.b + ": " + r.message()};
    const auto& c = r.value();
    const auto tok = model->tokenizer();
    if (a.json) {
        printJson(state::toJson(c, tok.get()));
        return;
    }
    std::printf("A %lld tokens, B %lld tokens; %lld shared (the branch point)\n",
                static_cast<long long>(c.tokensA), static_cast<long long>(c.tokensB),
                static_cast<long long>(c.prefix));
    std::printf("%-6s %-20s %-20s %-10s %s\n", "after", "A next", "B next", "KL own",
                "KL forced (B's prefix on A's tokens)");
    for (const auto& s : c.steps)
        std::printf("%-6lld %-20s %-20s %-10s %s\n", static_cast<long long>(s.after),
                    text(tok.get(), s.tokenA).c_str(), text(tok.get(), s.tokenB).c_str(),
                    kl(s.klOwn).c_str(), kl(s.klForced).c_str());
    std::printf("max KL own %.4g, forced %.4g", c.maxKlOwn, c.maxKlForced);
    if (c.firstStepForcedAbove >= 0)
        std::printf("; B's cache changes the next token's distribution from the row after "
                    "token %lld on (KL > %.3g)\n",
                    static_cast<long long>(c.steps[size_t(c.firstStepForcedAbove)].after),
                    c.threshold);
    else
        std::printf("; B's cache changes no step beyond KL %.3g\n", c.threshold);
}

} // namespace

void registerBranchesCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "branches", "Two states that share a prefix side by side: their tokens aligned at the "
                    "branch point and the KL between their next-token distributions at each step "
                    "(each on its own tokens, and B's cached prefix on A's tokens)");
    auto a = std::make_shared<BranchesArgs>();
    cmd->add_option("a", a->a, "A .kvsnap")->required();
    cmd->add_option("b", a->b, "B .kvsnap")->required();
    addModelOptions(cmd, a->model);
    addJsonFlag(cmd, a->json);
    cmd->callback([a] { cmdBranches(*a); });
}

} // namespace kvscope::cli
