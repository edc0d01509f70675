#include "snapfile/reader.h"

#include "formats/mappedfile.h"
#include "snapfile/blobdecoder.h"
#include "snapfile/format.h"
#include "util/hash.h"

#include <algorithm>

namespace kvscope::snapfile {

struct Reader::State {
    std::string what; // path, or the name given to openMemory
    std::shared_ptr<const detail::ByteSource> src;
    format::Header header;
    nlohmann::json document;
    std::vector<BlobInfo> blobs;
};

Reader::Reader(std::shared_ptr<const State> state) : m_state(std::move(state)) {}

// Reads and validates header + manifest; never touches blob data.
std::shared_ptr<const Reader::State> Reader::load(std::shared_ptr<const detail::ByteSource> src,
                                                  std::string what, const ReadLimits& limits) {
    auto st = std::make_shared<State>();
    st->what = std::move(what);
    const uint64_t size = src->size();
    uint8_t head[format::kHeaderSize] = {};
    const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(size, sizeof head));
    src->readAt(0, head, n, st->what);
    st->header = format::decodeHeader(head, n, size, limits.maxManifestBytes, st->what);

    // decodeHeader bounded manifestSize by the file size and the limit: safe to allocate.
    std::string text(static_cast<std::size_t>(st->header.manifestSize), '\0');
    src->readAt(st->header.manifestOffset, text.data(), text.size(), st->what);
    if (format::kEnforceChecksums &&
        hash64(text.data(), text.size()) != st->header.manifestChecksum)
        throw KvError(st->what + ": manifest checksum mismatch (file is corrupt)");
    st->document = format::parseJson(text.data(), text.size(), st->what);
    st->blobs = format::parseBlobTable(st->document, st->header, limits.maxBlobBytes, st->what);
    if (!st->document.contains("manifest"))
        st->document["manifest"] = nullptr;
    st->src = std::move(src);
    return st;
}

Result<Reader> Reader::open(const std::string& path, ReadLimits limits) {
    return catchToResult([&] {
        auto src = std::make_shared<const detail::FileSource>(path);
        return Reader(load(std::move(src), path, limits));
    });
}

Result<Reader> Reader::openMapped(const std::string& path, ReadLimits limits) {
    return catchToResult([&] {
        auto src = std::make_shared<const detail::MappedSource>(MappedFile::open(path, true));
        return Reader(load(std::move(src), path, limits));
    });
}

Result<Reader> Reader::openMemory(std::vector<uint8_t> bytes, std::string name, ReadLimits limits) {
    return catchToResult([&] {
        auto src = std::make_shared<const detail::MemorySource>(std::move(bytes));
        return Reader(load(std::move(src), std::move(name), limits));
    });
}

const std::string& Reader::path() const {
    return m_state->what;
}
uint32_t Reader::formatVersion() const {
    return m_state->header.version;
}
uint64_t Reader::requiredFeatures() const {
    return m_state->header.requiredFeatures;
}
uint64_t Reader::optionalFeatures() const {
    return m_state->header.optionalFeatures;
}
uint64_t Reader::fileSize() const {
    return m_state->src->size();
}
const nlohmann::json& Reader::manifest() const {
    return m_state->document.at("manifest");
}
const nlohmann::json& Reader::document() const {
    return m_state->document;
}
const std::vector<BlobInfo>& Reader::blobs() const {
    return m_state->blobs;
}

const BlobInfo* Reader::find(std::string_view name) const {
    for (const auto& b : m_state->blobs)
        if (b.name == name)
            return &b;
    return nullptr;
}

// Only this file's own validated entry is trusted: a BlobInfo from elsewhere (another file,
// or edited by the caller) selects a blob by name and nothing more.
const BlobInfo& Reader::own(const BlobInfo& info) const {
    const BlobInfo* b = find(info.name);
    if (!b)
        throw KvError(m_state->what + ": no blob named '" + info.name + "'");
    return *b;
}

Status Reader::readBlob(const BlobInfo& info, void* dst, std::size_t dstBytes) const {
    return catchToStatus([&] {
        const BlobInfo& b = own(info);
        if (dstBytes != b.rawBytes)
            throw KvError(m_state->what + ": blob '" + b.name + "': destination holds " +
                          std::to_string(dstBytes) + " bytes, the blob has " +
                          std::to_string(b.rawBytes));
        if (b.rawBytes > 0 && !dst)
            throw KvError(m_state->what + ": blob '" + b.name + "': destination is null");
        detail::decodeBlob(*m_state->src, b, m_state->what, static_cast<uint8_t*>(dst), nullptr);
    });
}

Result<std::vector<uint8_t>> Reader::readBlob(std::string_view name) const {
    return catchToResult([&] {
        const BlobInfo* b = find(name);
        if (!b)
            throw KvError(m_state->what + ": no blob named '" + std::string(name) + "'");
        // rawBytes was bounded at open (ReadLimits::maxBlobBytes and the zstd expansion rule of
        // format.h); the stored checksum is checked before allocating, so a damaged size allocates
        // nothing.
        detail::verifyStored(*m_state->src, *b, m_state->what);
        std::vector<uint8_t> out(static_cast<std::size_t>(b->rawBytes));
        detail::decodeBlob(*m_state->src, *b, m_state->what, out.data(), nullptr, true);
        return out;
    });
}

Status Reader::readBlobChunks(const BlobInfo& info, const ChunkFn& fn) const {
    return catchToStatus(
        [&] { detail::decodeBlob(*m_state->src, own(info), m_state->what, nullptr, &fn); });
}

Status Reader::verifyBlob(const BlobInfo& info) const {
    return catchToStatus(
        [&] { detail::decodeBlob(*m_state->src, own(info), m_state->what, nullptr, nullptr); });
}

Status Reader::verifyAll() const {
    for (const auto& b : m_state->blobs)
        if (Status st = verifyBlob(b); !st)
            return st;
    return Status::ok();
}

std::shared_ptr<const MappedFile> Reader::mapping() const {
    const auto* mapped = dynamic_cast<const detail::MappedSource*>(m_state->src.get());
    return mapped ? mapped->mapping() : nullptr;
}

bool Reader::canBorrow(const BlobInfo& info) const {
    const BlobInfo* b = find(info.name);
    return b && b->compression == Compression::None && !b->shuffled() && mapping() &&
           mapping()->isMapped();
}

Result<std::span<const uint8_t>> Reader::borrowBlob(const BlobInfo& info,
                                                    const ChunkFn& scan) const {
    return catchToResult([&] {
        const BlobInfo& b = own(info);
        if (!canBorrow(b))
            throw KvError(m_state->what + ": blob '" + b.name +
                          "' cannot be used in place (not a mapped file, or stored compressed)");
        const auto map = mapping();
        // parseBlobTable checked offset + stored bytes against the file size.
        const uint8_t* p = map->data() + b.offset;
        const auto n = static_cast<std::size_t>(b.rawBytes);
        map->prefault(p, n);
        uint64_t got = 0;
        if (!scan) {
            got = hash64(p, n);
        } else {
            // XXH3's streaming digest equals the one-shot one.
            Hasher h;
            for (std::size_t off = 0; off < n; off += kBorrowChunk) {
                const std::size_t len = std::min(kBorrowChunk, n - off);
                h.update(p + off, len);
                if (Status st = scan(p + off, len); !st)
                    throw KvError(st.message());
            }
            got = h.digest();
        }
        if (format::kEnforceChecksums && got != b.storedChecksum)
            throw KvError(m_state->what + ": blob '" + b.name +
                          "': stored data checksum mismatch (file is corrupt): expected " +
                          hex64(b.storedChecksum) + ", got " + hex64(got));
        if (format::kEnforceChecksums && got != b.rawChecksum)
            throw KvError(m_state->what + ": blob '" + b.name +
                          "': raw data checksum mismatch: expected " + hex64(b.rawChecksum) +
                          ", got " + hex64(got));
        return std::span<const uint8_t>(p, n);
    });
}

Result<nlohmann::json> readManifest(const std::string& path, ReadLimits limits) {
    auto r = Reader::open(path, limits);
    if (!r)
        return r.status();
    return r.value().manifest();
}

} // namespace kvscope::snapfile
