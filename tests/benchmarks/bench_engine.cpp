// Engine benchmark: prefill and decode speed on stories260K and on a random 12-layer,
// 768-dim Llama-shape model; cached decode vs full recompute at 512 positions; decode speed
// as a fraction of the memory-bandwidth bound (weight bytes / bandwidth per token), with the
// bandwidth (memcpy) measured in the same run; first, the peak memory of a kvscope-cli process
// that loads a model from a file and decodes, against the weight bytes, and a bf16 checkpoint
// computed from its 16-bit weights against the same widened to f32.
#include "benchutil.h"
#include "engine/model.h"
#include "engine/session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <spawn.h>
#include <string>
#include <system_error>
#include <sys/resource.h>
#include <sys/wait.h>
#include <vector>

extern char** environ;

using namespace kvscope;

namespace {

struct Speeds {
    double prefillTps = 0, decodeTps = 0;
};

Speeds measure(const std::shared_ptr<const Model>& model, int prefill, int decode) {
    std::vector<int32_t> prompt(static_cast<size_t>(prefill));
    for (int i = 0; i < prefill; ++i)
        prompt[static_cast<size_t>(i)] =
            (i * 7919 + 1) % static_cast<int32_t>(model->config().vocabSize);
    Speeds s;
    {
        Session warm(model);
        (void)warm.feed(std::span(prompt).first(8));
    }
    Session session(model);
    double t0 = bench::now();
    if (!session.feed(prompt))
        return s;
    s.prefillTps = prefill / (bench::now() - t0);
    Sampler greedy({0.0f, 0.9f, 0, 0});
    t0 = bench::now();
    auto r = session.generate(decode, greedy);
    const double dt = bench::now() - t0;
    if (r)
        s.decodeTps = static_cast<double>(r.value().tokens.size()) / dt;
    return s;
}

// Runs `argv` and returns its peak resident set in bytes (wait4's ru_maxrss); -1 on failure.
double peakRss(std::vector<std::string> argv) {
    std::vector<char*> args;
    for (auto& a : argv)
        args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t quiet;
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int err = posix_spawn(&pid, args[0], &quiet, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&quiet);
    if (err != 0)
        return -1;
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// Removes its folders when it goes out of scope, however the benchmark returns.
struct TempDirs {
    std::vector<std::filesystem::path> dirs;
    explicit TempDirs(std::vector<std::filesystem::path> d) : dirs(std::move(d)) { clear(); }
    ~TempDirs() { clear(); }
    TempDirs(const TempDirs&) = delete;
    TempDirs& operator=(const TempDirs&) = delete;
    void clear() {
        std::error_code ec; // a benchmark's clean-up never throws
        for (const auto& d : dirs)
            std::filesystem::remove_all(d, ec);
    }
};

// Peak memory of a kvscope-cli process that loads a model from a file and decodes 64 tokens,
// against the weight bytes: the weights are used in place from the file's mapping, so about
// 1x plus the runtime's own. Measured first, while this process is small: Linux carries the
// parent's peak into a spawned child's ru_maxrss. The model is smollm2-135m's shape in f32
// (random weights, written by `kvscope-cli random-model`).
void peakMemory() {
    const auto dir = std::filesystem::temp_directory_path() / "kvscope-bench-rss";
    const TempDirs temp({dir});
    const std::string cli = KVSCOPE_CLI;
    if (peakRss({cli, "random-model", "--shape", "smollm2-135m", "--dtype", "f32", "-o",
                 dir.string()}) < 0) {
        std::printf("peak memory: %s random-model failed\n", cli.c_str());
        return;
    }
    const double weightBytes =
        static_cast<double>(std::filesystem::file_size(dir / "model.safetensors"));
    const double base = peakRss({cli, "--version"}); // the process without a model
    const double rss = peakRss({cli, "generate", "-m", dir.string(), "--prompt-ids",
                                "1,2,3,4,5,6,7,8", "-n", "64", "--temperature", "0"});
    if (rss < 0 || base < 0) {
        std::printf("peak memory: %s generate failed\n", cli.c_str());
        return;
    }
    std::printf("smollm2-135m shape, f32 safetensors (%.0f MB): peak RSS of load + 64 decoded "
                "tokens %.0f MB = %.2fx the weights; %.2fx above the process's own %.0f MB\n",
                weightBytes / 1e6, rss / 1e6, rss / weightBytes, (rss - base) / weightBytes,
                base / 1e6);
}

// A bf16 checkpoint against the same weights in f32, compared like with like: the bf16 file
// and an f32 file of the same values (`convert --out-dtype f32`) both used in place from their
// mappings (each checkpoint's default), then both copied onto huge pages (--huge-pages), and
// the bf16 file widened to f32 at load (--dtype f32). Peak memory of a decoding process, decode
// speed at 1 and at all threads (alternating, best of several), and how far the logits move.
// `shape` is one of random-model's shapes; each pair is loaded only while it is measured, so
// llama-3.2-1b's (2.5 GB bf16, 5 GB f32) fits beside its files' pages on a 24 GB machine.
void sixteenBitWeights(const std::string& shape) {
    const auto dir = std::filesystem::temp_directory_path() / "kvscope-bench-bf16";
    const auto dir32 = std::filesystem::temp_directory_path() / "kvscope-bench-bf16-as-f32";
    const TempDirs temp({dir, dir32}); // also when a load fails below
    const std::string cli = KVSCOPE_CLI;
    if (peakRss({cli, "random-model", "--shape", shape, "--dtype", "bf16", "-o", dir.string()}) <
            0 ||
        peakRss({cli, "convert", "-m", dir.string(), "--to", "hf", "--out-dtype", "f32", "-o",
                 dir32.string()}) < 0) {
        std::printf("bf16 weights: %s random-model or convert failed\n", cli.c_str());
        return;
    }
    const auto gen = [&](const std::filesystem::path& m) {
        return std::vector<std::string>{
            cli,  "generate",      "-m", m.string(), "--prompt-ids", "1,2,3,4,5,6,7,8", "-n",
            "64", "--temperature", "0"};
    };
    auto widenedArgs = gen(dir);
    widenedArgs.insert(widenedArgs.end(), {"--dtype", "f32"});
    const double rssKept = peakRss(gen(dir)), rssFile32 = peakRss(gen(dir32)),
                 rssWidened = peakRss(widenedArgs);
    LoadOptions mapped, f32, huge;
    f32.dtype = "f32";
    huge.weightsOnHugePages = true;
    auto load = [](const std::filesystem::path& d, const LoadOptions& o) {
        auto m = Model::load(d.string(), o);
        if (!m)
            std::printf("bf16 weights: loading %s failed: %s\n", d.c_str(), m.message().c_str());
        return m ? m.value() : nullptr;
    };
    {
        auto a16 = load(dir, mapped), a32 = load(dir32, mapped);
        if (!a16 || !a32)
            return;
        std::printf(
            "%s shape, bf16 safetensors (%.0f MB of weights) and the same values as f32 "
            "safetensors (%.0f MB): the forward pass reads %.0f MB vs %.0f MB; peak RSS "
            "of load + 64 tokens %.0f MB (bf16), %.0f MB (f32 file), %.0f MB (bf16 "
            "widened, --dtype f32)\n",
            shape.c_str(), double(std::filesystem::file_size(dir / "model.safetensors")) / 1e6,
            double(std::filesystem::file_size(dir32 / "model.safetensors")) / 1e6,
            double(a16->computeWeightBytes()) / 1e6, double(a32->computeWeightBytes()) / 1e6,
            rssKept / 1e6, rssFile32 / 1e6, rssWidened / 1e6);
        const auto vocab = static_cast<int32_t>(a16->config().vocabSize);
        std::vector<int32_t> prompt(64);
        for (int i = 0; i < 64; ++i)
            prompt[size_t(i)] = (i * 7919 + 1) % vocab;
        Session a(a16), b(a32);
        (void)a.feed(prompt);
        (void)b.feed(prompt);
        double diff = 0, largest = 0;
        for (size_t i = 0; i < a.lastLogits().size(); ++i) {
            diff = std::max(diff, double(std::abs(a.lastLogits()[i] - b.lastLogits()[i])));
            largest = std::max(largest, double(std::abs(b.lastLogits()[i])));
        }
        std::printf("  logits after 64 tokens: max |bf16 - f32| = %.2g (largest |logit| %.3g)\n",
                    diff, largest);
    }
    struct Pair {
        const char* what;
        LoadOptions bf16, f32;
    };
    const Pair pairs[] = {
        {"both mapped from their files", mapped, mapped},
        {"both on huge pages (--huge-pages)", huge, huge},
        {"bf16 mapped vs widened at load (--dtype f32)", mapped, f32},
    };
    // 96 tokens, best of 5, for smollm2-135m; a 1B shape decodes ~10x slower: 24, best of 3.
    const bool big = std::filesystem::file_size(dir / "model.safetensors") > 1'000'000'000;
    const int tokens = big ? 24 : 96, repeats = big ? 3 : 5;
    const int cores = Model::setThreads(1);
    for (const Pair& p : pairs) {
        // The widened model is the bf16 file's values in f32.
        auto m16 = load(dir, p.bf16), m32 = load(p.f32.dtype == "f32" ? dir : dir32, p.f32);
        if (!m16 || !m32)
            break;
        for (int threads : {1, cores}) {
            Model::setThreads(threads);
            double best16 = 0, best32 = 0;
            for (int rep = 0; rep < repeats; ++rep) {
                best16 = std::max(best16, measure(m16, 16, tokens).decodeTps);
                best32 = std::max(best32, measure(m32, 16, tokens).decodeTps);
            }
            std::printf("  %d thread(s), %s: decode %.1f tok/s bf16, %.1f f32: %.2fx\n", threads,
                        p.what, best16, best32, best16 / best32);
            if (threads == cores)
                break;
        }
    }
    Model::setThreads(cores);
}

} // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--bf16") { // the 16-bit comparison alone
        sixteenBitWeights(argc > 2 ? argv[2] : "smollm2-135m");
        return 0;
    }
    peakMemory();
    sixteenBitWeights("smollm2-135m");
    const double bw = bench::memcpyBandwidth();
    std::printf("memory bandwidth (memcpy, best of 5 x 256 MiB): %.2f GB/s copied (%.2f GB/s "
                "read + write)\n",
                bw / 2e9, bw / 1e9);

    const std::string stories = bench::testDataRoot() + "/models/stories260K/stories260K.bin";
    if (std::filesystem::exists(stories)) {
        auto m = Model::load(stories);
        if (m) {
            auto s = measure(m.value(), 128, 256);
            std::printf("stories260K: prefill %.0f tok/s (128 tokens), decode %.0f tok/s\n",
                        s.prefillTps, s.decodeTps);
        }
    } else {
        std::printf("stories260K: skipped (%s not found)\n", stories.c_str());
    }

    const ModelConfig c = bench::benchLlamaConfig();
    auto big = Model::createRandom(c, 1234);
    if (!big) {
        std::printf("random model: %s\n", big.message().c_str());
        return 1;
    }
    const auto& model = big.value();
    const double weightBytes = static_cast<double>(model->parameterCount()) * 4.0;
    // Decode reads every weight once per token except the embedding table (one row).
    const double decodeBytes =
        weightBytes - static_cast<double>(c.vocabSize * c.dim) * 4.0 * (c.tiedEmbeddings ? 0 : 1);
    // Decode reads each weight once per token; the bound is weight bytes / bandwidth.
    const double bound = (bw / 2) / decodeBytes;
    std::printf("llama 12x768 (%.0f MB fp32, %.0f MB read per decoded token)\n", weightBytes / 1e6,
                decodeBytes / 1e6);
    std::printf("  bandwidth bound: %.1f tok/s at the memcpy rate of %.2f GB/s copied\n", bound,
                bw / 2e9);
    const int cores = Model::setThreads(1);
    for (int threads : {1, cores}) {
        Model::setThreads(threads);
        auto s = measure(model, 128, 64);
        std::printf("  %d thread(s): prefill %.1f tok/s, decode %.1f tok/s = %.2f of the bound\n",
                    threads, s.prefillTps, s.decodeTps, s.decodeTps / bound);
        if (threads == cores)
            break;
    }
    // Cached decode vs recomputing the whole sequence, at 512 positions.
    std::vector<int32_t> prompt(512);
    for (int i = 0; i < 512; ++i)
        prompt[static_cast<size_t>(i)] = (i * 31 + 5) % 32000;
    Session cached(model);
    (void)cached.feed(std::span(prompt).first(511));
    const int32_t last[1] = {prompt[511]};
    double t0 = bench::now();
    (void)cached.feed(last);
    const double tCached = bench::now() - t0;
    Session full(model);
    t0 = bench::now();
    (void)full.feed(prompt);
    const double tFull = bench::now() - t0;
    std::printf("at 512 positions: cached decode step %.1f ms, full recompute %.1f ms: cached is "
                "%.1fx faster\n",
                tCached * 1e3, tFull * 1e3, tFull / tCached);
    return 0;
}
