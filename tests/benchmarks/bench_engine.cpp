// Engine benchmark: prefill and decode speed on stories260K and on a random 12-layer,
// 768-dim Llama-shape model; cached decode vs full recompute at 512 positions; decode speed
// as a fraction of the memory-bandwidth bound (weight bytes / bandwidth per token), with the
// bandwidth (memcpy) measured in the same run.
#include "benchutil.h"
#include "engine/model.h"
#include "engine/session.h"

#include <cstdio>
#include <filesystem>
#include <vector>

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

} // namespace

int main() {
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
