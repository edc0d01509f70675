// `attention`: the attention pattern of one (layer, query head) of a snapshot, computed from
// its cache (ws::attentionOf: the queries recomputed once from the tokens, the keys the
// snapshot's own). The GUI's attention view calls the same function.
#include "clicommon.h"

#include "state/ledger/snapshotio.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"
#include "util/topk.h"
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
    int64_t query = -1;      // a token index; meaningful only when queryGiven
    bool queryGiven = false; // --query left out: every row
    int top = 5;
    bool force = false;
    bool json = false;
};

std::string pieceText(const tok::Tokenizer* tok, const std::vector<int32_t>& ids, int64_t i) {
    if (!tok)
        return std::to_string(ids[size_t(i)]);
    return tok->decodeNext(i > 0 ? ids[size_t(i - 1)] : -1, ids[size_t(i)]);
}

// "0..N-1", or what an empty range means, for the usage errors below.
std::string indexRange(int64_t n, const std::string& of) {
    return n > 0 ? "0.." + std::to_string(n - 1) + " (" + of + ")" : "nothing: there are no " + of;
}

void cmdAttention(const AttentionArgs& a) {
    // Known before anything is loaded. The indices' ranges need the model and the snapshot;
    // each is checked as soon as its range is known, negative values included.
    if (a.top < 1)
        throw CliFailure{"--top " + std::to_string(a.top) +
                             " lists no key: give 1 or more keys per query",
                         kExitUsage};
    auto model = loadModelOrFail(a.model, false);
    auto s = state::load(a.snapshot);
    if (!s)
        throw CliFailure{s.message() + " (run `kvscope-cli verify` for the full report)"};
    const auto& c = model->config();
    if (a.layer < 0 || a.layer >= c.nLayers)
        throw CliFailure{"--layer " + std::to_string(a.layer) + " is outside " +
                             indexRange(c.nLayers, "layers of " + a.model.model),
                         kExitUsage};
    if (a.head < 0 || a.head >= c.nHeads)
        throw CliFailure{"--head " + std::to_string(a.head) + " is outside " +
                             indexRange(c.nHeads, "query heads of " + a.model.model),
                         kExitUsage};
    auto restored = state::restore(s.value(), model, {.force = a.force});
    if (!restored)
        throw CliFailure{a.snapshot + ": " + restored.message()};
    const Session& session = restored.value().session;
    // A negative row is refused like one past the end: only leaving --query out means every
    // row (a typed -1 used to mean it too, and -2 showed every row as well).
    const auto tokens = static_cast<int64_t>(session.tokens().size());
    if (a.queryGiven && (a.query < 0 || a.query >= tokens))
        throw CliFailure{"--query " + std::to_string(a.query) + " is outside " +
                             indexRange(tokens, "the snapshot's tokens") +
                             "; leave --query out for every row",
                         kExitUsage};
    QueryRecorder queries;
    auto r = ws::attentionOf(session, queries, a.layer, a.head);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    const auto& p = r.value(); // p.queries == tokens: one query row per token
    const int64_t first = a.queryGiven ? a.query : 0;
    const int64_t last = a.queryGiven ? a.query + 1 : p.queries;
    if (last > p.queries) // never, by attentionOf's contract; a row past the end is not read
        throw CliFailure{a.snapshot + ": " + std::to_string(p.queries) + " query rows for " +
                         std::to_string(tokens) + " tokens"};
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
    for (int64_t q = first; q < last; ++q) {
        const float* row = p.probs.data() + q * p.keys;
        const std::vector<int64_t> order =
            topKIndices(std::span<const float>(row, size_t(p.keys)), size_t(std::max(0, a.top)));
        const size_t k = order.size();
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
    auto* query = cmd->add_option("--query", a->query,
                                  "Only this query row (token index 0..tokens-1); default: every "
                                  "row");
    cmd->add_option("--top", a->top, "Keys listed per query in the text output (1 or more)")
        ->capture_default_str();
    cmd->add_flag("--force", a->force,
                  "Restore despite semantic errors (structural ones always refuse)");
    addJsonFlag(cmd, a->json);
    cmd->callback([a, query] {
        a->queryGiven = query->count() > 0;
        cmdAttention(*a);
    });
}

} // namespace kvscope::cli
