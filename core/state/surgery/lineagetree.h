// The lineage tree of a folder of snapshots: every .kvsnap's manifest (read without its
// tensors) linked by lineage id -> parent id, for `kvscope-cli tree DIR` and the GUI.
//
// Roots are the snapshots without a parent, those whose parent is not in the folder
// ("(parent not here)"), and — so that nothing is lost — one member of every parent cycle
// (marked as such). A duplicated id is reported; the later file becomes a root of its own,
// children attach to the first. Unreadable files are reported and skipped. Nothing loops:
// every node is visited once.
//
// Thread-safety: pure functions; scanning reads the folder and nothing else.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::state {

struct TreeNode {
    std::string id, parentId;
    std::string file; // file name within the folder
    std::string operation;
    nlohmann::json parameters = nlohmann::json::object();
    int64_t tokens = 0;
    std::string createdAt;
    bool parentMissing = false;        // has a parent id that no snapshot in the folder carries
    bool inCycle = false;              // made a root to break a parent cycle
    bool duplicateId = false;          // another file (listed earlier) carries the same id
    std::vector<std::size_t> children; // indices into LineageTree::nodes, by file name
};

struct LineageTree {
    std::vector<TreeNode> nodes;
    std::vector<std::size_t> roots;
    std::vector<std::string> problems; // unreadable files, duplicate ids, cycles

    // {"roots": [{"id", "file", "operation", "parameters", "tokens", "children": [...]}],
    //  "problems": [...], "count": n}
    // (Built without recursion; a deep tree's JSON must be moved, not copied or dumped: both
    // recurse once per level in nlohmann.)
    nlohmann::json toJson() const;
    // toJson() as compact text, written without recursion (any depth; what `tree --json`
    // prints).
    std::string toJsonText() const;
    // Indented text: one line per snapshot with the edge (operation and parameters) above it.
    std::string toText() const;
};

// Links nodes (children and roots filled in; problems appended). Nodes are ordered by file
// (stable: equal names keep their order), or kept in the given order with sortByFile = false
// (the workspace's store, in creation order).
LineageTree buildLineageTree(std::vector<TreeNode> nodes, bool sortByFile = true);

// Reads every *.kvsnap manifest directly in `dir` (not recursive). Errors only when the
// folder cannot be listed; bad files become problems.
Result<LineageTree> scanLineageTree(const std::string& dir);

} // namespace kvscope::state
