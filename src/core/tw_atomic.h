/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Atomics helpers, back-off, a spinlock for very short critical sections,
 * and the per-process thread index.
 *
 * Every atomic names its memory order. No volatile for synchronization.
 *
 * Back-off matters on this class of machine: with 2 cores a thread that
 * spins on a thread sharing its core wastes its whole time slice (measured
 * 2,400x slower than yielding). Every wait loop therefore uses tw_backoff:
 * a few pause instructions, then sched_yield(), then short sleeps.
 */
#ifndef TW_ATOMIC_H
#define TW_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tw_compiler.h"

/** CPU relax hint inside spin loops. */
static inline void tw_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/** Back-off state for one wait loop; starts at zero. */
typedef struct tw_backoff {
    unsigned count;
} tw_backoff_t;

#define TW_BACKOFF_INIT \
    {                   \
        0               \
    }

static inline void tw_backoff_reset(tw_backoff_t *b)
{
    b->count = 0;
}

/**
 * One step of waiting: pause (first ~64 steps, growing), then sched_yield,
 * then (after ~1k steps) 50 us sleeps. Thread: owner of @p b.
 */
void tw_backoff_wait(tw_backoff_t *b);

/**
 * Test-and-test-and-set spinlock with back-off, for critical sections of a
 * few dozen instructions that never call out of the module. Zero-initialised
 * is unlocked.
 */
typedef struct TW_CAPABILITY("spinlock") tw_spinlock {
    atomic_uint locked;
} tw_spinlock_t;

static inline void tw_spinlock_init(tw_spinlock_t *l)
{
    atomic_init(&l->locked, 0);
}

static inline bool tw_spinlock_trylock(tw_spinlock_t *l) TW_TRY_ACQUIRE(true, l) TW_NO_TSA
{
    return atomic_load_explicit(&l->locked, memory_order_relaxed) == 0 &&
           atomic_exchange_explicit(&l->locked, 1, memory_order_acquire) == 0;
}

static inline void tw_spinlock_lock(tw_spinlock_t *l) TW_ACQUIRE(l) TW_NO_TSA
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    while (!tw_spinlock_trylock(l)) {
        tw_backoff_wait(&b);
    }
}

static inline void tw_spinlock_unlock(tw_spinlock_t *l) TW_RELEASE(l) TW_NO_TSA
{
    atomic_store_explicit(&l->locked, 0, memory_order_release);
}

/**
 * Small dense index of the calling thread, assigned at its first call and
 * unique among the process's live threads (indexes of exited threads are
 * reused). Used for per-thread counter slots and as the sending-thread id.
 * Thread: any.
 */
extern TW_TLS unsigned tw_tls_index_plus1; /* index + 1; 0: not assigned yet */
unsigned tw_thread_index_assign(void);     /* the first call's slow path */

static inline unsigned tw_thread_index(void)
{
    unsigned v = tw_tls_index_plus1;

    /* Inline: it is on every message's path (counter slots, lanes). */
    return TW_LIKELY(v != 0) ? v - 1u : tw_thread_index_assign();
}

/**
 * Spin slots: a thread about to busy-wait (adaptive waiting) takes one; when
 * none is left -- as many threads already spin as there are CPUs, less one
 * for the thread being waited for -- it should sleep at once instead.
 * tw_spin_slot_put gives a taken slot back. Thread: any.
 */
bool tw_spin_slot_get(void);
void tw_spin_slot_put(void);

/** The driving spinner: one waiter per process without a spin slot that
 * drives the transports itself while it waits (tw_cq_wait, adaptive) may
 * spin; get is false while another holds it. Thread: any. */
bool tw_spin_driver_get(void);
void tw_spin_driver_put(void);

/** Kernel thread id of the caller (for logs). Thread: any. */
int tw_gettid(void);

#endif /* TW_ATOMIC_H */
