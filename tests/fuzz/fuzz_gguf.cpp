// libFuzzer target for the GGUF reader (header, metadata, tensor infos, tensor data and the
// float conversions): arbitrary bytes give a File or an error naming the file, never a crash,
// a hang or an allocation larger than the input justifies.
#include "exercise/gguf.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    auto f = gguf::File::openMemory(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
    const Status st =
        f ? fuzz::exerciseGguf(f.value()) : fuzz::checkError(f.message(), "fuzz.gguf");
    fuzz::trapUnless(st);
    return 0;
}
