// Hostile JSON texts shared by the families: deep nesting, huge flat documents.
#pragma once

#include <cstddef>
#include <string>

namespace kvscope::hostile {

// `levels` nested arrays around `inner` ("[[[...1...]]]").
inline std::string deepArrays(std::size_t levels, const std::string& inner = "1") {
    return std::string(levels, '[') + inner + std::string(levels, ']');
}
// `levels` nested objects {"a":{"a":...}}.
inline std::string deepObjects(std::size_t levels, const std::string& inner = "1") {
    std::string s;
    s.reserve(levels * 6 + inner.size());
    for (std::size_t i = 0; i < levels; ++i)
        s += "{\"a\":";
    s += inner;
    s.append(levels, '}');
    return s;
}
// An array of `count` small objects ([{"k":0},{"k":1},...]): a few MB of JSON, many nodes.
inline std::string manyObjects(std::size_t count) {
    std::string s = "[";
    s.reserve(count * 12);
    for (std::size_t i = 0; i < count; ++i) {
        if (i)
            s += ',';
        s += "{\"k\":" + std::to_string(i % 1000) + "}";
    }
    return s + "]";
}

} // namespace kvscope::hostile
