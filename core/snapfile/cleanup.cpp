#include "snapfile/writer.h"

#include <filesystem>
#include <system_error>

namespace kvscope::snapfile {

Result<int> removeStaleTempFiles(const std::string& path, std::chrono::seconds minAge) {
    namespace fs = std::filesystem;
    return catchToResult([&] {
        const fs::path target(path);
        const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
        // Writer::create names its file ".<name>.tmp" + 6 characters from mkstemp.
        std::string prefix = "."; // appended piecewise: GCC 12 -Wrestrict false positive
        prefix += target.filename().string();
        prefix += ".tmp";
        const auto now = fs::file_time_type::clock::now();
        int removed = 0;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0)
                continue;
            std::error_code e2;
            if (!entry.is_regular_file(e2))
                continue;
            const auto mtime = entry.last_write_time(e2);
            if (e2 || now - mtime < minAge)
                continue;
            if (fs::remove(entry.path(), e2))
                ++removed;
        }
        if (ec)
            throw KvError(path + ": cannot list " + dir.string() + ": " + ec.message());
        return removed;
    });
}

} // namespace kvscope::snapfile
