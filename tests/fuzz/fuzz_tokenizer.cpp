// libFuzzer target for the tokenizer loaders: the input is detected like a file given to
// Tokenizer::fromFile (GGUF magic: the GGUF-embedded vocabulary; '{': a Hugging Face
// tokenizer.json; anything else: a llama2.c tokenizer .bin). A tokenizer that loads then
// encodes and decodes a fixed text and the input itself (see exercise/tokenizer.h).
#include "exercise/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    auto t = tok::Tokenizer::fromMemory(std::vector<uint8_t>(data, data + size), "fuzz.tokenizer");
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const Status st = t ? fuzz::exerciseTokenizer(*t.value(), input)
                        : fuzz::checkError(t.message(), "fuzz.tokenizer");
    fuzz::trapUnless(st);
    return 0;
}
