// Leftmost-longest matching of many literal patterns (internal): what aho-corasick's
// MatchKind::LeftmostLongest gives HF tokenizers for added tokens, and what llama.cpp's
// longest-first search gives GGUF control tokens. Shared by both.
//
// Patterns are bucketed by their first byte, so a position costs one comparison per pattern
// that starts with the byte there, not one per pattern (a GGUF with 4000 control tokens took
// 20 s to encode its own 68 KB that way). Immutable after construction; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope::tok {

class LongestMatch {
public:
    struct Hit {
        std::size_t value;  // what the pattern was given with
        std::size_t length; // its length in bytes
    };

    LongestMatch() = default;
    // (pattern, value) pairs; empty patterns are ignored. Among equally long patterns that
    // match, the first given wins.
    explicit LongestMatch(std::vector<std::pair<std::string, std::size_t>> patterns);

    bool empty() const { return m_patterns.empty(); }
    // The longest pattern that occurs at s[pos...], if any.
    std::optional<Hit> at(std::string_view s, std::size_t pos) const;

private:
    std::vector<std::pair<std::string, std::size_t>> m_patterns;
    std::vector<std::vector<std::size_t>> m_byFirstByte; // indices into m_patterns
};

} // namespace kvscope::tok
