// Loaders of each tokenizer kind (internal). Each throws KvError naming the file on bad input.
#pragma once

#include "tokenizer/tokenizer.h"

namespace kvscope::tok {

std::shared_ptr<const Tokenizer> loadLlama2c(const std::string& path);
std::shared_ptr<const Tokenizer> loadHfJson(const std::string& path);
std::shared_ptr<const Tokenizer> loadGguf(const std::string& path);

} // namespace kvscope::tok
