#include "chat/lexer.h"

#include "util/status.h"
#include "util/utf8.h"

#include <cctype>

namespace kvscope::chat {
namespace {

bool isWs(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's newline normalization and keep_trailing_newline=False.
std::string normalize(const std::string& in) {
    std::string s;
    s.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '\r') {
            s += '\n';
            if (i + 1 < in.size() && in[i + 1] == '\n')
                ++i;
        } else {
            s += in[i];
        }
    }
    if (!s.empty() && s.back() == '\n')
        s.pop_back();
    return s;
}

class Lexer {
public:
    explicit Lexer(std::string src) : m_src(std::move(src)) {}

    std::vector<Token> run() {
        bool lineStarting = true;
        while (m_pos < m_src.size()) {
            const std::size_t tag = findTagStart(m_pos);
            std::string text = m_src.substr(m_pos, tag - m_pos);
            if (tag == m_src.size()) {
                emitText(std::move(text), m_pos);
                break;
            }
            const char kind = m_src[tag + 1]; // '{', '%' or '#'
            const char sign =
                tag + 2 < m_src.size() && (m_src[tag + 2] == '-' || m_src[tag + 2] == '+')
                    ? m_src[tag + 2]
                    : 0;
            if (sign == '-') {
                std::size_t e = text.size();
                while (e > 0 && isWs(text[e - 1]))
                    --e;
                text.resize(e);
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: drop spaces/tabs between the line start and a block/comment tag.
                const std::size_t lpos =
                    text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
                if ((lpos > 0 || lineStarting) && lpos < text.size()) {
                    bool allWs = true;
                    for (std::size_t i = lpos; i < text.size() && allWs; ++i)
                        allWs = isWs(text[i]);
                    if (allWs)
                        text.resize(lpos);
                }
            }
            emitText(std::move(text), m_pos);
            m_pos = tag + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                lineStarting = lexComment(tag);
            } else if (kind == '%' && isRawBlock()) {
                lineStarting = lexRaw(tag);
            } else {
                lineStarting = lexTag(kind == '{', tag);
            }
        }
        push(TokenType::Eof, {}, m_src.size());
        return std::move(m_tokens);
    }

private:
    std::size_t findTagStart(std::size_t from) const {
        for (std::size_t i = from; i + 1 < m_src.size(); ++i) {
            if (m_src[i] == '{' &&
                (m_src[i + 1] == '{' || m_src[i + 1] == '%' || m_src[i + 1] == '#'))
                return i;
        }
        return m_src.size();
    }

    void position(std::size_t offset, int& line, int& col) const {
        // Tokens are produced in order, so advance a cached cursor instead of rescanning.
        if (offset < m_lineCursor) {
            m_lineCursor = 0;
            m_line = 1;
            m_lineStart = 0;
        }
        for (; m_lineCursor < offset && m_lineCursor < m_src.size(); ++m_lineCursor) {
            if (m_src[m_lineCursor] == '\n') {
                ++m_line;
                m_lineStart = m_lineCursor + 1;
            }
        }
        line = m_line;
        col = static_cast<int>(offset - m_lineStart) + 1;
    }

    [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
        int line, col;
        position(offset, line, col);
        throw KvError(std::to_string(line) + ":" + std::to_string(col) + ": " + message);
    }

    void push(TokenType type, std::string value, std::size_t offset) {
        Token t{type, std::move(value), 1, 1};
        position(offset, t.line, t.column);
        m_tokens.push_back(std::move(t));
    }

    void emitText(std::string text, std::size_t offset) {
        if (!text.empty())
            push(TokenType::Text, std::move(text), offset);
    }

    // After a block or comment end: '-' eats all following whitespace, '+' nothing, plain
    // eats one newline (trim_blocks). Returns whether the consumed end ended with '\n'.
    bool afterEnd(char sign, bool trimBlocks) {
        if (sign == '-') {
            const std::size_t start = m_pos;
            while (m_pos < m_src.size() && isWs(m_src[m_pos]))
                ++m_pos;
            return m_pos > start && m_src[m_pos - 1] == '\n';
        }
        if (sign == 0 && trimBlocks && m_pos < m_src.size() && m_src[m_pos] == '\n') {
            ++m_pos;
            return true;
        }
        return false;
    }

    bool lexComment(std::size_t tag) {
        const std::size_t end = m_src.find("#}", m_pos);
        if (end == std::string::npos)
            fail(tag, "unterminated comment: missing '#}'");
        const char sign =
            end > m_pos && (m_src[end - 1] == '-' || m_src[end - 1] == '+') ? m_src[end - 1] : 0;
        m_pos = end + 2;
        return afterEnd(sign, true);
    }

    bool isRawBlock() const {
        std::size_t p = m_pos;
        while (p < m_src.size() && isWs(m_src[p]))
            ++p;
        if (m_src.compare(p, 3, "raw") != 0)
            return false;
        p += 3;
        while (p < m_src.size() && isWs(m_src[p]))
            ++p;
        return m_src.compare(p, 2, "%}") == 0 || m_src.compare(p, 3, "-%}") == 0;
    }

    bool lexRaw(std::size_t tag) {
        m_pos = m_src.find("%}", m_pos) + 2;
        if (m_src[m_pos - 3] == '-')
            afterEnd('-', false);
        for (std::size_t p = m_pos; (p = m_src.find("{%", p)) != std::string::npos; p += 2) {
            std::size_t q = p + 2;
            const char sign =
                q < m_src.size() && (m_src[q] == '-' || m_src[q] == '+') ? m_src[q++] : 0;
            while (q < m_src.size() && isWs(m_src[q]))
                ++q;
            if (m_src.compare(q, 6, "endraw") != 0)
                continue;
            q += 6;
            while (q < m_src.size() && isWs(m_src[q]))
                ++q;
            const char endSign =
                q < m_src.size() && (m_src[q] == '-' || m_src[q] == '+') ? m_src[q++] : 0;
            if (m_src.compare(q, 2, "%}") != 0)
                continue;
            std::string text = m_src.substr(m_pos, p - m_pos);
            if (sign == '-') {
                while (!text.empty() && isWs(text.back()))
                    text.pop_back();
            }
            emitText(std::move(text), m_pos);
            m_pos = q + 2;
            return afterEnd(endSign, true);
        }
        fail(tag, "unterminated raw block: missing '{% endraw %}'");
    }

    // Expression tokens up to the matching '}}' or '%}'. Returns lineStarting for the next text.
    bool lexTag(bool variable, std::size_t tag) {
        push(variable ? TokenType::VarBegin : TokenType::BlockBegin, {}, tag);
        const char closer = variable ? '}' : '%';
        std::string brackets; // open brackets: '}}' inside a dict literal does not end the tag
        int depth = 0;
        for (;;) {
            while (m_pos < m_src.size() && isWs(m_src[m_pos]))
                ++m_pos;
            if (m_pos >= m_src.size())
                fail(tag, std::string("unexpected end of template: missing '") + closer + "}'");
            const char c = m_src[m_pos];
            const auto at = [&](const char* s) {
                return m_src.compare(m_pos, std::char_traits<char>::length(s), s) == 0;
            };
            char sign = 0;
            bool ends = false;
            if (depth == 0 && (c == '-' || c == '+') && m_pos + 2 < m_src.size() + 0 &&
                m_src[m_pos + 1] == closer && m_src[m_pos + 2] == '}') {
                sign = c;
                ends = variable ? c == '-' : true;
            } else if (depth == 0 && c == closer && m_pos + 1 < m_src.size() &&
                       m_src[m_pos + 1] == '}') {
                ends = true;
            }
            if (ends) {
                push(variable ? TokenType::VarEnd : TokenType::BlockEnd, {}, m_pos);
                m_pos += sign ? 3 : 2;
                return afterEnd(sign, !variable);
            }
            if (c == '"' || c == '\'') {
                lexString(c);
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                lexNumber();
            } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                const std::size_t start = m_pos;
                while (
                    m_pos < m_src.size() &&
                    (std::isalnum(static_cast<unsigned char>(m_src[m_pos])) || m_src[m_pos] == '_'))
                    ++m_pos;
                push(TokenType::Name, m_src.substr(start, m_pos - start), start);
            } else {
                static const char* const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                                  ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
                const char* found = nullptr;
                for (const char* op : ops) {
                    if (at(op)) {
                        found = op;
                        break;
                    }
                }
                if (!found)
                    fail(m_pos, std::string("unexpected character '") + c + "'");
                const std::string op(found);
                if (op == "(" || op == "[" || op == "{") {
                    brackets += op == "(" ? ')' : op == "[" ? ']' : '}';
                } else if (op == ")" || op == "]" || op == "}") {
                    if (brackets.empty())
                        fail(m_pos, "unexpected '" + op + "'");
                    if (brackets.back() != op[0])
                        fail(m_pos, "unexpected '" + op + "', expected '" + brackets.back() + "'");
                    brackets.pop_back();
                }
                depth = static_cast<int>(brackets.size());
                push(TokenType::Operator, op, m_pos);
                m_pos += op.size();
            }
        }
    }

    void lexString(char quote) {
        const std::size_t start = m_pos++;
        std::string value;
        while (m_pos < m_src.size() && m_src[m_pos] != quote) {
            char c = m_src[m_pos++];
            if (c != '\\' || m_pos >= m_src.size()) {
                value += c;
                continue;
            }
            const char e = m_src[m_pos++];
            switch (e) {
            case 'n':
                value += '\n';
                break;
            case 't':
                value += '\t';
                break;
            case 'r':
                value += '\r';
                break;
            case 'b':
                value += '\b';
                break;
            case 'f':
                value += '\f';
                break;
            case 'v':
                value += '\v';
                break;
            case 'a':
                value += '\a';
                break;
            case '0':
                value += '\0';
                break;
            case '\\':
                value += '\\';
                break;
            case '\'':
                value += '\'';
                break;
            case '"':
                value += '"';
                break;
            case '\n':
                break; // line continuation
            case 'x':
            case 'u':
            case 'U': {
                const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                if (m_pos + n > m_src.size())
                    fail(m_pos, "truncated \\" + std::string(1, e) + " escape");
                char32_t cp = 0;
                for (int k = 0; k < n; ++k) {
                    const char h = m_src[m_pos + k];
                    if (!std::isxdigit(static_cast<unsigned char>(h)))
                        fail(m_pos, "invalid \\" + std::string(1, e) + " escape");
                    cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                        ? h - '0'
                                        : (std::tolower(h) - 'a' + 10));
                }
                m_pos += n;
                kvscope::appendUtf8(value, cp);
                break;
            }
            default:
                value += '\\', value += e; // Python keeps unknown escapes verbatim
            }
        }
        if (m_pos >= m_src.size())
            fail(start, "unterminated string literal");
        ++m_pos;
        push(TokenType::String, std::move(value), start);
    }

    void lexNumber() {
        const std::size_t start = m_pos;
        auto digits = [&] {
            std::string d;
            while (m_pos < m_src.size() &&
                   (std::isdigit(static_cast<unsigned char>(m_src[m_pos])) ||
                    (m_src[m_pos] == '_' && m_pos + 1 < m_src.size() &&
                     std::isdigit(static_cast<unsigned char>(m_src[m_pos + 1]))))) {
                if (m_src[m_pos] != '_')
                    d += m_src[m_pos];
                ++m_pos;
            }
            return d;
        };
        std::string text = digits();
        bool isFloat = false;
        if (m_pos + 1 < m_src.size() && m_src[m_pos] == '.' &&
            std::isdigit(static_cast<unsigned char>(m_src[m_pos + 1]))) {
            ++m_pos;
            text += "." + digits();
            isFloat = true;
        }
        if (m_pos < m_src.size() && (m_src[m_pos] == 'e' || m_src[m_pos] == 'E')) {
            std::size_t p = m_pos + 1;
            if (p < m_src.size() && (m_src[p] == '+' || m_src[p] == '-'))
                ++p;
            if (p < m_src.size() && std::isdigit(static_cast<unsigned char>(m_src[p]))) {
                text += 'e' + m_src.substr(m_pos + 1, p - m_pos - 1);
                m_pos = p;
                text += digits();
                isFloat = true;
            }
        }
        push(isFloat ? TokenType::Float : TokenType::Integer, std::move(text), start);
    }

    std::string m_src;
    std::size_t m_pos = 0;
    std::vector<Token> m_tokens;
    mutable std::size_t m_lineCursor = 0, m_lineStart = 0;
    mutable int m_line = 1;
};

} // namespace

std::vector<Token> tokenize(const std::string& source) {
    return Lexer(normalize(source)).run();
}

} // namespace kvscope::chat
