/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Back-off, kernel thread ids and the per-process dense thread index.
 *
 * Thread index: a bitmap of TW_THREAD_INDEX_DENSE bits under one mutex
 * hands out the lowest free index at a thread's first call (once per
 * thread, so the mutex is never on a fast path). A pthread key whose
 * destructor runs at thread exit puts the index back. Threads beyond the
 * dense range all share TW_THREAD_INDEX_DENSE: users take the index modulo
 * a small slot count, so sharing only costs some cache-line contention.
 *
 * fork(): the child has one thread, so an atfork handler frees every index
 * but the caller's and forgets the cached tid.
 */
#define _GNU_SOURCE
#include "core/tw_atomic.h"
#include "core/tw_lock.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * Pause costs ~17 ns here, a sched_yield ~0.3 us. The pause phase is kept
 * to ~1 us (62 pauses): on 2 cores the thread we wait for is often
 * runnable on our own core, and only a yield or a sleep lets it run. Then
 * 16 yields -- long yield phases starve the awaited thread under CFS
 * (measured in the CQ stress) -- then 50 us sleeps.
 */
#define TW_BACKOFF_SPIN_STEPS  10
#define TW_BACKOFF_YIELD_STEPS 26
#define TW_BACKOFF_SLEEP_NS    50000

#define TW_THREAD_INDEX_DENSE 4096u
#define TW_THREAD_INDEX_WORDS (TW_THREAD_INDEX_DENSE / 64u)

void tw_backoff_wait(tw_backoff_t *b)
{
    unsigned n = b->count;

    if (n < TW_BACKOFF_SPIN_STEPS) {
        /* 1, 1, 2, 2, 4 ... 16 pauses: the spin grows every 2 steps. */
        unsigned spins = 1u << (n / 2u);
        for (unsigned i = 0; i < spins; i++) {
            tw_cpu_relax();
        }
    } else if (n < TW_BACKOFF_YIELD_STEPS) {
        sched_yield();
    } else {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = TW_BACKOFF_SLEEP_NS};
        nanosleep(&ts, NULL);
    }
    if (n < UINT_MAX) {
        b->count = n + 1;
    }
}

/* ---- thread index ------------------------------------------------------ */

static pthread_once_t index_once = PTHREAD_ONCE_INIT;
static tw_mutex_t index_lock = TW_MUTEX_INITIALIZER(TW_LOCK_RANK_LEAF, "thread indexes");
static uint64_t index_map[TW_THREAD_INDEX_WORDS] TW_GUARDED_BY(index_lock);
static pthread_key_t index_key;
static bool index_key_ok; /* written once inside index_once */

/* index + 1 of this thread; 0 = not assigned yet. */
TW_TLS unsigned tw_tls_index_plus1; /* read inline by tw_thread_index() */
/* Kernel tid of this thread; 0 = not read yet. */
static TW_TLS int tls_tid;

static void index_release(unsigned idx)
{
    if (idx >= TW_THREAD_INDEX_DENSE) {
        return;
    }
    tw_mutex_lock(&index_lock);
    index_map[idx / 64u] &= ~(1ull << (idx % 64u));
    tw_mutex_unlock(&index_lock);
}

static void index_key_destructor(void *value)
{
    /* Another key's destructor may still ask for an index after this one
     * ran: forget it so that such a call takes (and registers) a new one. */
    tw_tls_index_plus1 = 0;
    index_release((unsigned)((uintptr_t)value - 1u));
}

/* fork() takes the lock in prepare and drops it on both sides. */
static void atfork_prepare(void) TW_ACQUIRE(index_lock)
{
    tw_mutex_lock(&index_lock);
}

static void atfork_parent(void) TW_RELEASE(index_lock)
{
    tw_mutex_unlock(&index_lock);
}

static void atfork_child(void) TW_RELEASE(index_lock)
{
    /* Only the forking thread survives: keep its index, free the rest. */
    memset(index_map, 0, sizeof(index_map));
    if (tw_tls_index_plus1 != 0 && tw_tls_index_plus1 - 1u < TW_THREAD_INDEX_DENSE) {
        unsigned idx = tw_tls_index_plus1 - 1u;
        index_map[idx / 64u] |= 1ull << (idx % 64u);
    }
    tls_tid = 0;
    tw_mutex_unlock(&index_lock);
}

static void index_init(void)
{
    index_key_ok = pthread_key_create(&index_key, index_key_destructor) == 0;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static unsigned index_assign(void)
{
    unsigned idx = TW_THREAD_INDEX_DENSE;

    pthread_once(&index_once, index_init);
    if (!index_key_ok) {
        /* Without the destructor an index would never come back. */
        return TW_THREAD_INDEX_DENSE;
    }

    tw_mutex_lock(&index_lock);
    for (unsigned w = 0; w < TW_THREAD_INDEX_WORDS; w++) {
        if (index_map[w] != UINT64_MAX) {
            unsigned bit = (unsigned)__builtin_ctzll(~index_map[w]);
            index_map[w] |= 1ull << bit;
            idx = w * 64u + bit;
            break;
        }
    }
    tw_mutex_unlock(&index_lock);

    if (idx < TW_THREAD_INDEX_DENSE &&
        pthread_setspecific(index_key, (void *)(uintptr_t)(idx + 1u)) != 0) {
        index_release(idx);
        idx = TW_THREAD_INDEX_DENSE;
    }
    return idx;
}

unsigned tw_thread_index_assign(void)
{
    unsigned v = index_assign() + 1u;

    tw_tls_index_plus1 = v;
    return v - 1u;
}

int tw_gettid(void)
{
    int tid = tls_tid;

    if (TW_UNLIKELY(tid == 0)) {
        /* Registers the atfork handler that resets the cache in a child. */
        pthread_once(&index_once, index_init);
        tid = (int)syscall(SYS_gettid);
        tls_tid = tid;
    }
    return tid;
}

/* ---- spin slots ---------------------------------------------------------- */

/*
 * Spinning only pays while a CPU is free for the thread we wait for. The
 * process may spin on at most (CPUs it may run on - 1) threads at once,
 * and none under `taskset -c 0`: there everybody sleeps.
 * Counted process-wide; the CPU count is read once.
 */
static atomic_int spin_slots_used;
static int spin_slots_max = -1;
static pthread_once_t spin_once = PTHREAD_ONCE_INIT;

static void spin_slots_init(void)
{
    cpu_set_t set;
    int n = 1;

    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        n = CPU_COUNT(&set);
    }
    spin_slots_max = n > 1 ? n - 1 : 0;
}

bool tw_spin_slot_get(void)
{
    pthread_once(&spin_once, spin_slots_init);
    if (atomic_fetch_add_explicit(&spin_slots_used, 1, memory_order_relaxed) < spin_slots_max) {
        return true;
    }
    atomic_fetch_sub_explicit(&spin_slots_used, 1, memory_order_relaxed);
    return false;
}

void tw_spin_slot_put(void)
{
    atomic_fetch_sub_explicit(&spin_slots_used, 1, memory_order_relaxed);
}

/* One waiter per process may spin without a slot while it drives the
 * transports itself (tw_cq_wait, adaptive). */
static atomic_int spin_driver_taken;

bool tw_spin_driver_get(void)
{
    int expected = 0;

    return atomic_compare_exchange_strong_explicit(&spin_driver_taken, &expected, 1,
                                                   memory_order_relaxed, memory_order_relaxed);
}

void tw_spin_driver_put(void)
{
    atomic_store_explicit(&spin_driver_taken, 0, memory_order_relaxed);
}
