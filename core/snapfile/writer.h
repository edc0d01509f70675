// Streaming, atomic writer of .kvsnap snapshot files (layout: FORMAT.md).
//
//   auto w = Writer::create("run.kvsnap");          // opens ".run.kvsnap.tmpXXXXXX" beside it
//   w.value()->addBlob("layers.0.k", DType::F16, {1, 8, 128, 64}, ptr, bytes);  // streamed out
//   w.value()->finish(ledgerJson);                  // manifest, header, fsync, rename, fsync dir
//
// Memory: each addBlob compresses straight into the temporary file through one chunk-sized
// buffer (about 1 MiB plus the zstd context), so a snapshot of any size costs about one chunk
// beyond the caller's own tensors.
//
// Atomicity: nothing appears at `path` until finish() renames the fully written, fsynced
// temporary file over it; an existing file at `path` stays intact if the process crashes or
// any step fails. A Writer destroyed without a successful finish() deletes its temporary
// file. A process killed mid-save leaves a ".<name>.tmpXXXXXX" file behind;
// removeStaleTempFiles() clears those. The path follows the one output-path policy
// (resolveOutputPath in util/fileio.h): a symlink's target is written, a folder, device node,
// FIFO or socket is refused before any temporary file is made.
//
// Errors: every method returns a Status naming the target path; after the first error the
// writer is failed, later calls return that error, and the temporary file is removed.
// Thread-safety: one Writer is used from one thread at a time; distinct Writers are independent.
#pragma once

#include "snapfile/blobinfo.h"
#include "util/status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::snapfile {

struct WriteOptions {
    bool compress = true;                  // false: blobs are stored raw ("none")
    int zstdLevel = 3;                     // ZSTD_minCLevel() .. ZSTD_maxCLevel()
    bool shuffleFloats = true;             // byte-shuffle f32/f16/bf16/f64 blobs before compressing
    uint32_t shuffleBlockBytes = 1u << 20; // shuffle block; multiple of 8, at most 64 MiB
    // Compression must pay for itself: before each blob, its first 64 KiB (shuffled like the
    // blob) are compressed as a probe, and the blob is stored raw unless the probe shrank by
    // at least this fraction. Reading a raw blob is a plain copy, reading a zstd one costs
    // a decompression pass, so near-incompressible data (fp32 activations typically save
    // ~15%) is not worth it. 0 = compress every blob when `compress` is set.
    double minSavings = 0.2;
};

class Writer {
public:
    // Creates the temporary file in the folder of `path` and writes a placeholder header.
    static Result<std::unique_ptr<Writer>> create(const std::string& path,
                                                  WriteOptions options = {});
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Appends one tensor. `data` holds `bytes` bytes in row-major order, and `bytes` must be
    // product(shape) * dtypeSize(dtype). Names must be unique, non-empty UTF-8 (at most 1024
    // bytes); dims non-negative; rank at most 32.
    Status addBlob(const std::string& name, DType dtype, std::vector<int64_t> shape,
                   const void* data, std::size_t bytes);

    // Writes `manifest` (any JSON value; stored under "manifest" beside the container's own
    // "kvsnap" table), the header, fsyncs and renames the file into place. Call once.
    Status finish(const nlohmann::json& manifest);

    const std::string& path() const;
    const std::string& tempPath() const;
    // Blobs written so far, with their offsets and checksums.
    const std::vector<BlobInfo>& blobs() const;

private:
    struct Impl;
    explicit Writer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

// Removes leftover temporary files of `path` (".<name>.tmp" + 6 characters, in its folder)
// that were last modified at least `minAge` ago: the debris of saves that were killed. A
// younger one may belong to a save in progress in another process, so the default waits an
// hour. Returns how many files were removed. Never touches `path` itself.
Result<int> removeStaleTempFiles(const std::string& path,
                                 std::chrono::seconds minAge = std::chrono::hours(1));

} // namespace kvscope::snapfile
