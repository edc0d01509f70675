#include "bytes.h"

#include "util/hash.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace kvscope::hostile {

namespace fs = std::filesystem;

Bytes readAll(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in)
        throw std::runtime_error(p.string() + ": cannot read");
    return Bytes(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const fs::path& p, const Bytes& b) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (!out)
        throw std::runtime_error(p.string() + ": cannot write");
}

void writeText(const fs::path& p, const std::string& s) {
    writeAll(p, Bytes(s.begin(), s.end()));
}

void copyTree(const fs::path& from, const fs::path& to) {
    if (fs::is_directory(from))
        fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    else
        fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

std::vector<std::size_t> truncationPoints(std::size_t size, std::vector<std::size_t> landmarks,
                                          std::size_t count) {
    std::vector<std::size_t> pts;
    for (std::size_t p : {0, 1, 3, 4, 7, 8, 16, 24, 32}) // inside the first header fields
        pts.push_back(p);
    for (std::size_t l : landmarks)
        for (std::size_t d : {std::size_t{0}, std::size_t{1}})
            if (l >= d)
                pts.push_back(l - d);
    pts.push_back(size > 0 ? size - 1 : 0);
    std::erase_if(pts, [&](std::size_t p) { return p >= size; });
    std::sort(pts.begin(), pts.end());
    pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
    // Fill up with evenly spread points, then thin out evenly when there are too many.
    for (std::size_t i = 1; pts.size() < count && i < count; ++i) {
        const std::size_t p = size * i / count;
        if (!std::binary_search(pts.begin(), pts.end(), p)) {
            pts.insert(std::lower_bound(pts.begin(), pts.end(), p), p);
        }
    }
    if (pts.size() > count) {
        std::vector<std::size_t> thin;
        for (std::size_t i = 0; i < count; ++i)
            thin.push_back(pts[i * pts.size() / count]);
        pts = thin;
    }
    return pts;
}

std::string hex16(std::uint64_t v) {
    return hex64(v);
}

namespace {
constexpr std::uint8_t kMagic[8] = {0x89, 'K', 'V', 'S', 'N', 'A', 'P', '\n'};
}

void resealKvsnapHeader(Bytes& b) {
    if (b.size() < 64)
        return;
    putLE<std::uint64_t>(b, 56, hash64(b.data(), 56));
}

Bytes buildKvsnap(const Bytes& blobArea, const std::string& document) {
    Bytes b(64, 0);
    std::memcpy(b.data(), kMagic, 8);
    putLE<std::uint32_t>(b, 8, 1);
    putLE<std::uint32_t>(b, 12, 64);
    const std::uint64_t manifestOffset = 64 + blobArea.size();
    putLE<std::uint64_t>(b, 32, manifestOffset);
    putLE<std::uint64_t>(b, 40, document.size());
    putLE<std::uint64_t>(b, 48, hash64(document.data(), document.size()));
    b.insert(b.end(), blobArea.begin(), blobArea.end());
    b.insert(b.end(), document.begin(), document.end());
    resealKvsnapHeader(b);
    return b;
}

KvsnapParts splitKvsnap(const Bytes& file) {
    const auto moff = getLE<std::uint64_t>(file, 32);
    const auto msize = getLE<std::uint64_t>(file, 40);
    if (moff < 64 || moff + msize != file.size())
        throw std::runtime_error("splitKvsnap: not a valid .kvsnap");
    KvsnapParts parts;
    parts.blobArea.assign(file.begin() + 64, file.begin() + static_cast<std::ptrdiff_t>(moff));
    parts.document =
        nlohmann::json::parse(file.begin() + static_cast<std::ptrdiff_t>(moff), file.end());
    return parts;
}

nlohmann::json blobEntry(const std::string& name, const std::string& dtype,
                         std::vector<std::int64_t> shape, std::uint64_t offset, const Bytes& stored,
                         const std::string& compression, std::uint64_t rawBytes) {
    const std::string h = hex64(hash64(stored.data(), stored.size()));
    return {{"name", name},
            {"dtype", dtype},
            {"shape", shape},
            {"offset", offset},
            {"stored_bytes", stored.size()},
            {"raw_bytes", rawBytes},
            {"compression", compression},
            {"shuffle_block", 0},
            {"stored_xxh3", h},
            {"raw_xxh3", compression == "none" ? h : std::string("0123456789abcdef")}};
}

namespace {

// Frame header: magic, descriptor (8-byte content size, a window descriptor of 128 KiB, no
// checksum, no dictionary), window descriptor, content size.
Bytes zstdHeader(std::uint64_t contentSize) {
    Bytes f;
    appendLE<std::uint32_t>(f, 0xFD2FB528u);
    f.push_back(0xC0);   // FCS_Field_Size = 8 bytes, Single_Segment = 0
    f.push_back(7 << 3); // Window_Log = 10 + 7 = 17 (128 KiB)
    appendLE<std::uint64_t>(f, contentSize);
    return f;
}

void blockHeader(Bytes& f, bool last, unsigned type, std::uint32_t size) {
    const std::uint32_t h = (last ? 1u : 0u) | (type << 1) | (size << 3);
    f.push_back(static_cast<std::uint8_t>(h));
    f.push_back(static_cast<std::uint8_t>(h >> 8));
    f.push_back(static_cast<std::uint8_t>(h >> 16));
}

constexpr std::uint32_t kBlock = 128 * 1024;

} // namespace

Bytes zstdZeroFrame(std::uint64_t rawBytes) {
    Bytes f = zstdHeader(rawBytes);
    std::uint64_t left = rawBytes;
    do {
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, kBlock));
        left -= n;
        blockHeader(f, left == 0, 1 /* RLE */, n);
        f.push_back(0);
    } while (left > 0);
    return f;
}

Bytes zstdLyingFrame(std::uint64_t declared, std::size_t actual) {
    Bytes f = zstdHeader(declared);
    std::size_t left = actual;
    do {
        const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(left, kBlock));
        left -= n;
        blockHeader(f, left == 0, 0 /* raw */, n);
        f.insert(f.end(), n, 0x5a);
    } while (left > 0);
    return f;
}

} // namespace kvscope::hostile
