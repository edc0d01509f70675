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
        void* p = ::mmap(nullptr, map->m_size, PROT_READ, MAP_PRIVATE, fd, 0);
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

MappedFile::~MappedFile() {
    if (m_mapped)
        ::munmap(const_cast<std::uint8_t*>(m_data), m_size);
}

} // namespace kvscope
