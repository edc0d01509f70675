// The insights registry: the 80 numbered claims of the compendium "The 80 Insights"
// (one of the source documents the project started from; it is not part of this repository),
// each restated in kvscope's own words and classified by how kvscope can settle it.
//
// Classes:
//   measurable    an experiment with kvscope's operations (restore, replay, drift, truncate,
//                 patch, splice, fork, fault injection, transplant, induction probe, eviction,
//                 observer hooks, dtype round trips, timing) on one small model decides it;
//                 `experiment` says how, `note` may add a caveat;
//   definitional  true (or false) by construction; `note` says why and points at the code or
//                 view that shows it (paths relative to the source root);
//   not-testable  one model on one machine cannot decide it; `note` says why.
// A claim is stated as the compendium makes it, loose or wrong parts included: the registry
// records what is claimed, experiments and notes say what holds. The registry holds no
// verdicts; those are computed by the experiments.
//
// Thread-safety: the registry is built once on first use (a function-local static) and is
// immutable afterwards; every function may be called from any thread.
#pragma once

#include <string>
#include <vector>

namespace kvscope::insights {

enum class InsightClass { Measurable, Definitional, NotTestable };
// "measurable" | "definitional" | "not-testable"
std::string className(InsightClass c);

struct Insight {
    int number = 0;       // 1..80, the compendium's numbering
    int tier = 0;         // 1..8
    std::string tierName; // == tierNames()[tier - 1]
    std::string claim;    // one line, kvscope's paraphrase of what the compendium claims
    InsightClass cls = InsightClass::Measurable;
    // definitional: why, with a pointer to code or a view; not-testable: why one model cannot
    // decide it; measurable: empty or a short caveat.
    std::string note;
    // measurable: one sentence planning the experiment that decides it on the demo model
    // (4 layers, 4 query heads / 1 KV head, dim 128) and stories260K (5 layers, 8 / 4 heads,
    // dim 64); empty otherwise.
    std::string experiment;
};

// All 80, ordered by number (registry()[i].number == i + 1).
const std::vector<Insight>& registry();
// nullptr when no insight has that number.
const Insight* findInsight(int number);
// The eight tier names, tier 1 first.
std::vector<std::string> tierNames();

} // namespace kvscope::insights
