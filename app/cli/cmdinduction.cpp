// `induction`: does the model reuse its context, and which heads do it (state/probes/induction.h).
#include "clicommon.h"

#include "state/probes/induction.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace kvscope::cli {

namespace {

struct InductionArgs {
    ModelOptions model;
    state::InductionOptions o;
    int top = 8;
    bool json = false;
};

void cmdInduction(const InductionArgs& a) {
    auto model = loadModelOrFail(a.model, true);
    auto r = state::probeInduction(model, *model->tokenizer(), a.o);
    if (!r)
        throw CliFailure{r.message(), r.message().find("--length") != std::string::npos
                                          ? kExitUsage
                                          : kExitFailure};
    const auto& rep = r.value();
    if (a.json) {
        printJson(state::toJson(rep));
        return;
    }
    char line[256];
    if (rep.segmentLength > 0) {
        std::snprintf(line, sizeof line,
                      "random segment of %lld tokens fed twice (BOS + R + R, seed %llu)\n"
                      "  first copy:  loss %.3f nats, top-1 %5.1f%%\n"
                      "  second copy: loss %.3f nats, top-1 %5.1f%%\n",
                      static_cast<long long>(rep.segmentLength),
                      static_cast<unsigned long long>(a.o.seed), rep.firstCopyLoss,
                      100 * rep.firstCopyTop1, rep.secondCopyLoss, 100 * rep.secondCopyTop1);
        std::cout << line;
    } else {
        std::snprintf(line, sizeof line,
                      "%zu tokens; %zu occurred earlier in the text: mean rank %.1f, ranked "
                      "first %.0f%% (tokens seen for the first time: mean rank %.1f)\n",
                      rep.tokens.size(), rep.recalled.size(), rep.recalledMeanRank,
                      100 * rep.recalledTop1, rep.otherMeanRank);
        std::cout << line;
        for (const auto& t : rep.recalled) {
            std::snprintf(line, sizeof line,
                          "  pos %4lld  %-16s (first at %lld)  rank %5lld  p %.3f\n",
                          static_cast<long long>(t.position), ("'" + t.text + "'").c_str(),
                          static_cast<long long>(t.earlierPosition), static_cast<long long>(t.rank),
                          t.probability);
            std::cout << line;
        }
    }
    auto heads = rep.heads;
    std::stable_sort(heads.begin(), heads.end(),
                     [](const auto& x, const auto& y) { return x.induction > y.induction; });
    const auto shown = std::min<size_t>(heads.size(), static_cast<size_t>(std::max(0, a.top)));
    std::cout << "heads by induction score (attention to the token after the earlier "
                 "occurrence):\n  layer  head  induction  previous-token\n";
    for (size_t i = 0; i < shown; ++i) {
        std::snprintf(line, sizeof line, "  %5d  %4d  %9.3f  %14.3f\n", heads[i].layer,
                      heads[i].head, heads[i].induction, heads[i].previousToken);
        std::cout << line;
    }
}

} // namespace

void registerInductionCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "induction", "Measure how the model reuses its context: copy loss on a repeated random "
                     "segment (or recall on --text) and every head's induction score");
    auto a = std::make_shared<InductionArgs>();
    addModelOptions(cmd, a->model, false);
    cmd->add_option("--length", a->o.length, "Random segment length")->capture_default_str();
    cmd->add_option("--seed", a->o.seed, "Seed of the random segment")->capture_default_str();
    cmd->add_option("--text", a->o.text,
                    "Probe this text instead: rank of every token that occurred earlier");
    cmd->add_option("--top", a->top, "Heads to list")->capture_default_str();
    addJsonFlag(cmd, a->json);
    cmd->callback([a] { cmdInduction(*a); });
}

} // namespace kvscope::cli
