// Exercises a parsed safetensors file: the tensor table, every tensor's bytes and, for the
// float dtypes, its float conversion (see check.h).
#pragma once

#include "check.h"
#include "formats/safetensors.h"

namespace kvscope::fuzz {

inline Status exerciseSafetensors(const safetensors::File& f) {
    for (const safetensors::TensorInfo& t : f.tensors()) {
        if (f.tensor(t.name) != &t)
            return Status::error("tensor '" + t.name + "': tensor(name) finds another one");
        if (t.offset < f.dataOffset())
            return Status::error("tensor '" + t.name + "' starts inside the header");
        if (f.data(t).size() != t.nbytes)
            return Status::error("tensor '" + t.name + "': data() size differs from nbytes");
        const auto floats = catchToResult([&] { return f.readF32(t.name); });
        const auto dt = t.dtype;
        using safetensors::DType;
        const bool convertible =
            dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::F64;
        if (convertible && !floats)
            return Status::error("tensor '" + t.name + "': readF32 failed: " + floats.message());
        if (!convertible && !floats) {
            if (Status st = checkError(floats.message(), f.path()); !st)
                return st;
            continue;
        }
        if (floats.value().size() != static_cast<std::uint64_t>(t.elementCount()))
            return Status::error("tensor '" + t.name + "': readF32 size differs from the shape");
    }
    return Status::ok();
}

} // namespace kvscope::fuzz
