#include "tokenizer/pattern.h"

#include "util/status.h"

#include <algorithm>

namespace kvscope::tok::hf {

Pattern::Pattern(const Json& owner, const std::string& where) {
    const Json& p = member(owner, "pattern", where);
    const std::string w = where + ".pattern";
    if (p.is_object() && p.contains("String") && p["String"].is_string())
        m_literal = p["String"].get<std::string>();
    else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
        m_regex = std::make_unique<Regex>(p["Regex"].get<std::string>(), w);
    else
        throw KvError(w + ": expected {\"String\": ...} or {\"Regex\": ...}");
}

std::vector<std::pair<std::size_t, std::size_t>> Pattern::findAll(std::string_view s) const {
    if (m_regex)
        return m_regex->findAll(s);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    if (m_literal.empty())
        return out;
    for (std::size_t pos = s.find(m_literal); pos != std::string_view::npos;
         pos = s.find(m_literal, pos + m_literal.size()))
        out.emplace_back(pos, pos + m_literal.size());
    return out;
}

double Pattern::replaceGrowth(std::size_t withBytes) const {
    if (!m_regex && m_literal.empty())
        return 1; // matches nothing
    const std::size_t minLength = m_regex ? m_regex->minLength() : m_literal.size();
    const double with = static_cast<double>(withBytes);
    return minLength == 0 ? 1 + with : std::max(1.0, with / static_cast<double>(minLength));
}

std::string Pattern::replaceAll(std::string_view s, std::string_view with) const {
    std::string out;
    std::size_t prev = 0;
    for (const auto& [b, e] : findAll(s)) {
        out.append(s.substr(prev, b - prev));
        out.append(with);
        prev = e;
    }
    out.append(s.substr(prev));
    return out;
}

} // namespace kvscope::tok::hf
