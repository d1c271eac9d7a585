/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Compiler helpers, thread-safety annotations and internal assertions. */
#ifndef TW_COMPILER_H
#define TW_COMPILER_H

#include <stdio.h>
#include <stdlib.h>

#include "tw_build_config.h"

#define TW_CACHELINE                       64
#define TW_LIKELY(x)                       __builtin_expect(!!(x), 1)
#define TW_UNLIKELY(x)                     __builtin_expect(!!(x), 0)
#define TW_ALIGNED(n)                      __attribute__((aligned(n)))
#define TW_UNUSED                          __attribute__((unused))
#define TW_PRINTF(f, a)                    __attribute__((format(printf, f, a)))
#define TW_ARRAY_SIZE(a)                   (sizeof(a) / sizeof((a)[0]))
#define TW_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define TW_MIN(a, b)                       ((a) < (b) ? (a) : (b))
#define TW_MAX(a, b)                       ((a) > (b) ? (a) : (b))
/* Thread-locals of the library: initial-exec, a plain %fs-relative load
 * instead of a __tls_get_addr call per access from the shared library
 * (they are few and small; the library is linked, not dlopen'ed late). */
#define TW_TLS __thread __attribute__((tls_model("initial-exec")))

/* Clang -Wthread-safety annotations (no-ops elsewhere). */
#if defined(__clang__)
#define TW_TSA(x) __attribute__((x))
#else
#define TW_TSA(x)
#endif
#define TW_CAPABILITY(x)    TW_TSA(capability(x))
#define TW_GUARDED_BY(x)    TW_TSA(guarded_by(x))
#define TW_PT_GUARDED_BY(x) TW_TSA(pt_guarded_by(x))
#define TW_ACQUIRE(...)     TW_TSA(acquire_capability(__VA_ARGS__))
#define TW_RELEASE(...)     TW_TSA(release_capability(__VA_ARGS__))
#define TW_TRY_ACQUIRE(...) TW_TSA(try_acquire_capability(__VA_ARGS__))
#define TW_REQUIRES(...)    TW_TSA(requires_capability(__VA_ARGS__))
#define TW_EXCLUDES(...)    TW_TSA(locks_excluded(__VA_ARGS__))
#define TW_NO_TSA           TW_TSA(no_thread_safety_analysis)

/* ThreadSanitizer presence and annotations. */
#if defined(__SANITIZE_THREAD__)
#define TW_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TW_TSAN 1
#endif
#endif
#ifndef TW_TSAN
#define TW_TSAN 0
#endif

#if TW_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define TW_TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#define TW_TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#else
#define TW_TSAN_ACQUIRE(addr) ((void)0)
#define TW_TSAN_RELEASE(addr) ((void)0)
#endif

/*
 * tw_assert: internal invariants only -- never user or wire input (return
 * an error for those). Checked in every build that is not Release.
 */
#if defined(NDEBUG)
#define tw_assert(cond) ((void)0)
#else
#define tw_assert(cond)                                                                      \
    do {                                                                                     \
        if (TW_UNLIKELY(!(cond))) {                                                          \
            fprintf(stderr, "threadwire: assertion '%s' failed at %s:%d\n", #cond, __FILE__, \
                    __LINE__);                                                               \
            abort();                                                                         \
        }                                                                                    \
    } while (0)
#endif

#endif /* TW_COMPILER_H */
