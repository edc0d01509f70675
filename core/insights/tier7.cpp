// Tier 7 experiments (control and sovereignty): insights 61, 63 to 69 (62 is definitional:
// core/insights/registry.cpp).
#include "insights/labkit.h"

#include "state/surgery/diff.h"
#include "state/surgery/surgery.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>

namespace kvscope::insights::kit {
namespace {

using V = Verdict;

// A second state of the base's length: the reversed buffer, prefilled.
state::Snapshot otherState(const LabContext& ctx) {
    return capture(prefill(ctx, reversedTokens(ctx)), ctx);
}

// #61: the model trusts its cache completely: silent failures.
ExperimentResult insight61(const LabContext& ctx) {
    const int mid = int(ctx.model->config().nLayers / 2);
    const auto noise = faultRow(ctx, "corrupt-layer", {{"layer", std::to_string(mid)}}, 16);
    const auto zeros =
        faultRow(ctx, "corrupt-layer", {{"layer", std::to_string(mid)}, {"mode", "zeros"}}, 16);
    const auto foreign = faultRow(ctx, "foreign-cache", {}, 16);
    // Each of the three applies to every model with a cache (a layer to overwrite, a donor of
    // the same shape); one that cannot be injected leaves the claim untested.
    for (const auto* r : {&noise, &zeros, &foreign})
        if (!r->applied())
            throw KvError(r->fault + " cannot be injected here: " + r->error);
    const int raised = noise.engineRaised() + zeros.engineRaised() + foreign.engineRaised();
    const double worst = std::max({noise.maxKl, zeros.maxKl, foreign.maxKl});
    const int caught = noise.caught + zeros.caught + foreign.caught;
    // Holds if the engine continued all three damaged caches without an error while the output
    // moved (max KL > 1e-2): a silent failure; a caveat if verify caught them all the same;
    // does not hold if the engine raised an error or nothing moved.
    const V v = raised > 0 || worst <= 1e-2 ? V::DoesNotHold
                : caught == 0               ? V::Holds
                                            : V::HoldsWithCaveat;
    return result(
        61,
        {measure("max KL over the damaged caches", worst, "nats", "16 greedy steps"),
         measure("engine errors", raised, "", "corrupt-layer noise, zeros, foreign-cache"),
         measure("caught by verify", caught)},
        v,
        "Continued from layer " + std::to_string(mid) +
            " overwritten with noise, with zeros, and from another model's cache, the engine "
            "raised " +
            std::to_string(raised) + " errors while the output moved by up to " + fmt(noise.maxKl) +
            ", " + fmt(zeros.maxKl) + " and " + fmt(foreign.maxKl) + " nats; verify caught " +
            std::to_string(caught) + " of the 3. " +
            conclude(v, "The model trusts whatever it is given, and nothing flags it.",
                     "The model trusts whatever it is given; the check has to come from outside "
                     "the model.",
                     raised > 0 ? "The engine refused a damaged cache."
                                : "The damage barely changed the output."),
        EvidenceView::Faults, "corrupt-layer and foreign-cache rows",
        {{"clean", ctx.base},
         {"corrupt-layer noise, layer " + std::to_string(mid),
          faulty(ctx, "corrupt-layer", {{"layer", std::to_string(mid)}})},
         {"foreign-cache", faulty(ctx, "foreign-cache")}},
        Focus{mid, -1, -1});
}

// #63: scoped, layer-by-layer edits of the cache.
ExperimentResult insight63(const LabContext& ctx) {
    const state::Snapshot other = otherState(ctx);
    const int layers = int(ctx.model->config().nLayers);
    const int64_t n = ctx.base.cacheLength;
    const int64_t begin = n / 4, end = n / 2;
    double outside = 0, maxKlPatch = 0;
    // The evidence: the one-layer patch that moved the next step most (layer 0's when none did).
    int shownLayer = -1;
    double shownKl = 0;
    state::Snapshot shownPatch;
    for (int l = 0; l < layers; ++l) {
        state::PatchOptions o;
        o.layer = l;
        o.head = 0;
        o.begin = begin;
        o.end = end;
        const auto p = take(state::patch(ctx.base, other, o, ctx.model), "patch");
        const auto d = state::diff(ctx.base, p.snapshot);
        for (const auto& ld : d.layers) {
            if (ld.layer != l) {
                outside = std::max({outside, ld.key.maxAbs, ld.value.maxAbs});
                continue;
            }
            for (const auto& hd : ld.heads)
                if (hd.head != 0)
                    outside = std::max({outside, hd.key.maxAbs, hd.value.maxAbs});
            for (int64_t pos = 0; pos < d.comparedPositions; ++pos)
                if (pos < begin || pos >= end)
                    outside = std::max(
                        outside,
                        double(d.layerPositionMaxAbs[std::size_t(l * d.comparedPositions + pos)]));
        }
        if (p.report.logitChange)
            maxKlPatch = std::max(maxKlPatch, p.report.logitChange->kl);
        const double patchKl = p.report.logitChange ? p.report.logitChange->kl : 0;
        if (shownLayer < 0 || patchKl > shownKl) {
            shownLayer = l;
            shownKl = patchKl;
            shownPatch = p.snapshot;
        }
    }
    // Holds if no element outside the patched layer, head and range changed (max |Δ| == 0)
    // and the patch moved the next-step distribution (KL > 1e-6 for some layer); a caveat if
    // the scope held but no patch had an effect; does not hold if anything outside changed.
    const V v = outside != 0 ? V::DoesNotHold : maxKlPatch > 1e-6 ? V::Holds : V::HoldsWithCaveat;
    return result(63,
                  {measure("max |Δ| outside the patched scope", outside, "",
                           "over every layer's patch of KV head 0, slots " + std::to_string(begin) +
                               ".." + std::to_string(end)),
                   measure("max next-step KL of a one-layer patch", maxKlPatch, "nats")},
                  v,
                  "Patching KV head 0 of one layer at slots " + std::to_string(begin) + " to " +
                      std::to_string(end) +
                      " from another state, one layer at a time, changed nothing " +
                      "outside that scope (max |Δ| " + fmt(outside) +
                      " per diff) and moved the next-step distribution by up to " +
                      fmt(maxKlPatch) + " nats.",
                  EvidenceView::Diff, "a patched state against its parent, the per-layer heatmap",
                  {{"parent (standard state)", ctx.base},
                   {"KV head 0 of layer " + std::to_string(shownLayer) + " patched, slots " +
                        std::to_string(begin) + ".." + std::to_string(end),
                    shownPatch},
                   {"donor (reversed prompt)", other}},
                  Focus{shownLayer, 0, -1});
}

// #64: a misaligned cache keeps running, only distorted.
ExperimentResult insight64(const LabContext& ctx) {
    int raised = 0;
    std::vector<double> kls;
    for (const char* off : {"1", "4", "16"}) {
        const auto row = faultRow(ctx, "position-offset", {{"offset", off}}, 32);
        raised += row.engineRaised();
        kls.push_back(row.maxKl);
    }
    // Holds if every offset ran to the end without an error and the distortion is real (max
    // KL at offset 16 > 1e-2); a caveat if it ran but the distortion stayed below that;
    // does not hold if a run raised an error.
    const V v = raised > 0 ? V::DoesNotHold : kls[2] > 1e-2 ? V::Holds : V::HoldsWithCaveat;
    return result(64,
                  {measure("max KL, positions offset by 16", kls[2], "nats", "32 greedy steps"),
                   measure("max KL, offset 4", kls[1], "nats"),
                   measure("max KL, offset 1", kls[0], "nats"),
                   measure("runs that raised an error", raised)},
                  v,
                  "Forced to continue with positions offset by 1, 4 and 16, generation ran " +
                      std::string(raised ? "into " + std::to_string(raised) + " errors"
                                         : "without an error") +
                      " and drifted by up to " + fmt(kls[0]) + ", " + fmt(kls[1]) + " and " +
                      fmt(kls[2]) + " nats. " +
                      conclude(v, "No crash, no warning, only a changed output.",
                               "No crash and no warning, and the output changes only slightly.",
                               "The engine stopped a misaligned run."),
                  EvidenceView::Faults, "position-offset with offsets 1, 4, 16",
                  {{"clean", ctx.base},
                   {"position-offset by 16", faulty(ctx, "position-offset", {{"offset", "16"}})},
                   {"position-offset by 1", faulty(ctx, "position-offset", {{"offset", "1"}})}});
}

// #65: change the cache and the model's "worldview" changes with it.
ExperimentResult insight65(const LabContext& ctx) {
    const Session a = restoreBase(ctx);
    const Session b = prefill(ctx, reversedTokens(ctx));
    Session hybrid(ctx.model, b.cache(), a.tokens(), a.nextPosition(), a.lastLogits());
    // Captured before the teacher forcing below extends it.
    std::vector<EvidenceState> states = {
        {"B: reversed prompt", capture(b, ctx)},
        {"hybrid: A's tokens over B's cache", capture(hybrid, ctx)},
        {"A: standard state (restored)", capture(a, ctx)}};
    const auto forcedTokens = greedyTokens(a, 16);
    Session ra = a, rb = b;
    const auto la = logitsAfterEach(ra, forcedTokens);
    const auto lb = logitsAfterEach(rb, forcedTokens);
    const auto lh = logitsAfterEach(hybrid, forcedTokens);
    const double toB = meanKl(lb, lh), toA = meanKl(la, lh);
    // Holds if A's prompt over B's cache follows B (mean KL to B < 1e-4) and not A (> 1e-2);
    // a caveat if it is only closer to B than to A; otherwise the cache does not set it.
    const V v = toB < 1e-4 && toA > 1e-2 ? V::Holds
                : toB < toA              ? V::HoldsWithCaveat
                                         : V::DoesNotHold;
    return result(
        65,
        {measure("mean KL to B's own distributions", toB, "nats", "16 teacher-forced steps"),
         measure("mean KL to A's own distributions", toA, "nats")},
        v,
        "With A's tokens but B's whole cache, the next-token distributions over 16 teacher-"
        "forced steps are " +
            fmt(toB) + " nats from B's and " + fmt(toA) + " nats from A's. " +
            conclude(v, "The model sees what the cache says, not what the text says.",
                     "The cache pulls the model toward B, not all the way.",
                     "Swapping the cache does not change the model's view."),
        EvidenceView::Drift, "the hybrid state against A and against B", std::move(states));
}

// #66: new tokens are always read through the cached history.
ExperimentResult insight66(const LabContext& ctx) {
    const auto suffix = encode(ctx, " and then", false);
    const Session a = restoreBase(ctx);
    const Session b = prefill(ctx, reversedTokens(ctx));
    Session sa = a, sb = b;
    QueryRecorder rec;
    sa.setObserver(&rec);
    check(sa.feed(suffix), "feed the suffix");
    sa.setObserver(nullptr);
    check(sb.feed(suffix), "feed the suffix");
    const double k = kl(sa.lastLogits(), sb.lastLogits());
    const auto& mc = ctx.model->config();
    const int64_t hist = a.cache().length(), rows = int64_t(suffix.size());
    double onHistory = 0;
    for (int l = 0; l < int(mc.nLayers); ++l)
        for (int h = 0; h < int(mc.nHeads); ++h) {
            const Rows r = attentionRows(*ctx.model, sa.cache(), rec, rows, l, h);
            for (int64_t q = 0; q < r.rows; ++q)
                for (int64_t j = 0; j < hist; ++j)
                    onHistory += r.p[std::size_t(q * r.keys + j)];
        }
    onHistory /= double(mc.nLayers * mc.nHeads * rows);
    // Holds if the same suffix after two histories gives different distributions (KL > 1e-2)
    // and puts more than 10 % of its attention on the history; a caveat if only one is true.
    const int parts = (k > 1e-2) + (onHistory > 0.1);
    const V v = parts == 2 ? V::Holds : parts == 1 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(66,
                  {measure("KL of the suffix's next token, two histories", k, "nats"),
                   measure("suffix attention on the cached history", onHistory, "probability",
                           "mean over layers, heads and suffix tokens")},
                  v,
                  "The same " + std::to_string(suffix.size()) +
                      "-token suffix after two different cached histories ends in distributions " +
                      fmt(k) + " nats apart, and puts " + pct(onHistory) +
                      " of its attention on the history rather than on itself.",
                  EvidenceView::Attention, "the suffix rows over the history",
                  {{"standard state + suffix", capture(sa, ctx)},
                   {"reversed prompt + suffix", capture(sb, ctx)}},
                  Focus{-1, -1, hist + rows - 1});
}

// #67: live chat only works on top of the kept cache.
ExperimentResult insight67(const LabContext& ctx) {
    const std::vector<std::string> turns = {" Where did the cat go?", " What did it see?",
                                            " Why was it happy?"};
    Session kept = prefill(ctx, ctx.prompt);
    std::vector<int32_t> transcript = ctx.prompt, keptReplies, refedReplies;
    double keptSeconds = 0, refedSeconds = 0;
    for (const auto& t : turns) {
        const auto ids = encode(ctx, t, false);
        Stopwatch w1;
        check(kept.feed(ids), "turn");
        Sampler greedy = greedySampler();
        const auto r1 = take(kept.generate(12, greedy), "reply").tokens;
        keptSeconds += w1.seconds();
        transcript.insert(transcript.end(), ids.begin(), ids.end());
        Stopwatch w2;
        const auto r2 = greedyTokens(prefill(ctx, transcript), 12);
        refedSeconds += w2.seconds();
        transcript.insert(transcript.end(), r1.begin(), r1.end());
        keptReplies.insert(keptReplies.end(), r1.begin(), r1.end());
        refedReplies.insert(refedReplies.end(), r2.begin(), r2.end());
    }
    const double same = agreement(keptReplies, refedReplies);
    // The evidence: the kept session after the last reply, and the same transcript re-fed.
    std::vector<EvidenceState> states = {
        {"kept cache, 3 turns", capture(kept, ctx)},
        {"whole transcript re-fed in one prefill", capture(prefill(ctx, transcript), ctx)}};
    // The claim holds if re-feeding the transcript gives other replies than keeping the cache
    // (agreement < 90 %); a caveat if they differ in a few tokens; does not hold if the
    // replies are identical (re-feeding is slower, not "synthetic").
    const V v = same < 0.9 ? V::Holds : same < 1.0 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        67,
        {measure("reply agreement, re-fed transcript vs kept cache", same, "ratio",
                 "3 turns, 12 greedy tokens each"),
         measure("re-fed / kept time", refedSeconds / std::max(keptSeconds, 1e-9), "ratio")},
        v,
        "Over three turns, re-feeding the whole transcript every turn reproduced " + pct(same) +
            " of the replies generated with the cache kept between turns, at " +
            fmt(refedSeconds / std::max(keptSeconds, 1e-9)) + " times the time. " +
            conclude(v, "Without the kept cache the chat goes elsewhere.",
                     "Re-feeding changes a few reply tokens (rounding of a batched prefill).",
                     "The replies do not depend on keeping the cache; keeping it saves the "
                     "re-feeding."),
        EvidenceView::Drift, "the re-fed session against the kept one, turn by turn",
        std::move(states));
}

// #68: editing only the memory steers the model.
ExperimentResult insight68(const LabContext& ctx) {
    const int layer = int(ctx.model->config().nLayers / 2);
    state::PatchOptions o;
    o.layer = layer;
    const state::Snapshot donor = otherState(ctx);
    const auto p = take(state::patch(ctx.base, donor, o, ctx.model), "patch");
    const Session original = restoreBase(ctx);
    const Session patched = forced(p.snapshot, ctx);
    const auto next = greedyTokens(original, 4);
    QueryRecorder r1, r2;
    Session a = original, b = patched;
    a.setObserver(&r1);
    b.setObserver(&r2);
    // The patched state's own next-token logits first, then after each of the same 4 tokens.
    std::vector<std::vector<float>> la{a.lastLogits()}, lb{b.lastLogits()};
    for (const auto& l : logitsAfterEach(a, next))
        la.push_back(l);
    for (const auto& l : logitsAfterEach(b, next))
        lb.push_back(l);
    a.setObserver(nullptr);
    b.setObserver(nullptr);
    const double k = maxKl(la, lb);
    const auto& mc = ctx.model->config();
    double tv = 0, meanTv = 0;
    int mostMovedHead = 0;
    for (int h = 0; h < int(mc.nHeads); ++h) {
        const Rows x = attentionRows(*ctx.model, a.cache(), r1, 1, layer, h);
        const Rows y = attentionRows(*ctx.model, b.cache(), r2, 1, layer, h);
        const double t = totalVariation(x.p.data(), y.p.data(), x.keys);
        if (t > tv)
            mostMovedHead = h;
        tv = std::max(tv, t);
        meanTv += t / double(mc.nHeads);
    }
    // Holds if the patched memory moves both the next-token distribution (max KL over the 5
    // steps > 1e-3) and the patched layer's attention (max TV over heads > 0.05) for the same
    // new tokens; a caveat if one of them moves.
    const int parts = (k > 1e-3) + (tv > 0.05);
    const V v = parts == 2 ? V::Holds : parts == 1 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        68,
        {measure("max KL over 5 steps, patched vs original", k, "nats",
                 "the next token, then after each of 4 shared tokens"),
         measure("max attention TV at the patched layer", tv, "probability",
                 "the last query, max over heads"),
         measure("mean attention TV at the patched layer", meanTv, "probability"),
         measure("K/V elements patched",
                 double(p.report.keyElementsChanged + p.report.valueElementsChanged))},
        v,
        "With layer " + std::to_string(layer) +
            "'s K/V patched from another prompt and the text unchanged, the next-token "
            "distributions over the same 4 new tokens move by up to " +
            fmt(k) + " nats, and the last query's attention at that layer by up to " + fmt(tv) +
            " (total variation; mean over heads " + fmt(meanTv) + "). " +
            conclude(v, "Editing memory alone steers the model.",
                     k > 1e-3 ? "Editing memory alone moves the output, with the attention at the "
                                "patched layer nearly unchanged."
                              : "Editing memory alone redirects the attention, but the output "
                                "hardly moves.",
                     "Editing this layer's memory changes neither the attention nor the output."),
        EvidenceView::Attention, "the patched layer's last row, original vs patched",
        {{"layer " + std::to_string(layer) + " patched, then 4 shared tokens", capture(b, ctx)},
         {"original, then 4 shared tokens", capture(a, ctx)},
         {"donor (reversed prompt)", donor}},
        Focus{layer, mostMovedHead, b.cache().length() - 1});
}

// #69: K/V steered while the tokens stay fixed.
ExperimentResult insight69(const LabContext& ctx) {
    const int mid = int(ctx.model->config().nLayers / 2);
    std::vector<state::FaultLabRow> rows;
    for (const char* scale : {"0.01", "0.1", "1"})
        rows.push_back(
            faultRow(ctx, "corrupt-layer", {{"layer", std::to_string(mid)}, {"scale", scale}}, 32));
    const bool grows = rows[0].maxKl <= rows[1].maxKl && rows[1].maxKl <= rows[2].maxKl;
    // Holds if the strongest perturbation changes a greedy token within 32 steps and the
    // drift grows with the noise; a caveat if the drift grows but no token changes; does not
    // hold if the drift stays below 1e-6.
    const V v = rows[2].maxKl <= 1e-6                      ? V::DoesNotHold
                : rows[2].firstDivergingStep >= 0 && grows ? V::Holds
                                                           : V::HoldsWithCaveat;
    return result(
        69,
        {measure("max KL, noise at scale 1", rows[2].maxKl, "nats",
                 "layer " + std::to_string(mid) + ", 32 greedy steps"),
         measure("first diverging step, scale 1", rows[2].firstDivergingStep, "", "-1: none"),
         measure("max KL, scale 0.1", rows[1].maxKl, "nats"),
         measure("first diverging step, scale 0.1", rows[1].firstDivergingStep, "", "-1: none"),
         measure("max KL, scale 0.01", rows[0].maxKl, "nats")},
        v,
        "With the token buffer untouched, noise of 0.01, 0.1 and 1 times layer " +
            std::to_string(mid) + "'s RMS moves 32 greedy steps by up to " + fmt(rows[0].maxKl) +
            ", " + fmt(rows[1].maxKl) + " and " + fmt(rows[2].maxKl) +
            " nats, the first token departing at step " +
            std::to_string(rows[2].firstDivergingStep) + " at full strength (-1 = never).",
        EvidenceView::Faults, "corrupt-layer at three scales",
        {{"clean", ctx.base},
         {"corrupt-layer noise at scale 1, layer " + std::to_string(mid),
          faulty(ctx, "corrupt-layer", {{"layer", std::to_string(mid)}, {"scale", "1"}})},
         {"corrupt-layer noise at scale 0.1, layer " + std::to_string(mid),
          faulty(ctx, "corrupt-layer", {{"layer", std::to_string(mid)}, {"scale", "0.1"}})}},
        Focus{mid, -1, -1});
}

} // namespace

std::vector<Entry> controlExperiments() {
    return {{61, insight61}, {63, insight63}, {64, insight64}, {65, insight65},
            {66, insight66}, {67, insight67}, {68, insight68}, {69, insight69}};
}

} // namespace kvscope::insights::kit
