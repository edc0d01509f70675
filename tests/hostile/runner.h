// Runs one command as a child process under the limits of the hostile run: an address-space
// limit (RLIMIT_AS), a wall-clock kill of its whole process group, no core files, stdin from
// /dev/null. Captures the head of stdout and stderr (the rest is counted and dropped, so a
// command that prints hundreds of MB costs no memory here) and the child's peak RSS from
// wait4's rusage.
//
// Thread-safety: runChild may be called from several threads at once (pipes are close-on-exec,
// so one child never holds another's pipe open).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::hostile {

struct RunLimits {
    double timeoutSeconds = 20;
    std::uint64_t addressSpaceBytes = 6ull << 30;
    std::size_t captureBytes = 64 * 1024; // kept of each of stdout and stderr
};

struct RunResult {
    bool started = false;  // false: fork/exec failed (message in stderrText)
    int exitCode = -1;     // when it exited normally
    int signal = 0;        // the signal that ended it (SIGKILL after a timeout included)
    bool timedOut = false; // killed at the wall-clock limit
    double wallSeconds = 0;
    double cpuSeconds = 0; // user + system time of the child
    std::uint64_t maxRssKb = 0;
    std::string stdoutHead, stderrHead;
    std::uint64_t stdoutBytes = 0, stderrBytes = 0;
};

// argv[0] is the program path. `env` entries ("K=V") are added to (or replace those of) the
// current environment.
RunResult runChild(const std::vector<std::string>& argv, const std::string& cwd,
                   const RunLimits& limits, const std::vector<std::string>& env = {});

// A fork server (zygote.cpp: kvscope-cli-zygote) that runs kvscope-cli's program in a forked
// child per case, in place of an exec of kvscope-cli, whose start (the dynamic loader and
// libtorch's static initializers, about a second) is nearly all of a small case's time. The
// child is supervised as runChild's is (pipes, the wall-clock kill of its process group, the
// address-space limit, its exit status, peak RSS and CPU time from the zygote's wait4). One per
// worker thread: run() takes one case at a time. A zygote that died is started again.
class Zygote {
public:
    // `env` entries ("K=V") are added to its environment (and so to every case's).
    Zygote(std::string program, std::vector<std::string> env);
    ~Zygote();
    Zygote(const Zygote&) = delete;
    Zygote& operator=(const Zygote&) = delete;
    // As runChild(argv, ...), argv[0] naming the program in its messages.
    RunResult run(const std::vector<std::string>& argv, const std::string& cwd,
                  const RunLimits& limits, const std::vector<std::string>& env = {});

private:
    bool start();
    void stop();
    bool tryRun(const std::vector<std::string>& argv, const std::string& cwd,
                const RunLimits& limits, const std::vector<std::string>& env, RunResult& r);

    std::string m_program;
    std::vector<std::string> m_env;
    int m_pid = -1;
    int m_sock = -1;
};

} // namespace kvscope::hostile
