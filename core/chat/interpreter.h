// Evaluates a parsed chat template against a set of variables, with Python/jinja2
// semantics (scoping, loops, macros, Undefined) and hard limits (budget.h) so hostile
// templates fail with a clear message instead of hanging or exhausting memory.
//
// One Interpreter renders one template once; it is not thread-safe, the AST it reads is.
#pragma once

#include "chat/ast.h"
#include "chat/budget.h"
#include "chat/value.h"
#include "util/status.h"

#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvscope::chat {

// Raised by the template itself through raise_exception(); what() is the template's message,
// line() the innermost statement it was raised in (0 until the interpreter sets it).
class TemplateError : public KvError {
public:
    explicit TemplateError(const std::string& message, int line = 0)
        : KvError(message), m_line(line) {}
    int line() const { return m_line; }

private:
    int m_line;
};

// Any other render failure, with the template line of the innermost statement it happened in.
// what() is the bare message; `limit` marks a LimitError (a budget ran out).
class LocatedError : public KvError {
public:
    LocatedError(const std::string& message, int line, bool limit)
        : KvError(message), m_line(line), m_limit(limit) {}
    int line() const { return m_line; }
    bool limit() const { return m_limit; }

private:
    int m_line;
    bool m_limit;
};

struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
    const Value* lookup(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
public:
    // The budget must outlive the interpreter and every value the render creates.
    Interpreter(Budget& budget, const std::tm& now)
        : m_budget(budget), m_limits(budget.limits()), m_now(now) {}
    // Breaks the reference cycles macros (closure scope <-> macro) and namespaces (which can
    // hold themselves) form, so nothing a render allocated outlives it.
    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    std::string render(const Body& body, const ScopePtr& globals);

    // Services for filters, methods and globals.
    Value call(const Value& callee, const CallArgs& args);
    Value getAttr(const Value& obj, const std::string& name);
    Value getItem(const Value& obj, const Value& key);
    std::vector<Value> iterate(const Value& v) const;
    // Throws LimitError if a string of `bytes` would exceed the string cap (call it before
    // building one, or as one grows).
    void checkSize(std::size_t bytes) const;
    Budget& budget() const { return m_budget; }
    // Registers a namespace or macro value for the cleanup in ~Interpreter().
    void own(const Value& v);
    const std::tm& now() const { return m_now; }
    const Limits& limits() const { return m_limits; }

private:
    enum class Flow { Normal, Break, Continue };
    // Guards the C++ stack (every nested eval/exec counts) and charges one step.
    struct Depth {
        Interpreter& in;
        explicit Depth(Interpreter& i) : in(i) {
            in.m_budget.step();
            if (in.m_evalDepth >= in.m_limits.maxEvalDepth)
                throw LimitError("template evaluation nested too deeply (more than " +
                                 std::to_string(in.m_limits.maxEvalDepth) + " levels)");
            ++in.m_evalDepth;
        }
        ~Depth() { --in.m_evalDepth; }
        Depth(const Depth&) = delete;
        Depth& operator=(const Depth&) = delete;
    };

    Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
    Flow execStmt(const Stmt& s, const ScopePtr& scope, std::string& out);
    Flow execFor(const Stmt& s, const ScopePtr& scope, std::string& out);
    void assign(const AssignTarget& t, const Value& v, const ScopePtr& scope);
    Value makeMacro(const std::string& name, const std::vector<MacroParam>* params,
                    const Body* body, const ScopePtr& closure);

    Value eval(const Expr& e, const ScopePtr& scope);
    Value evalCall(const Expr& e, const ScopePtr& scope);
    Value evalFilter(const Expr& e, const ScopePtr& scope, const Value* blockInput);
    Value evalSlice(const Value& obj, const Value& start, const Value& stop, const Value& step);
    CallArgs evalArgs(const Expr& e, const ScopePtr& scope, std::size_t firstArg);
    Value binary(const std::string& op, const Value& a, const Value& b) const;
    bool compare(const std::string& op, const Value& a, const Value& b) const;

    // Appends to the rendered text, within maxOutputBytes.
    void appendOutput(std::string& out, std::string_view text) const;
    void appendOutput(std::string& out, const Value& v) const;
    Value makeLoop(const std::vector<Value>& items, std::int64_t index);
    void countIteration();

    Budget& m_budget;
    Limits m_limits;
    std::tm m_now;
    std::size_t m_iterations = 0;
    int m_macroDepth = 0;
    int m_evalDepth = 0;
    int m_line = 0;
    std::vector<std::weak_ptr<DictData>> m_namespaces;
    std::vector<std::weak_ptr<Callable>> m_macros;
};

// Python `in`.
bool contains(const Value& container, const Value& item);

} // namespace kvscope::chat
