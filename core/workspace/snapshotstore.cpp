// The snapshot store (snapshotstore.h): states by id, their files, their lineage, and the
// workspace folder they are saved into as they are made.
#include "workspace/snapshotstore.h"

#include "formats/jsonerror.h"
#include "state/ledger/snapshotio.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

namespace kvscope::ws {

namespace st = kvscope::state;

const StoredSnapshot* SnapshotStore::find(const std::string& id) const {
    const auto it = m_store.find(id);
    return it == m_store.end() ? nullptr : &it->second;
}

std::string SnapshotStore::add(st::Snapshot snapshot, std::string file,
                               std::vector<st::Violation> readViolations) {
    const std::string id = snapshot.lineage.id;
    if (!m_store.count(id))
        m_order.push_back(id);
    m_store[id] = {std::make_shared<const st::Snapshot>(std::move(snapshot)), std::move(file),
                   std::move(readViolations)};
    persist(id);
    return id;
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

void SnapshotStore::persist(const std::string& id) {
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

void SnapshotStore::writeManifest() {
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

Status SnapshotStore::useFolder(const std::string& folder) {
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

Result<SnapshotStore::FolderOpened> SnapshotStore::openFolder(const std::string& folder,
                                                              const OpenFile& openFile) {
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
        std::string why;
        const std::string id = openFile(path, &why);
        if (id.empty()) {
            out.problems.push_back(path + ": " + (why.empty() ? "could not be read" : why));
            m_unopened.push_back(entry);
            continue;
        }
        out.ids.push_back(id);
    }
    m_opening = false;
    writeManifest();
    return out;
}

void SnapshotStore::setViewState(nlohmann::json view) {
    m_view = view.is_object() ? std::move(view) : nlohmann::json::object();
    writeManifest();
}

std::vector<std::string> SnapshotStore::takeSaveProblems() {
    return std::exchange(m_saveProblems, {});
}

Status SnapshotStore::save(const std::string& id, const std::string& path) {
    const auto it = m_store.find(id);
    if (it == m_store.end())
        return Status::error("no snapshot with id " + id);
    if (Status s = st::save(*it->second.snapshot, path); !s)
        return s;
    it->second.file = path;
    writeManifest();
    return Status::ok();
}

st::LineageTree SnapshotStore::lineage() const {
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

} // namespace kvscope::ws
