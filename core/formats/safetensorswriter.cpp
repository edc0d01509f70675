// safetensors writer; see safetensorswriter.h for the layout.
#include "formats/safetensorswriter.h"
#include "formats/halffloat.h"
#include "util/fileio.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace kvscope::safetensors {

void Writer::setMetadata(std::string key, std::string value) {
    m_metadata[std::move(key)] = std::move(value);
}

std::uint64_t Writer::checkTensor(const std::string& name, DType dtype,
                                  const std::vector<std::int64_t>& shape) const {
    const std::string where = "safetensors writer: tensor '" + name + "': ";
    if (name.empty() || name == "__metadata__")
        throw KvError(where + "reserved or empty name");
    for (const auto& t : m_tensors)
        if (t.name == name)
            throw KvError(where + "added twice");
    std::uint64_t elements = 1;
    for (const auto d : shape) {
        if (d < 0)
            throw KvError(where + "negative dimension");
        elements *= static_cast<std::uint64_t>(d);
    }
    return elements * dtypeSize(dtype);
}

void Writer::addTensor(std::string name, DType dtype, std::vector<std::int64_t> shape,
                       std::vector<std::uint8_t> bytes) {
    const std::uint64_t size = checkTensor(name, dtype, shape);
    if (size != bytes.size())
        throw KvError("safetensors writer: tensor '" + name + "': " + std::to_string(bytes.size()) +
                      " bytes do not hold " + std::to_string(size / dtypeSize(dtype)) +
                      " elements of " + std::string(dtypeName(dtype)));
    m_tensors.push_back({std::move(name), dtype, std::move(shape), size, std::move(bytes), {}});
}

void Writer::addTensor(std::string name, DType dtype, std::vector<std::int64_t> shape,
                       Producer produce) {
    const std::uint64_t size = checkTensor(name, dtype, shape);
    m_tensors.push_back({std::move(name), dtype, std::move(shape), size, {}, std::move(produce)});
}

std::vector<std::uint8_t> encodeFloats(const std::string& name, std::span<const float> data,
                                       DType storeAs) {
    std::vector<std::uint8_t> bytes(data.size() * dtypeSize(storeAs));
    switch (storeAs) {
    case DType::F32:
        if (!data.empty())
            std::memcpy(bytes.data(), data.data(), bytes.size());
        break;
    case DType::F16:
        floatToFp16(data.data(), data.size(), bytes.data());
        break;
    case DType::BF16:
        floatToBf16(data.data(), data.size(), bytes.data());
        break;
    default:
        throw KvError("safetensors writer: tensor '" + name + "': cannot convert float to " +
                      std::string(dtypeName(storeAs)) + " (supported: F32, F16, BF16)");
    }
    return bytes;
}

void Writer::addTensor(std::string name, std::vector<std::int64_t> shape,
                       std::span<const float> data, DType storeAs) {
    std::vector<std::uint8_t> bytes = encodeFloats(name, data, storeAs);
    addTensor(std::move(name), storeAs, std::move(shape), std::move(bytes));
}

void Writer::stream(const ByteSink& sink) const {
    std::vector<const Tensor*> order;
    for (const auto& t : m_tensors)
        order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const Tensor* a, const Tensor* b) {
        return a->dtype != b->dtype ? a->dtype > b->dtype : a->name < b->name;
    });

    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!m_metadata.empty())
        header["__metadata__"] = m_metadata;
    std::uint64_t offset = 0;
    for (const Tensor* t : order) {
        header[t->name] = {{"dtype", dtypeName(t->dtype)},
                           {"shape", t->shape},
                           {"data_offsets", {offset, offset + t->size}}};
        offset += t->size;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& e) {
        throw KvError(std::string("safetensors writer: cannot encode the header: ") + e.what());
    }
    text.resize((text.size() + 7) / 8 * 8, ' ');
    const std::uint64_t headerLen = text.size();
    sink(&headerLen, 8);
    sink(text.data(), text.size());
    for (const Tensor* t : order) {
        if (!t->produce) {
            sink(t->bytes.data(), t->bytes.size());
            continue;
        }
        const std::vector<std::uint8_t> bytes = t->produce(); // one tensor in memory at a time
        if (bytes.size() != t->size)
            throw KvError("safetensors writer: tensor '" + t->name + "': made " +
                          std::to_string(bytes.size()) + " bytes, its shape and dtype need " +
                          std::to_string(t->size));
        sink(bytes.data(), bytes.size());
    }
}

std::vector<std::uint8_t> Writer::toBytes() const {
    return collectStreamed([&](const ByteSink& sink) { stream(sink); });
}

Status Writer::write(const std::string& path) const {
    return catchToStatus(
        [&] { writeFileAtomicStreamed(path, [&](const ByteSink& sink) { stream(sink); }); });
}

} // namespace kvscope::safetensors
