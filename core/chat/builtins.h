// Filters, tests, str/dict/list methods and global functions of the template engine.
// Internal to core/chat; semantics follow jinja2 3.1 and transformers' environment.
#pragma once

#include "chat/interpreter.h"

#include <string>

namespace kvscope::chat {

Value applyFilter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args);
bool applyTest(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args);
bool hasTest(const std::string& name);
bool hasFilter(const std::string& name);

// str/dict/list methods: whether `obj.name` is a method, and calling it.
bool hasMethod(const Value& obj, const std::string& name);
Value callMethod(Interpreter& in, const Value& obj, const std::string& name, const CallArgs& args);

// str.replace / |replace, with the result's size checked before it is built.
Value checkedReplace(Interpreter& in, const std::string& s, const std::string& from,
                     const std::string& to, long count);

// range, namespace, dict, raise_exception, strftime_now, cycler-free jinja globals.
void addGlobals(Scope& scope);

} // namespace kvscope::chat
