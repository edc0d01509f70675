// libFuzzer target for the .kvsnap reader: arbitrary bytes must never crash, hang, leak or
// allocate without bound. Linked against a copy of kvscope_snapfile built with
// KVSCOPE_FUZZING_SKIP_CHECKSUMS, so mutations get past the checksums into the JSON parser,
// the blob table validation and the zstd/shuffle decoder.
#include "snapfile/snapfile.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kvscope;
using namespace kvscope::snapfile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    // Small limits keep each run fast; the checks are the same as with the defaults.
    const ReadLimits limits{16u << 20, 1u << 20};
    auto r = Reader::openMemory(std::vector<uint8_t>(data, data + size), "fuzz.kvsnap", limits);
    if (!r)
        return 0;
    const Reader& rd = r.value();
    (void)rd.manifest().dump();
    (void)rd.verifyAll();
    for (const BlobInfo& b : rd.blobs()) {
        auto blob = rd.readBlob(b.name);
        if (blob && blob.value().size() != b.rawBytes)
            __builtin_trap(); // a successful read returns exactly rawBytes
        uint64_t streamed = 0;
        const Status st = rd.readBlobChunks(b, [&](const uint8_t*, std::size_t n) {
            streamed += n;
            return Status::ok();
        });
        if (st && streamed != b.rawBytes)
            __builtin_trap();
    }
    return 0;
}
