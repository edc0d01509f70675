// Lineage tree of a folder of snapshots (lineagetree.h).
#include "state/surgery/lineagetree.h"

#include "state/ledger/manifest.h"
#include "state/ledger/snapshotio.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

namespace kvscope::state {

LineageTree buildLineageTree(std::vector<TreeNode> nodes, bool sortByFile) {
    LineageTree t;
    if (sortByFile)
        std::stable_sort(nodes.begin(), nodes.end(),
                         [](const TreeNode& a, const TreeNode& b) { return a.file < b.file; });
    t.nodes = std::move(nodes);
    std::map<std::string, std::size_t> byId;
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
        auto& n = t.nodes[i];
        n.children.clear();
        n.parentMissing = n.inCycle = n.duplicateId = false;
        auto [it, fresh] = byId.emplace(n.id, i);
        if (!fresh) {
            n.duplicateId = true;
            t.problems.push_back("duplicate id " + n.id + ": " + n.file + " and " +
                                 t.nodes[it->second].file +
                                 " (the later file is shown as a "
                                 "root of its own)");
        }
    }
    // parent[i]: index of i's parent, or npos for a root.
    constexpr std::size_t npos = static_cast<std::size_t>(-1);
    std::vector<std::size_t> parent(t.nodes.size(), npos);
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
        auto& n = t.nodes[i];
        if (n.duplicateId || n.parentId.empty())
            continue;
        auto it = byId.find(n.parentId);
        if (it == byId.end() || it->second == i) {
            if (it == byId.end())
                n.parentMissing = true;
            else {
                n.inCycle = true;
                t.problems.push_back(n.file + " names itself as its parent (id " + n.id + ")");
            }
            continue;
        }
        parent[i] = it->second;
    }
    // Cycles: walk up from every node; a walk that returns to a node on its own path is a
    // cycle, broken at that node (made a root).
    std::vector<int> state(t.nodes.size(), 0); // 0 unvisited, 1 on the current path, 2 done
    for (std::size_t start = 0; start < t.nodes.size(); ++start) {
        std::vector<std::size_t> path;
        std::size_t i = start;
        while (i != npos && state[i] == 0) {
            state[i] = 1;
            path.push_back(i);
            i = parent[i];
        }
        if (i != npos && state[i] == 1) {
            std::string members;
            for (auto it = std::find(path.begin(), path.end(), i); it != path.end(); ++it)
                members += (members.empty() ? "" : ", ") + t.nodes[*it].file;
            t.problems.push_back("parent cycle: " + members + " (broken at " + t.nodes[i].file +
                                 ")");
            t.nodes[i].inCycle = true;
            parent[i] = npos;
        }
        for (std::size_t p : path)
            state[p] = 2;
    }
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
        if (parent[i] == npos)
            t.roots.push_back(i);
        else
            t.nodes[parent[i]].children.push_back(i);
    }
    return t;
}

nlohmann::json LineageTree::toJson() const {
    std::function<nlohmann::json(std::size_t)> node = [&](std::size_t i) {
        const auto& n = nodes[i];
        nlohmann::json kids = nlohmann::json::array();
        for (std::size_t c : n.children)
            kids.push_back(node(c));
        nlohmann::json j = {{"id", n.id},
                            {"parent_id", n.parentId},
                            {"file", n.file},
                            {"operation", n.operation},
                            {"parameters", n.parameters},
                            {"tokens", n.tokens},
                            {"created_at", n.createdAt},
                            {"children", kids}};
        if (n.parentMissing)
            j["parent_missing"] = true;
        if (n.inCycle)
            j["cycle"] = true;
        if (n.duplicateId)
            j["duplicate_id"] = true;
        return j;
    };
    nlohmann::json roots_ = nlohmann::json::array();
    for (std::size_t r : roots)
        roots_.push_back(node(r));
    return {{"roots", roots_}, {"problems", problems}, {"count", nodes.size()}};
}

std::string LineageTree::toText() const {
    std::ostringstream out;
    std::function<void(std::size_t, const std::string&, bool, bool)> line =
        [&](std::size_t i, const std::string& prefix, bool last, bool root) {
            const auto& n = nodes[i];
            out << prefix << (root ? "" : (last ? "└─ " : "├─ ")) << n.operation;
            if (!n.parameters.empty() && !n.parameters.is_null())
                out << " " << n.parameters.dump();
            out << "  → " << n.file << " (" << n.tokens << " tokens, " << n.id.substr(0, 8) << ")";
            if (n.parentMissing)
                out << " (parent not here: " << n.parentId.substr(0, 8) << ")";
            if (n.inCycle)
                out << " (parent cycle broken here)";
            if (n.duplicateId)
                out << " (duplicate id)";
            out << "\n";
            const std::string next = root ? prefix : prefix + (last ? "   " : "│  ");
            for (std::size_t c = 0; c < n.children.size(); ++c)
                line(n.children[c], next, c + 1 == n.children.size(), false);
        };
    for (std::size_t r : roots)
        line(r, "", true, true);
    for (const auto& p : problems)
        out << "problem: " << p << "\n";
    return out.str();
}

Result<LineageTree> scanLineageTree(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return Result<LineageTree>::error(dir + ": not a folder");
    std::vector<TreeNode> nodes;
    std::vector<std::string> problems;
    fs::directory_iterator it(dir, ec), end;
    if (ec)
        return Result<LineageTree>::error(dir + ": cannot list the folder: " + ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec)
            return Result<LineageTree>::error(dir + ": cannot list the folder: " + ec.message());
        const auto& p = it->path();
        if (p.extension() != ".kvsnap" || !it->is_regular_file(ec))
            continue;
        const std::string file = p.filename().string();
        auto m = loadManifest(p.string());
        if (!m) {
            problems.push_back(file + ": unreadable (" + m.message() + ")");
            continue;
        }
        auto node = catchToResult([&] {
            const Snapshot s = snapshotFromManifest(m.value());
            TreeNode n;
            n.id = s.lineage.id;
            n.parentId = s.lineage.parentId;
            n.file = file;
            n.operation = s.lineage.operation;
            n.parameters = s.lineage.parameters;
            n.tokens = m.value().at("tokens").at("count").get<int64_t>();
            n.createdAt = s.lineage.createdAt;
            return n;
        });
        if (!node) {
            problems.push_back(file + ": bad manifest (" + node.message() + ")");
            continue;
        }
        nodes.push_back(std::move(node).value());
    }
    LineageTree t = buildLineageTree(std::move(nodes));
    std::sort(problems.begin(), problems.end());
    t.problems.insert(t.problems.begin(), problems.begin(), problems.end());
    return t;
}

} // namespace kvscope::state
