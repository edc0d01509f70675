// Reader of .kvsnap snapshot files (layout: FORMAT.md).
//
// open() reads the 64-byte header and the JSON manifest only (cost O(manifest), independent
// of tensor sizes), verifies the header and manifest checksums, and validates the whole blob
// table: every offset, length, shape and dtype is range-checked against the file size and
// the limits below before anything is allocated from it. Blob data is read on demand:
//   - readBlob(info, dst, n): decompresses straight into the caller's buffer;
//   - readBlobChunks(info, fn): hands out the raw bytes in order, one chunk at a time;
//   - verifyAll(): checks every blob without keeping its data.
// Each blob read first checksums the stored bytes (so corruption is reported before any
// decompression), then decodes with about one chunk (1 MiB, or the blob's shuffle block) of
// scratch memory and checks the raw checksum and exact length at the end. On error the
// destination's contents are unspecified and the message names the file and the blob.
//
// The open file descriptor is kept, so a Reader keeps seeing the snapshot it opened even if
// a later save atomically replaces the file at its path.
//
// openMapped() reads through a private memory mapping of the file instead. Then a blob stored
// as is (compression "none", not shuffled: kvscope's writer stores fp32 caches so) can be
// borrowed: borrowBlob() checks its checksum over the mapped bytes and hands out the bytes in
// place, without a copy, valid as long as the mapping (mapping()) lives. As with any mapped
// file, another process truncating the file while it is mapped makes a later touch of the
// lost pages raise SIGBUS; kvscope's own saves replace files by rename and never do that.
//
// Thread-safety: a Reader is an immutable value, cheap to copy (shared state); all const
// methods may be called concurrently from several threads.
#pragma once

#include "snapfile/blobinfo.h"
#include "util/status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {
class MappedFile;
}

namespace kvscope::snapfile {

namespace detail {
class ByteSource;
}

// Bounds on what a file may make the reader allocate. rawBytes is also bounded by the zstd
// expansion rule (format.h: 64x per blob above 64 KiB, 256 MiB + 64x the data area in all),
// and readBlob(name) allocates only after the stored checksum matched.
struct ReadLimits {
    uint64_t maxBlobBytes = 1ull << 40;      // raw size of any one blob (1 TiB)
    uint64_t maxManifestBytes = 64ull << 20; // JSON manifest (64 MiB)
};

// Receives consecutive raw bytes of a blob; returning an error stops the read with it.
using ChunkFn = std::function<Status(const uint8_t* data, std::size_t size)>;

class Reader {
public:
    static Result<Reader> open(const std::string& path, ReadLimits limits = {});
    // Same checks over an in-memory copy of a file; `name` stands in for the path in errors.
    // Same checks, through a memory mapping of the file (see above).
    static Result<Reader> openMapped(const std::string& path, ReadLimits limits = {});
    static Result<Reader> openMemory(std::vector<uint8_t> bytes, std::string name = "<memory>",
                                     ReadLimits limits = {});

    const std::string& path() const;
    uint32_t formatVersion() const;
    uint64_t requiredFeatures() const;
    uint64_t optionalFeatures() const;
    uint64_t fileSize() const;
    // The caller's manifest as given to Writer::finish() (null if the file has none).
    const nlohmann::json& manifest() const;
    // The whole JSON document of the file: {"kvsnap": {...blob table...}, "manifest": ...}.
    const nlohmann::json& document() const;
    const std::vector<BlobInfo>& blobs() const;
    const BlobInfo* find(std::string_view name) const;

    // Reads blob `info.name` of this file into dst; dstBytes must equal its rawBytes.
    Status readBlob(const BlobInfo& info, void* dst, std::size_t dstBytes) const;
    Result<std::vector<uint8_t>> readBlob(std::string_view name) const;
    // Streams the raw bytes of a blob to fn in order (chunks of at most 1 MiB or the shuffle
    // block). The stored checksum is verified before the first call, the raw checksum only
    // after the last: if the final Status is an error, discard what fn received.
    Status readBlobChunks(const BlobInfo& info, const ChunkFn& fn) const;
    // Decodes one blob / every blob and checks both checksums, keeping no data.
    Status verifyBlob(const BlobInfo& info) const;
    Status verifyAll() const;

    // The file mapping of a Reader from openMapped() (null otherwise).
    std::shared_ptr<const MappedFile> mapping() const;
    // Whether borrowBlob() can hand out `info`'s bytes in place.
    bool canBorrow(const BlobInfo& info) const;
    // The raw bytes of a blob stored as is, in place in mapping(), once their checksum held
    // (one pass over them). Errors: not a mapped reader, a compressed or shuffled blob, a
    // checksum mismatch (naming the file and the blob).
    // `scan`, when given, sees every byte once, in order, right after the checksum read it
    // (chunks of kBorrowChunk bytes, still in cache), so a caller's own pass over the bytes
    // (a finiteness check) costs no second trip through memory. The checksum is known to hold
    // only once borrowBlob returns; an error from scan stops the borrow with it.
    Result<std::span<const uint8_t>> borrowBlob(const BlobInfo& info,
                                                const ChunkFn& scan = {}) const;
    static constexpr std::size_t kBorrowChunk = 256 << 10; // within a core's L2 cache

private:
    struct State;
    explicit Reader(std::shared_ptr<const State> state);
    static std::shared_ptr<const State> load(std::shared_ptr<const detail::ByteSource> src,
                                             std::string what, const ReadLimits& limits);
    const BlobInfo& own(const BlobInfo& info) const; // this file's entry with info's name
    std::shared_ptr<const State> m_state;
};

// The caller's manifest of a snapshot, without reading any tensor data.
Result<nlohmann::json> readManifest(const std::string& path, ReadLimits limits = {});

} // namespace kvscope::snapfile
