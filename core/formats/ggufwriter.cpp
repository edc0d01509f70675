// GGUF writer: serializes metadata and tensors in the layout gguf.cpp reads.
#include "formats/ggufwriter.h"
#include "formats/ggufquantize.h"
#include "formats/halffloat.h"
#include "util/fileio.h"

#include <cstring>

namespace kvscope::gguf {

namespace {

class Sink {
public:
    void bytes(const void* p, std::size_t n) {
        // resize + memcpy rather than insert(): GCC 12 warns falsely (-Wstringop-overflow)
        const std::size_t old = m_out.size();
        m_out.resize(old + n);
        if (n)
            std::memcpy(m_out.data() + old, p, n);
    }
    template <typename T> void put(T v) { bytes(&v, sizeof v); }
    void string(const std::string& s) {
        put<std::uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void padTo(std::uint32_t alignment) {
        m_out.resize((m_out.size() + alignment - 1) / alignment * alignment, 0);
    }
    std::vector<std::uint8_t> take() { return std::move(m_out); }
    std::size_t size() const { return m_out.size(); }

private:
    std::vector<std::uint8_t> m_out;
};

void writeValue(Sink& s, const Value& v) {
    s.put<std::uint32_t>(static_cast<std::uint32_t>(v.type()));
    if (v.isArray()) {
        s.put<std::uint32_t>(static_cast<std::uint32_t>(v.elementType()));
        s.put<std::uint64_t>(v.size());
    }
    if (v.elementType() == ValueType::String) {
        if (const auto* strings = v.asStringArray())
            for (const auto& str : *strings)
                s.string(str);
        else
            s.string(*v.asString());
    } else {
        s.bytes(v.packed().data(), v.packed().size());
    }
}

} // namespace

Writer::Writer(std::uint32_t alignment) : m_alignment(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        throw KvError("GGUF alignment " + std::to_string(alignment) + " is not a power of two");
    if (alignment != 32)
        set("general.alignment", Value::scalar<std::uint32_t>(alignment));
}

void Writer::set(std::string key, Value value) {
    for (auto& [k, v] : m_metadata)
        if (k == key) {
            v = std::move(value);
            return;
        }
    m_metadata.emplace_back(std::move(key), std::move(value));
}

namespace {

// Float values in `storeAs`'s bytes (F32, F16, BF16 or a type quantize() makes).
std::vector<std::uint8_t> encodeFloats(const std::string& name, std::span<const float> data,
                                       TensorType storeAs) {
    std::vector<std::uint8_t> bytes;
    switch (storeAs) {
    case TensorType::F32:
        bytes.resize(data.size() * 4);
        if (!data.empty())
            std::memcpy(bytes.data(), data.data(), bytes.size());
        break;
    case TensorType::F16:
        bytes.resize(data.size() * 2);
        floatToFp16(data.data(), data.size(), bytes.data());
        break;
    case TensorType::BF16:
        bytes.resize(data.size() * 2);
        floatToBf16(data.data(), data.size(), bytes.data());
        break;
    default:
        if (!canQuantize(storeAs))
            throw KvError("GGUF writer: tensor '" + name + "': cannot convert float to " +
                          typeName(storeAs) +
                          " (supported: F32, F16, BF16, Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
        bytes = quantize(storeAs, data);
    }
    return bytes;
}

} // namespace

std::uint64_t Writer::checkTensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                  TensorType type) const {
    const std::string where = "GGUF writer: tensor '" + name + "': ";
    for (const auto& t : m_tensors)
        if (t.name == name)
            throw KvError(where + "added twice");
    const auto traits = typeTraits(type);
    if (!traits)
        throw KvError(where + "unknown tensor type " + typeName(type));
    std::uint64_t elements = 1;
    for (const auto d : dims) {
        if (d < 0)
            throw KvError(where + "negative dimension");
        elements *= static_cast<std::uint64_t>(d);
    }
    const std::int64_t ne0 = dims.empty() ? 1 : dims[0];
    if (ne0 % traits->blockSize != 0)
        throw KvError(where + "rows of " + std::to_string(ne0) + " elements are not whole " +
                      typeName(type) + " blocks of " + std::to_string(traits->blockSize));
    return elements / traits->blockSize * traits->blockBytes;
}

void Writer::addTensor(std::string name, std::vector<std::int64_t> dims, TensorType type,
                       std::vector<std::uint8_t> bytes) {
    const std::uint64_t size = checkTensor(name, dims, type);
    if (size != bytes.size())
        throw KvError("GGUF writer: tensor '" + name + "': " + std::to_string(bytes.size()) +
                      " bytes do not hold its elements of " + typeName(type) + " (" +
                      std::to_string(size) + " bytes)");
    m_tensors.push_back({std::move(name), std::move(dims), type, size, std::move(bytes), {}});
}

void Writer::addTensor(std::string name, std::vector<std::int64_t> dims, TensorType type,
                       Producer produce) {
    const std::uint64_t size = checkTensor(name, dims, type);
    m_tensors.push_back({std::move(name), std::move(dims), type, size, {}, std::move(produce)});
}

void Writer::addTensor(std::string name, std::vector<std::int64_t> dims,
                       std::span<const float> data, TensorType storeAs) {
    std::vector<std::uint8_t> bytes = encodeFloats(name, data, storeAs);
    addTensor(std::move(name), std::move(dims), storeAs, std::move(bytes));
}

void Writer::addFloatTensor(std::string name, std::vector<std::int64_t> dims,
                            std::function<std::vector<float>()> values, TensorType storeAs) {
    (void)encodeFloats(name, {}, storeAs); // refuses a type it cannot make, now
    const std::string label = name;
    addTensor(std::move(name), std::move(dims), storeAs,
              [label, storeAs, values = std::move(values)] {
                  const std::vector<float> v = values();
                  return encodeFloats(label, v, storeAs);
              });
}

std::vector<std::uint8_t> Writer::tensorBytes(const Tensor& t) const {
    if (!t.produce)
        return t.bytes;
    std::vector<std::uint8_t> bytes = t.produce();
    if (bytes.size() != t.size)
        throw KvError("GGUF writer: tensor '" + t.name + "': made " + std::to_string(bytes.size()) +
                      " bytes, its shape and type need " + std::to_string(t.size));
    return bytes;
}

std::vector<std::uint8_t> Writer::header() const {
    Sink s;
    s.bytes("GGUF", 4);
    s.put<std::uint32_t>(3);
    s.put<std::uint64_t>(m_tensors.size());
    s.put<std::uint64_t>(m_metadata.size());
    for (const auto& [key, value] : m_metadata) {
        s.string(key);
        writeValue(s, value);
    }
    std::uint64_t offset = 0; // relative to the data section
    for (const auto& t : m_tensors) {
        s.string(t.name);
        s.put<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
        for (const auto d : t.dims)
            s.put<std::int64_t>(d);
        s.put<std::uint32_t>(static_cast<std::uint32_t>(t.type));
        s.put<std::uint64_t>(offset);
        offset += (t.size + m_alignment - 1) / m_alignment * m_alignment;
    }
    if (!m_tensors.empty())
        s.padTo(m_alignment);
    return s.take();
}

void Writer::stream(const ByteSink& sink) const {
    const std::vector<std::uint8_t> head = header();
    sink(head.data(), head.size());
    const std::vector<std::uint8_t> zeros(m_alignment, 0);
    for (const auto& t : m_tensors) {
        const std::vector<std::uint8_t> bytes = tensorBytes(t); // one tensor in memory at a time
        sink(bytes.data(), bytes.size());
        sink(zeros.data(), (m_alignment - bytes.size() % m_alignment) % m_alignment);
    }
}

std::vector<std::uint8_t> Writer::toBytes() const {
    return collectStreamed([&](const ByteSink& sink) { stream(sink); });
}

Status Writer::write(const std::string& path) const {
    return catchToStatus(
        [&] { writeFileAtomicStreamed(path, [&](const ByteSink& sink) { stream(sink); }); });
}

} // namespace kvscope::gguf
