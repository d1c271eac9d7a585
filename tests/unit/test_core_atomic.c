/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Thread index (distinct, reused), tid, spinlock, back-off. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "tw_test.h"

#define NTHREADS 64

typedef struct index_arg {
    pthread_barrier_t *barrier;
    unsigned index;
    int tid;
    int tid_sys;
} index_arg_t;

static void *index_thread(void *p)
{
    index_arg_t *a = p;

    a->index = tw_thread_index();
    TWT_EQ(tw_thread_index(), a->index); /* stable */
    a->tid = tw_gettid();
    a->tid_sys = (int)syscall(SYS_gettid);
    /* Stay alive until every thread holds its index. */
    pthread_barrier_wait(a->barrier);
    return NULL;
}

/* Starts NTHREADS threads that are all alive at once; returns the max index. */
static unsigned index_round(void)
{
    pthread_t th[NTHREADS];
    index_arg_t args[NTHREADS];
    pthread_barrier_t barrier;
    unsigned max = 0;

    TWT_EQ(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (index_arg_t){.barrier = &barrier};
        TWT_EQ(pthread_create(&th[i], NULL, index_thread, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        TWT_EQ(pthread_join(th[i], NULL), 0);
    }
    pthread_barrier_destroy(&barrier);

    for (int i = 0; i < NTHREADS; i++) {
        TWT_EQ(args[i].tid, args[i].tid_sys);
        TWT_CHECK(args[i].index != tw_thread_index()); /* main's is live too */
        for (int j = i + 1; j < NTHREADS; j++) {
            TWT_CHECKF(args[i].index != args[j].index, "threads %d and %d share index %u", i, j,
                       args[i].index);
            TWT_CHECK(args[i].tid != args[j].tid);
        }
        max = TW_MAX(max, args[i].index);
    }
    return max;
}

static void test_thread_index(void)
{
    unsigned main_index = tw_thread_index();
    unsigned first, max;

    TWT_EQ(tw_gettid(), (int)syscall(SYS_gettid));
    TWT_EQ(tw_gettid(), getpid()); /* main thread */
    first = index_round();
    /* Dense: 64 threads plus main fit in the first 65 indexes. */
    TWT_CHECKF(first < NTHREADS + 1, "max index %u", first);
    /* Reused: later rounds take the indexes back instead of growing. */
    for (int r = 0; r < 10; r++) {
        max = index_round();
        TWT_CHECKF(max < 2 * NTHREADS, "round %d max index %u", r, max);
        TWT_CHECKF(max <= first, "round %d max index %u > first round's %u", r, max, first);
    }
    TWT_EQ(tw_thread_index(), main_index);
}

/* ---- spinlock ---------------------------------------------------------- */

#define LOCK_THREADS 4
#define LOCK_ITERS   100000

static tw_spinlock_t lock;
static unsigned long plain_counter TW_GUARDED_BY(lock);

/* Trylock on a lock that is held must fail (the analysis cannot know). */
static bool trylock_fails(tw_spinlock_t *l) TW_NO_TSA
{
    if (tw_spinlock_trylock(l)) {
        tw_spinlock_unlock(l);
        return false;
    }
    return true;
}

static void *lock_thread(void *p)
{
    (void)p;
    for (int i = 0; i < LOCK_ITERS; i++) {
        tw_spinlock_lock(&lock);
        plain_counter++;
        tw_spinlock_unlock(&lock);
    }
    return NULL;
}

static void test_spinlock(void)
{
    pthread_t th[LOCK_THREADS];

    tw_spinlock_init(&lock);
    TWT_CHECK(tw_spinlock_trylock(&lock));
    TWT_CHECK(trylock_fails(&lock));
    tw_spinlock_unlock(&lock);

    for (int i = 0; i < LOCK_THREADS; i++) {
        TWT_EQ(pthread_create(&th[i], NULL, lock_thread, NULL), 0);
    }
    for (int i = 0; i < LOCK_THREADS; i++) {
        TWT_EQ(pthread_join(th[i], NULL), 0);
    }
    tw_spinlock_lock(&lock);
    TWT_EQ(plain_counter, (unsigned long)LOCK_THREADS * LOCK_ITERS);
    tw_spinlock_unlock(&lock);
}

static void test_backoff(void)
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    double t0 = twt_now();

    for (int i = 0; i < 1100; i++) {
        tw_backoff_wait(&b);
    }
    TWT_EQ(b.count, 1100);
    /* The last 100 steps sleep 50 us each. */
    TWT_CHECKF(twt_now() - t0 >= 100 * 50e-6 * 0.9, "%.6f s", twt_now() - t0);
    tw_backoff_reset(&b);
    TWT_EQ(b.count, 0);
}

int main(void)
{
    test_thread_index();
    test_spinlock();
    test_backoff();
    return 0;
}
