#include "runner.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace kvscope::hostile {

namespace {

std::vector<std::string> mergedEnvironment(const std::vector<std::string>& extra) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        const std::string entry(*e);
        const std::string key = entry.substr(0, entry.find('='));
        bool replaced = false;
        for (const auto& x : extra)
            replaced |= x.substr(0, x.find('=')) == key;
        if (!replaced)
            env.push_back(entry);
    }
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
}

std::vector<char*> pointers(std::vector<std::string>& v) {
    std::vector<char*> p;
    for (auto& s : v)
        p.push_back(s.data());
    p.push_back(nullptr);
    return p;
}

enum class Drained { Data, Again, Eof };

// Reads what is available on the (non-blocking) fd into head (up to cap) and counts it.
Drained drain(int fd, std::string& head, std::uint64_t& count, std::size_t cap) {
    char buf[65536];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
        count += static_cast<std::uint64_t>(n);
        if (head.size() < cap)
            head.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), cap - head.size()));
        return Drained::Data;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return Drained::Again;
    return Drained::Eof;
}

} // namespace

RunResult runChild(const std::vector<std::string>& argvIn, const std::string& cwd,
                   const RunLimits& limits, const std::vector<std::string>& envExtra) {
    RunResult r;
    // Everything the child needs is prepared before fork: after it, only async-signal-safe
    // calls (this process has other threads).
    std::vector<std::string> argv = argvIn;
    std::vector<std::string> env = mergedEnvironment(envExtra);
    auto argvp = pointers(argv);
    auto envp = pointers(env);
    const std::string dir = cwd;
    rlimit as{limits.addressSpaceBytes, limits.addressSpaceBytes};
    rlimit core{0, 0};

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        r.stderrHead = std::string("pipe: ") + std::strerror(errno);
        return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0) {
        r.stderrHead = std::string("fork: ") + std::strerror(errno);
        for (int fd : {out[0], out[1], err[0], err[1]})
            close(fd);
        return r;
    }
    if (pid == 0) {
        setpgid(0, 0);
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        if (chdir(dir.c_str()) != 0)
            _exit(127);
        setrlimit(RLIMIT_AS, &as);
        setrlimit(RLIMIT_CORE, &core);
        execve(argvp[0], argvp.data(), envp.data());
        const char msg[] = "hostile: execve failed\n"; // runChild reports it as not started
        (void)!write(2, msg, sizeof msg - 1);
        _exit(127);
    }
    setpgid(pid, pid); // also here: no window in which a kill of the group misses the child
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    r.started = true;

    const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(limits.timeoutSeconds));
    bool outOpen = true, errOpen = true;
    int status = 0;
    rusage ru{};
    bool reaped = false;
    auto killGroup = [&] {
        if (!r.timedOut) {
            r.timedOut = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
    };
    while (!reaped) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline)
            killGroup();
        if (outOpen || errOpen) {
            pollfd fds[2];
            int n = 0;
            if (outOpen)
                fds[n++] = {out[0], POLLIN, 0};
            if (errOpen)
                fds[n++] = {err[0], POLLIN, 0};
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
            const int wait =
                r.timedOut ? 100 : static_cast<int>(std::clamp<long long>(left.count(), 1, 100));
            const int rc = poll(fds, static_cast<nfds_t>(n), wait);
            if (rc > 0) {
                for (int i = 0; i < n; ++i) {
                    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                    if (fds[i].fd == out[0])
                        outOpen = drain(out[0], r.stdoutHead, r.stdoutBytes, limits.captureBytes) !=
                                  Drained::Eof;
                    else
                        errOpen = drain(err[0], r.stderrHead, r.stderrBytes, limits.captureBytes) !=
                                  Drained::Eof;
                }
            }
        } else {
            usleep(5000);
        }
        const pid_t w = wait4(pid, &status, WNOHANG, &ru);
        if (w == pid) {
            reaped = true;
            // A grandchild (none expected) must not outlive the case or hold the pipes open.
            kill(-pid, SIGKILL);
            // Whatever is still buffered in the pipes belongs to the result.
            while (outOpen && drain(out[0], r.stdoutHead, r.stdoutBytes, limits.captureBytes) ==
                                  Drained::Data) {
            }
            while (errOpen && drain(err[0], r.stderrHead, r.stderrBytes, limits.captureBytes) ==
                                  Drained::Data) {
            }
        }
    }
    close(out[0]);
    close(err[0]);
    r.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.maxRssKb = static_cast<std::uint64_t>(ru.ru_maxrss);
    r.cpuSeconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    if (WIFEXITED(status))
        r.exitCode = WEXITSTATUS(status);
    if (r.exitCode == 127 && r.stderrHead.rfind("hostile: execve failed", 0) == 0)
        r.started = false; // the harness's failure (an argument too long?), not the program's
    else if (WIFSIGNALED(status))
        r.signal = WTERMSIG(status);
    return r;
}

} // namespace kvscope::hostile
