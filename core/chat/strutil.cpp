#include "chat/strutil.h"
#include "util/utf8.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace kvscope::chat::str {

namespace {
// Length of the well-formed UTF-8 sequence at s[i], or 0 for an invalid byte.
int sequenceLength(std::string_view s, std::size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k)
        ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    return ok ? len : 0;
}
} // namespace

std::size_t nextCodePoint(std::string_view s, std::size_t at) {
    return at >= s.size() ? s.size() : at + std::max(1, sequenceLength(s, at));
}

std::size_t codePointCount(std::string_view s) {
    std::size_t n = 0;
    for (std::size_t at = 0; at < s.size(); at = nextCodePoint(s, at))
        ++n;
    return n;
}

std::vector<char32_t> decode(std::string_view s) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int len = sequenceLength(s, i);
        if (len == 0) {
            // Invalid byte: keep it as a raw byte in the private 0xDC80.. range (like Python's
            // surrogateescape) so that encode() restores it unchanged.
            out.push_back(0xDC00 + c);
            ++i;
            continue;
        }
        char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < len; ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        out.push_back(cp);
        i += len;
    }
    return out;
}

void appendUtf8(std::string& out, char32_t cp) {
    // Lone surrogates U+DC80..U+DCFF carry raw bytes (Python's surrogateescape).
    if (cp >= 0xDC80 && cp <= 0xDCFF)
        out.push_back(static_cast<char>(cp - 0xDC00));
    else
        kvscope::appendUtf8(out, cp);
}

std::string encode(const std::vector<char32_t>& cps) {
    std::string out;
    out.reserve(cps.size());
    for (char32_t cp : cps)
        appendUtf8(out, cp);
    return out;
}

std::size_t length(std::string_view s) {
    std::size_t n = 0;
    for (char c : s)
        n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

bool isSpace(char32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Case mapping covers ASCII, Latin-1, Latin Extended-A pairs, Greek and Cyrillic: enough for
// the role names and headers templates transform. Other scripts pass through unchanged.
char32_t toUpper(char32_t c) {
    if (c >= 'a' && c <= 'z')
        return c - 32;
    if (c < 0x80)
        return c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7))
        return c - 32;
    if (c >= 0x100 && c <= 0x17F && c != 0x178 && c != 0x130 && c != 0x131 && c != 0x138 &&
        c != 0x149 && c != 0x17F)
        return ((c >= 0x139 && c <= 0x148) || (c >= 0x179)) ? ((c & 1) ? c : c - 1)
                                                            : ((c & 1) ? c - 1 : c);
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2)
        return c - 32;
    if (c >= 0x430 && c <= 0x44F)
        return c - 32;
    if (c >= 0x450 && c <= 0x45F)
        return c - 80;
    return c;
}

char32_t toLower(char32_t c) {
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    if (c < 0x80)
        return c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7)
        return c + 32;
    if (c >= 0x100 && c <= 0x17F && c != 0x178 && c != 0x130 && c != 0x131 && c != 0x138 &&
        c != 0x149 && c != 0x17F)
        return ((c >= 0x139 && c <= 0x148) || (c >= 0x179)) ? ((c & 1) ? c + 1 : c)
                                                            : ((c & 1) ? c : c + 1);
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
        return c + 32;
    if (c >= 0x410 && c <= 0x42F)
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    return c;
}

bool isCased(char32_t cp) {
    return toUpper(cp) != cp || toLower(cp) != cp;
}

std::string upper(std::string_view s) {
    auto cps = decode(s);
    for (auto& c : cps)
        c = toUpper(c);
    return encode(cps);
}

std::string lower(std::string_view s) {
    auto cps = decode(s);
    for (auto& c : cps)
        c = toLower(c);
    return encode(cps);
}

std::string capitalize(std::string_view s) {
    auto cps = decode(s);
    for (std::size_t i = 0; i < cps.size(); ++i)
        cps[i] = i == 0 ? toUpper(cps[i]) : toLower(cps[i]);
    return encode(cps);
}

std::string pyTitle(std::string_view s) {
    auto cps = decode(s);
    bool prevCased = false;
    for (auto& c : cps) {
        const bool cased = isCased(c);
        c = cased ? (prevCased ? toLower(c) : toUpper(c)) : c;
        prevCased = cased;
    }
    return encode(cps);
}

std::string jinjaTitle(std::string_view s) {
    // jinja2: "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s({\[<]+)", s))
    auto cps = decode(s);
    auto isDelim = [](char32_t c) {
        return isSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    };
    bool wordStart = true;
    for (auto& c : cps) {
        if (isDelim(c)) {
            wordStart = true;
            continue;
        }
        c = wordStart ? toUpper(c) : toLower(c);
        wordStart = false;
    }
    return encode(cps);
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
    auto cps = decode(s);
    std::vector<char32_t> set;
    if (chars)
        set = decode(*chars);
    auto drop = [&](char32_t c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : isSpace(c);
    };
    std::size_t b = 0, e = cps.size();
    while (left && b < e && drop(cps[b]))
        ++b;
    while (right && e > b && drop(cps[e - 1]))
        --e;
    return encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> split(std::string_view s, const std::string* sep, long maxsplit,
                               std::size_t maxParts) {
    std::vector<std::string> out;
    if (sep) {
        std::size_t pos = 0;
        while ((maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) &&
               out.size() <= maxParts) {
            const auto hit = s.find(*sep, pos);
            if (hit == std::string_view::npos)
                break;
            out.emplace_back(s.substr(pos, hit - pos));
            pos = hit + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    auto cps = decode(s);
    std::size_t i = 0;
    while (i < cps.size() && out.size() <= maxParts) {
        while (i < cps.size() && isSpace(cps[i]))
            ++i;
        if (i == cps.size())
            break;
        if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {
            std::size_t e = cps.size();
            while (e > i && isSpace(cps[e - 1]))
                --e;
            out.push_back(encode(std::vector<char32_t>(cps.begin() + i, cps.begin() + e)));
            break;
        }
        std::size_t j = i;
        while (j < cps.size() && !isSpace(cps[j]))
            ++j;
        out.push_back(encode(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
        i = j;
    }
    return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::string* sep, long maxsplit,
                                std::size_t maxParts) {
    if (maxsplit < 0 || !sep) // whitespace rsplit with a limit: rare, approximate
        return split(s, sep, maxsplit, maxParts);
    std::vector<std::string> out;
    std::size_t end = s.size();
    while (static_cast<long>(out.size()) < maxsplit && end > 0 && out.size() <= maxParts) {
        const auto hit = s.rfind(*sep, end - std::min(end, sep->size()));
        if (hit == std::string_view::npos || hit + sep->size() > end)
            break;
        out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, long count) {
    std::string out;
    if (from.empty()) {
        // Python inserts `to` between every code point (and at both ends).
        auto cps = decode(s);
        long n = 0;
        for (std::size_t i = 0; i <= cps.size(); ++i) {
            if (count < 0 || n < count) {
                out += to;
                ++n;
            }
            if (i < cps.size())
                appendUtf8(out, cps[i]);
        }
        return out;
    }
    std::size_t pos = 0;
    long n = 0;
    while (count < 0 || n < count) {
        const auto hit = s.find(from, pos);
        if (hit == std::string_view::npos)
            break;
        out.append(s.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
        ++n;
    }
    out.append(s.substr(pos));
    return out;
}

std::vector<std::string> splitlines(std::string_view s, std::size_t maxParts) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (std::size_t i = 0; i < s.size() && out.size() <= maxParts; ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
            out.emplace_back(s.substr(start, i - start));
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
                ++i;
            start = i + 1;
        }
    }
    if (start < s.size())
        out.emplace_back(s.substr(start));
    return out;
}

std::string reprString(std::string_view s) {
    const bool hasSingle = s.find('\'') != std::string_view::npos;
    const bool hasDouble = s.find('"') != std::string_view::npos;
    const char quote = hasSingle && !hasDouble ? '"' : '\'';
    std::string out(1, quote);
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (ch == quote || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (ch == '\n') {
            out += "\\n";
        } else if (ch == '\r') {
            out += "\\r";
        } else if (ch == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    out += quote;
    return out;
}

std::string reprFloat(double d) {
    if (std::isnan(d))
        return "nan";
    if (std::isinf(d))
        return d < 0 ? "-inf" : "inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    // sci is "[-]D[.DDD]e[+-]XX": split into sign, digits and decimal exponent.
    const bool neg = sci[0] == '-';
    const auto ePos = sci.find('e');
    std::string mant = sci.substr(neg ? 1 : 0, ePos - (neg ? 1 : 0));
    const int exp = std::stoi(sci.substr(ePos + 1));
    std::string digits;
    for (char c : mant)
        if (c != '.')
            digits += c;
    std::string out = neg ? "-" : "";
    if (exp >= -5 && exp < 16) {
        if (exp < 0) {
            out += "0." + std::string(-exp - 1, '0') + digits;
        } else if (static_cast<int>(digits.size()) <= exp + 1) {
            out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1)
        out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + ebuf;
}

namespace {
const char* const kDays[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                             "Thursday", "Friday", "Saturday"};
const char* const kMonths[] = {"January",   "February", "March",    "April",
                               "May",       "June",     "July",     "August",
                               "September", "October",  "November", "December"};
} // namespace

std::string strftime(std::string_view format, const std::tm& t) {
    std::string out;
    char buf[32];
    auto num = [&](int v, int width, char pad = '0') {
        std::snprintf(buf, sizeof buf, pad == '0' ? "%0*d" : "%*d", width, v);
        out += buf;
    };
    for (std::size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%' || i + 1 == format.size()) {
            out += format[i];
            continue;
        }
        const char f = format[++i];
        const int wday = ((t.tm_wday % 7) + 7) % 7, mon = ((t.tm_mon % 12) + 12) % 12;
        switch (f) {
        case 'd':
            num(t.tm_mday, 2);
            break;
        case 'e':
            num(t.tm_mday, 2, ' ');
            break;
        case 'm':
            num(mon + 1, 2);
            break;
        case 'Y':
            num(t.tm_year + 1900, 4);
            break;
        case 'y':
            num((t.tm_year + 1900) % 100, 2);
            break;
        case 'H':
            num(t.tm_hour, 2);
            break;
        case 'I':
            num(t.tm_hour % 12 == 0 ? 12 : t.tm_hour % 12, 2);
            break;
        case 'M':
            num(t.tm_min, 2);
            break;
        case 'S':
            num(t.tm_sec, 2);
            break;
        case 'j':
            num(t.tm_yday + 1, 3);
            break;
        case 'p':
            out += t.tm_hour < 12 ? "AM" : "PM";
            break;
        case 'a':
            out += std::string(kDays[wday]).substr(0, 3);
            break;
        case 'A':
            out += kDays[wday];
            break;
        case 'b':
        case 'h':
            out += std::string(kMonths[mon]).substr(0, 3);
            break;
        case 'B':
            out += kMonths[mon];
            break;
        case 'w':
            num(wday, 1);
            break;
        case 'F':
            num(t.tm_year + 1900, 4), out += '-', num(mon + 1, 2), out += '-', num(t.tm_mday, 2);
            break;
        case 'T':
            num(t.tm_hour, 2), out += ':', num(t.tm_min, 2), out += ':', num(t.tm_sec, 2);
            break;
        case '%':
            out += '%';
            break;
        default:
            out += '%', out += f;
        }
    }
    return out;
}

} // namespace kvscope::chat::str
