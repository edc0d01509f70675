// `attention`: the attention pattern of one (layer, query head) of a snapshot, computed from
// its cache (ws::attentionOf: the queries recomputed once from the tokens, the keys the
// snapshot's own). The GUI's attention view calls the same function.
#include "clicommon.h"

#include "state/ledger/snapshotio.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"
#include "workspace/workspace.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace kvscope::cli {

namespace {

struct AttentionArgs {
    std::string snapshot;
    ModelOptions model;
    int layer = 0;
    int head = 0;
    int64_t query = -1; // -1: every row
    int top = 5;
    bool force = false;
    bool json = false;
};

std::string pieceText(const tok::Tokenizer* tok, const std::vector<int32_t>& ids, int64_t i) {
    if (!tok)
        return std::to_string(ids[size_t(i)]);
    return tok->decodeNext(i > 0 ? ids[size_t(i - 1)] : -1, ids[size_t(i)]);
}

void cmdAttention(const AttentionArgs& a) {
    auto model = loadModelOrFail(a.model, false);
    auto s = state::load(a.snapshot);
    if (!s)
        throw CliFailure{s.message() + " (run `kvscope-cli verify` for the full report)"};
    const auto& c = model->config();
    if (a.layer < 0 || a.layer >= c.nLayers)
        throw CliFailure{"--layer " + std::to_string(a.layer) + " is outside 0.." +
                             std::to_string(c.nLayers - 1) + " for " + a.model.model,
                         kExitUsage};
    if (a.head < 0 || a.head >= c.nHeads)
        throw CliFailure{"--head " + std::to_string(a.head) + " is outside 0.." +
                             std::to_string(c.nHeads - 1) + " (query heads of " + a.model.model +
                             ")",
                         kExitUsage};
    auto restored = state::restore(s.value(), model, {.force = a.force});
    if (!restored)
        throw CliFailure{a.snapshot + ": " + restored.message()};
    const Session& session = restored.value().session;
    QueryRecorder queries;
    auto r = ws::attentionOf(session, queries, a.layer, a.head);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    const auto& p = r.value();
    if (a.query >= p.queries)
        throw CliFailure{"--query " + std::to_string(a.query) + " is outside 0.." +
                             std::to_string(p.queries - 1) + " (the snapshot's tokens)",
                         kExitUsage};
    const int64_t first = a.query >= 0 ? a.query : 0;
    const int64_t last = a.query >= 0 ? a.query + 1 : p.queries;
    const auto tok = model->tokenizer();
    const auto& ids = session.tokens();
    const auto& positions = session.cache().positions();
    if (a.json) {
        nlohmann::json rows = nlohmann::json::array();
        for (int64_t q = first; q < last; ++q) {
            const float* row = p.probs.data() + q * p.keys;
            rows.push_back({{"query", q}, {"probs", std::vector<float>(row, row + p.keys)}});
        }
        printJson({{"layer", p.layer},
                   {"head", p.head},
                   {"kv_head", p.kvHead},
                   {"queries", p.queries},
                   {"keys", p.keys},
                   {"positions", positions},
                   {"rows", rows},
                   {"warnings", restored.value().report.toJson()["violations"]}});
        return;
    }
    std::printf("layer %d, query head %d (KV head %d): %lld queries x %lld keys\n", p.layer, p.head,
                p.kvHead, static_cast<long long>(p.queries), static_cast<long long>(p.keys));
    std::vector<int64_t> order(size_t(p.keys));
    for (int64_t q = first; q < last; ++q) {
        const float* row = p.probs.data() + q * p.keys;
        std::iota(order.begin(), order.end(), 0);
        const size_t k = std::min<size_t>(size_t(std::max(1, a.top)), order.size());
        std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                          [row](int64_t x, int64_t y) { return row[x] > row[y]; });
        std::printf("query %lld %s:", static_cast<long long>(q),
                    nlohmann::json(pieceText(tok.get(), ids, q)).dump().c_str());
        for (size_t i = 0; i < k; ++i)
            std::printf("  %lld %s %.3f", static_cast<long long>(order[i]),
                        nlohmann::json(pieceText(tok.get(), ids, order[i])).dump().c_str(),
                        double(row[order[i]]));
        std::printf("\n");
    }
}

} // namespace

void registerAttentionCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "attention", "Attention probabilities of one layer and query head of a snapshot, "
                     "computed from its cache");
    auto a = std::make_shared<AttentionArgs>();
    cmd->add_option("snapshot", a->snapshot, ".kvsnap file")->required();
    addModelOptions(cmd, a->model);
    cmd->add_option("--layer", a->layer, "Layer")->required();
    cmd->add_option("--head", a->head, "Query head (its KV head is head / (heads / kv_heads))")
        ->required();
    cmd->add_option("--query", a->query, "Only this query row (token index); default: every row");
    cmd->add_option("--top", a->top, "Keys listed per query in the text output")
        ->capture_default_str();
    cmd->add_flag("--force", a->force,
                  "Restore despite semantic errors (structural ones always refuse)");
    addJsonFlag(cmd, a->json);
    cmd->callback([a] { cmdAttention(*a); });
}

} // namespace kvscope::cli
