// UTF-8 and Unicode helpers shared by the tokenizers (internal).
// Character classes follow Rust's `char` methods, because HF tokenizers is written in Rust;
// they are implemented with ICU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::tok::uni {

// Decodes the code point at s[i] (valid UTF-8 assumed) and advances i.
char32_t next(std::string_view s, std::size_t& i);
// Byte length of the UTF-8 sequence starting with lead byte b (1 for invalid lead bytes).
inline std::size_t seqLen(unsigned char b) {
    return b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
}
void append(std::string& out, char32_t cp);
std::string encode(char32_t cp);

// true when s is well-formed UTF-8 (no surrogates, no overlongs).
bool isValid(std::string_view s);
// Like Rust's String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD.
std::string lossy(std::string_view s);

// Rust char predicates.
bool isWhitespace(char32_t c);   // White_Space property
bool isAlphanumeric(char32_t c); // Alphabetic || Numeric (Nd, Nl, No)
bool isNumeric(char32_t c);      // general category Nd, Nl or No
bool isPunctuation(char32_t c);  // ASCII punctuation or general category P*

// Unicode normalization forms (ICU). form: "NFC", "NFD", "NFKC", "NFKD".
std::string normalize(std::string_view s, std::string_view form);
// Full Unicode lowercase mapping (like Rust's str::to_lowercase).
std::string toLower(std::string_view s);

// The byte a SentencePiece byte-fallback piece stands for: "<0x0A>" -> 10. -1 for any other
// piece, including malformed ones such as "<0xZZ>" (vocabularies come from untrusted files).
int byteToken(std::string_view piece);

// GPT-2 byte <-> printable character table (bytes_to_unicode).
const std::string& byteToChar(unsigned char b);
// -1 when cp is not one of the 256 byte characters.
int charToByte(char32_t cp);

} // namespace kvscope::tok::uni
