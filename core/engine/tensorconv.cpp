#include "engine/tensorconv.h"
#include "util/status.h"

namespace kvscope {

HostTensor toHost(const at::Tensor& t) {
    HostTensor h;
    auto c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    h.shape.assign(c.sizes().begin(), c.sizes().end());
    h.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    return h;
}

at::Tensor mappedTensor(const std::shared_ptr<const MappedFile>& map, const std::uint8_t* data,
                        at::IntArrayRef shape, at::ScalarType dtype) {
    auto* p = const_cast<std::uint8_t*>(data);
    const auto options = at::TensorOptions().dtype(dtype);
    if (reinterpret_cast<std::uintptr_t>(p) % c10::elementSize(dtype) != 0)
        return at::from_blob(p, shape, options).clone();
    // The storage's deleter holds the mapping: it is unmapped after the last tensor over it.
    return at::from_blob(
        p, shape, [map](void*) {}, options);
}

bool usesMapping(const at::Tensor& t, const MappedFile& map) {
    return t.defined() && t.device().is_cpu() && t.numel() > 0 &&
           map.contains(t.data_ptr(), std::size_t(t.nbytes()));
}

at::Tensor fromHost(const HostTensor& h) {
    return at::from_blob(const_cast<float*>(h.data.data()), h.shape, at::kFloat).clone();
}

std::string dtypeName(at::ScalarType t) {
    switch (t) {
    case at::kFloat:
        return "f32";
    case at::kHalf:
        return "f16";
    case at::kBFloat16:
        return "bf16";
    case at::kDouble:
        return "f64";
    case at::kLong:
        return "i64";
    case at::kInt:
        return "i32";
    case at::kByte:
        return "u8";
    case at::kBool:
        return "bool";
    default:
        return "unknown";
    }
}

at::ScalarType parseDtype(const std::string& name, const std::string& what) {
    if (name == "f32" || name == "float32")
        return at::kFloat;
    if (name == "f16" || name == "float16")
        return at::kHalf;
    if (name == "bf16" || name == "bfloat16")
        return at::kBFloat16;
    throw KvError(what + ": unsupported dtype '" + name + "' (expected f32, f16 or bf16)");
}

} // namespace kvscope
