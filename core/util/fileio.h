// Small, bounds-checked helpers for reading binary files and writing files atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvscope {

// Reads a whole file. Throws KvError naming the file when it cannot be read or is larger
// than maxBytes.
std::vector<std::uint8_t> readFileBytes(const std::string& path,
                                        std::uint64_t maxBytes = (1ull << 36));
std::string readFileText(const std::string& path, std::uint64_t maxBytes = (1ull << 32));

// Opens `path` for reading without ever blocking: a FIFO, socket, device or folder is refused
// ("<path>: not a regular file (it is a FIFO)") before anything waits on it. Returns the file
// descriptor (blocking mode, close-on-exec); throws KvError naming the file otherwise.
int openRegularFile(const std::string& path);

// The first `n` bytes of a regular file (fewer when it is shorter), read through
// openRegularFile; `fileSize`, when given, receives the whole file's size.
std::string readFileHead(const std::string& path, std::size_t n, std::uint64_t* fileSize = nullptr);

// What kind of file `mode` (st_mode) names, for messages: "a folder", "a FIFO (named pipe)",
// "a character device", "a block device", "a socket", "a regular file".
std::string fileKindName(unsigned mode);

// The one output-path policy of every writer (snapshots, exports, models, reports; CLI and GUI):
// - a missing path is created (its folder must exist);
// - a regular file is replaced atomically;
// - a symbolic link is followed (up to 40 links) and its target is written, replaced atomically
//   in the target's folder; a dangling link creates its target;
// - a folder, device node, FIFO or socket is refused: "<path>: refusing to write: it is a
//   character device (only a regular file is replaced)".
// Returns the path to write (the link's target for a symlink). Throws KvError otherwise.
std::string resolveOutputPath(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, rename,
// fsync of the folder. An existing file at `path` is untouched if anything fails. The path
// goes through resolveOutputPath first.
void writeFileAtomic(const std::string& path, const void* data, std::size_t size);

// The same for a file made piece by piece: `produce` is called once with a sink and hands it
// the file's bytes in order (a multi-GB model is never held whole). Whatever `produce` throws
// leaves `path` untouched and is rethrown.
using ByteSink = std::function<void(const void* data, std::size_t size)>;
void writeFileAtomicStreamed(const std::string& path,
                             const std::function<void(const ByteSink& sink)>& produce);
// What `produce` hands its sink, gathered in memory (a streamed writer's toBytes()).
std::vector<std::uint8_t> collectStreamed(const std::function<void(const ByteSink& sink)>& produce);

// Sequential little-endian reader over a byte buffer; every read is bounds-checked and a
// failure throws KvError "<what>: <field>: unexpected end of data at offset N".
class ByteReader {
public:
    ByteReader(const std::uint8_t* data, std::size_t size, std::string what)
        : m_data(data), m_size(size), m_what(std::move(what)) {}
    std::size_t offset() const { return m_offset; }
    std::size_t remaining() const { return m_size - m_offset; }
    void seek(std::size_t offset, const char* field);
    void need(std::size_t n, const char* field) const;
    std::uint8_t u8(const char* field);
    std::uint16_t u16(const char* field);
    std::uint32_t u32(const char* field);
    std::int32_t i32(const char* field) { return static_cast<std::int32_t>(u32(field)); }
    std::uint64_t u64(const char* field);
    std::int64_t i64(const char* field) { return static_cast<std::int64_t>(u64(field)); }
    float f32(const char* field);
    double f64(const char* field);
    std::string bytes(std::size_t n, const char* field);
    const std::uint8_t* ptr() const { return m_data + m_offset; }
    void skip(std::size_t n, const char* field);
    [[noreturn]] void fail(const std::string& field, const std::string& msg) const;

private:
    const std::uint8_t* m_data;
    std::size_t m_size;
    std::size_t m_offset = 0;
    std::string m_what;
};

} // namespace kvscope
