#include "formats/mappedfile.h"
#include "util/fileio.h"
#include "util/status.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvscope {

namespace {

// --- The lease guard (see the header). Each guarded mapping holds a slot: the file's fd (the
// base mapping's, for mapAgain()), its address and size. The signal handler finds the slots of
// the fd whose lease is being broken, copies each one out and releases the lease. The handler
// may run on any thread, at any time: it touches only the slots (atomics), mmap, mremap, memcpy
// and fcntl, and a slot is never freed while the handler copies it.

enum SlotState : int { kFree, kClaimed, kActive, kCopying, kCopied };

struct GuardSlot {
    std::atomic<int> state{kFree};
    int fd = -1;
    std::uint8_t* addr = nullptr;
    std::size_t size = 0;
    const char* path = nullptr; // the owner's m_path: for the one message the handler may write
};

constexpr int kGuardSlots = 4096;
GuardSlot g_slots[kGuardSlots];
// Handlers begun and finished (mapAgain waits for a running one).
std::atomic<unsigned> g_breaksBegun{0}, g_breaksDone{0};

// A real-time signal: queued one per lease break, each with the fd (si_fd) it is about.
int leaseSignal() {
    return SIGRTMIN + 6;
}

// Replaces [addr, addr + size) with an anonymous copy of its current bytes, at the same
// addresses. A write another thread makes to the range while it is copied is lost; kvscope writes
// a mapped range only through surgery on a restored cache, and copies it out first when it grows.
// A new anonymous private mapping holding a copy of [src, src + size); nullptr when out of memory.
void* anonymousCopy(const void* src, std::size_t size) noexcept {
    void* copy = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED)
        return nullptr;
    std::memcpy(copy, src, size);
    return copy;
}

bool copyInPlace(std::uint8_t* addr, std::size_t size) noexcept {
    void* copy = anonymousCopy(addr, size);
    if (!copy)
        return false;
    if (::mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, addr) == MAP_FAILED) {
        ::munmap(copy, size);
        return false;
    }
    return true;
}

void writeStderr(const char* text) noexcept {
    const std::size_t n = std::strlen(text);
    for (std::size_t done = 0; done < n;) {
        const ssize_t w = ::write(2, text + done, n - done);
        if (w <= 0)
            return;
        done += static_cast<std::size_t>(w);
    }
}

// Copies out `slot` if it is an active mapping of `fd` (the handler, and mapAgain() for a slot
// claimed while a lease was being broken).
void copyOut(GuardSlot& slot, int fd) noexcept {
    int expected = kActive;
    if (slot.state.load(std::memory_order_acquire) != kActive || slot.fd != fd ||
        !slot.state.compare_exchange_strong(expected, kCopying, std::memory_order_acq_rel))
        return;
    if (slot.fd != fd) { // the slot was freed and taken again between the checks
        slot.state.store(kActive, std::memory_order_release);
        return;
    }
    if (copyInPlace(slot.addr, slot.size)) {
        slot.state.store(kCopied, std::memory_order_release);
        return;
    }
    writeStderr("kvscope: ");
    writeStderr(slot.path);
    writeStderr(": the file is being changed by another process and its bytes could not be "
                "copied out of the mapping (out of memory); reading them now may crash\n");
    slot.state.store(kActive, std::memory_order_release);
}

void onLeaseBreak(int, siginfo_t* info, void*) {
    const int savedErrno = errno;
    g_breaksBegun.fetch_add(1);
    const int fd = info->si_fd;
    for (auto& slot : g_slots)
        copyOut(slot, fd);
    ::fcntl(fd, F_SETLEASE, F_UNLCK); // the writer goes on
    g_breaksDone.fetch_add(1);
    errno = savedErrno;
}

// Installs the handler once. False when the signal already has another handler: then no file is
// leased (a break would go to someone else).
bool guardInstalled() {
    static const bool installed = [] {
        struct sigaction old {};
        if (::sigaction(leaseSignal(), nullptr, &old) != 0)
            return false;
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
            return false;
        struct sigaction sa {};
        sa.sa_sigaction = onLeaseBreak;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        return ::sigaction(leaseSignal(), &sa, nullptr) == 0;
    }();
    return installed;
}

// A slot for [addr, addr + size) of `fd`, active; -1 when every slot is taken.
int claimSlot(int fd, const std::uint8_t* addr, std::size_t size, const std::string& path,
              SlotState state) {
    for (int i = 0; i < kGuardSlots; ++i) {
        int expected = kFree;
        if (!g_slots[i].state.compare_exchange_strong(expected, kClaimed,
                                                      std::memory_order_acq_rel))
            continue;
        g_slots[i].fd = fd;
        g_slots[i].addr = const_cast<std::uint8_t*>(addr);
        g_slots[i].size = size;
        g_slots[i].path = path.c_str();
        g_slots[i].state.store(state, std::memory_order_release);
        return i;
    }
    return -1;
}

// Frees a slot, waiting out a copy in progress on another thread.
void freeSlot(int i) {
    for (;;) {
        int s = g_slots[i].state.load(std::memory_order_acquire);
        if (s == kCopying) {
            ::sched_yield();
            continue;
        }
        if (g_slots[i].state.compare_exchange_weak(s, kFree, std::memory_order_acq_rel))
            return;
    }
}

// A copy-on-write mapping of the whole open file `fd` (`size` bytes); throws naming `path`.
const std::uint8_t* mapPrivate(int fd, std::size_t size, const std::string& path) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        throw KvError(path + ": cannot map file: " + std::strerror(errno));
    // Advice, ignored where transparent huge pages are off: where the page cache keeps large
    // folios (ext4 from Linux 6.16, XFS), pages first read through this map come in 2 MiB
    // folios and are mapped as huge pages. Ordinary read-ahead ramps its folio size up and
    // leaves some of the file in smaller folios, which the 2-core development machine
    // read at a fraction of the speed: one pass over the 418 MB 12x768 checkpoint ran at 16 GB/s
    // after ordinary read-ahead and at 32 GB/s after read-ahead through this advice (decode +7%).
    // Pages already cached stay as they were read.
    (void)::madvise(p, size, MADV_HUGEPAGE);
    return static_cast<const std::uint8_t*>(p);
}

} // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, bool keepOpen) {
    const int fd = openRegularFile(path); // never waits on a FIFO or device
    std::shared_ptr<MappedFile> map(new MappedFile);
    map->m_path = path;
    map->m_fd = fd; // closed by the destructor, or below when neither kept nor leased
    map->m_keepOpen = keepOpen;
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        throw KvError(path + ": cannot stat file: " + std::strerror(errno));
    map->m_size = static_cast<std::size_t>(st.st_size);
    if (map->m_size == 0) {
        if (!keepOpen) {
            ::close(fd);
            map->m_fd = -1;
        }
        return map;
    }
    map->m_data = mapPrivate(fd, map->m_size, path);
    map->m_mapped = true;
    // The slot before the lease, so that a break right after the lease finds the mapping; the
    // size read again after it, so that the guarded mapping is the file's size.
    bool copyNow = false;
    if (guardInstalled())
        map->m_guard = claimSlot(fd, map->m_data, map->m_size, map->m_path, kActive);
    if (map->m_guard >= 0) {
        const bool leased =
            ::fcntl(fd, F_SETSIG, leaseSignal()) == 0 && ::fcntl(fd, F_SETLEASE, F_RDLCK) == 0;
        if (leased) {
            if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != map->m_size)
                throw KvError(path + ": the file changed while it was opened (another process "
                                     "is writing it)");
        } else {
            copyNow = errno == EAGAIN || errno == EWOULDBLOCK; // open for writing somewhere
            freeSlot(map->m_guard);
            map->m_guard = -1;
        }
    }
    if (copyNow) {
        // Read into place rather than copied from the mapping: a writer that truncates the file
        // meanwhile shortens the read instead of raising SIGBUS.
        // MAP_FIXED replaces the file mapping in one step (no hole another thread could map).
        auto* bytes = const_cast<std::uint8_t*>(map->m_data);
        if (::mmap(bytes, map->m_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            throw KvError(path + ": cannot allocate a copy: " + std::strerror(errno));
        std::size_t done = 0;
        while (done < map->m_size) {
            const ssize_t got =
                ::pread(fd, bytes + done, map->m_size - done, static_cast<off_t>(done));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                throw KvError(path + ": the file changed while it was read (another process is "
                                     "writing it)");
            done += static_cast<std::size_t>(got);
        }
        map->m_guard = claimSlot(-1, map->m_data, map->m_size, map->m_path, kCopied);
    }
    if (!keepOpen && map->m_guard < 0) {
        ::close(fd); // the mapping keeps the file referenced
        map->m_fd = -1;
    }
    return map;
}

std::shared_ptr<const MappedFile> MappedFile::mapAgain() const {
    if (!m_keepOpen || m_fd < 0)
        throw KvError(m_path + ": cannot map the file again (it was not kept open)");
    std::shared_ptr<MappedFile> map(new MappedFile);
    map->m_path = m_path;
    map->m_size = m_size;
    map->m_base = shared_from_this(); // its fd and lease
    if (m_size == 0)
        return map;
    if (detached()) { // the file is no longer these bytes: a copy of them
        void* p = anonymousCopy(m_data, m_size);
        if (!p)
            throw KvError(m_path + ": cannot map a copy: " + std::strerror(errno));
        map->m_data = static_cast<const std::uint8_t*>(p);
        map->m_mapped = true;
        map->m_guard = claimSlot(-1, map->m_data, m_size, map->m_path, kCopied);
        return map;
    }
    map->m_data = mapPrivate(m_fd, m_size, m_path);
    map->m_mapped = true;
    if (m_guard >= 0) {
        map->m_guard = claimSlot(m_fd, map->m_data, m_size, map->m_path, kActive);
        // The lease may have been broken between detached() above and the claim: the handler
        // then never saw this slot. Once no handler is running, copy it out here.
        while (g_breaksBegun.load() != g_breaksDone.load())
            ::sched_yield();
        if (map->m_guard >= 0 && detached())
            copyOut(g_slots[map->m_guard], m_fd);
    }
    return map;
}

std::shared_ptr<const MappedFile> MappedFile::fromBytes(std::vector<std::uint8_t> bytes) {
    std::shared_ptr<MappedFile> map(new MappedFile);
    map->m_owned = std::move(bytes);
    map->m_data = map->m_owned.data();
    map->m_size = map->m_owned.size();
    return map;
}

bool MappedFile::guarded() const {
    return m_guard >= 0;
}

bool MappedFile::detached() const {
    return m_guard >= 0 && g_slots[m_guard].state.load(std::memory_order_acquire) == kCopied;
}

bool MappedFile::contains(const void* p, std::size_t n) const {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return m_data && b >= m_data && n <= m_size && std::size_t(b - m_data) <= m_size - n;
}

void MappedFile::release(const void* p, std::size_t n) const {
    // Once detached the bytes are anonymous memory, which MADV_DONTNEED would turn into zeros.
    if (!m_mapped || !contains(p, n) || detached())
        return;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) / page * page;
    if (end > begin)
        ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::prefault(const void* p, std::size_t n) const {
    if (!m_mapped || !contains(p, n) || n == 0)
        return;
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 // Linux 5.14
#endif
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(p) / page * page;
    const auto end = reinterpret_cast<std::uintptr_t>(p) + n;
    auto* start = reinterpret_cast<void*>(begin);
    if (::madvise(start, end - begin, MADV_POPULATE_READ) != 0)
        ::madvise(start, end - begin, MADV_WILLNEED); // older kernels: read-ahead at least
}

MappedFile::~MappedFile() {
    if (m_guard >= 0)
        freeSlot(m_guard); // before the range goes: the handler must not copy it then
    if (m_mapped)
        ::munmap(const_cast<std::uint8_t*>(m_data), m_size);
    if (m_fd >= 0)
        ::close(m_fd);
}

} // namespace kvscope
