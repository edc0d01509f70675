#include "chat/exprparser.h"

#include <cerrno>
#include <cstdlib>

namespace kvscope::chat {

bool ExprParser::atTupleEnd() const {
    const auto t = cur().type;
    return t == TokenType::VarEnd || t == TokenType::BlockEnd || t == TokenType::Eof || isOp(")") ||
           isOp("]") || isOp("}") || isName("if") || isName("recursive");
}

ExprPtr ExprParser::parseTuple(bool withCondexpr) {
    const Token start = cur();
    ExprPtr first = parseExpression(withCondexpr);
    if (!isOp(","))
        return first;
    auto tuple = make(Expr::Kind::Tuple, start);
    tuple->args.push_back(std::move(first));
    while (acceptOp(",")) {
        if (atTupleEnd())
            break;
        tuple->args.push_back(parseExpression(withCondexpr));
    }
    return done(std::move(tuple));
}

ExprPtr ExprParser::parseExpression(bool withCondexpr) {
    DepthGuard guard(*this);
    if (!withCondexpr)
        return parseOr();
    const Token start = cur();
    ExprPtr expr = parseOr();
    while (isName("if")) {
        advance();
        auto cond = make(Expr::Kind::CondExpr, start);
        cond->args.push_back(parseOr());
        cond->args.push_back(std::move(expr));
        if (isName("else")) {
            advance();
            cond->args.push_back(parseExpression(true));
        } else {
            cond->args.push_back(nullptr);
        }
        expr = done(std::move(cond));
    }
    return expr;
}

ExprPtr ExprParser::binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::Kind::Binary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return done(std::move(e));
}

ExprPtr ExprParser::parseOr() {
    ExprPtr l = parseAnd();
    while (isName("or")) {
        const Token at = cur();
        advance();
        l = binary(at, "or", std::move(l), parseAnd());
    }
    return l;
}

ExprPtr ExprParser::parseAnd() {
    ExprPtr l = parseNot();
    while (isName("and")) {
        const Token at = cur();
        advance();
        l = binary(at, "and", std::move(l), parseNot());
    }
    return l;
}

ExprPtr ExprParser::parseNot() {
    if (isName("not")) {
        DepthGuard guard(*this);
        const Token at = cur();
        advance();
        auto e = make(Expr::Kind::Unary, at);
        e->name = "not";
        e->args.push_back(parseNot());
        return done(std::move(e));
    }
    return parseCompare();
}

ExprPtr ExprParser::parseCompare() {
    const Token start = cur();
    ExprPtr first = parseMath1();
    ExprPtr cmp;
    for (;;) {
        std::string op;
        if (cur().type == TokenType::Operator &&
            (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
             cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
            op = cur().value;
            advance();
        } else if (isName("in")) {
            op = "in";
            advance();
        } else if (isName("not") && peek().type == TokenType::Name && peek().value == "in") {
            op = "not in";
            advance();
            advance();
        } else {
            break;
        }
        if (!cmp) {
            cmp = make(Expr::Kind::Compare, start);
            cmp->args.push_back(std::move(first));
        }
        cmp->ops.push_back(op);
        cmp->args.push_back(parseMath1());
    }
    return cmp ? done(std::move(cmp)) : std::move(first);
}

ExprPtr ExprParser::parseMath1() {
    ExprPtr l = parseConcat();
    while (isOp("+") || isOp("-")) {
        const Token at = cur();
        advance();
        l = binary(at, at.value, std::move(l), parseConcat());
    }
    return l;
}

ExprPtr ExprParser::parseConcat() {
    ExprPtr l = parseMath2();
    while (isOp("~")) {
        const Token at = cur();
        advance();
        l = binary(at, "~", std::move(l), parseMath2());
    }
    return l;
}

ExprPtr ExprParser::parseMath2() {
    ExprPtr l = parsePow();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
        const Token at = cur();
        advance();
        l = binary(at, at.value, std::move(l), parsePow());
    }
    return l;
}

ExprPtr ExprParser::parsePow() {
    ExprPtr l = parseUnary(true);
    while (isOp("**")) {
        const Token at = cur();
        advance();
        l = binary(at, "**", std::move(l), parseUnary(true));
    }
    return l;
}

ExprPtr ExprParser::parseUnary(bool withFilter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (isOp("-") || isOp("+")) {
        const Token at = cur();
        advance();
        node = make(Expr::Kind::Unary, at);
        node->name = at.value;
        node->args.push_back(parseUnary(false));
        node = done(std::move(node));
    } else {
        node = parsePrimary();
    }
    node = parsePostfix(std::move(node));
    if (withFilter)
        node = parseFilterExpr(std::move(node));
    return node;
}

ExprPtr ExprParser::parsePrimary() {
    DepthGuard guard(*this);
    const Token t = cur();
    switch (t.type) {
    case TokenType::Name: {
        advance();
        auto e = make(Expr::Kind::Literal, t);
        if (t.value == "true" || t.value == "True")
            e->literal = Value(true);
        else if (t.value == "false" || t.value == "False")
            e->literal = Value(false);
        else if (t.value == "none" || t.value == "None")
            e->literal = Value(nullptr);
        else {
            e->kind = Expr::Kind::Name;
            e->name = t.value;
        }
        return e;
    }
    case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) {
            s += cur().value;
            advance();
        }
        auto e = make(Expr::Kind::Literal, t);
        e->literal = Value(std::move(s));
        return e;
    }
    case TokenType::Integer: {
        advance();
        auto e = make(Expr::Kind::Literal, t);
        errno = 0;
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        e->literal = errno == ERANGE ? Value(std::strtod(t.value.c_str(), nullptr))
                                     : Value(static_cast<std::int64_t>(v));
        return e;
    }
    case TokenType::Float: {
        advance();
        auto e = make(Expr::Kind::Literal, t);
        e->literal = Value(std::strtod(t.value.c_str(), nullptr));
        return e;
    }
    default:
        break;
    }
    if (acceptOp("(")) {
        if (acceptOp(")"))
            return make(Expr::Kind::Tuple, t);
        ExprPtr first = parseExpression(true);
        if (isOp(",")) {
            auto tuple = make(Expr::Kind::Tuple, t);
            tuple->args.push_back(std::move(first));
            while (acceptOp(",")) {
                if (isOp(")"))
                    break;
                tuple->args.push_back(parseExpression(true));
            }
            first = done(std::move(tuple));
        }
        expectOp(")");
        return first;
    }
    if (acceptOp("[")) {
        auto list = make(Expr::Kind::List, t);
        while (!acceptOp("]")) {
            if (!list->args.empty()) {
                expectOp(",");
                if (acceptOp("]"))
                    break;
            }
            list->args.push_back(parseExpression(true));
        }
        return done(std::move(list));
    }
    if (acceptOp("{")) {
        auto dict = make(Expr::Kind::Dict, t);
        while (!acceptOp("}")) {
            if (!dict->args.empty()) {
                expectOp(",");
                if (acceptOp("}"))
                    break;
            }
            dict->args.push_back(parseExpression(true));
            expectOp(":");
            dict->args.push_back(parseExpression(true));
        }
        return done(std::move(dict));
    }
    fail("unexpected " + tokenText(t));
}

ExprPtr ExprParser::parsePostfix(ExprPtr node) {
    for (;;) {
        const Token at = cur();
        if (acceptOp(".")) {
            if (cur().type == TokenType::Integer) {
                auto e = make(Expr::Kind::GetItem, at);
                auto idx = make(Expr::Kind::Literal, cur());
                idx->literal = Value(
                    static_cast<std::int64_t>(std::strtoll(cur().value.c_str(), nullptr, 10)));
                advance();
                e->args.push_back(std::move(node));
                e->args.push_back(std::move(idx));
                node = done(std::move(e));
            } else {
                auto e = make(Expr::Kind::GetAttr, at);
                e->name = expectName();
                e->args.push_back(std::move(node));
                node = done(std::move(e));
            }
        } else if (isOp("[")) {
            node = parseSubscript(std::move(node));
        } else if (isOp("(")) {
            node = parseCall(std::move(node));
        } else {
            return node;
        }
    }
}

ExprPtr ExprParser::parseSubscript(ExprPtr node) {
    const Token at = cur();
    expectOp("[");
    ExprPtr a, b, c;
    bool slice = false;
    if (!isOp(":"))
        a = parseExpression(true);
    if (acceptOp(":")) {
        slice = true;
        if (!isOp("]") && !isOp(":"))
            b = parseExpression(true);
        if (acceptOp(":") && !isOp("]"))
            c = parseExpression(true);
    }
    expectOp("]");
    auto e = make(slice ? Expr::Kind::Slice : Expr::Kind::GetItem, at);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(a));
    if (slice) {
        e->args.push_back(std::move(b));
        e->args.push_back(std::move(c));
    }
    return done(std::move(e));
}

void ExprParser::parseArgs(Expr& e) {
    expectOp("(");
    bool first = true;
    while (!acceptOp(")")) {
        if (!first) {
            expectOp(",");
            if (acceptOp(")"))
                break;
        }
        first = false;
        if (isOp("*") || isOp("**")) {
            // Stored as keyword entries named "*" / "**"; no identifier can clash.
            const std::string star = cur().value;
            advance();
            e.kwargs.emplace_back(star, parseExpression(true));
            continue;
        }
        if (cur().type == TokenType::Name && peek().type == TokenType::Operator &&
            peek().value == "=") {
            std::string key = cur().value;
            advance();
            advance();
            e.kwargs.emplace_back(std::move(key), parseExpression(true));
        } else {
            for (const auto& kw : e.kwargs)
                if (kw.first != "*")
                    fail("positional argument follows keyword argument");
            e.args.push_back(parseExpression(true));
        }
    }
}

ExprPtr ExprParser::parseCall(ExprPtr node) {
    DepthGuard guard(*this);
    auto e = make(Expr::Kind::Call, cur());
    e->args.push_back(std::move(node));
    parseArgs(*e);
    return done(std::move(e));
}

ExprPtr ExprParser::parseFilterExpr(ExprPtr node) {
    for (;;) {
        if (isOp("|")) {
            node = parseFilterChain(std::move(node));
        } else if (isName("is")) {
            node = parseTest(std::move(node));
        } else if (isOp("(")) {
            node = parseCall(std::move(node));
        } else {
            return node;
        }
    }
}

ExprPtr ExprParser::parseFilterChain(ExprPtr node) {
    while (isOp("|")) {
        DepthGuard guard(*this);
        const Token at = cur();
        advance();
        auto e = make(Expr::Kind::Filter, at);
        e->name = expectName();
        while (acceptOp("."))
            e->name += "." + expectName();
        e->args.push_back(std::move(node));
        if (isOp("("))
            parseArgs(*e);
        node = done(std::move(e));
    }
    return node;
}

ExprPtr ExprParser::parseTest(ExprPtr node) {
    DepthGuard guard(*this);
    const Token at = cur();
    advance(); // 'is'
    auto e = make(Expr::Kind::Test, at);
    if (isName("not")) {
        e->negated = true;
        advance();
    }
    e->name = expectName();
    e->args.push_back(std::move(node));
    if (isOp("(")) {
        parseArgs(*e);
    } else {
        const auto t = cur().type;
        const bool argStarts = t == TokenType::Name || t == TokenType::String ||
                               t == TokenType::Integer || t == TokenType::Float || isOp("(") ||
                               isOp("[") || isOp("{");
        if (argStarts && !isName("else") && !isName("or") && !isName("and")) {
            if (isName("is"))
                fail("You cannot chain multiple tests with is");
            e->args.push_back(parsePostfix(parsePrimary()));
        }
    }
    return done(std::move(e));
}

} // namespace kvscope::chat
