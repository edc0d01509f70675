// kvscope-hostile: builds a seeded corpus of hostile inputs for every reader and command of
// kvscope-cli, runs the CLI on each case as a child process under limits, and reports crashes,
// hangs, memory blow-ups, unclear errors and unexpected successes. See README.md here.
//
//   kvscope-hostile --cli build/app/cli/kvscope-cli --data ../shared --out /tmp/hostile
//                   [--only CLASS[,CLASS...]] [--json] [--jobs 2] [--timeout 20]
//                   [--zygote build/tests/hostile/kvscope-cli-zygote]
//
// Exit status: 0 when no case crashed, hung, blew memory, damaged a file or failed unclearly;
// 1 otherwise; 2 for a usage error or when the valid bases could not be made.
#include "corpus.h"
#include "report.h"
#include "runner.h"

#include "bytes.h"
#include "snapfile/reader.h"
#include "snapfile/writer.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <iostream>
#include <mutex>
#include <thread>

using namespace kvscope;
using namespace kvscope::hostile;

namespace {

struct Options {
    std::string cli, data, out;
    std::string zygote; // kvscope-cli-zygote: cases run in forked children of it (runner.h)
    std::vector<std::string> only; // family prefixes
    bool json = false;
    bool listOnly = false;
    int jobs = 2;
    double timeout = 20;
    std::uint64_t seed = 0x6b7673636f7065ull; // "kvscope"
};

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "kvscope-hostile: " << why << "\n"
              << "usage: kvscope-hostile --cli PATH/kvscope-cli --data SHARED --out DIR\n"
                 "                       [--only CLASS[,CLASS...]] [--json] [--jobs N]\n"
                 "                       [--timeout SECONDS] [--list] [--zygote PATH]\n";
    std::exit(2);
}

Options parseOptions(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                usage(a + " needs a value");
            return argv[++i];
        };
        if (a == "--cli")
            o.cli = value();
        else if (a == "--zygote")
            o.zygote = value();
        else if (a == "--data")
            o.data = value();
        else if (a == "--out")
            o.out = value();
        else if (a == "--only") {
            std::string v = value();
            for (std::size_t p = 0; p <= v.size();) {
                const std::size_t e = std::min(v.find(',', p), v.size());
                if (e > p)
                    o.only.push_back(v.substr(p, e - p));
                p = e + 1;
            }
        } else if (a == "--json")
            o.json = true;
        else if (a == "--list")
            o.listOnly = true;
        else if (a == "--jobs")
            o.jobs = std::max(1, std::atoi(value().c_str()));
        else if (a == "--timeout")
            o.timeout = std::atof(value().c_str());
        else if (a == "-h" || a == "--help")
            usage("help");
        else
            usage("unknown argument " + a);
    }
    if (o.cli.empty() || o.data.empty() || o.out.empty())
        usage("--cli, --data and --out are required");
    o.cli = fs::absolute(o.cli).string();
    o.data = fs::absolute(o.data).lexically_normal().string();
    o.out = fs::absolute(o.out).lexically_normal().string();
    if (!fs::exists(o.cli))
        usage(o.cli + ": not found");
    if (!o.zygote.empty() && !fs::exists(o.zygote))
        usage(o.zygote + ": not found");
    return o;
}

const std::vector<std::string> kChildEnv = {"OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
                                            "KVSCOPE_THREADS=1"};

// Runs the CLI for a base; the base must come out.
void runBase(const Options& o, const std::vector<std::string>& args, const fs::path& cwd) {
    std::vector<std::string> argv = {o.cli};
    argv.insert(argv.end(), args.begin(), args.end());
    RunLimits limits;
    limits.timeoutSeconds = 120;
    const RunResult r = runChild(argv, cwd.string(), limits, kChildEnv);
    if (!r.started || r.exitCode != 0) {
        std::cerr << "kvscope-hostile: making a base failed:";
        for (const auto& a : argv)
            std::cerr << " " << a;
        std::cerr << "\n" << r.stderrHead << "\n";
        std::exit(2);
    }
}

// Rewrites a snapshot with a fixed lineage id and date, so that the corpus built on it is the
// same from run to run.
void normalizeSnapshot(const fs::path& from, const fs::path& to, const std::string& id) {
    auto r = snapfile::Reader::open(from.string());
    if (!r)
        throw std::runtime_error(r.message());
    nlohmann::json m = r.value().manifest();
    m["lineage"]["id"] = id;
    m["lineage"]["created_at"] = "2026-01-01T00:00:00Z";
    auto w = snapfile::Writer::create(to.string());
    if (!w)
        throw std::runtime_error(w.message());
    for (const auto& b : r.value().blobs()) {
        auto data = r.value().readBlob(b.name);
        if (!data)
            throw std::runtime_error(data.message());
        if (Status s = w.value()->addBlob(b.name, b.dtype, b.shape, data.value().data(),
                                          data.value().size());
            !s)
            throw std::runtime_error(s.message());
    }
    if (Status s = w.value()->finish(m); !s)
        throw std::runtime_error(s.message());
}

Bases makeBases(const Options& o) {
    const fs::path dir = fs::path(o.out) / "bases";
    fs::create_directories(dir);
    Bases b;
    b.cli = o.cli;
    b.data = o.data;
    b.llama2c = o.data + "/models/stories260K/stories260K.bin";
    b.llama2cTok = o.data + "/models/stories260K/tok512.bin";
    b.gguf = o.data + "/models/stories260K/stories260K.gguf";
    b.aidreams = o.data + "/models/aidreams260K/aidreams260K.bin";
    for (const auto& p : {b.llama2c, b.llama2cTok, b.gguf, b.aidreams})
        if (!fs::exists(p))
            usage(p + ": missing (is --data the shared folder?)");
    runBase(o,
            {"generate", "-m", b.llama2c, "--prompt", "Once upon a time", "-n", "8",
             "--temperature", "0", "--snapshot-out", "base-raw.kvsnap"},
            dir);
    runBase(o,
            {"generate", "-m", b.llama2c, "--prompt", "The cat sat on the mat", "-n", "6",
             "--temperature", "0", "--snapshot-out", "b-raw.kvsnap"},
            dir);
    runBase(o,
            {"generate", "-m", b.aidreams, "--prompt", "Hello", "-n", "4", "--temperature", "0",
             "--snapshot-out", "far-raw.kvsnap"},
            dir);
    fs::remove_all(dir / "hf");
    runBase(o, {"convert", "-m", b.llama2c, "-o", "hf"}, dir);
    runBase(o,
            {"generate", "-m", b.gguf, "--prompt", "Once upon a time", "-n", "8", "--temperature",
             "0", "--snapshot-out", "gguf-raw.kvsnap"},
            dir);
    runBase(o,
            {"generate", "-m", "hf", "--prompt", "Once upon a time", "-n", "8", "--temperature",
             "0", "--snapshot-out", "hf-raw.kvsnap"},
            dir);
    normalizeSnapshot(dir / "base-raw.kvsnap", dir / "base.kvsnap",
                      "0000000000000000000000000000ba5e");
    normalizeSnapshot(dir / "b-raw.kvsnap", dir / "b.kvsnap", "00000000000000000000000000000bbb");
    normalizeSnapshot(dir / "far-raw.kvsnap", dir / "far.kvsnap",
                      "00000000000000000000000000000fa2");
    b.snapshot = (dir / "base.kvsnap").string();
    b.snapshotB = (dir / "b.kvsnap").string();
    b.snapshotFar = (dir / "far.kvsnap").string();
    normalizeSnapshot(dir / "gguf-raw.kvsnap", dir / "gguf.kvsnap",
                      "000000000000000000000000000000ff");
    normalizeSnapshot(dir / "hf-raw.kvsnap", dir / "hf.kvsnap", "000000000000000000000000000000af");
    b.snapshotGguf = (dir / "gguf.kvsnap").string();
    b.snapshotHf = (dir / "hf.kvsnap").string();
    b.hf = (dir / "hf").string();
    // The newer readers' bases: HF past_key_values of base.kvsnap, and a per-head eviction of
    // it (a head mask, ledger version 2).
    runBase(o, {"export", b.snapshot, "--format", "safetensors", "-o", "base-pkv.safetensors"},
            dir);
    b.pastKeyValues = (dir / "base-pkv.safetensors").string();
    runBase(o,
            {"survive", b.snapshot, "-m", b.llama2c, "--policy", "tova", "--budget", "0.5",
             "--param", "allocation=head-adaptive", "-n", "2", "-o", "hm-raw.kvsnap"},
            dir);
    normalizeSnapshot(dir / "hm-raw.kvsnap", dir / "hm.kvsnap", "00000000000000000000000000000a11");
    b.snapshotHeadMask = (dir / "hm.kvsnap").string();
    b.chatTemplate = o.data + "/chat-templates/chatml.jinja";
    b.tokenizerJson = o.data + "/tokenizers/hf/llama-2/tokenizer.json";
    writeText(dir / "messages.json",
              R"([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."}])");
    b.messages = (dir / "messages.json").string();
    return b;
}

struct Family {
    std::vector<std::string> prefixes; // the classes it makes
    void (*add)(Corpus&);
};

const std::vector<Family> kFamilies = {
    {{"llama2c.", "tokbin."}, addLlama2cCases},
    {{"gguf."}, addGgufCases},
    {{"safetensors.", "hf."}, addHfCases},
    {{"kvsnap."}, addKvsnapCases},
    {{"lineage."}, addLineageCases},
    {{"chat."}, addChatCases},
    {{"args."}, addArgumentCases},
    {{"special."}, addSpecialFileCases},
    {{"llamacpp."}, addLlamaCppCases},
    {{"llamacpp.ggsn", "llamacpp.slot", "llamacpp.positions", "llamacpp.cells",
      "llamacpp.geometry"},
     addLlamaCppSessionCases},
    {{"pkv."}, addPastKeyValuesCases},
    {{"kvsnap.headmask", "kvsnap.positions", "kvsnap.logits"}, addHeadMaskCases},
    {{"args."}, addLabArgumentCases},
    {{"probe."}, addProbeCases},
};

bool selected(const Options& o, const std::string& family) {
    if (o.only.empty())
        return true;
    for (const auto& p : o.only)
        if (family.rfind(p, 0) == 0)
            return true;
    return false;
}

bool familySelected(const Options& o, const Family& f) {
    if (o.only.empty())
        return true;
    for (const auto& p : o.only)
        for (const auto& fp : f.prefixes)
            if (fp.rfind(p, 0) == 0 || p.rfind(fp, 0) == 0)
                return true;
    return false;
}

} // namespace

int main(int argc, char** argv) {
    const Options o = parseOptions(argc, argv);
    const auto t0 = std::chrono::steady_clock::now();
    // Only this tool's own outputs under DIR are cleared.
    for (const char* sub : {"cases", "fixtures", "bases"})
        fs::remove_all(fs::path(o.out) / sub);
    fs::remove(fs::path(o.out) / "results.json");
    fs::create_directories(o.out);

    std::vector<Case> cases;
    try {
        Corpus corpus(o.out, makeBases(o), o.seed);
        for (const auto& f : kFamilies)
            if (familySelected(o, f))
                f.add(corpus);
        for (auto& c : corpus.cases())
            if (selected(o, c.family))
                cases.push_back(std::move(c));
    } catch (const std::exception& e) {
        std::cerr << "kvscope-hostile: building the corpus failed: " << e.what() << "\n";
        return 2;
    }
    const double buildSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "kvscope-hostile: " << cases.size() << " cases built in " << std::fixed
              << std::setprecision(1) << buildSeconds << " s under " << o.out << "/cases\n";
    if (o.listOnly) {
        for (const auto& c : cases)
            std::cout << c.id << "\t" << c.family << "\t" << c.command << "\t" << c.inputBytes
                      << "\t" << shellLine(o.cli, c) << "\n";
        return 0;
    }

    // Run: `jobs` workers take cases in order; failures are printed as they happen.
    std::vector<Outcome> outcomes(cases.size());
    std::atomic<std::size_t> next{0}, done{0};
    std::mutex printMutex;
    RunLimits limits;
    limits.timeoutSeconds = o.timeout;
    Thresholds thresholds;
    auto worker = [&] {
        std::optional<Zygote> zygote;
        if (!o.zygote.empty())
            zygote.emplace(o.zygote, kChildEnv);
        auto run = [&](const std::vector<std::string>& argv, const std::string& cwd,
                       const RunLimits& l) {
            return zygote ? zygote->run(argv, cwd, l, kChildEnv)
                          : runChild(argv, cwd, l, kChildEnv);
        };
        for (std::size_t i; (i = next++) < cases.size();) {
            const Case& c = cases[i];
            RunLimits caseLimits = limits;
            if (c.timeoutSeconds > 0)
                caseLimits.timeoutSeconds = std::min(c.timeoutSeconds, limits.timeoutSeconds);
            for (const auto& step : c.setup) { // not judged: the case's own command is
                std::vector<std::string> argv = {o.cli};
                argv.insert(argv.end(), step.begin(), step.end());
                (void)run(argv, c.dir, limits);
            }
            std::vector<std::string> argv = {o.cli};
            argv.insert(argv.end(), c.args.begin(), c.args.end());
            RunResult r = run(argv, c.dir, caseLimits);
            std::string post = c.postCheck ? c.postCheck() : std::string();
            outcomes[i] = classify(c, std::move(r), std::move(post), thresholds);
            const std::size_t n = ++done;
            std::lock_guard<std::mutex> lock(printMutex);
            if (isFailure(outcomes[i].verdict))
                std::cerr << "  " << verdictName(outcomes[i].verdict) << ": " << c.id << " "
                          << c.family << " [" << c.command << "] " << outcomes[i].reasons.front()
                          << "\n";
            if (n % 50 == 0 || n == cases.size())
                std::cerr
                    << "kvscope-hostile: " << n << "/" << cases.size() << " done, " << std::fixed
                    << std::setprecision(0)
                    << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                    << " s\n";
        }
    };
    std::vector<std::thread> pool;
    for (int j = 0; j < o.jobs; ++j)
        pool.emplace_back(worker);
    for (auto& t : pool)
        t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const nlohmann::json results = resultsJson(o.cli, cases, outcomes, seconds);
    {
        std::ofstream f(fs::path(o.out) / "results.json");
        f << results.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    if (o.json)
        std::cout << nlohmann::json({{"totals", results["totals"]},
                                     {"seconds", seconds},
                                     {"results", (fs::path(o.out) / "results.json").string()}})
                         .dump(1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
    else
        printReport(std::cout, o.cli, cases, outcomes, seconds);
    for (const auto& out : outcomes)
        if (isFailure(out.verdict))
            return 1;
    return 0;
}
