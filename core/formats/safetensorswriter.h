// Writer for single-file safetensors, laid out as the reference implementation does:
// tensors sorted by dtype (widest first, in DType declaration order, descending) then by
// name, packed back to back from data offset 0; JSON header with "__metadata__" first (only
// when non-empty), then the tensors in data order, padded with spaces to a multiple of 8
// bytes so that the data section starts 8-byte aligned.
//
// write() streams the file atomically (temporary file, fsync, rename); an existing file is
// untouched if anything fails. Tensors given as producers are made one at a time while
// writing, so a model larger than memory can be written. Thread-safety: none; one per thread.
#pragma once

#include "formats/safetensors.h"
#include "util/fileio.h"

#include <functional>

namespace kvscope::safetensors {

// Float values in `storeAs`'s bytes (F32, F16, BF16; round to nearest even); KvError naming
// the tensor for another dtype.
std::vector<std::uint8_t> encodeFloats(const std::string& name, std::span<const float> data,
                                       DType storeAs);

class Writer {
public:
    void setMetadata(std::string key, std::string value);
    // Bytes already in `dtype` (little-endian, row-major). Throws KvError on a duplicate or
    // empty name, the reserved name "__metadata__", or a byte count that does not match.
    void addTensor(std::string name, DType dtype, std::vector<std::int64_t> shape,
                   std::vector<std::uint8_t> bytes);
    // Bytes made when the file is written (one tensor in memory at a time); they must be the
    // count shape and dtype imply, or write() fails naming the tensor.
    using Producer = std::function<std::vector<std::uint8_t>()>;
    void addTensor(std::string name, DType dtype, std::vector<std::int64_t> shape,
                   Producer produce);
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
        std::uint64_t size = 0;          // bytes
        std::vector<std::uint8_t> bytes; // when given now
        Producer produce;                // when made at write time
    };
    std::uint64_t checkTensor(const std::string& name, DType dtype,
                              const std::vector<std::int64_t>& shape) const;
    void stream(const ByteSink& sink) const;
    std::map<std::string, std::string> m_metadata;
    std::vector<Tensor> m_tensors;
};

} // namespace kvscope::safetensors
