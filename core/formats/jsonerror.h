// JSON read from files, with errors in kvscope's words.
//
// nlohmann_json's exceptions read "[json.exception.parse_error.101] parse error at line 1,
// column 369: syntax error while parsing value - invalid literal; last read: '64,q'": the
// bracketed prefix is the library's internal name, and "last read" may hold megabytes of the
// file or bytes that are not UTF-8. Every reader of JSON from a file (safetensors headers and
// indexes, config.json, generation_config.json, tokenizer.json, tokenizer_config.json, the
// .kvsnap manifest) reports through describeJsonError, so a user sees one style everywhere:
//
//   model.safetensors: header is not valid JSON: line 1, column 369: invalid literal after '64,q'
//   config.json: not valid JSON: line 3, column 18: NaN is not a JSON number (found 'NaN')
//   config.json: not valid JSON: line 1, column 16: the number 1e99999 is too large (a double
//                holds at most about 1.8e308)
#pragma once

#include <exception>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace kvscope {

// The reason of a JSON exception, without nlohmann's "[json.exception.*]" prefix: its
// location ("line L, column C: "), what went wrong and the bytes just before the error
// (the last 32 at most, non-printable ones as \xNN). `text`, when given, is the text that was
// parsed: it lets NaN/Infinity literals be named, and locates a number that overflows a
// double (nlohmann reports no position for those). Exceptions that are not nlohmann's are
// returned as their what(). Thread-safe.
std::string describeJsonError(const std::exception& e, std::string_view text = {});

// checkJsonDepth (jsondepth.h) + nlohmann::json::parse. Throws KvError
// "<what>: not valid JSON: <describeJsonError>" (or the depth error).
nlohmann::json parseJsonText(std::string_view text, const std::string& what);

} // namespace kvscope
