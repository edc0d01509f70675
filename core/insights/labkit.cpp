// The lab's measurement helpers (labkit.h).
#include "insights/labkit.h"

#include "state/ledger/snapshotio.h"
#include "state/surgery/surgery.h"
#include "state/verify/verifyfile.h"
#include "state/verify/restore.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

namespace kvscope::insights::kit {

void check(const Status& s, const std::string& what) {
    if (!s)
        throw KvError(what + ": " + s.message());
}

Sampler greedySampler() {
    return Sampler(SamplerSettings{0.0f, 0.9f, 0, 42});
}

Sampler seededSampler(uint64_t seed, float temperature) {
    return Sampler(SamplerSettings{temperature, 0.9f, 0, seed});
}

Session restoreBase(const LabContext& ctx) {
    return take(state::restore(ctx.base, ctx.model), "restoring the standard state").session;
}

Session forced(const state::Snapshot& s, const LabContext& ctx) {
    return take(state::forcedSession(s, ctx.model), "forced restore");
}

Session prefill(const LabContext& ctx, const std::vector<int32_t>& tokens) {
    Session s(ctx.model);
    check(s.feed(tokens), "prefill");
    return s;
}

Session live(const LabContext& ctx) {
    Session s = prefill(ctx, ctx.prompt);
    for (std::size_t i = ctx.prompt.size(); i < ctx.base.tokens.size(); ++i) {
        const int32_t one[1] = {ctx.base.tokens[i]};
        check(s.feed(one), "feeding the generated tokens");
    }
    return s;
}

state::Snapshot capture(const Session& s, const LabContext& ctx, const Sampler* sampler) {
    state::CaptureOptions o;
    o.sampler = sampler;
    o.prompt = state::plainPromptMeta(ctx.prompt, ctx.model->config().bosId);
    if (o.prompt.promptTokens > int64_t(s.tokens().size()))
        o.prompt = state::plainPromptMeta(s.tokens(), ctx.model->config().bosId);
    return take(state::capture(s, o), "capture");
}

state::Snapshot captureAsPrompt(const Session& s, const LabContext& ctx) {
    state::CaptureOptions o;
    o.prompt = state::plainPromptMeta(s.tokens(), ctx.model->config().bosId);
    return take(state::capture(s, o), "capture");
}

state::Snapshot faulty(const LabContext& ctx, const std::string& fault,
                       const std::map<std::string, std::string>& params) {
    state::FaultContext fc;
    fc.model = ctx.model;
    fc.params = params;
    return take(state::injectFault(fault, ctx.base, fc), "injecting " + fault);
}

std::vector<int32_t> greedyTokens(const Session& s, int n) {
    Session fork = s;
    Sampler g = greedySampler();
    return take(fork.generate(n, g), "greedy generation").tokens;
}

std::vector<std::vector<float>> logitsAfterEach(Session& s, const std::vector<int32_t>& tokens) {
    std::vector<std::vector<float>> out;
    for (int32_t t : tokens) {
        const int32_t one[1] = {t};
        check(s.feed(one), "teacher forcing");
        out.push_back(s.lastLogits());
    }
    return out;
}

state::Snapshot stateOfLength(const LabContext& ctx, int64_t n) {
    const auto have = int64_t(ctx.base.tokens.size());
    if (n == have)
        return ctx.base;
    if (n < have)
        return take(state::truncate(ctx.base, n, ctx.model), "truncate").snapshot;
    Session s = restoreBase(ctx);
    Sampler g = greedySampler();
    // Greedy text may stop at EOS/BOS before n: continue with the prompt's tokens then, so
    // that every length is reachable.
    std::size_t filler = 0;
    while (int64_t(s.tokens().size()) < n) {
        auto r = take(s.generate(int(n - int64_t(s.tokens().size())), g), "extending the state");
        if (int64_t(s.tokens().size()) < n && r.stopReason != "steps") {
            const int32_t one[1] = {ctx.prompt[1 + filler++ % (ctx.prompt.size() - 1)]};
            check(s.feed(one), "extending the state");
        }
    }
    return capture(s, ctx, &g);
}

std::vector<int32_t> reversedTokens(const LabContext& ctx) {
    std::vector<int32_t> t = ctx.base.tokens;
    std::reverse(t.begin() + 1, t.end());
    return t;
}

std::vector<int32_t> encode(const LabContext& ctx, const std::string& text, bool special) {
    tok::EncodeOptions o;
    o.addSpecialTokens = special;
    return ctx.model->tokenizer()->encode(text, o);
}

const std::string& otherText() {
    static const std::string kText =
        "Tom and his dog Max ran to the big red barn to find the farmer and her golden hen.";
    return kText;
}

double relL2(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size())
        throw KvError("relative L2: sizes differ");
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = double(b[i]) - double(a[i]);
        num += d * d;
        den += double(a[i]) * double(a[i]);
    }
    if (num == 0)
        return 0;
    return den == 0 ? INFINITY : std::sqrt(num / den);
}

namespace {
// Slots [begin, begin + count) of every head of a [heads, length, dim] tensor, flattened.
std::vector<float> slots(const HostTensor& t, int64_t begin, int64_t count) {
    const int64_t heads = t.dim(0), len = t.dim(1), dim = t.dim(2);
    if (begin < 0 || begin + count > len)
        throw KvError("slot range outside the cache");
    std::vector<float> out;
    out.reserve(std::size_t(heads * count * dim));
    for (int64_t h = 0; h < heads; ++h) {
        const float* p = t.data.data() + (h * len + begin) * dim;
        out.insert(out.end(), p, p + count * dim);
    }
    return out;
}
} // namespace

double slotsRelL2(const KvCache& a, const KvCache& b, int layer, int64_t beginA, int64_t beginB,
                  int64_t count) {
    std::vector<float> x = slots(a.key(layer), beginA, count);
    std::vector<float> y = slots(b.key(layer), beginB, count);
    const std::vector<float> xv = slots(a.value(layer), beginA, count);
    const std::vector<float> yv = slots(b.value(layer), beginB, count);
    x.insert(x.end(), xv.begin(), xv.end());
    y.insert(y.end(), yv.begin(), yv.end());
    return relL2(x, y);
}

double layerRelL2(const KvCache& a, const KvCache& b, int layer) {
    return slotsRelL2(a, b, layer, 0, 0, std::min(a.length(), b.length()));
}

double maxLayerRelL2(const KvCache& a, const KvCache& b) {
    double m = 0;
    for (int l = 0; l < int(a.layers()); ++l)
        m = std::max(m, layerRelL2(a, b, l));
    return m;
}

int mostChangedLayer(const KvCache& a, const KvCache& b) {
    int layer = -1;
    double worst = 0;
    for (int l = 0; l < int(a.layers()); ++l)
        if (const double r = layerRelL2(a, b, l); r > worst) {
            worst = r;
            layer = l;
        }
    return layer;
}

double kl(const std::vector<float>& reference, const std::vector<float>& candidate) {
    return state::compareLogits(reference, candidate).kl;
}

double meanKl(const std::vector<std::vector<float>>& ref,
              const std::vector<std::vector<float>>& c) {
    const std::size_t n = std::min(ref.size(), c.size());
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i)
        sum += kl(ref[i], c[i]);
    return n ? sum / double(n) : 0;
}

double maxKl(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& c) {
    double m = 0;
    for (std::size_t i = 0; i < std::min(ref.size(), c.size()); ++i)
        m = std::max(m, kl(ref[i], c[i]));
    return m;
}

double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const std::size_t n = std::max(a.size(), b.size());
    if (n == 0)
        return 1;
    std::size_t same = 0;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        same += a[i] == b[i];
    return double(same) / double(n);
}

state::DriftResult driftGreedy(const Session& a, const Session& b, int steps) {
    return take(state::drift(a, b, steps, greedySampler()), "drift");
}

state::FaultLabRow faultRow(const LabContext& ctx, const std::string& fault,
                            const std::map<std::string, std::string>& params, int steps) {
    if (params.empty()) {
        // The documented fault: the fault lab's own row.
        state::FaultContext fc;
        fc.model = ctx.model;
        state::FaultLabOptions o;
        o.steps = steps;
        o.faults = {fault};
        auto rows = take(state::faultLab(ctx.base, fc, o), "fault lab (" + fault + ")");
        if (rows.size() != 1)
            throw KvError("fault lab (" + fault + "): no row");
        return rows.front();
    }
    // faultLab() runs every fault with its documented defaults only (it clears the params): a
    // variant (another offset, scale, dtype) is measured by the same row function.
    state::FaultContext fc;
    fc.model = ctx.model;
    fc.params = params;
    TempFile file;
    state::FaultLabRow row =
        state::measureFault(fault, ctx.base, fc, restoreBase(ctx), steps, file.path());
    // A variant the experiment asks for must apply: one that does not is the experiment's error.
    if (!row.applied())
        throw KvError("fault " + fault + ": " + row.error);
    return row;
}

Rows attentionRows(const Model& model, const KvCache& cache, const QueryRecorder& rec, int64_t rows,
                   int layer, int head) {
    const auto q = rec.queries(layer);
    const int64_t stride = int64_t(rec.heads()) * rec.headDim();
    const int64_t have = rec.rows(layer);
    if (rows > have)
        throw KvError("attention: fewer recorded queries than asked");
    const auto last = q.subspan(std::size_t((have - rows) * stride));
    auto p = take(attentionPattern(model, cache, last, rows, layer, head), "attention pattern");
    Rows r;
    r.rows = p.queries;
    r.keys = p.keys;
    r.p.assign(p.probs.begin(), p.probs.end());
    return r;
}

double totalVariation(const float* a, const float* b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
        s += std::abs(double(a[i]) - double(b[i]));
    return s / 2;
}

bool Ablation::replace(std::string_view name, int layer, HostTensor& value) {
    if (name != m_name || layer != m_layer)
        return false;
    std::fill(value.data.begin(), value.data.end(), 0.0f);
    return true;
}

TempFile::TempFile() {
    static std::atomic<int> counter{0};
    m_path =
        (std::filesystem::temp_directory_path() / ("kvscope-lab-" + std::to_string(::getpid()) +
                                                   "-" + std::to_string(counter++) + ".kvsnap"))
            .string();
}

TempFile::~TempFile() {
    std::error_code ec;
    std::filesystem::remove(m_path, ec);
}

std::string fmt(double v) {
    if (v == 0)
        return "0";
    if (std::isnan(v))
        return "nan";
    if (std::isinf(v))
        return v > 0 ? "inf" : "-inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

std::string pct(double share) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", share * 100);
    return buf;
}

Measurement measure(std::string name, double value, std::string unit, std::string note) {
    return Measurement{std::move(name), value, std::move(unit), std::move(note)};
}

std::string conclude(Verdict v, const std::string& holds, const std::string& caveat,
                     const std::string& doesNot) {
    switch (v) {
    case Verdict::Holds:
        return holds;
    case Verdict::HoldsWithCaveat:
        return caveat;
    case Verdict::DoesNotHold:
        return doesNot;
    }
    return doesNot;
}

ExperimentResult result(int number, std::vector<Measurement> m, Verdict v, std::string why,
                        EvidenceView view, const std::string& hint,
                        std::vector<EvidenceState> states, Focus focus) {
    ExperimentResult r;
    r.number = number;
    r.measurements = std::move(m);
    r.verdict = v;
    r.why = std::move(why);
    r.view = view;
    r.evidence = std::string(evidenceViewName(view)) + ": " + hint;
    r.states = std::move(states);
    r.focus = focus;
    return r;
}

} // namespace kvscope::insights::kit
