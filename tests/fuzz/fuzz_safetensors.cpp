// libFuzzer target for the safetensors reader (header length, JSON header, tensor table, data
// ranges, float conversions): arbitrary bytes give a File or an error naming the file.
#include "exercise/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    auto f =
        safetensors::File::openMemory(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
    const Status st = f ? fuzz::exerciseSafetensors(f.value())
                        : fuzz::checkError(f.message(), "fuzz.safetensors");
    fuzz::trapUnless(st);
    return 0;
}
