#include "snapfile/blobdecoder.h"

#include "snapfile/format.h"
#include "snapfile/shuffle.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

namespace kvscope::snapfile::detail {

FileSource::FileSource(const std::string& path) {
    m_fd = openRegularFile(path); // never waits on a FIFO or device
    struct stat st {};
    if (::fstat(m_fd, &st) != 0) {
        ::close(m_fd);
        throw KvError(path + ": cannot stat file: " + std::strerror(errno));
    }
    m_size = static_cast<uint64_t>(st.st_size);
}

FileSource::~FileSource() {
    if (m_fd >= 0)
        ::close(m_fd);
}

void FileSource::readAt(uint64_t offset, void* dst, std::size_t n, const std::string& what) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
        const ssize_t got = ::pread(m_fd, p, n, static_cast<off_t>(offset));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            throw KvError(what + ": read at offset " + std::to_string(offset) +
                          " failed: " + std::strerror(errno));
        if (got == 0)
            throw KvError(what + ": unexpected end of file at offset " + std::to_string(offset) +
                          " (was the file truncated while open?)");
        p += got;
        n -= static_cast<std::size_t>(got);
        offset += static_cast<uint64_t>(got);
    }
}

void MemorySource::readAt(uint64_t offset, void* dst, std::size_t n,
                          const std::string& what) const {
    if (offset > m_bytes.size() || n > m_bytes.size() - offset)
        throw KvError(what + ": read of " + std::to_string(n) + " bytes at offset " +
                      std::to_string(offset) + " is past the end");
    if (n)
        std::memcpy(dst, m_bytes.data() + offset, n);
}

void MappedSource::readAt(uint64_t offset, void* dst, std::size_t n,
                          const std::string& what) const {
    if (offset > m_map->size() || n > m_map->size() - offset)
        throw KvError(what + ": read of " + std::to_string(n) + " bytes at offset " +
                      std::to_string(offset) + " is past the end");
    if (n)
        std::memcpy(dst, m_map->data() + offset, n);
}

namespace {

// Produces the (possibly shuffled) decoded byte stream of one blob, n bytes at a time.
class Producer {
public:
    // `stored`, when given, is fed every stored byte as it is read (single-pass checking).
    Producer(const ByteSource& src, const BlobInfo& b, const std::string& ctx, Hasher* stored)
        : m_src(src), m_b(b), m_ctx(ctx), m_pos(b.offset), m_end(b.offset + b.storedBytes),
          m_stored(stored) {
        if (b.compression == Compression::Zstd) {
            m_dctx = ZSTD_createDCtx();
            if (!m_dctx)
                fail("cannot create a zstd context");
            // Bounds the decoder's window buffer whatever the frame header claims.
            ZSTD_DCtx_setParameter(m_dctx, ZSTD_d_windowLogMax, 27);
            m_in.resize(std::min<uint64_t>(format::kIoChunk, b.storedBytes));
        }
    }
    ~Producer() {
        if (m_dctx)
            ZSTD_freeDCtx(m_dctx);
    }
    Producer(const Producer&) = delete;
    Producer& operator=(const Producer&) = delete;

    // Fills out[0, n) completely or throws.
    void produce(uint8_t* out, std::size_t n) {
        if (!m_dctx) {
            m_src.readAt(m_pos, out, n, m_ctx);
            if (m_stored)
                m_stored->update(out, n);
            m_pos += n;
            return;
        }
        ZSTD_outBuffer ob{out, n, 0};
        while (ob.pos < ob.size) {
            refillIfEmpty("the zstd frame ends before raw_bytes were produced");
            const std::size_t r = ZSTD_decompressStream(m_dctx, &ob, &m_inBuf);
            if (ZSTD_isError(r))
                fail(std::string("zstd: ") + ZSTD_getErrorName(r));
            m_lastRet = r;
            if (r == 0 && ob.pos < ob.size)
                fail("the zstd frame holds fewer bytes than raw_bytes = " +
                     std::to_string(m_b.rawBytes));
        }
    }

    // After raw_bytes were produced: the frame must end here and use every stored byte.
    void finish() {
        if (!m_dctx)
            return;
        uint8_t extra = 0;
        while (m_lastRet != 0) {
            refillIfEmpty("the zstd frame is incomplete");
            ZSTD_outBuffer ob{&extra, 1, 0};
            const std::size_t r = ZSTD_decompressStream(m_dctx, &ob, &m_inBuf);
            if (ZSTD_isError(r))
                fail(std::string("zstd: ") + ZSTD_getErrorName(r));
            if (ob.pos != 0)
                fail("the zstd frame holds more bytes than raw_bytes = " +
                     std::to_string(m_b.rawBytes));
            m_lastRet = r;
        }
        if (m_inBuf.pos != m_inBuf.size || m_pos != m_end)
            fail("stored bytes continue after the end of the zstd frame");
    }

private:
    [[noreturn]] void fail(const std::string& msg) const { throw KvError(m_ctx + ": " + msg); }

    void refillIfEmpty(const char* whenExhausted) {
        if (m_inBuf.pos < m_inBuf.size)
            return;
        if (m_pos == m_end)
            fail(whenExhausted);
        const std::size_t n =
            static_cast<std::size_t>(std::min<uint64_t>(m_in.size(), m_end - m_pos));
        m_src.readAt(m_pos, m_in.data(), n, m_ctx);
        if (m_stored)
            m_stored->update(m_in.data(), n);
        m_pos += n;
        m_inBuf = ZSTD_inBuffer{m_in.data(), n, 0};
    }

    const ByteSource& m_src;
    const BlobInfo& m_b;
    const std::string& m_ctx;
    uint64_t m_pos;
    uint64_t m_end;
    ZSTD_DCtx* m_dctx = nullptr;
    std::vector<uint8_t> m_in;
    ZSTD_inBuffer m_inBuf{nullptr, 0, 0};
    std::size_t m_lastRet = 1; // nonzero: frame not finished
    Hasher* m_stored = nullptr;
};

} // namespace

void verifyStored(const ByteSource& src, const BlobInfo& b, const std::string& what) {
    const std::string ctx = what + ": blob '" + b.name + "'";
    std::vector<uint8_t> buf(std::min<uint64_t>(format::kIoChunk, b.storedBytes));
    Hasher h;
    for (uint64_t pos = 0; pos < b.storedBytes;) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<uint64_t>(buf.size(), b.storedBytes - pos));
        src.readAt(b.offset + pos, buf.data(), n, ctx);
        h.update(buf.data(), n);
        pos += n;
    }
    if (format::kEnforceChecksums && h.digest() != b.storedChecksum)
        throw KvError(ctx + ": stored data checksum mismatch (file is corrupt): expected " +
                      hex64(b.storedChecksum) + ", got " + hex64(h.digest()));
}

void decodeBlob(const ByteSource& src, const BlobInfo& b, const std::string& what, uint8_t* dst,
                const ChunkFn* fn, bool storedVerified) {
    const std::string ctx = what + ": blob '" + b.name + "'";
    // A callback must only ever see bytes whose stored checksum held, so with one the stored
    // bytes are checked in a pass of their own first. Without one (decoding into memory or
    // just verifying), the stored checksum is computed while decoding — one read of the file
    // instead of two — and checked before returning; on a mismatch dst holds garbage and the
    // call fails, as it does for any other error.
    const bool singlePass = !fn && !storedVerified;
    if (fn && !storedVerified)
        verifyStored(src, b, what);

    Hasher stored;
    Producer producer(src, b, ctx, singlePass ? &stored : nullptr);
    // Stored as is (no compression, no shuffle): the raw bytes are the stored bytes, so one
    // hash serves both checksums.
    const bool identity = b.compression == Compression::None && !b.shuffled();
    const bool hashRaw = !(singlePass && identity);
    Hasher raw;
    const uint64_t total = b.rawBytes;
    const std::size_t es = dtypeSize(b.dtype);
    const uint64_t piece = b.shuffled() ? b.shuffleBlock : format::kIoChunk;
    // Scratch only when the bytes cannot go straight to dst: one block before unshuffling,
    // and one after it when there is no dst to unshuffle into.
    std::vector<uint8_t> decoded, unshuffled;
    if (b.shuffled() || !dst)
        decoded.resize(std::min(piece, total));
    if (b.shuffled() && !dst)
        unshuffled.resize(decoded.size());

    try {
        for (uint64_t done = 0; done < total;) {
            const std::size_t n = static_cast<std::size_t>(std::min(piece, total - done));
            uint8_t* rawOut =
                dst ? dst + done : (b.shuffled() ? unshuffled.data() : decoded.data());
            if (b.shuffled()) {
                producer.produce(decoded.data(), n);
                unshuffleBytes(decoded.data(), rawOut, n, es);
            } else {
                producer.produce(rawOut, n);
            }
            if (hashRaw)
                raw.update(rawOut, n);
            if (fn) {
                const Status st = (*fn)(rawOut, n);
                if (!st)
                    throw KvError(st.message());
            }
            done += n;
        }
        producer.finish();
    } catch (const KvError&) {
        // Damaged stored bytes usually surface as a zstd or size error first; name the real
        // cause (the stored checksum) when that is what failed.
        if (singlePass)
            verifyStored(src, b, what);
        throw;
    }
    if (singlePass && format::kEnforceChecksums && stored.digest() != b.storedChecksum)
        throw KvError(ctx + ": stored data checksum mismatch (file is corrupt): expected " +
                      hex64(b.storedChecksum) + ", got " + hex64(stored.digest()));
    const uint64_t rawDigest = hashRaw ? raw.digest() : stored.digest();
    if (format::kEnforceChecksums && rawDigest != b.rawChecksum)
        throw KvError(ctx + ": raw data checksum mismatch: expected " + hex64(b.rawChecksum) +
                      ", got " + hex64(rawDigest));
}

} // namespace kvscope::snapfile::detail
