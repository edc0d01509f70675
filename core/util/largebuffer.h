// LargeVector: a std::vector for buffers of many megabytes (an attention map of 4,096 x 4,096
// probabilities is 64 MB) that asks the kernel for transparent huge pages.
//
// Why: a fresh 64 MB buffer on 4 KiB pages costs 16,384 page faults the first time it is
// written, about 45 ms on a 2-core machine, and a view rebuilt per (layer, head) allocates a
// fresh one every time (glibc maps blocks this large straight from the kernel and unmaps them
// on free). On 2 MiB pages the same buffer is 32 faults. Where the kernel does not do huge pages
// (madvise fails, or transparent huge pages are "never") the buffer is an ordinary one.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kvscope {

template <class T> struct LargePageAllocator {
    using value_type = T;
    static constexpr std::size_t kHugePage = std::size_t(2) << 20;

    LargePageAllocator() noexcept = default;
    template <class U> LargePageAllocator(const LargePageAllocator<U>&) noexcept {}

    static bool large(std::size_t n) { return n * sizeof(T) >= kHugePage; }

    T* allocate(std::size_t n) {
        if (n > std::size_t(-1) / sizeof(T))
            throw std::bad_array_new_length();
        if (!large(n))
            return static_cast<T*>(::operator new(n * sizeof(T)));
        const std::size_t bytes = (n * sizeof(T) + kHugePage - 1) / kHugePage * kHugePage;
        void* p = std::aligned_alloc(kHugePage, bytes);
        if (!p)
            throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        (void)madvise(p, bytes, MADV_HUGEPAGE); // advice only: ordinary pages when refused
#endif
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (large(n))
            std::free(p);
        else
            ::operator delete(p);
    }
    template <class U> bool operator==(const LargePageAllocator<U>&) const noexcept {
        return true;
    }
};

template <class T> using LargeVector = std::vector<T, LargePageAllocator<T>>;

} // namespace kvscope
