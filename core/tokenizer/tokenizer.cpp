// Tokenizer::fromFile: detects the file kind from its content (not its name).
#include "tokenizer/tokenizer.h"

#include "tokenizer/loaders.h"

#include <filesystem>
#include "util/fileio.h"

namespace fs = std::filesystem;

namespace kvscope::tok {

Tokenizer::~Tokenizer() = default;

std::string Tokenizer::decodeNext(int32_t prev, int32_t id) const {
    // Generic streaming rule: what decoding [prev, id] adds to decoding [prev].
    if (prev < 0) {
        const int32_t one[] = {id};
        return decode(one);
    }
    const int32_t pair[] = {prev, id};
    const int32_t single[] = {prev};
    const std::string both = decode(pair);
    const std::string before = decode(single);
    if (both.compare(0, before.size(), before) == 0)
        return both.substr(before.size());
    const int32_t one[] = {id};
    return decode(one);
}

namespace {

std::string resolveFolder(const fs::path& dir) {
    for (const char* name : {"tokenizer.json", "tokenizer.bin"})
        if (fs::is_regular_file(dir / name))
            return (dir / name).string();
    std::vector<fs::path> ggufs, bins;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (!e.is_regular_file())
            continue;
        const auto ext = e.path().extension().string();
        const auto stem = e.path().stem().string();
        if (ext == ".gguf")
            ggufs.push_back(e.path());
        else if (ext == ".bin" && stem.rfind("tok", 0) == 0)
            bins.push_back(e.path());
    }
    if (ggufs.size() == 1)
        return ggufs[0].string();
    if (bins.size() == 1)
        return bins[0].string();
    throw KvError(dir.string() +
                  ": no tokenizer found (looked for tokenizer.json, tokenizer.bin, tok*.bin or "
                  "a single .gguf)");
}

std::string sniff(const std::string& path) {
    const std::string head = readFileHead(path, 64); // refuses FIFOs and devices
    const std::size_t n = head.size();
    if (n >= 4 && std::string_view(head).substr(0, 4) == "GGUF")
        return "gguf";
    std::size_t i = 0;
    if (n >= 3 && std::string_view(head).substr(0, 3) == "\xEF\xBB\xBF")
        i = 3;
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
        ++i;
    if (i < n && head[i] == '{')
        return "json";
    return "llama2c";
}

} // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::fromFile(const std::string& path) {
    return catchToResult([&]() -> std::shared_ptr<const Tokenizer> {
        std::error_code ec;
        std::string file = path;
        if (fs::is_directory(path, ec))
            file = resolveFolder(path);
        else if (!fs::exists(path, ec))
            throw KvError(path + ": no such file");
        const std::string kind = sniff(file);
        if (kind == "gguf")
            return loadGguf(file);
        if (kind == "json")
            return loadHfJson(file);
        return loadLlama2c(file);
    });
}

} // namespace kvscope::tok
