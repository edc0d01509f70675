// Exercises an opened .kvsnap: the manifest, verifyAll, and every blob read whole and
// streamed; a successful read returns exactly rawBytes (see check.h).
#pragma once

#include "check.h"
#include "snapfile/snapfile.h"

namespace kvscope::fuzz {

inline Status exerciseSnapfile(const snapfile::Reader& rd) {
    (void)rd.manifest().dump();
    (void)rd.verifyAll();
    for (const snapfile::BlobInfo& b : rd.blobs()) {
        auto blob = rd.readBlob(b.name);
        if (blob && blob.value().size() != b.rawBytes)
            return Status::error("blob '" + b.name + "': readBlob returned " +
                                 std::to_string(blob.value().size()) + " bytes, rawBytes says " +
                                 std::to_string(b.rawBytes));
        uint64_t streamed = 0;
        const Status st = rd.readBlobChunks(b, [&](const uint8_t*, std::size_t n) {
            streamed += n;
            return Status::ok();
        });
        if (st && streamed != b.rawBytes)
            return Status::error("blob '" + b.name + "': readBlobChunks streamed " +
                                 std::to_string(streamed) + " bytes, rawBytes says " +
                                 std::to_string(b.rawBytes));
    }
    return Status::ok();
}

} // namespace kvscope::fuzz
