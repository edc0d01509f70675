// A private memory mapping of a whole file, shared by the GGUF, safetensors and llama2.c
// readers; a model's weights are used in place from it (engine/tensorconv.h mappedTensor).
//
// The mapping is copy-on-write (MAP_PRIVATE, readable and writable): a write — none is made,
// but a tensor over the bytes could be written by mistake — changes a private copy of the page,
// never the file, and never faults. The mapping lives as long as the last shared_ptr to it.
// Thread-safe: the bytes are immutable. If another process truncates the file while it is mapped,
// touching the lost pages raises SIGBUS, as with any mmap-based loader. fromBytes() gives the same
// interface over bytes already in memory, so the readers' openMemory() (fuzzers, tests) runs the
// very parser that open() runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvscope {

class MappedFile {
public:
    // Maps `path` read-only. Throws KvError naming the path when it cannot be opened, is
    // not a regular file, or cannot be mapped. An empty file gives size() == 0. With
    // keepOpen the file stays open, so that mapAgain() can map the very same file (not
    // whatever a later save renamed to its path).
    static std::shared_ptr<const MappedFile> open(const std::string& path, bool keepOpen = false);
    // Maps the same file once more: a second copy-on-write view whose writes neither this
    // mapping nor the file see. Throws unless opened with keepOpen.
    std::shared_ptr<const MappedFile> mapAgain() const;
    bool canMapAgain() const { return m_fd >= 0; }
    // Owns `bytes` instead of mapping a file.
    static std::shared_ptr<const MappedFile> fromBytes(std::vector<std::uint8_t> bytes);

    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::uint8_t* data() const { return m_data; }
    std::size_t size() const { return m_size; }
    // Whether the bytes are a file mapping (not fromBytes).
    bool isMapped() const { return m_mapped; }
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
    int m_fd = -1;                     // open(keepOpen): the mapped file, for mapAgain()
    std::string m_path;                // for errors
    std::vector<std::uint8_t> m_owned; // fromBytes()
};

} // namespace kvscope
