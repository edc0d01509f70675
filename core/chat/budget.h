// The resource budget of one render: how much work a template may do and how much memory its
// values may hold, so that a hostile template stops with a message that names the limit
// instead of hanging or exhausting memory (the bounds Python jinja2's sandbox leaves open).
//
// Four meters, each with a limit in Limits:
//   steps   - work, weighted so that one step is roughly 100 ns of this engine's time (a
//             render's wall time is about maxSteps / 10^7 seconds at most): 1 per statement
//             and expression evaluated, kLoopIterationSteps per loop iteration,
//             kMacroCallSteps per macro call, kStorageSteps per string, list or dict built,
//             1 per kItemsPerStep list items copied, and 1 per kBytesPerStep bytes a filter,
//             method, operator, comparison, repr or JSON dump reads or writes (fewer bytes
//             per step for the filters that decode and re-encode every code point);
//   memory  - bytes held by the strings, lists and dicts the render has built and not yet
//             freed (live, not cumulative), plus large temporaries while they exist;
//   sizes   - every string value (bytes) and list/dict (items) on its own;
//   nesting - expression/statement evaluation depth (the C++ stack), macro recursion depth.
// The output size and the loop iteration count are limited as well (Interpreter).
//
// The budget of the render running on a thread is reachable through Budget::current(), so
// that the value model (value.cpp: construction, repr, equality, JSON) charges the same
// meters without every call site passing it along. Budget::Install sets it for a scope.
// Values created outside a render (parsed literals, converted messages) are not metered.
//
// Not thread-safe: one Budget belongs to one render on one thread.
#pragma once

#include "util/status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvscope::chat {

struct Limits {
    std::size_t maxOutputBytes = 32u << 20;    // the rendered text
    std::size_t maxStringBytes = 32u << 20;    // every string value built
    std::size_t maxItems = 1'000'000;          // every list or dict built
    std::size_t maxMemoryBytes = 64u << 20;    // live values built by the render
    std::uint64_t maxSteps = 10'000'000;       // work, see above
    std::size_t maxLoopIterations = 1'000'000; // over the whole render
    int maxMacroDepth = 64;
    int maxEvalDepth = 1200; // nested expression/statement evaluation (C++ stack guard)
};

// Weights of the step meter, measured on this engine (see above).
inline constexpr std::uint64_t kBytesPerStep = 32;
inline constexpr std::uint64_t kDecodedBytesPerStep = 4; // work per code point
inline constexpr std::uint64_t kItemsPerStep = 2;
inline constexpr std::uint64_t kStorageSteps = 2;
inline constexpr std::uint64_t kLoopIterationSteps = 4;
inline constexpr std::uint64_t kMacroCallSteps = 25;

// A limit was reached. The message reads "render stopped: <which limit, its value>";
// Template::render prefixes the template name and line.
class LimitError : public KvError {
public:
    explicit LimitError(const std::string& what) : KvError("render stopped: " + what) {}
};

class Budget {
public:
    explicit Budget(const Limits& limits) : m_limits(limits) {}
    Budget(const Budget&) = delete;
    Budget& operator=(const Budget&) = delete;

    const Limits& limits() const { return m_limits; }

    // Charges n steps of work; throws LimitError once maxSteps is used up.
    void step(std::uint64_t n = 1) {
        m_steps += n;
        if (m_steps > m_limits.maxSteps)
            stepsUsedUp();
    }
    // Charges work proportional to `bytes` read or written (bytesPerStep > 0), or to list
    // items copied.
    void bytes(std::size_t bytes, std::uint64_t bytesPerStep = kBytesPerStep) {
        step(1 + bytes / bytesPerStep);
    }
    void items(std::size_t items) { step(1 + items / kItemsPerStep); }
    std::uint64_t stepsUsed() const { return m_steps; }

    // Per-value size caps: call before building a value of that size.
    void checkString(std::size_t bytes) const;
    void checkItems(std::size_t items) const;

    // Live memory: acquire() throws LimitError past maxMemoryBytes (and then holds nothing);
    // release() must return exactly what an acquire() took.
    void acquire(std::size_t bytes);
    void release(std::size_t bytes) noexcept { m_live -= bytes < m_live ? bytes : m_live; }
    std::size_t liveBytes() const { return m_live; }
    std::size_t peakBytes() const { return m_peak; }

    // The budget of the render running on this thread, or nullptr outside a render.
    static Budget* current();

    // Makes `budget` the current one for this thread while it lives; restores the previous.
    class Install {
    public:
        explicit Install(Budget& budget);
        ~Install();
        Install(const Install&) = delete;
        Install& operator=(const Install&) = delete;

    private:
        Budget* m_previous;
    };

    // Holds `bytes` of a large temporary (decoded code points, split parts) against the
    // current budget, if any, for its lifetime.
    class Hold {
    public:
        explicit Hold(std::size_t bytes);
        ~Hold();
        Hold(const Hold&) = delete;
        Hold& operator=(const Hold&) = delete;

    private:
        Budget* m_budget;
        std::size_t m_bytes;
    };

private:
    [[noreturn]] void stepsUsedUp() const;

    Limits m_limits;
    std::uint64_t m_steps = 0;
    std::size_t m_live = 0;
    std::size_t m_peak = 0;
};

} // namespace kvscope::chat
