// Byte-pair-encoding model with merge ranks (internal), as HF tokenizers' models::bpe::BPE:
// split a pre-token into characters (byte fallback / unk for unknown ones), then apply the
// lowest-rank merge first (leftmost on ties) until no merge applies. Pair lookups are hash
// lookups on (left id, right id) and the merge loop uses a heap: O(n log n) per word.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvscope::tok {

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
    std::optional<std::string> unkToken;
    std::string continuingSubwordPrefix;
    std::string endOfWordSuffix;
    bool fuseUnk = false;
    bool byteFallback = false;
    bool ignoreMerges = false;
};

class BpeModel {
public:
    // vocab: piece -> id. merges: pairs in rank order. `where` prefixes error messages
    // ("tokenizer.json: model.merges"). Throws KvError on a merge with an unknown piece.
    BpeModel(TokenIndex vocab, const std::vector<std::pair<std::string, std::string>>& merges,
             BpeOptions options, const std::string& where);

    void tokenize(std::string_view word, std::vector<int32_t>& out) const;

    std::optional<int32_t> find(std::string_view piece) const;
    const std::string* piece(int32_t id) const; // nullptr when id is not in the vocab
    int32_t idLimit() const { return static_cast<int32_t>(m_pieces.size()); }
    const BpeOptions& options() const { return m_options; }
    // The merges as (left id, right id) in rank order; a pair listed twice appears once, at
    // the rank it kept (for exporting the model back to a tokenizer.json).
    std::vector<std::pair<int32_t, int32_t>> mergesByRank() const;

private:
    struct Merge {
        int32_t rank;
        int32_t id;
    };
    static uint64_t key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    const Merge* findMerge(int32_t a, int32_t b) const;
    void insertMerge(uint64_t key, Merge m);

    TokenIndex m_vocab;
    std::vector<std::string> m_pieces;
    std::vector<bool> m_hasPiece;
    // Open addressing (linear probing, power-of-two size): 280k merges without a node
    // allocation each. An empty slot has key kEmpty (a pair of two -1 ids never occurs).
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    struct Slot {
        uint64_t key = kEmpty;
        Merge merge{};
    };
    std::vector<Slot> m_mergeTable;
    BpeOptions m_options;
    int32_t m_unkId = -1;
    std::vector<int32_t> m_byteIds; // <0xNN> ids, -1 when absent
};

} // namespace kvscope::tok
