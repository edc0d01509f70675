// libFuzzer target for the .kvsnap reader: arbitrary bytes must never crash, hang, leak or
// allocate without bound. Linked against a copy of kvscope_snapfile built with
// KVSCOPE_FUZZING_SKIP_CHECKSUMS, so mutations get past the checksums into the JSON parser,
// the blob table validation and the zstd/shuffle decoder; a document that opens is then read as
// a ledger manifest (exercise/ledger.h: head masks, ledger versions, every field's bounds).
#include "exercise/ledger.h"
#include "exercise/snapfile.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    // Small limits keep each run fast; the checks are the same as with the defaults.
    const snapfile::ReadLimits limits{16u << 20, 1u << 20};
    auto r = snapfile::Reader::openMemory(std::vector<uint8_t>(data, data + size), "fuzz.kvsnap",
                                          limits);
    if (!r)
        return 0;
    fuzz::trapUnless(fuzz::exerciseSnapfile(r.value()));
    fuzz::trapUnless(fuzz::exerciseLedger(r.value().manifest()));
    return 0;
}
