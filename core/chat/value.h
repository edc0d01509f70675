// The dynamic value model of the chat template engine, mirroring the Python objects a
// jinja2 template sees: Undefined, None, bool, int, float, str, list/tuple, dict (insertion
// ordered), namespace and callables (macros, globals, bound methods).
//
// Values are cheap to copy: strings, lists and dicts are shared. The sandbox is immutable like
// transformers' ImmutableSandboxedEnvironment, so sharing is only observable through
// namespace() objects, whose attributes templates assign on purpose.
//
// Strings, lists and dicts built while a render runs are metered (budget.h): building one
// charges its bytes to the render's memory budget and checks the per-value size caps, and
// freeing it gives the bytes back. repr(), equality, ordering and toJson() charge steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kvscope::chat {

class Value;
class Interpreter;

// jinja2's default Undefined: falsy, renders as "", iterates as empty; any other use raises
// an UndefinedError whose message is `hint` ("'foo' is undefined").
struct Undefined {
    std::string hint;
};

// Values nest at most this deep (JSON input and values built by templates alike), so that
// copying, printing and destroying them never recurses without bound.
inline constexpr int kMaxValueDepth = 256;

class Budget;

// Storage that holds bytes against the budget of the render that built it (if any) and gives
// them back when freed; that budget outlives every value its render creates (Template::render).
struct Metered {
    Metered() = default;
    Metered(const Metered&) = delete;
    Metered& operator=(const Metered&) = delete;
    ~Metered();
    // Adds `bytes` to what this storage holds; throws LimitError past the memory budget.
    void charge(std::size_t bytes);
    Budget* budget = nullptr;
    std::size_t charged = 0;
};

struct StrData : Metered {
    std::string s;
};

struct ListData : Metered {
    std::vector<Value> items;
    bool tuple = false;
    int depth = 1; // 1 + the deepest item's depth
};

struct DictData : Metered {
    // Insertion order, like a Python dict. Grow it through set() or append(), which meter it.
    std::vector<std::pair<std::string, Value>> entries;
    bool isNamespace = false;
    int depth = 1;
    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value value);
    // Adds an entry whose key is known not to be present yet.
    void append(std::string key, Value value);
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    // Looks up a keyword argument, or the positional one at `index` (-1: keyword only).
    const Value* get(std::string_view name, int index) const;
};

struct Callable {
    std::string name;
    std::function<Value(Interpreter&, const CallArgs&)> fn;
    bool isMacro = false;
};

class Value {
public:
    using StrPtr = std::shared_ptr<const StrData>;
    using ListPtr = std::shared_ptr<ListData>;
    using DictPtr = std::shared_ptr<DictData>;
    using CallablePtr = std::shared_ptr<Callable>;
    using Storage = std::variant<Undefined, std::nullptr_t, bool, std::int64_t, double, StrPtr,
                                 ListPtr, DictPtr, CallablePtr>;

    Value() : m_v(Undefined{}) {}
    Value(std::nullptr_t) : m_v(nullptr) {}
    Value(bool b) : m_v(b) {}
    Value(int i) : m_v(std::int64_t{i}) {}
    Value(std::int64_t i) : m_v(i) {}
    Value(double d) : m_v(d) {}
    Value(std::string s); // throws LimitError past the render's string cap or memory budget
    Value(const char* s) : Value(std::string(s)) {}
    Value(Undefined u) : m_v(std::move(u)) {}
    Value(ListPtr l) : m_v(std::move(l)) {}
    Value(DictPtr d) : m_v(std::move(d)) {}
    Value(CallablePtr c) : m_v(std::move(c)) {}

    static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
    static Value list(std::vector<Value> items = {}, bool tuple = false);
    static Value dict();
    // Throws KvError for JSON nested deeper than kMaxValueDepth.
    static Value fromJson(const nlohmann::ordered_json& j, int depth = 0);

    bool isUndefined() const { return m_v.index() == 0; }
    bool isNone() const { return m_v.index() == 1; }
    bool isBool() const { return m_v.index() == 2; }
    bool isInt() const { return m_v.index() == 3; }
    bool isFloat() const { return m_v.index() == 4; }
    bool isNumber() const { return isBool() || isInt() || isFloat(); }
    bool isString() const { return m_v.index() == 5; }
    bool isList() const { return m_v.index() == 6; }
    bool isDict() const { return m_v.index() == 7 && !asDict().isNamespace; }
    bool isNamespace() const { return m_v.index() == 7 && asDict().isNamespace; }
    bool isCallable() const { return m_v.index() == 8; }

    bool asBool() const { return std::get<bool>(m_v); }
    std::int64_t asInt() const; // int or bool
    double asDouble() const;    // int, bool or float
    const std::string& asString() const { return std::get<StrPtr>(m_v)->s; }
    const ListData& asList() const { return *std::get<ListPtr>(m_v); }
    DictData& asDict() const { return *std::get<DictPtr>(m_v); }
    const Callable& asCallable() const { return *std::get<CallablePtr>(m_v); }
    const std::string& undefinedHint() const { return std::get<Undefined>(m_v).hint; }
    const DictPtr& dictPtr() const { return std::get<DictPtr>(m_v); }
    const CallablePtr& callablePtr() const { return std::get<CallablePtr>(m_v); }

    // Python truthiness.
    bool truthy() const;
    // str(value); Undefined -> "".
    std::string str() const;
    // Appends str(value) to `out` (no copy of a string value first).
    void appendStr(std::string& out) const;
    // repr(value), as Python prints containers.
    std::string repr() const;
    // Container nesting depth (0 for scalars).
    int nesting() const;
    // Python type name ("dict", "str", "NoneType", ...) and jinja2's object_type_repr.
    std::string typeName() const;
    std::string objectTypeRepr() const;

    // Python ==, and ordering (<) that throws KvError for unorderable types.
    bool equals(const Value& other) const;
    bool less(const Value& other) const;

    // Throws the UndefinedError if this is Undefined.
    const Value& require() const;

private:
    void appendRepr(std::string& out, int level) const;
    Storage m_v;
};

// json.dumps(value, ensure_ascii=False, indent, separators, sort_keys), as transformers'
// tojson filter. indent < 0 means None; indentString overrides when non-empty.
struct JsonFormat {
    int indent = -1;
    std::string indentString;
    bool hasIndent = false;
    std::string itemSeparator = ", ";
    std::string keySeparator = ": ";
    bool sortKeys = false;
    bool ensureAscii = false;
};
std::string toJson(const Value& v, const JsonFormat& format);

} // namespace kvscope::chat
