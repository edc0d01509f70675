// Writer for GGUF v3 files: metadata of every value type and tensors stored as F32, F16,
// BF16 or a quantized type made here from float (Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, as
// ggml's reference quantizer makes them: formats/ggufquantize.h), or as raw bytes of any type
// ggml knows.
//
// write() streams the file atomically (temporary file, fsync, rename): an existing file at the
// target path is untouched if anything fails. Tensors given as producers are made one at a
// time while writing, so a multi-GB model never sits in memory whole.
//
// Layout written: header, metadata in insertion order, tensor infos in insertion order,
// padding to the alignment, tensor data in insertion order with each tensor padded to the
// alignment (as llama.cpp writes). A non-default alignment is recorded as
// `general.alignment` (u32).
//
// Thread-safety: none; use one Writer per thread.
#pragma once

#include "formats/gguf.h"
#include "util/fileio.h"

#include <functional>
#include <span>

namespace kvscope::gguf {

class Writer {
public:
    explicit Writer(std::uint32_t alignment = 32);

    // Adds or replaces a metadata entry (a replaced key keeps its original position).
    void set(std::string key, Value value);

    // Adds a tensor whose bytes are already in `type`'s storage format. `dims` is in GGUF
    // order (dims[0] fastest). Throws KvError on a duplicate name, an unknown type, or a
    // byte count that does not match dims and type.
    void addTensor(std::string name, std::vector<std::int64_t> dims, TensorType type,
                   std::vector<std::uint8_t> bytes);
    // A tensor whose bytes are made when the file is written, one tensor at a time (a model
    // larger than memory can be written): `produce` must return the byte count dims and type
    // imply (write() fails naming the tensor otherwise). Checked now as above.
    using Producer = std::function<std::vector<std::uint8_t>()>;
    void addTensor(std::string name, std::vector<std::int64_t> dims, TensorType type,
                   Producer produce);
    // Adds float data (dims[0] fastest), converted to `storeAs`: F32, F16, BF16 (round to
    // nearest even) or a type gguf::canQuantize() accepts (dims[0] must be whole blocks of it:
    // 32 elements, 256 for the K types). Throws KvError otherwise.
    void addTensor(std::string name, std::vector<std::int64_t> dims, std::span<const float> data,
                   TensorType storeAs = TensorType::F32);
    // The same with the values made when the file is written.
    void addFloatTensor(std::string name, std::vector<std::int64_t> dims,
                        std::function<std::vector<float>()> values,
                        TensorType storeAs = TensorType::F32);

    std::vector<std::uint8_t> toBytes() const;
    // Writes the file atomically, streaming: header and metadata, then each tensor's bytes as
    // it is made; errors name the path (or the tensor).
    Status write(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        std::vector<std::int64_t> dims;
        TensorType type;
        std::uint64_t size = 0;          // bytes
        std::vector<std::uint8_t> bytes; // when given now
        Producer produce;                // when made at write time
    };
    std::uint64_t checkTensor(const std::string& name, const std::vector<std::int64_t>& dims,
                              TensorType type) const;
    std::vector<std::uint8_t> tensorBytes(const Tensor& t) const;
    std::vector<std::uint8_t> header() const; // up to the data section, padded
    void stream(const ByteSink& sink) const;
    std::uint32_t m_alignment;
    std::vector<std::pair<std::string, Value>> m_metadata;
    std::vector<Tensor> m_tensors;
};

} // namespace kvscope::gguf
