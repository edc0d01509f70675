#include "util/hash.h"

#include <cstdio>
#include <xxhash.h>
#if defined(__x86_64__)
// Debian's libxxhash also builds XXH3 for AVX2 and AVX-512 and picks one at run time; the
// plain entry points are its SSE2 build. Same hashes, ~1.3x faster over a mapped snapshot
// here (the checksum pass is most of load()), and far faster on data already in cache. The
// header maps XXH3_64bits_withSeed / _update onto the dispatching functions.
#include <xxh_x86dispatch.h>
#endif

namespace kvscope {

std::uint64_t hash64(const void* data, std::size_t size, std::uint64_t seed) {
    return XXH3_64bits_withSeed(data, size, seed);
}

std::string hex64(std::uint64_t value) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
    return buf;
}

Hasher::Hasher() : m_state(XXH3_createState()) {
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(m_state));
}
Hasher::~Hasher() {
    XXH3_freeState(static_cast<XXH3_state_t*>(m_state));
}

void Hasher::update(const void* data, std::size_t size) {
    XXH3_64bits_update(static_cast<XXH3_state_t*>(m_state), data, size);
}

void Hasher::updateField(std::string_view s) {
    const std::uint64_t n = s.size();
    update(&n, sizeof n);
    update(s.data(), s.size());
}

std::uint64_t Hasher::digest() const {
    return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(m_state));
}

} // namespace kvscope
