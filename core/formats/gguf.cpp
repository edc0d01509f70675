// GGUF parsing. The file is memory-mapped read-only; the parser walks it with explicit
// bounds checks so that no count or length from the file is trusted before it is compared
// with the bytes that are actually left.
#include "formats/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

namespace kvscope::gguf {

namespace {

// Keys and tensor names as they appear in messages: control bytes escaped, long names cut.
std::string printable(std::string_view s) {
    std::string out;
    for (const char c : s.substr(0, 200)) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    if (s.size() > 200)
        out += "...";
    return out;
}

constexpr std::uint32_t kMaxDims = 8;        // ggml uses 4; leave room without trusting the file
constexpr std::uint64_t kMinKvBytes = 8 + 4; // empty key + value type
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8; // empty name, n_dims=0, type, offset

} // namespace

// Walks the mapped bytes. `m_context` ("metadata key #3 'llama.block_count'") prefixes every
// error, so field names stay short and messages still say exactly where the problem is.
class Parser {
public:
    explicit Parser(File& file)
        : m_file(file), m_data(file.m_map->data()), m_size(file.m_map->size()) {}

    void run();

private:
    [[noreturn]] void fail(const std::string& msg) const {
        throw KvError(m_file.m_path + ": " + (m_context.empty() ? "" : m_context + ": ") + msg);
    }
    std::uint64_t remaining() const { return m_size - m_pos; }
    void need(std::uint64_t n, const char* field) const {
        if (n > remaining())
            fail(std::string(field) + ": unexpected end of file at offset " +
                 std::to_string(m_pos) + " (need " + std::to_string(n) + " bytes, " +
                 std::to_string(remaining()) + " left)");
    }
    template <typename T> T read(const char* field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, m_data + m_pos, sizeof(T));
        m_pos += sizeof(T);
        return v;
    }
    std::string readString(const char* field, std::int64_t index = -1);
    Value readValue(ValueType type);
    void readHeader(std::uint64_t& tensorCount, std::uint64_t& kvCount);
    void readMetadata(std::uint64_t kvCount);
    void readAlignment();
    void readTensorInfos(std::uint64_t tensorCount);
    void checkTensorData();

    File& m_file;
    const std::uint8_t* m_data;
    std::uint64_t m_size;
    std::uint64_t m_pos = 0;
    std::string m_context;
};

std::string Parser::readString(const char* field, std::int64_t index) {
    auto what = [&] {
        std::string w = field;
        if (index >= 0)
            w += " #" + std::to_string(index);
        return w;
    };
    const std::uint64_t at = m_pos;
    if (remaining() < 8)
        fail(what() + ": unexpected end of file at offset " + std::to_string(at) +
             " (need 8 bytes for the string length, " + std::to_string(remaining()) + " left)");
    const auto len = read<std::uint64_t>(field);
    if (len > remaining())
        fail(what() + ": string length " + std::to_string(len) + " at offset " +
             std::to_string(at) + " exceeds the file size (" + std::to_string(m_size) + " bytes, " +
             std::to_string(remaining()) + " left)");
    std::string s(reinterpret_cast<const char*>(m_data + m_pos), len);
    m_pos += len;
    return s;
}

Value Parser::readValue(ValueType type) {
    if (type == ValueType::String)
        return Value::string(readString("value"));
    if (type != ValueType::Array) {
        const std::size_t n = valueTypeSize(type);
        need(n, "value");
        std::vector<std::uint8_t> bytes(m_data + m_pos, m_data + m_pos + n);
        m_pos += n;
        return Value::fromPacked(type, std::move(bytes), /*isArray=*/false);
    }
    const auto raw = read<std::uint32_t>("array element type");
    if (raw > static_cast<std::uint32_t>(ValueType::F64))
        fail("array element type " + std::to_string(raw) + " is not a GGUF value type");
    const auto elem = static_cast<ValueType>(raw);
    if (elem == ValueType::Array)
        fail("arrays of arrays are not supported");
    const std::uint64_t at = m_pos;
    const auto count = read<std::uint64_t>("array count");
    if (elem == ValueType::String) {
        if (count > remaining() / 8) // every string has at least its 8-byte length
            fail("array count " + std::to_string(count) + " at offset " + std::to_string(at) +
                 " exceeds the file size (" + std::to_string(count) +
                 " strings need at least 8 bytes each, " + std::to_string(remaining()) +
                 " bytes left)");
        std::vector<std::string> strings;
        strings.reserve(count);
        for (std::uint64_t i = 0; i < count; ++i)
            strings.push_back(readString("element", static_cast<std::int64_t>(i)));
        return Value::stringArray(std::move(strings));
    }
    const std::size_t n = valueTypeSize(elem);
    if (count > remaining() / n)
        fail("array count " + std::to_string(count) + " at offset " + std::to_string(at) +
             " exceeds the file size (" + std::to_string(count) + " × " + std::to_string(n) +
             " bytes, " + std::to_string(remaining()) + " bytes left)");
    std::vector<std::uint8_t> bytes(m_data + m_pos, m_data + m_pos + count * n);
    m_pos += count * n;
    return Value::fromPacked(elem, std::move(bytes));
}

void Parser::readHeader(std::uint64_t& tensorCount, std::uint64_t& kvCount) {
    if (m_size < 4 || std::memcmp(m_data, "GGUF", 4) != 0) {
        std::string magic;
        for (std::uint64_t i = 0; i < std::min<std::uint64_t>(4, m_size); ++i) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "%02x", m_data[i]);
            magic += buf;
        }
        fail("not a GGUF file (magic bytes are " + (magic.empty() ? "missing" : "0x" + magic) +
             ", expected \"GGUF\")");
    }
    m_pos = 4;
    const auto version = read<std::uint32_t>("header field version");
    const std::uint32_t swapped = __builtin_bswap32(version);
    if (version == 1)
        fail("GGUF version 1 is not supported (it uses 32-bit counts); kvscope reads versions "
             "2 and 3 — re-convert the model with a current llama.cpp");
    if (version != 2 && version != 3) {
        if (swapped >= 1 && swapped <= 3)
            fail("big-endian GGUF files are not supported (version field reads " +
                 std::to_string(swapped) + " byte-swapped)");
        fail("unsupported GGUF version " + std::to_string(version) +
             " (kvscope reads versions 2 and 3)");
    }
    m_file.m_version = version;
    tensorCount = read<std::uint64_t>("header field tensor_count");
    kvCount = read<std::uint64_t>("header field metadata_kv_count");
    if (kvCount > remaining() / kMinKvBytes)
        fail("header field metadata_kv_count = " + std::to_string(kvCount) +
             " is impossible in a file of " + std::to_string(m_size) + " bytes");
    if (tensorCount > remaining() / kMinTensorInfoBytes)
        fail("header field tensor_count = " + std::to_string(tensorCount) +
             " is impossible in a file of " + std::to_string(m_size) + " bytes");
}

void Parser::readMetadata(std::uint64_t kvCount) {
    m_file.m_metadata.reserve(kvCount);
    for (std::uint64_t i = 0; i < kvCount; ++i) {
        m_context = "metadata key #" + std::to_string(i);
        std::string key = readString("key");
        m_context += " '" + printable(key) + "'";
        const auto raw = read<std::uint32_t>("value type");
        if (raw > static_cast<std::uint32_t>(ValueType::F64))
            fail("value type " + std::to_string(raw) + " is not a GGUF value type");
        Value value = readValue(static_cast<ValueType>(raw));
        if (!m_file.m_keyIndex.emplace(key, m_file.m_metadata.size()).second)
            fail("the key appears more than once");
        m_file.m_metadata.emplace_back(std::move(key), std::move(value));
    }
    m_context.clear();
}

void Parser::readAlignment() {
    const Value* v = m_file.find("general.alignment");
    if (!v)
        return;
    m_context = "metadata 'general.alignment'";
    const auto a = v->asU64();
    if (!a)
        fail("expected an unsigned integer, found " + std::string(valueTypeName(v->type())));
    if (*a == 0 || (*a & (*a - 1)) != 0 || *a > (1u << 30))
        fail("alignment " + std::to_string(*a) + " is not a power of two up to 2^30");
    m_file.m_alignment = static_cast<std::uint32_t>(*a);
    m_context.clear();
}

void Parser::readTensorInfos(std::uint64_t tensorCount) {
    if (tensorCount > remaining() / kMinTensorInfoBytes)
        fail("header field tensor_count = " + std::to_string(tensorCount) + " but only " +
             std::to_string(remaining()) + " bytes are left for the tensor infos");
    auto& tensors = m_file.m_tensors;
    tensors.reserve(tensorCount);
    for (std::uint64_t i = 0; i < tensorCount; ++i) {
        m_context = "tensor #" + std::to_string(i);
        TensorInfo t;
        t.name = readString("name");
        m_context = "tensor '" + printable(t.name) + "'";
        const auto nDims = read<std::uint32_t>("n_dims");
        if (nDims > kMaxDims)
            fail("n_dims = " + std::to_string(nDims) + " exceeds the maximum of " +
                 std::to_string(kMaxDims));
        std::uint64_t elements = 1;
        for (std::uint32_t d = 0; d < nDims; ++d) {
            const auto ne = static_cast<std::int64_t>(read<std::uint64_t>("dimension"));
            if (ne < 0)
                fail("dimension " + std::to_string(d) + " = " + std::to_string(ne) +
                     " is negative");
            if (ne != 0 && elements > static_cast<std::uint64_t>(INT64_MAX) / ne)
                fail("dimension " + std::to_string(d) + " = " + std::to_string(ne) +
                     " makes the element count overflow 64 bits");
            elements *= static_cast<std::uint64_t>(ne);
            t.dims.push_back(ne);
        }
        const auto type = read<std::uint32_t>("type");
        t.type = static_cast<TensorType>(type);
        const auto traits = typeTraits(t.type);
        if (!traits)
            fail("unknown tensor type id " + std::to_string(type));
        const std::int64_t ne0 = t.dims.empty() ? 1 : t.dims[0];
        if (ne0 % traits->blockSize != 0)
            fail("dimension 0 = " + std::to_string(ne0) + " is not a multiple of the " +
                 std::string(traits->name) + " block size " + std::to_string(traits->blockSize));
        const std::uint64_t blocks = elements / traits->blockSize;
        if (blocks > std::numeric_limits<std::uint64_t>::max() / traits->blockBytes)
            fail("size in bytes overflows 64 bits");
        t.nbytes = blocks * traits->blockBytes;
        t.offset = read<std::uint64_t>("offset"); // relative for now; made absolute below
        if (!m_file.m_tensorIndex.emplace(t.name, tensors.size()).second)
            fail("the tensor name appears more than once");
        tensors.push_back(std::move(t));
    }
    m_context.clear();
}

void Parser::checkTensorData() {
    const std::uint64_t align = m_file.m_alignment;
    m_file.m_dataOffset = (m_pos + align - 1) / align * align;
    const std::uint64_t base = m_file.m_dataOffset;
    for (TensorInfo& t : m_file.m_tensors) {
        m_context = "tensor '" + printable(t.name) + "'";
        const std::uint64_t rel = t.offset;
        if (rel % align != 0)
            fail("offset " + std::to_string(rel) + " is not a multiple of the alignment " +
                 std::to_string(align));
        if (rel > std::numeric_limits<std::uint64_t>::max() - base)
            fail("offset " + std::to_string(rel) + " (relative to the data section at " +
                 std::to_string(base) + ") is past the end of the file (" + std::to_string(m_size) +
                 " bytes)");
        t.offset = base + rel;
        if (t.offset > m_size || t.nbytes > m_size - t.offset)
            fail("offset " + std::to_string(t.offset) + " + " + std::to_string(t.nbytes) +
                 " bytes is past the end of the file (" + std::to_string(m_size) + " bytes)");
    }
    // Tensors must not share bytes.
    std::vector<const TensorInfo*> order;
    for (const TensorInfo& t : m_file.m_tensors)
        if (t.nbytes > 0)
            order.push_back(&t);
    std::sort(order.begin(), order.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < order.size(); ++i) {
        const TensorInfo& a = *order[i - 1];
        const TensorInfo& b = *order[i];
        if (a.offset + a.nbytes > b.offset) {
            m_context = "tensor '" + printable(b.name) + "'";
            fail("data at offset " + std::to_string(b.offset) + " overlaps tensor '" +
                 printable(a.name) + "' (offset " + std::to_string(a.offset) + ", " +
                 std::to_string(a.nbytes) + " bytes)");
        }
    }
    // Writers (llama.cpp, gguf-py, ours) lay tensors end to end, each padded to the alignment.
    // A tensor followed by a whole alignment unit or more of unused bytes declares fewer bytes
    // than it was written with: its type or its shape is not the one it was written with, and
    // reading it would give a model of the right shape made of garbage.
    for (std::size_t i = 0; i < order.size(); ++i) {
        const TensorInfo& a = *order[i];
        const std::uint64_t next = i + 1 < order.size() ? order[i + 1]->offset : m_size;
        const std::uint64_t unused = next - (a.offset + a.nbytes);
        if (unused >= align) {
            m_context = "tensor '" + printable(a.name) + "'";
            fail("its type " + std::string(typeName(a.type)) + " and shape make " +
                 std::to_string(a.nbytes) + " bytes, but " + std::to_string(unused) +
                 " unused bytes follow them before " +
                 (i + 1 < order.size() ? "tensor '" + printable(order[i + 1]->name) + "'"
                                       : std::string("the end of the file")) +
                 " (the alignment is " + std::to_string(align) +
                 "): the type or the shape is not the one the data was written with");
        }
    }
    m_context.clear();
}

void Parser::run() {
    std::uint64_t tensorCount = 0, kvCount = 0;
    readHeader(tensorCount, kvCount);
    readMetadata(kvCount);
    readAlignment();
    readTensorInfos(tensorCount);
    checkTensorData();
}

// ---- File -------------------------------------------------------------------------------

File File::parse(std::string path, std::shared_ptr<const MappedFile> map) {
    File f;
    f.m_path = std::move(path);
    f.m_map = std::move(map);
    Parser(f).run();
    return f;
}

Result<File> File::open(const std::string& path) {
    return catchToResult([&] { return parse(path, MappedFile::open(path)); });
}

Result<File> File::openMemory(std::vector<std::uint8_t> bytes, std::string name) {
    return catchToResult(
        [&] { return parse(std::move(name), MappedFile::fromBytes(std::move(bytes))); });
}

std::uint64_t File::fileSize() const {
    return m_map ? m_map->size() : 0;
}

const Value* File::find(std::string_view key) const {
    auto it = m_keyIndex.find(key);
    return it == m_keyIndex.end() ? nullptr : &m_metadata[it->second].second;
}

const TensorInfo* File::tensor(std::string_view name) const {
    auto it = m_tensorIndex.find(name);
    return it == m_tensorIndex.end() ? nullptr : &m_tensors[it->second];
}

std::int64_t TensorInfo::elementCount() const {
    return std::accumulate(dims.begin(), dims.end(), std::int64_t{1}, std::multiplies<>());
}

void File::failKey(std::string_view key, const std::string& what) const {
    throw KvError(m_path + ": metadata '" + std::string(key) + "': " + what);
}

const Value& File::require(std::string_view key) const {
    const Value* v = find(key);
    if (!v)
        failKey(key, "missing");
    return *v;
}

namespace {
std::string found(const Value& v) {
    std::string s = "found " + std::string(valueTypeName(v.type()));
    if (v.isArray())
        s += " of " + std::string(valueTypeName(v.elementType()));
    else if (v.type() != ValueType::String)
        s += " " + v.toDisplayString();
    return s;
}
} // namespace

const std::string& File::getString(std::string_view key) const {
    const Value& v = require(key);
    if (!v.asString())
        failKey(key, "expected a string, " + found(v));
    return *v.asString();
}

std::uint64_t File::getU64(std::string_view key) const {
    const Value& v = require(key);
    if (auto u = v.asU64())
        return *u;
    failKey(key, "expected an unsigned integer, " + found(v));
}

std::uint32_t File::getU32(std::string_view key) const {
    const Value& v = require(key);
    if (auto u = v.asU64(); u && *u <= UINT32_MAX)
        return static_cast<std::uint32_t>(*u);
    failKey(key, "expected an unsigned 32-bit integer, " + found(v));
}

std::int64_t File::getI64(std::string_view key) const {
    const Value& v = require(key);
    if (auto i = v.asI64())
        return *i;
    failKey(key, "expected a signed 64-bit integer, " + found(v));
}

std::int32_t File::getI32(std::string_view key) const {
    const Value& v = require(key);
    if (auto i = v.asI64(); i && *i >= INT32_MIN && *i <= INT32_MAX)
        return static_cast<std::int32_t>(*i);
    failKey(key, "expected a signed 32-bit integer, " + found(v));
}

double File::getF64(std::string_view key) const {
    const Value& v = require(key);
    if (auto d = v.asF64())
        return *d;
    failKey(key, "expected a floating-point number, " + found(v));
}

float File::getF32(std::string_view key) const {
    return static_cast<float>(getF64(key));
}

bool File::getBool(std::string_view key) const {
    const Value& v = require(key);
    if (auto b = v.asBool())
        return *b;
    failKey(key, "expected a bool, " + found(v));
}

const std::vector<std::string>& File::getStringArray(std::string_view key) const {
    const Value& v = require(key);
    if (!v.asStringArray())
        failKey(key, "expected an array of strings, " + found(v));
    return *v.asStringArray();
}

std::vector<float> File::getF32Array(std::string_view key) const {
    const Value& v = require(key);
    if (auto a = v.toF32Array())
        return std::move(*a);
    failKey(key, "expected an array of f32 or f64, " + found(v));
}

std::vector<std::int32_t> File::getI32Array(std::string_view key) const {
    const Value& v = require(key);
    if (auto a = v.toI32Array())
        return std::move(*a);
    failKey(key, "expected an array of integers that fit in 32 bits, " + found(v));
}

std::vector<std::int64_t> File::getI64Array(std::string_view key) const {
    const Value& v = require(key);
    if (auto a = v.toI64Array())
        return std::move(*a);
    failKey(key, "expected an array of integers that fit in 64 bits, " + found(v));
}

std::span<const std::uint8_t> File::data(const TensorInfo& t) const {
    const std::uint64_t size = fileSize();
    if (t.offset > size || t.nbytes > size - t.offset)
        throw KvError(m_path + ": tensor '" + t.name + "': offset " + std::to_string(t.offset) +
                      " + " + std::to_string(t.nbytes) + " bytes is past the end of the file (" +
                      std::to_string(size) + " bytes)");
    return {m_map->data() + t.offset, static_cast<std::size_t>(t.nbytes)};
}

std::vector<std::uint8_t> File::readRaw(const TensorInfo& t) const {
    const auto bytes = data(t);
    return {bytes.begin(), bytes.end()};
}

std::vector<float> File::readF32(const TensorInfo& t) const {
    const std::string where = m_path + ": tensor '" + t.name + "': ";
    if (!canReadF32(t.type))
        throw KvError(where + "cannot convert " + typeName(t.type) +
                      " to float (supported: " + std::string(readableTypes()) + ")");
    const auto bytes = data(t);
    const auto traits = *typeTraits(t.type);
    const std::int64_t count = t.elementCount();
    // Guards against a TensorInfo that was edited or built by hand.
    if (count < 0 || count % traits.blockSize != 0 ||
        static_cast<std::uint64_t>(count) / traits.blockSize * traits.blockBytes != bytes.size())
        throw KvError(where + std::to_string(count) + " elements of " + typeName(t.type) +
                      " do not match " + std::to_string(bytes.size()) + " bytes");
    std::vector<float> out(static_cast<std::size_t>(count));
    dequantize(t.type, bytes.data(), out.size(), out.data());
    return out;
}

} // namespace kvscope::gguf
