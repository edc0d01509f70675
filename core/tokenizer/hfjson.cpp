#include "tokenizer/loaders.h"
namespace kvscope::tok {
std::shared_ptr<const Tokenizer> loadHfJson(const std::string& path) {
    throw KvError(path + ": tokenizer.json support is not built yet");
}
} // namespace kvscope::tok
