// A nesting limit for JSON read from model files (safetensors headers and indexes,
// tokenizer.json, tokenizer_config.json), checked on the text before it is parsed.
//
// nlohmann_json parses any depth without recursion, but copying, dumping and destroying parts
// of a value recurse: 60 KB of '[' overflowed the stack in the readers' error messages and in
// the tokenizer's fingerprint. No real file nests more than a handful of levels; the limit is
// the one the .kvsnap manifest reader uses.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvscope {

inline constexpr std::size_t kMaxJsonDepth = 128;

// Throws KvError "<what>: JSON nested deeper than 128 levels (at byte N)". The text need not
// be valid JSON (brackets inside strings are skipped; the parser reports other errors).
void checkJsonDepth(std::string_view text, const std::string& what);

} // namespace kvscope
