// The insights lab's public face (lab.h): the standard state, the experiment table, JSON and
// the Markdown report. The experiments themselves are in tier1.cpp ... tier8.cpp.
#include "insights/lab.h"

#include "engine/session.h"
#include "insights/labkit.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace kvscope::insights {

std::string verdictName(Verdict v) {
    switch (v) {
    case Verdict::Holds:
        return "holds";
    case Verdict::HoldsWithCaveat:
        return "holds-with-caveat";
    case Verdict::DoesNotHold:
        return "does-not-hold";
    }
    return "unknown";
}

const Measurement* ExperimentResult::find(const std::string& name) const {
    for (const Measurement& m : measurements)
        if (m.name == name)
            return &m;
    return nullptr;
}

const std::string& defaultLabText() {
    static const std::string kText =
        "The little cat sat by the window and watched the rain fall on the quiet street.";
    return kText;
}

Result<LabContext> makeLabContext(std::shared_ptr<const Model> model, const std::string& text,
                                  int steps) {
    return catchToResult([&]() -> LabContext {
        if (!model)
            throw KvError("insights lab: no model");
        if (!model->tokenizer())
            throw KvError("insights lab: the model has no tokenizer (the experiments encode text)");
        LabContext ctx;
        ctx.model = model;
        ctx.prompt = model->tokenizer()->encode(text);
        if (ctx.prompt.size() < 2)
            throw KvError("insights lab: the text encodes to fewer than 2 tokens");
        // Experiments extend the state by up to 64 tokens and build states of 64 tokens
        // and more: keep 128 positions free.
        const int64_t used = int64_t(ctx.prompt.size()) + std::max(steps, 0);
        if (used + 128 > model->config().maxContext)
            throw KvError("insights lab: prompt and " + std::to_string(steps) +
                          " steps leave fewer than 128 of the model's " +
                          std::to_string(model->config().maxContext) + " positions free");
        Session s(model);
        kit::check(s.feed(ctx.prompt), "insights lab: prompt");
        Sampler greedy = kit::greedySampler();
        for (int i = 0; i < steps; ++i) {
            // Greedy text may end (EOS/BOS) early: then the prompt's tokens continue it, so
            // that the standard state always has `steps` tokens after the prompt.
            auto g = s.generate(1, greedy);
            if (!g)
                throw KvError("insights lab: generation: " + g.message());
            if (g.value().tokens.empty()) {
                const int32_t one[1] = {ctx.prompt[1 + std::size_t(i) % (ctx.prompt.size() - 1)]};
                if (Status st = s.feed(one); !st)
                    throw KvError("insights lab: " + st.message());
            }
        }
        ctx.base = kit::capture(s, ctx, &greedy);
        return ctx;
    });
}

namespace {

const std::map<int, kit::ExperimentFn>& table() {
    static const std::map<int, kit::ExperimentFn> kTable = [] {
        std::map<int, kit::ExperimentFn> t;
        for (auto part :
             {kit::foundationExperiments, kit::mechanicsExperiments, kit::replayExperiments,
              kit::alignmentExperiments, kit::architectureExperiments, kit::controlExperiments,
              kit::edgeExperiments})
            for (const kit::Entry& e : part())
                t[e.number] = e.run;
        return t;
    }();
    return kTable;
}

nlohmann::json number(double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

std::string cell(std::string s) {
    std::string out;
    for (char c : s) {
        if (c == '|')
            out += "\\|";
        else if (c == '\n')
            out += ' ';
        else
            out += c;
    }
    return out;
}

} // namespace

const char* evidenceViewName(EvidenceView v) {
    switch (v) {
    case EvidenceView::Drift:
        return "drift";
    case EvidenceView::Diff:
        return "diff";
    case EvidenceView::Faults:
        return "faults";
    case EvidenceView::Attention:
        return "attention";
    case EvidenceView::Positions:
        return "positions";
    case EvidenceView::Heatmap:
        return "heatmap";
    case EvidenceView::Induction:
        return "induction";
    }
    return "drift";
}

bool evidenceFollowsLive(EvidenceView v) {
    return v == EvidenceView::Attention || v == EvidenceView::Positions ||
           v == EvidenceView::Heatmap;
}

bool hasExperiment(int number) {
    return table().count(number) > 0;
}

std::vector<int> experimentNumbers() {
    std::vector<int> n;
    for (const auto& [k, _] : table())
        n.push_back(k);
    return n;
}

Result<ExperimentResult> runExperiment(int number, const LabContext& ctx) {
    const auto it = table().find(number);
    if (it == table().end())
        return Result<ExperimentResult>::error("insights lab: insight " + std::to_string(number) +
                                               " has no experiment");
    if (!ctx.model || ctx.base.tokens.empty())
        return Result<ExperimentResult>::error(
            "insights lab: no standard state (makeLabContext first)");
    auto r = catchToResult([&] { return it->second(ctx); });
    if (!r)
        return Result<ExperimentResult>::error("insight " + std::to_string(number) + ": " +
                                               r.message());
    return r;
}

nlohmann::json toJson(const Insight& insight, const ExperimentResult* result) {
    nlohmann::json j{{"number", insight.number},
                     {"tier", insight.tier},
                     {"claim", insight.claim},
                     {"class", className(insight.cls)},
                     {"experiment", insight.experiment},
                     {"measurements", nlohmann::json::array()},
                     {"verdict", nullptr},
                     {"why", nullptr},
                     {"evidence", nullptr},
                     {"evidence_view", nullptr},
                     {"evidence_states", nlohmann::json::array()},
                     {"focus", nullptr}};
    if (!result)
        return j;
    for (const Measurement& m : result->measurements)
        j["measurements"].push_back(
            {{"name", m.name}, {"value", number(m.value)}, {"unit", m.unit}, {"note", m.note}});
    j["verdict"] = verdictName(result->verdict);
    j["why"] = result->why;
    j["evidence"] = result->evidence;
    j["evidence_view"] = evidenceViewName(result->view);
    for (const EvidenceState& e : result->states)
        j["evidence_states"].push_back({{"role", e.role},
                                        {"id", e.snapshot.lineage.id},
                                        {"tokens", e.snapshot.tokens.size()},
                                        {"cache_length", e.snapshot.cacheLength}});
    j["focus"] = {{"layer", result->focus.layer},
                  {"head", result->focus.head},
                  {"position", result->focus.position},
                  {"steps", result->focus.steps}};
    return j;
}

std::string
toMarkdownTable(const std::vector<std::pair<const Insight*, const ExperimentResult*>>& rows) {
    std::string out = "| # | claim | class | verdict | key number |\n|---|---|---|---|---|\n";
    for (const auto& [insight, result] : rows) {
        if (!insight)
            continue;
        std::string verdict = "—", key = "—";
        if (result) {
            verdict = verdictName(result->verdict);
            if (!result->measurements.empty()) {
                const Measurement& m = result->measurements.front();
                key = m.name + " = " + kit::fmt(m.value) + (m.unit.empty() ? "" : " " + m.unit);
            }
        }
        out += "| " + std::to_string(insight->number) + " | " + cell(insight->claim) + " | " +
               className(insight->cls) + " | " + verdict + " | " + cell(key) + " |\n";
    }
    return out;
}

} // namespace kvscope::insights
