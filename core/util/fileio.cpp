#include "util/fileio.h"
#include "util/status.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <filesystem>
#include <unistd.h>

namespace kvscope {

namespace {
std::string errnoText() {
    return std::strerror(errno);
}

void writeAll(int fd, const void* data, std::size_t size, const std::string& path) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        ssize_t n = ::write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw KvError(path + ": write failed: " + errnoText());
        }
        p += n;
        size -= static_cast<std::size_t>(n);
    }
}
} // namespace

std::string fileKindName(unsigned mode) {
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a folder";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a regular file";
}

int openRegularFile(const std::string& path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        throw KvError(path + ": cannot open file: " + errnoText());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string err = errnoText();
        ::close(fd);
        throw KvError(path + ": cannot stat file: " + err);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw KvError(path + ": not a regular file (it is " + fileKindName(st.st_mode) + ")");
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0)
        ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

std::string readFileHead(const std::string& path, std::size_t n, std::uint64_t* fileSize) {
    const int fd = openRegularFile(path);
    struct stat st {};
    if (::fstat(fd, &st) == 0 && fileSize)
        *fileSize = static_cast<std::uint64_t>(st.st_size);
    std::string head(n, '\0');
    std::size_t done = 0;
    while (done < n) {
        const ssize_t got = ::read(fd, head.data() + done, n - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            const std::string err = errnoText();
            ::close(fd);
            throw KvError(path + ": read failed: " + err);
        }
        if (got == 0)
            break;
        done += static_cast<std::size_t>(got);
    }
    ::close(fd);
    head.resize(done);
    return head;
}

std::vector<std::uint8_t> readFileBytes(const std::string& path, std::uint64_t maxBytes) {
    const int fd = openRegularFile(path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        throw KvError(path + ": cannot stat file: " + errnoText());
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size > maxBytes) {
        ::close(fd);
        throw KvError(path + ": file is " + std::to_string(size) + " bytes, larger than the " +
                      std::to_string(maxBytes) + " allowed");
    }
    std::vector<std::uint8_t> bytes(size);
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::read(fd, bytes.data() + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const std::string err = n < 0 ? errnoText() : "the file became shorter while read";
            ::close(fd);
            throw KvError(path + ": read failed: " + err);
        }
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return bytes;
}

std::string readFileText(const std::string& path, std::uint64_t maxBytes) {
    auto bytes = readFileBytes(path, maxBytes);
    return std::string(bytes.begin(), bytes.end());
}

std::string resolveOutputPath(const std::string& path) {
    namespace fs = std::filesystem;
    if (path.empty())
        throw KvError("output path is empty");
    fs::path current(path);
    for (int hops = 0;; ++hops) {
        struct stat st {};
        if (::lstat(current.c_str(), &st) != 0) {
            if (errno != ENOENT)
                throw KvError(path + ": cannot inspect the output path: " + errnoText());
            if (current.filename().empty())
                throw KvError(path + ": not a file path");
            return current.string(); // created by the writer; its folder must exist
        }
        if (S_ISREG(st.st_mode))
            return current.string();
        if (!S_ISLNK(st.st_mode)) {
            const std::string via =
                current.string() == path ? "" : " (the link's target " + current.string() + ")";
            throw KvError(path + ": refusing to write" + via + ": it is " +
                          fileKindName(st.st_mode) + " (only a regular file is replaced)");
        }
        if (hops >= 40)
            throw KvError(path + ": refusing to write: more than 40 symbolic links to follow");
        std::error_code ec;
        const fs::path link = fs::read_symlink(current, ec);
        if (ec)
            throw KvError(path + ": cannot read the symbolic link " + current.string() + ": " +
                          ec.message());
        current = link.is_absolute() ? link : current.parent_path() / link;
    }
}

void writeFileAtomic(const std::string& requested, const void* data, std::size_t size) {
    writeFileAtomicStreamed(requested, [&](const ByteSink& sink) { sink(data, size); });
}

std::vector<std::uint8_t>
collectStreamed(const std::function<void(const ByteSink& sink)>& produce) {
    std::vector<std::uint8_t> out;
    produce([&](const void* data, std::size_t size) {
        const auto* p = static_cast<const std::uint8_t*>(data);
        out.insert(out.end(), p, p + size);
    });
    return out;
}

void writeFileAtomicStreamed(const std::string& requested,
                             const std::function<void(const ByteSink& sink)>& produce) {
    namespace fs = std::filesystem;
    const std::string path = resolveOutputPath(requested);
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::string tmpl = (dir / ("." + target.filename().string() + ".tmpXXXXXX")).string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
        throw KvError(path + ": cannot create temporary file in " + dir.string() + ": " +
                      errnoText());
    try {
        produce([&](const void* data, std::size_t size) { writeAll(fd, data, size, path); });
        if (::fsync(fd) != 0)
            throw KvError(path + ": fsync failed: " + errnoText());
        ::fchmod(fd, 0644);
    } catch (...) {
        ::close(fd);
        ::unlink(tmpl.c_str());
        throw;
    }
    ::close(fd);
    if (::rename(tmpl.c_str(), path.c_str()) != 0) {
        const std::string err = errnoText();
        ::unlink(tmpl.c_str());
        throw KvError(path + ": cannot rename temporary file into place: " + err);
    }
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void ByteReader::fail(const std::string& field, const std::string& msg) const {
    throw KvError(m_what + ": " + field + ": " + msg);
}

void ByteReader::need(std::size_t n, const char* field) const {
    if (n > m_size - m_offset)
        fail(field, "unexpected end of data at offset " + std::to_string(m_offset) + " (need " +
                        std::to_string(n) + " bytes, " + std::to_string(m_size - m_offset) +
                        " left)");
}

void ByteReader::seek(std::size_t offset, const char* field) {
    if (offset > m_size)
        fail(field, "offset " + std::to_string(offset) + " is past the end (" +
                        std::to_string(m_size) + " bytes)");
    m_offset = offset;
}

void ByteReader::skip(std::size_t n, const char* field) {
    need(n, field);
    m_offset += n;
}

std::uint8_t ByteReader::u8(const char* field) {
    need(1, field);
    return m_data[m_offset++];
}

std::uint16_t ByteReader::u16(const char* field) {
    need(2, field);
    std::uint16_t v;
    std::memcpy(&v, m_data + m_offset, 2);
    m_offset += 2;
    return v;
}

std::uint32_t ByteReader::u32(const char* field) {
    need(4, field);
    std::uint32_t v;
    std::memcpy(&v, m_data + m_offset, 4);
    m_offset += 4;
    return v;
}

std::uint64_t ByteReader::u64(const char* field) {
    need(8, field);
    std::uint64_t v;
    std::memcpy(&v, m_data + m_offset, 8);
    m_offset += 8;
    return v;
}

float ByteReader::f32(const char* field) {
    const std::uint32_t u = u32(field);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

double ByteReader::f64(const char* field) {
    const std::uint64_t u = u64(field);
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}

std::string ByteReader::bytes(std::size_t n, const char* field) {
    need(n, field);
    std::string s(reinterpret_cast<const char*>(m_data + m_offset), n);
    m_offset += n;
    return s;
}

} // namespace kvscope
