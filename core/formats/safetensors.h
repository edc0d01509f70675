// Reader for Hugging Face safetensors files, single or sharded.
//
// Layout: u64 N (little-endian) | N bytes of JSON header | data section.
// The header maps each tensor name to {"dtype": "F32", "shape": [d0, d1, ...],
// "data_offsets": [begin, end]} with offsets relative to the data section, plus an optional
// "__metadata__" object of string -> string. Shapes are row-major: the LAST dimension is the
// fastest-varying (the opposite of GGUF's ne[] order).
//
// open() checks, before trusting anything: the header length against the file size (and a
// 100 MB cap, as the reference implementation does), the JSON, every dtype, that
// shape × dtype size equals end - begin without overflow, that every range lies inside the
// data section, and that no two tensors overlap. Errors name the file and the tensor/field.
// Gaps between tensors and trailing bytes are tolerated.
//
// Sharded checkpoints ("model.safetensors.index.json": {"metadata": {...},
// "weight_map": {tensor: shard file}}) are opened with openIndex() or Checkpoint::open().
//
// Thread-safety: File and Checkpoint are immutable after open(); const methods may be used
// from several threads. Copies share one read-only mapping per file (see mappedfile.h).
#pragma once

#include "formats/mappedfile.h"
#include "util/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::safetensors {

// Declaration order follows the reference implementation's Dtype enum; the writer sorts
// tensors by it (descending), which keeps wider types aligned.
enum class DType {
    Bool,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64
};
std::string_view dtypeName(DType t);                    // "BF16"
std::optional<DType> parseDType(std::string_view name); // nullopt for unknown names
std::size_t dtypeSize(DType t);                         // bytes per element

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape; // row-major: shape.back() is the fastest-varying
    std::uint64_t offset = 0;        // absolute byte offset in the file
    std::uint64_t nbytes = 0;
    std::int64_t elementCount() const; // product of shape (1 for a scalar)
};

class File {
public:
    static Result<File> open(const std::string& path);
    // The same checks over bytes already in memory; `name` stands in for the path in errors.
    static Result<File> openMemory(std::vector<std::uint8_t> bytes, std::string name = "<memory>");

    const std::string& path() const { return m_path; }
    std::uint64_t dataOffset() const { return m_dataOffset; } // 8 + header length
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    // Tensors sorted by offset, and lookup by name (nullptr when absent).
    const std::vector<TensorInfo>& tensors() const { return m_tensors; }
    const TensorInfo* tensor(std::string_view name) const;

    // Zero-copy view, valid while this File (or a copy) is alive.
    std::span<const std::uint8_t> data(const TensorInfo& t) const;
    // These throw KvError naming the file and tensor (absent name, unsupported dtype); core
    // code calling them converts to Result with catchToResult.
    std::vector<std::uint8_t> readRaw(std::string_view name) const;
    // F32, F16, BF16 and F64 converted to float, in storage (row-major) order.
    std::vector<float> readF32(std::string_view name) const;

    // The mapping the tensors' bytes live in (a model uses them in place from it).
    const std::shared_ptr<const MappedFile>& mapping() const { return m_map; }

private:
    static File parse(std::string path, std::shared_ptr<const MappedFile> map);
    const TensorInfo& require(std::string_view name) const;

    std::string m_path;
    std::shared_ptr<const MappedFile> m_map;
    std::uint64_t m_dataOffset = 0;
    std::map<std::string, std::string> m_metadata;
    std::vector<TensorInfo> m_tensors;
    std::map<std::string, std::size_t, std::less<>> m_index;
};

// A parsed model.safetensors.index.json.
struct Index {
    std::string path;
    std::map<std::string, std::string> weightMap; // tensor name -> shard path (next to the index)
    std::map<std::string, std::string> metadata;  // e.g. total_size (non-strings as JSON text)
    std::vector<std::string> shards() const;      // distinct shard paths, sorted
};
// Shard names must be relative and stay inside the index's folder (no "..").
Result<Index> openIndex(const std::string& indexPath);

// One checkpoint, single-file or sharded, with tensor lookup across shards.
class Checkpoint {
public:
    // `path` ending in ".json" is read as an index (every shard is opened and every mapped
    // tensor must exist in its shard); anything else is opened as one safetensors file.
    static Result<Checkpoint> open(const std::string& path);

    std::vector<std::string> tensorNames() const; // sorted
    const TensorInfo* tensor(std::string_view name) const;
    const File* fileOf(std::string_view name) const; // the shard holding `name`
    const std::vector<File>& files() const { return m_files; }
    // Metadata of the index (sharded) or of the file's __metadata__ (single).
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    // Throw KvError naming the tensor when it is absent (see File).
    std::vector<float> readF32(std::string_view name) const;
    std::vector<std::uint8_t> readRaw(std::string_view name) const;

private:
    const File& require(std::string_view name) const;

    std::vector<File> m_files;
    std::map<std::string, std::size_t, std::less<>> m_owner; // tensor -> index in m_files
    std::map<std::string, std::string> m_metadata;
    std::string m_path;
};

} // namespace kvscope::safetensors
