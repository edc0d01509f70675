#include "tokenizer/regex.h"

#include "util/status.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kvscope::tok {

Regex::Regex(const std::string& pattern, const std::string& what) : m_pattern(pattern) {
    int errorCode = 0;
    PCRE2_SIZE errorOffset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &errorCode, &errorOffset, nullptr);
    if (!code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(errorCode, message, sizeof message);
        throw KvError(what + ": invalid regex \"" + pattern +
                      "\": " + reinterpret_cast<const char*>(message) + " at offset " +
                      std::to_string(errorOffset));
    }
    m_jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    m_code = code;
}

Regex::~Regex() {
    pcre2_code_free(static_cast<pcre2_code*>(m_code));
}

std::size_t Regex::minLength() const {
    uint32_t n = 0;
    if (pcre2_pattern_info(static_cast<pcre2_code*>(m_code), PCRE2_INFO_MINLENGTH, &n) != 0)
        return 0;
    return n;
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::findAll(std::string_view s) const {
    auto* code = static_cast<pcre2_code*>(m_code);
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    std::size_t pos = 0;
    uint32_t options = PCRE2_NO_UTF_CHECK;
    while (pos <= s.size()) {
        int rc = pcre2_match(code, subject, s.size(), pos, options, md.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) // very long runs: fall back to the interpreter
            rc = pcre2_match(code, subject, s.size(), pos, options | PCRE2_NO_JIT, md.get(),
                             nullptr);
        // A failed match (a pattern from the file that backtracks past PCRE2's match limit,
        // -47) ends the search like no further match: encode() has no error to return, and
        // an exception from it would end the program.
        if (rc < 0)
            break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        out.emplace_back(ov[0], ov[1]);
        if (ov[1] > ov[0]) {
            pos = ov[1];
        } else {
            // Empty match: step over one UTF-8 character.
            pos = ov[1] + 1;
            while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80)
                ++pos;
        }
    }
    return out;
}

} // namespace kvscope::tok
