// Error values for kvscope's public core API.
//
// Inside core, code may throw kvscope::KvError; every public entry point turns it into a
// Status or Result<T>. Messages are written for users: they name the file and the field
// ("stories.bin: header field n_layers = -3 is not positive").
#pragma once

#include <cassert>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace kvscope {

// Exception used inside core only. Never crosses the public API.
class KvError : public std::runtime_error {
public:
    explicit KvError(const std::string& message) : std::runtime_error(message) {}
};

// [[nodiscard]]: a returned Status or Result that nobody looks at is a bug (an error lost).
class [[nodiscard]] Status {
public:
    Status() = default; // ok
    static Status ok() { return {}; }
    // An error always has a message: an empty one is replaced so that it still reads as one.
    static Status error(std::string message) {
        Status s;
        s.m_error = message.empty() ? std::string("error (no message given)") : std::move(message);
        return s;
    }
    bool isOk() const { return !m_error.has_value(); }
    explicit operator bool() const { return isOk(); }
    const std::string& message() const {
        static const std::string empty;
        return m_error ? *m_error : empty;
    }

private:
    std::optional<std::string> m_error;
};

// A value or an error message. Cheap to move; access value() only when isOk().
template <typename T> class [[nodiscard]] Result {
public:
    Result(T value) : m_v(std::in_place_index<0>, std::move(value)) {}
    // From an error Status. An OK status has no value to carry: that is a programmer error
    // (asserted), and it still becomes an error with a message, never an empty one.
    Result(Status status)
        : m_v(std::in_place_index<1>,
              status.isOk() ? std::string("internal error: an OK status used as a failed result")
                            : status.message()) {
        assert(!status.isOk());
    }
    static Result error(std::string message) {
        Result r{Status::error(std::move(message))};
        return r;
    }
    bool isOk() const { return m_v.index() == 0; }
    explicit operator bool() const { return isOk(); }
    T& value() & { return std::get<0>(m_v); }
    const T& value() const& { return std::get<0>(m_v); }
    T&& value() && { return std::get<0>(std::move(m_v)); }
    const std::string& message() const {
        static const std::string empty;
        return isOk() ? empty : std::get<1>(m_v);
    }
    Status status() const { return isOk() ? Status::ok() : Status::error(std::get<1>(m_v)); }

private:
    std::variant<T, std::string> m_v;
};

// An exception's message as a user should read it: libtorch's errors append a C++ backtrace
// ("Exception raised from ... frame #0: ..."), which is cut off here.
// The standard library's own failures ("std::bad_alloc", "vector::_M_default_append",
// "basic_string::_M_create") name nothing a user can act on: they say what happened instead
// (the caller adds the file and the field).
inline std::string userMessage(const std::exception& e) {
    if (dynamic_cast<const std::bad_alloc*>(&e))
        return "out of memory: the input asks for more memory than this machine can give";
    if (dynamic_cast<const std::length_error*>(&e) || dynamic_cast<const std::out_of_range*>(&e))
        if (!dynamic_cast<const KvError*>(&e))
            return "a size or index in the input is out of range (" + std::string(e.what()) + ")";
    std::string m = e.what();
    for (const char* marker : {"\nException raised from ", "Exception raised from "})
        if (const auto at = m.find(marker); at != std::string::npos && at > 0) {
            m.erase(at);
            break;
        }
    while (!m.empty() && (m.back() == '\n' || m.back() == ' '))
        m.pop_back();
    return m;
}

// Runs fn() and converts a thrown KvError (or std::exception) into an error Result.
template <typename Fn> auto catchToResult(Fn&& fn) -> Result<decltype(fn())> {
    try {
        return fn();
    } catch (const std::exception& e) {
        return Result<decltype(fn())>::error(userMessage(e));
    }
}

template <typename Fn> Status catchToStatus(Fn&& fn) {
    try {
        fn();
        return Status::ok();
    } catch (const std::exception& e) {
        return Status::error(userMessage(e));
    }
}

} // namespace kvscope
