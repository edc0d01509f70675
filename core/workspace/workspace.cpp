// The workspace (workspace.h): the model, the live session, the snapshot store and the
// operations over them. Every operation delegates to the one core/state function that does
// it; what lives here is bookkeeping — which snapshot the live session descends from.
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

// ---- attention on demand ----

namespace {

// Replays `tokens` through a fresh session of `model` with `recorder` watching, in chunks so
// that progress is reported and the caller can stop; false when stopped or failed (*error).
bool replayQueries(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                   QueryRecorder& recorder, const ReplayProgress& onProgress, std::string* error) {
    constexpr int64_t kChunk = 256;
    Session replay(model);
    replay.setObserver(&recorder);
    const int64_t total = int64_t(tokens.size());
    for (int64_t begin = 0; begin < total; begin += kChunk) {
        if (onProgress && !onProgress(begin, total)) {
            *error = "attention: stopped while recomputing the queries (" + std::to_string(begin) +
                     " of " + std::to_string(total) + " tokens)";
            return false;
        }
        const int64_t n = std::min(kChunk, total - begin);
        if (auto s = replay.feed(std::span<const int32_t>(tokens.data() + begin, size_t(n))); !s) {
            *error =
                "attention: replaying the tokens to recompute the queries failed: " + s.message();
            return false;
        }
    }
    if (onProgress)
        onProgress(total, total);
    return true;
}

} // namespace

Result<AttentionPattern> attentionOf(const Session& session, QueryRecorder& queries, int layer,
                                     int head, const ReplayProgress& onProgress) {
    const auto& model = session.model();
    const int64_t n = int64_t(session.tokens().size());
    const int layers = int(model->config().nLayers);
    if (layer < 0 || layer >= layers)
        return Result<AttentionPattern>::error("attention: layer " + std::to_string(layer) +
                                               " is outside 0.." + std::to_string(layers - 1));
    if (n != session.cache().length())
        return Result<AttentionPattern>::error(
            "attention: the session holds " + std::to_string(n) + " tokens but " +
            std::to_string(session.cache().length()) + " cache slots");
    queries.truncate(n); // rows of a failed forward pass after the last token do not count
    if (!queries.complete() || queries.rows(layer) < n) {
        queries.clear();
        std::string error;
        if (!replayQueries(model, session.tokens(), queries, onProgress, &error)) {
            queries.clear();
            queries.setComplete(false);
            return Result<AttentionPattern>::error(error);
        }
        if (!queries.complete()) { // every layer does not fit the budget: this one does
            queries.clear();
            queries.setComplete(false);
            QueryRecorder one(int64_t(1) << 40, layer);
            if (!replayQueries(model, session.tokens(), one, onProgress, &error))
                return Result<AttentionPattern>::error(error);
            return attentionPattern(*model, session.cache(), one.queries(layer), n, layer, head);
        }
    }
    return attentionPattern(*model, session.cache(), queries.queries(layer), n, layer, head);
}

// ---- model and live session ----

void Workspace::setModel(std::shared_ptr<const Model> model) {
    m_model = std::move(model);
    m_lab.reset();
    m_live.reset();
    if (m_model) {
        m_live.emplace(m_model);
        m_live->setObserver(liveObserver());
    }
    m_queries.clear();
    m_queries.setComplete(m_observer == nullptr);
    m_sampler.reset();
    m_prompt = {};
    m_parentId.clear(); // another model: a new root
    m_generated = 0;
}

void Workspace::setObserver(Observer* observer) {
    m_observer = observer;
    m_queries.clear();
    m_queries.setComplete(observer == nullptr); // another observer: queries come by replay
    if (m_live)
        m_live->setObserver(liveObserver());
}

void Workspace::dropUnfedQueries() {
    if (m_live)
        m_queries.truncate(int64_t(m_live->tokens().size()));
}

bool Workspace::queriesRecorded() const {
    if (!m_live || !m_model || !m_queries.complete())
        return false;
    const int64_t n = int64_t(m_live->tokens().size());
    for (int l = 0; l < int(m_model->config().nLayers); ++l)
        if (m_queries.rows(l) < n)
            return false;
    return true;
}

Result<AttentionPattern> Workspace::attention(int layer, int head,
                                              const ReplayProgress& onProgress) {
    if (!m_live)
        return Result<AttentionPattern>::error("no model loaded");
    auto r = attentionOf(*m_live, m_queries, layer, head, onProgress);
    if (m_observer == nullptr && m_queries.complete())
        m_live->setObserver(&m_queries); // replayed: new tokens are recorded again
    return r;
}

Status Workspace::beginRun(const PreparedPrompt& prompt) {
    if (!m_live)
        return Status::error("no model loaded");
    resetSession();
    m_prompt = prompt.meta;
    return Status::ok();
}

void Workspace::resetSession() {
    if (m_live)
        m_live->reset();
    m_queries.clear();
    m_queries.setComplete(m_observer == nullptr);
    m_sampler.reset();
    m_prompt = {};
    m_parentId.clear(); // a fresh run: its first capture is a root
    m_generated = 0;
}

Sampler& Workspace::samplerFor(const SamplerSettings& settings) {
    if (!m_sampler || !(m_sampler->settings() == settings))
        m_sampler.emplace(settings);
    return *m_sampler;
}

void Workspace::noteGenerated(int64_t count) {
    m_generated += std::max<int64_t>(0, count);
}

// ---- store ----

const StoredSnapshot* Workspace::find(const std::string& id) const {
    const auto it = m_store.find(id);
    return it == m_store.end() ? nullptr : &it->second;
}

std::string Workspace::add(st::Snapshot snapshot, std::string file,
                           std::vector<st::Violation> readViolations) {
    const std::string id = snapshot.lineage.id;
    if (!m_store.count(id))
        m_order.push_back(id);
    m_store[id] = {std::make_shared<const st::Snapshot>(std::move(snapshot)), std::move(file),
                   std::move(readViolations)};
    persist(id);
    return id;
}

std::vector<int64_t> Workspace::liveKeptTokens() const {
    const StoredSnapshot* parent = m_parentId.empty() ? nullptr : find(m_parentId);
    if (!m_live || !parent)
        return {};
    return state::keptTokensAfter(*parent->snapshot, int64_t(m_live->tokens().size()),
                                  m_live->cache().positions());
}

bool Workspace::liveUnsaved() const {
    return m_live && !m_live->tokens().empty() && (m_parentId.empty() || m_generated > 0);
}

// ---- the workspace folder ----

namespace {

constexpr const char* kManifestName = "workspace.json";
constexpr int kWorkspaceVersion = 1;

bool isKvsnapFile(const std::string& file) {
    return !file.empty() && std::filesystem::path(file).extension() == ".kvsnap";
}

// A file name for a state id: its own characters when they are plain ([A-Za-z0-9_-], as
// kvscope makes ids), else a hash (an opened file's id may hold anything).
std::string fileNameFor(const std::string& id) {
    const bool plain =
        !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](unsigned char c) {
            return std::isalnum(c) || c == '-' || c == '_';
        });
    return (plain ? id : "state-" + hex64(hash64(id.data(), id.size()))) + ".kvsnap";
}

} // namespace

void Workspace::persist(const std::string& id) {
    if (m_folder.empty())
        return;
    StoredSnapshot& e = m_store.at(id);
    if (!isKvsnapFile(e.file)) {
        const std::string path = (std::filesystem::path(m_folder) / fileNameFor(id)).string();
        if (Status st = st::save(*e.snapshot, path); st)
            e.file = path;
        else
            m_saveProblems.push_back(st.message());
    }
    writeManifest();
}

void Workspace::writeManifest() {
    if (m_folder.empty() || m_opening)
        return;
    nlohmann::json states = nlohmann::json::array();
    const std::filesystem::path folder(m_folder);
    for (const std::string& id : m_order) {
        const StoredSnapshot& e = m_store.at(id);
        if (!isKvsnapFile(e.file))
            continue; // not saved (a save problem was reported)
        const std::filesystem::path f(e.file);
        // Files inside the folder by name, so that the folder can be moved; others by path.
        const bool inside = f.parent_path() == folder;
        states.push_back({{"id", id}, {"file", inside ? f.filename().string() : e.file}});
    }
    // Entries that did not open stay listed: a file on a drive that comes back opens next time.
    for (const auto& entry : m_unopened)
        states.push_back(entry);
    const nlohmann::json j = {
        {"kvscope_workspace", kWorkspaceVersion}, {"states", std::move(states)}, {"view", m_view}};
    const std::string text = j.dump(1) + "\n";
    const std::string path = (folder / kManifestName).string();
    try {
        writeFileAtomic(path, text.data(), text.size());
    } catch (const std::exception& e) {
        m_saveProblems.push_back(e.what());
    }
}

Status Workspace::useFolder(const std::string& folder) {
    return catchToStatus([&] {
        std::error_code ec;
        std::filesystem::create_directories(folder, ec);
        if (ec || !std::filesystem::is_directory(folder))
            throw KvError(folder + ": cannot be used as a workspace folder" +
                          (ec ? ": " + ec.message() : std::string(": it is not a folder")));
        m_folder = std::filesystem::absolute(folder).lexically_normal().string();
        if (!m_folder.empty() && m_folder.back() == '/' && m_folder.size() > 1)
            m_folder.pop_back();
        for (const std::string& id : m_order)
            persist(id);
        writeManifest();
        if (!m_saveProblems.empty())
            throw KvError(m_saveProblems.front());
    });
}

Result<Workspace::FolderOpened> Workspace::openFolder(const std::string& folder) {
    using R = Result<FolderOpened>;
    const std::string manifestPath = (std::filesystem::path(folder) / kManifestName).string();
    nlohmann::json manifest;
    if (std::filesystem::exists(manifestPath)) {
        try {
            manifest = parseJsonText(readFileText(manifestPath, 64ull << 20), manifestPath);
            if (!manifest.is_object() || !manifest.contains("states") ||
                !manifest["states"].is_array())
                throw KvError(manifestPath + ": \"states\" is missing or not a list");
            const auto& v = manifest.value("kvscope_workspace", nlohmann::json());
            if (!v.is_number_integer() || v.get<int64_t>() > kWorkspaceVersion)
                throw KvError(manifestPath + ": kvscope_workspace is " + v.dump() +
                              "; this kvscope reads version " + std::to_string(kWorkspaceVersion));
        } catch (const std::exception& e) {
            return R::error(e.what());
        }
    }
    // The states of the folder used so far are safe there (each was saved as it was made):
    // the store now holds the opened folder's. States never saved to a folder move along.
    if (!m_folder.empty()) {
        m_store.clear();
        m_order.clear();
    }
    m_unopened.clear();
    // The folder is used from now on; what it lists is opened below without being saved again.
    if (Status st = useFolder(folder); !st)
        return st;
    m_opening = true; // the manifest is rewritten once, after every entry was tried
    struct Done {
        bool& flag;
        ~Done() { flag = false; }
    } done{m_opening};
    FolderOpened out;
    if (manifest.is_null())
        return out;
    if (manifest.contains("view") && manifest["view"].is_object())
        m_view = manifest["view"];
    for (const auto& entry : manifest["states"]) {
        const std::string file =
            entry.is_object() && entry.contains("file") && entry["file"].is_string()
                ? entry["file"].get<std::string>()
                : std::string();
        if (file.empty()) {
            out.problems.push_back(manifestPath + ": a state entry without a \"file\": " +
                                   entry.dump().substr(0, 200));
            continue;
        }
        const std::filesystem::path p(file);
        const std::string path =
            p.is_absolute() ? file : (std::filesystem::path(m_folder) / p).string();
        if (!std::filesystem::exists(path)) {
            out.problems.push_back(path + ": missing (listed in " + manifestPath + ")");
            m_unopened.push_back(entry);
            continue;
        }
        Opened o = open(path);
        if (o.id.empty()) {
            std::string why = "could not be read";
            for (const auto& v : o.verdict.report.violations)
                if (v.severity == st::Severity::Error) {
                    why = v.message;
                    break;
                }
            out.problems.push_back(path + ": " + why);
            m_unopened.push_back(entry);
            continue;
        }
        out.ids.push_back(o.id);
    }
    m_opening = false;
    writeManifest();
    return out;
}

void Workspace::setViewState(nlohmann::json view) {
    m_view = view.is_object() ? std::move(view) : nlohmann::json::object();
    writeManifest();
}

std::vector<std::string> Workspace::takeSaveProblems() {
    return std::exchange(m_saveProblems, {});
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
    o.sampler = sampler();
    o.prompt = m_prompt;
    o.parentId = m_parentId;
    o.operation = operation;
    o.parameters = std::move(parameters);
    const StoredSnapshot* parent = m_parentId.empty() ? nullptr : find(m_parentId);
    o.parent = parent ? parent->snapshot.get() : nullptr; // an eviction's gaps stay recorded
    return st::capture(*m_live, o);
}

Result<st::Snapshot> Workspace::captureNext() const {
    const bool continued = !m_parentId.empty() && m_generated > 0;
    return continued ? captureLive("continue", {{"generated", m_generated}}) : captureLive();
}

Result<std::string> Workspace::capture() {
    auto s = captureNext();
    if (!s)
        return s.status();
    m_parentId = add(std::move(s.value()));
    m_generated = 0;
    return m_parentId;
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

void Workspace::adopt(Session session, const st::Snapshot& from, const std::string& parent,
                      int64_t keepQueries) {
    // Recorded queries describe the old session's tokens. A truncation of the live session
    // keeps a prefix of them valid; anything else is replayed on the next attention().
    m_live.emplace(std::move(session));
    if (keepQueries >= 0 && m_queries.complete()) {
        m_queries.truncate(keepQueries);
    } else {
        m_queries.clear();
        m_queries.setComplete(false);
    }
    m_live->setObserver(liveObserver());
    m_prompt = from.prompt;
    if (from.hasSampler) {
        m_sampler.emplace(from.sampler);
        m_sampler->setRngState(from.rngState);
    } else {
        m_sampler.reset();
    }
    m_parentId = parent;
    m_generated = 0;
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
    adopt(std::move(r.value().session), *snapshot, id, -1);
    return out;
}

Result<std::string> Workspace::truncateLive(int64_t at) {
    if (!m_live)
        return Result<std::string>::error("no model loaded");
    // The truncation's parent: the live session's parent when nothing happened since it,
    // else a capture of the live session first (so the tree shows what was cut).
    std::shared_ptr<const st::Snapshot> source;
    if (!m_parentId.empty() && m_generated == 0)
        source = find(m_parentId)->snapshot;
    if (!source || source->tokens != m_live->tokens()) {
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
    adopt(std::move(restored.value().session), *find(id)->snapshot, id, at);
    return id;
}

Result<st::DiffReport> Workspace::diff(const std::string& a, const std::string& b) const {
    auto sa = stateFor(a);
    if (!sa)
        return Result<st::DiffReport>::error("A: " + sa.message());
    auto sb = stateFor(b);
    if (!sb)
        return Result<st::DiffReport>::error("B: " + sb.message());
    return st::diff(*sa.value(), *sb.value());
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
    std::optional<st::Snapshot> live; // the live session's capture, stored on success only
    const st::Snapshot* source = nullptr;
    const StoredSnapshot* parent = m_parentId.empty() ? nullptr : find(m_parentId);
    if (id.empty() && m_live && parent && m_generated == 0 &&
        parent->snapshot->tokens == m_live->tokens()) {
        // The live session is its parent as restored, captured or truncated: compress that
        // one rather than storing a second copy of it.
        source = parent->snapshot.get();
    } else if (id.empty()) {
        auto s = captureNext();
        if (!s)
            return s.status();
        live = std::move(s.value());
        source = &*live;
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
    if (live) {
        // As capture(): the live session now descends from this capture.
        m_parentId = add(std::move(*live));
        m_generated = 0;
        out.sourceId = m_parentId;
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
    using Out = Result<insights::ExperimentResult>;
    if (!m_model)
        return Out::error("insights: load a model first");
    const insights::Insight* insight = insights::findInsight(number);
    if (!insight)
        return Out::error("insights: there is no insight " + std::to_string(number));
    if (!insights::hasExperiment(number))
        return Out::error("insights: #" + std::to_string(number) + " is " +
                          insights::className(insight->cls) + ": it has no experiment");
    if (!m_lab) {
        auto ctx = insights::makeLabContext(m_model);
        if (!ctx)
            return Out::error("insights: " + ctx.message());
        m_lab = std::move(ctx.value());
    }
    return insights::runExperiment(number, *m_lab);
}

Result<std::vector<std::string>>
Workspace::storeEvidence(const insights::ExperimentResult& result) {
    using Out = Result<std::vector<std::string>>;
    const std::string which = "insights: evidence of #" + std::to_string(result.number);
    if (!m_model || !m_lab)
        return Out::error(which + ": run the experiment on the loaded model first");
    if (result.states.empty())
        return Out::error(which + ": the experiment kept no states to show");
    const st::Snapshot& base = m_lab->base;
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

Status Workspace::save(const std::string& id, const std::string& path) {
    const auto it = m_store.find(id);
    if (it == m_store.end())
        return Status::error("no snapshot with id " + id);
    if (Status s = st::save(*it->second.snapshot, path); !s)
        return s;
    it->second.file = path;
    writeManifest();
    return Status::ok();
}

Status Workspace::exportSafetensors(const std::string& id, const std::string& path) const {
    const StoredSnapshot* e = find(id);
    if (!e)
        return Status::error("no snapshot with id " + id);
    return st::exportSafetensors(*e->snapshot, path);
}

st::LineageTree Workspace::lineage() const {
    std::vector<st::TreeNode> nodes;
    for (const std::string& id : m_order) {
        const StoredSnapshot& e = m_store.at(id);
        const auto& l = e.snapshot->lineage;
        st::TreeNode n;
        n.id = id;
        n.parentId = l.parentId;
        n.file = e.file;
        n.operation = l.operation;
        n.parameters = l.parameters;
        n.tokens = static_cast<int64_t>(e.snapshot->tokens.size());
        n.createdAt = l.createdAt;
        nodes.push_back(std::move(n));
    }
    return st::buildLineageTree(std::move(nodes), false);
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
