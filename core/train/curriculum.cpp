#include "train/curriculum.h"

#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace kvscope::train {

namespace {

bool lower(char c) {
    return c >= 'a' && c <= 'z';
}
bool upper(char c) {
    return c >= 'A' && c <= 'Z';
}
bool allOf(std::string_view s, bool (*pred)(char)) {
    return !s.empty() && std::all_of(s.begin(), s.end(), pred);
}
bool letter(char c) {
    return lower(c) || upper(c);
}

size_t pick(std::mt19937_64& rng, size_t n) {
    return static_cast<size_t>(rng() % n);
}

} // namespace

TokenPools buildTokenPools(const tok::Tokenizer& tokenizer, std::span<const int32_t> corpus) {
    TokenPools pools;
    const int32_t vocab = tokenizer.vocabSize();
    std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
    for (int32_t id : corpus)
        if (id >= 0 && id < vocab)
            ++counts[static_cast<size_t>(id)];
    std::unordered_map<std::string, int32_t> byText;
    std::vector<std::pair<int32_t, std::string>> capitalised;
    for (int32_t id = 0; id < vocab; ++id) {
        if (tokenizer.isSpecial(id))
            continue;
        const std::string text = tokenizer.decode(std::span<const int32_t>(&id, 1));
        byText.emplace(text, id);
        const std::string_view rest = text.size() > 1 ? std::string_view(text).substr(1) : "";
        if (text.size() >= 3 && text[0] == ' ' && upper(text[1])) {
            if (allOf(rest, letter))
                capitalised.emplace_back(id, text);
            if (allOf(rest.substr(1), lower))
                pools.nameStarts.push_back(id);
        } else if (text.size() >= 3 && text[0] == ' ' && allOf(rest, lower)) {
            pools.words.push_back(id);
        } else if (text.size() >= 2 && text.size() <= 4 && allOf(text, lower)) {
            pools.namePieces.push_back(id);
        }
    }
    for (const auto& [id, text] : capitalised) {
        std::string low = text;
        std::transform(low.begin(), low.end(), low.begin(),
                       [](char c) { return upper(c) ? static_cast<char>(c - 'A' + 'a') : c; });
        const auto it = byText.find(low);
        const int64_t lowCount = it == byText.end() ? 0 : counts[static_cast<size_t>(it->second)];
        const int64_t capCount = counts[static_cast<size_t>(id)];
        if (capCount >= 8 && capCount >= 10 * lowCount)
            pools.properNouns.insert(id);
    }
    return pools;
}

int64_t CurriculumRow::recallCount() const {
    return std::accumulate(recall.begin(), recall.end(), int64_t{0});
}

CurriculumRow naturalRow(std::span<const int32_t> src, int64_t T) {
    const auto n = static_cast<size_t>(T);
    CurriculumRow row;
    row.tokens.assign(src.begin(), src.begin() + static_cast<long>(std::min(n, src.size())));
    row.tokens.resize(n, src.empty() ? 0 : src.back());
    row.scored.assign(n, 1);
    row.recall.assign(n, 0);
    return row;
}

CurriculumRow renamedRow(std::span<const int32_t> src, int64_t T, const TokenPools& pools,
                         std::mt19937_64& rng, int maxNames) {
    const auto n = static_cast<size_t>(T);
    const auto window = src.first(std::min(n, src.size()));
    // The window's recurring proper nouns, in order of first appearance.
    std::unordered_map<int32_t, int> seen;
    std::vector<int32_t> recurring;
    for (int32_t id : window)
        if (pools.properNouns.count(id) && ++seen[id] == 2)
            recurring.push_back(id);
    if (recurring.empty() || !pools.usable())
        return naturalRow(src, T);
    std::shuffle(recurring.begin(), recurring.end(), rng);
    recurring.resize(std::min(recurring.size(), static_cast<size_t>(std::max(1, maxNames))));

    // An invented name per replaced noun: a capitalised start no other name (and no token of
    // the window) uses, then 0-2 lower-case pieces.
    std::unordered_map<int32_t, std::vector<int32_t>> names;
    std::unordered_set<int32_t> used(window.begin(), window.end());
    for (int32_t noun : recurring) {
        int32_t start = pools.nameStarts[pick(rng, pools.nameStarts.size())];
        for (int tries = 0; used.count(start) && tries < 16; ++tries)
            start = pools.nameStarts[pick(rng, pools.nameStarts.size())];
        used.insert(start);
        std::vector<int32_t> name{start};
        const size_t pieces = pick(rng, 3);
        for (size_t i = 0; i < pieces; ++i)
            name.push_back(pools.namePieces[pick(rng, pools.namePieces.size())]);
        names.emplace(noun, std::move(name));
    }

    CurriculumRow row;
    std::unordered_set<int32_t> mentioned;
    for (size_t i = 0; i < window.size() && row.tokens.size() < n; ++i) {
        const auto it = names.find(window[i]);
        if (it == names.end()) {
            row.tokens.push_back(window[i]);
            row.scored.push_back(1);
            row.recall.push_back(0);
            continue;
        }
        const bool again = !mentioned.insert(window[i]).second;
        for (int32_t id : it->second) {
            row.tokens.push_back(id);
            row.scored.push_back(again ? 1 : 0);
            row.recall.push_back(again ? 1 : 0);
        }
    }
    row.tokens.resize(n);
    row.scored.resize(n);
    row.recall.resize(n);
    return row;
}

CurriculumRow repeatedRow(std::span<const int32_t> src, int64_t T, const TokenPools& pools,
                          std::mt19937_64& rng, SegmentRepeats repeats) {
    CurriculumRow row = naturalRow(src, T);
    if (!pools.usable())
        return row;
    const size_t n = std::min(src.size(), static_cast<size_t>(T));
    auto draw = [&](int64_t length) {
        // Tokens drawn from the window itself: the corpus's own mix of words, names, word
        // pieces and punctuation (a copying circuit trained on one class of tokens need not
        // copy the others), in an order no language model predicts.
        std::vector<int32_t> segment(static_cast<size_t>(length));
        for (auto& id : segment)
            id = src[pick(rng, n)];
        return segment;
    };
    auto between = [&](int64_t lo, int64_t hi) { // uniform in [lo, hi]
        return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    };
    if (repeats == SegmentRepeats::Fill) {
        const int64_t maxLen = std::min<int64_t>(16, T / 4);
        if (maxLen < 4)
            return row;
        const int64_t L = between(std::min<int64_t>(4, maxLen), maxLen);
        // Natural text up to `start`, then the segment over and over. The segment starts
        // near the window's beginning: an untrained attention head spreads over all earlier
        // positions, so the earlier a repetition, the stronger the gradient towards the
        // previous-token and induction heads.
        const int64_t start = between(0, std::min<int64_t>(16, T / 8));
        const auto segment = draw(L);
        for (int64_t t = start; t < T; ++t) {
            const auto i = static_cast<size_t>(t);
            const int64_t k = t - start; // index into the repetition
            row.tokens[i] = segment[static_cast<size_t>(k % L)];
            // Not scored: the first copy, and the first token of the second (nothing says yet
            // that the segment repeats).
            const bool predictable = k > L;
            row.scored[i] = predictable ? 1 : 0;
            row.recall[i] = predictable ? 1 : 0;
        }
        return row;
    }
    // Twice: one earlier mention, natural text around and between, as a name or a phrase
    // recurs in real text.
    const int64_t maxLen = std::min<int64_t>(32, (T - 2) / 3);
    if (maxLen < 4)
        return row;
    const int64_t L = between(std::min<int64_t>(8, maxLen), maxLen);
    const int64_t p1 = between(0, T - 2 * L - 1);
    const int64_t p2 = between(p1 + L + 1, T - L);
    const auto segment = draw(L);
    for (int64_t i = 0; i < L; ++i) {
        const auto a = static_cast<size_t>(p1 + i), b = static_cast<size_t>(p2 + i);
        row.tokens[a] = row.tokens[b] = segment[static_cast<size_t>(i)];
        row.scored[a] = 0;
        row.scored[b] = i > 0 ? 1 : 0;
        row.recall[b] = i > 0 ? 1 : 0;
    }
    return row;
}

} // namespace kvscope::train
