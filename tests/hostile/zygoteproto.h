// The wire between the hostile runner (runner.cpp, Zygote) and its fork server (zygote.cpp):
// plain reads and writes on a local stream socket, descriptors passed with SCM_RIGHTS.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

namespace kvscope::hostile {

// The zygote's end of the socket, as the runner places it.
constexpr int kZygoteSocket = 3;

// What the zygote reports when a case's child has ended.
struct ZygoteStatus {
    int status = 0; // as wait4 gives it
    long maxRssKb = 0;
    double cpuSeconds = 0;
};

inline bool writeAll(int fd, const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= std::size_t(w);
    }
    return true;
}

inline bool readAll(int fd, void* data, std::size_t n) {
    auto* p = static_cast<char*>(data);
    while (n > 0) {
        const ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= std::size_t(r);
    }
    return true;
}

// Sends `n` bytes (a small header) with `count` descriptors attached.
inline bool sendWithFds(int sock, const void* data, std::size_t n, const int* fds, int count) {
    iovec iov{const_cast<void*>(data), n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * std::size_t(count));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * std::size_t(count));
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * std::size_t(count));
    ssize_t w;
    do
        w = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w == ssize_t(n);
}

// Receives sendWithFds's header and its `count` descriptors; false at end of stream.
inline bool receiveWithFds(int sock, void* data, std::size_t n, int* fds, int count) {
    iovec iov{data, n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * std::size_t(count));
    ssize_t r;
    do
        r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (r < 0 && errno == EINTR);
    if (r != ssize_t(n))
        return false;
    const cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof(int) * std::size_t(count)))
        return false;
    std::memcpy(fds, CMSG_DATA(c), sizeof(int) * std::size_t(count));
    return true;
}

} // namespace kvscope::hostile
