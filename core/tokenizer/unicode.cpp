#include "tokenizer/unicode.h"
#include "util/utf8.h"

#include "util/status.h"

#include <array>
#include <mutex>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unordered_map>

namespace kvscope::tok::uni {

char32_t next(std::string_view s, std::size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const std::size_t n = std::min(seqLen(b0), s.size() - i);
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (std::size_t k = 1; k < n; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += n;
    return cp;
}

void append(std::string& out, char32_t cp) {
    appendUtf8(out, cp);
}

std::string encode(char32_t cp) {
    std::string s;
    append(s, cp);
    return s;
}

// Length of the valid UTF-8 sequence at s[i], or the length of its maximal invalid subpart
// as a negative number (Unicode "substitution of maximal subparts", as Rust and Python do).
static int validAt(std::string_view s, std::size_t i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80)
        return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        if (b0 == 0xE0)
            lo = 0xA0;
        if (b0 == 0xED)
            hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        if (b0 == 0xF0)
            lo = 0x90;
        if (b0 == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    int k = 1;
    for (; k <= need; ++k) {
        if (i + k >= s.size())
            return -k;
        const auto b = static_cast<unsigned char>(s[i + k]);
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -k;
    }
    return need + 1;
}

bool isValid(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const int n = validAt(s, i);
        if (n < 0)
            return false;
        i += n;
    }
    return true;
}

std::string lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const int n = validAt(s, i);
        if (n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            i += -n;
        }
    }
    return out;
}

bool isWhitespace(char32_t c) {
    return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE);
}

bool isNumeric(char32_t c) {
    const auto t = u_charType(c);
    return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool isAlphanumeric(char32_t c) {
    return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || isNumeric(c);
}

bool isPunctuation(char32_t c) {
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
               (c >= 0x7B && c <= 0x7E);
    return u_ispunct(c);
}

std::string normalize(std::string_view s, std::string_view form) {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    if (form == "NFC")
        n = icu::Normalizer2::getNFCInstance(err);
    else if (form == "NFD")
        n = icu::Normalizer2::getNFDInstance(err);
    else if (form == "NFKC")
        n = icu::Normalizer2::getNFKCInstance(err);
    else if (form == "NFKD")
        n = icu::Normalizer2::getNFKDInstance(err);
    if (!n || U_FAILURE(err))
        throw KvError("ICU normalizer " + std::string(form) + " is not available");
    const auto in = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), (int32_t)s.size()));
    if (n->isNormalized(in, err) && U_SUCCESS(err))
        return std::string(s);
    err = U_ZERO_ERROR;
    const icu::UnicodeString result = n->normalize(in, err);
    if (U_FAILURE(err))
        throw KvError("ICU " + std::string(form) + " normalization failed");
    std::string out;
    result.toUTF8String(out);
    return out;
}

std::string toLower(std::string_view s) {
    auto str = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), (int32_t)s.size()));
    str.toLower(icu::Locale::getRoot());
    std::string out;
    str.toUTF8String(out);
    return out;
}

int byteToken(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>')
        return -1;
    int value = 0;
    for (const char c : piece.substr(3, 2)) {
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                 : -1;
        if (digit < 0)
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

namespace {
struct ByteTable {
    std::array<std::string, 256> toChar;
    std::unordered_map<char32_t, int> toByte;
    ByteTable() {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t cp = printable ? char32_t(b) : char32_t(256 + n++);
            toChar[b] = encode(cp);
            toByte[cp] = b;
        }
    }
};
const ByteTable& byteTable() {
    static const ByteTable t;
    return t;
}
} // namespace

const std::string& byteToChar(unsigned char b) {
    return byteTable().toChar[b];
}

int charToByte(char32_t cp) {
    const auto& m = byteTable().toByte;
    const auto it = m.find(cp);
    return it == m.end() ? -1 : it->second;
}

} // namespace kvscope::tok::uni
