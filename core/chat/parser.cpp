#include "chat/parser.h"

#include "util/status.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace kvscope::chat {
namespace {

const char* describe(TokenType t) {
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

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : m_toks(std::move(tokens)) {}

    Body parseAll() {
        std::string found;
        Body body = parseBody({}, found);
        return body;
    }

private:
    // --- token helpers -------------------------------------------------------------------
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
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
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

    // --- statements ----------------------------------------------------------------------
    Body parseBody(const std::vector<std::string>& endTags, std::string& found) {
        DepthGuard guard(*this);
        const std::vector<std::string>* outerEndTags = m_endTags;
        m_endTags = &endTags;
        Body body = parseBodyItems(endTags, found);
        m_endTags = outerEndTags;
        return body;
    }

    Body parseBodyItems(const std::vector<std::string>& endTags, std::string& found) {
        Body body;
        for (;;) {
            const Token& t = cur();
            if (t.type == TokenType::Eof) {
                if (!endTags.empty()) {
                    std::string expected;
                    for (const auto& e : endTags)
                        expected += (expected.empty() ? "'" : " or '") + e + "'";
                    fail("unexpected end of template, expected " + expected +
                         " (block opened at line " + std::to_string(m_openLine) + ")");
                }
                return body;
            }
            if (t.type == TokenType::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::Text;
                s->line = t.line;
                s->text = t.value;
                body.push_back(std::move(s));
                advance();
            } else if (t.type == TokenType::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::Output;
                s->line = t.line;
                advance();
                s->expr = parseTuple(true);
                if (cur().type != TokenType::VarEnd)
                    fail("expected end of print statement, got " + tokenText(cur()));
                advance();
                body.push_back(std::move(s));
            } else if (t.type == TokenType::BlockBegin) {
                advance();
                if (cur().type != TokenType::Name)
                    fail("expected a statement name after '{%', got " + tokenText(cur()));
                const std::string tag = cur().value;
                for (const auto& e : endTags) {
                    if (e == tag) {
                        found = tag;
                        advance();
                        return body;
                    }
                }
                body.push_back(parseStatement());
            } else {
                fail("unexpected " + tokenText(t));
            }
        }
    }

    StmtPtr parseStatement() {
        const Token tagTok = cur();
        const std::string tag = tagTok.value;
        const int savedOpen = m_openLine;
        m_openLine = tagTok.line;
        advance();
        auto s = std::make_unique<Stmt>();
        s->line = tagTok.line;
        std::string found;
        if (tag == "if") {
            s->kind = Stmt::Kind::If;
            s->conditions.push_back(parseTuple(false));
            expectBlockEnd();
            for (;;) {
                s->bodies.push_back(parseBody({"elif", "else", "endif"}, found));
                if (found == "elif") {
                    s->conditions.push_back(parseTuple(false));
                    expectBlockEnd();
                } else if (found == "else") {
                    expectBlockEnd();
                    s->bodies.push_back(parseBody({"endif"}, found));
                    expectBlockEnd();
                    break;
                } else {
                    expectBlockEnd();
                    break;
                }
            }
        } else if (tag == "for") {
            s->kind = Stmt::Kind::For;
            s->target = parseAssignTarget(false);
            if (!isName("in"))
                fail("expected 'in', got " + tokenText(cur()));
            advance();
            s->expr = parseTuple(false);
            if (isName("if")) {
                advance();
                s->filter = parseExpression(true);
            }
            if (isName("recursive"))
                fail("recursive for loops are not supported");
            expectBlockEnd();
            s->body = parseBody({"endfor", "else"}, found);
            expectBlockEnd();
            if (found == "else") {
                s->elseBody = parseBody({"endfor"}, found);
                expectBlockEnd();
            }
        } else if (tag == "set") {
            s->target = parseAssignTarget(true);
            if (acceptOp("=")) {
                s->kind = Stmt::Kind::Set;
                s->expr = parseTuple(true);
                expectBlockEnd();
            } else {
                s->kind = Stmt::Kind::SetBlock;
                if (isOp("|"))
                    s->filter = parseFilterChain(nullptr);
                expectBlockEnd();
                s->body = parseBody({"endset"}, found);
                expectBlockEnd();
            }
        } else if (tag == "macro") {
            s->kind = Stmt::Kind::Macro;
            s->name = expectName();
            s->params = parseParams();
            expectBlockEnd();
            s->body = parseBody({"endmacro"}, found);
            if (cur().type == TokenType::Name)
                advance(); // {% endmacro name %}
            expectBlockEnd();
        } else if (tag == "call") {
            s->kind = Stmt::Kind::CallBlock;
            if (isOp("("))
                s->params = parseParams();
            s->expr = parseExpression(true);
            if (s->expr->kind != Expr::Kind::Call)
                fail("expected a macro call after 'call'", &tagTok);
            expectBlockEnd();
            s->body = parseBody({"endcall"}, found);
            expectBlockEnd();
        } else if (tag == "filter") {
            s->kind = Stmt::Kind::FilterBlock;
            auto first = make(Expr::Kind::Filter, cur());
            first->name = expectName();
            while (acceptOp("."))
                first->name += "." + expectName();
            first->args.push_back(nullptr); // the block's output
            if (isOp("("))
                parseArgs(*first);
            s->filter = parseFilterChain(done(std::move(first)));
            expectBlockEnd();
            s->body = parseBody({"endfilter"}, found);
            expectBlockEnd();
        } else if (tag == "break" || tag == "continue") {
            s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
            expectBlockEnd();
        } else if (tag == "generation") {
            s->kind = Stmt::Kind::Scope;
            expectBlockEnd();
            s->body = parseBody({"endgeneration"}, found);
            expectBlockEnd();
        } else if (tag == "with") {
            s->kind = Stmt::Kind::Scope;
            while (cur().type != TokenType::BlockEnd) {
                if (!s->assignments.empty())
                    expectOp(",");
                std::string n = expectName();
                expectOp("=");
                s->assignments.emplace_back(std::move(n), parseExpression(true));
            }
            expectBlockEnd();
            s->body = parseBody({"endwith"}, found);
            expectBlockEnd();
        } else {
            std::string message = "Encountered unknown tag '" + tag + "'.";
            if (m_endTags && !m_endTags->empty()) {
                message += " Jinja was looking for the following tags: ";
                for (std::size_t i = 0; i < m_endTags->size(); ++i)
                    message += (i ? " or '" : "'") + (*m_endTags)[i] + "'";
                message += ".";
            }
            fail(message, &tagTok);
        }
        m_openLine = savedOpen;
        return s;
    }

    AssignTarget parseAssignTarget(bool allowAttribute) {
        AssignTarget t;
        const bool paren = acceptOp("(");
        t.names.push_back(expectName());
        if (allowAttribute && !paren && acceptOp(".")) {
            t.attribute = expectName();
            return t;
        }
        while (acceptOp(",")) {
            t.tuple = true;
            if (cur().type != TokenType::Name)
                break;
            t.names.push_back(expectName());
        }
        if (paren)
            expectOp(")");
        return t;
    }

    std::vector<MacroParam> parseParams() {
        std::vector<MacroParam> params;
        expectOp("(");
        while (!acceptOp(")")) {
            if (!params.empty())
                expectOp(",");
            if (acceptOp(")"))
                break;
            MacroParam p;
            p.name = expectName();
            if (acceptOp("="))
                p.defaultValue = parseExpression(true);
            params.push_back(std::move(p));
        }
        return params;
    }

    // --- expressions ---------------------------------------------------------------------
    bool atTupleEnd() const {
        const auto t = cur().type;
        return t == TokenType::VarEnd || t == TokenType::BlockEnd || t == TokenType::Eof ||
               isOp(")") || isOp("]") || isOp("}") || isName("if") || isName("recursive");
    }

    ExprPtr parseTuple(bool withCondexpr) {
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

    ExprPtr parseExpression(bool withCondexpr) {
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

    ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
        auto e = make(Expr::Kind::Binary, at);
        e->name = std::move(op);
        e->args.push_back(std::move(l));
        e->args.push_back(std::move(r));
        return done(std::move(e));
    }

    ExprPtr parseOr() {
        ExprPtr l = parseAnd();
        while (isName("or")) {
            const Token at = cur();
            advance();
            l = binary(at, "or", std::move(l), parseAnd());
        }
        return l;
    }

    ExprPtr parseAnd() {
        ExprPtr l = parseNot();
        while (isName("and")) {
            const Token at = cur();
            advance();
            l = binary(at, "and", std::move(l), parseNot());
        }
        return l;
    }

    ExprPtr parseNot() {
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

    ExprPtr parseCompare() {
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

    ExprPtr parseMath1() {
        ExprPtr l = parseConcat();
        while (isOp("+") || isOp("-")) {
            const Token at = cur();
            advance();
            l = binary(at, at.value, std::move(l), parseConcat());
        }
        return l;
    }

    ExprPtr parseConcat() {
        ExprPtr l = parseMath2();
        while (isOp("~")) {
            const Token at = cur();
            advance();
            l = binary(at, "~", std::move(l), parseMath2());
        }
        return l;
    }

    ExprPtr parseMath2() {
        ExprPtr l = parsePow();
        while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
            const Token at = cur();
            advance();
            l = binary(at, at.value, std::move(l), parsePow());
        }
        return l;
    }

    ExprPtr parsePow() {
        ExprPtr l = parseUnary(true);
        while (isOp("**")) {
            const Token at = cur();
            advance();
            l = binary(at, "**", std::move(l), parseUnary(true));
        }
        return l;
    }

    ExprPtr parseUnary(bool withFilter) {
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

    ExprPtr parsePrimary() {
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

    ExprPtr parsePostfix(ExprPtr node) {
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

    ExprPtr parseSubscript(ExprPtr node) {
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

    void parseArgs(Expr& e) {
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

    ExprPtr parseCall(ExprPtr node) {
        DepthGuard guard(*this);
        auto e = make(Expr::Kind::Call, cur());
        e->args.push_back(std::move(node));
        parseArgs(*e);
        return done(std::move(e));
    }

    ExprPtr parseFilterExpr(ExprPtr node) {
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

    // One or more `| name(args)`; `node` may be null (filter blocks, block set).
    ExprPtr parseFilterChain(ExprPtr node) {
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

    ExprPtr parseTest(ExprPtr node) {
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

    std::vector<Token> m_toks;
    std::size_t m_i = 0;
    int m_depth = 0;
    int m_openLine = 0;
    const std::vector<std::string>* m_endTags = nullptr;
};

} // namespace

Body parseTemplate(const std::string& source) {
    return Parser(tokenize(source)).parseAll();
}

} // namespace kvscope::chat
