// The probes of issue 45 (`localize A [B]`, `branches A B`, `lens S`, `attribute S`) on hostile
// input:
//   probe.args.<cmd>     out-of-range and absurd arguments on valid states (--map-blocks,
//                        --max-evaluations, --profile, --top, --from/--to, --token): an error
//                        names the flag; a value that means nothing must be refused;
//   probe.pair.<cmd>     two states that do not belong together: other tokens, other lengths,
//                        another model's (and another geometry's) state, an evicted state, a
//                        head-masked one, a ledger claiming another architecture, the same file
//                        twice, a one-token state;
//   probe.model.<cmd>    a model of another geometry (aidreams260K) with a stories260K state;
//   probe.kvsnap.<cmd>   the hostile snapshots of cases_kvsnap.cpp / cases_headmask.cpp (built
//                        by those families into fixtures/probe-kvsnap/, so the mutators are
//                        theirs) fed to each probe: as localize's A and B, branches' B, lens and
//                        attribute (also forced, and attribute --heads). The source case's
//                        expectation and fields come along.
#include "families.h"

#include "snapfile/reader.h"
#include "snapfile/writer.h"

#include <map>
#include <set>

namespace kvscope::hostile {

namespace {

struct Arg {
    std::vector<std::string> args;
    std::string flag; // the name the error must contain ("a|b": either)
    Expect expect;
    std::string note;
    bool strict = false; // a value that means nothing: exit 0 fails the run
};

void argumentCases(Corpus& c) {
    const Bases& b = c.bases();
    const std::string m = b.llama2c, s = b.snapshot;
    std::vector<Arg> cases;
    auto add = [&](std::vector<std::string> args, std::string flag, Expect e, std::string note,
                   bool strict = false) {
        cases.push_back({std::move(args), std::move(flag), e, std::move(note), strict});
    };
    // localize (A = B: nothing to find, the search ends at once).
    auto localize = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"localize", s, b.snapshotGguf, "-m", m};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    for (const char* v : {"-1", "-2147483648"})
        add(localize({"--map-blocks", v}), "map-blocks", Expect::Refuse,
            std::string("localize --map-blocks ") + v, true);
    add(localize({"--map-blocks", "2147483648"}), "map-blocks", Expect::Refuse,
        "localize --map-blocks 2^31 (not an int)", true);
    for (const char* v : {"2147483647", "0"})
        add(localize({"--map-blocks", v}), "map-blocks", Expect::Either,
            std::string("localize --map-blocks ") + v + " (legal: at most one block a slot)");
    for (const char* v : {"0", "-1", "2147483648", "nan"})
        add(localize({"--max-evaluations", v}), "max-evaluations", Expect::Refuse,
            std::string("localize --max-evaluations ") + v, true);
    add(localize({"--max-evaluations", "2147483647"}), "max-evaluations", Expect::Either,
        "localize --max-evaluations 2^31-1 (the search ends on its own)");
    add({"localize", s, "-m", m, "--max-evaluations", "1"}, "max-evaluations", Expect::Either,
        "localize --max-evaluations 1 (A replayed: one step)");
    for (const char* p : {"bogus", "", "EXACT"})
        add(localize({"--profile", p}), "profile", Expect::Refuse,
            std::string("localize --profile '") + p + "'", true);

    // lens: top, from, to (base.kvsnap: 13 tokens).
    auto lens = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"lens", s, "-m", m};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    for (const char* t : {"0", "-1", "2147483648"})
        add(lens({"--top", t}), "top", Expect::Refuse, std::string("lens --top ") + t, true);
    add(lens({"--top", "2147483647", "--json"}), "top", Expect::Either,
        "lens --top 2^31-1 (at most the vocabulary)");
    for (const char* f : {"-1", "13", "9223372036854775807", "99999999999999999999"})
        add(lens({"--from", f}), "from", Expect::Refuse, std::string("lens --from ") + f, true);
    for (const char* t : {"0", "14", "-1", "9223372036854775807", "-9223372036854775808"})
        add(lens({"--to", t}), "to", Expect::Refuse, std::string("lens --to ") + t, true);
    add(lens({"--from", "5", "--to", "3"}), "to", Expect::Refuse, "lens --from 5 --to 3 (reversed)",
        true);
    add(lens({"--from", "5", "--to", "5"}), "to", Expect::Refuse, "lens --from 5 --to 5 (empty)",
        true);
    add(lens({"--from", "12", "--to", "13"}), "to", Expect::Succeed,
        "lens --from 12 --to 13 (the last position alone)");

    // attribute: slots (--top), heads (--top, --token).
    auto attribute = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"attribute", s, "-m", m};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    for (const char* t : {"0", "-1", "2147483648"}) {
        add(attribute({"--top", t}), "top", Expect::Refuse, std::string("attribute --top ") + t,
            true);
        add(attribute({"--heads", "--top", t}), "top", Expect::Refuse,
            std::string("attribute --heads --top ") + t, true);
    }
    add(attribute({"--top", "2147483647"}), "top", Expect::Either,
        "attribute --top 2^31-1 (every slot)");
    for (const char* t : {"512", "-1", "-2147483648", "2147483647", "2147483648", "abc"})
        add(attribute({"--heads", "--token", t}), "token", Expect::Refuse,
            std::string("attribute --heads --token ") + t + " (vocabulary 512)", true);
    add(attribute({"--token", "5"}), "token|heads", Expect::Refuse,
        "attribute --token without --heads", true);
    add(attribute({"--heads", "--token", "511"}), "token", Expect::Succeed,
        "attribute --heads --token 511 (the last id: legal)");

    for (auto& a : cases) {
        const auto dir = c.newCaseDir();
        const std::string cmd = commandOf(a.args);
        addCase(c, dir,
                {"probe.args." + cmd,
                 "cli-args",
                 a.args,
                 a.expect,
                 alternatives(a.flag),
                 {},
                 "",
                 a.note});
        Case& k = c.cases().back();
        k.mustRefuse = a.strict && a.expect == Expect::Refuse;
        k.cleanOnSuccess = true;
    }
}

// base.kvsnap with its ledger's model architecture replaced (the tensors stay llama's).
void writeWithArchitecture(const std::string& from, const fs::path& to, const std::string& arch) {
    auto r = snapfile::Reader::open(from);
    if (!r)
        throw std::runtime_error(r.message());
    nlohmann::json m = r.value().manifest();
    m["model"]["config"]["architecture"] = arch;
    auto w = snapfile::Writer::create(to.string());
    if (!w)
        throw std::runtime_error(w.message());
    for (const auto& info : r.value().blobs()) {
        auto data = r.value().readBlob(info.name);
        if (!data)
            throw std::runtime_error(data.message());
        if (Status st = w.value()->addBlob(info.name, info.dtype, info.shape, data.value().data(),
                                           data.value().size());
            !st)
            throw std::runtime_error(st.message());
    }
    if (Status st = w.value()->finish(m); !st)
        throw std::runtime_error(st.message());
}

// A second state made in the case folder before the command (setup, not judged).
struct Made {
    std::string file; // in the case folder
    std::vector<std::string> setup;
};

void pairCases(Corpus& c) {
    const Bases& b = c.bases();
    const std::string m = b.llama2c, s = b.snapshot;
    // Each partner of base.kvsnap: its path (or what setup makes), the names an error must
    // hold, the fields, and what localize and branches should do with it.
    struct Partner {
        std::string tag, note;
        std::string path;               // absolute, or a file setup makes in the case folder
        std::vector<std::string> setup; // kvscope-cli args run first in the case folder
        std::string fields;             // "a|b"
        Expect localize, branches;      // base as A, the partner as B
        bool strictLocalize = false;    // localize must refuse
        std::string archTag;            // non-empty: write base with this architecture
    };
    const std::vector<Partner> partners = {
        {"other-tokens",
         "B holds other tokens (another prompt)",
         b.snapshotB,
         {},
         "token",
         Expect::Refuse,
         Expect::Either,
         true,
         ""},
        {"shorter",
         "B is A truncated to 8 tokens (another cache length)",
         "short.kvsnap",
         {"truncate", s, "--at", "8", "-m", m, "-o", "short.kvsnap"},
         "token|length",
         Expect::Refuse,
         Expect::Either,
         true,
         ""},
        {"one-token",
         "B is A truncated to 1 token",
         "one.kvsnap",
         {"truncate", s, "--at", "1", "-m", m, "-o", "one.kvsnap"},
         "token|length",
         Expect::Refuse,
         Expect::Either,
         true,
         ""},
        {"longer",
         "B is A continued by 3 tokens (another cache length)",
         "long.kvsnap",
         {"continue", s, "-m", m, "-n", "3", "--temperature", "0", "--snapshot-out", "long.kvsnap"},
         "token|length",
         Expect::Refuse,
         Expect::Either,
         true,
         ""},
        {"other-geometry",
         "B is a state of aidreams260K (4 layers, head size 16)",
         b.snapshotFar,
         {},
         "layer|head|shape|geometry|model",
         Expect::Refuse,
         Expect::Refuse,
         true,
         ""},
        {"gguf-copy",
         "B is the same tokens captured with stories260K.gguf (same weights)",
         b.snapshotGguf,
         {},
         "model|fingerprint",
         Expect::Either,
         Expect::Either,
         false,
         ""},
        {"hf-copy",
         "B is the same tokens captured with the converted HF folder",
         b.snapshotHf,
         {},
         "model|fingerprint",
         Expect::Either,
         Expect::Either,
         false,
         ""},
        {"evicted",
         "B is A evicted by H2O to half its slots (7 of 13)",
         "evicted.kvsnap",
         {"survive", s, "-m", m, "--policy", "h2o", "--budget", "0.5", "-n", "2", "-o",
          "evicted.kvsnap"},
         "slot|evict|kept|length",
         Expect::Either,
         Expect::Either,
         false,
         ""},
        {"head-masked",
         "B is A with a TOVA head-adaptive head mask",
         b.snapshotHeadMask,
         {},
         "head_mask|head mask",
         Expect::Either,
         Expect::Either,
         false,
         ""},
        {"mamba",
         "B's ledger says architecture mamba (llama tensors)",
         "mamba.kvsnap",
         {},
         "architecture",
         Expect::Refuse,
         Expect::Refuse,
         true,
         "mamba"},
        {"same-file",
         "A and B are the same file",
         s,
         {},
         "",
         Expect::Either,
         Expect::Either,
         false,
         ""},
    };
    for (const auto& p : partners) {
        for (const bool swapped : {false, true}) {
            for (const char* cmd : {"localize", "branches"}) {
                if (p.tag == "same-file" && swapped)
                    continue;
                const auto dir = c.newCaseDir();
                std::string partner = p.path;
                if (!p.archTag.empty()) {
                    writeWithArchitecture(s, dir / p.path, p.archTag);
                    partner = (dir / p.path).string();
                }
                const std::string A = swapped ? partner : s, B = swapped ? s : partner;
                const bool isLocalize = std::string(cmd) == "localize";
                const Expect e = isLocalize ? p.localize : p.branches;
                addCase(c, dir,
                        {std::string("probe.pair.") + cmd,
                         "kvsnap",
                         {cmd, A, B, "-m", m},
                         e,
                         {baseName(partner)},
                         p.fields.empty() ? std::vector<std::string>{} : alternatives(p.fields),
                         p.path.front() == '/' ? partner : (dir / p.path).string(),
                         std::string(swapped ? "swapped: " : "") + p.note});
                Case& k = c.cases().back();
                if (!p.setup.empty())
                    k.setup.push_back(p.setup);
                k.mustRefuse = e == Expect::Refuse && (isLocalize ? p.strictLocalize : true);
                k.cleanOnSuccess = true;
            }
        }
    }
    // One-state probes of the made states: lens and attribute of a one-token, an evicted and a
    // mamba-labelled state.
    for (const auto& p : partners) {
        if (p.tag != "one-token" && p.tag != "evicted" && p.tag != "mamba")
            continue;
        for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
                 {"lens"}, {"attribute"}, {"attribute", "--heads"}}) {
            const auto dir = c.newCaseDir();
            std::string state = p.path;
            if (!p.archTag.empty()) {
                writeWithArchitecture(s, dir / p.path, p.archTag);
                state = (dir / p.path).string();
            }
            std::vector<std::string> args = {extra[0], state, "-m", m};
            args.insert(args.end(), extra.begin() + 1, extra.end());
            const Expect e = p.tag == "mamba" ? Expect::Refuse : Expect::Either;
            addCase(c, dir,
                    {"probe.pair." + extra[0],
                     "kvsnap",
                     args,
                     e,
                     {baseName(state)},
                     alternatives(p.fields),
                     (dir / p.path).string(),
                     p.note + " (alone)"});
            Case& k = c.cases().back();
            if (!p.setup.empty())
                k.setup.push_back(p.setup);
            k.mustRefuse = e == Expect::Refuse;
            k.cleanOnSuccess = true;
        }
    }
}

// A model of another geometry (aidreams260K: 4 layers, 4 KV heads of 16) with stories260K's
// states.
void modelCases(Corpus& c) {
    const Bases& b = c.bases();
    const std::string& s = b.snapshot;
    const std::vector<std::vector<std::string>> cmds = {
        {"localize", s, "-m", b.aidreams},
        {"localize", s, b.snapshotGguf, "-m", b.aidreams},
        {"branches", s, b.snapshotB, "-m", b.aidreams},
        {"lens", s, "-m", b.aidreams},
        {"lens", s, "-m", b.aidreams, "--force"},
        {"attribute", s, "-m", b.aidreams, "--force"},
        {"attribute", s, "-m", b.aidreams, "--heads", "--force"},
    };
    for (const auto& args : cmds) {
        const auto dir = c.newCaseDir();
        addCase(c, dir,
                {"probe.model." + args[0],
                 "kvsnap",
                 args,
                 Expect::Refuse,
                 {"base.kvsnap", "aidreams260K.bin"},
                 alternatives("layer|head|shape|geometry|model"),
                 b.aidreams,
                 "a stories260K state with aidreams260K (another geometry)"});
        Case& k = c.cases().back();
        k.mustRefuse = true;
        k.cleanOnSuccess = true;
    }
}

// What a probe must do with a cache the forward pass turns into NaN (kv-nan: every key of
// layer 2) or overflows (kv-huge: values 3e38 in layer 0), forced: these once ran to exit 0
// with "nothing that matters (KL 0)", "changes no layer" and "log p nan" (a NaN KL compared
// as 0). `probe` indexes the probe list of snapshotCases.
void sharpen(Case& k, const std::string& file, std::size_t probe) {
    const bool nan = file == "kv-nan.kvsnap", huge = file == "kv-huge.kvsnap";
    if (!nan && !huge)
        return;
    const std::string layer = nan ? "layer 2" : "layer 0";
    const bool refuse = probe == 2 || probe >= 5 || (nan && probe == 1);
    if (refuse) { // branches, attribute; localize when the reference is NaN
        k.expect = Expect::Refuse;
        k.mustRefuse = true;
        k.fields = {"non-finite", "nonfinite"};
    } else if (probe == 0 || probe == 1) { // localize names the layer
        k.expect = Expect::Either;
        k.successMustSay = {"damage that matters is in " + layer};
    } else if (probe == 4) { // lens --force: the restored column changes from the layer
        k.expect = Expect::Either;
        k.successMustSay = {"prediction from " + layer};
    }
}

// The hostile snapshots of the kvsnap families, through the probes.
void snapshotCases(Corpus& c) {
    const Bases& b = c.bases();
    const std::string& m = b.llama2c;
    // The source families write into their own corpus under fixtures/; only their files are
    // used (copied into each case folder under their own names).
    Corpus src(c.fixtures() / "probe-kvsnap", b, 0x70726f6265ull);
    addKvsnapCases(src);
    addHeadMaskCases(src);

    // Which source cases: every content lie (not its forced duplicate), the first case of each
    // head-mask / position / logits class, every bomb, every fifth of the rest.
    std::set<std::string> seenFamily;
    std::map<std::string, int> perFamily;
    struct Pick {
        const Case* source;
        bool thorough; // through every probe; otherwise one probe, rotating
    };
    std::vector<Pick> picks;
    for (const auto& k : src.cases()) {
        if (k.input.empty() || fs::path(k.input).extension() != ".kvsnap" ||
            k.family == "kvsnap.foreign" || k.family == "kvsnap.headmask.export" ||
            k.family == "kvsnap.headmask.refused")
            continue;
        if (k.family == "kvsnap.content") {
            if (std::find(k.args.begin(), k.args.end(), "--force") == k.args.end())
                picks.push_back({&k, true});
        } else if (k.family.rfind("kvsnap.headmask.", 0) == 0 ||
                   k.family.rfind("kvsnap.positions.", 0) == 0 ||
                   k.family.rfind("kvsnap.logits.", 0) == 0) {
            if (seenFamily.insert(k.family).second)
                picks.push_back({&k, true});
        } else if (k.family == "kvsnap.bomb" || perFamily[k.family]++ % 5 == 0) {
            picks.push_back({&k, false});
        }
    }

    // The probe command lines for hostile state `h` (base.kvsnap the other state).
    const std::string& s = b.snapshot;
    const std::vector<
        std::pair<std::string, std::function<std::vector<std::string>(const std::string&)>>>
        probes = {
            {"localize",
             [&](const std::string& h) {
                 return std::vector<std::string>{"localize", h, "-m", m};
             }},
            {"localize",
             [&](const std::string& h) {
                 return std::vector<std::string>{"localize", s, h, "-m", m};
             }},
            {"branches",
             [&](const std::string& h) {
                 return std::vector<std::string>{"branches", s, h, "-m", m};
             }},
            {"lens",
             [&](const std::string& h) {
                 return std::vector<std::string>{"lens", h, "-m", m};
             }},
            {"lens",
             [&](const std::string& h) {
                 return std::vector<std::string>{"lens", h, "-m", m, "--force"};
             }},
            {"attribute",
             [&](const std::string& h) {
                 return std::vector<std::string>{"attribute", h, "-m", m, "--force"};
             }},
            {"attribute",
             [&](const std::string& h) {
                 return std::vector<std::string>{"attribute", h, "-m", m, "--heads", "--force"};
             }},
        };
    std::size_t rot = 0;
    for (const auto& pick : picks) {
        const Case& k = *pick.source;
        std::vector<std::size_t> which;
        if (pick.thorough)
            for (std::size_t i = 0; i < probes.size(); ++i)
                which.push_back(i);
        else
            which.push_back(rot++ % probes.size());
        for (std::size_t i : which) {
            const auto dir = c.newCaseDir();
            const fs::path path = dir / baseName(k.input);
            fs::copy_file(k.input, path);
            std::vector<std::string> args = probes[i].second(path.string());
            const bool forced = std::find(args.begin(), args.end(), "--force") != args.end() ||
                                probes[i].first == "localize" || // both restore forcibly
                                probes[i].first == "branches";
            // The source's expectation, except what a forced restore may legally take (finite
            // logits that differ from what the cache computes; a valid or all-hidden mask).
            Expect e = k.expect;
            bool strict = k.mustRefuse;
            if (k.family.rfind("kvsnap.logits.", 0) == 0 && forced) {
                e = Expect::Either;
                strict = false;
            }
            if (k.family == "kvsnap.headmask.valid")
                e = Expect::Either; // a probe may read a head mask or refuse it by name
            if (e == Expect::Succeed)
                e = Expect::Either;
            addCase(c, dir,
                    {"probe.kvsnap." + probes[i].first,
                     "kvsnap",
                     args,
                     e,
                     {},
                     k.fields,
                     path.string(),
                     k.family + ": " + k.note});
            Case& n = c.cases().back();
            n.mustRefuse = strict && e == Expect::Refuse;
            n.cleanOnSuccess = true;
            if (k.maxRssKb)
                n.maxRssKb = k.maxRssKb;
            if (k.timeoutSeconds > 0)
                n.timeoutSeconds = k.timeoutSeconds;
            sharpen(n, baseName(k.input), i);
        }
    }
}

} // namespace

void addProbeCases(Corpus& c) {
    argumentCases(c);
    pairCases(c);
    modelCases(c);
    snapshotCases(c);
}

} // namespace kvscope::hostile
