// compareBranches (branches.h).
#include "state/probes/branches.h"

#include "state/surgery/faults.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>

namespace kvscope::state {

namespace {

// The distributions after tokens [from, tokens.size()) of `feed`, computed over the first
// `from` slots of `s`'s cache: rows [tokens.size() - from, vocab].
HostTensor rowsAfter(const Session& s, int64_t from, const std::vector<int32_t>& feed,
                     const char* side) {
    const KvCache& cache = s.cache();
    const int64_t next = from == 0 ? 0 : cache.positions()[static_cast<std::size_t>(from - 1)] + 1;
    Session prefix(s.model(), cache.truncated(from),
                   std::vector<int32_t>(s.tokens().begin(), s.tokens().begin() + from), next, {});
    HostTensor rows;
    const std::span<const int32_t> rest(feed.data() + from,
                                        feed.size() - static_cast<std::size_t>(from));
    if (Status st = prefix.feed(rest, &rows); !st)
        throw KvError(std::string("branches: running ") + side + ": " + st.message());
    return rows;
}

double klRows(const HostTensor& a, int64_t i, const HostTensor& b, int64_t j) {
    const int64_t vocab = a.dim(1);
    const std::span<const float> ra(a.data.data() + i * vocab, static_cast<std::size_t>(vocab));
    const std::span<const float> rb(b.data.data() + j * vocab, static_cast<std::size_t>(vocab));
    return compareLogits(ra, rb).kl;
}

// A distribution holding NaN or Inf has no KL to anything: every step would read "inf" and
// blame B's cache whichever side holds the damage, so the side is named instead.
void requireFinite(const HostTensor& rows, const char* side) {
    const auto bad =
        std::find_if(rows.data.begin(), rows.data.end(), [](float x) { return !std::isfinite(x); });
    if (bad != rows.data.end())
        throw KvError(std::string("branches: ") + side +
                      "'s next-token logits are not finite (NaN or Inf): its cache holds "
                      "non-finite or overflowing values (cache.nonfinite in verify)");
}

void requireEveryToken(const Session& s, const char* side) {
    if (s.tokens().empty())
        throw KvError(std::string("branches: ") + side + " holds no tokens");
    if (s.cache().length() != static_cast<int64_t>(s.tokens().size()))
        throw KvError(std::string("branches: ") + side + "'s cache holds " +
                      std::to_string(s.cache().length()) + " slots for " +
                      std::to_string(s.tokens().size()) +
                      " tokens (an eviction or a cut): a branch needs one slot per token");
}

} // namespace

Result<BranchComparison> compareBranches(const Session& a, const Session& b) {
    return catchToResult([&]() -> BranchComparison {
        if (!a.model())
            throw KvError("branches: no model");
        requireEveryToken(a, "A");
        requireEveryToken(b, "B");
        const KvCache &ca = a.cache(), &cb = b.cache();
        if (ca.layers() != cb.layers() || ca.kvHeads() != cb.kvHeads() ||
            ca.headDim() != cb.headDim())
            throw KvError("branches: A's cache has " + std::to_string(ca.layers()) + " layers x " +
                          std::to_string(ca.kvHeads()) + " kv heads x head_dim " +
                          std::to_string(ca.headDim()) + ", B's " + std::to_string(cb.layers()) +
                          " x " + std::to_string(cb.kvHeads()) + " x " +
                          std::to_string(cb.headDim()) + ": not states of one model");
        const auto& ta = a.tokens();
        const auto& tb = b.tokens();
        BranchComparison c;
        c.tokensA = static_cast<int64_t>(ta.size());
        c.tokensB = static_cast<int64_t>(tb.size());
        while (c.prefix < std::min(c.tokensA, c.tokensB) &&
               ta[static_cast<std::size_t>(c.prefix)] == tb[static_cast<std::size_t>(c.prefix)])
            ++c.prefix;
        // Rows start after token p-1 (the last shared one), computed over the first p-1 slots.
        const int64_t from = std::max<int64_t>(c.prefix - 1, 0);
        const HostTensor ownA = rowsAfter(a, from, ta, "A on its tokens");
        const HostTensor ownB = rowsAfter(b, from, tb, "B on its tokens");
        requireFinite(ownA, "A");
        requireFinite(ownB, "B");
        // B's cached prefix fed A's tokens: B's first `from` slots, then A's tokens from there.
        const HostTensor forced = rowsAfter(b, from, ta, "B on A's tokens");
        const int64_t end = std::max(c.tokensA, c.tokensB);
        double scale = 0;
        for (float v : std::span<const float>(ownA.data))
            scale = std::max(scale, static_cast<double>(std::abs(v)));
        c.threshold =
            toleranceFor(ToleranceProfile::SameDevice,
                         toleranceDtype(a.model()->computeDtype(), {ca.dtype(), cb.dtype()}), scale)
                .maxKl;
        for (int64_t after = from; after < end; ++after) {
            BranchStep s;
            s.after = after;
            const int64_t row = after - from;
            s.tokenA = after + 1 < c.tokensA ? ta[static_cast<std::size_t>(after + 1)] : -1;
            s.tokenB = after + 1 < c.tokensB ? tb[static_cast<std::size_t>(after + 1)] : -1;
            if (after < c.tokensA && after < c.tokensB)
                s.klOwn = klRows(ownA, row, ownB, row);
            if (after < c.tokensA) {
                s.klForced = klRows(ownA, row, forced, row);
                if (c.firstStepForcedAbove < 0 && *s.klForced > c.threshold)
                    c.firstStepForcedAbove = static_cast<int64_t>(c.steps.size());
            }
            if (s.klOwn)
                c.maxKlOwn = std::max(c.maxKlOwn, *s.klOwn);
            if (s.klForced)
                c.maxKlForced = std::max(c.maxKlForced, *s.klForced);
            c.steps.push_back(s);
        }
        return c;
    });
}

Result<BranchComparison> compareBranches(const Snapshot& a, const Snapshot& b,
                                         std::shared_ptr<const Model> model) {
    auto sa = forcedSession(a, model);
    if (!sa)
        return Result<BranchComparison>::error("A: " + sa.message());
    auto sb = forcedSession(b, model);
    if (!sb)
        return Result<BranchComparison>::error("B: " + sb.message());
    return compareBranches(sa.value(), sb.value());
}

nlohmann::json toJson(const BranchComparison& c, const tok::Tokenizer* tokenizer) {
    auto token = [&](int32_t id) -> nlohmann::json {
        if (id < 0)
            return nullptr;
        const int32_t one[1] = {id};
        return {{"id", id}, {"text", tokenizer ? tokenizer->decode(one) : std::to_string(id)}};
    };
    auto num = [](const std::optional<double>& x) -> nlohmann::json {
        if (!x)
            return nullptr;
        return std::isfinite(*x) ? nlohmann::json(*x) : nlohmann::json("inf");
    };
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : c.steps)
        steps.push_back({{"after", s.after},
                         {"a", token(s.tokenA)},
                         {"b", token(s.tokenB)},
                         {"kl_own", num(s.klOwn)},
                         {"kl_forced", num(s.klForced)}});
    return {{"prefix", c.prefix},
            {"tokens_a", c.tokensA},
            {"tokens_b", c.tokensB},
            {"steps", steps},
            {"max_kl_own", num(c.maxKlOwn)},
            {"max_kl_forced", num(c.maxKlForced)},
            {"first_step_forced_above", c.firstStepForcedAbove},
            {"threshold", c.threshold}};
}

} // namespace kvscope::state
