#include "engine/tensorconv.h"
#include "util/status.h"

#include "util/largebuffer.h"

#include <algorithm>

namespace kvscope {

HostTensor toHost(const at::Tensor& t) {
    HostTensor h;
    auto c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    h.shape.assign(c.sizes().begin(), c.sizes().end());
    h.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    return h;
}

std::vector<at::Tensor> emptyOnLargePages(const std::vector<TensorSpec>& specs) {
    constexpr std::size_t kAlign = 64; // each tensor's offset in the buffer
    std::vector<std::size_t> offsets;
    std::size_t total = 0;
    for (const auto& s : specs) {
        offsets.push_back(total);
        std::size_t bytes = c10::elementSize(s.dtype);
        for (int64_t d : s.shape)
            bytes *= std::size_t(std::max<int64_t>(d, 0));
        total += (bytes + kAlign - 1) / kAlign * kAlign;
    }
    // LargePageAllocator: huge pages from 2 MiB on, an ordinary block below (a huge page
    // would hold more memory than the tensors need).
    total = std::max<std::size_t>(total, 1);
    std::uint8_t* raw = LargePageAllocator<std::uint8_t>().allocate(total);
    std::shared_ptr<void> buffer(raw, [total](void* p) {
        LargePageAllocator<std::uint8_t>().deallocate(static_cast<std::uint8_t*>(p), total);
    });
    std::vector<at::Tensor> out;
    for (std::size_t i = 0; i < specs.size(); ++i)
        out.push_back(at::from_blob(
            raw + offsets[i], specs[i].shape, [buffer](void*) {},
            at::TensorOptions().dtype(specs[i].dtype)));
    return out;
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
