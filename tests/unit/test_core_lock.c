/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_lock.h: mutexes and rwlocks lock and unlock, trylock fails while
 * another thread holds the lock; in builds with assertions the witness
 * lets locks be taken in rank order (on each thread separately), reports
 * the reverse order and a lock taken twice with both names, and knows
 * which locks the calling thread holds.
 */
#include <pthread.h>
#include <string.h>

#include "core/tw_lock.h"
#include "tw_test.h"

static char taking[64], holding[64];
static int violations;

static void on_violation(const char *t, const char *h)
{
    snprintf(taking, sizeof(taking), "%s", t);
    snprintf(holding, sizeof(holding), "%s", h);
    violations++;
}

static tw_mutex_t outer, inner, spare;

static void *try_from_another_thread(void *arg)
{
    bool got = tw_mutex_trylock(&outer);
    if (got) {
        tw_mutex_unlock(&outer);
    }
    *(bool *)arg = got;
    /* The witness is per thread: what main holds (a lock of spare's rank)
     * does not count here. */
    tw_mutex_lock(&spare);
    tw_mutex_unlock(&spare);
    return NULL;
}

int main(void)
{
    tw_rwlock_t rw;
    pthread_t t;
    bool got = true;

    TWT_EQ(tw_mutex_init(&outer, TW_LOCK_RANK_REL_PEER, "outer"), TW_OK);
    TWT_EQ(tw_mutex_init(&inner, TW_LOCK_RANK_LOSSY, "inner"), TW_OK);
    TWT_EQ(tw_mutex_init(&spare, TW_LOCK_RANK_REL_PEER, "spare"), TW_OK);
    TWT_EQ(tw_rwlock_init(&rw, TW_LOCK_RANK_RMA_REG, "registry"), TW_OK);
    tw_lock_violation_hook = on_violation;

    /* Rank order: registry, outer, inner. */
    tw_rwlock_rdlock(&rw);
    tw_mutex_lock(&outer);
    tw_mutex_lock(&inner);
    tw_mutex_assert_held(&outer);
    tw_mutex_assert_held(&inner);
    TWT_EQ(pthread_create(&t, NULL, try_from_another_thread, &got), 0);
    TWT_EQ(pthread_join(t, NULL), 0);
    TWT_CHECK(!got); /* held here */
    tw_mutex_unlock(&inner);
    tw_mutex_unlock(&outer);
    tw_rwlock_unlock(&rw);
    TWT_EQ(violations, 0);
#if TW_LOCK_CHECKED
    TWT_CHECK(!tw_lock_witness_holds(&outer) && !tw_lock_witness_holds(&inner));
    /* The reverse order is reported with both names -- the first time it
     * is taken (a pair of its own, never taken the right way round: a
     * cycle would be a real lock-order inversion, ThreadSanitizer's too). */
    tw_mutex_t hi, lo;
    TWT_EQ(tw_mutex_init(&hi, TW_LOCK_RANK_LOSSY, "hi"), TW_OK);
    TWT_EQ(tw_mutex_init(&lo, TW_LOCK_RANK_REL_PEER, "lo"), TW_OK);
    tw_mutex_lock(&hi);
    tw_mutex_lock(&lo);
    TWT_EQ(violations, 1);
    TWT_CHECK(strcmp(taking, "lo") == 0 && strcmp(holding, "hi") == 0);
    tw_mutex_unlock(&lo);
    tw_mutex_unlock(&hi);
    tw_mutex_destroy(&lo);
    tw_mutex_destroy(&hi);
    /* So is a lock of one rank under another of that rank. */
    tw_mutex_t twin;
    TWT_EQ(tw_mutex_init(&twin, TW_LOCK_RANK_REL_PEER, "twin"), TW_OK);
    tw_mutex_lock(&outer);
    tw_mutex_lock(&twin);
    TWT_EQ(violations, 2);
    TWT_CHECK(strcmp(taking, "twin") == 0 && strcmp(holding, "outer") == 0);
    tw_mutex_unlock(&twin);
    tw_mutex_unlock(&outer);
    tw_mutex_destroy(&twin);
    /* Unlocked out of order: the witness follows. */
    tw_mutex_lock(&outer);
    tw_mutex_lock(&inner);
    tw_mutex_unlock(&outer);
    TWT_CHECK(tw_lock_witness_holds(&inner) && !tw_lock_witness_holds(&outer));
    tw_mutex_unlock(&inner);
    TWT_EQ(violations, 2);
    printf("locks: rank order kept, 2 violations reported as planned\n");
#else
    printf("locks: lock and unlock (rank checks are compiled out of Release builds)\n");
#endif
    tw_rwlock_destroy(&rw);
    tw_mutex_destroy(&spare);
    tw_mutex_destroy(&inner);
    tw_mutex_destroy(&outer);
    return 0;
}
