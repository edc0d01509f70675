// Statement parsing: template data, {{ }} output and the {% %} tags, on top of ExprParser.
#include "chat/parser.h"

#include "chat/exprparser.h"

namespace kvscope::chat {
namespace {

// Whether an expression or statements refer to the variable `name` (the parser's nesting
// limit bounds the recursion).
bool mentions(const Expr* e, const std::string& name) {
    if (!e)
        return false;
    if (e->kind == Expr::Kind::Name && e->name == name)
        return true;
    for (const auto& a : e->args)
        if (mentions(a.get(), name))
            return true;
    for (const auto& [_, v] : e->kwargs)
        if (mentions(v.get(), name))
            return true;
    return false;
}

bool mentions(const Body& body, const std::string& name) {
    for (const auto& s : body) {
        if (mentions(s->expr.get(), name) || mentions(s->filter.get(), name) ||
            mentions(s->body, name) || mentions(s->elseBody, name))
            return true;
        for (const auto& c : s->conditions)
            if (mentions(c.get(), name))
                return true;
        for (const auto& b : s->bodies)
            if (mentions(b, name))
                return true;
        for (const auto& p : s->params)
            if (mentions(p.defaultValue.get(), name))
                return true;
        for (const auto& [_, v] : s->assignments)
            if (mentions(v.get(), name))
                return true;
    }
    return false;
}

class Parser : public ExprParser {
public:
    using ExprParser::ExprParser;

    Body parseAll() {
        std::string found;
        return parseBody({}, found);
    }

private:
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
            s->usesLoop = mentions(s->body, "loop");
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

    int m_openLine = 0;
    const std::vector<std::string>* m_endTags = nullptr;
};

} // namespace

Body parseTemplate(const std::string& source) {
    return Parser(tokenize(source)).parseAll();
}

} // namespace kvscope::chat
