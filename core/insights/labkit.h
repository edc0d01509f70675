// The lab's private toolkit: small measurement helpers shared by the experiments
// (core/insights/tier*.cpp). Everything that is an operation of kvscope (restore, replay,
// drift, truncate, patch, splice, fork, faults, attention) is called from core, never
// re-implemented here; what is here only measures (relative L2, agreement, KL over
// step lists) or builds inputs (other prompts of the same length, longer states).
//
// Helpers throw KvError with the step named; runExperiment turns it into an error Result.
#pragma once

#include "engine/attention.h"
#include "engine/observer.h"
#include "engine/session.h"
#include "insights/lab.h"
#include "state/probes/compare.h"
#include "state/surgery/faults.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace kvscope::insights::kit {

// ---- errors ----
template <typename T> T take(Result<T> r, const std::string& what) {
    if (!r)
        throw KvError(what + ": " + r.message());
    return std::move(r).value();
}
void check(const Status& s, const std::string& what);

// ---- sessions and states ----
Sampler greedySampler();
Sampler seededSampler(uint64_t seed, float temperature = 1.0f);
// The standard state restored through the validating restore().
Session restoreBase(const LabContext& ctx);
// What a runtime continues from after a forced restore (faults.h: forcedSession).
Session forced(const state::Snapshot& s, const LabContext& ctx);
// A fresh session over `tokens` (one prefill at positions 0..n-1).
Session prefill(const LabContext& ctx, const std::vector<int32_t>& tokens);
// The standard state rebuilt as makeLabContext built it: the prompt in one prefill, then
// every generated token fed alone (the kernels of a generation).
Session live(const LabContext& ctx);
state::Snapshot capture(const Session& s, const LabContext& ctx, const Sampler* sampler = nullptr);
// A snapshot of `s` whose whole token buffer is recorded as the prompt: for a sequence fed in
// one prefill that is not the standard prompt (reversed tokens, another sentence).
state::Snapshot captureAsPrompt(const Session& s, const LabContext& ctx);
// `n` greedy tokens from (a fork of) `s`.
std::vector<int32_t> greedyTokens(const Session& s, int n);
// Feeds `tokens` one at a time into `s`, returning the logits after each.
std::vector<std::vector<float>> logitsAfterEach(Session& s, const std::vector<int32_t>& tokens);
// The standard state greedily extended (or truncated with state::truncate) to `n` tokens.
state::Snapshot stateOfLength(const LabContext& ctx, int64_t n);
// Ids of the same length as the base's token buffer but another order: the first token
// (BOS when the prompt has one) kept, the rest reversed. A second prompt that shares the
// vocabulary and the length, not the sequence.
std::vector<int32_t> reversedTokens(const LabContext& ctx);
// `text` through the model's tokenizer (with its special tokens when `special`).
std::vector<int32_t> encode(const LabContext& ctx, const std::string& text, bool special = true);
// A second fixed sentence of other content (names, objects) than the default one.
const std::string& otherText();

// The base state with `fault` injected by the fault lab (state::injectFault), as the evidence
// views show it.
state::Snapshot faulty(const LabContext& ctx, const std::string& fault,
                       const std::map<std::string, std::string>& params = {});

// ---- measurements ----
// ‖b - a‖ / ‖a‖ over equal-sized float data (0 when both are zero).
double relL2(const std::vector<float>& a, const std::vector<float>& b);
// K and V together, layer `layer`, `count` slots from slot `beginA` of a and `beginB` of b.
double slotsRelL2(const KvCache& a, const KvCache& b, int layer, int64_t beginA, int64_t beginB,
                  int64_t count);
// Every slot both hold (the shorter length), K and V together.
double layerRelL2(const KvCache& a, const KvCache& b, int layer);
double maxLayerRelL2(const KvCache& a, const KvCache& b);
// The layer whose K/V differ most (layerRelL2); -1 when none differs (the evidence's focus).
int mostChangedLayer(const KvCache& a, const KvCache& b);
double kl(const std::vector<float>& reference, const std::vector<float>& candidate);
double meanKl(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& c);
double maxKl(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& c);
// Share of indices (over the longer sequence) where both hold the same token; 1 when both are
// empty.
double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b);
// Greedy drift of b against a over `steps` (state::drift).
state::DriftResult driftGreedy(const Session& a, const Session& b, int steps);
// One fault on the base state, measured over `steps` greedy steps: the fault lab's own row
// (state::faultLab) for the documented fault; with `params` (a variant: another offset, scale,
// dtype, which faultLab does not take) the same steps run here: inject, verify through a
// .kvsnap file, forced restore, drift against the clean state.
state::FaultLabRow faultRow(const LabContext& ctx, const std::string& fault,
                            const std::map<std::string, std::string>& params = {}, int steps = 16);

// The attention rows of the last `rows` recorded queries of (layer, head) over `cache`.
struct Rows {
    int64_t rows = 0, keys = 0;
    std::vector<float> p; // [rows, keys]
};
Rows attentionRows(const Model& model, const KvCache& cache, const QueryRecorder& rec, int64_t rows,
                   int layer, int head);
// Total variation between two attention rows of the same length.
double totalVariation(const float* a, const float* b, int64_t n);

// An observer that zeroes one intermediate (observer.h names) at one layer: an ablation.
class Ablation : public Observer {
public:
    Ablation(std::string name, int layer) : m_name(std::move(name)), m_layer(layer) {}
    bool wants(std::string_view name, int layer) const override {
        return name == m_name && layer == m_layer;
    }
    void observe(std::string_view, int, const HostTensor&) override {}
    bool replace(std::string_view name, int layer, HostTensor& value) override;

private:
    std::string m_name;
    int m_layer;
};

// ---- time ----
class Stopwatch {
public:
    double seconds() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    }

private:
    std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};
// A file path under the system temp folder, unique to this process and call; removed by
// TempFile's destructor.
class TempFile {
public:
    TempFile();
    ~TempFile();
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return m_path; }

private:
    std::string m_path;
};

// ---- reporting ----
// %.3g, "0" for zero, "inf"/"nan" as such.
std::string fmt(double v);
// A percentage with one decimal: "87.5 %".
std::string pct(double share);
Measurement measure(std::string name, double value, std::string unit = {}, std::string note = {});
// The concluding sentence of a `why`, picked by the computed verdict, so that the prose can
// never contradict the numbers.
std::string conclude(Verdict v, const std::string& holds, const std::string& caveat,
                     const std::string& doesNot);
// `view` and `hint`: the view that shows the effect and what to look at in it;
// `states` and `focus`: what the view opens (lab.h, ExperimentResult::states).
ExperimentResult result(int number, std::vector<Measurement> m, Verdict v, std::string why,
                        EvidenceView view, const std::string& hint,
                        std::vector<EvidenceState> states = {}, Focus focus = {});

// ---- the experiments, by tier file (tier1.cpp ... ) ----
using ExperimentFn = ExperimentResult (*)(const LabContext&);
struct Entry {
    int number;
    ExperimentFn run;
};
std::vector<Entry> foundationExperiments();   // tier1.cpp: 1-8
std::vector<Entry> mechanicsExperiments();    // tier2.cpp: 12-20
std::vector<Entry> replayExperiments();       // tier3.cpp: 21-30
std::vector<Entry> alignmentExperiments();    // tier4.cpp: 31-40
std::vector<Entry> architectureExperiments(); // tier5.cpp: 43-58
std::vector<Entry> controlExperiments();      // tier7.cpp: 61-69
std::vector<Entry> edgeExperiments();         // tier8.cpp: 71-79

} // namespace kvscope::insights::kit
