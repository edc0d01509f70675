// Special files: FIFOs, /dev/zero, folders, links and missing paths given as snapshot, model,
// tokenizer, template or messages; and every writer pointed at a FIFO, a socket, a folder or a
// device node (made with mknod inside the case folder, only when running as root). A writer
// case also checks afterwards that the target is still what it was and that no temporary file
// was left beside it.
#include "families.h"

#include <cstring>
#include <functional>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

namespace kvscope::hostile {

namespace {

// Kind of a path without following a final link: "fifo", "chr", "sock", "dir", "file", "link",
// "missing".
std::string kindOf(const fs::path& p) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0)
        return "missing";
    if (S_ISFIFO(st.st_mode))
        return "fifo";
    if (S_ISCHR(st.st_mode))
        return "chr";
    if (S_ISSOCK(st.st_mode))
        return "sock";
    if (S_ISDIR(st.st_mode))
        return "dir";
    if (S_ISLNK(st.st_mode))
        return "link";
    return "file";
}

bool makeSocket(const fs::path& p) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string s = p.string();
    if (s.size() >= sizeof addr.sun_path) {
        close(fd);
        return false;
    }
    std::memcpy(addr.sun_path, s.c_str(), s.size() + 1);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    return ok;
}

// Input slots: how a command takes the hostile path.
std::vector<std::pair<std::string, std::vector<std::string>>> inputUses(const Bases& b,
                                                                        const std::string& p) {
    const std::string& m = b.llama2c;
    return {
        {"snapshot", {"inspect", p}},
        {"snapshot", {"verify", p, "-m", m}},
        {"snapshot", {"continue", p, "-m", m, "-n", "2"}},
        {"snapshot", {"replay", p, "-m", m}},
        {"snapshot", {"drift", b.snapshot, p, "-m", m, "-n", "2"}},
        {"snapshot", {"diff", b.snapshot, p}},
        {"snapshot", {"truncate", p, "--at", "3", "-m", m, "-o", "out.kvsnap"}},
        {"snapshot",
         {"patch", b.snapshot, "--from", p, "--layer", "1", "--positions", "0:5", "-o",
          "out.kvsnap", "-m", m}},
        {"snapshot",
         {"splice", b.snapshot, "--from", p, "--range", "1:3", "--at", "2", "-m", m, "-o",
          "out.kvsnap"}},
        {"snapshot", {"fork", p, "-n", "2", "-o", "forks"}},
        {"snapshot", {"export", p, "-o", "out.safetensors"}},
        {"snapshot", {"fault", "inject", "position-offset", p, "-o", "out.kvsnap"}},
        {"snapshot", {"fault", "lab", p, "-m", m, "-n", "2", "--fault", "position-offset"}},
        {"snapshot",
         {"transplant", "-m", m, "--recipient-snapshot", p, "--donor", "x", "--layer", "1",
          "--positions", "last"}},
        {"model", {"info", "-m", p}},
        {"model", {"generate", "-m", p, "-p", "Once", "-n", "2"}},
        {"model", {"convert", "-m", p, "-o", "out-hf"}},
        {"model",
         {"fault", "inject", "foreign-cache", b.snapshot, "-m", m, "--other-model", p, "-o",
          "out.kvsnap"}},
        {"tokenizer", {"tokenize", "-t", p, "--text", "hello"}},
        {"tokenizer", {"info", "-m", m, "-t", p}},
        {"template", {"render-chat", "--template", p, "--messages", b.messages}},
        {"messages", {"render-chat", "--template", b.chatTemplate, "--messages", p}},
    };
}

void inputs(Corpus& c) {
    struct Special {
        std::string tag;
        std::function<std::string(const fs::path& dir)> make; // returns the path to use
        Expect expect;
    };
    const std::vector<Special> specials = {
        {"fifo",
         [](const fs::path& d) {
             const auto p = d / "fifo.kvsnap";
             mkfifo(p.c_str(), 0600);
             return p.string();
         },
         Expect::Refuse},
        {"dev-zero", [](const fs::path&) { return std::string("/dev/zero"); }, Expect::Refuse},
        {"dev-null", [](const fs::path&) { return std::string("/dev/null"); }, Expect::Refuse},
        {"folder",
         [](const fs::path& d) {
             const auto p = d / "folder.kvsnap";
             fs::create_directories(p);
             return p.string();
         },
         Expect::Refuse},
        {"missing", [](const fs::path& d) { return (d / "missing.kvsnap").string(); },
         Expect::Refuse},
        {"empty",
         [](const fs::path& d) {
             const auto p = d / "empty.kvsnap";
             writeAll(p, {});
             return p.string();
         },
         Expect::Refuse},
        {"link-loop",
         [](const fs::path& d) {
             const auto p = d / "loop.kvsnap";
             fs::create_symlink("loop.kvsnap", p);
             return p.string();
         },
         Expect::Refuse},
        {"link-to-fifo",
         [](const fs::path& d) {
             mkfifo((d / "target-fifo").c_str(), 0600);
             fs::create_symlink("target-fifo", d / "linked.kvsnap");
             return (d / "linked.kvsnap").string();
         },
         Expect::Refuse},
    };
    // Every kind through every slot would be 8 x 22 cases. A FIFO goes through every slot
    // (waiting on one is the failure that matters most), /dev/zero and a folder through every
    // non-snapshot slot; the rest rotate over the slots.
    std::size_t rot = 0;
    for (const auto& sp : specials) {
        const auto uses = inputUses(c.bases(), "PATH");
        const bool all = sp.tag == "fifo";
        const bool allOther = all || sp.tag == "dev-zero" || sp.tag == "folder";
        for (std::size_t u = 0; u < uses.size(); ++u) {
            const bool snapshotSlot = uses[u].first == "snapshot";
            const bool take = snapshotSlot ? all || rot++ % 6 == 0 : allOther || rot++ % 5 == 0;
            if (!take)
                continue;
            const auto dir = c.newCaseDir();
            const std::string path = sp.make(dir);
            auto args = uses[u].second;
            for (auto& a : args)
                if (a == "PATH")
                    a = path;
            addCase(c, dir,
                    {"special.input." + sp.tag,
                     uses[u].first + "-" + sp.tag,
                     args,
                     sp.expect,
                     {baseName(path)},
                     {},
                     path,
                     sp.tag + " as the " + uses[u].first});
        }
    }
    // HF folders with one special file inside.
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"})
        for (const char* kind : {"fifo", "folder"}) {
            const auto dir = c.newCaseDir();
            const auto model = dir / "hf";
            fs::create_directories(model);
            for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                                  "tokenizer_config.json", "generation_config.json"})
                if (std::string(f) != file)
                    fs::create_symlink(fs::path(c.bases().hf) / f, model / f);
            if (std::string(kind) == "fifo")
                mkfifo((model / file).c_str(), 0600);
            else
                fs::create_directories(model / file);
            addCase(c, dir,
                    {std::string("special.input.hf-") + kind,
                     std::string("hf-") + kind,
                     modelArgs("generate", model.string(), c.bases(), dir),
                     Expect::Refuse,
                     {file},
                     {},
                     (model / file).string(),
                     std::string(file) + " is a " + kind});
        }
    // A model whose tokenizer beside it is a FIFO.
    {
        const auto dir = c.newCaseDir();
        fs::create_symlink(c.bases().llama2c, dir / "model.bin");
        mkfifo((dir / "tokenizer.bin").c_str(), 0600);
        addCase(c, dir,
                {"special.input.beside",
                 "llama2c-tokenizer-fifo",
                 modelArgs("generate", (dir / "model.bin").string(), c.bases(), dir),
                 Expect::Refuse,
                 {"tokenizer.bin"},
                 {},
                 (dir / "tokenizer.bin").string(),
                 "the tokenizer.bin found beside the model is a FIFO"});
    }
}

// `import` and `verify` of a FIFO or a folder named like a llama.cpp state or a safetensors
// file: the error must say what the path is (the names carry no hint of it), not that it is
// "not a llama.cpp state file" or "not a .kvsnap".
void importInputs(Corpus& c) {
    const Bases& b = c.bases();
    for (const char* kind : {"fifo", "folder"})
        for (const char* name : {"state.ggsq", "past.safetensors"})
            for (const char* cmd : {"import", "verify"}) {
                const auto dir = c.newCaseDir();
                const auto p = dir / name;
                if (std::string(kind) == "fifo")
                    mkfifo(p.c_str(), 0600);
                else
                    fs::create_directories(p);
                const bool ggsq = std::string(name) == "state.ggsq";
                const std::string& m = ggsq ? b.gguf : b.llama2c;
                std::vector<std::string> args =
                    std::string(cmd) == "import"
                        ? std::vector<std::string>{"import", p.string(), "-m",
                                                   m,        "-o",       "out.kvsnap"}
                        : std::vector<std::string>{"verify", p.string(), "-m", m};
                addCase(c, dir,
                        {std::string("special.import.") + kind,
                         std::string(ggsq ? "ggsq-" : "pkv-") + kind,
                         args,
                         Expect::Refuse,
                         {name},
                         std::string(kind) == "fifo"
                             ? std::vector<std::string>{"fifo", "pipe"}
                             : std::vector<std::string>{"directory", "folder"},
                         p.string(),
                         std::string(name) + " is a " + kind + ", given to " + cmd});
                c.cases().back().forbidden = {"not a .kvsnap"};
            }
}

// Writers: every output option pointed at a special target.
void outputs(Corpus& c) {
    const Bases& b = c.bases();
    const std::string& m = b.llama2c;
    const bool root = geteuid() == 0;
    struct Target {
        std::string tag;
        std::function<bool(const fs::path&)> make; // creates the target; false = skip
    };
    const std::vector<Target> targets = {
        {"fifo", [](const fs::path& p) { return mkfifo(p.c_str(), 0600) == 0; }},
        {"socket", [](const fs::path& p) { return makeSocket(p); }},
        {"folder", [](const fs::path& p) { return fs::create_directories(p); }},
        {"chr-null",
         [root](const fs::path& p) {
             return root && mknod(p.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0;
         }},
        {"chr-full",
         [root](const fs::path& p) {
             return root && mknod(p.c_str(), S_IFCHR | 0600, makedev(1, 7)) == 0;
         }},
        {"link-to-fifo",
         [](const fs::path& p) {
             const auto t = p.parent_path() / "fifo-target";
             return mkfifo(t.c_str(), 0600) == 0 && (fs::create_symlink("fifo-target", p), true);
         }},
        {"missing-folder", [](const fs::path&) { return true; }},
    };
    // The writer of every command, with OUT standing for the target path.
    const std::vector<std::vector<std::string>> writers = {
        {"generate", "-m", m, "-p", "Once", "-n", "2", "--temperature", "0", "--snapshot-out",
         "OUT"},
        {"continue", b.snapshot, "-m", m, "-n", "2", "--snapshot-out", "OUT"},
        {"truncate", b.snapshot, "--at", "3", "-m", m, "-o", "OUT"},
        {"patch", b.snapshot, "--from", b.snapshotB, "--layer", "1", "--positions", "0:5", "-m", m,
         "-o", "OUT"},
        {"splice", b.snapshot, "--from", b.snapshotB, "--range", "1:3", "--at", "2", "-m", m, "-o",
         "OUT"},
        {"export", b.snapshot, "-o", "OUT"},
        {"fault", "inject", "position-offset", b.snapshot, "-o", "OUT"},
        {"fork", b.snapshot, "-n", "2", "-o", "OUT"},
        {"convert", "-m", m, "-o", "OUT"},
    };
    std::size_t rot = 0;
    for (const auto& t : targets)
        for (const auto& w : writers) {
            // A FIFO and a device for every writer, the other targets for every fourth one.
            if (t.tag != "fifo" && t.tag != "chr-null" && rot++ % 4)
                continue;
            const auto dir = c.newCaseDir();
            fs::path out = dir / ("target-" + t.tag);
            if (t.tag == "missing-folder")
                out = dir / "no-such-folder" / "target";
            const bool isFolderWriter = w[0] == "fork" || w[0] == "convert";
            if (t.tag == "folder" && isFolderWriter)
                continue; // writing into a folder is what these do
            if (!t.make(out)) {
                fs::remove_all(dir);
                continue;
            }
            auto args = w;
            for (auto& a : args)
                if (a == "OUT")
                    a = out.string();
            const std::string before = kindOf(out);
            CaseSpec spec{"special.output." + t.tag,
                          "writer-" + t.tag,
                          args,
                          Expect::Refuse,
                          {baseName(out.string())},
                          {},
                          "",
                          std::string(commandOf(w)) + " writing to a " + t.tag};
            if (t.tag == "missing-folder") {
                spec.names = {"no-such-folder"};
                if (isFolderWriter) { // creating the output folder is allowed
                    spec.expect = Expect::Either;
                    addCase(c, dir, std::move(spec));
                    continue;
                }
            }
            addCase(c, dir, std::move(spec));
            const fs::path folder = out.parent_path();
            c.cases().back().postCheck = [out, before, folder]() -> std::string {
                const std::string after = kindOf(out);
                if (after != before)
                    return out.filename().string() + " was a " + before + ", now a " + after;
                std::error_code ec;
                if (fs::is_directory(folder, ec))
                    for (const auto& e : fs::directory_iterator(folder, ec)) {
                        const std::string n = e.path().filename().string();
                        if (n.find(".tmp") != std::string::npos)
                            return "temporary file left behind: " + n;
                    }
                return "";
            };
        }
}

} // namespace

void addSpecialFileCases(Corpus& c) {
    inputs(c);
    importInputs(c);
    outputs(c);
}

} // namespace kvscope::hostile
