#include "state/ledger/snapshotio.h"

#include "engine/parallel.h"
#include "engine/kvcache.h"
#include "engine/session.h"
#include "formats/mappedfile.h"
#include "state/ledger/manifest.h"

#include <cstring>

namespace kvscope::state {

namespace {

using snapfile::DType;

std::optional<DType> cacheDType(const std::string& name) {
    if (name == "f32")
        return DType::F32;
    if (name == "f16")
        return DType::F16;
    if (name == "bf16")
        return DType::BF16;
    return std::nullopt;
}

// Reads a rank-1 blob of `count` elements of `dtype` into `out`; problems become violations.
template <typename T>
bool readVector(const snapfile::Reader& r, const char* name, DType dtype, int64_t count,
                std::vector<T>& out, std::vector<Violation>& problems) {
    const snapfile::BlobInfo* b = r.find(name);
    if (!b) {
        if (count == 0)
            return true; // writers may omit empty blobs
        problems.push_back(
            makeViolation("manifest.invalid", std::string("blob '") + name + "' is missing"));
        return false;
    }
    if (b->dtype != dtype || b->shape.size() != 1) {
        problems.push_back(
            makeViolation("manifest.invalid", std::string("blob '") + name + "' is " +
                                                  snapfile::dtypeName(b->dtype) + " of rank " +
                                                  std::to_string(b->shape.size()) + ", expected " +
                                                  snapfile::dtypeName(dtype) + " of rank 1"));
        return false;
    }
    // The blob's own length wins (its size is bounded by the container); the validator
    // compares it with the other counts. A disagreement with the manifest count is reported.
    if (b->shape[0] != count)
        problems.push_back(
            makeViolation("manifest.invalid",
                          std::string("blob '") + name + "' has " + std::to_string(b->shape[0]) +
                              " entries, the manifest says " + std::to_string(count)));
    out.resize(static_cast<std::size_t>(b->shape[0]));
    if (Status st = r.readBlob(*b, out.data(), out.size() * sizeof(T)); !st) {
        problems.push_back(makeViolation("file.checksum", st.message()));
        out.clear();
        return false;
    }
    return true;
}

int64_t count(const nlohmann::json& m, const char* section, const char* key) {
    return m.at(section).at(key).get<int64_t>(); // validated by snapshotFromManifest
}

} // namespace

std::optional<Snapshot> readLedger(const snapfile::Reader& r, bool tensors,
                                   std::vector<Violation>& problems) {
    const nlohmann::json& m = r.manifest();
    Snapshot s;
    try {
        s = snapshotFromManifest(m);
    } catch (const std::exception& e) {
        const std::string msg = e.what();
        const bool version = msg.rfind("ledger version", 0) == 0;
        problems.push_back(
            makeViolation(version ? "format.version" : "manifest.invalid", r.path() + ": " + msg));
        return std::nullopt;
    }
    if (!tensors)
        return s;

    const auto dtype = cacheDType(s.cacheDtype);
    if (!dtype)
        problems.push_back(makeViolation("cache.dtype", "the manifest declares cache dtype '" +
                                                            s.cacheDtype + "'"));
    const std::vector<int64_t> shape{s.kvHeads, s.cacheLength, s.headDim};
    // One layer's K or V: its problems go to `out`.
    auto readLayerBlob = [&](std::size_t l, int kv, std::vector<Violation>& out) {
        const std::string name = layerBlobName(l, kv == 1);
        const snapfile::BlobInfo* b = r.find(name);
        const int layer = static_cast<int>(l);
        if (!b) {
            out.push_back(makeViolation("cache.blob", "blob '" + name + "' is missing", layer));
            return;
        }
        if (b->dtype != *dtype) {
            out.push_back(makeViolation("cache.dtype",
                                        "blob '" + name + "' is stored as " +
                                            snapfile::dtypeName(b->dtype) +
                                            " but the manifest says the cache is " + s.cacheDtype,
                                        layer));
            return;
        }
        if (b->shape != shape) {
            std::string got;
            for (auto d : b->shape)
                got += (got.empty() ? "" : ", ") + std::to_string(d);
            out.push_back(makeViolation(
                "cache.blob",
                "blob '" + name + "' has shape [" + got + "], the manifest's cache is [" +
                    std::to_string(s.kvHeads) + ", " + std::to_string(s.cacheLength) + ", " +
                    std::to_string(s.headDim) + "]",
                layer));
            return;
        }
        Bytes& dst = kv == 0 ? s.layers[l].key : s.layers[l].value;
        if (r.canBorrow(*b)) {
            // Stored as is in a mapped file: used in place once its checksum held. The
            // finiteness check validate() makes rides along with the checksum's pass, while
            // each chunk is in cache: one trip through memory instead of two.
            FiniteScan scan{s.cacheDtype, 0};
            bool found = false;
            const std::size_t es = snapfile::dtypeSize(*dtype);
            auto in = r.borrowBlob(*b, [&](const uint8_t* p, std::size_t n) {
                if (!found) {
                    const uint64_t e = firstNonFinite(s.cacheDtype, {p, n});
                    found = e < n / es;
                    scan.firstNonFinite += e;
                }
                return Status::ok();
            });
            if (!in) {
                out.push_back(makeViolation("file.checksum", in.message(), layer));
                return;
            }
            dst = std::make_shared<const ByteBuffer>(in.value(), r.mapping(), scan);
            return;
        }
        std::vector<uint8_t> bytes(b->rawBytes);
        if (Status st = r.readBlob(*b, bytes.data(), bytes.size()); !st) {
            out.push_back(makeViolation("file.checksum", st.message(), layer));
            return;
        }
        dst = makeBytes(std::move(bytes));
    };
    // The blobs are independent: checksummed (and decompressed) on the engine's threads, a
    // memory-bound pass that one core cannot saturate. Problems keep the blobs' order.
    const std::size_t nBlobs = dtype ? 2 * s.layers.size() : 0;
    std::vector<std::vector<Violation>> blobProblems(nBlobs);
    parallelFor(static_cast<int64_t>(nBlobs), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const auto l = static_cast<std::size_t>(i / 2);
            auto& out = blobProblems[static_cast<std::size_t>(i)];
            try {
                readLayerBlob(l, static_cast<int>(i % 2), out);
            } catch (const std::exception& e) { // out of memory for a decoded blob
                out.push_back(makeViolation("cache.blob",
                                            r.path() + ": layer " + std::to_string(l) +
                                                (i % 2 ? " V" : " K") + ": " + e.what(),
                                            static_cast<int>(l)));
            }
        }
    });
    for (auto& v : blobProblems)
        problems.insert(problems.end(), std::make_move_iterator(v.begin()),
                        std::make_move_iterator(v.end()));
    readVector(r, "tokens", DType::I32, count(m, "tokens", "count"), s.tokens, problems);
    readVector(r, "positions", DType::I64, count(m, "positions", "count"), s.positions, problems);
    readVector(r, "mask", DType::U8, count(m, "mask", "length"), s.mask, problems);
    readVector(r, "logits", DType::F32, count(m, "logits", "count"), s.lastLogits, problems);
    if (m.contains("head_mask"))
        readVector(r, "head_mask", DType::U8, count(m, "head_mask", "count"), s.headMask, problems);
    return s;
}

Status writeSnapshot(const Snapshot& s, snapfile::Writer& w, const LayerBytesFn& layerBytes) {
    const auto dtype = cacheDType(s.cacheDtype);
    if (!dtype)
        return Status::error("save: cache dtype '" + s.cacheDtype + "' is not f32, f16 or bf16");
    const std::vector<int64_t> shape{s.kvHeads, s.cacheLength, s.headDim};
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
        for (int kv = 0; kv < 2; ++kv) {
            const Bytes b = layerBytes ? layerBytes(l, kv == 1)
                                       : (kv == 0 ? s.layers[l].key : s.layers[l].value);
            const std::span<const uint8_t> bytes = b ? b->span() : std::span<const uint8_t>();
            if (Status st =
                    w.addBlob(layerBlobName(l, kv == 1), *dtype, shape, bytes.data(), bytes.size());
                !st)
                return st;
        }
    }
    auto add = [&](const char* name, DType dt, const void* p, std::size_t n, std::size_t elem) {
        return w.addBlob(name, dt, {static_cast<int64_t>(n)}, p, n * elem);
    };
    if (Status st = add("tokens", DType::I32, s.tokens.data(), s.tokens.size(), 4); !st)
        return st;
    if (Status st = add("positions", DType::I64, s.positions.data(), s.positions.size(), 8); !st)
        return st;
    if (Status st = add("mask", DType::U8, s.mask.data(), s.mask.size(), 1); !st)
        return st;
    if (Status st = add("logits", DType::F32, s.lastLogits.data(), s.lastLogits.size(), 4); !st)
        return st;
    if (!s.headMask.empty())
        if (Status st = add("head_mask", DType::U8, s.headMask.data(), s.headMask.size(), 1); !st)
            return st;
    return w.finish(toManifest(s));
}

Status save(const Snapshot& s, const std::string& path, const SaveOptions& options) {
    auto w = snapfile::Writer::create(path, options.write);
    if (!w)
        return w.status();
    return writeSnapshot(s, *w.value());
}

Status saveCapture(const Session& session, const CaptureOptions& options, const std::string& path,
                   const SaveOptions& save) {
    CaptureOptions ledgerOnly = options;
    ledgerOnly.cacheBytes = false;
    auto s = capture(session, ledgerOnly);
    if (!s)
        return s.status();
    auto w = snapfile::Writer::create(path, save.write);
    if (!w)
        return w.status();
    const KvCache& cache = session.cache();
    Status written = Status::ok();
    if (Status caught = catchToStatus([&] { // a layer's copy can fail to allocate
            written = writeSnapshot(s.value(), *w.value(), [&](std::size_t l, bool value) {
                const int li = static_cast<int>(l);
                return makeBytes(value ? cache.rawValue(li) : cache.rawKey(li));
            });
        });
        !caught)
        return caught;
    return written;
}

Result<Snapshot> load(const std::string& path) {
    auto r = snapfile::Reader::openMapped(path);
    if (!r)
        return r.status();
    std::vector<Violation> problems;
    auto s = readLedger(r.value(), true, problems);
    for (const auto& p : problems)
        if (p.severity == Severity::Error)
            return Result<Snapshot>::error(
                p.message.rfind(path + ": ", 0) == 0 ? p.message : path + ": " + p.message);
    if (!s)
        return Result<Snapshot>::error(path + ": unreadable ledger");
    return std::move(*s);
}

Result<nlohmann::json> loadManifest(const std::string& path) {
    return snapfile::readManifest(path);
}

} // namespace kvscope::state
