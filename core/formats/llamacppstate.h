// llama.cpp state files: the byte layout of `ggsq` (llama_state_seq_save_file, v3), `ggsn`
// (llama_state_save_file, v10) and llama-server slot files (a ggsq whose token list is the
// server's packed blob), the cache element types llama.cpp allows and their block codes, and the
// Hadamard rotation llama.cpp applies to quantized caches. docs/INTEROP.md describes the layout.
//
// Reading is defensive: every count and size is checked against the bytes left before anything
// is allocated from it; errors name the file, the field and its byte offset. Turning a state into
// a kvscope snapshot (which needs the model) is state/interop/llamacpp.h.
//
// Thread-safety: free functions over values.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::llamacpp {

// --- cache element types (ggml type ids llama.cpp accepts for a KV cache) ---

struct CacheType {
    int32_t id;
    const char* name;   // "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"
    int32_t blockElems; // elements per block (1 for f32/f16/bf16)
    int32_t blockBytes; // bytes per block
    bool quantized() const { return blockElems > 1; }
};
// nullptr when `id` is not a type llama.cpp allows for a cache.
const CacheType* cacheType(int32_t id);
const CacheType* cacheTypeByName(std::string_view name);
// Bytes of a row of `n` elements, or 0 when n is not a whole number of blocks.
uint64_t rowBytes(const CacheType& t, int64_t n);
// Decodes `n` elements (a whole number of blocks) starting at `src` into floats.
void dequantize(const CacheType& t, const uint8_t* src, int64_t n, float* dst);
// Encodes `n` floats (a whole number of blocks): round to nearest with the block scale taken
// from its extreme values, as ggml's reference quantizers do (iq4_nl: nearest level only).
void quantize(const CacheType& t, const float* src, int64_t n, uint8_t* dst);

// The orthonormal Sylvester–Walsh–Hadamard transform, in place, over consecutive chunks of
// `chunk` (a power of two) elements. Its own inverse. llama.cpp applies it to quantized K (and V)
// before caching them (see docs/INTEROP.md).
void hadamard(float* x, int64_t n, int64_t chunk);
// The chunk llama.cpp rotates keys with for a head size, or 0 when it does not rotate:
// the largest power of two >= 64 dividing headDim.
int64_t hadamardChunk(int64_t headDim);

// --- the file ---

enum class Kind { Sequence, Session, Slot };
std::string kindName(Kind k); // "ggsq" | "ggsn" | "slot"

// True when the file starts with a llama.cpp state magic ("qsgg" or "nsgg" on disk).
bool isStateFile(const std::string& path);
bool isStateBytes(std::span<const uint8_t> head);

struct Cell {
    int32_t pos = 0;
    std::vector<int32_t> seqIds;
};

struct TensorRecord {
    int32_t type = -1;
    uint64_t rowSize = 0; // plain rows: bytes per cell
    uint32_t elSize = 0;  // transposed V: bytes per element
    uint32_t nEmbd = 0;   // transposed V: elements per cell
    uint64_t offset = 0;  // where the data starts in the file
    uint64_t bytes = 0;
    uint64_t headerOffset = 0; // where the record starts (for messages)
};

struct Stream {
    uint32_t index = 0;
    std::vector<Cell> cells;
    uint32_t vTrans = 0;
    std::vector<TensorRecord> keys, values; // one per layer
    uint64_t offset = 0;
};

struct StateFile {
    std::string name; // the path, for messages
    Kind kind = Kind::Sequence;
    uint32_t version = 0;
    std::vector<int32_t> tokens; // unpacked for slot files
    uint32_t slotVersion = 0;    // slot files: the packed blob's version
    std::string arch;            // ggsn only
    std::vector<Stream> streams;
    uint64_t used = 0;          // bytes the state occupies; the rest are trailing bytes
    std::string hash;           // XXH3-64 of the whole file
    std::vector<uint8_t> bytes; // the whole file (records point into it)
};

// Parses a whole file already in memory. Errors name `name`, the field and its offset.
Result<StateFile> parse(std::vector<uint8_t> bytes, const std::string& name);
Result<StateFile> read(const std::string& path);

} // namespace kvscope::llamacpp
