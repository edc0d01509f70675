// `lens`: the logit lens of a snapshot (state::logitLens: every layer's residual read through
// the model's head, over a fresh run of its tokens and over its restored cache's last step),
// and the direct logit attribution of its next token over heads and MLPs
// (state::attributeHeads), which `attribute --heads` prints. This file only formats.
#include "cmdlens.h"

#include "state/probes/lens.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvscope::cli {

namespace {

struct LensArgs {
    std::string snapshot;
    ModelOptions model;
    int top = 5;
    int64_t from = 0;
    int64_t to = -1; // meaningful only when toGiven
    bool toGiven = false;
    bool force = false;
    bool json = false;
};

// A token's text as JSON quotes it (spaces, newlines and quotes visible in a table).
std::string quoted(const tok::Tokenizer* tokenizer, int32_t id) {
    std::string text = std::to_string(id);
    if (tokenizer) {
        const int32_t one[1] = {id};
        text = tokenizer->decode(one);
    }
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The restored session, or CliFailure naming the file (restore's message says --force).
state::Restored restoreOrFail(const std::string& path, const std::shared_ptr<const Model>& model,
                              bool force) {
    const state::Snapshot s = loadSnapshotOrFail(path);
    auto r = state::restore(s, model, {.force = force});
    if (!r)
        throw CliFailure{path + ": " + r.message()};
    return std::move(r).value();
}

void cmdLens(const LensArgs& a) {
    // Known before anything is loaded; the range needs the snapshot's tokens.
    if (a.top < 1)
        throw CliFailure{"--top " + std::to_string(a.top) +
                             " lists no token: give 1 or more tokens per cell",
                         kExitUsage};
    auto model = loadModelOrFail(a.model, false);
    const state::Restored restored = restoreOrFail(a.snapshot, model, a.force);
    const auto tokens = static_cast<int64_t>(restored.session.tokens().size());
    const int64_t to = a.toGiven ? a.to : tokens;
    if (a.from < 0 || a.from >= tokens)
        throw CliFailure{"--from " + std::to_string(a.from) + " is outside the snapshot's " +
                             std::to_string(tokens) + " token positions 0.." +
                             std::to_string(tokens - 1),
                         kExitUsage};
    if (to <= a.from || to > tokens)
        throw CliFailure{"--to " + std::to_string(to) + " must lie in " +
                             std::to_string(a.from + 1) + ".." + std::to_string(tokens) +
                             " (after --from, at most the token count)",
                         kExitUsage};
    auto r = state::logitLens(restored.session, {.top = a.top, .from = a.from, .to = to});
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    const state::LensResult& lens = r.value();
    const auto tok = model->tokenizer();
    if (a.json) {
        nlohmann::json j = state::toJson(lens, tok.get());
        j["warnings"] = restored.report.toJson()["violations"];
        printJson(j);
        return;
    }
    std::printf("logit lens: %d layers x positions %lld..%lld of %lld tokens (a fresh run of "
                "the tokens); top-1 and its probability per layer\n",
                lens.layers, static_cast<long long>(lens.from), static_cast<long long>(lens.to - 1),
                static_cast<long long>(lens.tokens));
    std::printf("%8s  %-14s", "position", "token");
    for (int l = 0; l < lens.layers; ++l)
        std::printf("  %-20s", ("layer " + std::to_string(l)).c_str());
    std::printf("\n");
    const auto& ids = restored.session.tokens();
    const int64_t n = lens.to - lens.from;
    for (int64_t t = 0; t < n; ++t) {
        const int64_t position = lens.from + t;
        std::printf("%8lld  %-14s", static_cast<long long>(position),
                    quoted(tok.get(), ids[size_t(position)]).c_str());
        for (int l = 0; l < lens.layers; ++l) {
            const auto& cell = lens.cells[size_t(l * n + t)];
            char text[64];
            std::snprintf(text, sizeof text, "%s %.2f",
                          quoted(tok.get(), cell.top[0].id).substr(0, 14).c_str(), cell.top[0].p);
            std::printf("  %-20s", text);
        }
        std::printf("\n");
    }
    std::printf("\nthe restored cache's last step (token %lld, recorded position %lld):\n",
                static_cast<long long>(lens.tokens - 1),
                static_cast<long long>(lens.restoredPosition));
    std::printf("%6s %12s %14s  %s\n", "layer", "entropy", "KL to fresh", "top tokens (p)");
    for (const auto& cell : lens.restored) {
        std::printf("%6d %12.4f %14.4e ", cell.layer, cell.entropy,
                    lens.klToFresh[size_t(cell.layer)]);
        for (const auto& t : cell.top)
            std::printf(" %s %.4f", quoted(tok.get(), t.id).c_str(), t.p);
        std::printf("\n");
    }
    if (lens.firstChangedLayer < 0)
        std::printf("the restored cache changes no layer's prediction at the last position "
                    "(KL to the fresh run <= %.0e at every layer; final KL %.2e)\n",
                    lens.tolerance, lens.klFinalToFresh);
    else
        std::printf("the restored cache changes the last position's prediction from layer %d on "
                    "(KL to the fresh run %.3e > %.0e there; final KL %.3e)\n",
                    lens.firstChangedLayer, lens.klToFresh[size_t(lens.firstChangedLayer)],
                    lens.tolerance, lens.klFinalToFresh);
}

} // namespace

void runHeadAttribution(const HeadAttributionArgs& a) {
    if (a.top < 1)
        throw CliFailure{"--top " + std::to_string(a.top) + " lists no part: give 1 or more parts",
                         kExitUsage};
    auto model = loadModelOrFail(a.model, false);
    const auto V = model->config().vocabSize;
    if (a.token >= V)
        throw CliFailure{"--token " + std::to_string(a.token) + " is outside the vocabulary 0.." +
                             std::to_string(V - 1) + " of " + a.model.model,
                         kExitUsage};
    const state::Restored restored = restoreOrFail(a.snapshot, model, a.force);
    auto r = state::attributeHeads(restored.session, a.token);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    const state::HeadAttribution& h = r.value();
    const auto tok = model->tokenizer();
    if (a.json) {
        nlohmann::json j = state::toJson(h, tok.get());
        j["warnings"] = restored.report.toJson()["violations"];
        printJson(j);
        return;
    }
    const LogitAttribution& p = h.parts;
    std::printf("token %d %s after position %lld: logit %.4f", p.token,
                quoted(tok.get(), p.token).c_str(), static_cast<long long>(h.position),
                h.modelLogit);
    if (p.preCapLogit != p.logit)
        std::printf(" (%.4f before the soft-cap)", p.preCapLogit);
    std::printf("\nparts with the final norm's scale frozen (%.4g) sum to %.4f (error %.1e)\n",
                p.normScale, p.sum(), h.error);
    struct Part {
        std::string name;
        double value;
    };
    std::vector<Part> parts{{"embedding", p.embedding}};
    if (p.normBias != 0)
        parts.push_back({"final norm bias", p.normBias});
    for (size_t l = 0; l < p.heads.size(); ++l) {
        const std::string L = "L" + std::to_string(l);
        for (size_t head = 0; head < p.heads[l].size(); ++head)
            parts.push_back({L + " head " + std::to_string(head), p.heads[l][head]});
        if (p.attnBias[l] != 0)
            parts.push_back({L + " attention bias", p.attnBias[l]});
        parts.push_back({L + " MLP", p.mlp[l]});
    }
    std::stable_sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) {
        return std::abs(x.value) > std::abs(y.value);
    });
    const size_t k = std::min(parts.size(), static_cast<size_t>(a.top));
    std::printf("largest %zu of %zu parts:\n", k, parts.size());
    for (size_t i = 0; i < k; ++i)
        std::printf("  %-20s %+10.4f\n", parts[i].name.c_str(), parts[i].value);
}

void registerLensCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "lens", "Logit lens of a snapshot: every layer's next-token distribution at every "
                "position (a fresh run of its tokens) and at the last position over its "
                "restored cache");
    auto a = std::make_shared<LensArgs>();
    cmd->add_option("snapshot", a->snapshot, ".kvsnap file")->required();
    addModelOptions(cmd, a->model);
    cmd->add_option("--top", a->top,
                    "Tokens per cell in the JSON and the restored column (1 or "
                    "more)")
        ->capture_default_str();
    cmd->add_option("--from", a->from, "First position of the grid")->capture_default_str();
    auto* to = cmd->add_option("--to", a->to, "End of the grid (exclusive); default: every token");
    cmd->add_flag("--force", a->force,
                  "Restore despite semantic errors (structural ones always refuse)");
    addJsonFlag(cmd, a->json);
    cmd->callback([a, to] {
        a->toGiven = to->count() > 0;
        cmdLens(*a);
    });
}

} // namespace kvscope::cli
