// Tier 8 experiments (advanced mechanics and edge behaviour): insights 73 to 79 (71 is
// definitional: core/insights/registry.cpp).
#include "insights/labkit.h"

#include "state/ledger/snapshotio.h"
#include "state/surgery/surgery.h"
#include "state/verify/restore.h"
#include "state/verify/verifyfile.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace kvscope::insights::kit {
namespace {

using V = Verdict;

// #73: damage to one layer distorts the layers above it, not those below.
ExperimentResult insight73(const LabContext& ctx) {
    const int layers = int(ctx.model->config().nLayers);
    const int l = (layers - 1) / 2;
    const state::Snapshot bad = take(
        state::injectFault("corrupt-layer", ctx.base,
                           state::FaultContext{ctx.model, {}, {}, {{"layer", std::to_string(l)}}}),
        "corrupt-layer");
    Session clean = restoreBase(ctx);
    Session hit = forced(bad, ctx);
    const auto next = greedyTokens(clean, 8);
    const int64_t from = clean.cache().length();
    check(clean.feed(next), "feed");
    check(hit.feed(next), "feed");
    double below = 0, above = 1e9;
    for (int k = 0; k < layers; ++k) {
        const double r = slotsRelL2(clean.cache(), hit.cache(), k, from, from, 8);
        if (k <= l)
            below = std::max(below, r);
        else
            above = std::min(above, r);
    }
    const double out = kl(clean.lastLogits(), hit.lastLogits());
    const state::Snapshot cleanAfter = capture(clean, ctx), hitAfter = capture(hit, ctx);
    // Holds if the new tokens' K/V up to the damaged layer are untouched (< 1e-6) and every
    // layer above it changes by more than 1e-2 (relative L2); a caveat if above only by more
    // than 1e-4; otherwise the damage does not travel up.
    const V v = below < 1e-6 && above > 1e-2   ? V::Holds
                : below < 1e-6 && above > 1e-4 ? V::HoldsWithCaveat
                                               : V::DoesNotHold;
    return result(73,
                  {measure("min relative L2 of new K/V above the damaged layer", above,
                           "relative L2", "layer " + std::to_string(l) + " noise, 8 new tokens"),
                   measure("max relative L2 at and below it", below, "relative L2"),
                   measure("next-step KL", out, "nats")},
                  v,
                  "With layer " + std::to_string(l) +
                      "'s cache overwritten by noise, 8 new tokens get K/V within " + fmt(below) +
                      " of the clean run in layers 0.." + std::to_string(l) +
                      " (they are computed before the damaged attention is read) and at least " +
                      fmt(above) + " apart in every layer above; the output moves by " + fmt(out) +
                      " nats. " +
                      conclude(v, "Damage travels up only.", "Damage travels up, weakly.",
                               "The damage does not travel up as claimed."),
                  EvidenceView::Diff,
                  "the damaged state after 8 tokens against the clean one, per-layer heatmap",
                  {{"clean, 8 tokens on", cleanAfter},
                   {"layer " + std::to_string(l) + " corrupted, 8 tokens on", hitAfter}},
                  Focus{l, -1, from});
}

// #74: the position scheme must match between save and use.
ExperimentResult insight74(const LabContext& ctx) {
    const auto row = faultRow(ctx, "wrong-rope-theta", {}, 32);
    // A model without plain RoPE (GPT-2's learned positions) cannot take the fault: no
    // measurement, so no verdict (an output that did not move would read as "does not matter").
    if (!row.applied())
        throw KvError("wrong-rope-theta cannot be injected here: " + row.error);
    // Holds if keys rotated with the wrong theta move the output (max KL > 1e-2); a caveat
    // above 1e-4; otherwise the scheme does not matter here.
    const V v = row.maxKl > 1e-2   ? V::Holds
                : row.maxKl > 1e-4 ? V::HoldsWithCaveat
                                   : V::DoesNotHold;
    // A continuation the engine refused leaves no faulty run to show.
    std::vector<EvidenceState> states;
    if (row.error.empty())
        states = {{"clean", ctx.base},
                  {"keys rotated with the wrong RoPE theta", faulty(ctx, "wrong-rope-theta")}};
    return result(
        74,
        {measure("max KL, keys rotated with the wrong RoPE theta", row.maxKl, "nats",
                 "32 greedy steps"),
         measure("first diverging step", row.firstDivergingStep, "", "-1: none"),
         measure("verify caught it", row.caught ? 1 : 0)},
        v,
        "Keys rotated with another RoPE theta than the model's move 32 greedy steps by up to " +
            fmt(row.maxKl) + " nats (first different token " +
            std::to_string(row.firstDivergingStep) + ", -1 = none); verify " +
            (row.caught ? "names" : "misses") + " positions.rope.",
        EvidenceView::Faults, "wrong-rope-theta", std::move(states));
}

// #75: truncation drops cache content and breaks alignment.
ExperimentResult insight75(const LabContext& ctx) {
    const int64_t n = int64_t(ctx.base.tokens.size()), keep = n - n / 4;
    const std::vector<int32_t> kept(ctx.base.tokens.begin(), ctx.base.tokens.begin() + keep);
    const Session fresh = prefill(ctx, kept);
    const auto cut = take(state::truncate(ctx.base, keep, ctx.model), "truncate").snapshot;
    const auto proper =
        driftGreedy(fresh, take(state::restore(cut, ctx.model), "restore").session, 16);
    const auto naive = faultRow(ctx, "truncated-cache", {}, 16);
    const auto naiveSnap = take(
        state::injectFault("truncated-cache", ctx.base, state::FaultContext{ctx.model, {}, {}, {}}),
        "truncated-cache");
    const auto naiveDrift = driftGreedy(fresh, forced(naiveSnap, ctx), 16);
    const bool cutVerifies = state::verifySnapshot(cut, ctx.model).report.ok();
    // Holds if both the proper and the naive cut depart from a fresh run of the kept tokens
    // (max KL > 1e-3); a caveat if only the naive cut (positions and mask not fixed) does;
    // does not hold if neither departs.
    const V v = proper.maxKl > 1e-3       ? V::Holds
                : naiveDrift.maxKl > 1e-3 ? V::HoldsWithCaveat
                                          : V::DoesNotHold;
    return result(
        75,
        {measure("max KL, cache cut without fixing positions", naiveDrift.maxKl, "nats",
                 "against a fresh run of the kept tokens, 16 steps"),
         measure("max KL, kvscope truncate", proper.maxKl, "nats"),
         measure("verify caught the naive cut", naive.caught ? 1 : 0),
         measure("kvscope's truncate verifies clean", cutVerifies ? 1 : 0)},
        v,
        "Cutting the last quarter of the cache while leaving tokens, positions and the next "
        "position as they were leaves the state up to " +
            fmt(naiveDrift.maxKl) + " nats from a fresh run of the kept tokens (verify " +
            (naive.caught ? "names" : "misses") +
            " it); truncating everything together stays within " + fmt(proper.maxKl) +
            " nats and verify " + (cutVerifies ? "accepts" : "refuses") + " that state. " +
            conclude(v, "Even a complete truncation loses what the continuation needs.",
                     "Truncation breaks alignment only when it is done halfway.",
                     "Neither cut changes the continuation."),
        EvidenceView::Faults, "truncated-cache; drift: the truncated state against a fresh run",
        {{"clean", ctx.base},
         {"cache cut without fixing positions", naiveSnap},
         {"fresh run of the kept tokens", capture(fresh, ctx)}});
}

// #76: models never flag broken memory; external checks are needed.
ExperimentResult insight76(const LabContext& ctx) {
    state::FaultContext fc;
    fc.model = ctx.model;
    state::FaultLabOptions o;
    o.steps = 8;
    const auto rows = take(state::faultLab(ctx.base, fc, o), "fault lab");
    // A fault that does not apply to this model or state (wrong-rope-theta on learned
    // positions) tests nothing: it is counted apart, never as the engine flagging it.
    int raised = 0, caught = 0, effect = 0, n = 0;
    std::string notApplied;
    for (const auto& r : rows) {
        if (!r.applied()) {
            notApplied += (notApplied.empty() ? "" : ", ") + r.fault;
            continue;
        }
        ++n;
        raised += r.engineRaised();
        caught += r.caught;
        effect += r.effect();
    }
    if (n == 0)
        throw KvError("no fault of the fault lab applies to this state");
    // Holds if the engine continued every faulty state without an error and each fault
    // changed the output; a caveat if some faults did not even change the output (they would
    // surface nowhere but in a check); does not hold if the engine raised an error.
    const V v = raised > 0 ? V::DoesNotHold : effect == n ? V::Holds : V::HoldsWithCaveat;
    return result(
        76,
        {measure("faults the engine raised an error for", raised, "",
                 std::to_string(n) + " faults"),
         measure("faults verify caught", caught), measure("faults that changed the output", effect),
         measure("faults that could not be injected", int(rows.size()) - n, "",
                 notApplied.empty() ? "none" : notApplied)},
        v,
        "Over the fault lab's " + std::to_string(n) + " faults" +
            (notApplied.empty() ? std::string()
                                : " (" + notApplied +
                                      " could not be injected into this "
                                      "model's state and are left out)") +
            " the engine raised " + std::to_string(raised) + " errors; " + std::to_string(effect) +
            " faults changed the output and " + std::to_string(n - effect) +
            " changed nothing visible, while verify named " + std::to_string(caught) + ". " +
            conclude(v, "The model never flags them; the text shows them all.",
                     "The model never flags them, and some do not even show in the "
                     "text: only an external check sees them all.",
                     "The engine flagged some faults itself."),
        EvidenceView::Faults, "the whole fault lab table",
        {{"clean (the fault lab's input)", ctx.base}});
}

// #77: restoring the wrong cache looks like hallucination.
ExperimentResult insight77(const LabContext& ctx) {
    const auto aIds = ctx.prompt;
    const auto bIds = encode(ctx, otherText());
    const std::set<int32_t> inA(aIds.begin(), aIds.end()), inB(bIds.begin(), bIds.end());
    std::set<int32_t> onlyA;
    for (int32_t t : inA)
        if (!inB.count(t))
            onlyA.insert(t);
    const Session a = restoreBase(ctx);
    const Session wrong(ctx.model, a.cache(), bIds, a.nextPosition(), a.lastLogits());
    const Session control = prefill(ctx, bIds);
    auto share = [&](const Session& s) {
        const auto g = greedyTokens(s, 64);
        int hits = 0;
        for (int32_t t : g)
            hits += onlyA.count(t) > 0;
        return g.empty() ? 0.0 : double(hits) / double(g.size());
    };
    const double w = share(wrong), c = share(control);
    // Holds if, under B's text, A's cache makes the output use A-only tokens (absent from B's
    // prompt) more than B's own cache does by over 10 points; a caveat if more at all;
    // otherwise the wrong cache leaves no trace of A.
    const V v = w - c > 0.1 ? V::Holds : w > c ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        77,
        {measure("share of A-only tokens, wrong cache minus control", w - c, "ratio",
                 "64 greedy tokens; A-only: in A's prompt, not in B's"),
         measure("share of A-only tokens, wrong cache", w, "ratio"),
         measure("share of A-only tokens, B's own cache", c, "ratio")},
        v,
        "Under prompt B's token buffer, A's restored cache generates tokens that occur only in "
        "A's prompt " +
            pct(w) + " of the time, against " + pct(c) +
            " for B's own cache (tokens taken from the wrong cache stand in for "
            "hallucinations). " +
            conclude(v, "The output talks about what the cache holds, not the prompt.",
                     "A little of the wrong cache's content surfaces.",
                     "The wrong cache leaves no trace of its content in the output."),
        EvidenceView::Drift, "the wrong-cache state against B's own",
        {{"prompt B with its own cache", captureAsPrompt(control, ctx)},
         {"prompt B's tokens over A's cache", captureAsPrompt(wrong, ctx)}});
}

// #78: memory leaks when the cache is not reset.
ExperimentResult insight78(const LabContext& ctx) {
    const auto b = encode(ctx, otherText());
    Session leaked = restoreBase(ctx);
    check(leaked.feed(b), "prompt B after A's cache");
    const Session fresh = prefill(ctx, b);
    const double k = kl(fresh.lastLogits(), leaked.lastLogits());
    const auto d = driftGreedy(fresh, leaked, 16);
    // Holds if B after A's unreset cache departs from B alone (KL > 1e-2); a caveat above
    // 1e-4; otherwise nothing leaked.
    const V v = k > 1e-2 ? V::Holds : k > 1e-4 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        78,
        {measure("next-token KL, B after A's cache vs B alone", k, "nats"),
         measure("first diverging step", d.firstDivergingStep, "", "-1: none, 16 greedy steps")},
        v,
        "Prompt B fed into a session still holding A's cache ends in a distribution " + fmt(k) +
            " nats from B in a fresh session, and its greedy continuation departs at step " +
            std::to_string(d.firstDivergingStep) + " (-1 = never). " +
            conclude(v, "A leaks into B.", "A leaks into B, slightly.", "Nothing of A leaks."),
        EvidenceView::Drift,
        "B fed on top of A's unreset cache (leaked-state) against B in a fresh session",
        {{"prompt B in a fresh session", captureAsPrompt(fresh, ctx)},
         {"prompt B fed on top of A's cache", captureAsPrompt(leaked, ctx)}});
}

// #79: cache fragments reused as plug-in blocks.
ExperimentResult insight79(const LabContext& ctx) {
    const auto otherIds = encode(ctx, otherText());
    const state::Snapshot source = capture(prefill(ctx, otherIds), ctx);
    state::SpliceOptions o;
    o.begin = 1;
    o.end = std::min<int64_t>(9, int64_t(otherIds.size()));
    o.at = int64_t(ctx.prompt.size());
    const auto r = take(state::splice(ctx.base, source, o, ctx.model), "splice");
    double maxCosLoss = 0;
    int worstLayer = -1; // the layer whose K/V moved most (-1: none moved)
    for (const auto& l : r.report.drift.layers) {
        const double loss = std::max(1 - l.keyCosine, 1 - l.valueCosine);
        if (loss > maxCosLoss)
            worstLayer = l.layer;
        maxCosLoss = std::max({maxCosLoss, 1 - l.keyCosine, 1 - l.valueCosine});
    }
    // What splice compared the result with: a fresh prefill of the spliced tokens.
    const state::Snapshot recomputed = capture(prefill(ctx, r.snapshot.tokens), ctx);
    const double k = r.report.logitDrift.kl;
    // Holds if the spliced fragment acts like the text recomputed in place (next-step KL <
    // 1e-3); a caveat below 0.1 nats (usable, not equivalent); otherwise the fragment does
    // not plug in.
    const V v = k < 1e-3 ? V::Holds : k < 0.1 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        79,
        {measure("next-step KL, spliced vs recomputed in place", k, "nats"),
         measure("max 1 - cosine of any layer's K/V", maxCosLoss, "ratio"),
         measure("fragment tokens", double(r.report.inserted), "tokens")},
        v,
        "A fragment of " + std::to_string(r.report.inserted) +
            " tokens of another prompt's cache, "
            "spliced in after the prompt with its keys re-rotated, leaves the next-step "
            "distribution " +
            fmt(k) + " nats from recomputing the spliced text in place (K/V cosine loss up to " +
            fmt(maxCosLoss) + "). " +
            conclude(v, "The fragment plugs in like recomputed text.",
                     "The fragment carries its old context with it, so it is a plug-in only as "
                     "far as that context does not matter.",
                     "The fragment carries its old context with it and does not act like the "
                     "text recomputed in place."),
        EvidenceView::Diff, "the spliced state against a fresh prefill of its tokens",
        {{"spliced tokens recomputed in place", recomputed},
         {"fragment spliced in after the prompt", r.snapshot}},
        Focus{worstLayer, -1, o.at});
}

} // namespace

std::vector<Entry> edgeExperiments() {
    return {{73, insight73}, {74, insight74}, {75, insight75}, {76, insight76},
            {77, insight77}, {78, insight78}, {79, insight79}};
}

} // namespace kvscope::insights::kit
