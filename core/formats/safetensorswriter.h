// Writer for single-file safetensors, laid out as the reference implementation does:
// tensors sorted by dtype (widest first, in DType declaration order, descending) then by
// name, packed back to back from data offset 0; JSON header with "__metadata__" first (only
// when non-empty), then the tensors in data order, padded with spaces to a multiple of 8
// bytes so that the data section starts 8-byte aligned.
//
// The file is assembled in memory and written atomically (temporary file, fsync, rename);
// an existing file is untouched if anything fails. Thread-safety: none; one per thread.
#pragma once

#include "formats/safetensors.h"

namespace kvscope::safetensors {

class Writer {
public:
    void setMetadata(std::string key, std::string value);
    // Bytes already in `dtype` (little-endian, row-major). Throws KvError on a duplicate or
    // empty name, the reserved name "__metadata__", or a byte count that does not match.
    void addTensor(std::string name, DType dtype, std::vector<std::int64_t> shape,
                   std::vector<std::uint8_t> bytes);
    // Float data converted to F32, F16 or BF16 (round to nearest even).
    void addTensor(std::string name, std::vector<std::int64_t> shape, std::span<const float> data,
                   DType storeAs = DType::F32);

    // Throws KvError when a name or metadata string is not valid UTF-8 (JSON needs it).
    std::vector<std::uint8_t> toBytes() const;
    Status write(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        DType dtype;
        std::vector<std::int64_t> shape;
        std::vector<std::uint8_t> bytes;
    };
    std::map<std::string, std::string> m_metadata;
    std::vector<Tensor> m_tensors;
};

} // namespace kvscope::safetensors
