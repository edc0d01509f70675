#include "tokenizer/hfcomponents.h"

#include "util/status.h"

namespace kvscope::tok::hf {

const Json& member(const Json& j, const char* key, const std::string& where) {
    if (!j.is_object())
        throw KvError(where + ": expected an object");
    const auto it = j.find(key);
    if (it == j.end() || it->is_null())
        throw KvError(where + ": missing field '" + key + "'");
    return *it;
}

std::string getString(const Json& j, const char* key, const std::string& where) {
    const Json& v = member(j, key, where);
    if (!v.is_string())
        throw KvError(where + "." + key + ": expected a string");
    return v.get<std::string>();
}

bool getBool(const Json& j, const char* key, bool fallback, const std::string& where) {
    if (!j.is_object())
        throw KvError(where + ": expected an object");
    const auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return fallback;
    if (!it->is_boolean())
        throw KvError(where + "." + key + ": expected true or false");
    return it->get<bool>();
}

} // namespace kvscope::tok::hf
