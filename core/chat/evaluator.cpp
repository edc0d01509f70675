// Expression evaluation: names, attribute/item access with jinja2's sandbox rules, slicing,
// calls, filters, tests and Python operator semantics.
#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/strutil.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>

namespace kvscope::chat {

std::vector<Value> Interpreter::iterate(const Value& v) const {
    if (v.isUndefined())
        return {};
    if (v.isList()) {
        m_budget.items(v.asList().items.size());
        return v.asList().items;
    }
    if (v.isDict()) {
        m_budget.items(v.asDict().entries.size());
        std::vector<Value> keys;
        for (const auto& [k, _] : v.asDict().entries)
            keys.emplace_back(k);
        return keys;
    }
    if (v.isString()) {
        // One string value per code point: checked before any is made.
        const std::string& s = v.asString();
        m_budget.checkItems(str::length(s));
        m_budget.bytes(s.size(), kDecodedBytesPerStep);
        const Budget::Hold decoded(s.size() * sizeof(char32_t));
        std::vector<Value> chars;
        for (char32_t cp : str::decode(s)) {
            std::string one;
            str::appendUtf8(one, cp);
            chars.emplace_back(std::move(one));
        }
        return chars;
    }
    throw KvError("'" + v.typeName() + "' object is not iterable");
}

namespace {
const char* const kUnsafeMutators[] = {"append", "extend",     "insert", "pop",
                                       "remove", "clear",      "sort",   "reverse",
                                       "update", "setdefault", "popitem"};
} // namespace

Value Interpreter::getAttr(const Value& obj, const std::string& name) {
    obj.require();
    if ((obj.isList() || obj.isDict())) {
        for (const char* m : kUnsafeMutators) {
            if (name == m)
                throw KvError("access to attribute '" + name + "' of '" + obj.typeName() +
                              "' object is unsafe.");
        }
    }
    if (hasMethod(obj, name)) {
        auto c = std::make_shared<Callable>();
        c->name = name;
        c->fn = [obj, name](Interpreter& in, const CallArgs& a) {
            return callMethod(in, obj, name, a);
        };
        return Value(c);
    }
    if (obj.isDict() || obj.isNamespace()) {
        if (const Value* v = obj.asDict().find(name))
            return *v;
    }
    return Value::undefined("'" + obj.objectTypeRepr() + "' has no attribute '" + name + "'");
}

Value Interpreter::getItem(const Value& obj, const Value& key) {
    obj.require();
    if (key.isString()) {
        if (obj.isDict()) {
            if (const Value* v = obj.asDict().find(key.asString()))
                return *v;
        }
        return getAttr(obj, key.asString());
    }
    if ((obj.isList() || obj.isString()) && (key.isInt() || key.isBool())) {
        std::int64_t i = key.asInt();
        if (obj.isList()) {
            const auto& items = obj.asList().items;
            const auto n = static_cast<std::int64_t>(items.size());
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                return items[i];
        } else {
            // Walks to the code point instead of decoding the whole string.
            const std::string& s = obj.asString();
            m_budget.bytes(s.size());
            const auto n = static_cast<std::int64_t>(str::codePointCount(s));
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                std::size_t at = 0;
                for (std::int64_t k = 0; k < i; ++k)
                    at = str::nextCodePoint(s, at);
                return Value(s.substr(at, str::nextCodePoint(s, at) - at));
            }
        }
    }
    return Value::undefined(obj.objectTypeRepr() + " has no element " + key.repr());
}

Value Interpreter::evalSlice(const Value& obj, const Value& startV, const Value& stopV,
                             const Value& stepV) {
    obj.require();
    auto index = [](const Value& v, std::int64_t dflt) {
        if (v.isUndefined() || v.isNone())
            return std::pair<bool, std::int64_t>{false, dflt};
        if (!v.isInt() && !v.isBool())
            throw KvError("slice indices must be integers or None");
        return std::pair<bool, std::int64_t>{true, v.asInt()};
    };
    const std::int64_t step = index(stepV, 1).second;
    if (step == 0)
        throw KvError("slice step cannot be zero");
    std::vector<char32_t> cps;
    const bool isStr = obj.isString();
    std::optional<Budget::Hold> decoded;
    if (isStr) {
        m_budget.bytes(obj.asString().size(), kDecodedBytesPerStep);
        decoded.emplace(obj.asString().size() * sizeof(char32_t));
        cps = str::decode(obj.asString());
    } else if (!obj.isList()) {
        throw KvError("'" + obj.typeName() + "' object is not subscriptable");
    }
    const auto n = static_cast<std::int64_t>(isStr ? cps.size() : obj.asList().items.size());
    // CPython's PySlice_AdjustIndices.
    auto adjust = [&](std::pair<bool, std::int64_t> p, bool isStart) {
        if (!p.first)
            return step < 0 ? (isStart ? n - 1 : -1) : (isStart ? 0 : n);
        std::int64_t v = p.second;
        if (v < 0) {
            v += n;
            if (v < 0)
                v = step < 0 ? -1 : 0;
        } else if (v >= n) {
            v = step < 0 ? n - 1 : n;
        }
        return v;
    };
    const std::int64_t start = adjust(index(startV, 0), true);
    const std::int64_t stop = adjust(index(stopV, 0), false);
    std::vector<Value> items;
    std::vector<char32_t> outCps;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (isStr)
            outCps.push_back(cps[i]);
        else
            items.push_back(obj.asList().items[i]);
    }
    if (isStr)
        return Value(str::encode(outCps));
    m_budget.items(items.size());
    return Value::list(std::move(items), obj.asList().tuple);
}

CallArgs Interpreter::evalArgs(const Expr& e, const ScopePtr& scope, std::size_t firstArg) {
    CallArgs args;
    for (std::size_t i = firstArg; i < e.args.size(); ++i)
        args.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) {
        Value x = eval(*v, scope);
        if (k == "*") {
            for (auto& item : iterate(x.require()))
                args.positional.push_back(std::move(item));
        } else if (k == "**") {
            if (!x.isDict())
                throw KvError("argument after ** must be a mapping, not " + x.typeName());
            m_budget.items(x.asDict().entries.size());
            for (const auto& [dk, dv] : x.asDict().entries)
                args.keyword.emplace_back(dk, dv);
        } else {
            args.keyword.emplace_back(k, std::move(x));
        }
    }
    return args;
}

Value Interpreter::evalCall(const Expr& e, const ScopePtr& scope) {
    const Expr& calleeExpr = *e.args[0];
    if (calleeExpr.kind == Expr::Kind::GetAttr) {
        // Fast path for method calls: no bound-method object.
        const Value obj = eval(*calleeExpr.args[0], scope);
        obj.require();
        if (hasMethod(obj, calleeExpr.name))
            return callMethod(*this, obj, calleeExpr.name, evalArgs(e, scope, 1));
        const Value callee = getAttr(obj, calleeExpr.name);
        return call(callee, evalArgs(e, scope, 1));
    }
    const Value callee = eval(calleeExpr, scope);
    return call(callee, evalArgs(e, scope, 1));
}

Value Interpreter::evalFilter(const Expr& e, const ScopePtr& scope, const Value* blockInput) {
    Value input;
    if (!e.args[0])
        input = blockInput ? *blockInput : Value();
    else if (e.args[0]->kind == Expr::Kind::Filter && blockInput)
        input = evalFilter(*e.args[0], scope, blockInput);
    else
        input = eval(*e.args[0], scope);
    return applyFilter(*this, e.name, input, evalArgs(e, scope, 1));
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
    Depth depth(*this);
    switch (e.kind) {
    case Expr::Kind::Literal:
        return e.literal;
    case Expr::Kind::Name: {
        if (const Value* v = scope->lookup(e.name))
            return *v;
        return Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
        std::vector<Value> items;
        for (const auto& a : e.args)
            items.push_back(eval(*a, scope));
        return Value::list(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
        Value d = Value::dict();
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
            const Value k = eval(*e.args[i], scope);
            d.asDict().set(k.isString() ? k.asString() : k.repr(), eval(*e.args[i + 1], scope));
        }
        return d;
    }
    case Expr::Kind::GetAttr:
        return getAttr(eval(*e.args[0], scope), e.name);
    case Expr::Kind::GetItem: {
        const Value obj = eval(*e.args[0], scope);
        return getItem(obj, eval(*e.args[1], scope));
    }
    case Expr::Kind::Slice: {
        const Value obj = eval(*e.args[0], scope);
        auto opt = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value(nullptr); };
        return evalSlice(obj, opt(e.args[1]), opt(e.args[2]), opt(e.args[3]));
    }
    case Expr::Kind::Call:
        return evalCall(e, scope);
    case Expr::Kind::Filter:
        return evalFilter(e, scope, nullptr);
    case Expr::Kind::Test: {
        const bool r = applyTest(*this, e.name, eval(*e.args[0], scope), evalArgs(e, scope, 1));
        return Value(e.negated ? !r : r);
    }
    case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0], scope);
        if (e.name == "not")
            return Value(!v.truthy());
        v.require();
        if (!v.isNumber())
            throw KvError("bad operand type for unary " + e.name + ": '" + v.typeName() + "'");
        if (e.name == "+")
            return v.isFloat() ? v : Value(v.asInt());
        if (!v.isFloat() && v.asInt() == INT64_MIN)
            throw KvError("integer overflow in unary -");
        return v.isFloat() ? Value(-v.asDouble()) : Value(-v.asInt());
    }
    case Expr::Kind::Binary: {
        if (e.name == "and" || e.name == "or") {
            Value l = eval(*e.args[0], scope);
            if (l.truthy() == (e.name == "or"))
                return l;
            return eval(*e.args[1], scope);
        }
        const Value l = eval(*e.args[0], scope);
        return binary(e.name, l, eval(*e.args[1], scope));
    }
    case Expr::Kind::Compare: {
        Value left = eval(*e.args[0], scope);
        for (std::size_t i = 0; i < e.ops.size(); ++i) {
            Value right = eval(*e.args[i + 1], scope);
            if (!compare(e.ops[i], left, right))
                return Value(false);
            left = std::move(right);
        }
        return Value(true);
    }
    case Expr::Kind::CondExpr:
        if (eval(*e.args[0], scope).truthy())
            return eval(*e.args[1], scope);
        if (e.args[2])
            return eval(*e.args[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
    }
    return Value();
}

bool contains(const Value& container, const Value& item) {
    if (container.isUndefined())
        return false;
    if (container.isString()) {
        if (!item.isString())
            throw KvError("'in <string>' requires string as left operand, not " + item.typeName());
        if (Budget* b = Budget::current())
            b->bytes(container.asString().size());
        return container.asString().find(item.asString()) != std::string::npos;
    }
    if (container.isList()) {
        for (const auto& v : container.asList().items)
            if (v.equals(item))
                return true;
        return false;
    }
    if (container.isDict() || container.isNamespace())
        return item.isString() && container.asDict().find(item.asString()) != nullptr;
    throw KvError("argument of type '" + container.typeName() + "' is not iterable");
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) const {
    if (op == "==")
        return a.equals(b);
    if (op == "!=")
        return !a.equals(b);
    if (op == "in")
        return contains(b, a);
    if (op == "not in")
        return !contains(b, a);
    if (op == "<")
        return a.less(b);
    if (op == ">")
        return b.less(a);
    if (op == "<=")
        return !b.less(a);
    return !a.less(b); // >=
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b) const {
    if (op == "~") {
        if (a.isString() && b.isString())
            checkSize(a.asString().size() + b.asString().size());
        std::string s;
        a.appendStr(s);
        b.appendStr(s);
        m_budget.bytes(s.size());
        return Value(std::move(s));
    }
    a.require();
    b.require();
    auto unsupported = [&]() -> KvError {
        return KvError("unsupported operand type(s) for " + op + ": '" + a.typeName() + "' and '" +
                       b.typeName() + "'");
    };
    if (a.isNumber() && b.isNumber()) {
        const bool useFloat = a.isFloat() || b.isFloat() || op == "/";
        if (op == "/" || op == "//" || op == "%") {
            if (b.asDouble() == 0.0)
                throw KvError(op == "%" ? "integer modulo by zero" : "division by zero");
        }
        if (useFloat) {
            const double x = a.asDouble(), y = b.asDouble();
            if (op == "+")
                return Value(x + y);
            if (op == "-")
                return Value(x - y);
            if (op == "*")
                return Value(x * y);
            if (op == "/")
                return Value(x / y);
            if (op == "//")
                return Value(std::floor(x / y));
            if (op == "%") {
                double m = std::fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0)))
                    m += y;
                return Value(m);
            }
            if (op == "**")
                return Value(std::pow(x, y));
            throw unsupported();
        }
        const std::int64_t x = a.asInt(), y = b.asInt();
        std::int64_t r = 0;
        if (op == "+" && !__builtin_add_overflow(x, y, &r))
            return Value(r);
        if (op == "-" && !__builtin_sub_overflow(x, y, &r))
            return Value(r);
        if (op == "*" && !__builtin_mul_overflow(x, y, &r))
            return Value(r);
        if ((op == "//" || op == "%") && x == INT64_MIN && y == -1) {
            if (op == "%")
                return Value(0);
            throw KvError("integer overflow in //");
        }
        if (op == "//") {
            std::int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                --q;
            return Value(q);
        }
        if (op == "%") {
            std::int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return Value(m);
        }
        if (op == "**") {
            if (y < 0)
                return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
            // Exponentiation by squaring; the base is squared only while bits remain.
            std::int64_t acc = 1, base = x, e = y;
            while (e > 0) {
                if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
                    throw KvError("integer overflow in **");
                e >>= 1;
                if (e > 0 && __builtin_mul_overflow(base, base, &base))
                    throw KvError("integer overflow in **");
            }
            return Value(acc);
        }
        throw KvError("integer overflow in " + op);
    }
    if (op == "+") {
        if (a.isString() && b.isString()) {
            checkSize(a.asString().size() + b.asString().size());
            m_budget.bytes(a.asString().size() + b.asString().size());
            return Value(a.asString() + b.asString());
        }
        if (a.isList() && b.isList() && a.asList().tuple == b.asList().tuple) {
            m_budget.checkItems(a.asList().items.size() + b.asList().items.size());
            m_budget.items(a.asList().items.size() + b.asList().items.size());
            auto items = a.asList().items;
            items.insert(items.end(), b.asList().items.begin(), b.asList().items.end());
            return Value::list(std::move(items), a.asList().tuple);
        }
        if (a.isString() || a.isList())
            throw KvError("can only concatenate " + a.typeName() + " (not \"" + b.typeName() +
                          "\") to " + a.typeName());
        throw unsupported();
    }
    if (op == "*" && (a.isInt() || b.isInt()) &&
        (a.isString() || b.isString() || a.isList() || b.isList())) {
        const Value& seq = a.isInt() ? b : a;
        const auto n =
            static_cast<std::size_t>(std::max<std::int64_t>(0, (a.isInt() ? a : b).asInt()));
        const std::size_t unit = seq.isString() ? seq.asString().size() : seq.asList().items.size();
        std::size_t total = 0;
        if (__builtin_mul_overflow(unit, n, &total))
            total = SIZE_MAX;
        if (seq.isString()) {
            checkSize(total);
            m_budget.bytes(total);
            std::string s;
            s.reserve(total);
            if (total > 0) { // by doubling: 'a' * 30000000 is a few memcpys, not 30M appends
                s = seq.asString();
                while (s.size() * 2 <= total)
                    s.append(s);
                s.append(s, 0, total - s.size());
            }
            return Value(std::move(s));
        }
        m_budget.checkItems(total);
        m_budget.items(total);
        std::vector<Value> items;
        items.reserve(total);
        for (std::size_t i = 0; i < n && unit > 0; ++i)
            items.insert(items.end(), seq.asList().items.begin(), seq.asList().items.end());
        return Value::list(std::move(items), seq.asList().tuple);
    }
    if (op == "%" && a.isString())
        return applyFilter(
            const_cast<Interpreter&>(*this), "format", a,
            CallArgs{b.isList() && b.asList().tuple ? b.asList().items : std::vector<Value>{b},
                     {}});
    throw unsupported();
}

} // namespace kvscope::chat
