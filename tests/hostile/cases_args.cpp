// Out-of-range command-line arguments on valid inputs: sampler settings (NaN, 1e-40, inf,
// negative), step counts (-1, 10^12), layer/head/position/range arguments, seeds, profiles,
// fault parameters. An error must name the flag.
#include "families.h"

namespace kvscope::hostile {

namespace {

struct Arg {
    std::string command; // for the table
    std::vector<std::string> args;
    std::string flag; // the field the error must name
    Expect expect;
    std::string note;
};

} // namespace

void addArgumentCases(Corpus& c) {
    const Bases& b = c.bases();
    const std::string m = b.llama2c, s = b.snapshot, s2 = b.snapshotB;
    auto gen = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"generate", "-m", m, "-p", "Once upon a time", "-n", "3"};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    std::vector<Arg> cases;
    auto add = [&](std::vector<std::string> args, std::string flag, Expect e, std::string note) {
        cases.push_back({commandOf(args), std::move(args), std::move(flag), e, std::move(note)});
    };
    for (const char* t : {"nan", "1e-40", "-1", "inf", "1e39", ""})
        add(gen({"--temperature", t}), "temperature", Expect::Refuse,
            std::string("--temperature ") + t);
    for (const char* p : {"nan", "-0.1", "1.5", "1e-45"})
        add(gen({"--top-p", p}), "top-p",
            std::string(p) == "1e-45" ? Expect::Either : Expect::Refuse,
            std::string("--top-p ") + p);
    for (const char* k : {"-5", "2147483648", "100000"})
        add(gen({"--top-k", k}), "top-k",
            std::string(k) == "100000" ? Expect::Either : Expect::Refuse,
            std::string("--top-k ") + k);
    for (const char* seed : {"-1", "18446744073709551616", "0x10", "1.5"})
        add(gen({"--seed", seed}), "seed", Expect::Refuse, std::string("--seed ") + seed);
    add(gen({"--seed", "18446744073709551615"}), "seed", Expect::Either, "--seed 2^64-1");
    for (const char* n : {"-1", "1000000000000"})
        add({"generate", "-m", m, "-p", "Once", "-n", n, "--temperature", "0"}, "steps",
            std::string(n) == "0" ? Expect::Either : Expect::Either, std::string("-n ") + n);
    for (const char* ids : {"1,2,-3", "999999", "1,,2", "1000000000000", ""})
        add({"generate", "-m", m, "--prompt-ids", ids, "-n", "2", "--temperature", "0"},
            "prompt-ids|token", Expect::Refuse, std::string("--prompt-ids '") + ids + "'");
    add({"generate", "-m", m, "-p", "", "-n", "2", "--temperature", "0"}, "prompt", Expect::Either,
        "an empty prompt");
    add({"generate", "-m", m, "-p", std::string(600, 'x') + " long", "-n", "2", "--temperature",
         "0"},
        "context", Expect::Either, "a prompt longer than the context");
    for (const char* d : {"f8", ""})
        add(gen({"--dtype", d}), "dtype", Expect::Refuse, std::string("--dtype ") + d);
    for (const char* d : {"cuda:99", "tpu"})
        add(gen({"--device", d}), "device", Expect::Refuse, std::string("--device ") + d);
    for (const char* t : {"-1", "1000000000000"})
        add({"logits", "-m", m, "-p", "Once", "--top", t}, "top", Expect::Either,
            std::string("logits --top ") + t);
    for (const auto& [flag, v] :
         std::vector<std::pair<std::string, std::string>>{{"--length", "-1"},
                                                          {"--length", "0"},
                                                          {"--length", "1000000000"},
                                                          {"--seed", "-1"},
                                                          {"--top", "-1"}})
        add({"induction", "-m", m, flag, v}, flag.substr(2), Expect::Either,
            "induction " + flag + " " + v);
    add({"induction", "-m", m, "--text", ""}, "text", Expect::Either, "induction --text ''");
    for (const auto& [flag, v] :
         std::vector<std::pair<std::string, std::string>>{{"--layer", "-1"},
                                                          {"--layer", "999"},
                                                          {"-n", "-1"},
                                                          {"-n", "1000000000"},
                                                          {"--positions", "first"},
                                                          {"--positions", ""}}) {
        std::vector<std::string> a = {
            "transplant", "-m",      m,         "--recipient", "Once upon a time",
            "--donor",    "The cat", "--layer", "1",           "-n",
            "2"};
        if (flag == "--layer")
            a[8] = v;
        else if (flag == "-n")
            a[10] = v;
        else
            a.insert(a.end(), {flag, v});
        add(a, flag == "-n" ? "steps" : flag.substr(2), Expect::Refuse,
            "transplant " + flag + " " + v);
    }
    add({"transplant", "-m", m, "--recipient", "", "--donor", "", "--layer", "1"}, "recipient",
        Expect::Refuse, "transplant with empty texts");
    add({"transplant", "-m", m, "--layer", "1"}, "recipient", Expect::Refuse,
        "transplant without recipient or donor");

    const std::string out = "out.kvsnap";
    for (const char* at : {"0", "-1", "14", "9223372036854775807"})
        add({"truncate", s, "--at", at, "-m", m, "-o", out}, "at", Expect::Refuse,
            std::string("truncate --at ") + at);
    for (const auto& [flag, v] :
         std::vector<std::pair<std::string, std::string>>{{"--layer", "-1"},
                                                          {"--layer", "999"},
                                                          {"--layer", "5"},
                                                          {"--head", "999"},
                                                          {"--head", "-1"},
                                                          {"--positions", "5:2"},
                                                          {"--positions", "a:b"},
                                                          {"--positions", "0:999999"},
                                                          {"--positions", "-1:3"},
                                                          {"--positions", "9223372036854775807:0"},
                                                          {"--positions", "0:99999999999999999999"},
                                                          {"--positions", "3:3"}}) {
        // base (13 tokens) from b (16): a position range both cover unless it is the point.
        std::vector<std::string> a = {"patch", s, "--from", s2, "-m", m, "-o", out};
        if (flag == "--layer")
            a.insert(a.end(), {"--layer", v, "--positions", "0:5"});
        else if (flag == "--head")
            a.insert(a.end(), {"--layer", "1", "--head", v, "--positions", "0:5"});
        else
            a.insert(a.end(), {"--layer", "1", flag, v});
        add(a, flag.substr(2), v == "3:3" ? Expect::Either : Expect::Refuse,
            "patch " + flag + " " + v);
    }
    for (const auto& [flag, v] : std::vector<std::pair<std::string, std::string>>{
             {"--range", "0:99999999999999999999"},
             {"--range", "-5:2"},
             {"--range", "2:1"},
             {"--range", "0:100"},
             {"--range", "9223372036854775807:9223372036854775807"},
             {"--range", ":"},
             {"--at", "-1"},
             {"--at", "14"}}) {
        std::vector<std::string> a = {"splice", s, "--from", s2, "-m", m, "-o", out};
        if (flag == "--range")
            a.insert(a.end(), {"--range", v, "--at", "2"});
        else
            a.insert(a.end(), {"--range", "1:3", "--at", v});
        add(a, flag.substr(2), Expect::Refuse, "splice " + flag + " " + v);
    }
    for (const auto& [flag, v] :
         std::vector<std::pair<std::string, std::string>>{{"-n", "0"},
                                                          {"-n", "-1"},
                                                          {"-n", "1000000000"},
                                                          {"--steps", "-1"},
                                                          {"--steps", "1000000000"},
                                                          {"--seed-base", "18446744073709551615"},
                                                          {"--seed-base", "-1"},
                                                          {"--temperature", "nan"},
                                                          {"--top-p", "nan"},
                                                          {"--top-k", "-5"}}) {
        std::vector<std::string> a = {"fork", s, "-m", m, "-o", "forks", flag, v};
        if (flag != "--steps")
            a.insert(a.end(), {"--steps", "1"});
        // 10^9 steps stop at the context limit, like generate -n 10^12.
        const bool legal = v == "18446744073709551615" || (flag == "--steps" && v == "1000000000");
        add(a, flag == "-n" ? "branches" : flag.substr(2), legal ? Expect::Either : Expect::Refuse,
            "fork " + flag + " " + v);
    }
    for (const char* n : {"-1", "1000000000000", "0"})
        add({"continue", s, "-m", m, "-n", n}, "steps", Expect::Either,
            std::string("continue -n ") + n);
    for (const char* n : {"-1", "1000000000000"})
        add({"drift", s, s2, "-m", m, "-n", n}, "steps", Expect::Either,
            std::string("drift -n ") + n);
    for (const char* p : {"bogus", ""}) {
        add({"drift", s, s2, "-m", m, "-n", "2", "--profile", p}, "profile", Expect::Refuse,
            std::string("drift --profile '") + p + "'");
        add({"verify", s, "-m", m, "--profile", p}, "profile", Expect::Refuse,
            std::string("verify --profile '") + p + "'");
    }
    for (const char* t : {"nan", "-1", "inf"})
        add({"replay", s, "-m", m, "--threshold", t}, "threshold", Expect::Refuse,
            std::string("replay --threshold ") + t);
    add({"export", s, "--format", "npz", "-o", "out.npz"}, "format", Expect::Refuse,
        "export --format npz");
    add({"fault", "inject", "no-such-fault", s, "-o", out}, "no-such-fault", Expect::Refuse,
        "fault inject of an unknown fault");
    for (const auto& [fault, p] : std::vector<std::pair<std::string, std::string>>{
             {"position-offset", "offset"},
             {"position-offset", "offset=0"},
             {"position-offset", "offset=nan"},
             {"position-offset", "offset=9223372036854775807"},
             {"stale-next-position", "behind=999"},
             {"corrupt-layer", "layer=999"},
             {"corrupt-layer", "scale=nan"},
             {"truncated-cache", "drop=13"},
             {"leaked-state", "previous=99999"},
             {"wrong-rope-theta", "theta=0"},
             {"dtype-roundtrip", "via=f8"},
             {"position-offset", "bogus=1"}})
        add({"fault", "inject", fault, s, "-m", m, "-o", out, "--param", p},
            p.substr(0, p.find('=')), Expect::Refuse, "fault inject " + fault + " --param " + p);
    for (const auto& [flag, v] : std::vector<std::pair<std::string, std::string>>{
             {"-n", "-1"}, {"-n", "1000000000"}, {"--fault", "bogus"}})
        add({"fault", "lab", s, "-m", m, flag, v, "--fault", "position-offset"},
            flag == "-n" ? "steps" : v, flag == "-n" && v == "-1" ? Expect::Refuse : Expect::Either,
            "fault lab " + flag + " " + v);
    add({"convert", "-m", m, "--to", "onnx", "-o", "out-hf"}, "to", Expect::Refuse,
        "convert --to onnx");
    add({"convert", "-m", m, "--out-dtype", "f8", "-o", "out-hf"}, "out-dtype", Expect::Refuse,
        "convert --out-dtype f8");
    // One argument is at most 128 KiB (MAX_ARG_STRLEN).
    add({"tokenize", "-t", b.llama2cTok, "--text", std::string(120000, 'a')}, "text",
        Expect::Either, "tokenize a 120 KB run of one letter");
    add({"tokenize", "-t", b.tokenizerJson, "--text", std::string(120000, ' ')}, "text",
        Expect::Either, "tokenize 120 KB of spaces with an HF tokenizer");

    for (auto& a : cases) {
        const auto dir = c.newCaseDir();
        addCase(c, dir,
                {"args." + a.command,
                 "cli-args",
                 a.args,
                 a.expect,
                 alternatives(a.flag),
                 {},
                 "",
                 a.note});
    }
}

} // namespace kvscope::hostile
