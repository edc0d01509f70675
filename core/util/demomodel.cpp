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
    // The source tree this file was compiled from (absolute in CMake builds):
    // <source>/core/util/demomodel.cpp -> <source>/resources/demo-model.
    const fs::path source =
        fs::path(__FILE__).parent_path().parent_path().parent_path() / "resources" / "demo-model";
    if (source.is_absolute() && isModelFolder(source))
        return source.string();
    return std::nullopt;
}

} // namespace kvscope
