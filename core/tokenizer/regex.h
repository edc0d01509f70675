// A compiled PCRE2 regular expression (UTF + Unicode properties), internal.
// HF tokenizers uses Oniguruma; the patterns that tokenizer.json files and llama.cpp use
// (\p{L}, \p{N}, (?i:...), lookahead) mean the same in PCRE2 with PCRE2_UTF | PCRE2_UCP.
// Immutable after construction; findAll may be called from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope::tok {

class Regex {
public:
    // Throws KvError "<what>: invalid regex ...: <pcre2 message> at offset N".
    Regex(const std::string& pattern, const std::string& what);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Non-overlapping matches, left to right, as byte ranges [first, second). Empty matches
    // are reported and the search continues one character later. `s` must be valid UTF-8.
    // Never throws: a match that fails (a pattern that backtracks past PCRE2's match limit of
    // ten million steps) ends the search there, so the rest of `s` counts as unmatched.
    std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view s) const;
    const std::string& pattern() const { return m_pattern; }
    // The fewest characters (so at least as many bytes) a match can span; 0 when the pattern
    // can match the empty string.
    std::size_t minLength() const;

private:
    std::string m_pattern;
    void* m_code = nullptr; // pcre2_code_8*
    bool m_jit = false;
};

} // namespace kvscope::tok
