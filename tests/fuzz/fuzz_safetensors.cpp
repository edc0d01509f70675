// libFuzzer target for the safetensors reader (header length, JSON header, tensor table, data
// ranges, float conversions): arbitrary bytes give a File or an error naming the file. The
// ledger a past_key_values export carries in its `kvscope_manifest` metadata is read as
// `import` reads it (exercise/ledger.h).
#include "exercise/ledger.h"
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
    if (f) {
        const auto& meta = f.value().metadata();
        if (const auto m = meta.find("kvscope_manifest"); m != meta.end()) {
            const auto j = nlohmann::json::parse(m->second, nullptr, false);
            if (!j.is_discarded())
                fuzz::trapUnless(fuzz::exerciseLedger(j));
        }
    }
    return 0;
}
