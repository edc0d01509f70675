// Exercises a parsed GGUF file: every metadata value through every accessor, every tensor's
// bytes and, for the convertible types, its float conversion (see check.h).
#pragma once

#include "check.h"
#include "formats/gguf.h"

namespace kvscope::fuzz {

inline Status exerciseGguf(const gguf::File& f) {
    for (const auto& [key, v] : f.metadata()) {
        if (f.find(key) != &v)
            return Status::error("metadata '" + key + "': find() returns another value");
        (void)v.toDisplayString();
        (void)v.asI64(), (void)v.asU64(), (void)v.asF64(), (void)v.asBool(), (void)v.asString();
        (void)v.asStringArray(), (void)v.toF32Array(), (void)v.toI32Array(), (void)v.toI64Array();
        // The typed getters throw KvError on a type mismatch; anything else is a bug.
        for (int getter = 0; getter < 8; ++getter) {
            try {
                switch (getter) {
                case 0:
                    (void)f.getString(key);
                    break;
                case 1:
                    (void)f.getU32(key);
                    break;
                case 2:
                    (void)f.getI64(key);
                    break;
                case 3:
                    (void)f.getF32(key);
                    break;
                case 4:
                    (void)f.getBool(key);
                    break;
                case 5:
                    (void)f.getStringArray(key);
                    break;
                case 6:
                    (void)f.getF32Array(key);
                    break;
                default:
                    (void)f.getI32Array(key);
                    break;
                }
            } catch (const KvError& e) {
                if (Status st = checkError(e.what(), f.path()); !st)
                    return st;
            }
        }
    }
    for (const gguf::TensorInfo& t : f.tensors()) {
        if (f.tensor(t.name) != &t)
            return Status::error("tensor '" + t.name + "': tensor(name) finds another one");
        if (t.offset < f.dataOffset() || t.offset > f.fileSize() ||
            t.nbytes > f.fileSize() - t.offset)
            return Status::error("tensor '" + t.name + "' lies outside the data section");
        if (f.data(t).size() != t.nbytes)
            return Status::error("tensor '" + t.name + "': data() size differs from nbytes");
        if (!gguf::canReadF32(t.type))
            continue;
        const auto floats = catchToResult([&] { return f.readF32(t); });
        if (!floats)
            return Status::error("tensor '" + t.name +
                                 "': readF32 failed on a parsed tensor: " + floats.message());
        if (floats.value().size() != static_cast<std::uint64_t>(t.elementCount()))
            return Status::error("tensor '" + t.name + "': readF32 size differs from the dims");
    }
    return Status::ok();
}

} // namespace kvscope::fuzz
