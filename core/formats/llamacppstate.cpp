// llama.cpp state files: cache element types, the Hadamard rotation, and the reader
// (llamacppstate.h; the layout is summarised in docs/INTEROP.md).
#include "formats/llamacppstate.h"

#include "formats/halffloat.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvscope::llamacpp {

// --- cache types ---

namespace {

constexpr std::array<CacheType, 9> kTypes = {{
    {0, "f32", 1, 4},
    {1, "f16", 1, 2},
    {30, "bf16", 1, 2},
    {8, "q8_0", 32, 34},
    {2, "q4_0", 32, 18},
    {3, "q4_1", 32, 20},
    {6, "q5_0", 32, 22},
    {7, "q5_1", 32, 24},
    {20, "iq4_nl", 32, 18},
}};

// The 16 levels of IQ4_NL, a non-linear 4-bit code (part of the published GGUF format).
constexpr std::array<int8_t, 16> kIq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                           1,    13,   25,  38,  53,  69,  89,  113};

float half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16ToFloat(h);
}
void putHalf(uint8_t* p, float f) {
    const uint16_t h = floatToFp16(f);
    std::memcpy(p, &h, 2);
}

void decodeBlock(int32_t id, const uint8_t* b, float* y) {
    switch (id) {
    case 8: { // q8_0: d, qs[32]
        const float d = half(b);
        for (int j = 0; j < 32; ++j)
            y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
        break;
    }
    case 2: { // q4_0: d, qs[16]; low nibbles are elements 0..15, high nibbles 16..31
        const float d = half(b);
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
            y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
        }
        break;
    }
    case 3: { // q4_1: d, m, qs[16]
        const float d = half(b), m = half(b + 2);
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
            y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
        }
        break;
    }
    case 6:
    case 7: { // q5_0: d, qh[4], qs[16]; q5_1: d, m, qh[4], qs[16]
        const bool offset = id == 7;
        const float d = half(b), m = offset ? half(b + 2) : 0.0f;
        const uint8_t* qhp = b + (offset ? 4 : 2);
        const uint8_t* qs = qhp + 4;
        uint32_t qh;
        std::memcpy(&qh, qhp, 4);
        for (int j = 0; j < 16; ++j) {
            const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            y[j] = offset ? static_cast<float>(lo) * d + m : static_cast<float>(lo - 16) * d;
            y[j + 16] = offset ? static_cast<float>(hi) * d + m : static_cast<float>(hi - 16) * d;
        }
        break;
    }
    case 20: { // iq4_nl: d, qs[16] indexing the non-linear levels
        const float d = half(b);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(kIq4nl[b[2 + j] & 0x0F]);
            y[j + 16] = d * static_cast<float>(kIq4nl[b[2 + j] >> 4]);
        }
        break;
    }
    default:
        break;
    }
}

int nearestInt(float x) {
    return static_cast<int>(std::lround(x));
}

// The reference quantizers' choices (round to nearest; scale from the block's extreme values).
void encodeBlock(int32_t id, const float* x, uint8_t* b) {
    float amax = 0, max = 0, mn = x[0], mx = x[0];
    for (int j = 0; j < 32; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
        mn = std::min(mn, x[j]);
        mx = std::max(mx, x[j]);
    }
    switch (id) {
    case 8: {
        const float d = amax / 127.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        putHalf(b, d);
        for (int j = 0; j < 32; ++j)
            b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(nearestInt(x[j] * inv)));
        break;
    }
    case 2: {
        const float d = max / -8.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        putHalf(b, d);
        for (int j = 0; j < 16; ++j) {
            const int a = std::min(15, static_cast<int>(x[j] * inv + 8.5f));
            const int c = std::min(15, static_cast<int>(x[j + 16] * inv + 8.5f));
            b[2 + j] = static_cast<uint8_t>(a | (c << 4));
        }
        break;
    }
    case 3: {
        const float d = (mx - mn) / 15.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        putHalf(b, d);
        putHalf(b + 2, mn);
        for (int j = 0; j < 16; ++j) {
            const int a = std::min(15, static_cast<int>((x[j] - mn) * inv + 0.5f));
            const int c = std::min(15, static_cast<int>((x[j + 16] - mn) * inv + 0.5f));
            b[4 + j] = static_cast<uint8_t>(a | (c << 4));
        }
        break;
    }
    case 6:
    case 7: {
        const bool offset = id == 7;
        const float d = offset ? (mx - mn) / 31.0f : max / -16.0f;
        const float inv = d != 0 ? 1.0f / d : 0.0f;
        putHalf(b, d);
        if (offset)
            putHalf(b + 2, mn);
        uint8_t* qhp = b + (offset ? 4 : 2);
        uint8_t* qs = qhp + 4;
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const int a = offset ? std::min(31, static_cast<int>((x[j] - mn) * inv + 0.5f))
                                 : std::min(31, static_cast<int>(x[j] * inv + 16.5f));
            const int c = offset ? std::min(31, static_cast<int>((x[j + 16] - mn) * inv + 0.5f))
                                 : std::min(31, static_cast<int>(x[j + 16] * inv + 16.5f));
            qs[j] = static_cast<uint8_t>((a & 0x0F) | ((c & 0x0F) << 4));
            qh |= static_cast<uint32_t>((a >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((c >> 4) & 1) << (j + 16);
        }
        std::memcpy(qhp, &qh, 4);
        break;
    }
    case 20: {
        // Scale so the extreme value lands on the code's extreme level, then nearest level.
        const float d = max / static_cast<float>(kIq4nl[0]);
        const float inv = d != 0 ? 1.0f / d : 0.0f;
        putHalf(b, d);
        auto code = [&](float v) {
            const float t = v * inv;
            int best = 0;
            for (int k = 1; k < 16; ++k)
                if (std::fabs(t - kIq4nl[k]) < std::fabs(t - kIq4nl[best]))
                    best = k;
            return best;
        };
        for (int j = 0; j < 16; ++j)
            b[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
        break;
    }
    default:
        break;
    }
}

} // namespace

const CacheType* cacheType(int32_t id) {
    for (const auto& t : kTypes)
        if (t.id == id)
            return &t;
    return nullptr;
}

const CacheType* cacheTypeByName(std::string_view name) {
    for (const auto& t : kTypes)
        if (name == t.name)
            return &t;
    return nullptr;
}

uint64_t rowBytes(const CacheType& t, int64_t n) {
    if (n <= 0 || n % t.blockElems != 0)
        return 0;
    return static_cast<uint64_t>(n / t.blockElems) * static_cast<uint64_t>(t.blockBytes);
}

void dequantize(const CacheType& t, const uint8_t* src, int64_t n, float* dst) {
    const auto count = static_cast<std::size_t>(n);
    switch (t.id) {
    case 0:
        std::memcpy(dst, src, count * 4);
        return;
    case 1:
        fp16ToFloat(src, count, dst);
        return;
    case 30:
        bf16ToFloat(src, count, dst);
        return;
    default:
        for (int64_t i = 0; i < n / t.blockElems; ++i)
            decodeBlock(t.id, src + i * t.blockBytes, dst + i * t.blockElems);
    }
}

void quantize(const CacheType& t, const float* src, int64_t n, uint8_t* dst) {
    const auto count = static_cast<std::size_t>(n);
    switch (t.id) {
    case 0:
        std::memcpy(dst, src, count * 4);
        return;
    case 1:
        floatToFp16(src, count, dst);
        return;
    case 30:
        floatToBf16(src, count, dst);
        return;
    default:
        for (int64_t i = 0; i < n / t.blockElems; ++i)
            encodeBlock(t.id, src + i * t.blockElems, dst + i * t.blockBytes);
    }
}

void hadamard(float* x, int64_t n, int64_t chunk) {
    if (chunk < 2 || (chunk & (chunk - 1)) != 0)
        return;
    const float scale = 1.0f / std::sqrt(static_cast<float>(chunk));
    for (int64_t base = 0; base + chunk <= n; base += chunk) {
        float* c = x + base;
        // In-place butterflies; the natural (Sylvester) order needs no bit reversal.
        for (int64_t h = 1; h < chunk; h *= 2)
            for (int64_t i = 0; i < chunk; i += 2 * h)
                for (int64_t j = i; j < i + h; ++j) {
                    const float a = c[j], b = c[j + h];
                    c[j] = a + b;
                    c[j + h] = a - b;
                }
        for (int64_t i = 0; i < chunk; ++i)
            c[i] *= scale;
    }
}

int64_t hadamardChunk(int64_t headDim) {
    if (headDim <= 0 || headDim % 64 != 0)
        return 0;
    int64_t chunk = 64;
    while (headDim % (chunk * 2) == 0)
        chunk *= 2;
    return chunk;
}

// --- the reader ---

namespace {

constexpr uint32_t kMagicSequence = 0x67677371u; // "ggsq"
constexpr uint32_t kMagicSession = 0x6767736eu;  // "ggsn"
constexpr uint32_t kVersionSequence = 3;
constexpr uint32_t kVersionSession = 10;
// Bounds beyond anything llama.cpp makes; they keep hostile counts from driving loops.
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxStreams = 4096;
constexpr uint32_t kMaxSeqIds = 4096;

std::string hexOffset(uint64_t off) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(off));
    return buf;
}

// A bounds-checked little-endian cursor. Every failure names the field and its offset.
class Cursor {
public:
    Cursor(std::span<const uint8_t> bytes, std::string name)
        : m_b(bytes), m_name(std::move(name)) {}

    uint64_t offset() const { return m_off; }
    std::span<const uint8_t> bytes() const { return m_b; }
    uint64_t left() const { return m_b.size() - m_off; }
    [[noreturn]] void fail(const std::string& field, const std::string& why, uint64_t at) const {
        throw KvError(m_name + ": " + field + " at byte " + hexOffset(at) + ": " + why);
    }
    [[noreturn]] void fail(const std::string& field, const std::string& why) const {
        fail(field, why, m_off);
    }
    void need(uint64_t n, const std::string& field) const {
        if (n > left())
            fail(field, "the file ends " + std::to_string(left()) + " bytes later, " +
                            std::to_string(n) + " are needed (truncated?)");
    }
    template <typename T> T get(const std::string& field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, m_b.data() + m_off, sizeof(T));
        m_off += sizeof(T);
        return v;
    }
    uint32_t u32(const std::string& f) { return get<uint32_t>(f); }
    int32_t i32(const std::string& f) { return get<int32_t>(f); }
    uint64_t u64(const std::string& f) { return get<uint64_t>(f); }
    void skip(uint64_t n, const std::string& field) {
        need(n, field);
        m_off += n;
    }
    // A count of items of at least `minItemBytes` each that must fit in what is left.
    uint64_t count(uint64_t n, uint64_t minItemBytes, const std::string& field, uint64_t at) const {
        if (minItemBytes > 0 && n > left() / minItemBytes)
            fail(field,
                 std::to_string(n) + " would need at least " + std::to_string(minItemBytes) +
                     " bytes each, only " + std::to_string(left()) + " bytes are left",
                 at);
        return n;
    }

private:
    std::span<const uint8_t> m_b;
    std::string m_name;
    uint64_t m_off = 0;
};

uint64_t mulChecked(uint64_t a, uint64_t b, const Cursor& c, const std::string& field,
                    uint64_t at) {
    if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
        c.fail(field, "the size " + std::to_string(a) + " x " + std::to_string(b) + " overflows",
               at);
    return a * b;
}

void readTensor(Cursor& c, TensorRecord& r, uint64_t cells, const std::string& field) {
    r.headerOffset = c.offset();
    r.type = c.i32(field + " type");
    if (!cacheType(r.type))
        c.fail(field + " type",
               "type id " + std::to_string(r.type) +
                   " is not a cache type llama.cpp writes (f32 0, f16 1, bf16 "
                   "30, q8_0 8, q4_0 2, q4_1 3, q5_0 6, q5_1 7, iq4_nl 20)",
               r.headerOffset);
    const uint64_t at = c.offset();
    r.rowSize = c.u64(field + " row size");
    if (r.rowSize == 0)
        c.fail(field + " row size", "0 bytes per row", at);
    r.bytes = mulChecked(r.rowSize, cells, c, field + " row size", at);
    r.offset = c.offset();
    c.skip(r.bytes, field + " data (" + std::to_string(cells) + " rows of " +
                        std::to_string(r.rowSize) + " bytes)");
}

void readTransposed(Cursor& c, TensorRecord& r, uint64_t cells, const std::string& field) {
    r.headerOffset = c.offset();
    r.type = c.i32(field + " type");
    const CacheType* t = cacheType(r.type);
    if (!t)
        c.fail(field + " type",
               "type id " + std::to_string(r.type) + " is not a cache type llama.cpp writes",
               r.headerOffset);
    if (t->quantized())
        c.fail(field + " type",
               std::string("a transposed V cannot be ") + t->name +
                   " (llama.cpp quantizes V only with flash attention, untransposed)",
               r.headerOffset);
    const uint64_t elAt = c.offset();
    r.elSize = c.u32(field + " element size");
    if (r.elSize != static_cast<uint32_t>(t->blockBytes))
        c.fail(field + " element size",
               std::to_string(r.elSize) + " bytes, but " + t->name + " elements take " +
                   std::to_string(t->blockBytes),
               elAt);
    const uint64_t at = c.offset();
    r.nEmbd = c.u32(field + " n_embd_v_gqa");
    if (r.nEmbd == 0)
        c.fail(field + " n_embd_v_gqa", "0 elements per cell", at);
    r.rowSize = static_cast<uint64_t>(r.nEmbd) * r.elSize;
    r.bytes = mulChecked(r.rowSize, cells, c, field + " n_embd_v_gqa", at);
    r.offset = c.offset();
    c.skip(r.bytes, field + " data (" + std::to_string(r.nEmbd) + " dims of " +
                        std::to_string(cells) + " cells)");
}

void readKvCache(Cursor& c, StateFile& f) {
    const uint64_t nsAt = c.offset();
    const uint32_t nStream = c.u32("n_stream");
    if (nStream == 0 || nStream > kMaxStreams)
        c.fail("n_stream",
               std::to_string(nStream) + " streams (1.." + std::to_string(kMaxStreams) + ")", nsAt);
    c.count(nStream, 4, "n_stream", nsAt);
    for (uint32_t s = 0; s < nStream; ++s) {
        Stream st;
        st.index = s;
        st.offset = c.offset();
        const std::string sp = nStream > 1 ? "stream " + std::to_string(s) + " " : "";
        const uint64_t ccAt = c.offset();
        const uint32_t cellCount = c.u32(sp + "cell_count");
        if (cellCount == 0) {
            f.streams.push_back(std::move(st));
            continue;
        }
        // Each cell needs at least pos + n_seq_id, then the data header.
        c.count(cellCount, 8, sp + "cell_count", ccAt);
        // First pass: walk the cell records without keeping them (nothing is allocated, no
        // field name is built unless one fails), so that the layer records below prove the
        // file holds every cell's K and V rows before any cell is stored. A count that merely
        // fits 8 bytes a cell costs nothing then.
        const uint64_t cellsAt = c.offset();
        for (uint32_t i = 0; i < cellCount; ++i) {
            auto name = [&](const char* what) {
                return sp + "cell " + std::to_string(i) + " " + what;
            };
            if (c.left() < 8) { // one of these two reads fails and names its field
                (void)c.i32(name("pos"));
                (void)c.u32(name("n_seq_id"));
            }
            c.skip(4, {});
            const uint64_t nAt = c.offset();
            const uint32_t nSeq = c.u32({});
            if (nSeq > kMaxSeqIds)
                c.fail(name("n_seq_id"), std::to_string(nSeq) + " sequences", nAt);
            if (nSeq > c.left() / 4)
                c.count(nSeq, 4, name("n_seq_id"), nAt);
            c.skip(4 * uint64_t{nSeq}, {});
        }
        const uint64_t vtAt = c.offset();
        st.vTrans = c.u32(sp + "v_trans");
        if (st.vTrans > 1)
            c.fail(sp + "v_trans", std::to_string(st.vTrans) + " (0 or 1)", vtAt);
        const uint64_t nlAt = c.offset();
        const uint32_t nLayer = c.u32(sp + "n_layer");
        if (nLayer == 0 || nLayer > kMaxLayers)
            c.fail(sp + "n_layer",
                   std::to_string(nLayer) + " layers (1.." + std::to_string(kMaxLayers) + ")",
                   nlAt);
        c.count(nLayer, 12, sp + "n_layer", nlAt);
        st.keys.resize(nLayer);
        for (uint32_t l = 0; l < nLayer; ++l)
            readTensor(c, st.keys[l], cellCount, sp + "layer " + std::to_string(l) + " K");
        // MLA caches have no V at all; everything else has one record per layer.
        if (c.left() > 0) {
            st.values.resize(nLayer);
            for (uint32_t l = 0; l < nLayer; ++l) {
                const std::string field = sp + "layer " + std::to_string(l) + " V";
                if (st.vTrans)
                    readTransposed(c, st.values[l], cellCount, field);
                else
                    readTensor(c, st.values[l], cellCount, field);
            }
        }
        // Second pass: every record was read once already, so these reads cannot fail.
        Cursor cells(c.bytes().subspan(cellsAt), {});
        st.cells.resize(cellCount);
        for (Cell& cell : st.cells) {
            cell.pos = cells.i32({});
            cell.seqIds.resize(cells.u32({}));
            for (int32_t& id : cell.seqIds)
                id = cells.i32({});
        }
        f.streams.push_back(std::move(st));
    }
}

// The llama-server packed token blob: -1, version, n, tok[n], m, media_start[m], chunks.
void unpackSlotTokens(StateFile& f, uint64_t tokensAt) {
    std::vector<uint8_t> blob(f.tokens.size() * 4);
    std::memcpy(blob.data(), f.tokens.data(), blob.size());
    Cursor c(blob, f.name + " (slot token blob at byte " + hexOffset(tokensAt) + ")");
    (void)c.i32("marker");
    f.slotVersion = c.u32("version");
    if (f.slotVersion != 1)
        c.fail("version",
               "packed token version " + std::to_string(f.slotVersion) + " (this reader knows 1)",
               4);
    const uint64_t nAt = c.offset();
    const uint64_t n = c.count(c.u32("n_tokens"), 4, "n_tokens", nAt);
    std::vector<int32_t> tokens(n);
    for (auto& t : tokens)
        t = c.i32("token");
    const uint64_t mAt = c.offset();
    const uint64_t m = c.count(c.u32("n_media"), 8, "n_media", mAt);
    if (m > 0)
        c.fail("n_media",
               std::to_string(m) +
                   " media chunks (images or audio): kvscope imports text sequences only",
               mAt);
    f.tokens = std::move(tokens);
}

} // namespace

std::string kindName(Kind k) {
    switch (k) {
    case Kind::Sequence:
        return "ggsq";
    case Kind::Session:
        return "ggsn";
    case Kind::Slot:
        return "slot";
    }
    return "ggsq";
}

bool isStateBytes(std::span<const uint8_t> head) {
    if (head.size() < 4)
        return false;
    uint32_t magic;
    std::memcpy(&magic, head.data(), 4);
    return magic == kMagicSequence || magic == kMagicSession;
}

bool isStateFile(const std::string& path) {
    // readFileHead opens without blocking and refuses FIFOs and devices (util/fileio.h).
    try {
        const std::string head = readFileHead(path, 4);
        return isStateBytes(std::span(reinterpret_cast<const uint8_t*>(head.data()), head.size()));
    } catch (const std::exception&) {
        return false;
    }
}

Result<StateFile> parse(std::vector<uint8_t> bytes, const std::string& name) {
    return catchToResult([&]() -> StateFile {
        StateFile f;
        f.name = name;
        f.hash = hex64(hash64(bytes.data(), bytes.size()));
        f.bytes = std::move(bytes);
        Cursor c(f.bytes, name);
        const uint32_t magic = c.u32("magic");
        if (magic != kMagicSequence && magic != kMagicSession)
            c.fail("magic", "not a llama.cpp state file (expected \"qsgg\" or \"nsgg\")", 0);
        f.kind = magic == kMagicSequence ? Kind::Sequence : Kind::Session;
        f.version = c.u32("version");
        const uint32_t want = f.kind == Kind::Sequence ? kVersionSequence : kVersionSession;
        if (f.version != want)
            c.fail("version",
                   kindName(f.kind) + " version " + std::to_string(f.version) +
                       " (this reader knows " + std::to_string(want) + ")",
                   4);
        const uint64_t tokensAt = c.offset() + 4;
        const uint64_t n = c.count(c.u32("n_token"), 4, "n_token", 8);
        f.tokens.resize(n);
        for (auto& t : f.tokens)
            t = c.i32("token");
        if (f.kind == Kind::Sequence && !f.tokens.empty() && f.tokens[0] == -1) {
            f.kind = Kind::Slot;
            unpackSlotTokens(f, tokensAt);
        }
        if (f.kind == Kind::Session) {
            const uint64_t at = c.offset();
            const uint64_t len = c.count(c.u32("arch length"), 1, "arch length", at);
            if (len > 256)
                c.fail("arch length", std::to_string(len) + " bytes", at);
            f.arch.assign(reinterpret_cast<const char*>(f.bytes.data() + c.offset()), len);
            c.skip(len, "arch");
            if (c.left() == 0) { // a context without memory writes nothing more
                f.used = c.offset();
                return f;
            }
        }
        readKvCache(c, f);
        f.used = c.offset();
        return f;
    });
}

Result<StateFile> read(const std::string& path) {
    return catchToResult([&]() -> StateFile {
        auto bytes = readFileBytes(path);
        auto r = parse(std::move(bytes), path);
        if (!r)
            throw KvError(r.message());
        return std::move(r).value();
    });
}

} // namespace kvscope::llamacpp
