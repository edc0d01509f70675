// Tokenizer for the Jinja2 subset, configured like transformers' environment:
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newlines normalized
// to "\n". Whitespace control (`{%-`, `-%}`, `{%+`, `+%}`) and comments are resolved here,
// so the parser sees only text, tag delimiters and expression tokens.
#pragma once

#include <string>
#include <vector>

namespace kvscope::chat {

enum class TokenType {
    Text,       // literal template data (value = the text after whitespace control)
    VarBegin,   // {{
    VarEnd,     // }}
    BlockBegin, // {%
    BlockEnd,   // %}
    Name,
    String,  // value = unescaped contents
    Integer, // value = digits without '_'
    Float,
    Operator,
    Eof,
};

struct Token {
    TokenType type;
    std::string value;
    int line = 1;
    int column = 1;
};

// Throws KvError("line:column: message") on unterminated tags, strings or comments and on
// characters that cannot start a token.
std::vector<Token> tokenize(const std::string& source);

} // namespace kvscope::chat
