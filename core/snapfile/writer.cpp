#include "snapfile/writer.h"

#include "formats/jsonerror.h"
#include "snapfile/format.h"
#include "snapfile/shuffle.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zstd.h>

#ifndef KVSCOPE_VERSION_STRING
#define KVSCOPE_VERSION_STRING "unknown"
#endif

namespace kvscope::snapfile {

namespace {
std::string errnoText() {
    return std::strerror(errno);
}
} // namespace

struct Writer::Impl {
    std::string path;
    std::string tmpPath;
    std::string dir;
    WriteOptions options;
    int fd = -1;
    ZSTD_CCtx* cctx = nullptr;
    uint64_t offset = format::kHeaderSize;
    std::vector<BlobInfo> blobs;
    std::set<std::string> names;
    std::vector<uint8_t> outBuf;            // zstd output, flushed to the file as it fills
    std::vector<uint8_t> shuffleBuf;        // one shuffled block
    std::vector<uint8_t> probeIn, probeOut; // the compression probe (probeSaves)
    std::string error;                      // set once failed
    bool finished = false;

    ~Impl() {
        if (cctx)
            ZSTD_freeCCtx(cctx);
        discard();
    }

    void discard() {
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
        if (!finished && !tmpPath.empty())
            ::unlink(tmpPath.c_str());
    }

    [[noreturn]] void fail(const std::string& msg) const { throw KvError(path + ": " + msg); }

    // Output goes to the file in whole, 2 MiB-aligned windows of file offsets: bytes short of
    // the next window boundary wait in `stage` (file range [written, offset)), and each write()
    // covers whole windows, from the stage and straight from the caller's memory (writev, no
    // copy). Kernels whose page cache holds large folios (ext4 from Linux 6.16, XFS) then keep
    // the file in 2 MiB folios, which a reader's map gets as huge pages: load() checksums a
    // snapshot written this way at several times the speed of one written in arbitrary pieces,
    // and a cache used in place from the map needs far fewer TLB entries. Elsewhere it changes
    // nothing but a copy of at most 2 MiB per blob tail.
    static constexpr uint64_t kWindow = 2u << 20;
    std::vector<uint8_t> stage;
    uint64_t written = 0;       // file bytes handed to the kernel (a window boundary until flush)
    uint64_t writebackFrom = 0; // start of the range not yet given to startWriteback()

    void writeAll(const void* data, std::size_t size, Hasher* hasher) {
        if (hasher)
            hasher->update(data, size);
        const auto* p = static_cast<const uint8_t*>(data);
        const uint64_t end = offset + size;
        const uint64_t boundary = end - end % kWindow;
        if (boundary <= written) { // still short of the next boundary
            stage.insert(stage.end(), p, p + size);
            offset = end;
            return;
        }
        const std::size_t direct = static_cast<std::size_t>(boundary - offset);
        writeOut(p, direct);
        stage.assign(p + direct, p + size);
        offset = end;
    }

    // Writes the stage and then `n` bytes from `p` at file offset `written`.
    void writeOut(const uint8_t* p, std::size_t n) {
        iovec iov[2] = {{stage.data(), stage.size()}, {const_cast<uint8_t*>(p), n}};
        iovec* v = iov;
        int count = 2;
        for (std::size_t done = 0;;) {
            while (count > 0 && done >= v->iov_len) { // skip what is written (or empty)
                done -= v->iov_len;
                ++v;
                --count;
            }
            if (count == 0)
                break;
            v->iov_base = static_cast<uint8_t*>(v->iov_base) + done;
            v->iov_len -= done;
            const ssize_t got = ::writev(fd, v, count);
            if (got < 0) {
                if (errno == EINTR) {
                    done = 0;
                    continue;
                }
                fail("write to " + tmpPath + " failed: " + errnoText());
            }
            written += static_cast<uint64_t>(got);
            done = static_cast<std::size_t>(got);
        }
        stage.clear();
    }

    // Writes what waits in the stage (the file's last, partial window).
    void flush() { writeOut(nullptr, 0); }

    // Drops everything after file offset `to` (< offset), so that writing goes on from there.
    void rewindTo(uint64_t to) {
        if (to >= written) {
            stage.resize(static_cast<std::size_t>(to - written));
        } else {
            // Back into bytes already written: the window that holds `to` becomes the stage.
            const uint64_t start = to - to % kWindow;
            stage.resize(static_cast<std::size_t>(to - start));
            if (!stage.empty() &&
                ::pread(fd, stage.data(), stage.size(), static_cast<off_t>(start)) !=
                    static_cast<ssize_t>(stage.size()))
                fail("rereading " + tmpPath + " failed: " + errnoText());
            if (::ftruncate(fd, static_cast<off_t>(start)) != 0 ||
                ::lseek(fd, static_cast<off_t>(start), SEEK_SET) < 0)
                fail("rewinding " + tmpPath + " failed: " + errnoText());
            written = start;
            writebackFrom = std::min(writebackFrom, start);
        }
        offset = to;
    }

    // Feeds one piece of (possibly shuffled) input to the zstd stream and writes what comes out.
    void compressPiece(const uint8_t* data, std::size_t size, bool last, Hasher& stored) {
        ZSTD_inBuffer in{data, size, 0};
        const ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
        for (;;) {
            ZSTD_outBuffer out{outBuf.data(), outBuf.size(), 0};
            const std::size_t r = ZSTD_compressStream2(cctx, &out, &in, mode);
            if (ZSTD_isError(r))
                fail(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
            writeAll(outBuf.data(), out.pos, &stored);
            if (last ? r == 0 : in.pos == in.size)
                return;
        }
    }

    // Whether zstd shrinks the first kProbeBytes of `data` (shuffled with element size
    // `shuffleElem`, 0 = not shuffled) by at least options.minSavings.
    bool probeSaves(const uint8_t* data, std::size_t bytes, std::size_t shuffleElem) {
        constexpr std::size_t kProbeBytes = 64 * 1024;
        std::size_t n = std::min(bytes, kProbeBytes);
        if (shuffleElem > 1)
            n -= n % shuffleElem;
        if (n == 0)
            return true;
        const uint8_t* src = data;
        if (shuffleElem > 1) {
            probeIn.resize(n);
            shuffleBytes(data, probeIn.data(), n, shuffleElem);
            src = probeIn.data();
        }
        probeOut.resize(ZSTD_compressBound(n));
        // One-shot at the blob's level; the streaming path below sets its own parameters.
        const std::size_t c =
            ZSTD_compressCCtx(cctx, probeOut.data(), probeOut.size(), src, n, options.zstdLevel);
        if (ZSTD_isError(c))
            return true; // let the real compression report the problem
        return static_cast<double>(c) <= (1.0 - options.minSavings) * static_cast<double>(n);
    }

    void addBlob(BlobInfo& b, const uint8_t* data) {
        Hasher stored;
        const std::size_t n = b.rawBytes;
        Hasher raw;
        if (b.compression == Compression::None) {
            // Stored as is: one pass, each window's worth hashed and then written while it is
            // in cache; the stored checksum is the raw one.
            for (std::size_t done = 0; done < n;) {
                const std::size_t len = std::min<std::size_t>(kWindow - offset % kWindow, n - done);
                writeAll(data + done, len, &raw);
                done += len;
            }
            b.storedBytes = offset - b.offset;
            b.rawChecksum = b.storedChecksum = raw.digest();
            startWriteback();
            return;
        } else {
            ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options.zstdLevel);
            // Pledging the size puts it in the frame header: one-shot decoders (python
            // zstandard) need it, and the frame is then self-checking on length.
            ZSTD_CCtx_setPledgedSrcSize(cctx, n);
            const std::size_t piece = b.shuffled() ? b.shuffleBlock : format::kIoChunk;
            const std::size_t es = dtypeSize(b.dtype);
            std::size_t done = 0;
            do {
                const std::size_t len = std::min(piece, n - done);
                const uint8_t* src = data + done;
                raw.update(src, len);
                if (b.shuffled()) {
                    shuffleBytes(src, shuffleBuf.data(), len, es);
                    src = shuffleBuf.data();
                }
                compressPiece(src, len, done + len == n, stored);
                done += len;
            } while (done < n);
        }
        b.storedBytes = offset - b.offset;
        b.storedChecksum = stored.digest();
        b.rawChecksum = raw.digest();
        if (!format::zstdExpansionAllowed(b.rawBytes, b.storedBytes)) {
            // Compresses better than readers accept from a stranger (a layer of zeros): store
            // it raw instead, so that every file this writer makes can be read back.
            rewindTo(b.offset);
            b.compression = Compression::None;
            b.shuffleBlock = 0;
            writeAll(data, n, nullptr);
            b.storedBytes = offset - b.offset;
            b.storedChecksum = b.rawChecksum;
        }
        startWriteback();
    }

    // Asks the kernel to start writing what it has of the file to disk now, without waiting:
    // the device works while the next blob is hashed and copied, and the fsync in finish()
    // only waits for what is still in flight. Advice only (finish() still fsyncs everything).
    void startWriteback() {
#ifdef SYNC_FILE_RANGE_WRITE
        if (written > writebackFrom)
            (void)::sync_file_range(fd, static_cast<off_t>(writebackFrom),
                                    static_cast<off_t>(written - writebackFrom),
                                    SYNC_FILE_RANGE_WRITE);
#endif
        writebackFrom = written;
    }
};

Writer::Writer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Writer::~Writer() = default;

const std::string& Writer::path() const {
    return m_impl->path;
}
const std::string& Writer::tempPath() const {
    return m_impl->tmpPath;
}
const std::vector<BlobInfo>& Writer::blobs() const {
    return m_impl->blobs;
}

Result<std::unique_ptr<Writer>> Writer::create(const std::string& path, WriteOptions options) {
    return catchToResult([&]() -> std::unique_ptr<Writer> {
        namespace fs = std::filesystem;
        if (options.compress &&
            (options.zstdLevel < ZSTD_minCLevel() || options.zstdLevel > ZSTD_maxCLevel()))
            throw KvError(path + ": zstd level " + std::to_string(options.zstdLevel) +
                          " is outside " + std::to_string(ZSTD_minCLevel()) + ".." +
                          std::to_string(ZSTD_maxCLevel()));
        if (options.shuffleBlockBytes == 0 || options.shuffleBlockBytes % 8 != 0 ||
            options.shuffleBlockBytes > format::kMaxShuffleBlock)
            throw KvError(path + ": shuffle block of " + std::to_string(options.shuffleBlockBytes) +
                          " bytes is not a positive multiple of 8 up to 64 MiB");
        auto impl = std::make_unique<Impl>();
        impl->path = resolveOutputPath(path); // a symlink's target; devices, FIFOs refused
        impl->options = options;
        const fs::path target(impl->path);
        if (target.filename().empty())
            throw KvError(path + ": not a file path");
        impl->dir = target.has_parent_path() ? target.parent_path().string() : ".";
        std::string tmpl =
            (fs::path(impl->dir) / ("." + target.filename().string() + ".tmpXXXXXX")).string();
        const int fd = ::mkstemp(tmpl.data());
        if (fd < 0)
            throw KvError(path + ": cannot create a temporary file in " + impl->dir + ": " +
                          errnoText());
        impl->fd = fd;
        impl->tmpPath = tmpl;
        if (options.compress) {
            impl->cctx = ZSTD_createCCtx();
            if (!impl->cctx)
                throw KvError(path + ": cannot create a zstd context");
            impl->outBuf.resize(ZSTD_CStreamOutSize());
        }
        // A zeroed header until finish(): a file cut short is never mistaken for a snapshot.
        const uint8_t zeros[format::kHeaderSize] = {};
        impl->offset = 0;
        impl->writeAll(zeros, sizeof zeros, nullptr);
        return std::unique_ptr<Writer>(new Writer(std::move(impl)));
    });
}

Status Writer::addBlob(const std::string& name, DType dtype, std::vector<int64_t> shape,
                       const void* data, std::size_t bytes) {
    Impl& d = *m_impl;
    if (!d.error.empty())
        return Status::error(d.error);
    if (d.finished)
        return Status::error(d.path + ": addBlob after finish()");
    // Argument errors are the caller's and leave the writer usable.
    const std::string ctx = d.path + ": blob '" + name + "': ";
    if (name.empty() || name.size() > 1024)
        return Status::error(ctx + "name must be 1..1024 bytes");
    try {
        (void)nlohmann::json(name).dump(); // throws on invalid UTF-8
    } catch (const nlohmann::json::exception&) {
        return Status::error(ctx + "name is not valid UTF-8");
    }
    if (d.names.count(name))
        return Status::error(ctx + "duplicate blob name");
    if (shape.size() > format::kMaxRank)
        return Status::error(ctx + "rank " + std::to_string(shape.size()) + " exceeds 32");
    uint64_t elements = 1;
    for (int64_t dim : shape) {
        if (dim < 0 || __builtin_mul_overflow(elements, uint64_t(dim), &elements))
            return Status::error(ctx + "invalid shape dimension " + std::to_string(dim));
    }
    uint64_t expect = 0;
    if (__builtin_mul_overflow(elements, dtypeSize(dtype), &expect) || expect != bytes)
        return Status::error(ctx + "got " + std::to_string(bytes) + " bytes, shape × " +
                             dtypeName(dtype) + " needs " + std::to_string(expect));
    if (bytes > 0 && !data)
        return Status::error(ctx + "data is null");

    BlobInfo b;
    b.name = name;
    b.dtype = dtype;
    b.shape = std::move(shape);
    b.rawBytes = bytes;
    b.offset = d.offset;
    const bool shuffle = d.options.shuffleFloats && isFloat(dtype);
    try {
        const bool compress =
            d.options.compress &&
            (d.options.minSavings <= 0 || d.probeSaves(static_cast<const uint8_t*>(data), bytes,
                                                       shuffle ? dtypeSize(dtype) : 0));
        b.compression = compress ? Compression::Zstd : Compression::None;
        if (compress && shuffle)
            b.shuffleBlock = d.options.shuffleBlockBytes;
        if (b.shuffled() && d.shuffleBuf.size() < std::min<uint64_t>(b.shuffleBlock, bytes))
            d.shuffleBuf.resize(b.shuffleBlock);
        d.addBlob(b, static_cast<const uint8_t*>(data));
    } catch (const std::exception& e) {
        d.error = e.what();
        d.discard();
        return Status::error(d.error);
    }
    d.names.insert(name);
    d.blobs.push_back(std::move(b));
    return Status::ok();
}

Status Writer::finish(const nlohmann::json& manifest) {
    Impl& d = *m_impl;
    if (!d.error.empty())
        return Status::error(d.error);
    if (d.finished)
        return Status::error(d.path + ": finish() called twice");
    Status st = catchToStatus([&] {
        nlohmann::json table = nlohmann::json::array();
        for (const auto& b : d.blobs)
            table.push_back(format::blobToJson(b));
        const nlohmann::json doc = {
            {"kvsnap",
             {{"format_version", format::kVersion},
              {"writer", std::string("kvscope ") + KVSCOPE_VERSION_STRING},
              {"blobs", std::move(table)}}},
            {"manifest", manifest},
        };
        std::string text;
        try {
            text = doc.dump(1, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
        } catch (const nlohmann::json::exception& e) {
            d.fail("manifest cannot be written as JSON: " + describeJsonError(e));
        }
        format::Header h;
        h.manifestOffset = d.offset;
        h.manifestSize = text.size();
        h.manifestChecksum = hash64(text.data(), text.size());
        d.writeAll(text.data(), text.size(), nullptr);
        d.flush();
        const auto header = format::encodeHeader(h);
        if (::pwrite(d.fd, header.data(), header.size(), 0) != ssize_t(header.size()))
            d.fail("writing the header of " + d.tmpPath + " failed: " + errnoText());
        if (::fsync(d.fd) != 0)
            d.fail("fsync of " + d.tmpPath + " failed: " + errnoText());
        ::fchmod(d.fd, 0644);
        if (::close(d.fd) != 0) {
            d.fd = -1;
            d.fail("closing " + d.tmpPath + " failed: " + errnoText());
        }
        d.fd = -1;
        if (::rename(d.tmpPath.c_str(), d.path.c_str()) != 0)
            d.fail("cannot rename " + d.tmpPath + " into place: " + errnoText());
        d.finished = true;
        // The rename is durable only once the folder entry is on disk.
        const int dfd = ::open(d.dir.c_str(), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            ::fsync(dfd);
            ::close(dfd);
        }
    });
    if (!st) {
        d.error = st.message();
        d.discard();
    }
    return st;
}

} // namespace kvscope::snapfile
