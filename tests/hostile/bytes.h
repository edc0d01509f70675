// Byte-level helpers for building hostile files: whole-file I/O, little-endian patching, the
// offsets to truncate at, and a hand-built .kvsnap container (so that the blob table itself
// can lie while every checksum still matches).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::hostile {

using Bytes = std::vector<std::uint8_t>;

Bytes readAll(const std::filesystem::path& p);
void writeAll(const std::filesystem::path& p, const Bytes& b);
void writeText(const std::filesystem::path& p, const std::string& s);
// Copies a file or a folder (recursively) to `to`.
void copyTree(const std::filesystem::path& from, const std::filesystem::path& to);

template <typename T> void putLE(Bytes& b, std::size_t at, T v) {
    if (at + sizeof(T) <= b.size())
        std::memcpy(b.data() + at, &v, sizeof(T));
}
template <typename T> T getLE(const Bytes& b, std::size_t at) {
    T v{};
    if (at + sizeof(T) <= b.size())
        std::memcpy(&v, b.data() + at, sizeof(T));
    return v;
}
template <typename T> void appendLE(Bytes& b, T v) {
    const std::size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
}

// `count` cut points in [0, size): the first bytes (0, 1, 4, 8, ...), points around each of
// `landmarks` (field boundaries) and spread evenly over the rest. Sorted, unique.
std::vector<std::size_t> truncationPoints(std::size_t size, std::vector<std::size_t> landmarks,
                                          std::size_t count);

// .kvsnap container written by hand (FORMAT.md): a valid header and manifest checksum around
// whatever blob table and blob bytes the caller gives. `document` is the whole JSON text
// ({"kvsnap": ..., "manifest": ...}), stored verbatim (it need not be valid JSON).
Bytes buildKvsnap(const Bytes& blobArea, const std::string& document);
// Re-computes the header checksum of a .kvsnap held in `b` (after a header field was patched).
void resealKvsnapHeader(Bytes& b);
// The blob area (bytes 64..manifest) and the JSON document of a valid .kvsnap.
struct KvsnapParts {
    Bytes blobArea;
    nlohmann::json document;
};
KvsnapParts splitKvsnap(const Bytes& file);
// A table entry for `stored` bytes at `offset` (checksums computed; raw = stored).
nlohmann::json blobEntry(const std::string& name, const std::string& dtype,
                         std::vector<std::int64_t> shape, std::uint64_t offset, const Bytes& stored,
                         const std::string& compression, std::uint64_t rawBytes);

// A zstd frame (RFC 8878) made of RLE blocks of zero bytes that decodes to `rawBytes` bytes:
// 4 bytes per 128 KiB block, the densest legal expansion (a 64 KiB frame holds 2 GiB).
Bytes zstdZeroFrame(std::uint64_t rawBytes);
// A frame whose header declares `declared` bytes but whose blocks hold `actual` raw bytes.
Bytes zstdLyingFrame(std::uint64_t declared, std::size_t actual);

std::string hex16(std::uint64_t v);

} // namespace kvscope::hostile
