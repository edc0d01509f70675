#include "benchutil.h"

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

namespace bench {

double memcpyBandwidth(std::size_t bytes, int repeats) {
    std::vector<char> a(bytes, 1), b(bytes, 0);
    double best = 1e30;
    for (int i = 0; i < repeats; ++i) {
        const double t0 = now();
        std::memcpy(b.data(), a.data(), bytes);
        best = std::min(best, now() - t0);
        a[static_cast<std::size_t>(i)] = b[bytes - 1 - static_cast<std::size_t>(i)];
    }
    return 2.0 * static_cast<double>(bytes) / best;
}

double readBandwidth(std::size_t bytes, int repeats) {
    std::vector<float> a(bytes / sizeof(float), 1.0f);
    double best = 1e30;
    volatile float sink = 0;
    for (int i = 0; i < repeats; ++i) {
        const double t0 = now();
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (std::size_t j = 0; j + 3 < a.size(); j += 4) {
            s0 += a[j];
            s1 += a[j + 1];
            s2 += a[j + 2];
            s3 += a[j + 3];
        }
        sink = s0 + s1 + s2 + s3;
        best = std::min(best, now() - t0);
    }
    (void)sink;
    return static_cast<double>(bytes) / best;
}

std::string testDataRoot() {
    const char* env = std::getenv("KVSCOPE_TEST_DATA");
    return env ? env : KVSCOPE_DEFAULT_TEST_DATA;
}

kvscope::ModelConfig benchLlamaConfig() {
    kvscope::ModelConfig c;
    c.architecture = "llama";
    c.hfArchitecture = "LlamaForCausalLM";
    c.dim = 768;
    c.hiddenDim = 2048;
    c.nLayers = 12;
    c.nHeads = 12;
    c.nKvHeads = 12;
    c.headDim = 64;
    c.vocabSize = 32000;
    c.maxContext = 4096;
    return c;
}

} // namespace bench
