// Python methods templates call on str, dict and list values, and jinja/transformers globals.
#include "chat/builtins.h"
#include "chat/strutil.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <map>

namespace kvscope::chat {
namespace {

const char* const kStrMethods[] = {
    "strip",      "lstrip",   "rstrip",       "split",        "rsplit",  "splitlines",
    "startswith", "endswith", "upper",        "lower",        "title",   "capitalize",
    "replace",    "find",     "rfind",        "index",        "count",   "join",
    "format",     "isdigit",  "isalpha",      "isalnum",      "isspace", "isupper",
    "islower",    "casefold", "removeprefix", "removesuffix", "zfill"};
const char* const kDictMethods[] = {"items", "keys", "values", "get", "copy"};
const char* const kListMethods[] = {"index", "count", "copy"};

template <std::size_t N> bool in(const char* const (&names)[N], const std::string& name) {
    return std::find_if(std::begin(names), std::end(names),
                        [&](const char* n) { return name == n; }) != std::end(names);
}

const std::string* optString(const CallArgs& a, const char* name, int index) {
    const Value* v = a.get(name, index);
    if (!v || v->isNone() || v->isUndefined())
        return nullptr;
    if (!v->isString())
        throw KvError(std::string("argument '") + name + "' must be str or None, not " +
                      v->typeName());
    return &v->asString();
}

long optInt(const CallArgs& a, const char* name, int index, long dflt) {
    const Value* v = a.get(name, index);
    if (!v || v->isNone() || v->isUndefined())
        return dflt;
    if (!v->isInt() && !v->isBool())
        throw KvError(std::string("argument '") + name + "' must be an integer");
    return static_cast<long>(v->asInt());
}

// A split's parts as a list; `parts` stopped early past the item cap (strutil's maxParts).
Value stringList(Interpreter& in, std::vector<std::string> parts) {
    in.budget().checkItems(parts.size());
    const Budget::Hold held(parts.size() * sizeof(std::string));
    std::vector<Value> items;
    items.reserve(parts.size());
    for (auto& p : parts)
        items.emplace_back(std::move(p));
    return Value::list(std::move(items));
}

bool affixMatch(Interpreter& in, const std::string& s, const Value& affix, bool prefix) {
    if (affix.isList()) {
        for (const auto& a : affix.asList().items)
            if (affixMatch(in, s, a, prefix))
                return true;
        return false;
    }
    if (!affix.isString())
        throw KvError(std::string(prefix ? "startswith" : "endswith") +
                      " first arg must be str or a tuple of str, not " + affix.typeName());
    const auto& a = affix.asString();
    if (a.size() > s.size())
        return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

// str.format with {}, {0}, {name} and {{ }}; format specs after ':' are ignored except
// that the field is still substituted.
std::string pyFormat(Interpreter& in, const std::string& fmt, const CallArgs& a) {
    std::string out;
    std::size_t autoIndex = 0;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        const char c = fmt[i];
        if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            const auto close = fmt.find('}', i);
            if (close == std::string::npos)
                throw KvError("Single '{' encountered in format string");
            std::string field = fmt.substr(i + 1, close - i - 1);
            field = field.substr(0, field.find_first_of(":!"));
            const Value* v = nullptr;
            if (field.empty()) {
                v = autoIndex < a.positional.size() ? &a.positional[autoIndex] : nullptr;
                ++autoIndex;
            } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
                std::size_t idx = SIZE_MAX;
                std::from_chars(field.data(), field.data() + field.size(), idx);
                v = idx < a.positional.size() ? &a.positional[idx] : nullptr;
            } else {
                v = a.get(field, -1);
            }
            if (!v)
                throw KvError("Replacement index " + field +
                              " out of range for positional args tuple");
            if (v->isString())
                in.checkSize(out.size() + v->asString().size());
            v->appendStr(out);
            i = close;
        } else {
            out += c;
        }
        in.checkSize(out.size());
    }
    return out;
}

Value strMethod(Interpreter& in, const std::string& s, const std::string& name, const CallArgs& a) {
    if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value(str::strip(s, optString(a, "chars", 0), name != "rstrip", name != "lstrip"));
    if (name == "split" || name == "rsplit" || name == "splitlines") {
        // strutil stops past maxParts parts; a whitespace split decodes the string first.
        const std::size_t maxParts = in.limits().maxItems;
        if (name == "splitlines")
            return stringList(in, str::splitlines(s, maxParts));
        const std::string* sep = optString(a, "sep", 0);
        if (sep && sep->empty())
            throw KvError("empty separator");
        const Budget::Hold decoded(sep ? 0 : s.size() * sizeof(char32_t));
        const long maxsplit = optInt(a, "maxsplit", 1, -1);
        return stringList(in, name == "split" ? str::split(s, sep, maxsplit, maxParts)
                                              : str::rsplit(s, sep, maxsplit, maxParts));
    }
    if (name == "startswith" || name == "endswith") {
        const Value* affix = a.get("prefix", 0);
        if (!affix)
            throw KvError(name + "() takes at least 1 argument (0 given)");
        return Value(affixMatch(in, s, *affix, name == "startswith"));
    }
    if (name == "upper")
        return Value(str::upper(s));
    if (name == "lower" || name == "casefold")
        return Value(str::lower(s));
    if (name == "title")
        return Value(str::pyTitle(s));
    if (name == "capitalize")
        return Value(str::capitalize(s));
    if (name == "replace") {
        const std::string* from = optString(a, "old", 0);
        const std::string* to = optString(a, "new", 1);
        if (!from || !to)
            throw KvError("replace() takes at least 2 arguments");
        return checkedReplace(in, s, *from, *to, optInt(a, "count", 2, -1));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
        const std::string* sub = optString(a, "sub", 0);
        if (!sub)
            throw KvError(name + "() takes at least 1 argument");
        if (name == "count") {
            if (sub->empty())
                return Value(static_cast<std::int64_t>(str::length(s) + 1));
            std::int64_t n = 0;
            for (auto p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size()))
                ++n;
            return Value(n);
        }
        const auto pos = name == "rfind" ? s.rfind(*sub) : s.find(*sub);
        if (pos == std::string::npos) {
            if (name == "index")
                throw KvError("substring not found");
            return Value(-1);
        }
        return Value(static_cast<std::int64_t>(str::length(std::string_view(s).substr(0, pos))));
    }
    if (name == "join") {
        const Value* seq = a.get("iterable", 0);
        if (!seq)
            throw KvError("join() takes exactly one argument (0 given)");
        std::string out;
        bool first = true;
        for (const auto& v : in.iterate(*seq)) {
            if (!v.isString())
                throw KvError("sequence item: expected str instance, " + v.typeName() + " found");
            in.checkSize(out.size() + (first ? 0 : s.size()) + v.asString().size());
            out += first ? "" : s;
            out += v.asString();
            first = false;
            in.checkSize(out.size());
        }
        return Value(std::move(out));
    }
    if (name == "format")
        return Value(pyFormat(in, s, a));
    if (name == "removeprefix" || name == "removesuffix") {
        const std::string* affix = optString(a, "prefix", 0);
        if (!affix)
            throw KvError(name + "() takes exactly one argument");
        if (name == "removeprefix" && s.compare(0, affix->size(), *affix) == 0)
            return Value(s.substr(affix->size()));
        if (name == "removesuffix" && s.size() >= affix->size() &&
            s.compare(s.size() - affix->size(), affix->size(), *affix) == 0)
            return Value(s.substr(0, s.size() - affix->size()));
        return Value(s);
    }
    if (name == "zfill") {
        const long width = optInt(a, "width", 0, 0);
        const long len = static_cast<long>(str::length(s));
        if (len >= width)
            return Value(s);
        in.checkSize(static_cast<std::size_t>(width - len) + s.size());
        const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
        return Value((sign ? s.substr(0, 1) : "") + std::string(width - len, '0') +
                     s.substr(sign ? 1 : 0));
    }
    // is* predicates on code points
    const auto cps = str::decode(s);
    if (cps.empty())
        return Value(false);
    bool all = true, anyCased = false, anyUpper = false, anyLower = false;
    for (char32_t c : cps) {
        const bool digit = c >= '0' && c <= '9';
        const bool alpha =
            (c < 0x80 && std::isalpha(static_cast<int>(c))) || (c >= 0x80 && str::isCased(c));
        if (name == "isdigit")
            all = all && digit;
        else if (name == "isalpha")
            all = all && alpha;
        else if (name == "isalnum")
            all = all && (alpha || digit);
        else if (name == "isspace")
            all = all && str::isSpace(c);
        if (str::isCased(c)) {
            anyCased = true;
            anyUpper = anyUpper || str::toLower(c) != c;
            anyLower = anyLower || str::toUpper(c) != c;
        }
    }
    if (name == "isupper")
        return Value(anyCased && !anyLower);
    if (name == "islower")
        return Value(anyCased && !anyUpper);
    return Value(all);
}

// Receiver bytes per step of the str methods that decode and re-encode every code point
// (measured: 5-90 ns a byte); the others read at kBytesPerStep.
std::uint64_t receiverBytesPerStep(const std::string& method, const CallArgs& a) {
    static const std::map<std::string, std::uint64_t> decoding = {
        {"strip", 4},    {"lstrip", 4},  {"rstrip", 4},     {"upper", 8},   {"lower", 8},
        {"casefold", 8}, {"title", 4},   {"capitalize", 8}, {"isdigit", 2}, {"isalpha", 2},
        {"isalnum", 2},  {"isspace", 2}, {"isupper", 2},    {"islower", 2}, {"format", 16}};
    if ((method == "split" || method == "rsplit") && !optString(a, "sep", 0))
        return 1; // a whitespace split decodes, then encodes every word on its own
    const auto it = decoding.find(method);
    return it == decoding.end() ? kBytesPerStep : it->second;
}

} // namespace

Value checkedReplace(Interpreter& in, const std::string& s, const std::string& from,
                     const std::string& to, long count) {
    // Count the replacements first: 'a'.replace('a', 'a' * 30000000) on a long string of
    // 'a's is petabytes, refused before a byte of it exists.
    std::size_t n = 0;
    const auto limit = count < 0 ? SIZE_MAX : static_cast<std::size_t>(count);
    if (from.empty()) {
        n = std::min(str::length(s) + 1, limit);
    } else {
        for (auto p = s.find(from); p != std::string::npos && n < limit;
             p = s.find(from, p + from.size()))
            ++n;
    }
    std::size_t grown = 0;
    if (to.size() > from.size() && __builtin_mul_overflow(n, to.size() - from.size(), &grown))
        grown = SIZE_MAX;
    in.checkSize(std::min(grown, SIZE_MAX - s.size()) + s.size());
    in.budget().step(n / 4); // each replacement is a search and two appends
    return Value(str::replace(s, from, to, count));
}

bool hasMethod(const Value& obj, const std::string& name) {
    if (obj.isString())
        return in(kStrMethods, name);
    if (obj.isDict())
        return in(kDictMethods, name);
    if (obj.isList())
        return in(kListMethods, name);
    return false;
}

Value callMethod(Interpreter& in, const Value& obj, const std::string& name, const CallArgs& a) {
    if (obj.isString()) {
        // Like applyFilter(): charged for reading the string and writing a string result, and
        // for the decoded code points while a decoding method runs.
        const std::size_t size = obj.asString().size();
        const std::uint64_t perStep = receiverBytesPerStep(name, a);
        in.budget().bytes(size, perStep);
        const Budget::Hold decoded(perStep < kBytesPerStep ? size * sizeof(char32_t) : 0);
        Value result = strMethod(in, obj.asString(), name, a);
        if (result.isString())
            in.budget().bytes(result.asString().size());
        return result;
    }
    if (obj.isDict()) {
        const auto& d = obj.asDict();
        if (name == "get") {
            const Value* key = a.get("key", 0);
            if (!key)
                throw KvError("get expected at least 1 argument, got 0");
            const Value* dflt = a.get("default", 1);
            const Value* v = key->isString() ? d.find(key->asString()) : nullptr;
            return v ? *v : dflt ? *dflt : Value(nullptr);
        }
        std::vector<Value> out;
        for (const auto& [k, v] : d.entries) {
            if (name == "items")
                out.push_back(Value::list({Value(k), v}, true));
            else if (name == "keys")
                out.emplace_back(k);
            else if (name == "values")
                out.push_back(v);
        }
        if (name == "copy") {
            Value c = Value::dict();
            for (const auto& [k, v] : d.entries)
                c.asDict().append(k, v);
            return c;
        }
        return Value::list(std::move(out));
    }
    if (obj.isList()) {
        const auto& items = obj.asList().items;
        if (name == "copy")
            return Value::list(items, obj.asList().tuple);
        const Value* x = a.get("value", 0);
        if (!x)
            throw KvError(name + "() takes exactly one argument (0 given)");
        std::int64_t count = 0;
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (items[i].equals(*x)) {
                if (name == "index")
                    return Value(static_cast<std::int64_t>(i));
                ++count;
            }
        }
        if (name == "index")
            throw KvError(x->repr() + " is not in list");
        return Value(count);
    }
    throw KvError("'" + obj.typeName() + "' object has no attribute '" + name + "'");
}

namespace {

Value makeFn(const char* name, std::function<Value(Interpreter&, const CallArgs&)> fn) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->fn = std::move(fn);
    return Value(c);
}

constexpr std::int64_t kMaxRange = 100000; // jinja2.sandbox.MAX_RANGE

} // namespace

void addGlobals(Scope& scope) {
    scope.vars["range"] = makeFn("range", [](Interpreter&, const CallArgs& a) {
        std::int64_t start = 0, stop = 0, step = 1;
        auto num = [](const Value& v) {
            if (!v.isInt() && !v.isBool())
                throw KvError("'" + v.typeName() + "' object cannot be interpreted as an integer");
            return v.asInt();
        };
        if (a.positional.size() == 1) {
            stop = num(a.positional[0]);
        } else if (a.positional.size() >= 2) {
            start = num(a.positional[0]);
            stop = num(a.positional[1]);
            if (a.positional.size() >= 3)
                step = num(a.positional[2]);
        } else {
            throw KvError("range expected at least 1 argument, got 0");
        }
        if (step == 0)
            throw KvError("range() arg 3 must not be zero");
        const long double span = (static_cast<long double>(stop) - start) / step;
        // Compared as a floating value first: a span past int64 must not be cast (undefined).
        if (span > static_cast<long double>(kMaxRange))
            throw LimitError(
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        const std::int64_t n =
            span <= 0 ? 0 : static_cast<std::int64_t>(std::ceil(static_cast<double>(span)));
        if (n > kMaxRange)
            throw LimitError(
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        std::vector<Value> items;
        items.reserve(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
            items.emplace_back(start + i * step);
        return Value::list(std::move(items));
    });
    auto makeDict = [](bool ns) {
        return [ns](Interpreter& in, const CallArgs& a) {
            Value d = Value::dict();
            d.asDict().isNamespace = ns;
            for (const auto& p : a.positional) {
                if (p.isDict()) {
                    for (const auto& [k, v] : p.asDict().entries)
                        d.asDict().set(k, v);
                } else if (p.isList()) {
                    for (const auto& pair : p.asList().items) {
                        if (!pair.isList() || pair.asList().items.size() != 2 ||
                            !pair.asList().items[0].isString())
                            throw KvError("dictionary update sequence element has wrong length");
                        d.asDict().set(pair.asList().items[0].asString(), pair.asList().items[1]);
                    }
                } else {
                    throw KvError("'" + p.typeName() + "' object is not iterable");
                }
            }
            for (const auto& [k, v] : a.keyword)
                d.asDict().set(k, v);
            if (ns)
                in.own(d);
            return d;
        };
    };
    scope.vars["namespace"] = makeFn("namespace", makeDict(true));
    scope.vars["dict"] = makeFn("dict", makeDict(false));
    scope.vars["raise_exception"] =
        makeFn("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
            const Value* m = a.get("message", 0);
            throw TemplateError(m ? m->str() : std::string());
        });
    scope.vars["strftime_now"] = makeFn("strftime_now", [](Interpreter& in, const CallArgs& a) {
        const Value* f = a.get("format", 0);
        if (!f || !f->isString())
            throw KvError("strftime_now() argument must be str");
        // No conversion prints more than 64 bytes: bound the result before it is built.
        const std::string& fmt = f->asString();
        in.checkSize(fmt.size() +
                     64 * static_cast<std::size_t>(std::count(fmt.begin(), fmt.end(), '%')));
        in.budget().bytes(fmt.size());
        return Value(str::strftime(f->asString(), in.now()));
    });
}

} // namespace kvscope::chat
