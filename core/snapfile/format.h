// Internal: constants of the .kvsnap layout, the fixed header, and the blob table's JSON
// form. FORMAT.md is the specification; this file must agree with it.
#pragma once

#include "snapfile/blobinfo.h"

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::snapfile::format {

inline constexpr std::array<uint8_t, 8> kMagic{0x89, 'K', 'V', 'S', 'N', 'A', 'P', '\n'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderSize = 64;
// Feature bits this build understands. Version 1 defines none yet: any required bit is
// refused, any optional bit ignored.
inline constexpr uint64_t kKnownRequiredFeatures = 0;

// The fuzz build (tests/fuzz) compiles a separate copy of this library with checksums
// reported but not enforced, so that mutated inputs reach the parser and the decoder.
#ifdef KVSCOPE_FUZZING_SKIP_CHECKSUMS
inline constexpr bool kEnforceChecksums = false;
#else
inline constexpr bool kEnforceChecksums = true;
#endif

inline constexpr uint64_t kIoChunk = 1u << 20;          // read/compress granularity
inline constexpr uint32_t kMaxShuffleBlock = 64u << 20; // bounds the reader's scratch buffer
// Decompression bombs: a zstd blob may expand at most kMaxZstdRatio times (real K/V, tokens
// and logits compress 1-4x; kvscope's writer stores a blob raw rather than exceed it), except
// blobs of at most kSmallZstdBlob raw bytes (a mask of ones, repeated tokens); and all zstd
// blobs of a file together at most kZstdTotalFloor + kMaxZstdRatio x the data area. So a file
// of a few MB can never make the reader produce more than a few hundred MB.
inline constexpr uint64_t kMaxZstdRatio = 64;
inline constexpr uint64_t kSmallZstdBlob = 64u << 10;
inline constexpr uint64_t kZstdTotalFloor = 256ull << 20;
inline bool zstdExpansionAllowed(uint64_t rawBytes, uint64_t storedBytes) {
    return rawBytes <= kSmallZstdBlob || rawBytes / kMaxZstdRatio <= storedBytes;
}
inline constexpr std::size_t kMaxRank = 32;

struct Header {
    uint32_t version = kVersion;
    uint64_t requiredFeatures = 0;
    uint64_t optionalFeatures = 0;
    uint64_t manifestOffset = 0;
    uint64_t manifestSize = 0;
    uint64_t manifestChecksum = 0;
};

std::array<uint8_t, kHeaderSize> encodeHeader(const Header& h);

// Parses and checks the first `n` bytes of a file of `fileSize` bytes (n = min(64, fileSize)).
// Checks magic, version, header checksum, required features and that the manifest lies
// exactly at the end of the file and within maxManifestBytes. Throws KvError "<what>: ...".
Header decodeHeader(const uint8_t* bytes, std::size_t n, uint64_t fileSize,
                    uint64_t maxManifestBytes, const std::string& what);

nlohmann::json blobToJson(const BlobInfo& b);

// Validates the whole manifest document (the JSON text of the file) and returns its blob
// table. Every number is range-checked before anything is sized from it; blobs must tile
// [kHeaderSize, manifestOffset) in table order. Throws KvError naming `what` and the field.
std::vector<BlobInfo> parseBlobTable(const nlohmann::json& doc, const Header& h,
                                     uint64_t maxBlobBytes, const std::string& what);

// Parses JSON text with a nesting limit (deep nesting must not exhaust the stack).
nlohmann::json parseJson(const char* data, std::size_t size, const std::string& what);

} // namespace kvscope::snapfile::format
