#include "tokenizer/bpemodel.h"

#include "tokenizer/unicode.h"

#include "util/status.h"

#include <algorithm>
#include <cstdio>
#include <queue>

namespace kvscope::tok {

BpeModel::BpeModel(TokenIndex vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& where)
    : m_vocab(std::move(vocab)), m_options(std::move(options)) {
    int32_t maxId = -1;
    for (const auto& [piece, id] : m_vocab)
        maxId = std::max(maxId, id);
    m_pieces.resize(static_cast<std::size_t>(maxId + 1));
    m_hasPiece.assign(m_pieces.size(), false);
    for (const auto& [piece, id] : m_vocab) {
        m_pieces[id] = piece;
        m_hasPiece[id] = true;
    }
    if (m_options.unkToken) {
        if (const auto id = find(*m_options.unkToken))
            m_unkId = *id;
        else
            throw KvError(where + ": unk_token '" + *m_options.unkToken + "' is not in the vocab");
    }
    m_byteIds.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (const auto id = find(name))
            m_byteIds[b] = *id;
    }
    const std::size_t prefixLen = m_options.continuingSubwordPrefix.size();
    std::size_t capacity = 16;
    while (capacity < merges.size() * 2)
        capacity *= 2;
    m_mergeTable.assign(capacity, Slot{});
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        // Named references, not a structured binding: clang before 16 (the fuzz build) cannot
        // capture bindings in a lambda.
        const std::string& a = merges[rank].first;
        const std::string& b = merges[rank].second;
        auto fail = [&](const std::string& piece) {
            throw KvError(where + ".merges[" + std::to_string(rank) + "] (\"" + a + " " + b +
                          "\"): '" + piece + "' is not in the vocab");
        };
        const auto ida = find(a);
        if (!ida)
            fail(a);
        const auto idb = find(b);
        if (!idb)
            fail(b);
        if (b.size() < prefixLen)
            fail(b);
        const std::string merged = a + b.substr(prefixLen);
        const auto idm = find(merged);
        if (!idm)
            fail(merged);
        // Like HF (a HashMap built in order), a repeated pair keeps its last rank.
        insertMerge(key(*ida, *idb), Merge{static_cast<int32_t>(rank), *idm});
    }
}

std::optional<int32_t> BpeModel::find(std::string_view piece) const {
    const auto it = m_vocab.find(piece);
    return it == m_vocab.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

const std::string* BpeModel::piece(int32_t id) const {
    return id >= 0 && id < idLimit() && m_hasPiece[id] ? &m_pieces[id] : nullptr;
}

namespace {
inline std::size_t mix(uint64_t x) { // splitmix64 finalizer
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return static_cast<std::size_t>(x);
}
} // namespace

std::vector<std::pair<int32_t, int32_t>> BpeModel::mergesByRank() const {
    std::vector<std::pair<int32_t, uint64_t>> ranked; // rank, key
    for (const Slot& s : m_mergeTable)
        if (s.key != kEmpty)
            ranked.emplace_back(s.merge.rank, s.key);
    std::sort(ranked.begin(), ranked.end());
    std::vector<std::pair<int32_t, int32_t>> out;
    out.reserve(ranked.size());
    for (const auto& [rank, k] : ranked)
        out.emplace_back(static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu));
    return out;
}

void BpeModel::insertMerge(uint64_t k, Merge m) {
    const std::size_t mask = m_mergeTable.size() - 1;
    for (std::size_t i = mix(k) & mask;; i = (i + 1) & mask) {
        Slot& s = m_mergeTable[i];
        if (s.key == kEmpty || s.key == k) {
            s.key = k;
            s.merge = m;
            return;
        }
    }
}

const BpeModel::Merge* BpeModel::findMerge(int32_t a, int32_t b) const {
    if (m_mergeTable.empty())
        return nullptr;
    const uint64_t k = key(a, b);
    const std::size_t mask = m_mergeTable.size() - 1;
    for (std::size_t i = mix(k) & mask;; i = (i + 1) & mask) {
        const Slot& s = m_mergeTable[i];
        if (s.key == k)
            return &s.merge;
        if (s.key == kEmpty)
            return nullptr;
    }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty())
        return;
    if (m_options.ignoreMerges)
        if (const auto id = find(word)) {
            out.push_back(*id);
            return;
        }
    // Initial symbols: one per character.
    std::vector<int32_t> ids;
    int32_t pendingUnk = -1; // a fused unk run is emitted when a known symbol follows
    std::string s;
    for (std::size_t i = 0; i < word.size();) {
        const std::size_t begin = i;
        uni::next(word, i);
        s.assign(word.substr(begin, i - begin));
        if (begin > 0 && !m_options.continuingSubwordPrefix.empty())
            s.insert(0, m_options.continuingSubwordPrefix);
        if (i == word.size() && !m_options.endOfWordSuffix.empty())
            s += m_options.endOfWordSuffix;
        if (const auto id = find(s)) {
            if (pendingUnk >= 0)
                ids.push_back(pendingUnk);
            pendingUnk = -1;
            ids.push_back(*id);
            continue;
        }
        if (m_options.byteFallback) {
            bool all = true;
            for (unsigned char b : s)
                all = all && m_byteIds[b] >= 0;
            if (all) {
                // HF adds the byte tokens without flushing a pending unk first.
                for (unsigned char b : s)
                    ids.push_back(m_byteIds[b]);
                continue;
            }
        }
        if (m_unkId >= 0) {
            if (pendingUnk >= 0 && !m_options.fuseUnk)
                ids.push_back(pendingUnk);
            pendingUnk = m_unkId;
        }
    }
    if (pendingUnk >= 0)
        ids.push_back(pendingUnk);

    const int n = static_cast<int>(ids.size());
    if (n > 1) {
        struct Candidate {
            int32_t rank;
            int pos;
            int32_t id;
            bool operator<(const Candidate& o) const { // min-heap on (rank, pos)
                return rank != o.rank ? rank > o.rank : pos > o.pos;
            }
        };
        std::vector<int> next(n), prev(n);
        std::vector<bool> alive(n, true);
        for (int k = 0; k < n; ++k) {
            prev[k] = k - 1;
            next[k] = k + 1 < n ? k + 1 : -1;
        }
        std::priority_queue<Candidate> heap;
        for (int k = 0; k + 1 < n; ++k)
            if (const Merge* m = findMerge(ids[k], ids[k + 1]))
                heap.push({m->rank, k, m->id});
        while (!heap.empty()) {
            const Candidate c = heap.top();
            heap.pop();
            if (!alive[c.pos] || next[c.pos] < 0)
                continue;
            const int right = next[c.pos];
            const Merge* m = findMerge(ids[c.pos], ids[right]);
            if (!m || m->id != c.id)
                continue; // stale: a neighbour changed since this pair was queued
            ids[c.pos] = c.id;
            alive[right] = false;
            next[c.pos] = next[right];
            if (next[right] >= 0)
                prev[next[right]] = c.pos;
            if (prev[c.pos] >= 0)
                if (const Merge* pm = findMerge(ids[prev[c.pos]], ids[c.pos]))
                    heap.push({pm->rank, prev[c.pos], pm->id});
            if (next[c.pos] >= 0)
                if (const Merge* nm = findMerge(ids[c.pos], ids[next[c.pos]]))
                    heap.push({nm->rank, c.pos, nm->id});
        }
        for (int k = 0; k >= 0; k = next[k])
            out.push_back(ids[k]);
        return;
    }
    out.insert(out.end(), ids.begin(), ids.end());
}

} // namespace kvscope::tok
