// jinja2 3.1 tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...).
#include "chat/builtins.h"
#include "chat/strutil.h"

#include <map>

namespace kvscope::chat {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, const CallArgs&);

const Value& testArg(const CallArgs& a, const char* test) {
    if (a.positional.empty())
        throw KvError(std::string("test '") + test + "' requires an argument");
    return a.positional[0];
}

const std::map<std::string, TestFn>& tests() {
    static const std::map<std::string, TestFn> table = {
        {"defined", [](Interpreter&, const Value& v, const CallArgs&) { return !v.isUndefined(); }},
        {"undefined",
         [](Interpreter&, const Value& v, const CallArgs&) { return v.isUndefined(); }},
        {"none", [](Interpreter&, const Value& v, const CallArgs&) { return v.isNone(); }},
        {"boolean", [](Interpreter&, const Value& v, const CallArgs&) { return v.isBool(); }},
        {"true",
         [](Interpreter&, const Value& v, const CallArgs&) { return v.isBool() && v.asBool(); }},
        {"false",
         [](Interpreter&, const Value& v, const CallArgs&) { return v.isBool() && !v.asBool(); }},
        {"integer", [](Interpreter&, const Value& v, const CallArgs&) { return v.isInt(); }},
        {"float", [](Interpreter&, const Value& v, const CallArgs&) { return v.isFloat(); }},
        {"number", [](Interpreter&, const Value& v, const CallArgs&) { return v.isNumber(); }},
        {"string", [](Interpreter&, const Value& v, const CallArgs&) { return v.isString(); }},
        {"mapping", [](Interpreter&, const Value& v, const CallArgs&) { return v.isDict(); }},
        {"iterable",
         [](Interpreter&, const Value& v, const CallArgs&) {
             return v.isUndefined() || v.isString() || v.isList() || v.isDict();
         }},
        {"sequence",
         [](Interpreter&, const Value& v, const CallArgs&) {
             return v.isUndefined() || v.isString() || v.isList() || v.isDict();
         }},
        {"callable", [](Interpreter&, const Value& v, const CallArgs&) { return v.isCallable(); }},
        {"eq", [](Interpreter&, const Value& v,
                  const CallArgs& a) { return v.equals(testArg(a, "eq")); }},
        {"ne", [](Interpreter&, const Value& v,
                  const CallArgs& a) { return !v.equals(testArg(a, "ne")); }},
        {"lt",
         [](Interpreter&, const Value& v, const CallArgs& a) { return v.less(testArg(a, "lt")); }},
        {"gt",
         [](Interpreter&, const Value& v, const CallArgs& a) { return testArg(a, "gt").less(v); }},
        {"le",
         [](Interpreter&, const Value& v, const CallArgs& a) { return !testArg(a, "le").less(v); }},
        {"ge",
         [](Interpreter&, const Value& v, const CallArgs& a) { return !v.less(testArg(a, "ge")); }},
        {"in", [](Interpreter&, const Value& v,
                  const CallArgs& a) { return contains(testArg(a, "in"), v); }},
        {"sameas",
         [](Interpreter&, const Value& v, const CallArgs& a) {
             const Value& o = testArg(a, "sameas");
             if (v.isNone() || v.isBool() || v.isUndefined())
                 return v.equals(o) && v.typeName() == o.typeName();
             if (v.isList() && o.isList())
                 return &v.asList() == &o.asList();
             if ((v.isDict() || v.isNamespace()) && (o.isDict() || o.isNamespace()))
                 return &v.asDict() == &o.asDict();
             return false;
         }},
        {"odd", [](Interpreter&, const Value& v,
                   const CallArgs&) { return v.require().asInt() % 2 != 0; }},
        {"even", [](Interpreter&, const Value& v,
                    const CallArgs&) { return v.require().asInt() % 2 == 0; }},
        {"divisibleby",
         [](Interpreter&, const Value& v, const CallArgs& a) {
             const std::int64_t n = testArg(a, "divisibleby").asInt();
             return n != 0 && v.require().asInt() % n == 0;
         }},
        {"lower", [](Interpreter&, const Value& v,
                     const CallArgs&) { return str::lower(v.str()) == v.str(); }},
        {"upper", [](Interpreter&, const Value& v,
                     const CallArgs&) { return str::upper(v.str()) == v.str(); }},
        {"escaped", [](Interpreter&, const Value&, const CallArgs&) { return false; }},
        {"filter", [](Interpreter&, const Value& v,
                      const CallArgs&) { return v.isString() && hasFilter(v.asString()); }},
        {"test", [](Interpreter&, const Value& v,
                    const CallArgs&) { return v.isString() && hasTest(v.asString()); }},
    };
    return table;
}

std::string canonicalTest(const std::string& name) {
    if (name == "==" || name == "equalto")
        return "eq";
    if (name == "!=")
        return "ne";
    if (name == "<" || name == "lessthan")
        return "lt";
    if (name == ">" || name == "greaterthan")
        return "gt";
    if (name == "<=")
        return "le";
    if (name == ">=")
        return "ge";
    return name;
}

} // namespace

bool hasTest(const std::string& name) {
    return tests().count(canonicalTest(name)) > 0;
}

bool applyTest(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args) {
    const auto it = tests().find(canonicalTest(name));
    if (it == tests().end())
        throw KvError("No test named '" + name + "'.");
    in.budget().step(); // select/reject apply a test to every item
    return it->second(in, v, args);
}

} // namespace kvscope::chat
