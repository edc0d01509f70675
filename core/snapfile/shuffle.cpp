#include "snapfile/shuffle.h"

#include <cstring>

namespace kvscope::snapfile {

namespace {
// Fixed element sizes let the compiler unroll the inner loop; these run on every byte of a
// snapshot, so they are worth the template.
template <std::size_t S> void shuffleFixed(const uint8_t* in, uint8_t* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t k = 0; k < S; ++k)
            out[k * n + i] = in[i * S + k];
}
template <std::size_t S> void unshuffleFixed(const uint8_t* in, uint8_t* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t k = 0; k < S; ++k)
            out[i * S + k] = in[k * n + i];
}
} // namespace

void shuffleBytes(const uint8_t* in, uint8_t* out, std::size_t bytes, std::size_t elemSize) {
    const std::size_t n = elemSize ? bytes / elemSize : 0;
    switch (elemSize) {
    case 2:
        return shuffleFixed<2>(in, out, n);
    case 4:
        return shuffleFixed<4>(in, out, n);
    case 8:
        return shuffleFixed<8>(in, out, n);
    default:
        if (bytes)
            std::memcpy(out, in, bytes);
    }
}

void unshuffleBytes(const uint8_t* in, uint8_t* out, std::size_t bytes, std::size_t elemSize) {
    const std::size_t n = elemSize ? bytes / elemSize : 0;
    switch (elemSize) {
    case 2:
        return unshuffleFixed<2>(in, out, n);
    case 4:
        return unshuffleFixed<4>(in, out, n);
    case 8:
        return unshuffleFixed<8>(in, out, n);
    default:
        if (bytes)
            std::memcpy(out, in, bytes);
    }
}

} // namespace kvscope::snapfile
