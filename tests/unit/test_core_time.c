/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* tw_time_fast_ns against CLOCK_MONOTONIC, from several threads, across
 * its calibration (the first 20 ms) and several re-anchorings: every
 * reading lies between the monotonic readings around it, give or take
 * the documented ~10 us (allowed: 200 us, for a preempted thread). */
#include <pthread.h>

#include "core/tw_time.h"
#include "tw_test.h"

#define NTHREADS 3
#define RUN_NS   120000000ull /* 120 ms: calibration, then ~5 anchors per thread */
#define SLACK_NS 200000ull

static void *reader(void *arg)
{
    uint64_t *worst = arg;
    uint64_t start = tw_time_ns(), n = 0;

    for (;;) {
        uint64_t before = tw_time_ns();
        uint64_t fast = tw_time_fast_ns();
        uint64_t after = tw_time_ns();

        TWT_CHECKF(fast + SLACK_NS >= before && fast <= after + SLACK_NS,
                   "fast reading %llu outside [%llu, %llu] by more than %llu ns",
                   (unsigned long long)fast, (unsigned long long)before, (unsigned long long)after,
                   (unsigned long long)SLACK_NS);
        uint64_t off = fast > after ? fast - after : (before > fast ? before - fast : 0);
        if (off > *worst) {
            *worst = off;
        }
        n++;
        if (after - start > RUN_NS) {
            break;
        }
    }
    TWT_CHECK(n > 1000);
    return NULL;
}

int main(void)
{
    pthread_t th[NTHREADS];
    uint64_t worst[NTHREADS] = {0};

    for (int t = 0; t < NTHREADS; t++) {
        TWT_EQ(pthread_create(&th[t], NULL, reader, &worst[t]), 0);
    }
    for (int t = 0; t < NTHREADS; t++) {
        TWT_EQ(pthread_join(th[t], NULL), 0);
        printf("thread %d: worst distance from CLOCK_MONOTONIC %llu ns\n", t,
               (unsigned long long)worst[t]);
    }
    return 0;
}
