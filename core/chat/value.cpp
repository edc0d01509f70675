#include "chat/value.h"

#include "chat/budget.h"
#include "chat/strutil.h"
#include "util/status.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvscope::chat {

namespace {
// What a piece of storage costs beyond its payload: the object and its shared_ptr control
// block, rounded up.
constexpr std::size_t kStorageOverhead = 64;
// A key longer than the small-string buffer lives on the heap.
std::size_t entryBytes(const std::string& key) {
    return sizeof(std::pair<std::string, Value>) + (key.capacity() > 15 ? key.capacity() : 0);
}
} // namespace

Metered::~Metered() {
    if (budget)
        budget->release(charged);
}

void Metered::charge(std::size_t bytes) {
    Budget* b = Budget::current();
    if (!b || (budget && budget != b)) // not in a render, or (never) built by another one
        return;
    b->acquire(bytes);
    budget = b;
    charged += bytes;
}

const Value* DictData::find(std::string_view key) const {
    if (Budget* b = Budget::current())
        b->step(1 + entries.size() / 16);
    for (const auto& [k, v] : entries)
        if (k == key)
            return &v;
    return nullptr;
}

namespace {
int checkedDepth(int depth) {
    if (depth > kMaxValueDepth)
        throw LimitError("value nested more than " + std::to_string(kMaxValueDepth) +
                         " levels deep");
    return depth;
}
} // namespace

int Value::nesting() const {
    if (isList())
        return asList().depth;
    if (m_v.index() == 7)
        return asDict().depth;
    return 0;
}

void DictData::set(const std::string& key, Value value) {
    if (!isNamespace) // namespaces may refer to themselves; repr() bounds those walks
        depth = std::max(depth, checkedDepth(value.nesting() + 1));
    if (Budget* b = Budget::current())
        b->step(1 + entries.size() / 16);
    for (auto& [k, v] : entries) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    append(key, std::move(value));
}

void DictData::append(std::string key, Value value) {
    if (!isNamespace)
        depth = std::max(depth, checkedDepth(value.nesting() + 1));
    if (Budget* b = Budget::current()) {
        b->step();
        b->checkItems(entries.size() + 1);
        charge(entryBytes(key));
    }
    entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(std::string_view name, int index) const {
    for (const auto& [k, v] : keyword)
        if (k == name)
            return &v;
    if (index >= 0 && static_cast<std::size_t>(index) < positional.size())
        return &positional[index];
    return nullptr;
}

Value::Value(std::string s) {
    auto d = std::make_shared<StrData>();
    if (Budget* b = Budget::current()) {
        b->step(kStorageSteps);
        b->checkString(s.size());
        d->charge(kStorageOverhead + s.capacity());
    }
    d->s = std::move(s);
    m_v = StrPtr(std::move(d));
}

Value Value::list(std::vector<Value> items, bool tuple) {
    auto l = std::make_shared<ListData>();
    if (Budget* b = Budget::current()) {
        b->checkItems(items.size());
        b->step(kStorageSteps);
        b->items(items.size());
        l->charge(kStorageOverhead + items.capacity() * sizeof(Value));
    }
    for (const auto& v : items)
        l->depth = std::max(l->depth, checkedDepth(v.nesting() + 1));
    l->items = std::move(items);
    l->tuple = tuple;
    return Value(std::move(l));
}

Value Value::dict() {
    auto d = std::make_shared<DictData>();
    if (Budget* b = Budget::current())
        b->step(kStorageSteps);
    d->charge(kStorageOverhead);
    return Value(std::move(d));
}

Value Value::fromJson(const nlohmann::ordered_json& j, int depth) {
    if (depth >= kMaxValueDepth)
        throw KvError("JSON input nested more than " + std::to_string(kMaxValueDepth) +
                      " levels deep");
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
        return Value(nullptr);
    case nlohmann::ordered_json::value_t::boolean:
        return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
        return Value(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
        return Value(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
        return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
        return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        std::vector<Value> items;
        items.reserve(j.size());
        for (const auto& e : j)
            items.push_back(fromJson(e, depth + 1));
        return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
        Value d = dict();
        for (auto it = j.begin(); it != j.end(); ++it) // JSON keys are unique
            d.asDict().append(it.key(), fromJson(it.value(), depth + 1));
        return d;
    }
    default:
        return Value(nullptr); // binary / discarded: not produced by JSON parsing
    }
}

std::int64_t Value::asInt() const {
    if (isBool())
        return asBool() ? 1 : 0;
    return std::get<std::int64_t>(m_v);
}

double Value::asDouble() const {
    if (isFloat())
        return std::get<double>(m_v);
    return static_cast<double>(asInt());
}

bool Value::truthy() const {
    switch (m_v.index()) {
    case 0:
    case 1:
        return false;
    case 2:
        return asBool();
    case 3:
        return asInt() != 0;
    case 4:
        return asDouble() != 0.0;
    case 5:
        return !asString().empty();
    case 6:
        return !asList().items.empty();
    case 7:
        return isNamespace() || !asDict().entries.empty();
    default:
        return true;
    }
}

std::string Value::str() const {
    switch (m_v.index()) {
    case 0:
        return {};
    case 5:
        return asString();
    default:
        return repr();
    }
}

void Value::appendStr(std::string& out) const {
    if (isString())
        out += asString();
    else if (!isUndefined())
        appendRepr(out, 0);
}

std::string Value::repr() const {
    std::string out;
    appendRepr(out, 0);
    return out;
}

void Value::appendRepr(std::string& out, int level) const {
    if (level > kMaxValueDepth) // only reachable through a namespace that contains itself
        throw LimitError("value nested more than " + std::to_string(kMaxValueDepth) +
                         " levels deep (a namespace that contains itself?)");
    // Shared sublists make a small value print large ([x, x] nested 40 times): the text is
    // checked against the string cap as it grows, and every element costs a step.
    if (Budget* b = Budget::current()) {
        b->step();
        b->checkString(out.size());
    }
    switch (m_v.index()) {
    case 0:
        return;
    case 1:
        out += "None";
        return;
    case 2:
        out += asBool() ? "True" : "False";
        return;
    case 3:
        out += std::to_string(asInt());
        return;
    case 4:
        out += str::reprFloat(asDouble());
        return;
    case 5:
        if (Budget* b = Budget::current())
            b->bytes(asString().size());
        out += str::reprString(asString());
        return;
    case 6: {
        const auto& l = asList();
        out += l.tuple ? "(" : "[";
        for (std::size_t i = 0; i < l.items.size(); ++i) {
            if (i)
                out += ", ";
            if (l.items[i].isUndefined())
                out += "Undefined";
            else
                l.items[i].appendRepr(out, level + 1);
        }
        if (l.tuple && l.items.size() == 1)
            out += ",";
        out += l.tuple ? ")" : "]";
        return;
    }
    case 7: {
        const auto& d = asDict();
        out += d.isNamespace ? "<Namespace {" : "{";
        bool first = true;
        for (const auto& [k, v] : d.entries) {
            out += first ? "" : ", ";
            first = false;
            out += str::reprString(k) + ": ";
            if (v.isUndefined())
                out += "Undefined";
            else
                v.appendRepr(out, level + 1);
        }
        out += d.isNamespace ? "}>" : "}";
        return;
    }
    default: {
        const auto& c = asCallable();
        out += c.isMacro ? "<Macro '" + c.name + "'>" : "<built-in function " + c.name + ">";
    }
    }
}

std::string Value::typeName() const {
    static const char* const names[] = {"Undefined", "NoneType", "bool", "int",     "float",
                                        "str",       "list",     "dict", "function"};
    if (isList() && asList().tuple)
        return "tuple";
    if (isNamespace())
        return "Namespace";
    return names[m_v.index()];
}

std::string Value::objectTypeRepr() const {
    // jinja2.utils.object_type_repr
    if (isNone())
        return "None";
    return typeName() + " object";
}

const Value& Value::require() const {
    if (isUndefined())
        throw KvError(undefinedHint());
    return *this;
}

bool Value::equals(const Value& o) const {
    if (Budget* b = Budget::current())
        b->step();
    if (isNumber() && o.isNumber()) {
        if (isFloat() || o.isFloat())
            return asDouble() == o.asDouble();
        return asInt() == o.asInt();
    }
    if (m_v.index() != o.m_v.index())
        return false;
    switch (m_v.index()) {
    case 0:
    case 1:
        return true;
    case 5:
        if (Budget* b = Budget::current())
            b->bytes(std::min(asString().size(), o.asString().size()));
        return asString() == o.asString();
    case 6: {
        const auto &a = asList(), &b = o.asList();
        if (a.tuple != b.tuple || a.items.size() != b.items.size())
            return false;
        for (std::size_t i = 0; i < a.items.size(); ++i)
            if (!a.items[i].equals(b.items[i]))
                return false;
        return true;
    }
    case 7: {
        const auto &a = asDict(), &b = o.asDict();
        if (a.isNamespace || b.isNamespace)
            return &a == &b;
        if (a.entries.size() != b.entries.size())
            return false;
        for (const auto& [k, v] : a.entries) {
            const Value* w = b.find(k);
            if (!w || !v.equals(*w))
                return false;
        }
        return true;
    }
    default:
        return &asCallable() == &o.asCallable();
    }
}

bool Value::less(const Value& o) const {
    require();
    o.require();
    if (Budget* b = Budget::current())
        b->step(2);
    if (isNumber() && o.isNumber()) {
        if (isFloat() || o.isFloat())
            return asDouble() < o.asDouble();
        return asInt() < o.asInt();
    }
    if (isString() && o.isString()) {
        if (Budget* b = Budget::current())
            b->bytes(std::min(asString().size(), o.asString().size()));
        return asString() < o.asString();
    }
    if (isList() && o.isList() && asList().tuple == o.asList().tuple) {
        const auto &a = asList().items, &b = o.asList().items;
        for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
            if (!a[i].equals(b[i]))
                return a[i].less(b[i]);
        }
        return a.size() < b.size();
    }
    throw KvError("'<' not supported between instances of '" + typeName() + "' and '" +
                  o.typeName() + "'");
}

namespace {

void jsonString(std::string& out, std::string_view s, bool ensureAscii) {
    if (ensureAscii) {
        out += '"';
        char buf[16];
        for (char32_t cp : str::decode(s)) {
            if (cp < 0x80) {
                std::string one(1, static_cast<char>(cp));
                std::string quoted;
                jsonString(quoted, one, false);
                out += quoted.substr(1, quoted.size() - 2);
            } else if (cp < 0x10000) {
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
                out += buf;
            } else {
                const unsigned v = static_cast<unsigned>(cp) - 0x10000;
                std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                              0xDC00 + (v & 0x3FF));
                out += buf;
            }
        }
        out += '"';
        return;
    }
    out += '"';
    for (char ch : s) {
        switch (ch) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        case '\b':
            out += "\\b";
            break;
        case '\f':
            out += "\\f";
            break;
        default:
            if (static_cast<unsigned char>(ch) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(ch));
                out += buf;
            } else {
                out += ch;
            }
        }
    }
    out += '"';
}

void jsonValue(std::string& out, const Value& v, const JsonFormat& f, int level) {
    if (Budget* b = Budget::current()) { // see appendRepr()
        b->step();
        b->checkString(out.size());
        if (v.isString())
            b->bytes(v.asString().size());
    }
    const std::string unit =
        f.indentString.empty() ? std::string(std::max(f.indent, 0), ' ') : f.indentString;
    auto newline = [&](int lvl) {
        if (Budget* b = Budget::current())
            b->checkString(out.size() + 1 + unit.size() * static_cast<std::size_t>(lvl));
        out += '\n';
        for (int i = 0; i < lvl; ++i)
            out += unit;
    };
    if (v.isUndefined() || v.isCallable() || v.isNamespace())
        throw KvError("Object of type " + v.typeName() + " is not JSON serializable");
    if (v.isNone()) {
        out += "null";
    } else if (v.isBool()) {
        out += v.asBool() ? "true" : "false";
    } else if (v.isInt()) {
        out += std::to_string(v.asInt());
    } else if (v.isFloat()) {
        const double d = v.asDouble();
        out += std::isnan(d)   ? "NaN"
               : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                               : str::reprFloat(d);
    } else if (v.isString()) {
        jsonString(out, v.asString(), f.ensureAscii);
    } else if (v.isList()) {
        const auto& items = v.asList().items;
        if (items.empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (i)
                out += f.itemSeparator;
            if (f.hasIndent)
                newline(level + 1);
            jsonValue(out, items[i], f, level + 1);
        }
        if (f.hasIndent)
            newline(level);
        out += ']';
    } else {
        auto entries = v.asDict().entries;
        if (entries.empty()) {
            out += "{}";
            return;
        }
        if (f.sortKeys)
            std::stable_sort(entries.begin(), entries.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (i)
                out += f.itemSeparator;
            if (f.hasIndent)
                newline(level + 1);
            jsonString(out, entries[i].first, f.ensureAscii);
            out += f.keySeparator;
            jsonValue(out, entries[i].second, f, level + 1);
        }
        if (f.hasIndent)
            newline(level);
        out += '}';
    }
}

} // namespace

std::string toJson(const Value& v, const JsonFormat& format) {
    std::string out;
    jsonValue(out, v, format, 0);
    return out;
}

} // namespace kvscope::chat
