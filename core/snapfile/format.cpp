#include "snapfile/format.h"

#include "formats/jsondepth.h"
#include "formats/jsonerror.h"
#include "util/hash.h"
#include "util/status.h"

#include <cstring>
#include <set>

namespace kvscope::snapfile {

std::string compressionName(Compression c) {
    return c == Compression::Zstd ? "zstd" : "none";
}

namespace format {

namespace {
void putLe(uint8_t* p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
        p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t getLe(const uint8_t* p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
        v |= uint64_t(p[i]) << (8 * i);
    return v;
}
std::string hexFlags(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}
} // namespace

std::array<uint8_t, kHeaderSize> encodeHeader(const Header& h) {
    std::array<uint8_t, kHeaderSize> b{};
    std::memcpy(b.data(), kMagic.data(), kMagic.size());
    putLe(&b[8], h.version, 4);
    putLe(&b[12], kHeaderSize, 4);
    putLe(&b[16], h.requiredFeatures, 8);
    putLe(&b[24], h.optionalFeatures, 8);
    putLe(&b[32], h.manifestOffset, 8);
    putLe(&b[40], h.manifestSize, 8);
    putLe(&b[48], h.manifestChecksum, 8);
    putLe(&b[56], hash64(b.data(), 56), 8);
    return b;
}

Header decodeHeader(const uint8_t* b, std::size_t n, uint64_t fileSize, uint64_t maxManifestBytes,
                    const std::string& what) {
    auto fail = [&](const std::string& msg) -> Header { throw KvError(what + ": " + msg); };
    if (n < kMagic.size() || std::memcmp(b, kMagic.data(), kMagic.size()) != 0)
        return fail(fileSize < kMagic.size() ? "file is " + std::to_string(fileSize) +
                                                   " bytes, too short to be a kvscope snapshot"
                                             : "not a kvscope snapshot (bad magic bytes)");
    if (n < 12)
        return fail("file is truncated inside the header (" + std::to_string(fileSize) + " bytes)");
    Header h;
    // The version is checked before anything else in the header: a newer version may lay
    // the rest of the header out differently.
    h.version = static_cast<uint32_t>(getLe(b + 8, 4));
    if (h.version == 0)
        return fail("format version 0 is invalid (corrupt header)");
    if (h.version > kVersion)
        return fail("format version " + std::to_string(h.version) +
                    " is newer than this kvscope supports (" + std::to_string(kVersion) +
                    "); upgrade kvscope");
    if (n < kHeaderSize)
        return fail("file is " + std::to_string(fileSize) + " bytes, shorter than the " +
                    std::to_string(kHeaderSize) + "-byte header (truncated?)");
    const uint64_t headerSize = getLe(b + 12, 4);
    if (kEnforceChecksums && hash64(b, 56) != getLe(b + 56, 8))
        return fail("header checksum mismatch (corrupt header)");
    if (headerSize != kHeaderSize)
        return fail("header field header_size = " + std::to_string(headerSize) + ", expected " +
                    std::to_string(kHeaderSize));
    h.requiredFeatures = getLe(b + 16, 8);
    h.optionalFeatures = getLe(b + 24, 8);
    h.manifestOffset = getLe(b + 32, 8);
    h.manifestSize = getLe(b + 40, 8);
    h.manifestChecksum = getLe(b + 48, 8);
    if (const uint64_t unknown = h.requiredFeatures & ~kKnownRequiredFeatures)
        return fail("requires feature flag(s) " + hexFlags(unknown) +
                    " that this kvscope does not support (format version " +
                    std::to_string(h.version) + "); upgrade kvscope");
    if (h.manifestOffset < kHeaderSize)
        return fail("header field manifest_offset = " + std::to_string(h.manifestOffset) +
                    " lies inside the " + std::to_string(kHeaderSize) + "-byte header");
    if (h.manifestOffset > fileSize)
        return fail("header field manifest_offset = " + std::to_string(h.manifestOffset) +
                    " is outside the file (" + std::to_string(fileSize) + " bytes; truncated?)");
    if (h.manifestSize > fileSize - h.manifestOffset)
        return fail("file is truncated: the manifest at offset " +
                    std::to_string(h.manifestOffset) + " needs " + std::to_string(h.manifestSize) +
                    " bytes, the file has " + std::to_string(fileSize) + " bytes");
    if (h.manifestOffset + h.manifestSize != fileSize)
        return fail(std::to_string(fileSize - h.manifestOffset - h.manifestSize) +
                    " unexpected bytes after the manifest (the manifest must end the file)");
    if (h.manifestSize > maxManifestBytes)
        return fail("header field manifest_size = " + std::to_string(h.manifestSize) +
                    " exceeds the limit of " + std::to_string(maxManifestBytes) + " bytes");
    return h;
}

nlohmann::json blobToJson(const BlobInfo& b) {
    nlohmann::json j = {
        {"name", b.name},
        {"dtype", dtypeName(b.dtype)},
        {"shape", b.shape},
        {"offset", b.offset},
        {"stored_bytes", b.storedBytes},
        {"raw_bytes", b.rawBytes},
        {"compression", compressionName(b.compression)},
        {"shuffle_block", b.shuffleBlock},
        {"stored_xxh3", hex64(b.storedChecksum)},
        {"raw_xxh3", hex64(b.rawChecksum)},
    };
    return j;
}

namespace {

class BlobParser {
public:
    BlobParser(const std::string& what, uint64_t maxBlobBytes)
        : m_what(what), m_maxBlobBytes(maxBlobBytes) {}

    BlobInfo parse(const nlohmann::json& j, std::size_t index) {
        m_ctx = m_what + ": blob table entry " + std::to_string(index);
        if (!j.is_object())
            fail("is not a JSON object");
        BlobInfo b;
        b.name = str(j, "name");
        if (b.name.empty())
            fail("field 'name' is empty");
        m_ctx = m_what + ": blob '" + b.name + "'";
        const std::string dt = str(j, "dtype");
        const auto dtype = parseDType(dt);
        if (!dtype)
            fail("unknown dtype '" + dt + "'");
        b.dtype = *dtype;
        b.offset = u64(j, "offset");
        b.storedBytes = u64(j, "stored_bytes");
        b.rawBytes = u64(j, "raw_bytes");
        b.storedChecksum = hex(j, "stored_xxh3");
        b.rawChecksum = hex(j, "raw_xxh3");
        parseShape(j, b);
        parseEncoding(j, b);
        return b;
    }

private:
    [[noreturn]] void fail(const std::string& msg) const { throw KvError(m_ctx + ": " + msg); }

    const nlohmann::json& field(const nlohmann::json& j, const char* key) const {
        auto it = j.find(key);
        if (it == j.end())
            fail(std::string("missing field '") + key + "'");
        return *it;
    }
    std::string str(const nlohmann::json& j, const char* key) const {
        const auto& v = field(j, key);
        if (!v.is_string())
            fail(std::string("field '") + key + "' is not a string");
        return v.get<std::string>();
    }
    uint64_t u64(const nlohmann::json& j, const char* key) const {
        const auto& v = field(j, key);
        if (!v.is_number_unsigned())
            fail(std::string("field '") + key + "' = " + v.dump() +
                 " is not a non-negative integer");
        return v.get<uint64_t>();
    }
    uint64_t hex(const nlohmann::json& j, const char* key) const {
        const std::string s = str(j, key);
        uint64_t v = 0;
        bool ok = s.size() == 16;
        for (char c : s) {
            const int d = (c >= '0' && c <= '9')   ? c - '0'
                          : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                                   : -1;
            ok = ok && d >= 0;
            v = (v << 4) | uint64_t(d & 0xf);
        }
        if (!ok)
            fail(std::string("field '") + key + "' = \"" + s + "\" is not 16 lowercase hex digits");
        return v;
    }

    void parseShape(const nlohmann::json& j, BlobInfo& b) const {
        const auto& s = field(j, "shape");
        if (!s.is_array())
            fail("field 'shape' is not an array");
        if (s.size() > kMaxRank)
            fail("shape has rank " + std::to_string(s.size()) + ", more than the " +
                 std::to_string(kMaxRank) + " allowed");
        std::string text = "[";
        uint64_t elements = 1;
        bool overflow = false;
        for (std::size_t i = 0; i < s.size(); ++i) {
            text += (i ? ", " : "") + s[i].dump();
            if (!s[i].is_number_unsigned() || s[i].get<uint64_t>() > uint64_t(INT64_MAX))
                fail("shape[" + std::to_string(i) + "] = " + s[i].dump() +
                     " is not a non-negative 64-bit integer");
            const uint64_t d = s[i].get<uint64_t>();
            b.shape.push_back(static_cast<int64_t>(d));
            overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
        }
        text += "]";
        uint64_t bytes = 0;
        overflow = overflow || __builtin_mul_overflow(elements, dtypeSize(b.dtype), &bytes);
        const std::string desc = "shape " + text + " × " + dtypeName(b.dtype);
        if (overflow)
            fail(desc + " overflows 64 bits");
        // A shape with a zero dimension may legally have huge other dims; the byte count is
        // what gets allocated, so that is what is limited.
        if (bytes > m_maxBlobBytes)
            fail(desc + " = " + std::to_string(bytes) + " bytes exceeds the limit of " +
                 std::to_string(m_maxBlobBytes) + " bytes");
        if (bytes != b.rawBytes)
            fail(desc + " = " + std::to_string(bytes) +
                 " bytes, but field 'raw_bytes' = " + std::to_string(b.rawBytes));
    }

    void parseEncoding(const nlohmann::json& j, BlobInfo& b) const {
        const std::string c = str(j, "compression");
        if (c == "zstd")
            b.compression = Compression::Zstd;
        else if (c == "none")
            b.compression = Compression::None;
        else
            fail("unknown compression '" + c + "'");
        if (b.compression == Compression::None && b.storedBytes != b.rawBytes)
            fail("compression 'none' but stored_bytes = " + std::to_string(b.storedBytes) +
                 " differs from raw_bytes = " + std::to_string(b.rawBytes));
        if (b.compression == Compression::Zstd && !zstdExpansionAllowed(b.rawBytes, b.storedBytes))
            fail("raw_bytes = " + std::to_string(b.rawBytes) + " from " +
                 std::to_string(b.storedBytes) + " stored zstd bytes expands more than " +
                 std::to_string(kMaxZstdRatio) +
                 "x, which no real tensor does (refused as a decompression bomb)");
        const uint64_t block = u64(j, "shuffle_block");
        const std::size_t es = dtypeSize(b.dtype);
        if (block != 0 && (es < 2 || block % es != 0 || block > kMaxShuffleBlock))
            fail("field 'shuffle_block' = " + std::to_string(block) +
                 " is not 0 or a multiple of the element size " + std::to_string(es) +
                 " (at least 2) up to " + std::to_string(kMaxShuffleBlock));
        b.shuffleBlock = static_cast<uint32_t>(block);
    }

    const std::string& m_what;
    uint64_t m_maxBlobBytes;
    std::string m_ctx;
};

} // namespace

std::vector<BlobInfo> parseBlobTable(const nlohmann::json& doc, const Header& h,
                                     uint64_t maxBlobBytes, const std::string& what) {
    auto fail = [&](const std::string& msg) { throw KvError(what + ": manifest: " + msg); };
    if (!doc.is_object())
        fail("is not a JSON object");
    auto kv = doc.find("kvsnap");
    if (kv == doc.end() || !kv->is_object())
        fail("missing object 'kvsnap'");
    auto ver = kv->find("format_version");
    if (ver == kv->end() || !ver->is_number_unsigned() || ver->get<uint64_t>() != h.version)
        fail("'kvsnap.format_version' is missing or differs from the header's version " +
             std::to_string(h.version));
    auto table = kv->find("blobs");
    if (table == kv->end() || !table->is_array())
        fail("missing array 'kvsnap.blobs'");

    BlobParser parser(what, maxBlobBytes);
    std::vector<BlobInfo> blobs;
    std::set<std::string> names;
    uint64_t expectedOffset = kHeaderSize;
    uint64_t zstdRaw = 0; // all zstd blobs' raw bytes (each bounded, so no overflow)
    const uint64_t zstdRawLimit = kZstdTotalFloor + kMaxZstdRatio * h.manifestOffset;
    for (std::size_t i = 0; i < table->size(); ++i) {
        BlobInfo b = parser.parse((*table)[i], i);
        if (b.compression == Compression::Zstd) {
            zstdRaw += b.rawBytes;
            if (zstdRaw > zstdRawLimit)
                fail("the zstd blobs up to '" + b.name + "' expand to " + std::to_string(zstdRaw) +
                     " bytes, more than " + std::to_string(zstdRawLimit) + " (256 MiB + " +
                     std::to_string(kMaxZstdRatio) +
                     "x the data area): refused as a decompression bomb");
        }
        const std::string ctx = what + ": blob '" + b.name + "'";
        if (!names.insert(b.name).second)
            throw KvError(ctx + ": duplicate blob name");
        // Blobs tile the data area in table order, so every byte of the file is covered by
        // exactly one checksum (header, a blob, or the manifest).
        if (b.offset != expectedOffset)
            throw KvError(ctx + ": offset = " + std::to_string(b.offset) + ", expected " +
                          std::to_string(expectedOffset) + " (blobs are stored back to back)");
        if (b.storedBytes > h.manifestOffset - b.offset)
            throw KvError(ctx + ": stored_bytes = " + std::to_string(b.storedBytes) +
                          " at offset " + std::to_string(b.offset) +
                          " runs past the data area, which ends at " +
                          std::to_string(h.manifestOffset));
        expectedOffset = b.offset + b.storedBytes;
        blobs.push_back(std::move(b));
    }
    if (expectedOffset != h.manifestOffset)
        fail("blobs end at offset " + std::to_string(expectedOffset) +
             " but the manifest starts at " + std::to_string(h.manifestOffset));
    return blobs;
}

nlohmann::json parseJson(const char* data, std::size_t size, const std::string& what) {
    // The depth is checked on the text, then parsed without a callback: nlohmann's callback
    // parser is quadratic in the members of one container (a 3 MB manifest of 300,000 small
    // objects took minutes), the plain parser is linear.
    checkJsonDepth(std::string_view(data, size), what + ": manifest");
    try {
        return nlohmann::json::parse(data, data + size);
    } catch (const nlohmann::json::exception& e) {
        throw KvError(what + ": manifest is not valid JSON: " +
                      describeJsonError(e, std::string_view(data, size)));
    }
}

} // namespace format
} // namespace kvscope::snapfile
