// The llama.cpp state file reader's invariants for one input (fuzz_llamacpp, tst_fuzzregressions):
// every record the reader returns lies inside the file, its size is its rows x row size, and
// decoding every record (all cache types, transposed V) reads only those bytes.
#pragma once

#include "check.h"
#include "formats/llamacppstate.h"

#include <vector>

namespace kvscope::fuzz {

inline Status exerciseLlamaCpp(const llamacpp::StateFile& f) {
    if (f.used > f.bytes.size())
        return Status::error("the state claims " + std::to_string(f.used) + " of " +
                             std::to_string(f.bytes.size()) + " bytes");
    std::vector<float> out;
    for (const auto& st : f.streams) {
        const uint64_t cells = st.cells.size();
        for (const auto* records : {&st.keys, &st.values})
            for (const auto& r : *records) {
                const llamacpp::CacheType* t = llamacpp::cacheType(r.type);
                if (!t)
                    return Status::error("a record of unknown type " + std::to_string(r.type));
                if (r.offset > f.bytes.size() || r.bytes > f.bytes.size() - r.offset)
                    return Status::error("a record outside the file");
                if (r.bytes != r.rowSize * cells)
                    return Status::error("a record's size is not its rows x row size");
                // Decode as many whole blocks as the record holds.
                const uint64_t blocks = r.bytes / static_cast<uint64_t>(t->blockBytes);
                out.resize(static_cast<std::size_t>(blocks * static_cast<uint64_t>(t->blockElems)));
                llamacpp::dequantize(*t, f.bytes.data() + r.offset,
                                     static_cast<int64_t>(out.size()), out.data());
            }
    }
    return Status::ok();
}

} // namespace kvscope::fuzz
