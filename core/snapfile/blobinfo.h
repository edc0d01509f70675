// One entry of a .kvsnap file's blob table (see FORMAT.md). A plain value; thread-safe to copy.
#pragma once

#include "snapfile/dtype.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::snapfile {

enum class Compression { None, Zstd };
// "none" / "zstd", as written in the blob table.
std::string compressionName(Compression c);

struct BlobInfo {
    std::string name;            // unique within the file, e.g. "layers.3.k"
    DType dtype = DType::U8;     // element type
    std::vector<int64_t> shape;  // row-major (C order); [] is a scalar, any 0 dim is empty
    uint64_t rawBytes = 0;       // product(shape) * dtypeSize(dtype)
    uint64_t storedBytes = 0;    // bytes in the file (after shuffle + compression)
    uint64_t offset = 0;         // absolute file offset of the stored bytes
    uint64_t storedChecksum = 0; // XXH3-64 (seed 0) of the stored bytes
    uint64_t rawChecksum = 0;    // XXH3-64 (seed 0) of the raw, unshuffled bytes
    Compression compression = Compression::Zstd;
    // 0: not shuffled. Otherwise the raw bytes were byte-shuffled in blocks of this many
    // bytes (a multiple of dtypeSize) before compression; see FORMAT.md "Shuffle".
    uint32_t shuffleBlock = 0;

    bool shuffled() const { return shuffleBlock != 0; }
};

} // namespace kvscope::snapfile
