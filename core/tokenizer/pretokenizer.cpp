// HF pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, Sequence.
#include "tokenizer/hfcomponents.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

#include "util/status.h"

namespace kvscope::tok::hf {

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parseBehavior(const Json& j, const std::string& where, Behavior fallback) {
    if (!j.contains("behavior"))
        return fallback;
    const std::string b = getString(j, "behavior", where);
    if (b == "Removed")
        return Behavior::Removed;
    if (b == "Isolated")
        return Behavior::Isolated;
    if (b == "MergedWithPrevious")
        return Behavior::MergedWithPrevious;
    if (b == "MergedWithNext")
        return Behavior::MergedWithNext;
    if (b == "Contiguous")
        return Behavior::Contiguous;
    throw KvError(where + ".behavior: unknown split behavior '" + b + "'");
}

struct Region {
    std::size_t begin, end;
    bool match;
};

// Regions covering all of s from a list of matches (HF Pattern::find_matches).
std::vector<Region> regionsFromMatches(std::size_t size,
                                       const std::vector<std::pair<std::size_t, std::size_t>>& m) {
    std::vector<Region> out;
    if (size == 0)
        return {{0, 0, false}};
    std::size_t prev = 0;
    for (const auto& [b, e] : m) {
        if (prev != b)
            out.push_back({prev, b, false});
        out.push_back({b, e, true});
        prev = e;
    }
    if (prev != size)
        out.push_back({prev, size, false});
    return out;
}

// Each character that satisfies pred is its own match (HF's Pattern for Fn(char) -> bool).
template <typename Pred> std::vector<Region> regionsFromChars(std::string_view s, Pred pred) {
    std::vector<Region> out;
    if (s.empty())
        return {{0, 0, false}};
    std::size_t last = 0;
    for (std::size_t i = 0; i < s.size();) {
        const std::size_t b = i;
        const char32_t c = uni::next(s, i);
        if (pred(c)) {
            if (last < b)
                out.push_back({last, b, false});
            out.push_back({b, i, true});
            last = i;
        }
    }
    if (last < s.size())
        out.push_back({last, s.size(), false});
    return out;
}

// HF NormalizedString::split: applies the behavior, then drops empty pieces.
void splitPiece(const Piece& p, std::vector<Region> r, Behavior behavior, bool invert,
                Pieces& out) {
    if (invert)
        for (auto& x : r)
            x.match = !x.match;
    std::vector<Region> kept;
    switch (behavior) {
    case Behavior::Removed:
        for (const auto& x : r)
            if (!x.match)
                kept.push_back(x);
        break;
    case Behavior::Isolated:
        kept = r;
        break;
    case Behavior::MergedWithPrevious: {
        bool previousMatch = false;
        for (const auto& x : r) {
            if (x.match && !previousMatch && !kept.empty())
                kept.back().end = x.end;
            else
                kept.push_back(x);
            previousMatch = x.match;
        }
        break;
    }
    case Behavior::MergedWithNext: {
        bool previousMatch = false;
        for (auto it = r.rbegin(); it != r.rend(); ++it) {
            if (it->match && !previousMatch && !kept.empty())
                kept.back().begin = it->begin;
            else
                kept.push_back(*it);
            previousMatch = it->match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
    }
    case Behavior::Contiguous: {
        bool previousMatch = false;
        for (const auto& x : r) {
            if (x.match == previousMatch && !kept.empty())
                kept.back().end = x.end;
            else
                kept.push_back(x);
            previousMatch = x.match;
        }
        break;
    }
    }
    for (const auto& x : kept)
        if (x.end > x.begin)
            out.push_back({p.text.substr(x.begin, x.end - x.begin), p.atStart && x.begin == 0, -1});
}

template <typename FindRegions>
void splitAll(Pieces& pieces, Behavior behavior, bool invert, FindRegions find) {
    Pieces out;
    out.reserve(pieces.size());
    for (auto& p : pieces) {
        if (p.token >= 0) {
            out.push_back(std::move(p));
            continue;
        }
        splitPiece(p, find(p.text), behavior, invert, out);
    }
    pieces = std::move(out);
}

const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
public:
    ByteLevel(bool addPrefixSpace, bool useRegex)
        : m_addPrefixSpace(addPrefixSpace),
          m_regex(useRegex ? std::make_unique<Regex>(kGpt2Regex, "ByteLevel") : nullptr) {}
    void apply(Pieces& pieces) const override {
        if (m_addPrefixSpace)
            for (auto& p : pieces)
                if (p.token < 0 && !p.text.empty() && p.text[0] != ' ')
                    p.text.insert(0, 1, ' ');
        if (m_regex)
            splitAll(pieces, Behavior::Isolated, false, [&](const std::string& s) {
                return regionsFromMatches(s.size(), m_regex->findAll(s));
            });
        for (auto& p : pieces) {
            if (p.token >= 0)
                continue;
            std::string mapped;
            mapped.reserve(p.text.size() * 2);
            for (unsigned char b : p.text)
                mapped += uni::byteToChar(b);
            p.text = std::move(mapped);
        }
    }
    bool isByteLevel() const override { return true; }

private:
    bool m_addPrefixSpace;
    std::unique_ptr<Regex> m_regex;
};

class Split final : public PreTokenizer {
public:
    Split(const Json& j, const std::string& where)
        : m_pattern(j, where), m_behavior(parseBehavior(j, where, Behavior::Isolated)),
          m_invert(getBool(j, "invert", false, where)) {}
    void apply(Pieces& pieces) const override {
        splitAll(pieces, m_behavior, m_invert, [&](const std::string& s) {
            return regionsFromMatches(s.size(), m_pattern.findAll(s));
        });
    }

private:
    Pattern m_pattern;
    Behavior m_behavior;
    bool m_invert;
};

class RegexSplit final : public PreTokenizer { // Whitespace: \w+|[^\w\s]+, inverted, removed
public:
    RegexSplit(const char* re, Behavior b, bool invert)
        : m_regex(re, "pre_tokenizer"), m_behavior(b), m_invert(invert) {}
    void apply(Pieces& pieces) const override {
        splitAll(pieces, m_behavior, m_invert, [&](const std::string& s) {
            return regionsFromMatches(s.size(), m_regex.findAll(s));
        });
    }

private:
    Regex m_regex;
    Behavior m_behavior;
    bool m_invert;
};

template <typename Pred> class CharSplit final : public PreTokenizer {
public:
    CharSplit(Pred pred, Behavior b) : m_pred(pred), m_behavior(b) {}
    void apply(Pieces& pieces) const override {
        splitAll(pieces, m_behavior, false,
                 [&](const std::string& s) { return regionsFromChars(s, m_pred); });
    }

private:
    Pred m_pred;
    Behavior m_behavior;
};
template <typename Pred> std::unique_ptr<PreTokenizer> charSplit(Pred pred, Behavior b) {
    return std::make_unique<CharSplit<Pred>>(pred, b);
}

class Metaspace final : public PreTokenizer {
public:
    enum class Scheme { Always, First, Never };
    Metaspace(const Json& j, const std::string& where) {
        m_replacement = j.contains("replacement") ? getString(j, "replacement", where) : "\u2581";
        std::size_t i = 0;
        if (m_replacement.empty())
            throw KvError(where + ".replacement: empty");
        m_replacementChar = uni::next(m_replacement, i);
        if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
            const std::string s = j["prepend_scheme"].get<std::string>();
            m_scheme = s == "always"  ? Scheme::Always
                       : s == "first" ? Scheme::First
                       : s == "never"
                           ? Scheme::Never
                           : throw KvError(where + ".prepend_scheme: unknown '" + s + "'");
        } else {
            m_scheme = getBool(j, "add_prefix_space", true, where) ? Scheme::Always : Scheme::Never;
        }
        m_split = getBool(j, "split", true, where);
    }
    void apply(Pieces& pieces) const override {
        for (auto& p : pieces) {
            if (p.token >= 0)
                continue;
            std::string s;
            for (char c : p.text)
                s += c == ' ' ? m_replacement : std::string(1, c);
            const bool starts = s.compare(0, m_replacement.size(), m_replacement) == 0;
            if (!starts && (m_scheme == Scheme::Always || (m_scheme == Scheme::First && p.atStart)))
                s.insert(0, m_replacement);
            p.text = std::move(s);
        }
        if (m_split)
            splitAll(pieces, Behavior::MergedWithNext, false, [&](const std::string& s) {
                return regionsFromChars(s, [&](char32_t c) { return c == m_replacementChar; });
            });
    }
    // A one-byte piece "a" becomes replacement + "a".
    double growth() const override { return 1 + static_cast<double>(m_replacement.size()); }

private:
    std::string m_replacement;
    char32_t m_replacementChar = 0;
    Scheme m_scheme = Scheme::Always;
    bool m_split = true;
};

class Sequence final : public PreTokenizer {
public:
    std::vector<std::unique_ptr<PreTokenizer>> items;
    void apply(Pieces& pieces) const override {
        for (const auto& p : items)
            p->apply(pieces);
    }
    bool isByteLevel() const override {
        for (const auto& p : items)
            if (p->isByteLevel())
                return true;
        return false;
    }
    double growth() const override {
        double g = 1;
        for (const auto& p : items)
            g *= p->growth();
        return g;
    }
};

class ChainPair final : public PreTokenizer {
public:
    std::unique_ptr<PreTokenizer> first, second;
    void apply(Pieces& pieces) const override {
        first->apply(pieces);
        second->apply(pieces);
    }
};

} // namespace

std::unique_ptr<PreTokenizer> makePreTokenizer(const Json& j, const std::string& where) {
    if (j.is_null())
        return nullptr;
    const std::string type = getString(j, "type", where);
    if (type == "ByteLevel")
        return std::make_unique<ByteLevel>(getBool(j, "add_prefix_space", true, where),
                                           getBool(j, "use_regex", true, where));
    if (type == "Split")
        return std::make_unique<Split>(j, where);
    if (type == "Metaspace")
        return std::make_unique<Metaspace>(j, where);
    if (type == "Digits") {
        const bool individual = getBool(j, "individual_digits", false, where);
        return charSplit(uni::isNumeric, individual ? Behavior::Isolated : Behavior::Contiguous);
    }
    if (type == "Punctuation")
        return charSplit(uni::isPunctuation, parseBehavior(j, where, Behavior::Isolated));
    if (type == "Whitespace")
        return std::make_unique<RegexSplit>(R"(\w+|[^\w\s]+)", Behavior::Removed, true);
    if (type == "WhitespaceSplit")
        return charSplit(uni::isWhitespace, Behavior::Removed);
    if (type == "BertPreTokenizer") {
        auto chain = std::make_unique<ChainPair>();
        chain->first = charSplit(uni::isWhitespace, Behavior::Removed);
        chain->second = charSplit(uni::isPunctuation, Behavior::Isolated);
        return chain;
    }
    if (type == "CharDelimiterSplit") {
        const std::string d = getString(j, "delimiter", where);
        std::size_t i = 0;
        const char32_t c = d.empty() ? 0 : uni::next(d, i);
        return charSplit([c](char32_t x) { return x == c; }, Behavior::Removed);
    }
    if (type == "Sequence") {
        auto seq = std::make_unique<Sequence>();
        const Json& list = member(j, "pretokenizers", where);
        if (!list.is_array())
            throw KvError(where + ".pretokenizers: expected an array");
        for (std::size_t i = 0; i < list.size(); ++i)
            if (auto p =
                    makePreTokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]"))
                seq->items.push_back(std::move(p));
        return seq;
    }
    throw KvError(where + ": unsupported pre_tokenizer type '" + type + "'");
}

} // namespace kvscope::tok::hf
