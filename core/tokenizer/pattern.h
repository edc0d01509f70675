// HF's `pattern` field: {"String": "literal"} or {"Regex": "..."} (internal).
#pragma once

#include "tokenizer/hfcomponents.h"
#include "tokenizer/regex.h"

namespace kvscope::tok::hf {

class Pattern {
public:
    Pattern(const Json& owner, const std::string& where);
    // Non-overlapping matches [begin, end), left to right.
    std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view s) const;
    std::string replaceAll(std::string_view s, std::string_view with) const;
    // An upper bound on replaceAll(s, with).size() / s.size(): each match is at least the
    // pattern's minimum length, and a pattern that matches the empty string inserts `with`
    // at every position.
    double replaceGrowth(std::size_t withBytes) const;

private:
    std::string m_literal;
    std::unique_ptr<Regex> m_regex;
};

} // namespace kvscope::tok::hf
