/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Monotonic clock (CLOCK_MONOTONIC through the vDSO: no syscall). */
#ifndef TW_TIME_H
#define TW_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tw_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** The kernel's last tick (CLOCK_MONOTONIC_COARSE: a few ns to read, one
 * to a few ms behind): for checks that count tens of milliseconds and run
 * on every pass of a spinning engine. Never earlier than a tw_time_ns
 * reading taken a tick before it. */
static inline uint64_t tw_time_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tw_time_us(void)
{
    return tw_time_ns() / 1000u;
}

/** A deadline @p timeout_ms after @p now (a tw_time_ns reading); -1
 * gives UINT64_MAX (never). */
static inline uint64_t tw_deadline_ms_after(uint64_t now, int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000ull;
}

/** A deadline @p timeout_ms from now; -1 gives UINT64_MAX (never). */
static inline uint64_t tw_deadline_ms(int timeout_ms)
{
    return tw_deadline_ms_after(tw_time_ns(), timeout_ms);
}

#endif /* TW_TIME_H */
