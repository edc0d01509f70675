// Expression parsing for the Jinja2 subset, shared by the statement parser (parser.cpp):
// a token cursor with error reporting and nesting guards, and jinja2's precedence climbing.
// Internal to core/chat.
#pragma once

#include "chat/ast.h"
#include "chat/lexer.h"
#include "util/status.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kvscope::chat {

inline constexpr int kMaxNesting = 200;

// Position in the token vector plus the helpers every parsing step needs.
inline const char* describe(TokenType t) {
    switch (t) {
    case TokenType::Text:
        return "template data";
    case TokenType::VarBegin:
        return "'{{'";
    case TokenType::VarEnd:
        return "end of print statement";
    case TokenType::BlockBegin:
        return "'{%'";
    case TokenType::BlockEnd:
        return "end of statement block";
    case TokenType::Name:
        return "name";
    case TokenType::String:
        return "string";
    case TokenType::Integer:
        return "integer";
    case TokenType::Float:
        return "float";
    case TokenType::Operator:
        return "operator";
    case TokenType::Eof:
        return "end of template";
    }
    return "token";
}

class TokenCursor {
public:
    explicit TokenCursor(std::vector<Token> tokens) : m_toks(std::move(tokens)) {}

protected:
    const Token& cur() const { return m_toks[m_i]; }
    const Token& peek(int n = 1) const { return m_toks[std::min(m_i + n, m_toks.size() - 1)]; }
    void advance() {
        if (m_i + 1 < m_toks.size())
            ++m_i;
    }
    bool isOp(const char* op) const {
        return cur().type == TokenType::Operator && cur().value == op;
    }
    bool isName(const char* n) const { return cur().type == TokenType::Name && cur().value == n; }
    bool acceptOp(const char* op) {
        if (!isOp(op))
            return false;
        advance();
        return true;
    }

    [[noreturn]] void fail(const std::string& message, const Token* at = nullptr) const {
        const Token& t = at ? *at : cur();
        throw KvError(std::to_string(t.line) + ":" + std::to_string(t.column) + ": " + message);
    }
    std::string tokenText(const Token& t) const {
        if (t.type == TokenType::Name || t.type == TokenType::Operator)
            return "'" + t.value + "'";
        return describe(t.type);
    }
    void expectOp(const char* op) {
        if (!acceptOp(op))
            fail(std::string("expected '") + op + "', got " + tokenText(cur()));
    }
    std::string expectName() {
        if (cur().type != TokenType::Name)
            fail("expected a name, got " + tokenText(cur()));
        std::string n = cur().value;
        advance();
        return n;
    }
    void expectBlockEnd() {
        if (cur().type != TokenType::BlockEnd)
            fail("expected end of statement block, got " + tokenText(cur()));
        advance();
    }

    struct DepthGuard {
        TokenCursor& p;
        explicit DepthGuard(TokenCursor& parser) : p(parser) {
            if (++p.m_depth > kMaxNesting)
                p.fail("template nested too deeply (more than " + std::to_string(kMaxNesting) +
                       " levels)");
        }
        ~DepthGuard() { --p.m_depth; }
    };

    ExprPtr make(Expr::Kind kind, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = at.line;
        e->column = at.column;
        return e;
    }

    // Records the subtree height; evaluation recurses this deep, so it is capped.
    ExprPtr done(ExprPtr e) {
        int d = 0;
        for (const auto& a : e->args)
            d = a ? std::max(d, a->depth) : d;
        for (const auto& kw : e->kwargs)
            d = std::max(d, kw.second->depth);
        e->depth = d + 1;
        if (e->depth > kMaxNesting) {
            throw KvError(std::to_string(e->line) + ":" + std::to_string(e->column) +
                          ": expression nested too deeply (more than " +
                          std::to_string(kMaxNesting) + " levels)");
        }
        return e;
    }

    std::vector<Token> m_toks;
    std::size_t m_i = 0;
    int m_depth = 0;
};

class ExprParser : public TokenCursor {
public:
    using TokenCursor::TokenCursor;

    ExprPtr parseTuple(bool withCondexpr);
    ExprPtr parseExpression(bool withCondexpr);
    void parseArgs(Expr& e);
    ExprPtr parseFilterChain(ExprPtr node);

protected:
    bool atTupleEnd() const;
    ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r);
    ExprPtr parseOr();
    ExprPtr parseAnd();
    ExprPtr parseNot();
    ExprPtr parseCompare();
    ExprPtr parseMath1();
    ExprPtr parseConcat();
    ExprPtr parseMath2();
    ExprPtr parsePow();
    ExprPtr parseUnary(bool withFilter);
    ExprPtr parsePrimary();
    ExprPtr parsePostfix(ExprPtr node);
    ExprPtr parseSubscript(ExprPtr node);
    ExprPtr parseCall(ExprPtr node);
    ExprPtr parseFilterExpr(ExprPtr node);
    ExprPtr parseTest(ExprPtr node);
};

} // namespace kvscope::chat
