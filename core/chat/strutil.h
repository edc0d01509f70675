// Python-compatible string helpers for the chat template engine: UTF-8 code points, str
// methods (strip/split/title/...), float repr and a locale-independent strftime.
// All functions are pure and thread-safe. Strings are UTF-8; invalid bytes are treated as
// single code points (U+FFFD-free: they round-trip unchanged).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::chat::str {

std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t>& cps);
void appendUtf8(std::string& out, char32_t cp);
// Number of code points (Python len()).
std::size_t length(std::string_view s);
// The code points decode() yields, walked without decoding: the byte offset after the one
// starting at `at`, and their count.
std::size_t nextCodePoint(std::string_view s, std::size_t at);
std::size_t codePointCount(std::string_view s);

bool isSpace(char32_t cp); // Python str.isspace() for one code point
char32_t toUpper(char32_t cp);
char32_t toLower(char32_t cp);
bool isCased(char32_t cp);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s); // str.capitalize()
std::string pyTitle(std::string_view s);    // str.title()
std::string jinjaTitle(std::string_view s); // the |title filter

// strip/lstrip/rstrip; chars == nullptr means whitespace.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit); sep == nullptr splits on whitespace runs; sep must not be empty.
// These stop early once they have more than maxParts parts (the caller reports the overflow).
std::vector<std::string> split(std::string_view s, const std::string* sep, long maxsplit,
                               std::size_t maxParts = SIZE_MAX);
std::vector<std::string> rsplit(std::string_view s, const std::string* sep, long maxsplit,
                                std::size_t maxParts = SIZE_MAX);
std::vector<std::string> splitlines(std::string_view s, std::size_t maxParts = SIZE_MAX);
std::string replace(std::string_view s, std::string_view from, std::string_view to, long count);

// repr() of a str, choosing quotes like CPython.
std::string reprString(std::string_view s);
// repr() of a float (shortest round-trip, CPython formatting: 1.0, 1e-05, 1e+16, inf, nan).
std::string reprFloat(double d);

// strftime with C-locale names, independent of the process locale.
std::string strftime(std::string_view format, const std::tm& t);

} // namespace kvscope::chat::str
