// kvscope-cli-zygote: the hostile corpus's fork server. Starting kvscope-cli costs about a second
// on a 2-core machine, nearly all of it the dynamic loader and the static initializers of
// Debian's libtorch and the ~290 libraries it pulls in (OpenCV, FFmpeg, GDAL...); the corpus runs
// ~1,700 cases. This program loads the same libraries once and then, for each case, forks a
// child that runs the CLI's own program (kvscope::cli::run, app/cli/cli.cpp) on the case's
// command line: the same code on the same bytes as an exec'd kvscope-cli, without the start.
//
// Protocol (runner.h, Zygote), over the socket on fd 3, one case at a time:
//   request: a uint64 length, sent with three descriptors (SCM_RIGHTS: the child's stdin, stdout
//            and stderr), then that many bytes of JSON {"argv", "cwd", "env" ["K=V"...],
//            "address_space"};
//   replies: int64 pid once the child is forked, then ZygoteStatus when it has ended (its wait
//            status and rusage).
// The child puts itself in its own process group (the runner kills the group at its time
// limit), takes the descriptors, the folder, the address-space limit, no core files and the
// environment entries, and ends with run()'s code through exitNow(), as main() does.
#include "clicommon.h"
#include "zygoteproto.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace kvscope::hostile;

namespace {

[[noreturn]] void runCase(const nlohmann::json& request, const int fds[3]) {
    setpgid(0, 0);
    for (int i = 0; i < 3; ++i) {
        dup2(fds[i], i);
        close(fds[i]);
    }
    close(kZygoteSocket);
    const std::string cwd = request.value("cwd", std::string());
    if (!cwd.empty() && chdir(cwd.c_str()) != 0)
        _exit(127);
    const rlimit as{request.value("address_space", RLIM_INFINITY),
                    request.value("address_space", RLIM_INFINITY)};
    const rlimit core{0, 0};
    setrlimit(RLIMIT_AS, &as);
    setrlimit(RLIMIT_CORE, &core);
    for (const auto& e : request.value("env", nlohmann::json::array())) {
        const std::string kv = e.get<std::string>();
        const auto eq = kv.find('=');
        if (eq != std::string::npos)
            setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    std::vector<std::string> args = request.at("argv").get<std::vector<std::string>>();
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    kvscope::cli::exitNow(kvscope::cli::run(int(args.size()), argv.data()));
}

} // namespace

int main() {
    for (;;) {
        std::uint64_t length = 0;
        int fds[3] = {-1, -1, -1};
        if (!receiveWithFds(kZygoteSocket, &length, sizeof length, fds, 3))
            return 0; // the runner has gone
        std::string text(length, '\0');
        if (!readAll(kZygoteSocket, text.data(), text.size()))
            return 1;
        const nlohmann::json request = nlohmann::json::parse(text, nullptr, false);
        const pid_t pid = request.is_object() ? fork() : -1;
        if (pid == 0)
            runCase(request, fds);
        if (pid > 0)
            setpgid(pid, pid); // no window in which a kill of the group misses the child
        for (int fd : fds)
            close(fd);
        const std::int64_t sent = pid;
        if (!writeAll(kZygoteSocket, &sent, sizeof sent))
            return 1;
        if (pid < 0)
            continue;
        ZygoteStatus st{};
        rusage ru{};
        while (wait4(pid, &st.status, 0, &ru) < 0 && errno == EINTR) {
        }
        st.maxRssKb = ru.ru_maxrss;
        st.cpuSeconds = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                        double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        if (!writeAll(kZygoteSocket, &st, sizeof st))
            return 1;
    }
}
