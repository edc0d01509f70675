// Loaders of each tokenizer kind (internal). Each throws KvError naming the file on bad input.
// The path overloads read the file (and, for tokenizer.json, tokenizer_config.json beside it)
// and call the in-memory ones, so Tokenizer::fromFile and fromMemory share one parser each.
#pragma once

#include "tokenizer/tokenizer.h"

namespace kvscope::gguf {
class File;
}

namespace kvscope::tok {

std::shared_ptr<const Tokenizer> loadLlama2c(const std::string& path);
// Messages name path's file name; sourcePath() is `path`.
std::shared_ptr<const Tokenizer> loadLlama2c(std::span<const std::uint8_t> bytes,
                                             const std::string& path);

std::shared_ptr<const Tokenizer> loadHfJson(const std::string& path);
// `configText`: the tokenizer_config.json beside it, when there is one (read for the chat
// template and bos/eos names); `configPath` names it in messages.
std::shared_ptr<const Tokenizer> loadHfJson(std::string_view text, const std::string& path,
                                            const std::string* configText,
                                            const std::string& configPath);

std::shared_ptr<const Tokenizer> loadGguf(const std::string& path);
std::shared_ptr<const Tokenizer> loadGguf(const gguf::File& file);

} // namespace kvscope::tok
