#include "util/fileio.h"
#include "util/status.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>
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

std::vector<std::uint8_t> readFileBytes(const std::string& path, std::uint64_t maxBytes) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in)
        throw KvError(path + ": cannot open file: " + errnoText());
    const auto size = static_cast<std::uint64_t>(in.tellg());
    if (size > maxBytes)
        throw KvError(path + ": file is " + std::to_string(size) + " bytes, larger than the " +
                      std::to_string(maxBytes) + " allowed");
    std::vector<std::uint8_t> bytes(size);
    in.seekg(0);
    if (size > 0 &&
        !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
        throw KvError(path + ": read failed");
    return bytes;
}

std::string readFileText(const std::string& path, std::uint64_t maxBytes) {
    auto bytes = readFileBytes(path, maxBytes);
    return std::string(bytes.begin(), bytes.end());
}

void writeFileAtomic(const std::string& path, const void* data, std::size_t size) {
    namespace fs = std::filesystem;
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::string tmpl = (dir / ("." + target.filename().string() + ".tmpXXXXXX")).string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
        throw KvError(path + ": cannot create temporary file in " + dir.string() + ": " +
                      errnoText());
    try {
        writeAll(fd, data, size, path);
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
