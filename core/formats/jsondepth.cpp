#include "formats/jsondepth.h"
#include "util/status.h"

namespace kvscope {

void checkJsonDepth(std::string_view text, const std::string& what) {
    std::size_t depth = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\')
                ++i; // the escaped character cannot end the string
            else if (c == '"')
                inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                throw KvError(what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                              " levels (at byte " + std::to_string(i) + ")");
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
}

} // namespace kvscope
