// llama.cpp states as kvscope snapshots and back (llamacpp.h).
#include "state/interop/llamacpp.h"

#include "engine/model.h"
#include "engine/session.h"
#include "formats/halffloat.h"
#include "state/ledger/export.h"
#include "state/verify/restore.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

namespace kvscope::state::llamacpp {

namespace {

// llama.cpp rotates llama-family keys in adjacent pairs (its converter permutes the q/k rows of
// Hugging Face checkpoints); Qwen2 uses NEOX pairs, which are kvscope's rotate_half layout, and
// models without RoPE have nothing to permute.
bool interleavedKeys(const ModelConfig& c) {
    return c.architecture == "llama" && c.hfArchitecture != "Qwen2ForCausalLM";
}

// One cell's K row (all KV heads, llama.cpp's element order) -> kvscope's per-head order, in place.
void deinterleave(float* row, int64_t heads, int64_t headDim, std::vector<float>& tmp) {
    tmp.resize(static_cast<std::size_t>(headDim));
    const int64_t half = headDim / 2;
    for (int64_t h = 0; h < heads; ++h) {
        float* x = row + h * headDim;
        for (int64_t b = 0; b < half; ++b) {
            tmp[static_cast<std::size_t>(b)] = x[2 * b];
            tmp[static_cast<std::size_t>(b + half)] = x[2 * b + 1];
        }
        std::copy(tmp.begin(), tmp.end(), x);
    }
}

void interleave(float* row, int64_t heads, int64_t headDim, std::vector<float>& tmp) {
    tmp.resize(static_cast<std::size_t>(headDim));
    const int64_t half = headDim / 2;
    for (int64_t h = 0; h < heads; ++h) {
        float* x = row + h * headDim;
        for (int64_t b = 0; b < half; ++b) {
            tmp[static_cast<std::size_t>(2 * b)] = x[b];
            tmp[static_cast<std::size_t>(2 * b + 1)] = x[b + half];
        }
        std::copy(tmp.begin(), tmp.end(), x);
    }
}

struct Selected {
    const Stream* stream;
    uint32_t cell; // index within the stream's cells (= its row in the data)
    int32_t pos;
};

std::string typeName(int32_t id) {
    const CacheType* t = cacheType(id);
    return t ? t->name : "type " + std::to_string(id);
}

// The coarsest element type K and V were stored in, for Snapshot::cacheSourceType ("" when
// both are f32: nothing was rounded).
std::string sourceTypeOf(const Stream& st) {
    std::string worst;
    int fewestBits = 32;
    auto consider = [&](int32_t id) {
        const CacheType* t = cacheType(id);
        if (!t)
            return;
        const int bits = t->blockBytes * 8 / t->blockElems;
        if (bits < fewestBits) {
            fewestBits = bits;
            worst = t->name;
        }
    };
    for (const auto& r : st.keys)
        consider(r.type);
    for (const auto& r : st.values)
        consider(r.type);
    return worst;
}

} // namespace

Imported import(const StateFile& f, std::shared_ptr<const Model> modelPtr,
                const ImportOptions& options) {
    Imported out;
    const std::string file = std::filesystem::path(f.name).filename().string();
    out.source = {{"engine", "llama.cpp"},
                  {"format", kindName(f.kind)},
                  {"version", f.version},
                  {"file", file},
                  {"hash", f.hash}};
    if (f.kind == Kind::Session)
        out.source["arch"] = f.arch;
    if (f.kind == Kind::Slot)
        out.source["slot_tokens_version"] = f.slotVersion;
    auto layout = [&](const std::string& msg) {
        out.violations.push_back(makeViolation("import.layout", file + ": " + msg));
    };
    if (f.used < f.bytes.size())
        out.violations.push_back(makeViolation(
            "import.trailing", file + ": " + std::to_string(f.bytes.size() - f.used) +
                                   " bytes after the state (llama.cpp ignores them in a ggsq; "
                                   "a ggsn with them does not load)"));
    if (!modelPtr) {
        layout("a llama.cpp state records no model shapes: give the model it was made with");
        return out;
    }
    const Model& model = *modelPtr;
    const ModelConfig& mc = model.config();
    // A session file names the architecture its state was made by; llama.cpp refuses to load
    // one for another (its own check), and so does this importer.
    if (f.kind == Kind::Session && f.arch != llamaCppArchitecture(mc)) {
        out.violations.push_back(makeViolation(
            "model.architecture", file + ": arch is \"" + f.arch +
                                      "\": the state was made by a model of that architecture; "
                                      "the model given is llama.cpp's \"" +
                                      llamaCppArchitecture(mc) + "\""));
        return out;
    }
    if (std::count(mc.slidingLayers.begin(), mc.slidingLayers.end(), true) > 0) {
        // llama.cpp keeps such a model in two caches (iSWA), the sliding one holding only the
        // window's cells, and writes both: this reader knows the one-cache layout only.
        layout("the model has sliding-window layers (" + mc.hfArchitecture +
               "); llama.cpp saves those in a second cache of the window's cells, which this "
               "importer does not read");
        return out;
    }

    // Cells of the chosen sequence, from whichever stream holds them.
    int32_t seq = options.sequence;
    if (seq < 0) {
        for (const auto& st : f.streams)
            for (const auto& c : st.cells)
                for (int32_t id : c.seqIds)
                    if (seq < 0 || id < seq)
                        seq = id;
    }
    if (f.kind != Kind::Session && options.sequence > 0) {
        // A ggsq or slot file holds one sequence's state (its cells are its own whatever id
        // they carry): another sequence is not in it.
        layout("sequence " + std::to_string(options.sequence) + " was asked for, but a " +
               kindName(f.kind) + " file holds the state of one sequence only");
        return out;
    }
    if (f.kind != Kind::Session)
        seq = seq < 0 ? 0 : seq;
    std::vector<Selected> cells;
    int64_t otherCells = 0;
    std::vector<int32_t> otherSeqs;
    for (const auto& st : f.streams)
        for (uint32_t i = 0; i < st.cells.size(); ++i) {
            const auto& c = st.cells[i];
            const bool mine = f.kind != Kind::Session ||
                              std::find(c.seqIds.begin(), c.seqIds.end(), seq) != c.seqIds.end();
            if (mine) {
                cells.push_back({&st, i, c.pos});
            } else {
                ++otherCells;
                for (int32_t id : c.seqIds)
                    if (std::find(otherSeqs.begin(), otherSeqs.end(), id) == otherSeqs.end())
                        otherSeqs.push_back(id);
            }
        }
    out.source["sequence"] = seq;
    std::set<const Stream*> streams;
    for (const auto& c : cells)
        streams.insert(c.stream);
    if (otherCells > 0) {
        std::string ids;
        for (std::size_t i = 0; i < otherSeqs.size() && i < 8; ++i)
            ids += (i ? ", " : "") + std::to_string(otherSeqs[i]);
        out.violations.push_back(makeViolation(
            "import.sequences", file + ": " + std::to_string(otherCells) +
                                    " cell(s) of other sequences (" + ids +
                                    ") were left out; imported sequence " + std::to_string(seq)));
    }
    if (streams.size() > 1) {
        layout("sequence " + std::to_string(seq) + " has cells in " +
               std::to_string(streams.size()) + " streams; kvscope imports one stream");
        return out;
    }
    if (cells.empty()) {
        layout(f.streams.empty() ? "the state holds no KV cache"
                                 : "sequence " + std::to_string(seq) + " has no cells");
        return out;
    }
    // One sequence holds at most one cell a position, and positions end at the context: a
    // larger count is not this model's state (checked before anything is built from it).
    if (static_cast<int64_t>(cells.size()) > mc.maxContext) {
        layout("sequence " + std::to_string(seq) + " has " + std::to_string(cells.size()) +
               " cells (cell_count); the model's context holds " + std::to_string(mc.maxContext) +
               " positions");
        return out;
    }
    const Stream& st = *cells.front().stream;
    out.source["cache_type"] = {
        {"k", typeName(st.keys.front().type)},
        {"v", st.values.empty() ? "none" : typeName(st.values.front().type)}};
    out.source["v_transposed"] = st.vTrans != 0;
    out.source["cells"] = cells.size();

    // The layout must be the model's, field by field.
    const int64_t H = mc.nKvHeads, D = mc.headDim, row = H * D;
    if (static_cast<int64_t>(st.keys.size()) != mc.nLayers) {
        layout("n_layer is " + std::to_string(st.keys.size()) + "; the model has " +
               std::to_string(mc.nLayers) + " layers");
        return out;
    }
    if (st.values.empty()) {
        layout("the state has no V records (an MLA cache), which kvscope's models do not use");
        return out;
    }
    bool fits = true;
    for (std::size_t l = 0; l < st.keys.size(); ++l) {
        for (const bool isKey : {true, false}) {
            const TensorRecord& r = isKey ? st.keys[l] : st.values[l];
            const CacheType& t = *cacheType(r.type);
            const std::string what = "layer " + std::to_string(l) + (isKey ? " K" : " V");
            if (!isKey && st.vTrans) {
                if (r.nEmbd != row) {
                    layout(what + " n_embd_v_gqa is " + std::to_string(r.nEmbd) + "; the model's " +
                           std::to_string(H) + " KV heads x head_dim " + std::to_string(D) +
                           " make " + std::to_string(row));
                    fits = false;
                }
                continue;
            }
            const uint64_t want = rowBytes(t, row);
            if (want == 0) {
                layout(what + " is " + t.name + ", whose 32-element blocks do not divide the " +
                       std::to_string(row) + " elements of a row");
                fits = false;
            } else if (r.rowSize != want) {
                layout(what + " row size is " + std::to_string(r.rowSize) + " bytes; the model's " +
                       std::to_string(H) + " KV heads x head_dim " + std::to_string(D) + " in " +
                       t.name + " take " + std::to_string(want));
                fits = false;
            }
        }
        if (!fits)
            return out;
    }

    // A block-quantized K that the head size does not align with: llama.cpp's per-head views of
    // such a cache cut through blocks, and its attention saw only zero scores (docs/INTEROP.md:
    // on the q8_0 fixture the keys of layers 1-4 match a uniform-attention forward pass to
    // 0.6-0.8% and a correct one only to 9-22%).
    for (const bool isKey : {true, false}) {
        const TensorRecord& r = isKey ? st.keys.front() : st.values.front();
        const CacheType& t = *cacheType(r.type);
        if (t.quantized() && D % t.blockElems != 0) {
            out.violations.push_back(makeViolation(
                "import.misaligned_blocks",
                file + ": " + (isKey ? "K" : "V") + " is " + t.name + ", whose " +
                    std::to_string(t.blockElems) + "-element blocks do not divide the head size " +
                    std::to_string(D) +
                    ": llama.cpp computed every attention score over this "
                    "cache as 0, so layers above the first hold K/V this model does not compute"));
            break;
        }
    }

    // Cells in position order (the token buffer's order). llama.cpp attends by position, so
    // the order of cells in its ring does not matter to it.
    std::stable_sort(cells.begin(), cells.end(),
                     [](const Selected& a, const Selected& b) { return a.pos < b.pos; });
    const auto T = static_cast<int64_t>(cells.size());
    const uint64_t nCells = st.cells.size();
    const bool interleaved = interleavedKeys(mc);
    const std::string quant = sourceTypeOf(st);

    std::vector<KvCache::RawLayer> raw(st.keys.size());
    std::vector<float> rowBuf(static_cast<std::size_t>(row)), tmp;
    std::vector<float> plane(static_cast<std::size_t>(H * T * D));
    for (std::size_t l = 0; l < st.keys.size(); ++l) {
        for (const bool isKey : {true, false}) {
            const TensorRecord& r = isKey ? st.keys[l] : st.values[l];
            const CacheType& t = *cacheType(r.type);
            const uint8_t* base = f.bytes.data() + r.offset;
            for (int64_t i = 0; i < T; ++i) {
                const uint32_t c = cells[static_cast<std::size_t>(i)].cell;
                if (!isKey && st.vTrans) {
                    for (int64_t j = 0; j < row; ++j)
                        dequantize(t, base + (static_cast<uint64_t>(j) * nCells + c) * r.elSize, 1,
                                   &rowBuf[static_cast<std::size_t>(j)]);
                } else {
                    dequantize(t, base + c * r.rowSize, row, rowBuf.data());
                    if (t.quantized()) {
                        const int64_t chunk = isKey ? hadamardChunk(D) : (D % 64 == 0 ? 64 : 0);
                        if (chunk > 0)
                            hadamard(rowBuf.data(), row, chunk);
                    }
                }
                if (isKey && interleaved)
                    deinterleave(rowBuf.data(), H, D, tmp);
                for (int64_t h = 0; h < H; ++h)
                    std::copy_n(rowBuf.data() + h * D, D, plane.data() + (h * T + i) * D);
            }
            std::vector<uint8_t> bytes(plane.size() * 4);
            std::memcpy(bytes.data(), plane.data(), bytes.size());
            (isKey ? raw[l].key : raw[l].value) = std::move(bytes);
        }
    }
    std::vector<int64_t> positions;
    positions.reserve(cells.size());
    for (const auto& c : cells)
        positions.push_back(c.pos);
    const int64_t next = positions.back() + 1;
    auto cache = KvCache::fromRaw("f32", model.device(), H, D, positions,
                                  std::vector<uint8_t>(cells.size(), 1), raw);
    if (!cache) {
        layout(cache.message());
        return out;
    }
    KvCache kv = std::move(cache).value();
    // In the cache dtype of the model's sessions: a llama.cpp f16 cache imported by a model
    // loaded with --cache-dtype f16 keeps its values bit for bit.
    if (model.cacheDtype() != "f32")
        kv = kv.convertedTo(model.cacheDtype());

    Session session(modelPtr, kv, f.tokens, next, {});
    // The last step's logits: llama.cpp does not store them. Recomputed when the tokens and
    // the cells agree (else the validation core names the mismatch and nothing is invented).
    std::vector<float> logits;
    std::string logitsNote = "recomputed from the cache";
    const bool idsOk = std::all_of(f.tokens.begin(), f.tokens.end(),
                                   [&](int32_t t) { return t >= 0 && t < mc.vocabSize; });
    if (static_cast<int64_t>(f.tokens.size()) == T && idsOk) {
        auto r = session.recomputeLastStep();
        if (r)
            logits = std::move(r).value();
        else
            logitsNote = "absent (recomputing them failed: " + r.message() + ")";
    } else {
        logitsNote = "absent (the tokens do not match the cells)";
    }

    CaptureOptions co;
    co.operation = "import";
    PromptMeta pm;
    pm.bosId = mc.bosId;
    pm.bosHandling = !f.tokens.empty() && f.tokens[0] == mc.bosId ? "explicit" : "none";
    if (!f.tokens.empty())
        pm.segments.push_back({0, static_cast<int64_t>(f.tokens.size()), "", "unsegmented", -1});
    co.prompt = pm;
    co.parameters = out.source;
    co.parameters["logits"] = logits.empty() ? "absent" : "recomputed";
    co.parameters["absent"] = {"model identity", "sampler", "prompt boundaries"};
    auto snap = capture(session, co);
    if (!snap) {
        layout(snap.message());
        return out;
    }
    Snapshot s = std::move(snap).value();
    s.lastLogits = std::move(logits);
    s.cacheSourceType = quant;
    out.violations.push_back(makeViolation(
        "import.absent",
        "llama.cpp stored no model identity, logits, sampler or prompt boundaries: the state is "
        "bound to " +
            std::filesystem::path(model.path()).filename().string() +
            " and checked against it by its layer-0 keys (cache.provenance); the last logits are " +
            logitsNote));
    out.source["cache_source_type"] = quant;
    out.snapshot = std::move(s);
    return out;
}

Result<std::vector<uint8_t>> exportSequence(const Snapshot& s, const ExportOptions& o) {
    return catchToResult([&]() -> std::vector<uint8_t> {
        const CacheType* kt = cacheTypeByName(o.keyType);
        const CacheType* vt = cacheTypeByName(o.valueType);
        if (!kt || !vt)
            throw KvError(std::string(kt ? "value type" : "key type") + " '" +
                          (kt ? o.valueType : o.keyType) +
                          "' is not a cache type llama.cpp writes (f32, f16, bf16, q8_0, q4_0, "
                          "q4_1, q5_0, q5_1, iq4_nl)");
        if (o.transposeValues && vt->quantized())
            throw KvError(std::string("llama.cpp never transposes a ") + vt->name +
                          " V (quantized V needs flash attention)");
        const int64_t T = s.cacheLength, H = s.kvHeads, D = s.headDim, row = H * D;
        if (std::count(s.config.slidingLayers.begin(), s.config.slidingLayers.end(), true) > 0)
            throw KvError("the snapshot's model (" + s.config.hfArchitecture +
                          ") has sliding-window layers: llama.cpp keeps those in a second cache "
                          "of the window's cells (iSWA), which this export does not write");
        if (T <= 0)
            throw KvError("the snapshot's cache is empty: nothing to export");
        requireVisibleToEveryHead(s, "a llama.cpp state");
        if (static_cast<int64_t>(s.tokens.size()) != T)
            throw KvError("the snapshot has " + std::to_string(s.tokens.size()) + " tokens but " +
                          std::to_string(T) +
                          " cached positions; a llama.cpp state needs one cell per token");
        if (static_cast<int64_t>(s.positions.size()) != T ||
            static_cast<int64_t>(s.mask.size()) != T)
            throw KvError("the snapshot's positions or mask do not cover its cache");
        for (int64_t i = 0; i < T; ++i) {
            if (s.mask[static_cast<std::size_t>(i)] != 1)
                throw KvError("cache slot " + std::to_string(i) +
                              " is masked; llama.cpp has no mask, so the cell would be seen");
            if (s.positions[static_cast<std::size_t>(i)] < 0 ||
                s.positions[static_cast<std::size_t>(i)] > INT32_MAX)
                throw KvError("position " +
                              std::to_string(s.positions[static_cast<std::size_t>(i)]) +
                              " of slot " + std::to_string(i) + " does not fit llama.cpp's int32");
        }
        if (rowBytes(*kt, row) == 0 || rowBytes(*vt, row) == 0)
            throw KvError("a row of " + std::to_string(row) +
                          " elements is not a whole number of 32-element blocks");
        const std::size_t es = s.cacheDtype == "f32" ? 4 : 2;
        if (s.expectedLayerBytes() == 0 || s.cacheDtype.empty())
            throw KvError("the snapshot's cache has no bytes");
        for (const auto& l : s.layers)
            if (!l.key || !l.value || l.key->size() != s.expectedLayerBytes() ||
                l.value->size() != s.expectedLayerBytes())
                throw KvError("a layer's K/V bytes do not match the cache shape");

        std::vector<uint8_t> out;
        auto put = [&](const void* p, std::size_t n) {
            const auto* b = static_cast<const uint8_t*>(p);
            out.insert(out.end(), b, b + n);
        };
        auto u32 = [&](uint32_t v) { put(&v, 4); };
        auto i32 = [&](int32_t v) { put(&v, 4); };
        auto u64 = [&](uint64_t v) { put(&v, 8); };
        u32(0x67677371u);
        u32(3);
        u32(static_cast<uint32_t>(T));
        for (int32_t t : s.tokens)
            i32(t);
        u32(1); // n_stream
        u32(static_cast<uint32_t>(T));
        for (int64_t i = 0; i < T; ++i) {
            i32(static_cast<int32_t>(s.positions[static_cast<std::size_t>(i)]));
            u32(1);
            i32(o.sequence);
        }
        u32(o.transposeValues ? 1 : 0);
        u32(static_cast<uint32_t>(s.layers.size()));

        const bool interleaved = interleavedKeys(s.config);
        auto asFloat = [&](std::span<const uint8_t> b, uint64_t idx) {
            if (es == 4) {
                float f;
                std::memcpy(&f, b.data() + idx * 4, 4);
                return f;
            }
            uint16_t h;
            std::memcpy(&h, b.data() + idx * 2, 2);
            return s.cacheDtype == "f16" ? fp16ToFloat(h) : bf16ToFloat(h);
        };
        std::vector<float> rowBuf(static_cast<std::size_t>(row)), tmp;
        std::vector<uint8_t> enc;
        auto cellRow = [&](std::span<const uint8_t> b, int64_t i) {
            for (int64_t h = 0; h < H; ++h)
                for (int64_t d = 0; d < D; ++d)
                    rowBuf[static_cast<std::size_t>(h * D + d)] =
                        asFloat(b, static_cast<uint64_t>((h * T + i) * D + d));
        };
        for (const auto& l : s.layers) {
            i32(kt->id);
            const uint64_t rb = rowBytes(*kt, row);
            u64(rb);
            enc.resize(rb);
            for (int64_t i = 0; i < T; ++i) {
                cellRow(*l.key, i);
                if (interleaved)
                    interleave(rowBuf.data(), H, D, tmp);
                if (kt->quantized() && hadamardChunk(D) > 0)
                    hadamard(rowBuf.data(), row, hadamardChunk(D));
                quantize(*kt, rowBuf.data(), row, enc.data());
                put(enc.data(), enc.size());
            }
        }
        for (const auto& l : s.layers) {
            i32(vt->id);
            if (o.transposeValues) {
                u32(static_cast<uint32_t>(vt->blockBytes));
                u32(static_cast<uint32_t>(row));
                std::vector<float> all(static_cast<std::size_t>(row * T));
                for (int64_t i = 0; i < T; ++i) {
                    cellRow(*l.value, i);
                    for (int64_t j = 0; j < row; ++j)
                        all[static_cast<std::size_t>(j * T + i)] =
                            rowBuf[static_cast<std::size_t>(j)];
                }
                enc.resize(all.size() * static_cast<std::size_t>(vt->blockBytes));
                quantize(*vt, all.data(), static_cast<int64_t>(all.size()), enc.data());
                put(enc.data(), enc.size());
                continue;
            }
            const uint64_t rb = rowBytes(*vt, row);
            u64(rb);
            enc.resize(rb);
            for (int64_t i = 0; i < T; ++i) {
                cellRow(*l.value, i);
                if (vt->quantized() && D % 64 == 0)
                    hadamard(rowBuf.data(), row, 64);
                quantize(*vt, rowBuf.data(), row, enc.data());
                put(enc.data(), enc.size());
            }
        }
        return out;
    });
}

} // namespace kvscope::state::llamacpp
