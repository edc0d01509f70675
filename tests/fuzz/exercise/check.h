// What the fuzz targets and tst_fuzzregressions check about one input: shared by both, so a
// regression replayed by the Qt Test suite goes through exactly what the fuzzer ran.
//
// Every exercise returns OK or a Status naming a broken invariant ("tensor 'x': data() is 3
// bytes, nbytes says 4"). Reader errors themselves are not failures; an error that does not
// name the input is (messages must name the file). The fuzzers trap on a failed Status, the
// suite reports it.
#pragma once

#include "util/status.h"

#include <cstdio>
#include <string>
#include <string_view>

namespace kvscope::fuzz {

// A reader's error message must be non-empty and name the input it was given.
inline Status checkError(const std::string& message, std::string_view name) {
    if (message.empty())
        return Status::error("an error without a message");
    if (message.find(name) == std::string::npos)
        return Status::error("the error does not name '" + std::string(name) + "': " + message);
    return Status::ok();
}

// For the fuzz targets: a failed check is a crash, with its message on stderr.
inline void trapUnless(const Status& st) {
    if (st)
        return;
    std::fprintf(stderr, "fuzz check failed: %s\n", st.message().c_str());
    __builtin_trap();
}

} // namespace kvscope::fuzz
