// Error values for kvscope's public core API.
//
// Inside core, code may throw kvscope::KvError; every public entry point turns it into a
// Status or Result<T>. Messages are written for users: they name the file and the field
// ("stories.bin: header field n_layers = -3 is not positive").
#pragma once

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

class Status {
public:
    Status() = default; // ok
    static Status ok() { return {}; }
    static Status error(std::string message) {
        Status s;
        s.m_error = std::move(message);
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
template <typename T> class Result {
public:
    Result(T value) : m_v(std::in_place_index<0>, std::move(value)) {}
    Result(Status status) : m_v(std::in_place_index<1>, status.message()) {}
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

// Runs fn() and converts a thrown KvError (or std::exception) into an error Result.
template <typename Fn> auto catchToResult(Fn&& fn) -> Result<decltype(fn())> {
    try {
        return fn();
    } catch (const std::exception& e) {
        return Result<decltype(fn())>::error(e.what());
    }
}

template <typename Fn> Status catchToStatus(Fn&& fn) {
    try {
        fn();
        return Status::ok();
    } catch (const std::exception& e) {
        return Status::error(e.what());
    }
}

} // namespace kvscope
