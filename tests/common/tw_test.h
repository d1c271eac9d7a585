/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Small helpers shared by the test programs. Tests use the public API as
 * users do (unit tests may include internal headers too). A failed check
 * prints where and why and exits 1; exit 77 means skipped.
 */
#ifndef TW_TEST_H
#define TW_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TWT_SKIP          77
#define TWT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define TWT_CHECK(cond)                                                     \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define TWT_CHECKF(cond, ...)                                               \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

/* TWT_CHECKF naming the rank of a multi-process test. Safe from any
 * thread: it flushes stdio and ends the process with _exit (no exit
 * handler runs while the library's threads still do). */
#define TWT_RANK_FAIL(rank, ...)                                               \
    do {                                                                       \
        fprintf(stderr, "FAIL rank %d (%s:%d): ", (rank), __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                          \
        twt_exit_failed();                                                     \
    } while (0)
#define TWT_RANK_CHECK(rank, cond, ...)                                                       \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FAIL rank %d (%s:%d): %s: ", (rank), __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                     \
            twt_exit_failed();                                                                \
        }                                                                                     \
    } while (0)
/* Ends the line, flushes stdout and stderr, and _exit(1)s. */
_Noreturn void twt_exit_failed(void);

/* a == b for integers, printing both on failure. */
#define TWT_EQ(a, b)                                                                             \
    do {                                                                                         \
        long long twt_a_ = (long long)(a), twt_b_ = (long long)(b);                              \
        if (twt_a_ != twt_b_) {                                                                  \
            fprintf(stderr, "FAIL %s:%d: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, #a, #b, \
                    twt_a_, twt_b_);                                                             \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* Divisor for message counts (TWTEST_SCALE: 4 in sanitizer builds). */
unsigned twt_scale(void);
/* n / twt_scale(), at least @p min. */
uint64_t twt_scaled(uint64_t n, uint64_t min);

/* splitmix64: deterministic per-test random numbers. */
static inline uint64_t twt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Fill @p buf with bytes derived from @p seed, and return the test's own
 * checksum of them (FNV-1a 64, independent of the library's CRC32C). */
uint64_t twt_fill(void *buf, size_t len, uint64_t seed);
uint64_t twt_checksum(const void *buf, size_t len);
/* True when @p buf holds exactly what twt_fill(buf, len, seed) wrote. */
bool twt_verify(const void *buf, size_t len, uint64_t seed);

/* Threads and fds of this process, from /proc/self. */
int twt_thread_count(void);
/* twt_thread_count once it equals @p want (or after a second). */
int twt_thread_count_settled(int want);
int twt_fd_count(void);

/* Seconds of a monotonic clock. */
double twt_now(void);

/* ---- programs made of cases, one ctest entry each ----------------------
 * A test program that holds several independent cases lists them in a
 * table and hands main to twt_cases_main:
 *   prog --list     prints the case names, one a line
 *   prog NAME...    runs the named cases, in that order
 *   prog            runs every case (by hand; ctest runs them one by one)
 * A case fails through the TWT_CHECK macros (exit 1) or skips with exit 77.
 * CMake registers each name with tw_add_case_tests (tests/CMakeLists.txt),
 * which also adds a check that its CASES list equals the program's --list,
 * so a new case cannot be left out of ctest. Names: [a-z0-9_]. */
typedef struct twt_case {
    const char *name;
    void (*fn)(void);
} twt_case_t;

int twt_cases_main(int argc, char **argv, const twt_case_t *cases, size_t n);

#endif /* TW_TEST_H */
