#include "formats/mappedfile.h"
#include "util/fileio.h"
#include "util/status.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvscope {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
    const int fd = openRegularFile(path); // never waits on a FIFO or device
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        throw KvError(path + ": cannot stat file: " + std::strerror(errno));
    }
    std::shared_ptr<MappedFile> map(new MappedFile);
    map->m_size = static_cast<std::size_t>(st.st_size);
    if (map->m_size > 0) {
        void* p = ::mmap(nullptr, map->m_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const std::string err = std::strerror(errno);
            ::close(fd);
            throw KvError(path + ": cannot map file: " + err);
        }
        map->m_data = static_cast<const std::uint8_t*>(p);
        map->m_mapped = true;
    }
    ::close(fd); // the mapping keeps the file referenced
    return map;
}

std::shared_ptr<const MappedFile> MappedFile::fromBytes(std::vector<std::uint8_t> bytes) {
    std::shared_ptr<MappedFile> map(new MappedFile);
    map->m_owned = std::move(bytes);
    map->m_data = map->m_owned.data();
    map->m_size = map->m_owned.size();
    return map;
}

bool MappedFile::contains(const void* p, std::size_t n) const {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return m_data && b >= m_data && n <= m_size && std::size_t(b - m_data) <= m_size - n;
}

void MappedFile::release(const void* p, std::size_t n) const {
    if (!m_mapped || !contains(p, n))
        return;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) / page * page;
    if (end > begin)
        ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
    if (m_mapped)
        ::munmap(const_cast<std::uint8_t*>(m_data), m_size);
}

} // namespace kvscope
