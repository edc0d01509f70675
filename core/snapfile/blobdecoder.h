// Internal: random-access byte sources and the streaming blob decoder behind Reader.
#pragma once

#include "snapfile/blobinfo.h"
#include "formats/mappedfile.h"
#include "snapfile/reader.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::snapfile::detail {

// Positional reads; thread-safe (pread, or a read-only buffer). Errors throw KvError.
class ByteSource {
public:
    virtual ~ByteSource() = default;
    virtual uint64_t size() const = 0;
    // Reads exactly n bytes at offset, or throws naming `what`.
    virtual void readAt(uint64_t offset, void* dst, std::size_t n,
                        const std::string& what) const = 0;
};

class FileSource : public ByteSource {
public:
    explicit FileSource(const std::string& path); // throws KvError
    ~FileSource() override;
    uint64_t size() const override { return m_size; }
    void readAt(uint64_t offset, void* dst, std::size_t n, const std::string& what) const override;

private:
    int m_fd = -1;
    uint64_t m_size = 0;
};

class MemorySource : public ByteSource {
public:
    explicit MemorySource(std::vector<uint8_t> bytes) : m_bytes(std::move(bytes)) {}
    uint64_t size() const override { return m_bytes.size(); }
    void readAt(uint64_t offset, void* dst, std::size_t n, const std::string& what) const override;

private:
    std::vector<uint8_t> m_bytes;
};

// A file mapping (MappedFile::open, kept open): reads are copies out of it, and a blob stored
// as is can be used in place (Reader::borrowBlob).
class MappedSource : public ByteSource {
public:
    explicit MappedSource(std::shared_ptr<const MappedFile> map) : m_map(std::move(map)) {}
    uint64_t size() const override { return m_map->size(); }
    void readAt(uint64_t offset, void* dst, std::size_t n, const std::string& what) const override;
    const std::shared_ptr<const MappedFile>& mapping() const { return m_map; }

private:
    std::shared_ptr<const MappedFile> m_map;
};

// Reads the stored bytes of `b` in chunks and checks stored_xxh3. Throws on mismatch.
void verifyStored(const ByteSource& src, const BlobInfo& b, const std::string& what);

// Checks the stored checksum (unless the caller just did), then decodes blob `b` (already
// validated against the file): into dst (rawBytes long) when dst is non-null, and/or chunk
// by chunk to fn when fn is non-null. Throws KvError "<what>: blob '<name>': ..." on any
// mismatch.
void decodeBlob(const ByteSource& src, const BlobInfo& b, const std::string& what, uint8_t* dst,
                const ChunkFn* fn, bool storedVerified = false);

} // namespace kvscope::snapfile::detail
