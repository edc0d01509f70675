// llama.cpp states beyond the ggsq header (cases_llamacpp.cpp): lies that keep every byte of
// the file consistent, each through the same state wrapped three ways — a ggsq sequence file,
// a ggsn session file (v10, architecture string) and a llama-server slot file (packed token
// blob) — and through `verify`, `import` and `continue` (after `import --force`):
//   llamacpp.positions.*  recorded positions that are not where the keys were rotated (all
//                         far below zero while the keys sit at 0..n, a shift of -5, beyond the
//                         context, ending at INT32_MAX);
//   llamacpp.geometry.*   a KV head count or layer count that is not the model's, the file
//                         re-laid out so that every row size and record agrees with the lie;
//   llamacpp.cells.*      cell counts that fit the bytes left (8 bytes a cell) but would cost
//                         far more in memory: refused quickly, within bounded memory;
//   llamacpp.ggsn.*       the architecture string ("mamba", "gpt2", empty, NUL, 4 GiB length),
//                         version, token count, sequences, trailing bytes, truncations;
//   llamacpp.slot.*       the packed blob's version, counts and media records.
// The base is tim-dog.ggsq, written by llama.cpp for stories260K.gguf.
#include "families.h"
#include "llamacppbody.h"

#include <algorithm>
#include <limits>

namespace kvscope::hostile {

namespace {

enum class Wrap { Ggsq, Ggsn, Slot };

const char* wrapName(Wrap w) {
    return w == Wrap::Ggsq ? "ggsq" : w == Wrap::Ggsn ? "ggsn" : "slot";
}

struct Ctx {
    Corpus& c;
    StateParts base;
    std::string gguf;
    std::size_t rot = 0;

    Bytes wrap(Wrap w, const StateBody& body, const std::vector<std::int32_t>& tokens) const {
        if (w == Wrap::Ggsq)
            return ggsqFile(tokens, body);
        if (w == Wrap::Ggsn)
            return ggsnFile(tokens, body);
        SlotBlob blob;
        blob.tokens = tokens;
        return slotFile(blob, body);
    }

    // One case: `bytes` as the state file, run through `command` (verify, import, continue).
    // `strict`: an exit 0 fails the run (the state is known bad, see the classes).
    Case& add(const std::string& family, const std::string& reader, const Bytes& bytes,
              const std::string& command, const std::string& note, Expect e, bool strict,
              std::vector<std::string> fields, std::vector<std::string> extra = {}) {
        const auto dir = c.newCaseDir();
        const auto path = dir / ("state." + reader);
        writeAll(path, bytes);
        return addPath(family, reader, path.string(), command, note, e, strict, std::move(fields),
                       std::move(extra), dir);
    }

    Case& addPath(const std::string& family, const std::string& reader, const std::string& path,
                  const std::string& command, const std::string& note, Expect e, bool strict,
                  std::vector<std::string> fields, std::vector<std::string> extra,
                  const fs::path& dir) {
        std::vector<std::string> args;
        std::vector<std::vector<std::string>> setup;
        std::vector<std::string> names = {baseName(path)};
        if (command == "verify") {
            args = {"verify", path, "-m", gguf};
        } else if (command == "import") {
            args = {"import", path, "-m", gguf, "-o", (dir / "out.kvsnap").string()};
        } else { // continue what `import --force` wrote (nothing, when it refused)
            setup.push_back({"import", path, "-m", gguf, "-o", "imported.kvsnap", "--force"});
            args = {"continue", "imported.kvsnap", "-m", gguf, "-n", "2"};
            names.push_back("imported.kvsnap");
            // The field is judged on verify and import; here only the refusal and the file
            // (there is none when even `import --force` refused).
            fields.clear();
        }
        args.insert(args.end(), extra.begin(), extra.end());
        addCase(c, dir, {family, reader, args, e, names, std::move(fields), path, note});
        Case& k = c.cases().back();
        k.setup = std::move(setup);
        k.mustRefuse = strict && e == Expect::Refuse;
        k.cleanOnSuccess = true;
        return k;
    }

    // verify, import, continue in turn.
    std::string nextCommand() {
        static const char* const cmds[] = {"verify", "import", "continue"};
        return cmds[rot++ % 3];
    }
};

// Lies in the cell records and layout, through every wrapper and command.
void stateCases(Ctx& x) {
    const StateBody& b = x.base.body;
    const auto& tokens = x.base.tokens;
    const int n = static_cast<int>(b.cells.size());
    auto shifted = [&](std::int64_t first) {
        StateBody m = b;
        for (int i = 0; i < n; ++i)
            m.cells[static_cast<std::size_t>(i)].pos = static_cast<std::int32_t>(first + i);
        return m;
    };
    StateBody fewerHeads = b;
    fewerHeads.cutRows(48); // 3 KV heads of 8 (f16) where the model has 4
    StateBody fewerLayers = b;
    fewerLayers.keys.pop_back();
    fewerLayers.values.pop_back();
    struct Lie {
        std::string family, note;
        StateBody body;
        std::vector<std::string> fields;
    };
    const std::vector<Lie> lies = {
        {"llamacpp.positions.far-negative",
         "positions -1000.. recorded, keys rotated at 0..20",
         shifted(-1000),
         {"position", "provenance"}},
        {"llamacpp.positions.shift-5",
         "positions -5.. recorded, keys rotated at 0..20",
         shifted(-5),
         {"position", "provenance"}},
        {"llamacpp.positions.beyond-context",
         "positions 1000.. (context 512), keys rotated at 0..20",
         shifted(1000),
         {"position", "context", "provenance"}},
        {"llamacpp.positions.int32-max",
         "positions ending at INT32_MAX (the next one overflows)",
         shifted(std::int64_t{std::numeric_limits<std::int32_t>::max()} - (n - 1)),
         {"position", "context", "provenance"}},
        {"llamacpp.geometry.kv-heads",
         "3 KV heads of 8 in every row (the model has 4), rows re-laid out",
         fewerHeads,
         {"row size", "head", "layout"}},
        {"llamacpp.geometry.layers",
         "4 layers of K and V (the model has 5), file re-laid out",
         fewerLayers,
         {"n_layer", "layer"}},
    };
    for (const auto& lie : lies)
        for (Wrap w : {Wrap::Ggsq, Wrap::Ggsn, Wrap::Slot})
            for (const char* cmd : {"verify", "import", "continue"})
                x.add(lie.family, wrapName(w), x.wrap(w, lie.body, tokens), cmd,
                      lie.note + " (" + wrapName(w) + ")", Expect::Refuse, true, lie.fields);

    // One wrapper and command each.
    {
        StateBody m = b; // 8 KV heads: every row twice as wide
        for (auto* records : {&m.keys, &m.values})
            for (auto& r : *records) {
                Bytes wide;
                for (int i = 0; i < n; ++i) {
                    const auto at = r.data.begin() + static_cast<std::ptrdiff_t>(i * r.rowSize);
                    wide.insert(wide.end(), at, at + static_cast<std::ptrdiff_t>(r.rowSize));
                    wide.insert(wide.end(), at, at + static_cast<std::ptrdiff_t>(r.rowSize));
                }
                r.rowSize *= 2;
                r.data = std::move(wide);
            }
        x.add("llamacpp.geometry.kv-heads", "ggsn", x.wrap(Wrap::Ggsn, m, tokens), "import",
              "8 KV heads of 8 in every row (the model has 4), rows re-laid out (ggsn)",
              Expect::Refuse, true, {"row size", "head", "layout"});
    }
    {
        StateBody m = b;
        m.keys.push_back(m.keys.back());
        m.values.push_back(m.values.back());
        x.add("llamacpp.geometry.layers", "slot", x.wrap(Wrap::Slot, m, tokens), "verify",
              "6 layers of K and V (the model has 5), file re-laid out (slot)", Expect::Refuse,
              true, {"n_layer", "layer"});
    }
    x.add("llamacpp.positions.straddle", "ggsq", x.wrap(Wrap::Ggsq, shifted(500), tokens),
          "continue", "positions 500..520 (context 512), keys rotated at 0..20", Expect::Refuse,
          true, {"position", "context", "provenance"});
    {
        StateBody m = b;
        std::reverse(m.cells.begin(), m.cells.end()); // cell i holds the key rotated at i
        for (int i = 0; i < n; ++i)
            m.cells[static_cast<std::size_t>(i)].seqIds = {0};
        x.add("llamacpp.positions.reversed", "ggsn", x.wrap(Wrap::Ggsn, m, tokens), "verify",
              "cell records in reverse order: cell i claims position 20-i", Expect::Refuse, true,
              {"position", "provenance"});
    }
    {
        StateBody m = b;
        m.cells.pop_back();
        for (auto* records : {&m.keys, &m.values})
            for (auto& r : *records)
                r.data.resize(r.data.size() - r.rowSize);
        x.add("llamacpp.cells.fewer-than-tokens", "slot", x.wrap(Wrap::Slot, m, tokens), "import",
              "20 cells for 21 tokens", Expect::Refuse, true, {"length", "cell", "token"});
    }
}

// A cell count whose records fit the bytes left (8 bytes a cell: n_seq_id 0) but whose cells
// cost several times that in memory; the file ends after the cells. `cells` = 1.2 M keeps
// the file under the 10 MB memory rule; the 6 M one (48 MB) is judged by its own limit.
void cellCountCases(Ctx& x) {
    for (const std::uint32_t cells : {1'200'000u, 6'000'000u}) {
        Bytes body;
        appendLE<std::uint32_t>(body, 1);
        appendLE<std::uint32_t>(body, cells);
        body.resize(body.size() + 8 * std::size_t{cells}, 0);
        for (Wrap w : {Wrap::Ggsq, Wrap::Ggsn, Wrap::Slot}) {
            Bytes file = x.wrap(w, StateBody{}, x.base.tokens);
            file.resize(file.size() - StateBody{}.bytes().size()); // the header alone
            file.insert(file.end(), body.begin(), body.end());
            // The big file is written once and linked from each case.
            const fs::path shared =
                x.c.fixtures() / ("cells-" + std::to_string(cells) + "." + wrapName(w));
            writeAll(shared, file);
            for (const char* cmd : {"verify", "import"}) {
                if (w == Wrap::Slot && std::string(cmd) == "verify")
                    continue;
                const auto dir = x.c.newCaseDir();
                const auto link = dir / ("state." + std::string(wrapName(w)));
                fs::create_symlink(shared, link);
                Case& k =
                    x.addPath("llamacpp.cells.costly", wrapName(w), link.string(), cmd,
                              std::to_string(cells) + " cells of 8 bytes, nothing after",
                              Expect::Refuse, true, {"cell", "v_trans", "truncated"}, {}, dir);
                k.input = shared.string();
                k.inputBytes = file.size();
                k.timeoutSeconds = 10; // refused quickly
                k.maxRssKb = 1u << 20; // and within bounded memory, whatever the file's size
            }
        }
    }
}

void sessionCases(Ctx& x) {
    const StateBody& b = x.base.body;
    const auto& t = x.base.tokens;
    auto arch = [&](const std::string& tag, const std::string& a, const std::string& note,
                    bool all) {
        const Bytes f = ggsnFile(t, b, a);
        const std::string one = all ? std::string() : x.nextCommand();
        for (const char* cmd : {"verify", "import", "continue"}) {
            if (!all && cmd != one)
                continue;
            x.add("llamacpp.ggsn.arch." + tag, "ggsn", f, cmd, note, Expect::Refuse, true,
                  {"arch"});
        }
    };
    arch("mamba", "mamba", "architecture \"mamba\" for a llama state", true);
    arch("gpt2", "gpt2", "architecture \"gpt2\" for a llama state", true);
    arch("empty", "", "an empty architecture string", false);
    arch("nul", std::string("llama\0x", 7), "architecture \"llama\\0x\"", false);
    arch("long", std::string(60000, 'l'), "a 60,000-byte architecture string", false);
    {
        Bytes f = ggsnFile(t, b);
        putLE<std::uint32_t>(f, 12 + 4 * t.size(), 0xfffffff0u);
        x.add("llamacpp.ggsn.arch.length", "ggsn", f, "verify", "architecture length 2^32-16",
              Expect::Refuse, true, {"arch", "length"});
    }
    for (const std::uint32_t v : {9u, 11u, 3u})
        x.add("llamacpp.ggsn.version", "ggsn", ggsnFile(t, b, "llama", v), x.nextCommand(),
              "ggsn version " + std::to_string(v), Expect::Refuse, true, {"version"});
    {
        Bytes f = ggsnFile(t, b);
        putLE<std::uint32_t>(f, 8, 0x7fffffffu);
        x.add("llamacpp.ggsn.n_token", "ggsn", f, "import", "n_token 2^31-1", Expect::Refuse, true,
              {"n_token"});
    }
    // Every cell shared by sequences 0 and 1 (legal in a session); --sequence picks one.
    {
        StateBody m = b;
        for (auto& cell : m.cells)
            cell.seqIds = {0, 1};
        const Bytes f = ggsnFile(t, m);
        x.add("llamacpp.ggsn.sequences", "ggsn", f, "import",
              "every cell in sequences 0 and 1, --sequence 1", Expect::Either, false, {},
              {"--sequence", "1"});
        for (const char* s : {"7", "-2", "4294967296"})
            x.add("llamacpp.ggsn.sequences", "ggsn", f, "import",
                  std::string("--sequence ") + s + " (the file holds 0 and 1)", Expect::Refuse,
                  true, {"sequence"}, {"--sequence", s})
                .names.push_back("--sequence"); // the flag or the file
    }
    // llama.cpp's session loader wants every byte used; kvscope may warn or refuse.
    {
        Bytes f = ggsnFile(t, b);
        f.insert(f.end(), 100, 0x5a);
        x.add("llamacpp.ggsn.trailing", "ggsn", f, "import", "100 bytes after the state",
              Expect::Either, false, {});
    }
    const Bytes g = ggsnFile(t, b);
    const std::size_t archAt = 12 + 4 * t.size();
    for (std::size_t cut : truncationPoints(g.size(), {archAt, archAt + 4, archAt + 9}, 6))
        x.add("llamacpp.ggsn.truncated", "ggsn",
              Bytes(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(cut)), x.nextCommand(),
              "first " + std::to_string(cut) + " bytes", Expect::Refuse, true, {});
    for (const char* cmd : {"verify", "import", "continue"})
        x.add("llamacpp.ggsn.valid", "ggsn", g, cmd, "the state as a valid ggsn (control)",
              Expect::Succeed, false, {});
}

void slotCases(Ctx& x) {
    const StateBody& b = x.base.body;
    SlotBlob valid;
    valid.tokens = x.base.tokens;
    for (const char* cmd : {"verify", "import", "continue"})
        x.add("llamacpp.slot.valid", "slot", slotFile(valid, b), cmd,
              "the state as a valid slot file (control)", Expect::Succeed, false, {});
    auto lie = [&](const std::string& tag, SlotBlob blob, const std::string& note,
                   std::vector<std::string> fields, Expect e = Expect::Refuse) {
        x.add("llamacpp.slot." + tag, "slot", slotFile(blob, b), x.nextCommand(), note, e,
              e == Expect::Refuse, std::move(fields));
    };
    {
        SlotBlob s = valid;
        s.version = 2;
        lie("version", s, "packed blob version 2", {"version"});
    }
    {
        Bytes w = valid.words(); // packed n counts tokens the blob does not hold
        putLE<std::uint32_t>(w, 8, static_cast<std::uint32_t>(valid.tokens.size() + 100));
        x.add("llamacpp.slot.count", "slot", slotFileWords(w, b), "import",
              "packed n = 121 in a blob holding 21 tokens", Expect::Refuse, true,
              {"token", "n_token", "slot"});
    }
    {
        SlotBlob s = valid;
        s.mediaCount = 0x40000000u;
        lie("media-count", s, "media count 2^30 in a 26-word blob", {"media"});
    }
    {
        SlotBlob s = valid;
        s.mediaCount = 1;
        s.mediaStarts = {3};
        s.media = {Bytes(10, 0x42)};
        s.tokens[3] = -1;
        lie("media", s, "one 10-byte media chunk at token 3 (a text-only model)", {"media"},
            Expect::Either);
        s.media = {Bytes(4, 0x42)};
        Bytes w = s.words(); // the chunk's length (4 bytes before its 4 bytes) claims 2^32-16
        putLE<std::uint32_t>(w, w.size() - 8, 0xfffffff0u);
        x.add("llamacpp.slot.media-length", "slot", slotFileWords(w, b), x.nextCommand(),
              "media chunk length 2^32-16 in a 4-byte chunk", Expect::Refuse, true, {"media"});
    }
    {
        SlotBlob s = valid;
        s.tokens[5] = -1;
        lie("token-minus-1", s, "token 5 is -1 (a media position) with no media", {"token"});
    }
    {
        SlotBlob s = valid;
        s.tokens[2] = 100000;
        lie("token-range", s, "token 2 = 100000 (vocabulary 512)", {"token"});
    }
}

} // namespace

void addLlamaCppSessionCases(Corpus& corpus) {
    const fs::path src = fs::path(corpus.bases().data) / "llamacpp/stories260K/tim-dog.ggsq";
    if (!fs::exists(src))
        throw std::runtime_error(src.string() + " is missing");
    Ctx x{corpus, StateParts::fromGgsq(readAll(src)), corpus.bases().gguf};
    stateCases(x);
    cellCountCases(x);
    sessionCases(x);
    slotCases(x);
}

} // namespace kvscope::hostile
