#include "modelcard.h"

#include "util/fileio.h"

#include <filesystem>
#include <sstream>

namespace kvscope::ws {

namespace {

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos)
        return {};
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A YAML scalar as the model cards write it: "double quoted" (with \" and \\ escapes),
// 'single quoted' ('' for a quote) or plain.
std::string yamlScalar(std::string v) {
    v = trim(v);
    if (v.size() >= 2 && v.front() == '"') {
        std::string out;
        for (std::size_t i = 1; i < v.size() && v[i] != '"'; ++i) {
            if (v[i] == '\\' && i + 1 < v.size()) {
                ++i;
                out += v[i] == 'n' ? '\n' : v[i];
            } else {
                out += v[i];
            }
        }
        return out;
    }
    if (v.size() >= 2 && v.front() == '\'') {
        std::string out;
        for (std::size_t i = 1; i < v.size(); ++i) {
            if (v[i] == '\'') {
                if (i + 1 < v.size() && v[i + 1] == '\'') {
                    out += '\'';
                    ++i;
                    continue;
                }
                break;
            }
            out += v[i];
        }
        return out;
    }
    if (const auto hash = v.find(" #"); hash != std::string::npos) // a comment
        v = trim(v.substr(0, hash));
    return v;
}

std::optional<std::string> fromMarker(const std::string& readme) {
    const std::string marker = "<!-- reference-generation ";
    const auto at = readme.find(marker);
    if (at == std::string::npos)
        return std::nullopt;
    const auto end = readme.find("-->", at);
    if (end == std::string::npos)
        return std::nullopt;
    const std::string attrs = readme.substr(at + marker.size(), end - at - marker.size());
    const auto k = attrs.find("prompt=\"");
    if (k == std::string::npos)
        return std::nullopt;
    const auto b = k + 8, e = attrs.find('"', b);
    if (e == std::string::npos || e == b)
        return std::nullopt;
    return attrs.substr(b, e - b);
}

std::optional<std::string> fromFrontMatter(const std::string& readme) {
    std::istringstream in(readme);
    std::string line;
    if (!std::getline(in, line) || trim(line) != "---")
        return std::nullopt;
    bool inWidget = false;
    while (std::getline(in, line)) {
        if (trim(line) == "---")
            break; // the end of the front matter
        if (line.empty() || line[0] == '#')
            continue;
        if (line[0] != ' ' && line[0] != '-') { // a top-level key
            inWidget = line.rfind("widget:", 0) == 0;
            continue;
        }
        if (!inWidget)
            continue;
        // "  - text: ..." or "    text: ..." (a later key of the same entry)
        std::string item = trim(line);
        if (item.rfind("- ", 0) == 0)
            item = trim(item.substr(2));
        if (item.rfind("text:", 0) == 0)
            if (std::string v = yamlScalar(item.substr(5)); !v.empty())
                return v;
    }
    return std::nullopt;
}

} // namespace

std::optional<std::string> examplePromptFromCard(const std::string& readme) {
    if (auto p = fromMarker(readme))
        return p;
    return fromFrontMatter(readme);
}

std::optional<std::string> examplePrompt(const std::string& modelPath) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path path(modelPath);
    const fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
    const fs::path readme = dir / "README.md";
    if (!fs::is_regular_file(readme, ec))
        return std::nullopt;
    try {
        return examplePromptFromCard(readFileText(readme.string(), 1u << 20));
    } catch (const std::exception&) {
        return std::nullopt; // an unreadable card names no prompt; the model still loads
    }
}

} // namespace kvscope::ws
