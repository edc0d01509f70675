#include "tokenizer/scoremerge.h"

#include <queue>

namespace kvscope::tok {

namespace {
struct Node {
    int prev;
    int next;
    bool alive;
    uint32_t version; // bumped on every merge into this node: stale heap entries are skipped
};
struct Candidate {
    float score;
    int left; // node index; nodes keep their original order, so smaller == further left
    int right;
    uint32_t leftVersion;
    uint32_t rightVersion;
    int32_t id;
    bool operator<(const Candidate& o) const {
        // priority_queue pops the largest: highest score, then leftmost.
        if (score != o.score)
            return score < o.score;
        return left > o.left;
    }
};
} // namespace

std::vector<ScoredSymbol> mergeByScore(std::vector<ScoredSymbol> symbols, const PieceLookup& lookup,
                                       float minScore) {
    const int n = static_cast<int>(symbols.size());
    if (n < 2)
        return symbols;
    std::vector<Node> nodes(n);
    for (int i = 0; i < n; ++i)
        nodes[i] = {i - 1, i + 1 < n ? i + 1 : -1, true, 0};
    std::priority_queue<Candidate> heap;
    std::string buffer;
    auto consider = [&](int left, int right) {
        if (left < 0 || right < 0)
            return;
        buffer = symbols[left].text;
        buffer += symbols[right].text;
        const auto piece = lookup(buffer);
        if (!piece || !(piece->score > minScore))
            return;
        heap.push(
            {piece->score, left, right, nodes[left].version, nodes[right].version, piece->id});
    };
    for (int i = 0; i + 1 < n; ++i)
        consider(i, i + 1);
    while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        Node& l = nodes[c.left];
        Node& r = nodes[c.right];
        if (!l.alive || !r.alive || l.next != c.right || l.version != c.leftVersion ||
            r.version != c.rightVersion)
            continue;
        symbols[c.left].text += symbols[c.right].text;
        symbols[c.left].id = c.id;
        ++l.version;
        r.alive = false;
        l.next = r.next;
        if (r.next >= 0)
            nodes[r.next].prev = c.left;
        consider(l.prev, c.left);
        consider(c.left, l.next);
    }
    std::vector<ScoredSymbol> out;
    for (int i = 0; i >= 0; i = nodes[i].next)
        out.push_back(std::move(symbols[i]));
    return out;
}

} // namespace kvscope::tok
