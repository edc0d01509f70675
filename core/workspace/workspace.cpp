// The workspace (workspace.h): the model, its three rooms (the live session, the snapshot store,
// the lab's cache) and the operations over them. Every operation delegates to the one
// core/state function that does it; what lives here is how the rooms meet — a capture of the
// live session stored as a child of the state it descends from, a restore or a truncation
// made the live session.
#include "workspace/workspace.h"

#include "chat/template.h"
#include "state/ledger/chatprompt.h"
#include "state/ledger/export.h"
#include "state/ledger/snapshotio.h"
#include "tokenizer/tokenizer.h"

#include "formats/jsonerror.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>

namespace kvscope::ws {

namespace st = kvscope::state;

namespace {

// Token ids separated by whitespace or commas (a model without a tokenizer).
Result<std::vector<int32_t>> parseIds(const std::string& text) {
    std::vector<int32_t> ids;
    std::string word;
    auto flush = [&]() -> bool {
        if (word.empty())
            return true;
        char* end = nullptr;
        const long v = std::strtol(word.c_str(), &end, 10);
        if (*end != '\0' || v < 0 || v > INT32_MAX)
            return false;
        ids.push_back(static_cast<int32_t>(v));
        word.clear();
        return true;
    };
    for (const char c : text + " ") {
        if (std::isspace(static_cast<unsigned char>(c)) || c == ',') {
            if (!flush())
                return Result<std::vector<int32_t>>::error(
                    "this model has no tokenizer: type token ids separated by spaces (\"" + word +
                    "\" is not one)");
        } else {
            word += c;
        }
    }
    return ids;
}

} // namespace

bool DriftOutcome::withinTolerance(std::size_t step) const {
    return step < result.steps.size() && st::within(result.steps[step].logits, tolerance);
}

int DriftOutcome::stepsOutsideTolerance() const {
    int n = 0;
    for (std::size_t i = 0; i < result.steps.size(); ++i)
        n += !withinTolerance(i);
    return n;
}

nlohmann::json DriftOutcome::toJson() const {
    nlohmann::json j = st::toJson(result);
    if (j.contains("steps") && j["steps"].is_array())
        for (std::size_t i = 0; i < j["steps"].size() && i < result.steps.size(); ++i)
            j["steps"][i]["within_tolerance"] = withinTolerance(i);
    j["steps_outside_tolerance"] = stepsOutsideTolerance();
    j["profile"] = st::profileName(profile);
    j["tolerance"] = {{"max_kl", tolerance.maxKl},
                      {"max_abs_logit", tolerance.maxAbsLogit},
                      {"require_top1", tolerance.requireTop1},
                      {"min_top5_overlap", tolerance.minTop5Overlap}};
    return j;
}

Result<DriftOutcome> driftSnapshots(const st::Snapshot& a, const st::Snapshot& b,
                                    std::shared_ptr<const Model> model, int steps, bool force,
                                    st::ToleranceProfile profile,
                                    const std::array<std::string, 2>& names) {
    auto ra = st::restore(a, model, {.force = force});
    if (!ra)
        return Result<DriftOutcome>::error(names[0] + ": " + ra.message());
    auto rb = st::restore(b, model, {.force = force});
    if (!rb)
        return Result<DriftOutcome>::error(names[1] + ": " + rb.message());
    auto d = st::drift(ra.value().session, rb.value().session, steps, ra.value().sampler);
    if (!d)
        return d.status();
    DriftOutcome out;
    out.result = std::move(d.value());
    out.profile = profile;
    double scale = 0;
    for (float v : a.lastLogits)
        scale = std::max(scale, static_cast<double>(std::abs(v)));
    out.tolerance = st::toleranceFor(
        profile, model->computeDtype() != "f32" ? model->computeDtype() : a.cacheDtype, scale);
    return out;
}

Result<PreparedPrompt> preparePrompt(const PromptSpec& spec, const Model& model) {
    PreparedPrompt out;
    const auto tok = model.tokenizer();
    const int32_t bos = static_cast<int32_t>(model.config().bosId);
    if (!tok) {
        if (spec.chat)
            return Result<PreparedPrompt>::error(
                "this model has no tokenizer, so it has no chat template: use a raw prompt");
        auto ids = parseIds(spec.text);
        if (!ids)
            return ids.status();
        out.tokens = std::move(ids.value());
        out.meta = st::plainPromptMeta(out.tokens, bos, "explicit");
    } else if (!spec.chat) {
        out.tokens = tok->encode(spec.text);
        out.meta = st::plainPromptMeta(out.tokens, bos, "tokenizer");
    } else {
        const auto source = tok->chatTemplate();
        if (!source)
            return Result<PreparedPrompt>::error(
                "this tokenizer ships no chat template: use a raw prompt");
        auto tmpl = chat::Template::parse(*source, "chat_template");
        if (!tmpl)
            return tmpl.status();
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        if (!spec.system.empty())
            messages.push_back({{"role", "system"}, {"content", spec.system}});
        messages.push_back({{"role", "user"}, {"content", spec.user}});
        st::ChatPromptOptions options;
        options.render.addGenerationPrompt = true;
        auto built = st::buildChatPrompt(*tok, tmpl.value(), messages, options);
        if (!built)
            return built.status();
        out.tokens = std::move(built.value().tokens);
        out.meta = std::move(built.value().meta);
    }
    if (out.tokens.empty())
        return Result<PreparedPrompt>::error("the prompt is empty");
    return out;
}

// ---- model and live session ----

void Workspace::setModel(std::shared_ptr<const Model> model) {
    m_model = std::move(model);
    m_lab.setModel(m_model);
    // Another model: an empty live session, whose first capture is a new root.
    m_live = m_model ? std::make_unique<LiveSession>(m_model) : nullptr;
}

// ---- store ----

std::vector<int64_t> Workspace::liveKeptTokens() const {
    const StoredSnapshot* parent = m_live ? find(m_live->parentId()) : nullptr;
    if (!parent)
        return {};
    return state::keptTokensAfter(*parent->snapshot, int64_t(live()->tokens().size()),
                                  live()->cache().positions());
}

Result<std::shared_ptr<const st::Snapshot>> Workspace::stateFor(const std::string& id) const {
    using R = Result<std::shared_ptr<const st::Snapshot>>;
    if (id.empty()) {
        auto s = captureLive();
        if (!s)
            return s.status();
        return std::make_shared<const st::Snapshot>(std::move(s.value()));
    }
    const StoredSnapshot* e = find(id);
    if (!e)
        return R::error("no snapshot with id " + id);
    return e->snapshot;
}

// ---- operations ----

Result<st::Snapshot> Workspace::captureLive(const std::string& operation,
                                            nlohmann::json parameters) const {
    if (!m_live)
        return Result<st::Snapshot>::error("no model loaded");
    st::CaptureOptions o;
    o.sampler = m_live->sampler();
    o.prompt = m_live->promptMeta();
    o.parentId = m_live->parentId();
    o.operation = operation;
    o.parameters = std::move(parameters);
    const StoredSnapshot* parent = find(m_live->parentId());
    o.parent = parent ? parent->snapshot.get() : nullptr; // an eviction's gaps stay recorded
    return st::capture(m_live->session(), o);
}

Result<st::Snapshot> Workspace::captureNext() const {
    if (!m_live)
        return Result<st::Snapshot>::error("no model loaded");
    const int64_t generated = m_live->generatedSinceParent();
    const bool continued = !m_live->parentId().empty() && generated > 0;
    return continued ? captureLive("continue", {{"generated", generated}}) : captureLive();
}

Result<std::string> Workspace::capture() {
    auto s = captureNext();
    if (!s)
        return s.status();
    const std::string id = add(std::move(s.value()));
    m_live->descendFrom(id);
    return id;
}

Result<st::VerifyResult> Workspace::verify(const std::string& id,
                                           const st::VerifyOptions& options) const {
    if (id.empty()) {
        auto s = captureLive();
        if (!s)
            return s.status();
        return st::verifySnapshot(s.value(), m_model, options);
    }
    const StoredSnapshot* e = find(id);
    if (!e)
        return Result<st::VerifyResult>::error("no snapshot with id " + id);
    return st::verifySnapshot(*e->snapshot, m_model, options, e->readViolations);
}

Result<RestoreOutcome> Workspace::restore(const std::string& id, bool force) {
    if (!m_model)
        return Result<RestoreOutcome>::error("no model loaded");
    const StoredSnapshot* e = find(id);
    if (!e)
        return Result<RestoreOutcome>::error("no snapshot with id " + id);
    const auto snapshot = e->snapshot; // keep it alive across adopt()
    auto r = st::restore(*snapshot, m_model, {.force = force});
    if (!r)
        return r.status();
    RestoreOutcome out;
    out.id = id;
    out.report = std::move(r.value().report);
    out.forced = out.report.hasErrors();
    m_live->adopt(std::move(r.value().session), *snapshot, id, -1);
    return out;
}

Result<std::string> Workspace::truncateLive(int64_t at) {
    if (!m_live)
        return Result<std::string>::error("no model loaded");
    // The truncation's parent: the live session's parent when nothing happened since it,
    // else a capture of the live session first (so the tree shows what was cut).
    std::shared_ptr<const st::Snapshot> source;
    const StoredSnapshot* parent = find(m_live->parentId());
    if (parent && m_live->generatedSinceParent() == 0)
        source = parent->snapshot;
    if (!source || source->tokens != live()->tokens()) {
        auto id = capture();
        if (!id)
            return id.status();
        source = find(id.value())->snapshot;
    }
    auto t = st::truncate(*source, at, m_model);
    if (!t)
        return t.status();
    auto restored = st::restore(t.value().snapshot, m_model, {.force = true});
    if (!restored)
        return restored.status(); // the live session is untouched
    const std::string id = add(std::move(t.value().snapshot));
    m_live->adopt(std::move(restored.value().session), *find(id)->snapshot, id, at);
    return id;
}

Result<DiffOutcome> Workspace::diff(const std::string& a, const std::string& b) const {
    auto sa = stateFor(a);
    if (!sa)
        return Result<DiffOutcome>::error("A: " + sa.message());
    auto sb = stateFor(b);
    if (!sb)
        return Result<DiffOutcome>::error("B: " + sb.message());
    st::DiffReport report = st::diff(*sa.value(), *sb.value());
    return DiffOutcome{std::move(report), sa.value(), sb.value()};
}

Result<DriftOutcome> Workspace::drift(const std::string& a, const std::string& b, int steps,
                                      st::ToleranceProfile profile) const {
    if (!m_model)
        return Result<DriftOutcome>::error("no model loaded");
    auto sa = stateFor(a);
    if (!sa)
        return Result<DriftOutcome>::error("A: " + sa.message());
    auto sb = stateFor(b);
    if (!sb)
        return Result<DriftOutcome>::error("B: " + sb.message());
    // Named as `kvscope-cli drift` names them: by file where the snapshot has one.
    auto name = [this](const char* letter, const std::string& id) {
        if (id.empty())
            return std::string(letter) + " (the live session)";
        const StoredSnapshot* e = find(id);
        return std::string(letter) + " " + (e && !e->file.empty() ? e->file : "snapshot " + id);
    };
    return driftSnapshots(*sa.value(), *sb.value(), m_model, steps, true, profile,
                          {name("A", a), name("B", b)});
}

Result<SurviveOutcome> Workspace::survive(const std::string& id,
                                          const st::SurviveOptions& options) {
    using R = Result<SurviveOutcome>;
    if (!m_model)
        return R::error("no model loaded");
    std::optional<st::Snapshot> captured; // the live session's capture, stored on success only
    const st::Snapshot* source = nullptr;
    const StoredSnapshot* parent = m_live ? find(m_live->parentId()) : nullptr;
    if (id.empty() && parent && m_live->generatedSinceParent() == 0 &&
        parent->snapshot->tokens == live()->tokens()) {
        // The live session is its parent as restored, captured or truncated: compress that
        // one rather than storing a second copy of it.
        source = parent->snapshot.get();
    } else if (id.empty()) {
        auto s = captureNext();
        if (!s)
            return s.status();
        captured = std::move(s.value());
        source = &*captured;
    } else {
        const StoredSnapshot* e = find(id);
        if (!e)
            return R::error("no snapshot with id " + id);
        source = e->snapshot.get();
    }
    st::Compressed compressed;
    auto r = st::survive(*source, m_model, options, &compressed);
    if (!r)
        return r.status();
    SurviveOutcome out;
    if (captured) {
        // As capture(): the live session now descends from this capture.
        out.sourceId = add(std::move(*captured));
        m_live->descendFrom(out.sourceId);
    } else {
        out.sourceId = source->lineage.id;
    }
    out.id = add(std::move(compressed.snapshot));
    out.result = std::move(r.value());
    return out;
}

Result<std::vector<st::SurviveResult>>
Workspace::survivalSweep(const std::string& id, const st::SweepOptions& options) const {
    if (!m_model)
        return Result<std::vector<st::SurviveResult>>::error("no model loaded");
    auto s = stateFor(id);
    if (!s)
        return s.status();
    return st::sweep(*s.value(), m_model, options);
}

Result<std::vector<std::string>> Workspace::fork(const std::string& id, const st::ForkOptions& o) {
    const StoredSnapshot* e = find(id);
    if (!e)
        return Result<std::vector<std::string>>::error("no snapshot with id " + id);
    auto r = st::fork(*e->snapshot, o, m_model);
    if (!r)
        return r.status();
    std::vector<std::string> ids;
    for (auto& b : r.value().branches)
        ids.push_back(add(std::move(b.snapshot)));
    return ids;
}

Result<std::pair<std::string, st::PatchReport>>
Workspace::patch(const std::string& target, const std::string& source, st::PatchOptions o) {
    using R = Result<std::pair<std::string, st::PatchReport>>;
    const StoredSnapshot* a = find(target);
    const StoredSnapshot* b = find(source);
    if (!a || !b)
        return R::error("patch needs a stored target and source snapshot");
    if (o.sourceFile.empty())
        o.sourceFile = b->file;
    auto r = st::patch(*a->snapshot, *b->snapshot, o, m_model);
    if (!r)
        return r.status();
    const std::string id = add(std::move(r.value().snapshot));
    return std::pair{id, std::move(r.value().report)};
}

Result<std::string> Workspace::injectFault(const std::string& id, const std::string& fault,
                                           std::map<std::string, std::string> params) {
    const StoredSnapshot* e = find(id);
    if (!e)
        return Result<std::string>::error("no snapshot with id " + id);
    st::FaultContext ctx;
    ctx.model = m_model;
    ctx.params = std::move(params);
    auto r = st::injectFault(fault, *e->snapshot, ctx);
    if (!r)
        return r.status();
    return add(std::move(r.value()));
}

Result<insights::ExperimentResult> Workspace::runInsight(int number) {
    return m_lab.run(number);
}

Result<std::vector<std::string>>
Workspace::storeEvidence(const insights::ExperimentResult& result) {
    using Out = Result<std::vector<std::string>>;
    const std::string which = "insights: evidence of #" + std::to_string(result.number);
    if (!m_model || !m_lab.base())
        return Out::error(which + ": run the experiment on the loaded model first");
    if (result.states.empty())
        return Out::error(which + ": the experiment kept no states to show");
    const st::Snapshot& base = *m_lab.base();
    for (const insights::EvidenceState& e : result.states)
        if (e.snapshot.fingerprints.model != base.fingerprints.model)
            return Out::error(which + ": the state \"" + e.role +
                              "\" was made with another model (fingerprints.model)");
    if (!find(base.lineage.id)) {
        st::Snapshot root = base;
        root.lineage.parameters["insights_lab"] = "standard state";
        add(std::move(root));
    }
    std::vector<std::string> ids;
    for (const insights::EvidenceState& e : result.states) {
        if (e.snapshot.lineage.id == base.lineage.id) {
            ids.push_back(base.lineage.id);
            continue;
        }
        st::Snapshot s = e.snapshot;
        if (s.lineage.parentId.empty() || !find(s.lineage.parentId))
            s.lineage.parentId = base.lineage.id;
        if (!s.lineage.parameters.is_object())
            s.lineage.parameters = {{"recorded", s.lineage.parameters}};
        s.lineage.parameters["insight"] = result.number;
        s.lineage.parameters["role"] = e.role;
        ids.push_back(add(std::move(s)));
    }
    return ids;
}

Status Workspace::exportSafetensors(const std::string& id, const std::string& path) const {
    const StoredSnapshot* e = find(id);
    if (!e)
        return Status::error("no snapshot with id " + id);
    return st::exportSafetensors(*e->snapshot, path);
}

Result<Workspace::FolderOpened> Workspace::openFolder(const std::string& folder) {
    return m_store.openFolder(folder, [this](const std::string& path, std::string* why) {
        Opened o = open(path);
        for (const auto& v : o.verdict.report.violations)
            if (o.id.empty() && v.severity == st::Severity::Error) {
                *why = v.message;
                break;
            }
        return o.id;
    });
}

Workspace::Opened Workspace::open(const std::string& path) {
    Opened out;
    out.verdict = st::verifyFile(path, m_model);
    auto& snap = out.verdict.snapshot;
    if (!snap || snap->layers.size() != static_cast<std::size_t>(snap->config.nLayers))
        return out; // the verdict names what is wrong; nothing usable to store
    // Reading problems travel with the snapshot, so later verdicts of it include them.
    out.id = add(*snap, path, out.verdict.readViolations);
    return out;
}

} // namespace kvscope::ws
