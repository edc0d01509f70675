// Lineage tree of a folder of snapshots (lineagetree.h).
#include "state/surgery/lineagetree.h"

#include "state/ledger/manifest.h"
#include "state/ledger/snapshotio.h"

#include <algorithm>
#include <filesystem>
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

namespace {

// One node's fields without its children (the same keys in toJson and toJsonText).
nlohmann::json nodeFields(const TreeNode& n) {
    nlohmann::json j = {{"id", n.id},
                        {"parent_id", n.parentId},
                        {"file", n.file},
                        {"operation", n.operation},
                        {"parameters", n.parameters},
                        {"tokens", n.tokens},
                        {"created_at", n.createdAt}};
    if (n.parentMissing)
        j["parent_missing"] = true;
    if (n.inCycle)
        j["cycle"] = true;
    if (n.duplicateId)
        j["duplicate_id"] = true;
    return j;
}

// Depth-first pre-order over the tree without recursion (a lineage chain can be as deep as
// the folder has files): visit(i, depth, lastAmongSiblings) for every node, then leave(i)
// after its subtree.
template <typename Visit, typename Leave>
void walk(const LineageTree& t, Visit visit, Leave leave) {
    struct Frame {
        std::size_t node;
        std::size_t next = 0; // next child to descend into
    };
    std::vector<Frame> stack;
    for (std::size_t r = 0; r < t.roots.size(); ++r) {
        visit(t.roots[r], std::size_t(0), r + 1 == t.roots.size());
        stack.push_back({t.roots[r]});
        while (!stack.empty()) {
            Frame& f = stack.back();
            const auto& kids = t.nodes[f.node].children;
            if (f.next < kids.size()) {
                const std::size_t c = kids[f.next++];
                visit(c, stack.size(), f.next == kids.size());
                stack.push_back({c});
            } else {
                leave(f.node);
                stack.pop_back();
            }
        }
    }
}

} // namespace

nlohmann::json LineageTree::toJson() const {
    // Built bottom-up without recursion: a node's JSON is complete when its subtree is left.
    std::vector<nlohmann::json> built(nodes.size());
    walk(
        *this, [&](std::size_t i, std::size_t, bool) { built[i] = nodeFields(nodes[i]); },
        [&](std::size_t i) {
            nlohmann::json kids = nlohmann::json::array();
            for (std::size_t c : nodes[i].children)
                kids.push_back(std::move(built[c]));
            built[i]["children"] = std::move(kids);
        });
    // Moved, never copied: copying (like dumping) a nlohmann tree recurses once per level.
    nlohmann::json out = {{"problems", problems}, {"count", nodes.size()}};
    out["roots"] = nlohmann::json::array();
    for (std::size_t r : roots)
        out["roots"].push_back(std::move(built[r]));
    return out;
}

std::string LineageTree::toJsonText() const {
    // The same document as toJson().dump(), written as it is walked: nlohmann's dump recurses
    // once per nesting level, which a chain of 100,000 snapshots would overflow.
    auto dump = [](const nlohmann::json& j) {
        return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    std::string out = "{\"count\":" + std::to_string(nodes.size()) +
                      ",\"problems\":" + dump(problems) + ",\"roots\":[";
    std::vector<bool> first{true}; // per open children array: nothing written in it yet
    walk(
        *this,
        [&](std::size_t i, std::size_t depth, bool) {
            first.resize(depth + 1, true);
            if (!first[depth])
                out += ',';
            first[depth] = false;
            std::string fields = dump(nodeFields(nodes[i]));
            fields.pop_back(); // the closing brace: children follow
            out += fields + ",\"children\":[";
            first.resize(depth + 2);
            first[depth + 1] = true;
        },
        [&](std::size_t) { out += "]}"; });
    return out + "]}";
}

std::string LineageTree::toText() const {
    // Indentation stops growing at kMaxIndent levels (deeper lines say their depth), so a
    // chain of n snapshots prints in O(n), not O(n^2).
    constexpr std::size_t kMaxIndent = 48;
    std::ostringstream out;
    std::vector<bool> lastAt; // per depth: whether the node at that depth was its parent's last
    walk(
        *this,
        [&](std::size_t i, std::size_t depth, bool last) {
            const auto& n = nodes[i];
            lastAt.resize(depth + 1);
            lastAt[depth] = last;
            std::string prefix;
            for (std::size_t d = 1; d < std::min(depth, kMaxIndent); ++d)
                prefix += lastAt[d] ? "   " : "│  ";
            out << prefix;
            if (depth >= kMaxIndent)
                out << "[depth " << depth << "] ";
            out << (depth == 0 ? "" : (last ? "└─ " : "├─ ")) << n.operation;
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
        },
        [](std::size_t) {});
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
