/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_time_fast_ns: CLOCK_MONOTONIC read through the TSC.
 *
 * clock_gettime through the vDSO costs ~17-25 ns here, rdtsc ~8. Where
 * the kernel itself keeps time with the TSC (clocksource "tsc": invariant
 * and synchronized across CPUs, or the kernel would have rejected it),
 * a reading is anchor_ns + (tsc - anchor_tsc) * ns_per_tick:
 *  - ns_per_tick (32.32 fixed point) is measured once, over the first
 *    >= 20 ms after the first call, against CLOCK_MONOTONIC; until then
 *    every call reads CLOCK_MONOTONIC;
 *  - each thread re-anchors (one clock_gettime) every 2^26 ticks (~20 ms
 *    at 3 GHz), so neither the measurement's error nor NTP slewing the
 *    monotonic clock (<= 500 ppm) moves a reading more than ~10 us from
 *    CLOCK_MONOTONIC, and readings of two threads differ by as little.
 * Elsewhere (another clocksource, another architecture) it is
 * tw_time_ns(). Good for timers of milliseconds, not for a benchmark.
 */
#include "core/tw_time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/tw_compiler.h"

#if defined(__x86_64__)
#include <x86intrin.h>

#define TW_TSC_REANCHOR   (1ull << 26) /* ticks between a thread's anchors */
#define TW_TSC_CALIBRATE  20000000ull  /* ns measured before the ratio is trusted */
#define TW_TSC_PAIR_TICKS 20000u       /* a clock reading between two TSC reads: ~7 us */

static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;
static bool tsc_usable;                       /* written in tsc_once */
static uint64_t cal_tsc, cal_ns;              /* written in tsc_once */
static _Atomic uint64_t tsc_mult;             /* ns per tick << 32; 0: not measured yet */
static TW_TLS uint64_t anchor_tsc, anchor_ns; /* this thread's anchor (0: none) */

/* A CLOCK_MONOTONIC reading and the TSC at the same moment: the TSC read
 * on both sides of it, close together (a thread preempted in between
 * would pair a reading with a later tick). False after a few tries. */
static bool tsc_pair(uint64_t *ns, uint64_t *tsc)
{
    for (int i = 0; i < 4; i++) {
        uint64_t t0 = __rdtsc();
        uint64_t n = tw_time_ns();
        uint64_t t1 = __rdtsc();
        if (t1 - t0 < TW_TSC_PAIR_TICKS) {
            *ns = n;
            *tsc = t0 + (t1 - t0) / 2;
            return true;
        }
    }
    return false;
}

static void tsc_init(void)
{
    char name[32] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");

    if (f != NULL) {
        if (fgets(name, sizeof(name), f) == NULL) {
            name[0] = '\0';
        }
        fclose(f);
    }
    tsc_usable = strcmp(name, "tsc\n") == 0 && tsc_pair(&cal_ns, &cal_tsc);
}

uint64_t tw_time_fast_ns(void)
{
    uint64_t mult = atomic_load_explicit(&tsc_mult, memory_order_relaxed);
    uint64_t t = __rdtsc(), ns;

    if (TW_LIKELY(mult != 0) && anchor_tsc != 0 && t - anchor_tsc < TW_TSC_REANCHOR) {
        return anchor_ns + (uint64_t)(((unsigned __int128)(t - anchor_tsc) * mult) >> 32);
    }
    pthread_once(&tsc_once, tsc_init);
    if (!tsc_usable || !tsc_pair(&ns, &t)) {
        anchor_tsc = 0; /* no anchor: the next call reads the clock again */
        return tw_time_ns();
    }
    if (mult == 0 && ns - cal_ns >= TW_TSC_CALIBRATE && t > cal_tsc) {
        /* Threads that get here together compute about the same ratio;
         * whichever store lands is good. */
        mult = (uint64_t)(((unsigned __int128)(ns - cal_ns) << 32) / (t - cal_tsc));
        atomic_store_explicit(&tsc_mult, mult, memory_order_relaxed);
    }
    anchor_tsc = t;
    anchor_ns = ns;
    return ns;
}

#else

uint64_t tw_time_fast_ns(void)
{
    return tw_time_ns();
}

#endif
