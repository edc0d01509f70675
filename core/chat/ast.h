// Abstract syntax tree of a parsed chat template. Immutable after parsing and shared
// read-only by every render (Template is thread-safe to render concurrently).
#pragma once

#include "chat/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
    enum class Kind {
        Literal,  // literal
        Name,     // name
        List,     // args = items
        Tuple,    // args = items
        Dict,     // args = key0, value0, key1, value1, ...
        GetAttr,  // args[0].name
        GetItem,  // args[0][args[1]]
        Slice,    // args[0][args[1]:args[2]:args[3]] (null = omitted)
        Call,     // args[0](args[1..], kwargs); kwargs named "*" / "**" are *xs / **d
        Filter,   // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
        Test,     // args[0] is [not] name(args[1..])
        Unary,    // name in {"-", "+", "not"}
        Binary,   // args[0] name args[1]: + - * / // % ** ~ and or
        Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
        CondExpr, // args[1] if args[0] else args[2] (args[2] null: undefined)
    };
    Kind kind;
    int line = 0;
    int column = 0;
    int depth = 1; // height of this subtree, capped by the parser
    Value literal;
    std::string name;
    bool negated = false;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
};

// Left side of `set` / `for`: one or more names, or `ns.attr`.
struct AssignTarget {
    std::vector<std::string> names;
    bool tuple = false;
    std::string attribute; // non-empty: names[0].attribute = value
};

struct MacroParam {
    std::string name;
    ExprPtr defaultValue; // may be null
};

struct Stmt {
    enum class Kind {
        Text,        // text
        Output,      // {{ expr }}
        If,          // conditions[i] -> bodies[i]; bodies.size() == conditions.size() + 1 with else
        For,         // for target in expr [if filter] body [else elseBody]
        Set,         // set target = expr
        SetBlock,    // set target %}body{% endset (filter: optional filter chain)
        Macro,       // macro name(params) body
        CallBlock,   // call(params) expr body
        FilterBlock, // filter <filter chain> body
        Break,
        Continue,
        Scope, // body in its own scope ({% generation %}, {% with %})
    };
    Kind kind;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr filter;
    AssignTarget target;
    std::vector<ExprPtr> conditions;
    std::vector<Body> bodies;
    Body body;
    Body elseBody;
    std::string name;
    std::vector<MacroParam> params;
    std::vector<std::pair<std::string, ExprPtr>> assignments; // {% with a = 1 %}
    bool usesLoop = true; // For: the body (or else) mentions the name `loop`
};

} // namespace kvscope::chat
