/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Statistics: exact sums under contention, high-water marks, printing. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/tw_stats.h"
#include "tw_test.h"

enum { ST_MSGS, ST_BYTES, ST_DEPTH, ST_IDLE, ST_COUNT };

static const tw_stat_desc_t descs[ST_COUNT] = {
    [ST_MSGS] = {"msgs", TW_STAT_COUNTER},
    [ST_BYTES] = {"bytes", TW_STAT_COUNTER},
    [ST_DEPTH] = {"depth_hwm", TW_STAT_HWM},
    [ST_IDLE] = {"idle", TW_STAT_COUNTER},
};

#define NTHREADS 8

static tw_stats_t *stats;
static uint64_t iters;

static void *add_thread(void *p)
{
    uint64_t seed = (uintptr_t)p;

    for (uint64_t i = 0; i < iters; i++) {
        tw_stats_inc(stats, ST_MSGS);
        tw_stats_add(stats, ST_BYTES, 3);
        if ((i & 1023) == 0) {
            /* Thread t records values below (t + 1) * 1000. */
            tw_stats_hwm(stats, ST_DEPTH, twt_rand(&seed) % ((uintptr_t)p * 1000));
        }
    }
    tw_stats_hwm(stats, ST_DEPTH, (uintptr_t)p * 1000); /* exact maximum: 8000 */
    return NULL;
}

static uint64_t source(void *arg, unsigned id)
{
    (void)arg;
    return id == ST_MSGS ? 1000 : 0;
}

int main(void)
{
    pthread_t th[NTHREADS];
    char line[256];
    FILE *f;

    iters = twt_scaled(1000000, 10000);
    stats = tw_stats_create("grp0", descs, ST_COUNT);
    TWT_CHECK(stats != NULL);
    TWT_CHECK(strcmp(tw_stats_name(stats), "grp0") == 0);
    for (unsigned i = 0; i < ST_COUNT; i++) {
        TWT_EQ(tw_stats_read(stats, i), 0);
    }

    for (uintptr_t t = 0; t < NTHREADS; t++) {
        TWT_EQ(pthread_create(&th[t], NULL, add_thread, (void *)(t + 1)), 0);
    }
    for (int t = 0; t < NTHREADS; t++) {
        TWT_EQ(pthread_join(th[t], NULL), 0);
    }
    TWT_EQ(tw_stats_read(stats, ST_MSGS), NTHREADS * iters);
    TWT_EQ(tw_stats_read(stats, ST_BYTES), 3 * NTHREADS * iters);
    TWT_EQ(tw_stats_read(stats, ST_DEPTH), NTHREADS * 1000);
    TWT_EQ(tw_stats_read(stats, ST_IDLE), 0);

    /* A lower value never lowers the mark. */
    tw_stats_hwm(stats, ST_DEPTH, 5);
    TWT_EQ(tw_stats_read(stats, ST_DEPTH), NTHREADS * 1000);
    tw_stats_hwm(stats, ST_DEPTH, 1ull << 40);
    TWT_EQ(tw_stats_read(stats, ST_DEPTH), 1ull << 40);

    f = tmpfile();
    TWT_CHECK(f != NULL);
    tw_stats_print_group(stats, f);
    rewind(f);
    TWT_CHECK(fgets(line, sizeof(line), f) != NULL);
    char expect[256];
    snprintf(expect, sizeof(expect), "grp0: msgs=%llu bytes=%llu depth_hwm=%llu idle=0\n",
             (unsigned long long)(NTHREADS * iters), (unsigned long long)(3 * NTHREADS * iters),
             1ull << 40);
    TWT_CHECKF(strcmp(line, expect) == 0, "got '%s' expected '%s'", line, expect);
    fclose(f);
    tw_stats_destroy(stats);

    /* An empty group and a group of many counters. */
    stats = tw_stats_create("empty", descs, 0);
    TWT_CHECK(stats != NULL);
    tw_stats_destroy(stats);
    tw_stats_destroy(NULL);

    static tw_stat_desc_t many[100];
    for (int i = 0; i < 100; i++) {
        many[i] = (tw_stat_desc_t){"c", TW_STAT_COUNTER};
    }
    stats = tw_stats_create("many", many, 100);
    TWT_CHECK(stats != NULL);
    for (unsigned i = 0; i < 100; i++) {
        tw_stats_add(stats, i, i);
    }
    for (unsigned i = 0; i < 100; i++) {
        TWT_EQ(tw_stats_read(stats, i), i);
    }
    tw_stats_destroy(stats);

    /* Counters kept by their owner join the sum of the slots. */
    stats = tw_stats_create("src", descs, ST_COUNT);
    TWT_CHECK(stats != NULL);
    tw_stats_add(stats, ST_MSGS, 5);
    tw_stats_set_source(stats, source, NULL);
    TWT_EQ(tw_stats_read(stats, ST_MSGS), 5 + 1000);
    TWT_EQ(tw_stats_read(stats, ST_BYTES), 0);
    f = tmpfile();
    TWT_CHECK(f != NULL);
    tw_stats_print_group(stats, f);
    rewind(f);
    TWT_CHECK(fgets(line, sizeof(line), f) != NULL);
    TWT_CHECKF(strcmp(line, "src: msgs=1005 bytes=0 depth_hwm=0 idle=0\n") == 0, "got '%s'", line);
    fclose(f);
    tw_stats_destroy(stats);
    return 0;
}
