#include "tokenizer/loaders.h"
namespace kvscope::tok {
std::shared_ptr<const Tokenizer> loadGguf(const std::string& path) {
    throw KvError(path + ": GGUF tokenizers are not built yet");
}
} // namespace kvscope::tok
