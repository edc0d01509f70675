#include "tokenizer/longestmatch.h"

namespace kvscope::tok {

LongestMatch::LongestMatch(std::vector<std::pair<std::string, std::size_t>> patterns) {
    m_byFirstByte.assign(256, {});
    for (auto& p : patterns) {
        if (p.first.empty())
            continue;
        m_byFirstByte[static_cast<unsigned char>(p.first[0])].push_back(m_patterns.size());
        m_patterns.push_back(std::move(p));
    }
}

std::optional<LongestMatch::Hit> LongestMatch::at(std::string_view s, std::size_t pos) const {
    if (m_patterns.empty() || pos >= s.size())
        return std::nullopt;
    std::optional<Hit> best;
    for (const std::size_t i : m_byFirstByte[static_cast<unsigned char>(s[pos])]) {
        const std::string& pat = m_patterns[i].first;
        if ((!best || pat.size() > best->length) && s.compare(pos, pat.size(), pat) == 0)
            best = Hit{m_patterns[i].second, pat.size()};
    }
    return best;
}

} // namespace kvscope::tok
