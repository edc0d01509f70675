// Reader for GGUF model files (llama.cpp / ggml), versions 2 and 3, little-endian.
//
// Layout (all integers little-endian):
//   "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
//   metadata_kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (default 32) | tensor data
// A string is u64 length + bytes (no terminator). An array value is u32 element type +
// u64 count + elements. Tensor offsets are relative to the start of the data section;
// TensorInfo::offset below is absolute (data section start already added).
//
// Every count, length, dimension and offset is checked against the file size before
// anything is allocated; malformed files produce a KvError whose message names the file
// and the field ("model.gguf: tensor 'blk.0.attn_q.weight': offset ... is past the end").
// Version 1 (u32 counts), big-endian files and unknown versions are refused. Arrays of
// arrays are refused, as llama.cpp does.
//
// Thread-safety: a File is an immutable value once open() returns; all const methods may
// be called from several threads at once. Copies share one read-only memory mapping of the
// file, which stays alive as long as any copy (or a span from data()) is used. If another
// process truncates the file while it is mapped, reading tensor data may raise SIGBUS, as
// with any mmap-based loader.
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

namespace kvscope::gguf {

// ggml tensor types (ggml.h `enum ggml_type`). Values are the on-disk ids.
enum class TensorType : std::uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39
};

// Storage of one type: `blockSize` elements take `blockBytes` bytes (1 and sizeof for plain
// types). Returns nullopt for ids this reader does not know.
struct TypeTraits {
    std::string_view name; // "Q8_0"
    std::uint32_t blockSize;
    std::uint32_t blockBytes;
};
std::optional<TypeTraits> typeTraits(TensorType type);
// "Q8_0", or "type 77" for unknown ids.
std::string typeName(TensorType type);
// True for the types readF32() can convert: the float types, the legacy and K quants
// (Q4_0 … Q8_0, Q2_K … Q6_K) and IQ4_NL/IQ4_XS.
bool canReadF32(TensorType type);
// The types canReadF32 accepts, for messages: "F32, F16, …, IQ4_XS".
std::string_view readableTypes();

// Metadata value types (gguf.h `enum gguf_type`). Values are the on-disk ids.
enum class ValueType : std::uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12
};
std::string_view valueTypeName(ValueType type); // "u32", "string", "array", ...

// One metadata value: a scalar, a string, or an array of scalars or strings.
// Numeric/bool arrays are stored packed (little-endian, as in the file), so a 150k-entry
// float or int array is one allocation; string arrays are a std::vector<std::string>.
// Build values with the factories (the writer uses them); read them with the as*/to*
// accessors, which return nullopt/nullptr when the type does not fit.
class Value {
public:
    template <typename T> static Value scalar(T v); // T: uint8_t..int64_t, float, double, bool
    static Value string(std::string s);
    template <typename T> static Value array(std::span<const T> values); // T as for scalar()
    template <typename T> static Value array(const std::vector<T>& values) {
        return array(std::span<const T>(values.data(), values.size()));
    }
    static Value stringArray(std::vector<std::string> values);
    // Packed little-endian numeric/bool elements (used by the reader). bytes.size() must be a
    // multiple of valueTypeSize(elementType), exactly one element when isArray is false;
    // throws KvError otherwise (and for String/Array element types).
    static Value fromPacked(ValueType elementType, std::vector<std::uint8_t> bytes,
                            bool isArray = true);

    ValueType type() const { return m_type; }               // Array for arrays
    ValueType elementType() const { return m_elementType; } // == type() for scalars
    bool isArray() const { return m_type == ValueType::Array; }
    std::size_t size() const; // element count; 1 for a scalar

    // Scalars. Integers convert when the value fits; floats accept f32 and f64.
    std::optional<std::int64_t> asI64() const;
    std::optional<std::uint64_t> asU64() const;
    std::optional<double> asF64() const;
    std::optional<bool> asBool() const;
    const std::string* asString() const;

    // Arrays. Integer arrays convert element-wise when every element fits.
    const std::vector<std::string>* asStringArray() const;
    std::optional<std::vector<float>> toF32Array() const; // f32 or f64 elements
    std::optional<std::vector<std::int32_t>> toI32Array() const;
    std::optional<std::vector<std::int64_t>> toI64Array() const;
    // Packed little-endian element bytes of a numeric/bool scalar or array (empty for strings).
    const std::vector<std::uint8_t>& packed() const { return m_packed; }

    // Short human-readable form for UIs and messages: `64`, `"llama"`,
    // `[1, 2, 3, … (512 items)]`.
    std::string toDisplayString(std::size_t maxItems = 8) const;

private:
    ValueType m_type = ValueType::U8;
    ValueType m_elementType = ValueType::U8;
    std::vector<std::uint8_t> m_packed; // numeric and bool elements
    std::vector<std::string> m_strings; // string elements (one for a scalar string)
};

// Size in bytes of one numeric/bool element; 0 for String and Array.
std::size_t valueTypeSize(ValueType type);

struct TensorInfo {
    std::string name;
    std::vector<std::int64_t> dims; // GGUF order: dims[0] (ne[0]) is the fastest-varying
    TensorType type = TensorType::F32;
    std::uint64_t offset = 0; // absolute byte offset in the file
    std::uint64_t nbytes = 0;
    std::int64_t elementCount() const; // product of dims (1 for zero dims)
};

class File {
public:
    // Parses header, metadata and tensor infos; tensor data stays in the mapped file and is
    // read on demand. Errors name the file and the field.
    static Result<File> open(const std::string& path);
    // The same checks over bytes already in memory; `name` stands in for the path in errors
    // and in path(). data() spans point into the File's own copy of the bytes.
    static Result<File> openMemory(std::vector<std::uint8_t> bytes, std::string name = "<memory>");

    const std::string& path() const { return m_path; }
    std::uint32_t version() const { return m_version; }
    std::uint32_t alignment() const { return m_alignment; }
    std::uint64_t dataOffset() const { return m_dataOffset; } // start of the tensor data
    std::uint64_t fileSize() const;

    // Metadata in file order, and lookup by key.
    const std::vector<std::pair<std::string, Value>>& metadata() const { return m_metadata; }
    bool has(std::string_view key) const { return find(key) != nullptr; }
    const Value* find(std::string_view key) const;

    // Typed getters. They throw KvError ("x.gguf: metadata 'llama.block_count': missing" or
    // "...: expected an unsigned 32-bit integer, found string") — core code that calls them
    // converts to Result with catchToResult. Integer getters accept any integer type whose
    // value fits; getF32/getF64 accept f32 and f64.
    const std::string& getString(std::string_view key) const;
    std::uint32_t getU32(std::string_view key) const;
    std::uint64_t getU64(std::string_view key) const;
    std::int32_t getI32(std::string_view key) const;
    std::int64_t getI64(std::string_view key) const;
    float getF32(std::string_view key) const;
    double getF64(std::string_view key) const;
    bool getBool(std::string_view key) const;
    const std::vector<std::string>& getStringArray(std::string_view key) const;
    std::vector<float> getF32Array(std::string_view key) const;
    std::vector<std::int32_t> getI32Array(std::string_view key) const;
    std::vector<std::int64_t> getI64Array(std::string_view key) const;

    // Tensor infos in file order, and lookup by name (nullptr when absent).
    const std::vector<TensorInfo>& tensors() const { return m_tensors; }
    const TensorInfo* tensor(std::string_view name) const;

    // Zero-copy view of a tensor's bytes, valid while this File (or a copy) is alive.
    std::span<const std::uint8_t> data(const TensorInfo& t) const;
    std::vector<std::uint8_t> readRaw(const TensorInfo& t) const;
    // Converts a tensor of a type canReadF32() accepts to float in storage order (ne[0]
    // fastest), with the values llama.cpp's dequantization gives. Throws KvError naming the
    // tensor and its type for other types.
    std::vector<float> readF32(const TensorInfo& t) const;

    // The mapping the tensors' bytes live in (a model uses them in place from it).
    const std::shared_ptr<const MappedFile>& mapping() const { return m_map; }

private:
    friend class Parser;
    static File parse(std::string path, std::shared_ptr<const MappedFile> map);
    [[noreturn]] void failKey(std::string_view key, const std::string& what) const;
    const Value& require(std::string_view key) const;

    std::string m_path;
    std::shared_ptr<const MappedFile> m_map;
    std::uint32_t m_version = 0;
    std::uint32_t m_alignment = 32;
    std::uint64_t m_dataOffset = 0;
    std::vector<std::pair<std::string, Value>> m_metadata;
    std::map<std::string, std::size_t, std::less<>> m_keyIndex;
    std::vector<TensorInfo> m_tensors;
    std::map<std::string, std::size_t, std::less<>> m_tensorIndex;
};

// Converts `count` elements of `type` stored at `src` to float (the readF32 kernels, also
// used by other readers). Throws KvError if the type is not supported.
void dequantize(TensorType type, const std::uint8_t* src, std::size_t count, float* dst);

} // namespace kvscope::gguf
