// safetensors reading: header validation, tensor access, sharded index.
#include "formats/safetensors.h"
#include "formats/halffloat.h"
#include "formats/jsondepth.h"
#include "formats/jsonerror.h"
#include "util/fileio.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>

namespace kvscope::safetensors {

namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000; // the reference implementation's cap

constexpr DType kAllTypes[] = {DType::Bool, DType::U8,  DType::I8,  DType::F8_E5M2, DType::F8_E4M3,
                               DType::I16,  DType::U16, DType::F16, DType::BF16,    DType::I32,
                               DType::U32,  DType::F32, DType::F64, DType::I64,     DType::U64};

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// Reads a JSON value that must be a non-negative integer.
std::optional<std::uint64_t> unsignedOf(const json& v) {
    if (v.is_number_unsigned())
        return v.get<std::uint64_t>();
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
        return static_cast<std::uint64_t>(v.get<std::int64_t>());
    return std::nullopt;
}

} // namespace

std::string_view dtypeName(DType t) {
    switch (t) {
    case DType::Bool:
        return "BOOL";
    case DType::U8:
        return "U8";
    case DType::I8:
        return "I8";
    case DType::F8_E5M2:
        return "F8_E5M2";
    case DType::F8_E4M3:
        return "F8_E4M3";
    case DType::I16:
        return "I16";
    case DType::U16:
        return "U16";
    case DType::F16:
        return "F16";
    case DType::BF16:
        return "BF16";
    case DType::I32:
        return "I32";
    case DType::U32:
        return "U32";
    case DType::F32:
        return "F32";
    case DType::F64:
        return "F64";
    case DType::I64:
        return "I64";
    case DType::U64:
        return "U64";
    }
    return "?";
}

std::optional<DType> parseDType(std::string_view name) {
    for (const DType t : kAllTypes)
        if (dtypeName(t) == name)
            return t;
    return std::nullopt;
}

std::size_t dtypeSize(DType t) {
    switch (t) {
    case DType::Bool:
    case DType::U8:
    case DType::I8:
    case DType::F8_E5M2:
    case DType::F8_E4M3:
        return 1;
    case DType::I16:
    case DType::U16:
    case DType::F16:
    case DType::BF16:
        return 2;
    case DType::I32:
    case DType::U32:
    case DType::F32:
        return 4;
    case DType::F64:
    case DType::I64:
    case DType::U64:
        return 8;
    }
    return 1;
}

std::int64_t TensorInfo::elementCount() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

// ---- File -----------------------------------------------------------------------------------

File File::parse(std::string path, std::shared_ptr<const MappedFile> map) {
    File f;
    f.m_path = std::move(path);
    f.m_map = std::move(map);
    const std::uint8_t* bytes = f.m_map->data();
    const std::uint64_t size = f.m_map->size();
    auto fail = [&](const std::string& msg) { throw KvError(f.m_path + ": " + msg); };

    if (size < 8)
        fail("file is " + std::to_string(size) + " bytes, too small for the 8-byte header length");
    std::uint64_t headerLen;
    std::memcpy(&headerLen, bytes, 8);
    if (headerLen > size - 8)
        fail("header length " + std::to_string(headerLen) + " exceeds the file size (" +
             std::to_string(size) + " bytes)");
    if (headerLen > kMaxHeaderBytes)
        fail("header length " + std::to_string(headerLen) + " exceeds the limit of " +
             std::to_string(kMaxHeaderBytes) + " bytes");
    f.m_dataOffset = 8 + headerLen;
    const std::uint64_t dataSize = size - f.m_dataOffset;

    json header;
    const std::string_view headerText(reinterpret_cast<const char*>(bytes) + 8, headerLen);
    checkJsonDepth(headerText, f.m_path + ": header");
    try {
        header = json::parse(headerText);
    } catch (const json::exception& e) {
        fail("header is not valid JSON: " + describeJsonError(e, headerText));
    }
    if (!header.is_object())
        fail("header is not a JSON object");

    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const json& entry = it.value();
        if (name == "__metadata__") {
            if (!entry.is_object())
                fail("__metadata__ is not a JSON object");
            for (auto m = entry.begin(); m != entry.end(); ++m) {
                if (!m.value().is_string())
                    fail("__metadata__ '" + m.key() + "' is not a string");
                f.m_metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = "tensor '" + name + "': ";
        if (!entry.is_object())
            fail(where + "entry is not a JSON object");
        const auto dt = entry.find("dtype");
        const auto sh = entry.find("shape");
        const auto off = entry.find("data_offsets");
        if (dt == entry.end() || !dt->is_string())
            fail(where + "dtype is missing or not a string");
        if (sh == entry.end() || !sh->is_array())
            fail(where + "shape is missing or not an array");
        if (off == entry.end() || !off->is_array() || off->size() != 2)
            fail(where + "data_offsets is missing or not [begin, end]");

        TensorInfo t;
        t.name = name;
        const auto dtype = parseDType(dt->get<std::string>());
        if (!dtype)
            fail(where + "unknown dtype '" + dt->get<std::string>() + "'");
        t.dtype = *dtype;
        std::uint64_t elements = 1;
        for (std::size_t d = 0; d < sh->size(); ++d) {
            const auto n = unsignedOf((*sh)[d]);
            if (!n || *n > static_cast<std::uint64_t>(INT64_MAX))
                fail(where + "shape[" + std::to_string(d) + "] = " + (*sh)[d].dump() +
                     " is not a non-negative integer");
            if (*n != 0 && elements > static_cast<std::uint64_t>(INT64_MAX) / *n)
                fail(where + "shape " + sh->dump() + " has more than 2^63 elements");
            elements *= *n;
            t.shape.push_back(static_cast<std::int64_t>(*n));
        }
        const std::uint64_t esize = dtypeSize(t.dtype);
        if (elements > std::numeric_limits<std::uint64_t>::max() / esize)
            fail(where + "shape " + sh->dump() + " × " + std::string(dtypeName(t.dtype)) +
                 " overflows 64 bits");
        t.nbytes = elements * esize;
        const auto begin = unsignedOf((*off)[0]);
        const auto end = unsignedOf((*off)[1]);
        if (!begin || !end || *begin > *end)
            fail(where + "data_offsets " + off->dump() + " are not a valid [begin, end]");
        if (*end > dataSize)
            fail(where + "data_offsets " + off->dump() + " are past the end of the data section (" +
                 std::to_string(dataSize) + " bytes)");
        if (*end - *begin != t.nbytes)
            fail(where + "data_offsets " + off->dump() + " hold " + std::to_string(*end - *begin) +
                 " bytes but shape " + shapeText(t.shape) + " × " +
                 std::string(dtypeName(t.dtype)) + " needs " + std::to_string(t.nbytes));
        t.offset = f.m_dataOffset + *begin;
        f.m_tensors.push_back(std::move(t));
    }

    std::sort(f.m_tensors.begin(), f.m_tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
    });
    for (std::size_t i = 1; i < f.m_tensors.size(); ++i) {
        const TensorInfo& a = f.m_tensors[i - 1];
        const TensorInfo& b = f.m_tensors[i];
        if (a.nbytes > 0 && b.nbytes > 0 && a.offset + a.nbytes > b.offset)
            fail("tensor '" + b.name + "': data_offsets overlap tensor '" + a.name + "'");
    }
    // The tensors tile the data section exactly, as the format requires (the reference reader
    // refuses holes and trailing bytes): a header length one byte short still parses, thanks
    // to the padding, and would shift every tensor by a byte.
    std::uint64_t covered = 0;
    for (const TensorInfo& t : f.m_tensors) {
        if (t.offset - f.m_dataOffset != covered)
            fail("tensor '" + t.name + "': data_offsets begin at " +
                 std::to_string(t.offset - f.m_dataOffset) + " but the tensors before it end at " +
                 std::to_string(covered) + " (the data section must be covered without gaps)");
        covered += t.nbytes;
    }
    if (covered != dataSize)
        fail("the tensors cover " + std::to_string(covered) +
             " bytes but the data section after "
             "the " +
             std::to_string(headerLen) + "-byte header has " + std::to_string(dataSize) +
             ": the header length or the data_offsets are wrong");
    for (std::size_t i = 0; i < f.m_tensors.size(); ++i)
        f.m_index.emplace(f.m_tensors[i].name, i);
    return f;
}

Result<File> File::open(const std::string& path) {
    return catchToResult([&] { return parse(path, MappedFile::open(path)); });
}

Result<File> File::openMemory(std::vector<std::uint8_t> bytes, std::string name) {
    return catchToResult(
        [&] { return parse(std::move(name), MappedFile::fromBytes(std::move(bytes))); });
}

const TensorInfo* File::tensor(std::string_view name) const {
    auto it = m_index.find(name);
    return it == m_index.end() ? nullptr : &m_tensors[it->second];
}

const TensorInfo& File::require(std::string_view name) const {
    const TensorInfo* t = tensor(name);
    if (!t)
        throw KvError(m_path + ": no tensor named '" + std::string(name) + "'");
    return *t;
}

std::span<const std::uint8_t> File::data(const TensorInfo& t) const {
    const std::uint64_t size = m_map ? m_map->size() : 0;
    if (t.offset > size || t.nbytes > size - t.offset)
        throw KvError(m_path + ": tensor '" + t.name + "': bytes " + std::to_string(t.offset) +
                      " + " + std::to_string(t.nbytes) + " are past the end of the file");
    return {m_map->data() + t.offset, static_cast<std::size_t>(t.nbytes)};
}

std::vector<std::uint8_t> File::readRaw(std::string_view name) const {
    const auto bytes = data(require(name));
    return {bytes.begin(), bytes.end()};
}

std::vector<float> File::readF32(std::string_view name) const {
    const TensorInfo& t = require(name);
    const auto bytes = data(t);
    const std::size_t n = bytes.size() / dtypeSize(t.dtype);
    std::vector<float> out(n);
    switch (t.dtype) {
    case DType::F32:
        if (n)
            std::memcpy(out.data(), bytes.data(), n * 4);
        break;
    case DType::F16:
        fp16ToFloat(bytes.data(), n, out.data());
        break;
    case DType::BF16:
        bf16ToFloat(bytes.data(), n, out.data());
        break;
    case DType::F64:
        for (std::size_t i = 0; i < n; ++i) {
            double d;
            std::memcpy(&d, bytes.data() + 8 * i, 8);
            out[i] = static_cast<float>(d);
        }
        break;
    default:
        throw KvError(m_path + ": tensor '" + t.name + "': cannot convert " +
                      std::string(dtypeName(t.dtype)) +
                      " to float (supported: F32, F16, BF16, F64)");
    }
    return out;
}

// ---- Index and Checkpoint -------------------------------------------------------------------

std::vector<std::string> Index::shards() const {
    std::set<std::string> s;
    for (const auto& [name, shard] : weightMap)
        s.insert(shard);
    return {s.begin(), s.end()};
}

Result<Index> openIndex(const std::string& indexPath) {
    return catchToResult([&] {
        namespace fs = std::filesystem;
        auto fail = [&](const std::string& msg) { throw KvError(indexPath + ": " + msg); };
        const std::string text = readFileText(indexPath, kMaxHeaderBytes);
        const json j = parseJsonText(text, indexPath);
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            fail("missing \"weight_map\" object");
        Index index;
        index.path = indexPath;
        const fs::path dir = fs::path(indexPath).parent_path();
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                fail("weight_map '" + it.key() + "' is not a string");
            const fs::path shard(it.value().get<std::string>());
            bool escapes = shard.empty() || shard.is_absolute();
            for (const auto& part : shard)
                escapes = escapes || part == "..";
            if (escapes)
                fail("weight_map '" + it.key() + "': shard '" + shard.string() +
                     "' is not a file name inside the index's folder");
            index.weightMap[it.key()] = (dir / shard).string();
        }
        if (j.contains("metadata") && j["metadata"].is_object())
            for (auto it = j["metadata"].begin(); it != j["metadata"].end(); ++it)
                index.metadata[it.key()] =
                    it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
        return index;
    });
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
    return catchToResult([&] {
        Checkpoint c;
        c.m_path = path;
        const bool isIndex = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
        auto openFile = [](const std::string& p) {
            auto r = File::open(p);
            if (!r)
                throw KvError(r.message());
            return std::move(r).value();
        };
        if (!isIndex) {
            c.m_files.push_back(openFile(path));
            c.m_metadata = c.m_files.front().metadata();
            for (const auto& t : c.m_files.front().tensors())
                c.m_owner.emplace(t.name, 0);
            return c;
        }
        auto index = openIndex(path);
        if (!index)
            throw KvError(index.message());
        c.m_metadata = index.value().metadata;
        std::map<std::string, std::size_t> shardIndex;
        for (const auto& shard : index.value().shards()) {
            shardIndex[shard] = c.m_files.size();
            c.m_files.push_back(openFile(shard));
        }
        for (const auto& [name, shard] : index.value().weightMap) {
            const std::size_t i = shardIndex.at(shard);
            if (!c.m_files[i].tensor(name))
                throw KvError(path + ": tensor '" + name + "' is mapped to '" + shard +
                              "' but that file has no such tensor");
            c.m_owner.emplace(name, i);
        }
        return c;
    });
}

std::vector<std::string> Checkpoint::tensorNames() const {
    std::vector<std::string> names;
    for (const auto& [name, i] : m_owner)
        names.push_back(name);
    return names;
}

const File* Checkpoint::fileOf(std::string_view name) const {
    auto it = m_owner.find(name);
    return it == m_owner.end() ? nullptr : &m_files[it->second];
}

const TensorInfo* Checkpoint::tensor(std::string_view name) const {
    const File* f = fileOf(name);
    return f ? f->tensor(name) : nullptr;
}

const File& Checkpoint::require(std::string_view name) const {
    const File* f = fileOf(name);
    if (!f)
        throw KvError(m_path + ": no tensor named '" + std::string(name) + "'");
    return *f;
}

std::vector<float> Checkpoint::readF32(std::string_view name) const {
    return require(name).readF32(name);
}

std::vector<std::uint8_t> Checkpoint::readRaw(std::string_view name) const {
    return require(name).readRaw(name);
}

} // namespace kvscope::safetensors
