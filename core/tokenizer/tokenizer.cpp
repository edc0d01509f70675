// Tokenizer::fromFile: detects the file kind from its content (not its name).
#include "tokenizer/tokenizer.h"

#include "tokenizer/loaders.h"

#include "formats/gguf.h"
#include "util/fileio.h"

#include <filesystem>

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

// The kind of tokenizer file whose first bytes are `head` (64 are enough).
std::string sniff(std::string_view head) {
    const std::size_t n = head.size();
    if (n >= 4 && head.substr(0, 4) == "GGUF")
        return "gguf";
    std::size_t i = 0;
    if (n >= 3 && head.substr(0, 3) == "\xEF\xBB\xBF")
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
        const std::string kind = sniff(readFileHead(file, 64)); // refuses FIFOs and devices
        if (kind == "gguf")
            return loadGguf(file);
        if (kind == "json")
            return loadHfJson(file);
        return loadLlama2c(file);
    });
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::fromMemory(std::vector<std::uint8_t> bytes,
                                                               std::string name) {
    return catchToResult([&]() -> std::shared_ptr<const Tokenizer> {
        const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        const std::string kind = sniff(all.substr(0, 64));
        if (kind == "gguf") {
            auto opened = gguf::File::openMemory(std::move(bytes), name);
            if (!opened)
                throw KvError(opened.message());
            return loadGguf(opened.value());
        }
        if (kind == "json")
            return loadHfJson(all, name, nullptr, {});
        return loadLlama2c(bytes, name);
    });
}

} // namespace kvscope::tok
