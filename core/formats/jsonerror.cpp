#include "formats/jsonerror.h"
#include "formats/jsondepth.h"
#include "util/status.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace kvscope {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (2..4 bytes), or 0.
std::size_t utf8Sequence(std::string_view s, std::size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                          : c >= 0xE0 && c <= 0xEF ? 3
                          : c >= 0xF0 && c <= 0xF4 ? 4
                                                   : 0;
    if (n == 0 || i + n > s.size())
        return 0;
    for (std::size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
            return 0;
    return n;
}

// At most the last `keep` bytes of `s`, printable ASCII and whole UTF-8 characters as they
// are and any other byte as \xNN, so a message stays one short line of valid UTF-8 whatever
// the file held.
std::string printable(std::string_view s, std::size_t keep = 32) {
    std::string out;
    std::size_t i = 0;
    if (s.size() > keep) {
        out = "...";
        i = s.size() - keep;
        while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80)
            ++i; // do not start inside a character
    }
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7F) {
            out += s[i++];
        } else if (const std::size_t n = utf8Sequence(s, i); n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            static const char* kHex = "0123456789ABCDEF";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
            ++i;
        }
    }
    return out;
}

// nlohmann's token names in plain words.
std::string expectedText(const std::string& e) {
    if (e == "string literal")
        return "a string";
    if (e == "end of input")
        return "the end of the text";
    if (e == "'[', '{', or a literal")
        return "a JSON value";
    return printable(e, 80);
}

std::string afterPrefix(const std::string& what) {
    // "[json.exception.parse_error.101] parse error ..." -> "parse error ..."
    if (what.rfind("[json.exception.", 0) == 0)
        if (const auto close = what.find("] "); close != std::string::npos)
            return what.substr(close + 2);
    return what;
}

std::string lineColumn(std::string_view text, std::size_t offset) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// The word around text[at] made of letters and signs ("NaN", "-Infinity"), if it is one of
// the non-JSON spellings of a non-finite number.
std::string nonFiniteLiteral(std::string_view text, std::size_t at) {
    if (at >= text.size())
        return {};
    auto wordChar = [](char c) {
        return std::isalpha(static_cast<unsigned char>(c)) || c == '-' || c == '+';
    };
    std::size_t begin = at, end = at;
    while (begin > 0 && wordChar(text[begin - 1]) && at - begin < 16)
        --begin;
    while (end < text.size() && wordChar(text[end]) && end - begin < 16)
        ++end;
    const std::string word(text.substr(begin, end - begin));
    std::string bare = word;
    bare.erase(0, bare.find_first_not_of("+-"));
    std::transform(bare.begin(), bare.end(), bare.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return bare == "nan" || bare == "inf" || bare == "infinity" ? word : std::string();
}

std::string describeParseError(const nlohmann::json::parse_error& e, std::string_view text) {
    std::string m = afterPrefix(e.what());
    std::string where;
    // "parse error at line L, column C: <rest>"
    if (m.rfind("parse error at ", 0) == 0) {
        if (const auto colon = m.find(": "); colon != std::string::npos) {
            where = m.substr(15, colon - 15);
            m = m.substr(colon + 2);
        }
    } else if (m.rfind("parse error: ", 0) == 0) {
        m = m.substr(13);
    }
    if (where.empty() && !text.empty() && e.byte > 0)
        where = lineColumn(text, e.byte - 1);
    const std::string at = where.empty() ? "" : where + ": ";

    if (!text.empty() && e.byte > 0)
        if (const std::string word = nonFiniteLiteral(text, e.byte - 1); !word.empty())
            return at + "NaN and Infinity are not JSON numbers (found '" + printable(word) + "')";

    // "syntax error while parsing <context> - <message>; last read: '<token>'; expected <x>"
    std::string message = m, token, expected;
    if (const auto dash = m.find(" - ");
        m.rfind("syntax error", 0) == 0 && dash != std::string::npos)
        message = m.substr(dash + 3);
    // The lexer's own message may say "expected" too ("invalid number; expected digit after
    // '-'"): the token is cut out first, the parser's expectation follows its closing quote.
    if (const auto last = message.find("; last read: '"); last != std::string::npos) {
        std::string rest = message.substr(last + 14);
        message.erase(last);
        if (const auto exp = rest.rfind("'; expected "); exp != std::string::npos) {
            expected = rest.substr(exp + 12);
            rest.erase(exp);
        } else if (!rest.empty() && rest.back() == '\'') {
            rest.pop_back();
        }
        token = rest;
    } else if (const auto exp = message.rfind("; expected "); exp != std::string::npos) {
        expected = message.substr(exp + 11);
        message.erase(exp);
    }
    if (message == "unexpected end of input")
        message = "the text ends before the JSON value does";
    std::string out = at + printable(message, 200);
    if (!token.empty())
        out += " at '" + printable(token) + "'";
    if (!expected.empty())
        out += " (expected " + expectedText(expected) + ")";
    return out;
}

std::string describeOutOfRange(const std::string& m, std::string_view text) {
    // "number overflow parsing '1e99999'"
    static const std::string kOverflow = "number overflow parsing '";
    if (m.rfind(kOverflow, 0) != 0)
        return printable(m, 200);
    std::string number = m.substr(kOverflow.size());
    if (!number.empty() && number.back() == '\'')
        number.pop_back();
    std::string where;
    // nlohmann gives no position: the first occurrence of the number outside a longer token.
    for (std::size_t at = text.find(number); !number.empty() && at != std::string_view::npos;
         at = text.find(number, at + 1)) {
        const bool startOk =
            at == 0 || std::string_view("[{:, \t\r\n").find(text[at - 1]) != std::string_view::npos;
        const std::size_t end = at + number.size();
        const bool endOk = end >= text.size() ||
                           std::string_view("]}, \t\r\n").find(text[end]) != std::string_view::npos;
        if (startOk && endOk) {
            where = lineColumn(text, at) + ": ";
            break;
        }
    }
    return where + "the number " + printable(number) +
           " is too large (a double holds at most about 1.8e308)";
}

std::string describeTypeError(const std::string& m) {
    // "type must be number, but is array" -> "expected a number, found an array"
    static const std::string kMust = "type must be ";
    if (m.rfind(kMust, 0) == 0)
        if (const auto but = m.find(", but is "); but != std::string::npos) {
            auto article = [](const std::string& w) {
                return (std::string("aeiou").find(w.empty() ? 'x' : w[0]) != std::string::npos
                            ? "an "
                            : "a ") +
                       w;
            };
            return "expected " + article(m.substr(kMust.size(), but - kMust.size())) + ", found " +
                   article(m.substr(but + 9));
        }
    // "invalid UTF-8 byte at index 6: 0xFF"
    if (m.rfind("invalid UTF-8 byte", 0) == 0)
        return "a string is not valid UTF-8 (" + printable(m.substr(8), 80) + ")";
    return printable(m, 200);
}

} // namespace

std::string describeJsonError(const std::exception& e, std::string_view text) {
    if (const auto* p = dynamic_cast<const nlohmann::json::parse_error*>(&e))
        return describeParseError(*p, text);
    if (dynamic_cast<const nlohmann::json::out_of_range*>(&e))
        return describeOutOfRange(afterPrefix(e.what()), text);
    if (dynamic_cast<const nlohmann::json::type_error*>(&e))
        return describeTypeError(afterPrefix(e.what()));
    if (dynamic_cast<const nlohmann::json::exception*>(&e))
        return printable(afterPrefix(e.what()), 200);
    return e.what();
}

nlohmann::json parseJsonText(std::string_view text, const std::string& what) {
    checkJsonDepth(text, what);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw KvError(what + ": not valid JSON: " + describeJsonError(e, text));
    }
}

} // namespace kvscope
