// Helpers shared by kvscope's benchmarks: timing and a memory-bandwidth baseline.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "engine/modelconfig.h"

namespace bench {

inline double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Best-of-n memcpy bandwidth in bytes/s, counting bytes read + bytes written.
double memcpyBandwidth(std::size_t bytes = std::size_t(256) << 20, int repeats = 5);

// Best-of-n sequential read bandwidth in bytes/s (sums a buffer).
double readBandwidth(std::size_t bytes = std::size_t(256) << 20, int repeats = 5);

std::string testDataRoot();

// The random benchmark model's shape: a GPT-2-small-size Llama (12 layers, 768 dim, 12 heads,
// vocab 32000, 4096 positions).
kvscope::ModelConfig benchLlamaConfig();

} // namespace bench
