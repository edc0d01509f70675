// Byte shuffle ("transpose by significance") used before compressing float data.
//
// For n = bytes / elemSize elements: out[k * n + i] = in[i * elemSize + k]. All first bytes of
// every element come first, then all second bytes, and so on. Exponent/sign bytes of
// neighbouring floats are similar, so the shuffled stream compresses much better.
// Pure functions; thread-safe. `bytes` must be a multiple of elemSize; in/out must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvscope::snapfile {

void shuffleBytes(const uint8_t* in, uint8_t* out, std::size_t bytes, std::size_t elemSize);
void unshuffleBytes(const uint8_t* in, uint8_t* out, std::size_t bytes, std::size_t elemSize);

} // namespace kvscope::snapfile
