#include "chat/interpreter.h"

#include "chat/builtins.h"
#include "chat/strutil.h"

#include <climits>
#include <cmath>
#include <cstdint>

namespace kvscope::chat {

const Value* Scope::lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
        auto it = s->vars.find(name);
        if (it != s->vars.end())
            return &it->second;
    }
    return nullptr;
}

Interpreter::~Interpreter() {
    for (const auto& weak : m_macros)
        if (auto c = weak.lock())
            c->fn = nullptr;
    for (const auto& weak : m_namespaces)
        if (auto d = weak.lock())
            d->entries.clear();
}

void Interpreter::own(const Value& v) {
    if (v.isCallable())
        m_macros.push_back(v.callablePtr());
    else if (v.isNamespace())
        m_namespaces.push_back(v.dictPtr());
}

void Interpreter::checkSize(std::size_t bytes) const {
    m_budget.checkString(bytes);
}

void Interpreter::appendOutput(std::string& out, std::string_view text) const {
    if (text.size() > m_limits.maxOutputBytes - std::min(out.size(), m_limits.maxOutputBytes))
        throw LimitError("the output exceeds the limit of " +
                         std::to_string(m_limits.maxOutputBytes) + " bytes");
    out += text;
    m_budget.bytes(text.size());
}

void Interpreter::appendOutput(std::string& out, const Value& v) const {
    if (v.isString())
        appendOutput(out, std::string_view(v.asString()));
    else if (!v.isUndefined())
        appendOutput(out, std::string_view(v.repr()));
}

void Interpreter::countIteration() {
    if (++m_iterations > m_limits.maxLoopIterations)
        throw LimitError("the template exceeded " + std::to_string(m_limits.maxLoopIterations) +
                         " loop iterations");
    m_budget.step(kLoopIterationSteps);
}

std::string Interpreter::render(const Body& body, const ScopePtr& globals) {
    std::string out;
    exec(body, globals, out);
    return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
        const Flow f = execStmt(*s, scope, out);
        if (f != Flow::Normal)
            return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::execStmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
    m_line = s.line;
    try {
        const Depth depth(*this); // inside the try: a limit it hits names this line
        switch (s.kind) {
        case Stmt::Kind::Text:
            appendOutput(out, std::string_view(s.text));
            return Flow::Normal;
        case Stmt::Kind::Output:
            appendOutput(out, eval(*s.expr, scope));
            return Flow::Normal;
        case Stmt::Kind::If:
            for (std::size_t i = 0; i < s.conditions.size(); ++i) {
                if (eval(*s.conditions[i], scope).truthy())
                    return exec(s.bodies[i], scope, out);
            }
            if (s.bodies.size() > s.conditions.size())
                return exec(s.bodies.back(), scope, out);
            return Flow::Normal;
        case Stmt::Kind::For:
            return execFor(s, scope, out);
        case Stmt::Kind::Set:
            assign(s.target, eval(*s.expr, scope), scope);
            return Flow::Normal;
        case Stmt::Kind::SetBlock: {
            std::string captured;
            exec(s.body, scope, captured);
            Value v(std::move(captured));
            if (s.filter)
                v = evalFilter(*s.filter, scope, &v);
            assign(s.target, v, scope);
            return Flow::Normal;
        }
        case Stmt::Kind::Macro:
            scope->vars[s.name] = makeMacro(s.name, &s.params, &s.body, scope);
            return Flow::Normal;
        case Stmt::Kind::CallBlock: {
            const Value caller = makeMacro("caller", &s.params, &s.body, scope);
            const Expr& callExpr = *s.expr;
            const Value callee = eval(*callExpr.args[0], scope);
            CallArgs args = evalArgs(callExpr, scope, 1);
            args.keyword.emplace_back("caller", caller);
            appendOutput(out, call(callee, args));
            return Flow::Normal;
        }
        case Stmt::Kind::FilterBlock: {
            std::string captured;
            exec(s.body, std::make_shared<Scope>(Scope{{}, scope}), captured);
            const Value input(std::move(captured));
            appendOutput(out, evalFilter(*s.filter, scope, &input));
            return Flow::Normal;
        }
        case Stmt::Kind::Break:
            return Flow::Break;
        case Stmt::Kind::Continue:
            return Flow::Continue;
        case Stmt::Kind::Scope: {
            auto inner = std::make_shared<Scope>(Scope{{}, scope});
            for (const auto& [name, expr] : s.assignments)
                inner->vars[name] = eval(*expr, scope);
            return exec(s.body, inner, out);
        }
        }
    } catch (const TemplateError& e) {
        if (e.line() > 0)
            throw;
        throw TemplateError(e.what(), s.line);
    } catch (const LocatedError&) {
        throw;
    } catch (const LimitError& e) {
        throw LocatedError(e.what(), s.line, true);
    } catch (const KvError& e) {
        throw LocatedError(e.what(), s.line, false);
    } catch (const std::bad_alloc&) {
        // The budgets should stop a template long before this; never show "std::bad_alloc".
        throw LocatedError("render stopped: out of memory", s.line, true);
    } catch (const std::length_error&) {
        throw LocatedError("render stopped: out of memory", s.line, true);
    } catch (const std::exception&) {
        throw LocatedError("internal error in the template engine", s.line, false);
    }
    return Flow::Normal;
}

Value Interpreter::makeLoop(const std::vector<Value>& items, std::int64_t i) {
    const auto n = static_cast<std::int64_t>(items.size());
    Value loop = Value::dict();
    auto& d = loop.asDict();
    d.entries.reserve(12);
    d.append("index", Value(i + 1));
    d.append("index0", Value(i));
    d.append("revindex", Value(n - i));
    d.append("revindex0", Value(n - i - 1));
    d.append("first", Value(i == 0));
    d.append("last", Value(i == n - 1));
    d.append("length", Value(n));
    d.append("depth", Value(1));
    d.append("depth0", Value(0));
    d.append("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    d.append("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    auto cycle = std::make_shared<Callable>();
    cycle->name = "cycle";
    cycle->fn = [i](Interpreter&, const CallArgs& a) -> Value {
        if (a.positional.empty())
            throw KvError("no items for cycling given");
        return a.positional[i % a.positional.size()];
    };
    d.append("cycle", Value(cycle));
    return loop;
}

Interpreter::Flow Interpreter::execFor(const Stmt& s, const ScopePtr& scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*s.expr, scope));
    auto bindTarget = [&](const ScopePtr& iterScope, const Value& item) {
        assign(s.target, item, iterScope);
    };
    if (s.filter) {
        // `for x in xs if cond`: filtered before the loop, so loop.length counts kept items.
        std::vector<Value> kept;
        for (const auto& item : items) {
            countIteration();
            auto probe = std::make_shared<Scope>(Scope{{}, scope});
            bindTarget(probe, item);
            if (eval(*s.filter, probe).truthy())
                kept.push_back(item);
        }
        items = std::move(kept);
    }
    if (items.empty())
        return exec(s.elseBody, std::make_shared<Scope>(Scope{{}, scope}), out);
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
        countIteration();
        auto iterScope = std::make_shared<Scope>(Scope{{}, scope});
        // Like jinja2, the `loop` object is made only for a body that mentions it.
        if (s.usesLoop)
            iterScope->vars["loop"] = makeLoop(items, i);
        bindTarget(iterScope, items[i]);
        const Flow f = exec(s.body, iterScope, out);
        if (f == Flow::Break)
            break;
    }
    return Flow::Normal;
}

void Interpreter::assign(const AssignTarget& t, const Value& v, const ScopePtr& scope) {
    if (!t.attribute.empty()) {
        const Value* ns = scope->lookup(t.names[0]);
        if (!ns || !ns->isNamespace())
            throw KvError("cannot assign attribute on non-namespace object");
        ns->asDict().set(t.attribute, v);
        return;
    }
    if (!t.tuple) {
        scope->vars[t.names[0]] = v;
        return;
    }
    const std::vector<Value> parts = iterate(v.require());
    if (parts.size() != t.names.size())
        throw KvError(
            parts.size() < t.names.size()
                ? "not enough values to unpack (expected " + std::to_string(t.names.size()) +
                      ", got " + std::to_string(parts.size()) + ")"
                : "too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
    for (std::size_t i = 0; i < parts.size(); ++i)
        scope->vars[t.names[i]] = parts[i];
}

Value Interpreter::makeMacro(const std::string& name, const std::vector<MacroParam>* params,
                             const Body* body, const ScopePtr& closure) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->isMacro = true;
    // The AST outlives every render, and macro values cannot escape the render that made them.
    c->fn = [this, name, params, body, closure](Interpreter&, const CallArgs& args) -> Value {
        m_budget.step(kMacroCallSteps);
        if (m_macroDepth >= m_limits.maxMacroDepth)
            throw LimitError("macro '" + name + "' recursed more than " +
                             std::to_string(m_limits.maxMacroDepth) + " levels deep");
        auto scope = std::make_shared<Scope>(Scope{{}, closure});
        std::vector<Value> varargs;
        for (std::size_t i = 0; i < params->size(); ++i) {
            const auto& p = (*params)[i];
            if (const Value* v = args.get(p.name, static_cast<int>(i)))
                scope->vars[p.name] = *v;
            else if (p.defaultValue)
                scope->vars[p.name] = eval(*p.defaultValue, scope);
            else
                scope->vars[p.name] =
                    Value::undefined("parameter '" + p.name + "' was not provided");
        }
        for (std::size_t i = params->size(); i < args.positional.size(); ++i)
            varargs.push_back(args.positional[i]);
        Value kwargs = Value::dict();
        for (const auto& [k, v] : args.keyword) {
            bool isParam = false;
            for (const auto& p : *params)
                isParam = isParam || p.name == k;
            if (k == "caller")
                scope->vars["caller"] = v;
            else if (!isParam)
                kwargs.asDict().set(k, v);
        }
        scope->vars["varargs"] = Value::list(std::move(varargs));
        scope->vars["kwargs"] = kwargs;
        ++m_macroDepth;
        std::string out;
        try {
            exec(*body, scope, out);
        } catch (...) {
            --m_macroDepth;
            throw;
        }
        --m_macroDepth;
        return Value(std::move(out));
    };
    Value macro(c);
    own(macro);
    return macro;
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
    if (callee.isUndefined())
        callee.require();
    if (!callee.isCallable())
        throw KvError("'" + callee.typeName() + "' object is not callable");
    return callee.asCallable().fn(*this, args);
}

} // namespace kvscope::chat
