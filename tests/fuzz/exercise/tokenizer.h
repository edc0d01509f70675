// Exercises a loaded tokenizer: encodes and decodes a fixed short text and `input` (the file's
// own bytes, as text), decodes `input` read as token ids, streams with decodeNext, and looks
// at the vocabulary's edges (see check.h).
#pragma once

#include "check.h"
#include "tokenizer/tokenizer.h"

#include <cstring>
#include <vector>

namespace kvscope::fuzz {

inline Status exerciseTokenizer(const tok::Tokenizer& t, std::string_view input) {
    const int32_t n = t.vocabSize();
    if (n < 0)
        return Status::error("negative vocabSize");
    for (const int32_t id : {-1, 0, 1, 2, n / 2, n - 1, n, INT32_MAX, INT32_MIN}) {
        (void)t.tokenText(id);
        (void)t.isSpecial(id);
    }
    for (const auto id : {t.bosId(), t.eosId()})
        if (id && (*id < 0 || *id >= n))
            return Status::error("bos/eos id " + std::to_string(*id) + " outside the vocabulary");
    (void)t.kind(), (void)t.fingerprint(), (void)t.chatTemplate(), (void)t.sourcePath();
    // Every piece of a small vocabulary decodes on its own and streamed.
    for (int32_t id = 0; id < n && id < 4096; ++id) {
        const int32_t one[] = {id};
        (void)t.decode(one, false);
        (void)t.decodeNext(-1, id);
        (void)t.decodeNext(id, id);
    }

    const std::string_view texts[] = {"Hello world! 123 <s> \xC3\xA9t\xC3\xA9 \xE2\x96\x81x\n\t",
                                      input};
    for (const std::string_view text : texts)
        for (const bool special : {true, false}) {
            const std::vector<int32_t> ids = t.encode(text, {special});
            for (const int32_t id : ids)
                if (id < 0 || id >= n)
                    return Status::error("encode produced id " + std::to_string(id) +
                                         " outside the vocabulary of " + std::to_string(n));
            (void)t.decode(ids, false);
            (void)t.decode(ids, true);
            int32_t prev = -1;
            for (std::size_t i = 0; i < ids.size() && i < 64; ++i)
                (void)t.decodeNext(prev, ids[i]), prev = ids[i];
        }
    // Arbitrary ids, unknown and negative ones included, are skipped by decode.
    std::vector<int32_t> ids(input.size() / 4);
    if (!ids.empty())
        std::memcpy(ids.data(), input.data(), ids.size() * 4);
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
    int32_t prev = -1;
    for (std::size_t i = 0; i < ids.size() && i < 64; ++i)
        (void)t.decodeNext(prev, ids[i]), prev = ids[i];
    return Status::ok();
}

} // namespace kvscope::fuzz
