// Tier 4 experiments (restoration and alignment: the rules of time): insights 31, 32, 34, 35,
// 36, 37, 38, 40 (39 is definitional: a sampler never sees the cache).
#include "insights/labkit.h"

#include "state/surgery/surgery.h"
#include "state/verify/restore.h"

#include <algorithm>
#include <cmath>

namespace kvscope::insights::kit {
namespace {

using V = Verdict;

// `steps` tokens sampled from a fork of `s` with a fresh sampler of `seed` (temperature 1).
std::vector<int32_t> sampled(const Session& s, uint64_t seed, int steps) {
    Session fork = s;
    Sampler sampler = seededSampler(seed);
    return take(fork.generate(steps, sampler), "sampling").tokens;
}

// #31: cache, position and seed each needed for a reproducible run.
ExperimentResult insight31(const LabContext& ctx) {
    const int steps = 32;
    const auto ref = sampled(restoreBase(ctx), 11, steps);
    const double again = agreement(ref, sampled(restoreBase(ctx), 11, steps));
    const double seed = agreement(ref, sampled(restoreBase(ctx), 12, steps));
    const auto offset = take(
        state::injectFault("position-offset", ctx.base, state::FaultContext{ctx.model, {}, {}, {}}),
        "position-offset");
    const double position = agreement(ref, sampled(forced(offset, ctx), 11, steps));
    const Session replayed = prefill(ctx, ctx.base.tokens);
    const double replay = agreement(ref, sampled(replayed, 11, steps));
    // Holds if everything restored reproduces the run (agreement 1) while changing the seed,
    // the positions and the cache (a replay) each break it (< 1); a caveat if the seed and the
    // positions break it but a replayed cache reproduces it; otherwise it does not hold.
    const bool base = again == 1.0 && seed < 1.0 && position < 1.0;
    const V v = !base ? V::DoesNotHold : replay < 1.0 ? V::Holds : V::HoldsWithCaveat;
    return result(
        31,
        {measure("agreement, cache replaced by a replay", replay, "ratio",
                 "32 tokens at temperature 1, seed 11"),
         measure("agreement, everything restored", again, "ratio"),
         measure("agreement, seed changed", seed, "ratio"),
         measure("agreement, positions offset by one", position, "ratio")},
        v,
        "Against a seeded temperature-1 run of 32 tokens, the same restore and seed agree on " +
            pct(again) + " of the tokens, another seed on " + pct(seed) +
            ", positions offset by one on " + pct(position) +
            ", and the cache rebuilt by a replay on " + pct(replay) +
            (replay < 1.0 ? "."
                          : ": the seed and the positions must be kept, while the cache "
                            "may be recomputed from the tokens."),
        EvidenceView::Drift, "each variant against the reference run",
        {{"restored (the reference run)", ctx.base},
         {"cache replaced by a replay", capture(replayed, ctx)},
         {"positions offset by one", offset}});
}

// #32: resuming needs position and cache to agree.
ExperimentResult insight32(const LabContext& ctx) {
    const auto offset = faultRow(ctx, "position-offset", {}, 32);
    const auto stale = faultRow(ctx, "stale-next-position", {}, 32);
    // Holds if both mismatches move the output (max KL > 1e-3); a caveat if one does.
    const int moved = (offset.maxKl > 1e-3) + (stale.maxKl > 1e-3);
    const V v = moved == 2 ? V::Holds : moved == 1 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        32,
        {measure("min max-KL of the two mismatches", std::min(offset.maxKl, stale.maxKl), "nats",
                 "32 greedy steps"),
         measure("max KL, positions offset by one", offset.maxKl, "nats"),
         measure("first diverging step, offset", offset.firstDivergingStep, "", "-1: none"),
         measure("max KL, next position one behind", stale.maxKl, "nats"),
         measure("first diverging step, stale", stale.firstDivergingStep, "", "-1: none")},
        v,
        "Restored with every position off by one, the state drifts by up to " + fmt(offset.maxKl) +
            " nats over 32 steps (first different token: " +
            std::to_string(offset.firstDivergingStep) +
            "); with the next position one behind, by " + fmt(stale.maxKl) +
            " nats (first different token: " + std::to_string(stale.firstDivergingStep) +
            ", -1 = none).",
        EvidenceView::Faults, "position-offset and stale-next-position",
        {{"clean", ctx.base},
         {"positions offset by one (position-offset)", faulty(ctx, "position-offset")},
         {"next position one behind (stale-next-position)", faulty(ctx, "stale-next-position")}});
}

// #34: tokens after a restore must take the next position.
ExperimentResult insight34(const LabContext& ctx) {
    const Session base = restoreBase(ctx);
    const int32_t token = greedyTokens(base, 1).at(0);
    const int32_t one[1] = {token};
    const auto& mc = ctx.model->config();
    auto run = [&](int64_t shift, QueryRecorder& rec) {
        Session s = base;
        s.setNextPosition(s.nextPosition() + shift);
        s.setObserver(&rec);
        check(s.feed(one), "feeding at a shifted position");
        s.setObserver(nullptr);
        return s;
    };
    QueryRecorder r0, rGap, rBack;
    const Session right = run(0, r0), gap = run(4, rGap), back = run(-4, rBack);
    auto tv = [&](const Session& s, const QueryRecorder& rec) {
        double sum = 0;
        for (int l = 0; l < int(mc.nLayers); ++l)
            for (int h = 0; h < int(mc.nHeads); ++h) {
                const Rows a = attentionRows(*ctx.model, right.cache(), r0, 1, l, h);
                const Rows b = attentionRows(*ctx.model, s.cache(), rec, 1, l, h);
                sum += totalVariation(a.p.data(), b.p.data(), a.keys);
            }
        return sum / double(mc.nLayers * mc.nHeads);
    };
    const double klGap = kl(right.lastLogits(), gap.lastLogits());
    const double klBack = kl(right.lastLogits(), back.lastLogits());
    // Holds if both a gap of 4 and 4 positions back move the next-token distribution by more
    // than 1e-3 nats; a caveat if one does; otherwise the position does not matter.
    const int moved = (klGap > 1e-3) + (klBack > 1e-3);
    const V v = moved == 2 ? V::Holds : moved == 1 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        34,
        {measure("KL, next token after a gap of 4", klGap, "nats"),
         measure("KL, next token 4 positions back", klBack, "nats"),
         measure("mean attention TV, gap", tv(gap, rGap), "probability"),
         measure("mean attention TV, back", tv(back, rBack), "probability")},
        v,
        "Fed after a restore at the correct position, after a gap of 4 and 4 positions back, "
        "the next token's distribution moves by " +
            fmt(klGap) + " and " + fmt(klBack) +
            " nats, and its attention rows by a mean total variation of " + fmt(tv(gap, rGap)) +
            " and " + fmt(tv(back, rBack)) + ".",
        EvidenceView::Attention, "the new token's row in each variant",
        {{"fed at the next position", capture(right, ctx)},
         {"fed after a gap of 4", capture(gap, ctx)},
         {"fed 4 positions back", capture(back, ctx)}},
        Focus{-1, -1, int64_t(right.tokens().size()) - 1});
}

// #35: a shift of a single position already ruins the output.
ExperimentResult insight35(const LabContext& ctx) {
    const auto row = faultRow(ctx, "position-offset", {}, 32);
    const state::Snapshot faulty = take(
        state::injectFault("position-offset", ctx.base, state::FaultContext{ctx.model, {}, {}, {}}),
        "position-offset");
    const auto d = driftGreedy(restoreBase(ctx), forced(faulty, ctx), 32);
    int top1 = 0;
    for (const auto& s : d.steps)
        top1 += s.logits.top1Agree;
    const double agree = d.steps.empty() ? 1.0 : double(top1) / double(d.steps.size());
    // Holds if a one-position shift ruins the output (top-1 agreement < 75 % over 32 steps);
    // a caveat if it changes the distribution (max KL > 1e-3) without ruining it; otherwise
    // it does not hold.
    const V v = agree < 0.75 ? V::Holds : d.maxKl > 1e-3 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        35,
        {measure("top-1 agreement, positions shifted by one", agree, "ratio", "32 greedy steps"),
         measure("max KL", d.maxKl, "nats"),
         measure("first diverging step", d.firstDivergingStep, "", "-1: none"),
         measure("verify caught it", row.caught ? 1 : 0)},
        v,
        "With every position shifted by one, 32 teacher-forced greedy steps keep the clean "
        "state's top-1 token " +
            pct(agree) + " of the time (max KL " + fmt(d.maxKl) + " nats, first different token " +
            std::to_string(d.firstDivergingStep) +
            ", -1 = none): a one-token shift perturbs the distribution " +
            (agree < 0.75 ? "and ruins the text." : "but does not ruin the text on this model."),
        EvidenceView::Faults, "position-offset with offset 1",
        {{"clean", ctx.base}, {"positions shifted by one (position-offset)", faulty}},
        Focus{.steps = 32});
}

// #36: the position counter must restart at zero for a new session.
ExperimentResult insight36(const LabContext& ctx) {
    const auto prompt = encode(ctx, otherText());
    Session atZero(ctx.model);
    check(atZero.feed(prompt), "feed at 0");
    Session carried(ctx.model);
    carried.setNextPosition(int64_t(ctx.base.tokens.size()));
    check(carried.feed(prompt), "feed at a carried-over position");
    const auto pos = state::compareLogits(atZero.lastLogits(), carried.lastLogits());
    Session leaked = restoreBase(ctx);
    check(leaked.feed(prompt), "feed after the old cache");
    const double cacheKl = kl(atZero.lastLogits(), leaked.lastLogits());
    // Holds if carrying the counter over alone (empty cache) moves the output by more than
    // 1e-3 nats; a caveat if only carrying the cache over does (the bleed comes from the
    // cache, not the counter); does not hold if neither does.
    const V v = pos.kl > 1e-3 ? V::Holds : cacheKl > 1e-3 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        36,
        {measure("KL, counter carried over, empty cache", pos.kl, "nats"),
         measure("max |Δlogit|, counter carried over", pos.maxAbs, "logit"),
         measure("KL, old cache left in place", cacheKl, "nats")},
        v,
        "A new prompt started at position " + std::to_string(ctx.base.tokens.size()) +
            " instead of 0, with an empty cache, gives logits within KL " + fmt(pos.kl) +
            " nats (max |Δ| " + fmt(pos.maxAbs) +
            ") of a start at 0; leaving the old cache in place moves them by " + fmt(cacheKl) +
            " nats. " +
            conclude(v, "Carrying the counter over changes the output by itself.",
                     "Rotary attention only sees relative distances: the bleed is the cache, not "
                     "the counter.",
                     "Neither the counter nor the old cache changed the output here."),
        EvidenceView::Faults, "leaked-state; positions: the first position of a new session",
        {{"new prompt at position 0", captureAsPrompt(atZero, ctx)},
         {"new prompt on the old cache", capture(leaked, ctx)},
         {"new prompt at position " + std::to_string(ctx.base.tokens.size()) + ", empty cache",
          captureAsPrompt(carried, ctx)}});
}

// #37: a wrong alignment raises no error.
ExperimentResult insight37(const LabContext& ctx) {
    int raised = 0, caught = 0, moved = 0;
    const std::vector<std::string> faults = {"position-offset", "stale-next-position",
                                             "truncated-cache", "duplicate-bos"};
    std::string detail;
    struct Shown {
        double maxKl;
        std::string fault;
        bool caught;
    };
    std::vector<Shown> shown; // the faults the engine continued, for the evidence
    int n = 0;                // the faults that could be injected: the others test nothing
    for (const auto& f : faults) {
        const auto row = faultRow(ctx, f, {}, 16);
        if (!row.applied()) {
            detail += f + ": could not be injected; ";
            continue;
        }
        ++n;
        if (row.error.empty())
            shown.push_back({std::isnan(row.maxKl) ? -1.0 : row.maxKl, f, row.caught});
        raised += row.engineRaised();
        caught += row.caught;
        moved += row.effect();
        detail += f +
                  (row.engineRaised() ? ": the engine refused it" : ": max KL " + fmt(row.maxKl)) +
                  (row.caught ? ", caught" : ", missed") + "; ";
    }
    if (n == 0)
        throw KvError("no alignment fault could be injected into this model's state");
    // The evidence: the clean state and the (at most two) continued faults that moved the
    // output most.
    std::stable_sort(shown.begin(), shown.end(),
                     [](const Shown& a, const Shown& b) { return a.maxKl > b.maxKl; });
    std::vector<EvidenceState> states = {{"clean", ctx.base}};
    for (std::size_t i = 0; i < shown.size() && i < 2; ++i)
        states.push_back(
            {shown[i].fault + (shown[i].caught ? ", caught by verify" : ", missed by verify"),
             faulty(ctx, shown[i].fault)});
    // Holds if the engine continued every misaligned state without an error and verify
    // caught none (silent everywhere); a caveat if the engine was silent but verify caught
    // some (silent to the model, not to a checker); does not hold if the engine raised one.
    const V v = raised > 0 ? V::DoesNotHold : caught == 0 ? V::Holds : V::HoldsWithCaveat;
    return result(
        37,
        {measure("alignment faults that raised an engine error", raised, "",
                 std::to_string(n) + " faults"),
         measure("faults verify caught", caught), measure("faults that moved the output", moved)},
        v,
        "Of " + std::to_string(n) + " alignment faults (" + detail +
            ") the engine raised an error for " + std::to_string(raised) +
            " and continued the others, " + std::to_string(moved) +
            " of them with a changed output; verify named " + std::to_string(caught) + ". " +
            conclude(v, "The model fails silently, and so does the check.",
                     "The model fails silently; a checker does not have to.",
                     "The engine itself reports misalignment."),
        EvidenceView::Faults, "the alignment rows of the fault lab", std::move(states));
}

// #38: a dtype mismatch can break a restore.
ExperimentResult insight38(const LabContext& ctx) {
    const auto f16 = faultRow(ctx, "dtype-roundtrip", {}, 32);
    const auto bf16 = faultRow(ctx, "dtype-roundtrip", {{"via", "bf16"}}, 32);
    const double worst = std::max(f16.maxKl, bf16.maxKl);
    const bool diverged = f16.firstDivergingStep >= 0 || bf16.firstDivergingStep >= 0;
    // Holds if a round trip through a narrow dtype changes a greedy token within 32 steps or
    // moves the distribution by more than 1e-3 nats; a caveat if it moves it by more than 1e-6
    // without changing a token; otherwise it does not hold.
    const V v = diverged || worst > 1e-3 ? V::Holds
                : worst > 1e-6           ? V::HoldsWithCaveat
                                         : V::DoesNotHold;
    return result(
        38,
        {measure("max KL, worst of f16 and bf16 round trips", worst, "nats", "32 greedy steps"),
         measure("max KL, f16", f16.maxKl, "nats"), measure("max KL, bf16", bf16.maxKl, "nats"),
         measure("first diverging step, f16", f16.firstDivergingStep, "", "-1: none"),
         measure("first diverging step, bf16", bf16.firstDivergingStep, "", "-1: none")},
        v,
        "Rounding the f32 cache through f16 moves 32 greedy steps by up to " + fmt(f16.maxKl) +
            " nats (first different token " + std::to_string(f16.firstDivergingStep) +
            "), through bf16 by " + fmt(bf16.maxKl) + " nats (first different token " +
            std::to_string(bf16.firstDivergingStep) + ", -1 = none). " +
            conclude(v, "A narrow dtype breaks the restore.",
                     "A narrow dtype perturbs the distribution without changing a greedy token.",
                     "The round trips change nothing measurable.") +
            " Dropout is not run at inference; the dtype half is measured.",
        EvidenceView::Faults, "dtype-roundtrip via f16 and bf16",
        {{"clean", ctx.base},
         {"round trip through f16", faulty(ctx, "dtype-roundtrip")},
         {"round trip through bf16", faulty(ctx, "dtype-roundtrip", {{"via", "bf16"}})}});
}

// #40: re-feeding identical tokens does not bring the memory back.
ExperimentResult insight40(const LabContext& ctx) {
    const Session restored = restoreBase(ctx);
    const auto cont = greedyTokens(restored, 32);
    Session a = restored, b = prefill(ctx, ctx.base.tokens);
    const state::Snapshot replayedState = capture(b, ctx); // before the teacher forcing
    std::vector<std::vector<float>> la{a.lastLogits()}, lb{b.lastLogits()};
    for (const auto& l : logitsAfterEach(a, cont))
        la.push_back(l);
    for (const auto& l : logitsAfterEach(b, cont))
        lb.push_back(l);
    double maxAbs = 0;
    int top1 = 0;
    for (std::size_t i = 0; i < la.size(); ++i) {
        const auto c = state::compareLogits(la[i], lb[i]);
        maxAbs = std::max(maxAbs, c.maxAbs);
        top1 += c.top1Agree;
    }
    const double worst = maxKl(la, lb);
    // The claim holds if a replay teacher-forced on the same tokens departs from the restored
    // state by more than 1e-2 nats at some step; a caveat above 1e-6; otherwise replay brings
    // the memory back and it does not hold.
    const V v = worst > 1e-2 ? V::Holds : worst > 1e-6 ? V::HoldsWithCaveat : V::DoesNotHold;
    return result(
        40,
        {measure("max KL, replayed vs restored", worst, "nats", "33 teacher-forced steps"),
         measure("max |Δlogit|", maxAbs, "logit"),
         measure("top-1 agreement", double(top1) / double(la.size()), "ratio")},
        v,
        "Teacher-forced on the same 32 continuation tokens, a replayed session and the restored "
        "one stay within KL " +
            fmt(worst) + " nats (max |Δlogit| " + fmt(maxAbs) + ") and agree on the top-1 token " +
            pct(double(top1) / double(la.size())) + " of the time. " +
            conclude(v, "Re-feeding the tokens does not bring the memory back.",
                     "Re-feeding the tokens brings the memory back only approximately.",
                     "Re-feeding the tokens rebuilds the memory."),
        EvidenceView::Drift, "a replayed state against the restored one",
        {{"restored", capture(restored, ctx)}, {"replayed prompt", replayedState}});
}

} // namespace

std::vector<Entry> alignmentExperiments() {
    return {{31, insight31}, {32, insight32}, {34, insight34}, {35, insight35},
            {36, insight36}, {37, insight37}, {38, insight38}, {40, insight40}};
}

} // namespace kvscope::insights::kit
