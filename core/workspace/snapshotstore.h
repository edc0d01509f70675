// SnapshotStore: the workspace's immutable states — one of its rooms (workspace.h) — by lineage
// id, in creation order, each with the file it was saved to or opened from and the problems met
// while reading that file; their lineage tree; and the folder they live in.
//
// The folder is where "nothing a user makes is lost" is kept. From useFolder() on, every state
// added that is not already a .kvsnap file is saved into it as it is made (<id>.kvsnap,
// atomically), and the manifest (workspace.json: the states' files in creation order and the
// front end's view state, opaque here) is rewritten atomically after every change. A save that
// fails leaves the state in memory and is reported by takeSaveProblems(). `kvscope-cli tree
// FOLDER` reads the same files.
//
// Thread-safety: none; one thread owns it (as the Workspace that holds it). The snapshots it
// hands out are immutable and may be shared with other threads.
#pragma once

#include "state/ledger/snapshot.h"
#include "state/surgery/lineagetree.h"
#include "state/verify/validate.h"
#include "util/status.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kvscope::ws {

// One entry of the store.
struct StoredSnapshot {
    std::shared_ptr<const state::Snapshot> snapshot;
    std::string file; // where it was saved or opened from; empty while only in memory
    // Problems met while reading `file` (checksums, blob dtype...); part of every verdict.
    std::vector<state::Violation> readViolations;
};

class SnapshotStore {
public:
    const StoredSnapshot* find(const std::string& id) const;
    const std::vector<std::string>& order() const { return m_order; } // creation order
    // state::buildLineageTree over every stored snapshot, in creation order.
    state::LineageTree lineage() const;
    // Adds a snapshot (its lineage id is its key; an existing id is replaced in place) and
    // saves it into the folder when there is one. Returns the id.
    std::string add(state::Snapshot snapshot, std::string file = {},
                    std::vector<state::Violation> readViolations = {});
    // Saves a stored snapshot to `path` (atomically) and remembers the file.
    Status save(const std::string& id, const std::string& path);

    // ---- the folder ----
    // Creates the folder, saves what the store holds so far into it and writes the manifest;
    // an error names the folder or the file.
    Status useFolder(const std::string& folder);
    const std::string& folder() const { return m_folder; }
    // Reads a .kvsnap file into the store (the workspace's verify and add); returns the new id,
    // or "" with *why set when the file could not be used.
    using OpenFile = std::function<std::string(const std::string& path, std::string* why)>;
    struct FolderOpened {
        std::vector<std::string> ids;      // opened, in the manifest's order
        std::vector<std::string> problems; // "FILE: why", one a file not opened
    };
    // Uses `folder` in place of the current one (whose states are all saved there; without a
    // current folder, the store's states move into the new one), then opens with `openFile`
    // every state its manifest lists. A file that is missing or cannot be read is named in
    // `problems` (and stays listed in the manifest, for when it comes back) and the rest
    // opens; a damaged manifest is named and nothing is opened. A folder without a manifest is
    // a new, empty workspace.
    Result<FolderOpened> openFolder(const std::string& folder, const OpenFile& openFile);
    // The front end's state of the workspace (selection, layout), kept in the manifest;
    // setViewState rewrites the manifest.
    const nlohmann::json& viewState() const { return m_view; }
    void setViewState(nlohmann::json view);
    // Saving into the folder failed since the last call (disk full, folder removed): one
    // message each, naming the file. The state stays in the store, in memory only.
    std::vector<std::string> takeSaveProblems();

private:
    // Saves entry `id` into the folder (when it has no .kvsnap file yet) and the manifest.
    void persist(const std::string& id);
    void writeManifest();

    std::map<std::string, StoredSnapshot> m_store;
    std::vector<std::string> m_order;
    std::string m_folder; // empty: the store lives in memory only
    nlohmann::json m_view = nlohmann::json::object();
    std::vector<std::string> m_saveProblems;
    bool m_opening = false;                 // openFolder() is adding the folder's states
    std::vector<nlohmann::json> m_unopened; // manifest entries openFolder() could not open
};

} // namespace kvscope::ws
