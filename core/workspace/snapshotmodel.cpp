#include "workspace/snapshotmodel.h"

#include "engine/model.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <vector>

namespace kvscope::ws {

namespace fs = std::filesystem;

bool madeWith(const state::Snapshot& s, const Model* loaded) {
    return loaded && !s.fingerprints.model.empty() && s.fingerprints.model == loaded->fingerprint();
}

std::shared_ptr<const tok::Tokenizer> TokenizerFinder::find(const state::Snapshot& s,
                                                            const Model* loaded) {
    const std::string& want = s.fingerprints.tokenizer;
    if (want.empty())
        return nullptr;
    if (loaded)
        if (auto t = loaded->tokenizer(); t && t->fingerprint() == want)
            return t;
    if (auto found = m_found.find(want); found != m_found.end())
        return found->second;
    // Where the state says its model was: a folder holds its tokenizer; a GGUF file embeds one
    // and a tokenizer.json is one; any other file (a llama2.c checkpoint) has its tokenizer
    // beside it, under a name of its own: every tokenizer.json, tokenizer.bin, tok*.bin and
    // .gguf there (at most kMaxBeside of them) is a candidate. Tokenizer::fromFile refuses FIFOs
    // and devices.
    constexpr int kMaxBeside = 16;
    std::vector<std::string> candidates;
    std::error_code ec;
    if (!s.modelPath.empty()) {
        const fs::path p(s.modelPath);
        if (fs::is_directory(p, ec)) {
            candidates.push_back(p.string());
        } else {
            const std::string ext = p.extension().string();
            if (ext == ".gguf" || ext == ".json") {
                candidates.push_back(p.string());
            } else if (p.has_parent_path() && fs::is_directory(p.parent_path(), ec)) {
                fs::directory_iterator it(p.parent_path(), ec), end;
                for (int seen = 0; !ec && it != end && seen < 4 * kMaxBeside; it.increment(ec)) {
                    ++seen;
                    const fs::path f = it->path();
                    const std::string name = f.filename().string(), e = f.extension().string();
                    if (name == "tokenizer.json" || name == "tokenizer.bin" || e == ".gguf" ||
                        (e == ".bin" && name.rfind("tok", 0) == 0))
                        candidates.push_back(f.string());
                    if (int(candidates.size()) >= kMaxBeside)
                        break;
                }
                std::sort(candidates.begin(), candidates.end());
            }
        }
    }
    for (const std::string& path : candidates) {
        if (!m_tried.insert(path).second)
            continue;
        auto t = tok::Tokenizer::fromFile(path);
        if (!t)
            continue;
        m_found.emplace(t.value()->fingerprint(), t.value());
        if (t.value()->fingerprint() == want)
            return t.value();
    }
    return nullptr;
}

} // namespace kvscope::ws
