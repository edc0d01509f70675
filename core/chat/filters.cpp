// jinja2 3.1 filters and tests, with transformers' tojson.
#include "chat/builtins.h"
#include "chat/strutil.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <limits>
#include <cstdio>
#include <map>
#include <optional>

namespace kvscope::chat {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&);

const Value* arg(const CallArgs& a, const char* name, int index) {
    return a.get(name, index);
}

bool boolArg(const CallArgs& a, const char* name, int index, bool dflt) {
    const Value* v = arg(a, name, index);
    return v ? v->truthy() : dflt;
}

std::string strArg(const CallArgs& a, const char* name, int index, const std::string& dflt) {
    const Value* v = arg(a, name, index);
    return v && !v->isUndefined() ? v->str() : dflt;
}

// jinja2's make_attrgetter: "a.b.0" through environment.getitem.
Value attrPath(Interpreter& in, const Value& item, const std::string& path) {
    Value cur = item;
    std::size_t start = 0;
    for (;;) {
        const auto dot = path.find('.', start);
        const std::string part =
            path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
        std::int64_t index = INT64_MAX; // past any list's end, as Python's unbounded int is
        if (numeric)
            std::from_chars(part.data(), part.data() + part.size(), index);
        cur = in.getItem(cur, numeric ? Value(index) : Value(part));
        if (dot == std::string::npos)
            return cur;
        start = dot + 1;
    }
}

std::int64_t length(const Value& v) {
    if (v.isUndefined())
        return 0;
    if (v.isString()) // the read is charged by applyFilter()
        return static_cast<std::int64_t>(str::length(v.asString()));
    if (v.isList())
        return static_cast<std::int64_t>(v.asList().items.size());
    if (v.isDict() || v.isNamespace())
        return static_cast<std::int64_t>(v.asDict().entries.size());
    throw KvError("object of type '" + v.typeName() + "' has no len()");
}

// Sort key that ignores case for strings unless caseSensitive.
Value sortKey(const Value& v, bool caseSensitive) {
    if (!v.isString() || caseSensitive)
        return v;
    if (Budget* b = Budget::current())
        b->bytes(v.asString().size(), 8);
    return Value(str::lower(v.asString()));
}

Value selectOrReject(Interpreter& in, const Value& v, const CallArgs& a, bool select, bool byAttr) {
    std::vector<Value> out;
    std::size_t next = 0;
    std::string attribute;
    if (byAttr) {
        const Value* at = arg(a, "attribute", 0);
        if (!at)
            throw KvError("Missing parameter for attribute name");
        attribute = at->str();
        next = 1;
    }
    std::string test;
    CallArgs testArgs;
    if (next < a.positional.size()) {
        test = a.positional[next].str();
        testArgs.positional.assign(a.positional.begin() + next + 1, a.positional.end());
        testArgs.keyword = a.keyword;
    }
    for (const auto& item : in.iterate(v)) {
        const Value probe = byAttr ? attrPath(in, item, attribute) : item;
        const bool hit = test.empty() ? probe.truthy() : applyTest(in, test, probe, testArgs);
        if (hit == select)
            out.push_back(item);
    }
    return Value::list(std::move(out));
}

Value fTojson(Interpreter& in, const Value& v, const CallArgs& a) {
    // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonFormat f;
    f.ensureAscii = boolArg(a, "ensure_ascii", 0, false);
    if (const Value* ind = arg(a, "indent", 1); ind && !ind->isNone() && !ind->isUndefined()) {
        f.hasIndent = true;
        if (ind->isString())
            f.indentString = ind->asString();
        else {
            const std::int64_t width = std::max<std::int64_t>(ind->asInt(), 0);
            in.checkSize(static_cast<std::uint64_t>(width)); // one line's indent, at least
            f.indent = static_cast<int>(width);
        }
        f.itemSeparator = ",";
    }
    if (const Value* sep = arg(a, "separators", 2);
        sep && sep->isList() && sep->asList().items.size() == 2) {
        f.itemSeparator = sep->asList().items[0].str();
        f.keySeparator = sep->asList().items[1].str();
    }
    f.sortKeys = boolArg(a, "sort_keys", 3, false);
    std::string out = toJson(v, f);
    in.checkSize(out.size());
    return Value(std::move(out));
}

Value fIndent(Interpreter& in, const Value& v, const CallArgs& a) {
    const Value* w = arg(a, "width", 0);
    std::string ind;
    if (w && w->isString()) {
        ind = w->asString();
    } else {
        const std::int64_t width = std::max<std::int64_t>(w ? w->asInt() : 4, 0);
        in.checkSize(static_cast<std::uint64_t>(width));
        ind.assign(static_cast<std::size_t>(width), ' ');
    }
    const bool first = boolArg(a, "first", 1, false), blank = boolArg(a, "blank", 2, false);
    const std::string text = v.str() + "\n";
    // Every line could become a std::string of its own: held against the memory budget.
    const std::size_t breaks = static_cast<std::size_t>(
        std::count_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }));
    in.budget().checkItems(breaks);
    const Budget::Hold lineParts(breaks * sizeof(std::string) + text.size());
    const auto lines = str::splitlines(text);
    std::string rv = first ? ind : std::string();
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const bool indented = i > 0 && (blank || !lines[i].empty());
        in.checkSize(rv.size() + 1 + (indented ? ind.size() : 0) + lines[i].size());
        if (i > 0)
            rv += "\n";
        if (indented)
            rv += ind;
        rv += lines[i];
    }
    return Value(std::move(rv));
}

Value fRound(Interpreter&, const Value& v, const CallArgs& a) {
    const std::int64_t precision = arg(a, "precision", 0) ? arg(a, "precision", 0)->asInt() : 0;
    const std::string method = strArg(a, "method", 1, "common");
    v.require();
    if (!v.isNumber())
        throw KvError("type " + v.typeName() + " doesn't define __round__ method");
    if (!v.isFloat() && method == "common")
        return Value(v.asInt());
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.asDouble() * scale;
    double r = method == "ceil"    ? std::ceil(x)
               : method == "floor" ? std::floor(x)
                                   : std::nearbyint(x);
    return Value(r / scale);
}

// A float truncated toward zero as int64, or nothing where that is undefined behaviour (NaN,
// infinity, or outside int64: Python would make a bigint, which this engine does not have,
// template.h).
std::optional<std::int64_t> truncatedInt(double d) {
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
        return std::nullopt;
    return static_cast<std::int64_t>(d);
}

Value fInt(Interpreter&, const Value& v, const CallArgs& a) {
    const Value dflt = arg(a, "default", 0) ? *arg(a, "default", 0) : Value(0);
    if (v.isInt() || v.isBool())
        return Value(v.asInt());
    if (v.isFloat()) {
        // Out of range: the default, as for a non-number.
        const auto i = truncatedInt(v.asDouble());
        return i ? Value(*i) : dflt;
    }
    if (v.isString()) {
        const std::string s = str::strip(v.asString(), nullptr, true, true);
        char* end = nullptr;
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end == s.c_str() + s.size())
            return Value(static_cast<std::int64_t>(i));
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size())
            if (const auto i = truncatedInt(d))
                return Value(*i);
    }
    return dflt;
}

Value fFloat(Interpreter&, const Value& v, const CallArgs& a) {
    const Value dflt = arg(a, "default", 0) ? *arg(a, "default", 0) : Value(0.0);
    if (v.isNumber())
        return Value(v.asDouble());
    if (v.isString()) {
        const std::string s = str::strip(v.asString(), nullptr, true, true);
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size())
            return Value(d);
    }
    return dflt;
}

Value fFormat(Interpreter& in, const Value& v, const CallArgs& a) {
    // printf-style "%s" % args, the common conversions only.
    const std::string fmt = v.str();
    std::string out;
    std::size_t next = 0;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        std::size_t j = i + 1;
        while (j < fmt.size() && std::string("-+ #0123456789.").find(fmt[j]) != std::string::npos)
            ++j;
        if (j >= fmt.size())
            throw KvError("incomplete format");
        const char conv = fmt[j];
        if (conv == '%') {
            out += '%';
            i = j;
            continue;
        }
        if (next >= a.positional.size())
            throw KvError("not enough arguments for format string");
        const Value& x = a.positional[next++];
        const std::string spec = fmt.substr(i, j - i);
        // A width or precision is that many bytes of output: '%999999999d' is a string cap
        // error before snprintf pads it.
        for (std::size_t k = 0; k < spec.size();) {
            std::size_t digits = 0;
            while (k + digits < spec.size() &&
                   std::isdigit(static_cast<unsigned char>(spec[k + digits])))
                ++digits;
            if (digits > 0) {
                std::size_t n = SIZE_MAX;
                std::from_chars(spec.data() + k, spec.data() + k + digits, n);
                in.checkSize(n);
                in.checkSize(out.size() + n);
                k += digits;
            } else {
                ++k;
            }
        }
        auto printed = [&](const std::string& cspec, auto value) {
            const int n = std::snprintf(nullptr, 0, cspec.c_str(), value);
            if (n < 0)
                throw KvError("unsupported format specification '" + spec + conv + "'");
            std::string buf(static_cast<std::size_t>(n) + 1, '\0');
            std::snprintf(buf.data(), buf.size(), cspec.c_str(), value);
            buf.pop_back();
            return buf;
        };
        if (conv == 's') {
            x.appendStr(out);
        } else if (conv == 'r') {
            out += x.repr();
        } else if (conv == 'd' || conv == 'i') {
            std::int64_t i = 0;
            if (!x.require().isFloat()) {
                i = x.asInt();
            } else if (const auto t = truncatedInt(x.asDouble())) {
                i = *t;
            } else {
                throw KvError("'%" + std::string(1, conv) + "' of " + x.repr() +
                              ": outside the 64-bit integer range");
            }
            out += printed(spec + "lld", static_cast<long long>(i));
        } else if (conv == 'f' || conv == 'e' || conv == 'g' || conv == 'F' || conv == 'E' ||
                   conv == 'G') {
            out += printed(spec + conv, x.require().asDouble());
        } else if (conv == 'x' || conv == 'X' || conv == 'o') {
            out += printed(spec + "ll" + conv, static_cast<long long>(x.require().asInt()));
        } else {
            throw KvError(std::string("unsupported format character '") + conv + "'");
        }
        in.checkSize(out.size());
        i = j;
    }
    return Value(std::move(out));
}

Value fJoin(Interpreter& in, const Value& v, const CallArgs& a) {
    const std::string sep = strArg(a, "d", 0, "");
    const Value* attribute = arg(a, "attribute", 1);
    std::string out;
    bool first = true;
    for (const auto& item : in.iterate(v)) {
        const Value piece =
            attribute && !attribute->isNone() ? attrPath(in, item, attribute->str()) : item;
        if (piece.isString())
            in.checkSize(out.size() + (first ? 0 : sep.size()) + piece.asString().size());
        out += first ? "" : sep;
        piece.appendStr(out);
        first = false;
        in.checkSize(out.size());
    }
    return Value(std::move(out));
}

Value fMap(Interpreter& in, const Value& v, const CallArgs& a) {
    std::vector<Value> out;
    if (const Value* attribute = arg(a, "attribute", -1)) {
        const Value* dflt = arg(a, "default", -1);
        for (const auto& item : in.iterate(v)) {
            Value x = attrPath(in, item, attribute->str());
            out.push_back(x.isUndefined() && dflt ? *dflt : x);
        }
        return Value::list(std::move(out));
    }
    if (a.positional.empty())
        throw KvError("map requires a filter argument");
    const std::string filter = a.positional[0].str();
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const auto& item : in.iterate(v))
        out.push_back(applyFilter(in, filter, item, rest));
    return Value::list(std::move(out));
}

Value fSort(Interpreter& in, const Value& v, const CallArgs& a) {
    const bool reverse = boolArg(a, "reverse", 0, false),
               cs = boolArg(a, "case_sensitive", 1, false);
    const Value* attribute = arg(a, "attribute", 2);
    std::vector<std::pair<Value, Value>> keyed;
    for (const auto& item : in.iterate(v))
        keyed.emplace_back(
            sortKey(attribute && !attribute->isNone() ? attrPath(in, item, attribute->str()) : item,
                    cs),
            item);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? y.first.less(x.first) : x.first.less(y.first);
    });
    std::vector<Value> out;
    for (auto& [k, item] : keyed)
        out.push_back(std::move(item));
    return Value::list(std::move(out));
}

Value fDictsort(Interpreter&, const Value& v, const CallArgs& a) {
    if (!v.isDict())
        throw KvError("dictsort expects a mapping");
    const bool cs = boolArg(a, "case_sensitive", 0, false);
    const bool byValue = strArg(a, "by", 1, "key") == "value";
    const bool reverse = boolArg(a, "reverse", 2, false);
    auto entries = v.asDict().entries;
    std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
        const Value kx = sortKey(byValue ? x.second : Value(x.first), cs);
        const Value ky = sortKey(byValue ? y.second : Value(y.first), cs);
        return reverse ? ky.less(kx) : kx.less(ky);
    });
    std::vector<Value> out;
    for (auto& [k, val] : entries)
        out.push_back(Value::list({Value(k), val}, true));
    return Value::list(std::move(out));
}

Value fUnique(Interpreter& in, const Value& v, const CallArgs& a) {
    const bool cs = boolArg(a, "case_sensitive", 0, false);
    const Value* attribute = arg(a, "attribute", 1);
    std::vector<Value> out, seen;
    for (const auto& item : in.iterate(v)) {
        const Value key = sortKey(
            attribute && !attribute->isNone() ? attrPath(in, item, attribute->str()) : item, cs);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(key); })) {
            seen.push_back(key);
            out.push_back(item);
        }
    }
    return Value::list(std::move(out));
}

Value minMax(Interpreter& in, const Value& v, const CallArgs& a, bool isMax) {
    const bool cs = boolArg(a, "case_sensitive", 0, false);
    const Value* attribute = arg(a, "attribute", 1);
    Value best, bestKey;
    for (const auto& item : in.iterate(v)) {
        const Value key = sortKey(
            attribute && !attribute->isNone() ? attrPath(in, item, attribute->str()) : item, cs);
        if (best.isUndefined() || (isMax ? bestKey.less(key) : key.less(bestKey))) {
            best = item;
            bestKey = key;
        }
    }
    return best.isUndefined()
               ? Value::undefined(std::string("No aggregated item, sequence was empty."))
               : best;
}

Value fEscape(Interpreter& in, const Value& v, const CallArgs&) {
    const std::string text = v.str();
    std::size_t size = text.size();
    for (char c : text)
        size += c == '&' || c == '<' || c == '>' ? 3 : c == '"' || c == '\'' ? 4 : 0;
    in.checkSize(size);
    std::string out;
    out.reserve(size);
    for (char c : text) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&#34;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out += c;
        }
    }
    return Value(std::move(out));
}

Value fWordcount(Interpreter&, const Value& v, const CallArgs&) {
    std::int64_t n = 0;
    bool inWord = false;
    for (char32_t c : str::decode(v.str())) {
        const bool word = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                          (c >= 'A' && c <= 'Z') || (c >= 0x80 && !str::isSpace(c));
        n += word && !inWord;
        inWord = word;
    }
    return Value(n);
}

Value fFirstLast(Interpreter& in, const Value& v, bool first) {
    if (v.isString()) { // one code point, not a list of all of them
        const std::string& s = v.asString();
        std::size_t begin = 0, end = str::nextCodePoint(s, 0);
        while (!first && end < s.size()) {
            begin = end;
            end = str::nextCodePoint(s, end);
        }
        if (s.empty())
            return Value::undefined(first ? "No first item, sequence was empty."
                                          : "No last item, sequence was empty.");
        return Value(s.substr(begin, end - begin));
    }
    const auto items = in.iterate(v);
    if (items.empty())
        return Value::undefined(first ? "No first item, sequence was empty."
                                      : "No last item, sequence was empty.");
    return first ? items.front() : items.back();
}

const std::map<std::string, FilterFn>& filters() {
    static const std::map<std::string, FilterFn> table = {
        {"abs",
         [](Interpreter&, const Value& v, const CallArgs&) {
             v.require();
             if (!v.isNumber())
                 throw KvError("bad operand type for abs(): '" + v.typeName() + "'");
             if (v.isFloat())
                 return Value(std::fabs(v.asDouble()));
             if (v.asInt() == std::numeric_limits<std::int64_t>::min())
                 throw KvError("integer overflow in abs() (ints are 64-bit here)");
             return Value(v.asInt() < 0 ? -v.asInt() : v.asInt());
         }},
        {"attr", [](Interpreter& in, const Value& v,
                    const CallArgs& a) { return in.getAttr(v, strArg(a, "name", 0, "")); }},
        {"capitalize", [](Interpreter&, const Value& v,
                          const CallArgs&) { return Value(str::capitalize(v.str())); }},
        {"center",
         [](Interpreter& in, const Value& v, const CallArgs& a) {
             const std::string s = v.str();
             const auto width = static_cast<std::size_t>(
                 std::max<std::int64_t>(arg(a, "width", 0) ? arg(a, "width", 0)->asInt() : 80, 0));
             in.checkSize(width);
             const std::size_t len = str::length(s);
             if (len >= width)
                 return Value(s);
             const std::size_t total = width - len, left = total / 2 + (total & width & 1);
             return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
         }},
        {"count", [](Interpreter&, const Value& v, const CallArgs&) { return Value(length(v)); }},
        {"length", [](Interpreter&, const Value& v, const CallArgs&) { return Value(length(v)); }},
        {"default",
         [](Interpreter&, const Value& v, const CallArgs& a) {
             const Value dflt =
                 arg(a, "default_value", 0) ? *arg(a, "default_value", 0) : Value("");
             return v.isUndefined() || (boolArg(a, "boolean", 1, false) && !v.truthy()) ? dflt : v;
         }},
        {"dictsort", fDictsort},
        {"escape", fEscape},
        {"first",
         [](Interpreter& in, const Value& v, const CallArgs&) { return fFirstLast(in, v, true); }},
        {"last",
         [](Interpreter& in, const Value& v, const CallArgs&) { return fFirstLast(in, v, false); }},
        {"float", fFloat},
        {"format", fFormat},
        {"indent", fIndent},
        {"int", fInt},
        {"items",
         [](Interpreter&, const Value& v, const CallArgs&) {
             if (v.isUndefined())
                 return Value::list();
             if (!v.isDict())
                 throw KvError("Can only get item pairs from a mapping.");
             std::vector<Value> out;
             for (const auto& [k, val] : v.asDict().entries)
                 out.push_back(Value::list({Value(k), val}, true));
             return Value::list(std::move(out));
         }},
        {"join", fJoin},
        {"list", [](Interpreter& in, const Value& v,
                    const CallArgs&) { return Value::list(in.iterate(v)); }},
        {"lower",
         [](Interpreter&, const Value& v, const CallArgs&) { return Value(str::lower(v.str())); }},
        {"upper",
         [](Interpreter&, const Value& v, const CallArgs&) { return Value(str::upper(v.str())); }},
        {"map", fMap},
        {"max",
         [](Interpreter& in, const Value& v, const CallArgs& a) { return minMax(in, v, a, true); }},
        {"min", [](Interpreter& in, const Value& v,
                   const CallArgs& a) { return minMax(in, v, a, false); }},
        {"reject", [](Interpreter& in, const Value& v,
                      const CallArgs& a) { return selectOrReject(in, v, a, false, false); }},
        {"rejectattr", [](Interpreter& in, const Value& v,
                          const CallArgs& a) { return selectOrReject(in, v, a, false, true); }},
        {"select", [](Interpreter& in, const Value& v,
                      const CallArgs& a) { return selectOrReject(in, v, a, true, false); }},
        {"selectattr", [](Interpreter& in, const Value& v,
                          const CallArgs& a) { return selectOrReject(in, v, a, true, true); }},
        {"replace",
         [](Interpreter& in, const Value& v, const CallArgs& a) {
             const Value* count = arg(a, "count", 2);
             return checkedReplace(in, v.str(), strArg(a, "old", 0, ""), strArg(a, "new", 1, ""),
                                   count && !count->isNone() ? static_cast<long>(count->asInt())
                                                             : -1);
         }},
        {"reverse",
         [](Interpreter& in, const Value& v, const CallArgs&) {
             if (v.isString()) {
                 auto cps = str::decode(v.asString());
                 std::reverse(cps.begin(), cps.end());
                 return Value(str::encode(cps));
             }
             auto items = in.iterate(v);
             std::reverse(items.begin(), items.end());
             return Value::list(std::move(items));
         }},
        {"round", fRound},
        {"safe", [](Interpreter&, const Value& v, const CallArgs&) { return v; }},
        {"sort", fSort},
        {"string", [](Interpreter&, const Value& v, const CallArgs&) { return Value(v.str()); }},
        {"sum",
         [](Interpreter& in, const Value& v, const CallArgs& a) {
             const Value* attribute = arg(a, "attribute", 0);
             Value total = arg(a, "start", 1) ? *arg(a, "start", 1) : Value(0);
             for (const auto& item : in.iterate(v)) {
                 const Value x = attribute && !attribute->isNone()
                                     ? attrPath(in, item, attribute->str())
                                     : item;
                 x.require();
                 if (!x.isNumber() || !total.isNumber())
                     throw KvError("unsupported operand type(s) for +: '" + total.typeName() +
                                   "' and '" + x.typeName() + "'");
                 if (total.isFloat() || x.isFloat()) {
                     total = Value(total.asDouble() + x.asDouble());
                 } else {
                     std::int64_t r = 0;
                     if (__builtin_add_overflow(total.asInt(), x.asInt(), &r))
                         throw KvError("integer overflow in sum() (ints are 64-bit here)");
                     total = Value(r);
                 }
             }
             return total;
         }},
        {"title", [](Interpreter&, const Value& v,
                     const CallArgs&) { return Value(str::jinjaTitle(v.str())); }},
        {"tojson", fTojson},
        {"trim",
         [](Interpreter&, const Value& v, const CallArgs& a) {
             const Value* chars = arg(a, "chars", 0);
             const std::string set = chars && !chars->isNone() ? chars->str() : std::string();
             return Value(
                 str::strip(v.str(), chars && !chars->isNone() ? &set : nullptr, true, true));
         }},
        {"unique", fUnique},
        {"wordcount", fWordcount},
    };
    return table;
}

// String input bytes per step of the filters that decode and re-encode every code point
// (measured: 5-25 ns a byte); the others read at kBytesPerStep.
std::uint64_t inputBytesPerStep(const std::string& filter) {
    static const std::map<std::string, std::uint64_t> decoding = {
        {"capitalize", 8}, {"float", 8},      {"int", 8},     {"lower", 8},
        {"reverse", 8},    {"title", 4},      {"tojson", 8},  {"trim", 4},
        {"upper", 4},      {"wordcount", 16}, {"escape", 16}, {"center", 16}};
    const auto it = decoding.find(filter);
    return it == decoding.end() ? kBytesPerStep : it->second;
}

std::string canonicalFilter(const std::string& name) {
    if (name == "d")
        return "default";
    if (name == "e" || name == "forceescape")
        return "escape";
    return name;
}

} // namespace

bool hasFilter(const std::string& name) {
    return filters().count(canonicalFilter(name)) > 0;
}

Value applyFilter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args) {
    const std::string canonical = canonicalFilter(name);
    const auto it = filters().find(canonical);
    if (it == filters().end())
        throw KvError("No filter named '" + name + "'.");
    // A filter's work is at least reading a string input and writing a string result; the
    // filters that walk lists charge through iterate(), and comparisons charge themselves.
    const std::size_t size = v.isString() ? v.asString().size() : 0;
    const std::uint64_t perStep = inputBytesPerStep(canonical);
    in.budget().bytes(size, perStep); // at least one step: map applies a filter to every item
    // The code points a decoding filter holds while it runs.
    const Budget::Hold decoded(perStep < kBytesPerStep ? size * sizeof(char32_t) : 0);
    Value result = it->second(in, v, args);
    if (result.isString())
        in.budget().bytes(result.asString().size());
    return result;
}

} // namespace kvscope::chat
