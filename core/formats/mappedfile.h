// A private memory mapping of a whole file, shared by the GGUF, safetensors and llama2.c
// readers; a model's weights are used in place from it (engine/tensorconv.h mappedTensor).
//
// The mapping is copy-on-write (MAP_PRIVATE, readable and writable): a write — none is made,
// but a tensor over the bytes could be written by mistake — changes a private copy of the page,
// never the file, and never faults. The mapping lives as long as the last shared_ptr to it.
// Thread-safe: the bytes are immutable. fromBytes() gives the same interface over bytes already in
// memory, so the readers' openMemory() (fuzzers, tests) runs the very parser that open() runs.
//
// A file changed under its mapping: another process that truncates the file (`cp` over it,
// `truncate`, a writer opening it with O_TRUNC) would make every later read of the lost pages
// raise SIGBUS — a crash, in an engine reading weights or a restored cache in place; one that
// writes into it would change the bytes under a verified snapshot. So open() takes a read lease
// on the file (fcntl F_SETLEASE): the kernel holds such a writer back and signals this process,
// whose handler copies the mapped bytes into anonymous memory at the same addresses (mremap) and
// then lets the writer go on. Pointers into the mapping stay valid and read the bytes they read
// before. Without a lease (a file owned by another user, a filesystem without leases) the
// mapping is unguarded, as with any mmap-based loader; a file that is open for writing when it
// is mapped is copied at once instead. guarded() and detached() say which case holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvscope {

class MappedFile : public std::enable_shared_from_this<MappedFile> {
public:
    // Maps `path` read-only. Throws KvError naming the path when it cannot be opened, is
    // not a regular file, or cannot be mapped. An empty file gives size() == 0. With
    // keepOpen the file stays open, so that mapAgain() can map the very same file (not
    // whatever a later save renamed to its path).
    static std::shared_ptr<const MappedFile> open(const std::string& path, bool keepOpen = false);
    // Maps the same file once more: a second copy-on-write view whose writes neither this
    // mapping nor the file see (once detached(), a copy of this mapping's bytes). Guarded as
    // this mapping is, and keeps it alive. Throws unless opened with keepOpen.
    std::shared_ptr<const MappedFile> mapAgain() const;
    bool canMapAgain() const { return m_keepOpen; }
    // Owns `bytes` instead of mapping a file.
    static std::shared_ptr<const MappedFile> fromBytes(std::vector<std::uint8_t> bytes);

    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::uint8_t* data() const { return m_data; }
    std::size_t size() const { return m_size; }
    // Whether the bytes are a file mapping (not fromBytes).
    bool isMapped() const { return m_mapped; }
    // Whether a change of the file by another process is caught (a lease is held, or the bytes
    // were already copied out of the file).
    bool guarded() const;
    // Whether the bytes no longer come from the file: copied out because another process began
    // to change it, or because it was open for writing when mapped.
    bool detached() const;
    // Whether [p, p + n) lies inside the bytes.
    bool contains(const void* p, std::size_t n) const;
    // Gives back the resident pages wholly inside [p, p + n) (madvise DONTNEED): for bytes
    // that were copied out (converted, permuted) and will not be read again. A later read
    // still sees the file's bytes. No-op for fromBytes and outside the mapping.
    void release(const void* p, std::size_t n) const;
    // Maps the file pages of [p, p + n) in ahead of use (MADV_POPULATE_READ; WILLNEED where the
    // kernel lacks it): one call instead of a page fault per few pages. No-op for fromBytes.
    void prefault(const void* p, std::size_t n) const;

private:
    MappedFile() = default;
    const std::uint8_t* m_data = nullptr;
    std::size_t m_size = 0;
    bool m_mapped = false;
    bool m_keepOpen = false; // open(keepOpen): mapAgain() allowed
    int m_fd = -1;           // the mapped file, while kept open or leased
    int m_guard = -1;        // the slot of the lease guard, or -1
    std::shared_ptr<const MappedFile>
        m_base;                        // mapAgain(): the mapping whose file and lease it uses
    std::string m_path;                // for errors
    std::vector<std::uint8_t> m_owned; // fromBytes()
};

} // namespace kvscope
