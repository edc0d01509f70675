// llama.cpp state files taken apart and put back together, so that a case can lie in one
// field while every other byte stays consistent (the layout is docs/INTEROP.md's
// "The files"): the token list, then one KV-cache stream (cell records, then per layer a K
// and a V record) — wrapped as a ggsq sequence file, a ggsn session file (with its
// architecture string) or a llama-server slot file (a ggsq whose token list is the server's
// packed blob).
#pragma once

#include "bytes.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::hostile {

struct StateCell {
    std::int32_t pos = 0;
    std::vector<std::int32_t> seqIds{0};
};

struct StateRecord {
    std::int32_t type = 1; // ggml type id (1: f16)
    std::uint64_t rowSize = 0;
    Bytes data; // cells x rowSize bytes
};

// One stream of a plain llama_kv_cache::state_write (untransposed V only).
struct StateBody {
    std::uint32_t nStream = 1;
    std::vector<StateCell> cells;
    std::uint32_t vTrans = 0;
    std::vector<StateRecord> keys, values; // one per layer

    Bytes bytes() const;
    // Parses the body of an untransposed single-stream state starting at `at`.
    static StateBody parse(const Bytes& file, std::size_t at);
    // Keeps the first `bytes` of every row of every record (fewer KV heads: 16 bytes per f16
    // head of 8).
    void cutRows(std::uint64_t bytes);
};

// A state file taken apart: its tokens and its body.
struct StateParts {
    std::vector<std::int32_t> tokens;
    StateBody body;
    static StateParts fromGgsq(const Bytes& file);
};

Bytes ggsqFile(const std::vector<std::int32_t>& tokens, const StateBody& body,
               std::uint32_t version = 3);
Bytes ggsnFile(const std::vector<std::int32_t>& tokens, const StateBody& body,
               const std::string& arch = "llama", std::uint32_t version = 10);
// The server's packed token blob: -1, version, n, tokens, media count, media records
// (each u32 length + bytes), zero padding to 4 bytes. Media starts come after the count.
struct SlotBlob {
    std::int32_t marker = -1;
    std::uint32_t version = 1;
    std::vector<std::int32_t> tokens;
    std::uint32_t mediaCount = 0;
    std::vector<std::uint32_t> mediaStarts;
    std::vector<Bytes> media;
    Bytes words() const;
};
Bytes slotFile(const SlotBlob& blob, const StateBody& body);
// A slot file around packed words given as bytes (n_token = their count / 4).
Bytes slotFileWords(const Bytes& words, const StateBody& body);

} // namespace kvscope::hostile
