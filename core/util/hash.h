// Content hashing for fingerprints and checksums (xxHash XXH3-64 / XXH64).
// Thread-safe: all functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvscope {

// XXH3 64-bit hash of a byte range.
std::uint64_t hash64(const void* data, std::size_t size, std::uint64_t seed = 0);
inline std::uint64_t hash64(std::string_view s, std::uint64_t seed = 0) {
    return hash64(s.data(), s.size(), seed);
}
// 16 lowercase hex digits.
std::string hex64(std::uint64_t value);

// Incremental XXH3-64 over several pieces (e.g. a fingerprint of a whole vocabulary).
class Hasher {
public:
    Hasher();
    ~Hasher();
    Hasher(const Hasher&) = delete;
    Hasher& operator=(const Hasher&) = delete;
    void update(const void* data, std::size_t size);
    void update(std::string_view s) { update(s.data(), s.size()); }
    // Adds the length first, so ("ab","c") and ("a","bc") hash differently.
    void updateField(std::string_view s);
    std::uint64_t digest() const;

private:
    void* m_state;
};

} // namespace kvscope
