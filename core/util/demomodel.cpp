#include "util/demomodel.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace kvscope {

namespace fs = std::filesystem;

namespace {

bool isModelFolder(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p / "config.json", ec);
}

} // namespace

std::optional<std::string> findDemoModel() {
    if (const char* env = std::getenv("KVSCOPE_DEMO_MODEL"); env && *env) {
        if (isModelFolder(env))
            return std::string(env);
        return std::nullopt;
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path installed = exe.parent_path() / ".." / "share" / "kvscope" / "demo-model";
        if (isModelFolder(installed)) {
            const fs::path clean = fs::weakly_canonical(installed, ec);
            return ec ? installed.string() : clean.string();
        }
    }
#ifdef KVSCOPE_SOURCE_DIR
    const fs::path source = fs::path(KVSCOPE_SOURCE_DIR) / "resources" / "demo-model";
    if (isModelFolder(source))
        return source.string();
#endif
    // A development build inside the source tree (<source>/build-x/app/cli/kvscope-cli):
    // the nearest ancestor of the executable with resources/demo-model.
    if (!ec)
        for (fs::path dir = exe.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
            const fs::path candidate = dir / "resources" / "demo-model";
            if (isModelFolder(candidate))
                return candidate.string();
        }
    return std::nullopt;
}

} // namespace kvscope
