// Out-of-range arguments of the commands added since the first corpus: survive, insights,
// attention, export, import, random-model, convert — negative, huge, NaN and meaningless
// values for each numeric flag, on valid inputs. An error must name the flag; the values the
// issue shows accepted (`attention --query -2`, `survive --budget 25`, `random-model --layers
// 1024`) must be refused (an exit 0 fails the run).
#include "families.h"

namespace kvscope::hostile {

namespace {

struct Arg {
    std::vector<std::string> args;
    std::string flag; // the name the error must contain ("a|b": either)
    Expect expect;
    std::string note;
    bool strict = false;
};

} // namespace

void addLabArgumentCases(Corpus& c) {
    const Bases& b = c.bases();
    const std::string m = b.llama2c, s = b.snapshot;
    std::vector<Arg> cases;
    auto add = [&](std::vector<std::string> args, std::string flag, Expect e, std::string note,
                   bool strict = false) {
        cases.push_back({std::move(args), std::move(flag), e, std::move(note), strict});
    };

    // attention: layer, head, query row, top (stories260K: 5 layers, 8 heads, 13 tokens).
    auto attention = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"attention", s, "-m", m};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    add(attention({"--layer", "1", "--head", "0", "--query", "-2"}), "query", Expect::Refuse,
        "attention --query -2", true);
    for (const char* q : {"13", "4294967296", "nan"})
        add(attention({"--layer", "1", "--head", "0", "--query", q}), "query", Expect::Refuse,
            std::string("attention --query ") + q, true);
    for (const char* l : {"-1", "5", "2147483648"})
        add(attention({"--layer", l, "--head", "0"}), "layer", Expect::Refuse,
            std::string("attention --layer ") + l, true);
    for (const char* h : {"-1", "8"})
        add(attention({"--layer", "1", "--head", h}), "head", Expect::Refuse,
            std::string("attention --head ") + h, true);
    for (const char* t : {"-1", "0", "2147483647"})
        add(attention({"--layer", "1", "--head", "0", "--top", t}), "top", Expect::Either,
            std::string("attention --top ") + t);

    // survive: the budget is a fraction of the slots; steps, policy parameters, the sweep's
    // lists.
    auto survive = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"survive", s, "-m", m, "-n", "2"};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    add(survive({"--policy", "tova", "--budget", "25"}), "budget", Expect::Refuse,
        "survive --budget 25 (a fraction above 1)", true);
    for (const char* v : {"-0.5", "0", "nan", "inf", "1.5"})
        add(survive({"--policy", "h2o", "--budget", v}), "budget", Expect::Refuse,
            std::string("survive --budget ") + v, true);
    add(survive({"--policy", "h2o", "--budget", "1e-30"}), "budget", Expect::Either,
        "survive --budget 1e-30 (a tiny fraction)");
    for (const char* n : {"-1", "0", "1000000000"})
        add({"survive", s, "-m", m, "--policy", "sink-window", "--budget", "0.5", "-n", n}, "steps",
            n == std::string("-1") ? Expect::Refuse : Expect::Either,
            std::string("survive -n ") + n);
    add(survive({"--policy", "no-such-policy"}), "policy", Expect::Refuse,
        "survive --policy no-such-policy");
    for (const auto& [policy, p] :
         std::vector<std::pair<std::string, std::string>>{{"tova", "allocation=bogus"},
                                                          {"sink-window", "sinks=-1"},
                                                          {"sink-window", "sinks=1000000000000"},
                                                          {"snapkv", "window=nan"},
                                                          {"random", "seed=-1"},
                                                          {"h2o", "recent=1e300"},
                                                          {"quant-kivi", "bits=0"},
                                                          {"quant-kivi", "bits=99"},
                                                          {"tova", "bogus=1"}}) {
        // A budget only for the eviction policies (quantization keeps every slot).
        std::vector<std::string> extra = {"--policy", policy, "--param", p};
        if (policy.rfind("quant", 0) != 0)
            extra.insert(extra.end(), {"--budget", "0.5"});
        add(survive(extra), p.substr(0, p.find('=')), Expect::Refuse,
            "survive --policy " + policy + " --param " + p);
    }
    for (const auto& [flag, v] :
         std::vector<std::pair<std::string, std::string>>{{"--budgets", "nan"},
                                                          {"--budgets", "-1"},
                                                          {"--layers", "99"},
                                                          {"--layers", "-1"},
                                                          {"--allocations", "bogus"}})
        add({"survive", s, "-m", m, "--sweep", "-n", "2", flag, v}, flag.substr(2), Expect::Refuse,
            "survive --sweep " + flag + " " + v);

    // insights: numbers and filters.
    for (const char* n : {"0", "81", "-1", "4294967297"})
        add({"insights", "run", n, "-m", m}, "insight|number", Expect::Refuse,
            std::string("insights run ") + n);
    for (const char* t : {"0", "9", "-1", "nan"})
        add({"insights", "list", "--tier", t}, "tier", Expect::Refuse,
            std::string("insights list --tier ") + t);
    add({"insights", "list", "--class", "bogus"}, "class", Expect::Refuse,
        "insights list --class bogus");

    // export: cache types and layouts llama.cpp cannot hold.
    // The error must say which of the two types is wrong.
    for (const auto& [flag, v] : std::vector<std::pair<std::string, std::string>>{
             {"--key-type", "q3_k"}, {"--key-type", ""}, {"--value-type", "f64"}})
        add({"export", s, "--format", "llamacpp", flag, v, "-o", "out.ggsq"},
            flag == "--key-type" ? "key-type|key type|K type|K cache"
                                 : "value-type|value type|V type|V cache",
            Expect::Refuse, "export --format llamacpp " + flag + " '" + v + "'");
    add({"export", s, "--format", "llamacpp", "--value-type", "q8_0", "--transpose-v", "-o",
         "out.ggsq"},
        "value-type|transpose", Expect::Refuse,
        "a quantized V transposed (llama.cpp needs flash attention for quantized V)");
    add({"export", s, "--format", "safetensors", "--key-type", "q8_0", "-o", "out.safetensors"},
        "key-type", Expect::Either, "--key-type with the safetensors format");

    // import: the source format and the sequence.
    const std::string ggsq = b.data + "/llamacpp/stories260K/tim-dog.ggsq";
    add({"import", ggsq, "-m", b.gguf, "-o", "out.kvsnap", "--format", "bogus"}, "format",
        Expect::Refuse, "import --format bogus");
    add({"import", ggsq, "-m", b.gguf, "-o", "out.kvsnap", "--format", "safetensors"},
        "safetensors|format", Expect::Refuse, "a ggsq imported as --format safetensors", true);
    add({"import", b.pastKeyValues, "-m", m, "-o", "out.kvsnap", "--format", "llamacpp"},
        "llamacpp|llama.cpp|format", Expect::Refuse, "a .safetensors imported as --format llamacpp",
        true);
    // A ggsq holds one sequence whose stored id llama.cpp itself ignores: asking for another
    // one may be refused or noted (reported, not failed); a negative or 2^31 id is refused.
    for (const char* q : {"-2", "1", "2147483648"})
        add({"import", ggsq, "-m", b.gguf, "-o", "out.kvsnap", "--sequence", q}, "sequence",
            Expect::Refuse, std::string("import --sequence ") + q + " of a single-sequence ggsq",
            q != std::string("1"));

    // random-model: sizes are estimated before anything is allocated.
    // An 8B shape at 1024 layers is ~450 GB: more than any machine this runs on has, in memory
    // or on disk. (A 135M shape at 1024 layers, ~7 GB, may fit and stream to disk: legal, and
    // too slow for the corpus.)
    add({"random-model", "--shape", "llama-3.1-8b", "--layers", "1024", "-o", "rm"},
        "layers|fit|GB", Expect::Refuse,
        "random-model --shape llama-3.1-8b --layers 1024 (~450 GB)", true);
    for (const char* l : {"-1", "0", "4294967297", "nan"})
        add({"random-model", "--shape", "smollm2-135m", "--layers", l, "-o", "rm"}, "layers",
            Expect::Refuse, std::string("random-model --layers ") + l, true);
    add({"random-model", "--shape", "smollm2-135m", "--seed", "-1", "-o", "rm"}, "seed",
        Expect::Refuse, "random-model --seed -1");
    add({"random-model", "--shape", "bogus", "-o", "rm"}, "shape", Expect::Refuse,
        "random-model --shape bogus");
    add({"random-model", "--shape", "smollm2-135m", "--dtype", "f8", "-o", "rm"}, "dtype",
        Expect::Refuse, "random-model --dtype f8");

    // convert: target formats and dtypes.
    for (const auto& [flag, v] : std::vector<std::pair<std::string, std::string>>{
             {"--to", ""}, {"--to", "gguf"}, {"--out-dtype", "q4_0"}, {"--out-dtype", ""}})
        add({"convert", "-m", m, flag, v, "-o", "out-model"}, flag.substr(2),
            v == "gguf" ? Expect::Either : Expect::Refuse, "convert " + flag + " '" + v + "'");

    for (auto& a : cases) {
        const auto dir = c.newCaseDir();
        const std::string cmd = commandOf(a.args);
        addCase(
            c, dir,
            {"args." + cmd, "cli-args", a.args, a.expect, alternatives(a.flag), {}, "", a.note});
        Case& k = c.cases().back();
        k.mustRefuse = a.strict && a.expect == Expect::Refuse;
        k.cleanOnSuccess = true;
        if (cmd == "random-model")
            k.timeoutSeconds = 15; // refused before allocating, not after minutes of it
    }
}

} // namespace kvscope::hostile
