// libFuzzer target for chat templates: the input is parsed as a Jinja chat template and
// rendered with a small fixed conversation, plainly and with the segment map (see
// exercise/chat.h). Errors are fine; crashes, hangs and runaway allocations are not.
#include "exercise/chat.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    std::string source(reinterpret_cast<const char*>(data), size);
    fuzz::trapUnless(fuzz::exerciseChatTemplate(std::move(source), "fuzz.jinja"));
    return 0;
}
