#include "runner.h"

#include "zygoteproto.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
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

// The end of a child as its supervisor learns it: wait status and rusage figures.
struct Ended {
    int status = 0;
    std::uint64_t maxRssKb = 0;
    double cpuSeconds = 0;
};

// Watches child `pid` (its own process group) until `reap` reports its end: drains its stdout
// and stderr pipes into `r`, kills the group at the wall-clock limit. `reap(block)` returns
// true once the child has ended (filling `ended`); it is asked without blocking while the pipes
// are open.
template <class Reap>
void supervise(pid_t pid, int outFd, int errFd, const RunLimits& limits,
               std::chrono::steady_clock::time_point t0, RunResult& r, Reap reap) {
    fcntl(outFd, F_SETFL, O_NONBLOCK);
    fcntl(errFd, F_SETFL, O_NONBLOCK);
    const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(limits.timeoutSeconds));
    bool outOpen = true, errOpen = true;
    Ended ended;
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
                fds[n++] = {outFd, POLLIN, 0};
            if (errOpen)
                fds[n++] = {errFd, POLLIN, 0};
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
            const int wait =
                r.timedOut ? 100 : static_cast<int>(std::clamp<long long>(left.count(), 1, 100));
            const int rc = poll(fds, static_cast<nfds_t>(n), wait);
            if (rc > 0) {
                for (int i = 0; i < n; ++i) {
                    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                    if (fds[i].fd == outFd)
                        outOpen = drain(outFd, r.stdoutHead, r.stdoutBytes, limits.captureBytes) !=
                                  Drained::Eof;
                    else
                        errOpen = drain(errFd, r.stderrHead, r.stderrBytes, limits.captureBytes) !=
                                  Drained::Eof;
                }
            }
        } else {
            usleep(5000);
        }
        if (reap(ended)) {
            reaped = true;
            // A grandchild (none expected) must not outlive the case or hold the pipes open.
            kill(-pid, SIGKILL);
            // Whatever is still buffered in the pipes belongs to the result.
            while (outOpen && drain(outFd, r.stdoutHead, r.stdoutBytes, limits.captureBytes) ==
                                  Drained::Data) {
            }
            while (errOpen && drain(errFd, r.stderrHead, r.stderrBytes, limits.captureBytes) ==
                                  Drained::Data) {
            }
        }
    }
    close(outFd);
    close(errFd);
    r.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.maxRssKb = ended.maxRssKb;
    r.cpuSeconds = ended.cpuSeconds;
    if (WIFEXITED(ended.status))
        r.exitCode = WEXITSTATUS(ended.status);
    if (WIFSIGNALED(ended.status))
        r.signal = WTERMSIG(ended.status);
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
    r.started = true;
    supervise(pid, out[0], err[0], limits, t0, r, [pid](Ended& e) {
        rusage ru{};
        if (wait4(pid, &e.status, WNOHANG, &ru) != pid)
            return false;
        e.maxRssKb = static_cast<std::uint64_t>(ru.ru_maxrss);
        e.cpuSeconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        return true;
    });
    if (r.exitCode == 127 && r.stderrHead.rfind("hostile: execve failed", 0) == 0) {
        r.started = false; // the harness's failure (an argument too long?), not the program's
        r.signal = 0;
    }
    return r;
}

// ---- the fork server ----

Zygote::Zygote(std::string program, std::vector<std::string> env)
    : m_program(std::move(program)), m_env(std::move(env)) {
    start();
}

Zygote::~Zygote() {
    stop();
}

bool Zygote::start() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return false;
    std::vector<std::string> argv = {m_program};
    auto argvp = pointers(argv);
    // Its environment from the start: libraries read some of it as they load (OpenMP's
    // OMP_NUM_THREADS), before any case's entries are set.
    std::vector<std::string> env = mergedEnvironment(m_env);
    auto envp = pointers(env);
    const pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return false;
    }
    if (pid == 0) {
        dup2(sv[1], kZygoteSocket); // clears close-on-exec on the zygote's end
        const int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execve(argvp[0], argvp.data(), envp.data());
        _exit(127);
    }
    close(sv[1]);
    m_pid = pid;
    m_sock = sv[0];
    return true;
}

void Zygote::stop() {
    if (m_sock >= 0)
        close(m_sock); // the zygote ends at the end of its stream
    if (m_pid > 0) {
        int status = 0;
        waitpid(m_pid, &status, 0);
    }
    m_sock = -1;
    m_pid = -1;
}

RunResult Zygote::run(const std::vector<std::string>& argv, const std::string& cwd,
                      const RunLimits& limits, const std::vector<std::string>& env) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (m_sock < 0 && !start())
            break;
        RunResult r;
        if (tryRun(argv, cwd, limits, env, r))
            return r;
        stop(); // the zygote is gone or out of step: a fresh one for the retry
    }
    RunResult r;
    r.stderrHead = "hostile: the fork server " + m_program + " could not run the case";
    return r;
}

bool Zygote::tryRun(const std::vector<std::string>& argv, const std::string& cwd,
                    const RunLimits& limits, const std::vector<std::string>& env, RunResult& r) {
    const nlohmann::json request = {
        {"argv", argv}, {"cwd", cwd}, {"env", env}, {"address_space", limits.addressSpaceBytes}};
    const std::string text = request.dump();
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return false;
    if (pipe2(err, O_CLOEXEC) != 0) {
        close(out[0]);
        close(out[1]);
        return false;
    }
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int fds[3] = {devnull, out[1], err[1]};
    const std::uint64_t length = text.size();
    const auto t0 = std::chrono::steady_clock::now();
    const bool sent = devnull >= 0 && sendWithFds(m_sock, &length, sizeof length, fds, 3) &&
                      writeAll(m_sock, text.data(), text.size());
    for (int fd : {devnull, out[1], err[1]})
        if (fd >= 0)
            close(fd);
    std::int64_t pid = -1;
    if (!sent || !readAll(m_sock, &pid, sizeof pid) || pid <= 0) {
        close(out[0]);
        close(err[0]);
        return false;
    }
    r.started = true;
    bool lost = false;
    supervise(pid_t(pid), out[0], err[0], limits, t0, r, [&](Ended& e) {
        pollfd p{m_sock, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0)
            return false;
        ZygoteStatus st{};
        if (!readAll(m_sock, &st, sizeof st)) {
            lost = true; // the zygote died: the child's end is unknown
            e.status = 0;
            return true;
        }
        e.status = st.status;
        e.maxRssKb = static_cast<std::uint64_t>(st.maxRssKb);
        e.cpuSeconds = st.cpuSeconds;
        return true;
    });
    return !lost;
}

} // namespace kvscope::hostile
