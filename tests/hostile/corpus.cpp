#include "corpus.h"

#include <cstdio>

namespace kvscope::hostile {

Corpus::Corpus(fs::path root, Bases bases, std::uint64_t seed)
    : m_root(std::move(root)), m_bases(std::move(bases)), m_state(seed) {
    fs::create_directories(m_root / "cases");
    fs::create_directories(fixtures());
}

fs::path Corpus::newCaseDir() {
    char id[16];
    std::snprintf(id, sizeof id, "c%04d", m_nextId++);
    const fs::path dir = m_root / "cases" / id;
    fs::create_directories(dir);
    return dir;
}

namespace {

std::uint64_t sizeOf(const fs::path& p, bool& folder) {
    std::error_code ec;
    const auto st = fs::symlink_status(p, ec);
    if (ec || !fs::exists(st))
        return 0;
    if (fs::is_directory(st)) {
        folder = true;
        std::uint64_t total = 0;
        for (auto it = fs::recursive_directory_iterator(p, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
            std::error_code e2;
            if (it->is_regular_file(e2) && !it->is_symlink(e2))
                total += it->file_size(e2);
        }
        return total;
    }
    return fs::is_regular_file(st) ? fs::file_size(p, ec) : 0;
}

} // namespace

void Corpus::add(const fs::path& dir, Case c) {
    c.id = dir.filename().string();
    c.dir = dir.string();
    if (!c.input.empty()) {
        bool folder = false;
        c.inputBytes = sizeOf(c.input, folder);
        if (folder && c.family.rfind("lineage.", 0) == 0)
            c.inputIsFolder = true;
    }
    m_cases.push_back(std::move(c));
}

std::uint64_t Corpus::next() {
    std::uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

} // namespace kvscope::hostile
