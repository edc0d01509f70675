// .kvsnap states the ledger's newer fields make possible, written by the project's snapfile
// writer so that the lie is in the ledger, not the container:
//   kvsnap.headmask.*   ledger version 2 head masks (survive's per-head eviction): the wrong
//                       length (count and blob agreeing), entries 2 and 255, a mask in a
//                       version 1 ledger, a missing or f32 blob, a count of 2^40, every head
//                       hiding every slot — through verify, diff (a broken mask must make it
//                       exit 1), export --format llamacpp (which has no head mask: refuse, or
//                       write what it can hold and say so), continue, truncate, patch, splice;
//   kvsnap.positions.*  recorded positions far below zero, shifted by -5, beyond the context,
//                       while the keys were rotated at 0..n (verify must report an error,
//                       continue must refuse);
//   kvsnap.logits.*     logits that are finite but not what the state computes
//                       (logits.equivalence): continue must refuse them as verify does.
#include "families.h"

#include "snapfile/reader.h"
#include "snapfile/writer.h"

namespace kvscope::hostile {

namespace {

using json = nlohmann::json;

struct Blob {
    snapfile::BlobInfo info;
    Bytes data;
};

struct Snap {
    json manifest;
    std::vector<Blob> blobs;

    static Snap read(const std::string& path) {
        auto r = snapfile::Reader::open(path);
        if (!r)
            throw std::runtime_error(r.message());
        Snap s{r.value().manifest(), {}};
        for (const auto& info : r.value().blobs()) {
            auto data = r.value().readBlob(info.name);
            if (!data)
                throw std::runtime_error(data.message());
            s.blobs.push_back({info, std::move(data).value()});
        }
        return s;
    }
    Blob* blob(const std::string& name) {
        for (auto& b : blobs)
            if (b.info.name == name)
                return &b;
        return nullptr;
    }
    void write(const fs::path& path) const {
        auto w = snapfile::Writer::create(path.string());
        if (!w)
            throw std::runtime_error(w.message());
        for (const auto& b : blobs)
            if (Status s = w.value()->addBlob(b.info.name, b.info.dtype, b.info.shape,
                                              b.data.data(), b.data.size());
                !s)
                throw std::runtime_error(s.message());
        if (Status s = w.value()->finish(manifest); !s)
            throw std::runtime_error(s.message());
    }
};

// The command lines a head-masked or repositioned snapshot `s` goes through.
std::vector<std::string> commandArgs(const std::string& cmd, const std::string& s, const Bases& b,
                                     const fs::path& dir) {
    const std::string& m = b.llama2c;
    if (cmd == "diff")
        return {"diff", s, b.snapshot};
    if (cmd == "export-llamacpp")
        return {"export", s, "--format", "llamacpp", "-o", (dir / "out.ggsq").string()};
    if (cmd == "export-safetensors")
        return {"export", s, "--format", "safetensors", "-o", (dir / "out.safetensors").string()};
    if (cmd == "patch")
        return {"patch",       b.snapshot, "--from", s, "--layer", "1",
                "--positions", "0:3",      "-m",     m, "-o",      (dir / "out.kvsnap").string()};
    if (cmd == "splice")
        return {"splice", b.snapshot, "--from", s, "--range", "1:3",
                "--at",   "2",        "-m",     m, "-o",      (dir / "out.kvsnap").string()};
    return snapshotArgs(cmd, s, b, dir);
}

struct Ctx {
    Corpus& c;

    Case& add(const std::string& family, const Snap& s, const std::string& tag,
              const std::string& cmd, const std::string& note, Expect e, bool strict,
              std::vector<std::string> fields) {
        const auto dir = c.newCaseDir();
        const auto path = dir / (tag + ".kvsnap");
        s.write(path);
        addCase(c, dir,
                {family,
                 "kvsnap",
                 commandArgs(cmd, path.string(), c.bases(), dir),
                 e,
                 {},
                 std::move(fields),
                 path.string(),
                 note});
        Case& k = c.cases().back();
        k.mustRefuse = strict && e == Expect::Refuse;
        k.cleanOnSuccess = true;
        return k;
    }
};

void headMaskCases(Ctx& x) {
    const Snap base = Snap::read(x.c.bases().snapshotHeadMask);
    if (!base.manifest.contains("head_mask"))
        throw std::runtime_error(x.c.bases().snapshotHeadMask +
                                 ": no head_mask (survive changed; update cases_headmask.cpp)");
    auto mutated = [&](auto f) {
        Snap s = base;
        f(s);
        return s;
    };
    auto resize = [](Snap& s, std::size_t n) {
        Blob* b = s.blob("head_mask");
        b->data.resize(n, 1);
        b->info.shape = {static_cast<std::int64_t>(n)};
        s.manifest["head_mask"]["count"] = n;
    };
    const std::size_t count = base.manifest["head_mask"]["count"].get<std::size_t>();
    struct Lie {
        std::string tag, note;
        Snap snap;
        std::vector<std::string> fields;
    };
    const std::vector<Lie> broken = {
        {"short",
         "head mask one entry short (count and blob agree)",
         mutated([&](Snap& s) { resize(s, count - 1); }),
         {"head_mask", "head mask"}},
        {"long",
         "head mask of 2x the entries (count and blob agree)",
         mutated([&](Snap& s) { resize(s, 2 * count); }),
         {"head_mask", "head mask"}},
        {"values-2",
         "head mask entries 2 in every tenth place",
         mutated([&](Snap& s) {
             auto& d = s.blob("head_mask")->data;
             for (std::size_t i = 0; i < d.size(); i += 10)
                 d[i] = 2;
         }),
         {"head_mask", "head mask"}},
        {"values-255",
         "every head mask entry 255",
         mutated([&](Snap& s) {
             auto& d = s.blob("head_mask")->data;
             std::fill(d.begin(), d.end(), 255);
         }),
         {"head_mask", "head mask"}},
        {"ledger-v1",
         "a head mask in a version 1 ledger",
         mutated([&](Snap& s) { s.manifest["kvscope_ledger"] = 1; }),
         {"head_mask", "version"}},
    };
    // Every broken mask through every command that reads it.
    for (const auto& lie : broken)
        for (const char* cmd : {"verify", "diff", "export-llamacpp", "continue"})
            x.add("kvsnap.headmask." + lie.tag, lie.snap, lie.tag, cmd, lie.note, Expect::Refuse,
                  true, lie.fields);
    // More lies, one command each.
    const std::vector<std::tuple<Lie, std::string>> more = {
        {{"f32",
          "the head_mask blob stored as f32 (the ledger says u8)",
          mutated([&](Snap& s) {
              Blob* b = s.blob("head_mask");
              Bytes d;
              for (auto v : b->data)
                  appendLE<float>(d, v);
              b->data = d;
              b->info.dtype = snapfile::DType::F32;
          }),
          {"head_mask", "dtype"}},
         "verify"},
        {{"absent",
          "head_mask in the manifest, no blob",
          mutated([&](Snap& s) {
              std::erase_if(s.blobs, [](const Blob& b) { return b.info.name == "head_mask"; });
          }),
          {"head_mask"}},
         "continue"},
        {{"count-2^40",
          "head_mask.count 2^40 (the blob holds the real mask)",
          mutated([&](Snap& s) { s.manifest["head_mask"]["count"] = std::int64_t{1} << 40; }),
          {"head_mask", "count"}},
         "diff"},
        {{"count-negative",
          "head_mask.count -1",
          mutated([&](Snap& s) { s.manifest["head_mask"]["count"] = -1; }),
          {"head_mask", "count"}},
         "export-llamacpp"},
        {{"ledger-v3",
          "ledger version 3 with a head mask",
          mutated([&](Snap& s) { s.manifest["kvscope_ledger"] = 3; }),
          {"version"}},
         "inspect"},
    };
    for (const auto& [lie, cmd] : more)
        x.add("kvsnap.headmask." + lie.tag, lie.snap, lie.tag, cmd, lie.note, Expect::Refuse, true,
              lie.fields);
    // Every head hiding every slot: well-formed, but nothing left to attend to.
    {
        const Snap s = mutated([&](Snap& m) {
            auto& d = m.blob("head_mask")->data;
            std::fill(d.begin(), d.end(), 0);
        });
        for (const char* cmd : {"verify", "continue", "export-llamacpp"})
            x.add("kvsnap.headmask.all-hidden", s, "all-hidden", cmd,
                  "every head mask entry 0 (no head sees any slot)", Expect::Either, false,
                  {"head_mask", "head mask", "logits"}); // its stored logits no longer match
    }
    // The valid per-head eviction: what must work, what must refuse by name, and an export
    // to a format without head masks.
    for (const char* cmd : {"verify", "continue", "truncate", "diff"})
        x.add("kvsnap.headmask.valid", base, "valid", cmd,
              "survive TOVA head-adaptive 50 % (control)", Expect::Succeed, false, {});
    for (const char* cmd : {"patch", "splice", "fault lab"})
        x.add("kvsnap.headmask.refused", base, "valid", cmd,
              "a head-masked state where the command refuses one (documented)", Expect::Refuse,
              false, {"head_mask", "head mask", "head-masked"});
    {
        Case& k = x.add("kvsnap.headmask.export", base, "valid", "export-llamacpp",
                        "a mask that hides slots, exported to llama.cpp (no head masks)",
                        Expect::Either, false, {"head_mask", "head mask"});
        k.successMustSay = {"head mask", "head_mask"};
    }
}

void positionCases(Ctx& x) {
    const Snap base = Snap::read(x.c.bases().snapshot);
    const std::int64_t n = base.manifest["positions"]["count"].get<std::int64_t>();
    auto at = [&](std::int64_t first) {
        Snap s = base;
        Bytes& d = s.blob("positions")->data;
        for (std::int64_t i = 0; i < n; ++i)
            putLE<std::int64_t>(d, static_cast<std::size_t>(i) * 8, first + i);
        s.manifest["positions"]["next"] = first + n;
        return s;
    };
    const std::vector<std::tuple<std::string, std::int64_t, std::string>> shifts = {
        {"far-negative", -1000, "positions -1000.. (keys rotated at 0..n), next consistent"},
        {"shift-5", -5, "positions -5.. (keys rotated at 0..n), next consistent"},
        {"beyond-context", 1000, "positions 1000.. (context 512), next consistent"},
    };
    for (const auto& [tag, first, note] : shifts)
        for (const char* cmd : {"verify", "continue", "replay"})
            x.add("kvsnap.positions." + tag, at(first), tag, cmd, note, Expect::Refuse, true,
                  {"position", "provenance", "context"});
    {
        Snap s = base;
        Bytes& d = s.blob("logits")->data;
        for (std::size_t i = 0; i + 4 <= d.size(); i += 4)
            putLE<float>(d, i, getLE<float>(d, i) + static_cast<float>(i % 7));
        for (const char* cmd : {"verify", "continue"})
            x.add("kvsnap.logits.equivalence", s, "logits", cmd,
                  "stored logits perturbed by 0..6 (finite, right size)", Expect::Refuse, true,
                  {"logits", "equivalence"});
    }
}

} // namespace

void addHeadMaskCases(Corpus& c) {
    Ctx x{c};
    headMaskCases(x);
    positionCases(x);
}

} // namespace kvscope::hostile
