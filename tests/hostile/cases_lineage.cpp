// `tree` over folders of small snapshots: lineage chains 3,000 and 12,000 deep, a 3,000-way
// fan-out, parent cycles, duplicate ids, odd directory entries, ids with control characters.
// Each snapshot is the base ledger (weight fingerprints dropped to keep it ~2 KB) without
// blobs, hand-built (tree reads manifests only, and 12,000 fsyncs would dominate the run).
#include "families.h"

#include <sys/stat.h>

namespace kvscope::hostile {

namespace {

using json = nlohmann::json;

struct Ctx {
    Corpus& c;
    json manifest; // base ledger, weights list empty

    Bytes node(const std::string& id, const std::string& parent,
               const std::string& op = "continue") const {
        json m = manifest;
        m["lineage"]["id"] = id;
        m["lineage"]["parent_id"] = parent;
        m["lineage"]["operation"] = op;
        m["lineage"]["parameters"] = {{"steps", 1}};
        json doc = {
            {"kvsnap", {{"format_version", 1}, {"writer", "hostile"}, {"blobs", json::array()}}},
            {"manifest", m}};
        return buildKvsnap({}, doc.dump());
    }
    static std::string id(std::size_t i) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%032zx", i + 1);
        return buf;
    }
    void addTree(const fs::path& dir, const fs::path& folder, const std::string& family,
                 const std::string& note, bool json, Expect e = Expect::Either) {
        std::vector<std::string> args = {"tree", folder.string()};
        if (json)
            args.push_back("--json");
        addCase(c, dir,
                {family,
                 "lineage",
                 args,
                 e,
                 {folder.filename().string()},
                 {},
                 folder.string(),
                 note + (json ? " (--json)" : "")});
    }
};

void chains(Ctx& x) {
    for (std::size_t depth : {std::size_t{3000}, std::size_t{12000}}) {
        const fs::path folder = x.c.fixtures() / ("chain-" + std::to_string(depth));
        fs::create_directories(folder);
        for (std::size_t i = 0; i < depth; ++i) {
            char name[32];
            std::snprintf(name, sizeof name, "n%05zu.kvsnap", i);
            writeAll(folder / name, x.node(Ctx::id(i), i ? Ctx::id(i - 1) : std::string()));
        }
        for (bool json : {false, true})
            x.addTree(x.c.newCaseDir(), folder, "lineage.chain",
                      "a lineage chain " + std::to_string(depth) + " snapshots deep", json);
    }
    {
        const fs::path folder = x.c.fixtures() / "fanout-3000";
        fs::create_directories(folder);
        writeAll(folder / "root.kvsnap", x.node(Ctx::id(0), "", "generate"));
        for (std::size_t i = 1; i <= 3000; ++i)
            writeAll(folder / ("child" + std::to_string(i) + ".kvsnap"),
                     x.node(Ctx::id(i), Ctx::id(0)));
        for (bool json : {false, true})
            x.addTree(x.c.newCaseDir(), folder, "lineage.fanout", "one root with 3,000 children",
                      json);
    }
    {
        // A 3,000-node cycle: every node has a parent, no root at all.
        const fs::path folder = x.c.fixtures() / "cycle-3000";
        fs::create_directories(folder);
        const std::size_t n = 3000;
        for (std::size_t i = 0; i < n; ++i) {
            char name[32];
            std::snprintf(name, sizeof name, "n%05zu.kvsnap", i);
            writeAll(folder / name, x.node(Ctx::id(i), Ctx::id((i + n - 1) % n)));
        }
        for (bool json : {false, true})
            x.addTree(x.c.newCaseDir(), folder, "lineage.cycle", "one parent cycle of 3,000", json);
    }
}

void smallFolders(Ctx& x) {
    struct Node {
        std::string file, id, parent;
    };
    bool asJson = false; // alternate text and --json
    auto folderCase = [&](const std::string& tag, std::vector<Node> nodes,
                          const std::string& note) {
        for (bool json : {asJson = !asJson}) {
            const auto dir = x.c.newCaseDir();
            const fs::path folder = dir / tag;
            fs::create_directories(folder);
            for (const auto& n : nodes)
                writeAll(folder / n.file, x.node(n.id, n.parent));
            x.addTree(dir, folder, "lineage.cycle", note, json);
        }
    };
    const std::string a = Ctx::id(1), b = Ctx::id(2), c = Ctx::id(3);
    folderCase("self-parent", {{"a.kvsnap", a, a}}, "a snapshot that is its own parent");
    folderCase("two-cycle", {{"a.kvsnap", a, b}, {"b.kvsnap", b, a}}, "a <-> b");
    folderCase(
        "three-cycle-tail",
        {{"a.kvsnap", a, b}, {"b.kvsnap", b, c}, {"c.kvsnap", c, a}, {"d.kvsnap", Ctx::id(4), a}},
        "a -> b -> c -> a, d hanging off a");
    folderCase("duplicate-ids", {{"a.kvsnap", a, ""}, {"b.kvsnap", a, ""}, {"c.kvsnap", c, a}},
               "two files with one id, a child of that id");
    folderCase("duplicate-cycle", {{"a.kvsnap", a, a}, {"b.kvsnap", a, a}},
               "two files with one id, each its own parent");
    folderCase("empty-ids", {{"a.kvsnap", "", ""}, {"b.kvsnap", "", ""}}, "empty ids");
    folderCase("control-chars",
               {{"a.kvsnap", "\x1b[2J\x1b]0;pwned\x07\n", ""},
                {"b.kvsnap", b, "\x1b[2J\x1b]0;pwned\x07\n"}},
               "ids with terminal escape sequences and newlines");
    folderCase("long-id", {{"a.kvsnap", std::string(1 << 20, 'f'), ""}}, "a 1 MB id");

    // Odd directory entries beside one valid snapshot.
    for (bool json : {false, true}) {
        const auto dir = x.c.newCaseDir();
        const fs::path folder = dir / "odd-entries";
        fs::create_directories(folder / "sub.kvsnap");
        writeAll(folder / "ok.kvsnap", x.node(a, ""));
        writeAll(folder / "empty.kvsnap", {});
        writeText(folder / "text.kvsnap", "not a snapshot");
        fs::create_symlink("loop.kvsnap", folder / "loop.kvsnap");
        fs::create_symlink("missing-target", folder / "dangling.kvsnap");
        fs::create_symlink("..", folder / "parent.kvsnap");
        mkfifo((folder / "fifo.kvsnap").c_str(), 0600);
        x.addTree(dir, folder, "lineage.entries",
                  "a folder, an empty file, text, a symlink loop, a dangling link, a link to .., a "
                  "FIFO, all named *.kvsnap",
                  json);
    }
    // tree on things that are not folders.
    {
        const auto dir = x.c.newCaseDir();
        writeAll(dir / "file.kvsnap", x.node(a, ""));
        addCase(x.c, dir,
                {"lineage.entries",
                 "lineage",
                 {"tree", (dir / "file.kvsnap").string()},
                 Expect::Refuse,
                 {"file.kvsnap"},
                 {},
                 (dir / "file.kvsnap").string(),
                 "tree of a file"});
        const auto dir2 = x.c.newCaseDir();
        addCase(x.c, dir2,
                {"lineage.entries",
                 "lineage",
                 {"tree", (dir2 / "nowhere").string()},
                 Expect::Refuse,
                 {"nowhere"},
                 {},
                 "",
                 "tree of a missing folder"});
    }
}

json smallManifest(const Corpus& c) {
    json m = splitKvsnap(readAll(c.bases().snapshot)).document["manifest"];
    m["fingerprints"]["weights"] = json::array();
    return m;
}

} // namespace

void addLineageCases(Corpus& c) {
    Ctx x{c, smallManifest(c)};
    chains(x);
    smallFolders(x);
}

} // namespace kvscope::hostile
