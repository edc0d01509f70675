// Tier 5 and 6 experiments (architectural truths; symbolic structure): insights 43, 45, 47,
// 48, 49, 55 (54 and 58 are definitional: generating only appends to the cache).
#include "insights/labkit.h"

#include "state/surgery/surgery.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kvscope::insights::kit {
namespace {

using V = Verdict;

// #43: a model keeps nothing between calls.
ExperimentResult insight43(const LabContext& ctx) {
    const auto b = encode(ctx, otherText());
    const Session sessionBefore = prefill(ctx, b);
    const auto before = sessionBefore.lastLogits();
    for (int i = 0; i < 3; ++i) // other sessions on the same model object
        (void)greedyTokens(prefill(ctx, ctx.base.tokens), 8);
    const Session sessionAfter = prefill(ctx, b);
    const auto after = sessionAfter.lastLogits();
    LoadOptions lo;
    if (auto tk = ctx.model->tokenizer())
        lo.tokenizerPath = tk->sourcePath();
    lo.cacheDtype = ctx.model->cacheDtype(); // the same sessions as the model it reloads
    const auto reloaded = take(Model::load(ctx.model->path(), lo), "reloading the model");
    Session freshModel(reloaded);
    check(freshModel.feed(b), "feed on the reloaded model");
    const double sameObject = state::compareLogits(before, after).maxAbs;
    const double newObject = state::compareLogits(before, freshModel.lastLogits()).maxAbs;
    // Holds if prompt B's logits are bit-identical (max |Δ| == 0) on the used model object
    // and on a freshly loaded one; a caveat if they differ below 1e-5; otherwise the model
    // kept something.
    const double worst = std::max(sameObject, newObject);
    const V v = worst == 0 ? V::Holds : worst < 1e-5 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        43,
        {measure("max |Δlogit| of prompt B, after other sessions vs before", sameObject, "logit"),
         measure("max |Δlogit| of prompt B, reloaded model vs used one", newObject, "logit")},
        v,
        "Prompt B's logits after three other sessions ran on the same model object differ from "
        "before by " +
            fmt(sameObject) + ", and from a freshly loaded model by " + fmt(newObject) + ". " +
            conclude(v,
                     "The model object keeps nothing between calls; all memory is in the "
                     "session's cache.",
                     "The model object keeps nothing but rounding noise.",
                     "Something outside the session changed the model's output."),
        EvidenceView::Drift, "two captures of prompt B",
        {{"prompt B, before other sessions", capture(sessionBefore, ctx)},
         {"prompt B, after 3 other sessions", capture(sessionAfter, ctx)},
         {"prompt B, freshly reloaded model", capture(freshModel, ctx)}});
}

// #45: a saved cache is reusable only with the same model and tokenizer.
ExperimentResult insight45(const LabContext& ctx) {
    const auto foreign = faultRow(ctx, "foreign-cache", {}, 16);
    const auto tokenizer = faultRow(ctx, "tokenizer-swapped", {}, 16);
    // Holds if another model's cache moves the output (max KL > 1e-2) and a swapped
    // tokenizer does too; a caveat if only the weights matter for the continuation (the
    // tokenizer swap only breaks encoding new text; verify still names it); does not hold if
    // the foreign cache continues like the model's own.
    const V v = foreign.maxKl <= 1e-2    ? V::DoesNotHold
                : tokenizer.maxKl > 1e-2 ? V::Holds
                                         : V::HoldsWithCaveat;
    return result(
        45,
        {measure("max KL, another model's cache", foreign.maxKl, "nats", "16 greedy steps"),
         measure("max KL, tokenizer swapped", tokenizer.maxKl, "nats"),
         measure("verify caught the foreign cache", foreign.caught ? 1 : 0),
         measure("verify caught the tokenizer swap", tokenizer.caught ? 1 : 0)},
        v,
        "K/V from a random-weight model of the same shape move the continuation by up to " +
            fmt(foreign.maxKl) + " nats (verify " + (foreign.caught ? "names" : "misses") +
            " cache.provenance); a swapped tokenizer fingerprint changes the continuation by " +
            fmt(tokenizer.maxKl) + " nats (verify " + (tokenizer.caught ? "names" : "misses") +
            " it). " +
            conclude(v, "Both the weights and the tokenizer must match.",
                     "The cache belongs to its weights; a tokenizer mismatch only corrupts text "
                     "encoded later.",
                     "Another model's cache continues almost like the model's own."),
        EvidenceView::Faults, "foreign-cache and tokenizer-swapped",
        {{"clean", ctx.base},
         {"foreign-cache", faulty(ctx, "foreign-cache")},
         {"tokenizer-swapped", faulty(ctx, "tokenizer-swapped")}});
}

// The base tokens prefilled with one intermediate zeroed at one layer.
Session ablated(const LabContext& ctx, const std::string& name, int layer) {
    Ablation obs(name, layer);
    Session s(ctx.model);
    s.setObserver(&obs);
    check(s.feed(ctx.base.tokens), "ablated prefill");
    s.setObserver(nullptr);
    return s;
}

// #47 and #48 share the measurement: K/V of the layers above an ablated block.
// Also keeps both states for the evidence view and the layer whose K/V changed most (the
// ablated layer when none changed more).
struct AboveChange {
    double maxAbove = 0, minAbove = 1e9, atLayer = 0, nextKl = 0;
    int mostChangedLayer = -1;
    std::vector<EvidenceState> states; // [0] the clean prefill, [1] the ablated one
};
AboveChange changeAbove(const LabContext& ctx, const std::string& name, int layer,
                        const std::string& ablatedRole) {
    const Session clean = prefill(ctx, ctx.base.tokens);
    const Session hit = ablated(ctx, name, layer);
    AboveChange c;
    c.atLayer = layerRelL2(clean.cache(), hit.cache(), layer);
    c.mostChangedLayer = layer;
    double most = c.atLayer;
    for (int l = layer + 1; l < int(clean.cache().layers()); ++l) {
        const double r = layerRelL2(clean.cache(), hit.cache(), l);
        c.maxAbove = std::max(c.maxAbove, r);
        c.minAbove = std::min(c.minAbove, r);
        if (r > most) {
            most = r;
            c.mostChangedLayer = l;
        }
    }
    c.nextKl = kl(clean.lastLogits(), hit.lastLogits());
    c.states = {{"clean prefill", capture(clean, ctx)}, {ablatedRole, capture(hit, ctx)}};
    return c;
}

// #47 and #48: zero layer 0's `output` ("the MLP" / "the attention" block) during the
// prefill and measure the layers above. Holds if every higher layer's K/V stays within 1e-3
// (relative L2); a caveat within 5e-2; otherwise the block writes into what the layers above
// cache. `story` says what was measured, the three conclusions what the verdict means.
ExperimentResult ablatedBelow(const LabContext& ctx, int number, const std::string& output,
                              const std::string& block, const std::string& role,
                              const std::function<std::string(const AboveChange&)>& story,
                              const char* holds, const char* caveat, const char* fails) {
    const AboveChange c = changeAbove(ctx, output, 0, role);
    const V v = c.maxAbove < 1e-3   ? V::Holds
                : c.maxAbove < 5e-2 ? V::HoldsWithCaveat
                                    : V::DoesNotHold;
    return result(number,
                  {measure("max relative L2 of higher layers' K/V", c.maxAbove, "relative L2",
                           "layer 0's " + block + " output zeroed during the prefill"),
                   measure("min relative L2 of higher layers' K/V", c.minAbove, "relative L2"),
                   measure("relative L2 at layer 0 (control)", c.atLayer, "relative L2"),
                   measure("next-step KL", c.nextKl, "nats")},
                  v, story(c) + conclude(v, holds, caveat, fails), EvidenceView::Diff,
                  "the ablated state against the clean one, per-layer heatmap", c.states,
                  Focus{c.mostChangedLayer, -1, -1});
}

// #47: MLPs do not affect the long-term memory (the cache).
ExperimentResult insight47(const LabContext& ctx) {
    return ablatedBelow(
        ctx, 47, "ffn_out", "MLP", "ablated MLP, layer 0",
        [](const AboveChange& c) {
            return "Zeroing layer 0's MLP output while prefilling the same tokens changes the "
                   "cached K/V of the layers above by " +
                   fmt(c.minAbove) + " to " + fmt(c.maxAbove) +
                   " (relative L2) while layer 0's own K/V stay within " + fmt(c.atLayer) +
                   "; the next-step distribution moves by " + fmt(c.nextKl) + " nats. ";
        },
        "The MLP leaves the cached memory alone.", "The MLP shapes the cached memory, but little.",
        "The MLP writes into the residual stream every higher layer caches from.");
}

// #48: layers hand nothing up.
ExperimentResult insight48(const LabContext& ctx) {
    return ablatedBelow(
        ctx, 48, "attn_out", "attention", "ablated attention, layer 0",
        [](const AboveChange& c) {
            return "Zeroing layer 0's attention output changes the K/V cached by layers 1 and up "
                   "by " +
                   fmt(c.minAbove) + " to " + fmt(c.maxAbove) +
                   " (relative L2), layer 0's own by " + fmt(c.atLayer) + ". ";
        },
        "Layers contribute independently.", "Layers hand little up.",
        "Every layer reads what the layers below it attended to, through the residual stream.");
}

// #49: rewinding needs a reset of the whole state.
ExperimentResult insight49(const LabContext& ctx) {
    const state::Snapshot s64 = stateOfLength(ctx, 64);
    const state::Snapshot back =
        take(state::truncate(s64, 32, ctx.model), "rewinding to 32 tokens").snapshot;
    const std::vector<int32_t> first(s64.tokens.begin(), s64.tokens.begin() + 32);
    const Session fresh = prefill(ctx, first);
    const auto d = driftGreedy(fresh, take(state::restore(back, ctx.model), "restore").session, 32);
    // The claim holds if the rewound state departs from a fresh run of the kept tokens (max
    // KL > 1e-2); a caveat above 1e-4; otherwise rewinding works without a reset.
    const V v = d.maxKl > 1e-2 ? V::Holds : d.maxKl > 1e-4 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        49,
        {measure("max KL, rewound vs fresh run", d.maxKl, "nats", "64 -> 32 tokens, 32 steps"),
         measure("first diverging step", d.firstDivergingStep, "", "-1: none")},
        v,
        "A 64-token state rewound to 32 tokens with truncate and continued 32 greedy steps stays "
        "within KL " +
            fmt(d.maxKl) + " nats of a fresh run of the first 32 tokens" +
            (d.firstDivergingStep < 0 ? ", with the same tokens" : "") + ". " +
            conclude(v, "Rewinding without a reset breaks the state.",
                     "Rewinding without a reset is close, not exact.",
                     "Positions go back with the cache; no reset is needed."),
        EvidenceView::Drift, "the truncated state against a fresh run",
        {{"fresh run of the first 32 tokens", capture(fresh, ctx)},
         {"rewound from 64 to 32 tokens", back}});
}

// #55: the same token acts differently in another context or position.
ExperimentResult insight55(const LabContext& ctx) {
    const int32_t token = greedyTokens(restoreBase(ctx), 1).at(0);
    const int32_t one[1] = {token};
    std::vector<std::vector<int32_t>> prefixes = {ctx.base.tokens, reversedTokens(ctx),
                                                  encode(ctx, otherText())};
    std::vector<std::vector<float>> outs;
    std::vector<Session> after;
    for (const auto& p : prefixes) {
        Session s = prefill(ctx, p);
        check(s.feed(one), "feed");
        outs.push_back(s.lastLogits());
        after.push_back(s);
    }
    // The token's own K/V (its slot, the last one) in the first two contexts, above layer 0.
    double kvAbove = 1e9;
    for (int l = 1; l < int(after[0].cache().layers()); ++l)
        kvAbove = std::min(kvAbove, slotsRelL2(after[0].cache(), after[1].cache(), l,
                                               after[0].cache().length() - 1,
                                               after[1].cache().length() - 1, 1));
    double minPair = 1e9;
    for (std::size_t i = 0; i < outs.size(); ++i)
        for (std::size_t j = 0; j < outs.size(); ++j)
            if (i != j)
                minPair = std::min(minPair, kl(outs[i], outs[j]));
    Session shifted(ctx.model);
    shifted.setNextPosition(7);
    check(shifted.feed(prefixes[0]), "shifted prefill");
    check(shifted.feed(one), "feed");
    const double shiftKl = kl(outs[0], shifted.lastLogits());
    // Holds if every pair of contexts gives the token different distributions (min pairwise
    // KL > 1e-2) and an absolute shift also does (> 1e-4); a caveat if only the context
    // matters; does not hold if the contexts do not.
    const V v = minPair <= 1e-2 ? V::DoesNotHold : shiftKl > 1e-4 ? V::Holds : V::HoldsWithCaveat;
    return result(
        55,
        {measure("min pairwise KL over 3 contexts", minPair, "nats"),
         measure("KL, same context shifted by 7 positions", shiftKl, "nats"),
         measure("min relative L2 of its K/V above layer 0, two contexts", kvAbove, "relative L2")},
        v,
        "The same token after three different prefixes yields next-token distributions at least " +
            fmt(minPair) + " nats apart, its own K/V above layer 0 differing by at least " +
            fmt(kvAbove) + " (relative L2); the same prefix shifted by 7 positions changes it by " +
            fmt(shiftKl) + " nats. " +
            conclude(v, "Both the context and the position set the effect.",
                     "Structure (what precedes, at what distance) sets the effect; the absolute "
                     "position alone does not under rotary encoding.",
                     "The context hardly changes what the token does."),
        EvidenceView::Drift, "the token's distribution in two contexts",
        {{"standard prefix + the token", capture(after[0], ctx)},
         {"reversed prefix + the token", capture(after[1], ctx)},
         {"standard prefix shifted by 7 + the token", capture(shifted, ctx)}});
}

} // namespace

std::vector<Entry> architectureExperiments() {
    return {{43, insight43}, {45, insight45}, {47, insight47},
            {48, insight48}, {49, insight49}, {55, insight55}};
}

} // namespace kvscope::insights::kit
