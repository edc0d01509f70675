// Recursive-descent parser for the Jinja2 subset: builds the AST from lexer tokens with
// jinja2's operator precedence (filters and `is` tests bind tighter than arithmetic,
// `not` looser than comparisons, `x if c else y` loosest).
//
// Nesting is capped (kMaxNesting in exprparser.h) so hostile input such as 10,000 nested '(' is
// rejected with an error instead of exhausting the stack. Errors read "line:column: message".
#pragma once

#include "chat/ast.h"
#include "chat/lexer.h"

#include <string>
#include <vector>

namespace kvscope::chat {

// Throws KvError on syntax errors.
Body parseTemplate(const std::string& source);

} // namespace kvscope::chat
