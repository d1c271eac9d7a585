/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Typed rings of fixed-size records over ConcurrencyKit's ck_ring: the one
 * place threadwire reaches CK (src/progress only).
 *
 *   TW_RING_DEFINE(cqe, tw_completion) defines tw_ring_cqe_t holding
 *   `struct tw_completion` records, with
 *     tw_ring_cqe_init(r, capacity)   room for at least @capacity records
 *     tw_ring_cqe_cleanup(r)
 *     tw_ring_cqe_enqueue_mp(r, &rec) any number of producers; false = full
 *     tw_ring_cqe_dequeue_mc(r, &rec) any number of consumers; false = empty
 *     tw_ring_cqe_dequeue_burst_mc(r, out, max)  up to max (<= 16) records
 *                                     with one CAS; any number of consumers
 *     tw_ring_cqe_dequeue_sc(r, &rec) one consumer at a time;  false = empty
 *     tw_ring_cqe_empty(r)            racy snapshot
 *   A given ring uses either _mc or _sc dequeues for its whole life.
 *
 * Slots. ck keeps one slot free to tell full from empty, so a ring for
 * @capacity records has the next power of two >= capacity + 1 slots.
 *
 * Why our own multi-producer commit. ck's MP enqueue is two steps: claim a
 * ticket by CAS on p_head (reserve), write the slot, then publish by
 * advancing p_tail from ticket to ticket + 1 (commit). Commits are in
 * ticket order, so a producer waits for every earlier ticket to be
 * committed first, and ck waits with an unbounded ck_pr_stall() (pause)
 * loop. If the owner of an earlier ticket is preempted between reserve and
 * commit, every later producer spins for the rest of its time slice; on a
 * machine with 2 cores and 10 producer threads the preempted one may share a
 * core with the spinners, and each hit then costs milliseconds. We
 * therefore use ck's reserve (ck_ring_enqueue_reserve_mpmc_<name>) and
 * commit with the same protocol as _ck_ring_enqueue_commit_mp -- wait until
 * p_tail == ticket, store fence, store p_tail = ticket + 1 -- but wait in
 * three phases: tw_backoff_wait's pause steps (the earlier producer is
 * usually just copying 40 bytes), a few of its sched_yield steps, then a
 * futex sleep on p_tail itself, announced in `commit_sleepers` so that a
 * committer pays a futex wake only when someone sleeps. Measured on this
 * 2-core class of machine with 8 threads, each shortcut fails badly:
 *   - long sched_yield phases: CFS runs the yielders (their vruntime stays
 *     low) ahead of the preempted producer for milliseconds per hit --
 *     0.2 M items/s instead of 8-12 M/s in one run out of three;
 *   - fixed-length sleeps (nanosleep 50 us, ~100 us with timer slack): a
 *     lock convoy -- every waiter sleeps a full period even when its
 *     predecessor commits a microsecond later, and the next producers queue
 *     behind it, ~10^4 items/s;
 *   - the futex sleep ends as soon as p_tail moves (wake-all: the convoy
 *     dissolves), and a 1 ms timeout bounds any missed wake.
 * Lost-wake-up freedom is the store-buffer argument of tw_cq.c: committer
 * stores p_tail, fences, loads commit_sleepers; a sleeper increments
 * commit_sleepers, fences, loads p_tail and futex-waits on the value seen.
 * The ck fields are touched only through ck_pr_load_* / ck_pr_store* (our
 * code never reads them plainly).
 *
 * Burst dequeue. ck's MC dequeue takes one record per CAS on c_head, and
 * reads p_tail for each; with the producer on another core every record
 * then moves the c_head and p_tail lines across once more. Measured with
 * bench_cq (two pinned threads, CQ of 256): per record 166 ns with ck's
 * dequeue vs 80 ns with the burst when the consumer backs off on empty
 * polls, 387 vs 312 ns when it polls hot; 4 producers into one consumer
 * 1.5 vs 4.2 M records/s. The burst is ck's own _ck_ring_dequeue_mc
 * protocol generalised to n records: snapshot c_head, load p_tail, copy
 * min(n, available) records, then one CAS c_head += n; a failed CAS
 * (another consumer won) discards the copy and retries with the returned
 * c_head. Like ck's, the copy is speculative and
 * may read a slot that is being rewritten, so it runs uninstrumented
 * (TW_RING_NO_TSAN) into a local array, and the caller's copy out of it is
 * instrumented. Single dequeues stay ck's.
 *
 * ThreadSanitizer. ck_pr is inline assembly plus volatile, so TSan cannot
 * see the ordering the ring provides. The Tsan build leaves CK's functions
 * uninstrumented (cmake/tsan-ignorelist.txt: fun:ck_*, which also keeps
 * them from being inlined into instrumented code) and this wrapper states
 * the happens-before edges with two sync tokens per ring:
 *   producer: ACQUIRE(space), ACQUIRE(data); write slot; RELEASE(data); commit
 *   consumer: dequeue; ACQUIRE(data); RELEASE(space)
 * Slots are written here by instrumented code (struct assignment), so TSan
 * checks the producers' writes; consumers copy through ck (an MC dequeue
 * reads the slot speculatively and may throw the copy away, which must not
 * be instrumented) into a local and hand it out with an instrumented copy.
 * Why the producer also acquires `data`: the consumer that frees a slot
 * can only release `space` after ck's CAS on c_head has returned, so a
 * producer of the next lap may claim and write that slot before the
 * release happens; TSan would then see two producers' writes to one slot
 * with no edge between them. The writer of the previous lap released
 * `data` before its commit, and this producer's ticket could only be
 * granted after that commit, so acquiring `data` here is always late
 * enough to order the two writes.
 *
 * Test hook (builds with TW_TESTING only). tw_ring_test_yield_hook is
 * called between reserve and write, between write and commit, and after a
 * dequeue before its annotations; stress tests set it to a seeded random
 * sched_yield() to stretch those windows. Without TW_TESTING the points
 * compile to nothing.
 *
 * Internal header: C11 only (_Atomic, and CK_RING_PROTOTYPE is not C++).
 */
#ifndef TW_RING_H
#define TW_RING_H

#include <stdatomic.h>
#include <stdbool.h>

#include <ck_ring.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_mem.h"
#include "threadwire/threadwire.h"

#if TW_TESTING
/** Test hook; NULL unless a test set it. Thread: set before the rings are used. */
typedef void (*tw_ring_hook_fn_t)(void);
extern _Atomic(tw_ring_hook_fn_t) tw_ring_test_yield_hook;

static inline void tw_ring_test_point(void)
{
    tw_ring_hook_fn_t fn = atomic_load_explicit(&tw_ring_test_yield_hook, memory_order_relaxed);
    if (TW_UNLIKELY(fn != NULL)) {
        fn();
    }
}
#else
static inline void tw_ring_test_point(void) {}
#endif

/* Functions whose plain accesses TSan must not see (speculative reads).
 * Only in TSan builds: elsewhere the attribute could stop inlining. */
#if TW_TSAN
#define TW_RING_NO_TSAN __attribute__((no_sanitize("thread")))
#else
#define TW_RING_NO_TSAN
#endif

/* Largest burst of tw_ring_<name>_dequeue_burst_mc. */
#define TW_RING_BURST_MAX 16u

/** Slots for @p capacity records (power of two > capacity); 0 if too many. */
static inline unsigned tw_ring_slot_count(unsigned capacity)
{
    unsigned n = 2;

    if (capacity == 0 || capacity >= (1u << 31)) {
        return 0;
    }
    while (n < capacity + 1) {
        n <<= 1;
    }
    return n;
}

/* Waiters for earlier commits that went to sleep (futex on p_tail). */
typedef struct tw_ring_sync {
    atomic_uint commit_sleepers;
} tw_ring_sync_t;

/* Out of line (tw_cq.c): wait until p_tail == @p ticket -- tw_backoff_wait
 * for a few dozen steps (pause, then a few sched_yield), then futex sleeps
 * on p_tail announced in @p rs. Thread: the producer holding @p ticket. */
void tw_ring_commit_wait(tw_ring_sync_t *rs, ck_ring_t *ck, unsigned ticket);
/* Out of line (tw_cq.c): wake every producer asleep on p_tail. */
void tw_ring_commit_wake(ck_ring_t *ck);

/*
 * Publish ticket @p ticket: the multi-producer commit of ck with a
 * backed-off wait for the earlier tickets (see the top of this file), then
 * a seq_cst fence and, only if a producer sleeps on p_tail, a futex wake.
 * Callers may rely on that fence (store p_tail / load their own flags).
 * Thread: the producer that reserved @p ticket.
 */
static inline void tw_ring_commit_mp(tw_ring_sync_t *rs, ck_ring_t *ck, unsigned ticket)
{
    if (TW_UNLIKELY(ck_pr_load_uint(&ck->p_tail) != ticket)) {
        tw_ring_commit_wait(rs, ck, ticket);
    }
    /* The slot (written before) is visible before the new p_tail. */
    ck_pr_fence_store();
    ck_pr_store_uint(&ck->p_tail, ticket + 1);
    /* Store p_tail / load commit_sleepers, against the sleeper's
     * increment / fence / load p_tail (Dekker, as in tw_cq.c). */
    atomic_thread_fence(memory_order_seq_cst);
    if (TW_UNLIKELY(atomic_load_explicit(&rs->commit_sleepers, memory_order_relaxed) != 0)) {
        tw_ring_commit_wake(ck);
    }
}

/*
 * @p name: suffix of the generated names; @p tag: struct tag of the record
 * (`struct tag` is stored). The ck_ring_*_tw_<name> functions generated by
 * CK_RING_PROTOTYPE keep the ck_ prefix so the TSan ignore-list covers them.
 */
/* After a successful dequeue: the test hook, then the consumer half of the
 * TSan annotations (see the top of this file). */
#define TW_RING_CONSUMED(r)                 \
    do {                                    \
        tw_ring_test_point();               \
        TW_TSAN_ACQUIRE(&(r)->data_token);  \
        TW_TSAN_RELEASE(&(r)->space_token); \
    } while (0)

#define TW_RING_DEFINE(name, tag)                                                                \
    CK_RING_PROTOTYPE(tw_##name, tag)                                                            \
                                                                                                 \
    typedef struct tw_ring_##name {                                                              \
        ck_ring_t ck TW_ALIGNED(TW_CACHELINE); /* c_head, p_head/p_tail on own lines */          \
        struct tag *slots;                     /* immutable after init */                        \
        unsigned slot_count;                                                                     \
        tw_ring_sync_t sync; /* producers asleep in commit */                                    \
        char space_token;    /* TSan sync objects; never read or written */                      \
        char data_token;                                                                         \
    } tw_ring_##name##_t;                                                                        \
                                                                                                 \
    /* Thread: any, before the ring is shared. */                                                \
    TW_UNUSED static inline tw_status_t tw_ring_##name##_init(tw_ring_##name##_t *r,             \
                                                              unsigned capacity)                 \
    {                                                                                            \
        unsigned n = tw_ring_slot_count(capacity);                                               \
        if (n == 0) { /* n < 2^32: n * size fits a 64-bit size_t */                              \
            return TW_ERR_INVALID;                                                               \
        }                                                                                        \
        r->slots = tw_malloc_aligned(TW_CACHELINE, (size_t)n * sizeof(struct tag));              \
        if (r->slots == NULL) {                                                                  \
            return TW_ERR_NOMEM;                                                                 \
        }                                                                                        \
        r->slot_count = n;                                                                       \
        atomic_init(&r->sync.commit_sleepers, 0);                                                \
        ck_ring_init(&r->ck, n);                                                                 \
        return TW_OK;                                                                            \
    }                                                                                            \
                                                                                                 \
    /* Thread: any, once no other thread uses the ring. */                                       \
    TW_UNUSED static inline void tw_ring_##name##_cleanup(tw_ring_##name##_t *r)                 \
    {                                                                                            \
        if (r->slots != NULL) {                                                                  \
            tw_free_aligned(r->slots, TW_CACHELINE, (size_t)r->slot_count * sizeof(struct tag)); \
            r->slots = NULL;                                                                     \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    /* False when the ring is full. Thread: any. */                                              \
    TW_UNUSED static inline bool tw_ring_##name##_enqueue_mp(tw_ring_##name##_t *r,              \
                                                             const struct tag *rec)              \
    {                                                                                            \
        unsigned ticket;                                                                         \
        struct tag *slot = ck_ring_enqueue_reserve_mpmc_tw_##name(&r->ck, r->slots, &ticket);    \
        if (slot == NULL) {                                                                      \
            return false;                                                                        \
        }                                                                                        \
        tw_ring_test_point();                                                                    \
        TW_TSAN_ACQUIRE(&r->space_token);                                                        \
        TW_TSAN_ACQUIRE(&r->data_token);                                                         \
        *slot = *rec;                                                                            \
        TW_TSAN_RELEASE(&r->data_token);                                                         \
        tw_ring_test_point();                                                                    \
        tw_ring_commit_mp(&r->sync, &r->ck, ticket);                                             \
        return true;                                                                             \
    }                                                                                            \
                                                                                                 \
    /* False when the ring is empty. Thread: any (multi-consumer ring). */                       \
    TW_UNUSED static inline bool tw_ring_##name##_dequeue_mc(tw_ring_##name##_t *r,              \
                                                             struct tag *out)                    \
    {                                                                                            \
        struct tag rec;                                                                          \
        if (!ck_ring_dequeue_mpmc_tw_##name(&r->ck, r->slots, &rec)) {                           \
            return false;                                                                        \
        }                                                                                        \
        TW_RING_CONSUMED(r);                                                                     \
        *out = rec;                                                                              \
        return true;                                                                             \
    }                                                                                            \
                                                                                                 \
    /* ck's MC dequeue protocol for up to @max records (see the top). */                         \
    TW_UNUSED TW_RING_NO_TSAN static inline unsigned tw_ring_##name##_burst_copy(                \
        ck_ring_t *ck, const struct tag *slots, struct tag *out, unsigned max)                   \
    {                                                                                            \
        const unsigned mask = ck_pr_load_uint(&ck->mask);                                        \
        unsigned consumer = ck_pr_load_uint(&ck->c_head);                                        \
        for (;;) {                                                                               \
            unsigned n;                                                                          \
            ck_pr_fence_load();                                                                  \
            n = ck_pr_load_uint(&ck->p_tail) - consumer;                                         \
            if (n == 0) {                                                                        \
                return 0;                                                                        \
            }                                                                                    \
            n = n < max ? n : max;                                                               \
            ck_pr_fence_load();                                                                  \
            for (unsigned i = 0; i < n; i++) {                                                   \
                out[i] = slots[(consumer + i) & mask];                                           \
            }                                                                                    \
            ck_pr_fence_store_atomic();                                                          \
            if (ck_pr_cas_uint_value(&ck->c_head, consumer, consumer + n, &consumer)) {          \
                return n;                                                                        \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    /* Up to @max records; 0 when empty. Thread: any (multi-consumer ring). */                   \
    TW_UNUSED static inline unsigned tw_ring_##name##_dequeue_burst_mc(                          \
        tw_ring_##name##_t *r, struct tag *out, unsigned max)                                    \
    {                                                                                            \
        struct tag tmp[TW_RING_BURST_MAX];                                                       \
        unsigned n = tw_ring_##name##_burst_copy(                                                \
            &r->ck, r->slots, tmp, max < TW_RING_BURST_MAX ? max : TW_RING_BURST_MAX);           \
        if (n == 0) {                                                                            \
            return 0;                                                                            \
        }                                                                                        \
        TW_RING_CONSUMED(r);                                                                     \
        for (unsigned i = 0; i < n; i++) {                                                       \
            out[i] = tmp[i];                                                                     \
        }                                                                                        \
        return n;                                                                                \
    }                                                                                            \
                                                                                                 \
    /* False when the ring is empty. Thread: one consumer at a time. */                          \
    TW_UNUSED static inline bool tw_ring_##name##_dequeue_sc(tw_ring_##name##_t *r,              \
                                                             struct tag *out)                    \
    {                                                                                            \
        struct tag rec;                                                                          \
        if (!ck_ring_dequeue_mpsc_tw_##name(&r->ck, r->slots, &rec)) {                           \
            return false;                                                                        \
        }                                                                                        \
        TW_RING_CONSUMED(r);                                                                     \
        *out = rec;                                                                              \
        return true;                                                                             \
    }                                                                                            \
                                                                                                 \
    /* Racy snapshot: true when nothing is published. Thread: any. */                            \
    TW_UNUSED static inline bool tw_ring_##name##_empty(const tw_ring_##name##_t *r)             \
    {                                                                                            \
        return ck_ring_size(&r->ck) == 0;                                                        \
    }                                                                                            \
                                                                                                 \
    /* Records the ring can hold. */                                                             \
    TW_UNUSED static inline unsigned tw_ring_##name##_capacity(const tw_ring_##name##_t *r)      \
    {                                                                                            \
        return r->slot_count - 1;                                                                \
    }

#endif /* TW_RING_H */
