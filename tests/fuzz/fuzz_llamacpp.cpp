// libFuzzer target for the llama.cpp state file reader (ggsq, ggsn, llama-server slot files:
// token counts, packed slot blobs, cell records, per-layer type ids and row sizes): arbitrary
// bytes give a StateFile or an error naming the file.
#include "exercise/llamacpp.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    auto f = llamacpp::parse(std::vector<uint8_t>(data, data + size), "fuzz.ggsq");
    const Status st =
        f ? fuzz::exerciseLlamaCpp(f.value()) : fuzz::checkError(f.message(), "fuzz.ggsq");
    fuzz::trapUnless(st);
    return 0;
}
