/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Completion queues.
 *
 * A CQ is a multi-producer multi-consumer ring of tw_completion_t records
 * (tw_ring.h over ck_ring) plus three small protocols around it: space
 * reservation, waking sleepers, and an optional readiness fd.
 *
 * Space. A completion must never be dropped and a producer (often a
 * progress thread) must never wait for a consumer, so space is taken when
 * the operation is posted, not when it completes: tw_cq_reserve does
 * fetch_add(reserved) and backs out (TW_ERR_AGAIN) if that exceeds depth;
 * the consumer gives the space back (fetch_sub) after it dequeued. Hence
 *     records in the ring  <=  reserved  <=  depth  <=  ring capacity,
 * and tw_cq_push always finds a free slot (asserted). The order matters:
 * the consumer frees the ring slot (CAS on c_head) before it releases
 * `reserved`, and a producer acquires `reserved` before it claims a slot.
 *
 * In flight. tw_cq_destroy refuses (TW_ERR_AGAIN) while reservations are
 * not yet pushed. To keep that off the fast path, `acct` packs two 32-bit
 * counters in one 64-bit atomic -- low half `reserved`, high half the
 * reservations ever granted (minus those given back) -- so tw_cq_reserve is
 * one fetch_add of 2^32 + 1; pushes are counted twice, on a line only
 * producers touch: `committed` as tw_cq_push starts (before the record
 * can be polled), and `pushed` as its very last access to the CQ (after
 * the wake-up). granted - committed > 0: an operation has not completed ->
 * TW_ERR_AGAIN. committed - pushed > 0: a record is in (or already out
 * of) the ring but its producer is still ringing a wake-up -> destroy
 * waits for it, however long that thread is descheduled, so it never
 * frees the CQ from under it. Readers load `pushed`, then `committed`,
 * then `acct`: all only grow, so the differences can only over-estimate.
 *
 * Sleeping without lost wake-ups. A waiter announces itself before it
 * sleeps, and producers pay a syscall only when someone is announced:
 *     waiter                               producer
 *     seq = load(wake_seq)                 commit record (store p_tail)
 *     fetch_add(waiters)   [seq_cst]       fence [seq_cst] (ends enqueue_mp)
 *     fence                [seq_cst]       if load(waiters) != 0:
 *     poll the ring (load p_tail)              fetch_add(wake_seq)
 *     futex_wait(&wake_seq, seq)               futex_wake(all)
 *     fetch_sub(waiters)
 * This is Dekker's store-buffer pattern: each side stores (waiters /
 * p_tail), executes a full fence, then loads what the other side stored.
 * Without the fences both loads could be satisfied before either store left
 * its store buffer -- the producer reads waiters == 0, the waiter finds the
 * ring empty, and it sleeps with a record queued (a lost wake-up). With a
 * seq_cst fence between each store and load, the two fences are totally
 * ordered, and whichever comes second sees the other's store: either the
 * waiter's re-poll finds the record, or the producer sees waiters != 0 and
 * wakes. A wake that comes after the waiter read `seq` but before it slept
 * changes wake_seq, so futex_wait(seq) returns at once instead of sleeping.
 * p_tail is written by ck_pr (inline asm), not a C11 atomic, so the argument
 * rests on the hardware fences the two seq_cst fences emit, plus the
 * compiler barriers that ck_pr's asm carries.
 *
 * Readiness fd. tw_cq_fd creates an eventfd on first use (a creator that
 * loses the CAS race closes its own). From then on producers, after the
 * same fence, do `if (!fd_signaled && exchange(fd_signaled, 1) == 0)
 * write(fd)`: one write per drain cycle. A consumer whose poll finds the
 * ring empty while fd_signaled is set reads the eventfd (drain), stores
 * fd_signaled = 0, fences, and looks at the ring again: if records arrived
 * meanwhile it signals the fd itself. Again a store/fence/load pair on each
 * side, so either the producer sees fd_signaled == 0 and writes, or the
 * consumer's second look sees the record and re-signals: the fd is readable
 * whenever records may be waiting. CQs whose fd nobody asked for pay one
 * load of fd == -1 per push.
 *
 * Waiting modes of tw_cq_wait: spin (poll with back-off until the
 * timeout), block (announce and sleep at once), adaptive (poll with
 * back-off for spin_ns, then as block); with a progress_fn (manual
 * progress) it never sleeps: poll, drive progress, back off, repeat.
 *
 * TSan: the ring carries its own annotations (tw_ring.h); everything else
 * here is C11 atomics and syscalls TSan understands.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_stats.h"
#include "core/tw_time.h"
#include "progress/tw_cq.h"
#include "progress/tw_pe.h"
#include "progress/tw_ring.h"

TW_RING_DEFINE(cqe, tw_completion)

/* tw_cq_poll gives the CPU away once per this many empty polls in a row. */
#define TW_CQ_POLL_YIELD_EVERY 64u

/* Adaptive waiting without a configured budget spins this long. */
#define TW_CQ_SPIN_NS_DEFAULT 50000u

/* ---- out-of-line parts of tw_ring.h ------------------------------------- */

#if TW_TESTING
_Atomic(tw_ring_hook_fn_t) tw_ring_test_yield_hook; /* zero: NULL */
#endif

/* tw_backoff steps before sleeping: its pause steps (~64) and ~8 yields. */
#define TW_RING_COMMIT_BACKOFF_STEPS 72
#define TW_RING_COMMIT_SLEEP_NS      1000000 /* futex timeout: safety net */

void tw_ring_commit_wait(tw_ring_sync_t *rs, ck_ring_t *ck, unsigned ticket)
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    unsigned steps = 0;

    for (;;) {
        unsigned cur = ck_pr_load_uint(&ck->p_tail);

        if (cur == ticket) {
            return;
        }
        if (steps < TW_RING_COMMIT_BACKOFF_STEPS) {
            steps++;
            tw_backoff_wait(&b);
            continue;
        }
        /* The earlier producer is off its CPU: sleep until p_tail moves. */
        atomic_fetch_add_explicit(&rs->commit_sleepers, 1, memory_order_seq_cst);
        /* Store commit_sleepers / load p_tail (see tw_ring_commit_mp). */
        atomic_thread_fence(memory_order_seq_cst);
        cur = ck_pr_load_uint(&ck->p_tail);
        if (cur != ticket) {
            struct timespec ts = {.tv_sec = 0, .tv_nsec = TW_RING_COMMIT_SLEEP_NS};
            /* Returns at once if p_tail no longer holds cur. */
            syscall(SYS_futex, (void *)&ck->p_tail, FUTEX_WAIT_PRIVATE, cur, &ts, NULL, 0);
        }
        atomic_fetch_sub_explicit(&rs->commit_sleepers, 1, memory_order_relaxed);
        /* Woken by a commit: the producers ahead of us are likely running
         * now, so yield a few times before sleeping again. */
        steps -= 8;
    }
}

void tw_ring_commit_wake(ck_ring_t *ck)
{
    syscall(SYS_futex, (void *)&ck->p_tail, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* ---- completion queues --------------------------------------------------- */

const tw_stat_desc_t tw_cq_stat_descs[TW_CQ_STAT_COUNT] = {
    [TW_CQ_STAT_PUSHED] = {.name = "pushed", .kind = TW_STAT_COUNTER},
    [TW_CQ_STAT_WAKEUPS] = {.name = "wakeups", .kind = TW_STAT_COUNTER},
    [TW_CQ_STAT_DEPTH_HWM] = {.name = "depth_hwm", .kind = TW_STAT_HWM},
    [TW_CQ_STAT_AGAIN] = {.name = "again", .kind = TW_STAT_COUNTER},
};

struct tw_cq {
    tw_ring_cqe_t ring; /* Thread: any (MPMC) */

    /* Immutable after tw_cq_open. */
    unsigned depth;
    tw_wait_mode_t wait_mode;
    uint64_t spin_ns;
    int (*progress_fn)(void *arg);
    int (*poll_fn)(void *arg);
    void *progress_arg;
    void *owner;
    tw_stats_t *stats;

    /* Space accounting (see the top): producers at post, consumers per poll. */
    atomic_ullong acct TW_ALIGNED(TW_CACHELINE); /* granted << 32 | reserved */
    atomic_uint hwm;                             /* local high-water mark */

    /* Pushes ever made: producers only (see "In flight" on top). */
    atomic_uint pushed TW_ALIGNED(TW_CACHELINE);
    atomic_uint committed; /* pushes started */

    /* Wake-up state: read by every push, written by sleepers and wakers. */
    atomic_uint waiters TW_ALIGNED(TW_CACHELINE); /* announced sleepers */
    atomic_uint wake_seq;                         /* futex word */
    atomic_int efd;                               /* eventfd or -1; set once */
    atomic_uint fd_signaled;                      /* eventfd written, not drained */
};

static inline void tw_cq_stat_add(tw_cq_t *cq, unsigned id, uint64_t v)
{
    if (cq->stats != NULL) {
        tw_stats_add(cq->stats, id, v);
    }
}

tw_status_t tw_cq_open(const tw_cq_params_t *params, tw_cq_t **cq_p)
{
    tw_cq_t *cq;
    tw_status_t st;

    if (params == NULL || cq_p == NULL) {
        tw_error("cq", "tw_cq_open: NULL %s", params == NULL ? "params" : "cq_p");
        return TW_ERR_INVALID;
    }
    if (params->depth == 0 || params->depth > TW_CQ_DEPTH_MAX) {
        tw_error("cq", "completion queue depth %u out of range 1..%u", params->depth,
                 TW_CQ_DEPTH_MAX);
        return TW_ERR_INVALID;
    }
    if ((unsigned)params->wait_mode > (unsigned)TW_WAIT_BLOCK) {
        tw_error("cq", "completion queue wait mode %d unknown", (int)params->wait_mode);
        return TW_ERR_INVALID;
    }

    cq = tw_malloc_aligned(TW_CACHELINE, sizeof(*cq));
    if (cq == NULL) {
        tw_error("cq", "cannot allocate a completion queue");
        return TW_ERR_NOMEM;
    }
    memset(cq, 0, sizeof(*cq));
    st = tw_ring_cqe_init(&cq->ring, params->depth);
    if (st != TW_OK) {
        tw_error("cq", "cannot allocate a ring of %u completions", params->depth);
        goto err_free;
    }
    tw_assert(tw_ring_cqe_capacity(&cq->ring) >= params->depth);

    cq->depth = params->depth;
    cq->wait_mode = params->wait_mode;
    cq->spin_ns = params->spin_ns != 0 ? params->spin_ns : TW_CQ_SPIN_NS_DEFAULT;
    cq->progress_fn = params->progress_fn;
    cq->poll_fn = params->poll_fn;
    cq->progress_arg = params->progress_arg;
    cq->owner = params->owner;
    cq->stats = params->stats;
    atomic_init(&cq->acct, 0);
    atomic_init(&cq->hwm, 0);
    atomic_init(&cq->pushed, 0);
    atomic_init(&cq->committed, 0);
    atomic_init(&cq->waiters, 0);
    atomic_init(&cq->wake_seq, 0);
    atomic_init(&cq->efd, -1);
    atomic_init(&cq->fd_signaled, 0);
    *cq_p = cq;
    return TW_OK;

err_free:
    tw_free_aligned(cq, TW_CACHELINE, sizeof(*cq));
    return st;
}

void *tw_cq_owner(const tw_cq_t *cq)
{
    return cq->owner;
}

static void tw_cq_batch_flush(tw_cq_t *only);

tw_status_t tw_cq_destroy(tw_cq_t *cq)
{
    int fd;

    if (cq == NULL) {
        tw_error("cq", "tw_cq_destroy: NULL cq");
        return TW_ERR_INVALID;
    }
    /* A handler that destroys a CQ its own pass pushed to. */
    tw_cq_batch_flush(cq);
    /* Acquire: pairs with the release increments of tw_cq_push. */
    tw_backoff_t b = TW_BACKOFF_INIT;
    for (;;) {
        unsigned pushed = atomic_load_explicit(&cq->pushed, memory_order_acquire);
        unsigned committed = atomic_load_explicit(&cq->committed, memory_order_acquire);
        uint64_t acct = atomic_load_explicit(&cq->acct, memory_order_acquire);
        if ((unsigned)(acct >> 32) != committed) {
            return TW_ERR_AGAIN; /* an operation has not completed */
        }
        if (committed == pushed) {
            break;
        }
        tw_backoff_wait(&b); /* a producer finishing its wake-up */
    }
    fd = atomic_load_explicit(&cq->efd, memory_order_acquire);
    if (fd >= 0) {
        close(fd);
    }
    tw_ring_cqe_cleanup(&cq->ring);
    tw_free_aligned(cq, TW_CACHELINE, sizeof(*cq));
    return TW_OK;
}

/* One reservation in `acct`: granted (high half) and reserved (low). */
#define TW_CQ_ACCT_ONE ((1ull << 32) | 1ull)

tw_status_t tw_cq_reserve(tw_cq_t *cq)
{
    /* Acquire: see the ring slots freed by the consumers whose releases
     * made this count possible (they dequeue before they give back). */
    uint64_t old = atomic_fetch_add_explicit(&cq->acct, TW_CQ_ACCT_ONE, memory_order_acquire);
    unsigned n = (unsigned)old + 1;

    if (TW_UNLIKELY(n > cq->depth)) {
        atomic_fetch_sub_explicit(&cq->acct, TW_CQ_ACCT_ONE, memory_order_relaxed);
        tw_cq_stat_add(cq, TW_CQ_STAT_AGAIN, 1);
        return TW_ERR_AGAIN;
    }
    /* The local mark keeps the shared stats line out of the fast path;
     * a racing lower store only costs a few extra tw_stats_hwm calls. */
    if (TW_UNLIKELY(n > atomic_load_explicit(&cq->hwm, memory_order_relaxed))) {
        atomic_store_explicit(&cq->hwm, n, memory_order_relaxed);
        if (cq->stats != NULL) {
            tw_stats_hwm(cq->stats, TW_CQ_STAT_DEPTH_HWM, n);
        }
    }
    return TW_OK;
}

void tw_cq_unreserve(tw_cq_t *cq)
{
    tw_assert(tw_cq_inflight(cq) > 0);
    atomic_fetch_sub_explicit(&cq->acct, TW_CQ_ACCT_ONE, memory_order_release);
}

unsigned tw_cq_inflight(const tw_cq_t *cq)
{
    /* `pushed` first (see the top): the difference never under-counts. */
    unsigned pushed = atomic_load_explicit(&cq->pushed, memory_order_acquire);
    uint64_t acct = atomic_load_explicit(&cq->acct, memory_order_acquire);

    return (unsigned)(acct >> 32) - pushed;
}

unsigned tw_cq_waiters(const tw_cq_t *cq)
{
    return atomic_load_explicit(&cq->waiters, memory_order_relaxed);
}

static void tw_cq_fd_write(int fd)
{
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof(one));

    /* Cannot fail: we write at most once per drain (no counter overflow). */
    tw_assert(r == (ssize_t)sizeof(one));
    (void)r;
}

/* Make the eventfd readable unless it already is. Thread: any. */
static inline void tw_cq_fd_signal(tw_cq_t *cq, int fd)
{
    if (atomic_load_explicit(&cq->fd_signaled, memory_order_relaxed) == 0 &&
        atomic_exchange_explicit(&cq->fd_signaled, 1, memory_order_seq_cst) == 0) {
        tw_cq_fd_write(fd);
    }
}

/* The ring looked empty with the fd signaled: drain it, then re-check the
 * ring so a record pushed meanwhile keeps the fd readable. */
static void tw_cq_fd_drain(tw_cq_t *cq, int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v));

    (void)r; /* EAGAIN: another consumer drained it first */
    atomic_store_explicit(&cq->fd_signaled, 0, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst); /* store fd_signaled / load p_tail */
    if (!tw_ring_cqe_empty(&cq->ring)) {
        tw_cq_fd_signal(cq, fd);
    }
}

static void tw_cq_wake(tw_cq_t *cq)
{
    atomic_fetch_add_explicit(&cq->wake_seq, 1, memory_order_release);
    syscall(SYS_futex, (void *)&cq->wake_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    tw_cq_stat_add(cq, TW_CQ_STAT_WAKEUPS, 1);
}

/* This thread's batch (tw_cq_batch_begin): CQs pushed to whose wake-up
 * and "pushed" increments wait for the end. */
#define TW_CQ_BATCH_MAX 8
typedef struct tw_cq_batch {
    unsigned depth;
    unsigned n;
    struct {
        tw_cq_t *cq;
        unsigned pushes;
        bool wake;
    } e[TW_CQ_BATCH_MAX];
} tw_cq_batch_t;
static TW_TLS tw_cq_batch_t tw_cq_batch;

static void tw_cq_batch_flush(tw_cq_t *only)
{
    tw_cq_batch_t *b = &tw_cq_batch;

    for (unsigned i = 0; i < b->n;) {
        tw_cq_t *cq = b->e[i].cq;
        if (only != NULL && cq != only) {
            i++;
            continue;
        }
        if (b->e[i].wake) {
            tw_cq_wake(cq);
        }
        /* Last access to *cq (see tw_cq_push). */
        atomic_fetch_add_explicit(&cq->pushed, b->e[i].pushes, memory_order_release);
        b->e[i] = b->e[--b->n];
    }
}

void tw_cq_batch_begin(void)
{
    tw_cq_batch.depth++;
}

void tw_cq_batch_end(void)
{
    if (--tw_cq_batch.depth == 0) {
        tw_cq_batch_flush(NULL);
    }
}

/* Leave @p cq's wake-up and done mark to the batch's end; false when
 * there is no batch or no room in it. */
static bool tw_cq_batch_hold(tw_cq_t *cq, bool wake)
{
    tw_cq_batch_t *b = &tw_cq_batch;

    if (b->depth == 0) {
        return false;
    }
    for (unsigned i = 0; i < b->n; i++) {
        if (b->e[i].cq == cq) {
            b->e[i].pushes++;
            b->e[i].wake |= wake;
            return true;
        }
    }
    if (b->n == TW_CQ_BATCH_MAX) {
        return false;
    }
    b->e[b->n].cq = cq;
    b->e[b->n].pushes = 1;
    b->e[b->n].wake = wake;
    b->n++;
    return true;
}

void tw_cq_push(tw_cq_t *cq, const tw_completion_t *c)
{
    bool ok;
    int fd;

    /* Before the record can be polled: a destroy after the last poll
     * then sees this push under way, not an operation outstanding. */
    atomic_fetch_add_explicit(&cq->committed, 1, memory_order_release);
    ok = tw_ring_cqe_enqueue_mp(&cq->ring, c);
    tw_assert(ok); /* the reservation guaranteed a slot */
    (void)ok;
    tw_cq_stat_add(cq, TW_CQ_STAT_PUSHED, 1);
    tw_ring_test_point();

    /* Store p_tail / load waiters and fd_signaled -- the producer half of
     * both Dekker pairs on top: the seq_cst fence that ends every
     * tw_ring enqueue_mp, right after its commit, orders them. */
    bool wake = atomic_load_explicit(&cq->waiters, memory_order_relaxed) != 0;
    fd = atomic_load_explicit(&cq->efd, memory_order_acquire);
    if (fd >= 0) {
        tw_cq_fd_signal(cq, fd);
    }
    if (tw_cq_batch_hold(cq, wake)) {
        return;
    }
    if (wake) {
        tw_cq_wake(cq);
    }
    /* Last access to *cq: tw_cq_destroy may free it once this lands. */
    atomic_fetch_add_explicit(&cq->pushed, 1, memory_order_release);
}

/* Take up to @p max records (arguments checked by the caller). */
int tw_cq_take(tw_cq_t *cq, tw_completion_t *out, int max)
{
    int n = 0;

    while (n < max) {
        unsigned k = tw_ring_cqe_dequeue_burst_mc(&cq->ring, &out[n], (unsigned)(max - n));
        if (k == 0) {
            break;
        }
        n += (int)k;
    }
    if (n > 0) {
        tw_ring_test_point();
        /* Release: the slots are free (dequeued) before the space is. */
        atomic_fetch_sub_explicit(&cq->acct, (uint64_t)n, memory_order_release);
    }
    if (n < max) {
        /* The ring looked empty: let the readiness fd go quiet. */
        int fd = atomic_load_explicit(&cq->efd, memory_order_acquire);
        if (fd >= 0 && atomic_load_explicit(&cq->fd_signaled, memory_order_relaxed) != 0) {
            tw_cq_fd_drain(cq, fd);
        }
    }
    return n;
}

/* Empty tw_cq_poll calls in a row on this thread, on any CQ. */
static TW_TLS unsigned tw_cq_empty_polls;

int tw_cq_poll(tw_cq_t *cq, tw_completion_t *out, int max)
{
    int n;

    if (cq == NULL || out == NULL || max < 0) {
        return -1;
    }
    n = tw_cq_take(cq, out, max);
    if (n > 0 || max == 0) {
        tw_cq_empty_polls = 0;
        return n;
    }
    /* Empty. With progress threads, drive what the caller may drive (the
     * transports' polls, under their engines' try-locks), as tw_cq_wait's
     * spin does, and look again: a worker spinning here then takes its
     * completions itself when the engine is idle or asleep, instead of
     * waiting for a progress thread that may share its CPU. */
    if (cq->poll_fn != NULL && cq->poll_fn(cq->progress_arg) > 0) {
        n = tw_cq_take(cq, out, max);
        if (n > 0) {
            tw_cq_empty_polls = 0;
            return n;
        }
    }
    /* A loop of empty polls must not keep the CPU from the thread it
     * waits for (a progress thread, or a thread holding an engine's lock
     * while descheduled): every TW_CQ_POLL_YIELD_EVERY empty polls in a
     * row, give the CPU away once. Without a runnable thread to take it,
     * sched_yield returns at once (~0.2 us per that many polls). */
    if (++tw_cq_empty_polls >= TW_CQ_POLL_YIELD_EVERY) {
        tw_cq_empty_polls = 0;
        sched_yield();
    }
    return 0;
}

/* Sleep on the futex word while it holds @p seq, until @p deadline. */
static void tw_cq_futex_wait(tw_cq_t *cq, unsigned seq, uint64_t deadline)
{
    struct timespec ts, *tsp = NULL;

    if (deadline != UINT64_MAX) {
        uint64_t now = tw_time_ns();
        if (now >= deadline) {
            return;
        }
        uint64_t rel = deadline - now;
        ts.tv_sec = (time_t)(rel / 1000000000u);
        ts.tv_nsec = (long)(rel % 1000000000u);
        tsp = &ts;
    }
    /* EAGAIN (woken before we slept), EINTR, ETIMEDOUT: the caller
     * re-polls and re-checks its deadline in every case. */
    syscall(SYS_futex, (void *)&cq->wake_seq, FUTEX_WAIT_PRIVATE, seq, tsp, NULL, 0);
}

/* Announce, re-poll, sleep: until a completion or @p deadline. */
static int tw_cq_wait_block(tw_cq_t *cq, tw_completion_t *out, int max, uint64_t deadline)
{
    if (cq->poll_fn != NULL) {
        tw_pe_lease_end(); /* the engines we polled watch their fds again */
    }
    for (;;) {
        unsigned seq = atomic_load_explicit(&cq->wake_seq, memory_order_acquire);
        int n;

        atomic_fetch_add_explicit(&cq->waiters, 1, memory_order_seq_cst);
        /* Store waiters / load p_tail: the waiter half of the Dekker pair. */
        atomic_thread_fence(memory_order_seq_cst);
        tw_ring_test_point();
        n = tw_cq_take(cq, out, max);
        if (n == 0) {
            tw_cq_futex_wait(cq, seq, deadline);
        }
        atomic_fetch_sub_explicit(&cq->waiters, 1, memory_order_relaxed);
        if (n == 0) {
            n = tw_cq_take(cq, out, max);
        }
        if (n > 0 || tw_time_ns() >= deadline) {
            return n;
        }
    }
}

/* Poll with back-off until a completion or @p until (@p now: the clock
 * when called). */
static int tw_cq_wait_spin(tw_cq_t *cq, tw_completion_t *out, int max, uint64_t now, uint64_t until)
{
    unsigned empty = 0;

    /* As a tw_cq_poll loop (cq-poll-drives.md): drive what the caller may,
     * look, and give the CPU away once every TW_CQ_POLL_YIELD_EVERY empty
     * turns -- never a sleep: the thread waited for (the progress thread,
     * the peer's) may share this CPU, and a back-off that ends in sleeps
     * makes the next arrival wait for the sleep. */
    for (;;) {
        int polled = 0;
        int n;

        if (cq->poll_fn != NULL) {
            /* The turn's one clock reading serves the leases it takes. */
            tw_pe_lease_clock(now);
            polled = cq->poll_fn(cq->progress_arg);
            tw_pe_lease_clock(0);
        }
        if (polled == 0) {
            if (++empty >= TW_CQ_POLL_YIELD_EVERY) {
                empty = 0;
                sched_yield();
            } else {
                tw_cpu_relax();
            }
        }
        n = tw_cq_take(cq, out, max);
        if (n > 0) {
            return n;
        }
        now = tw_time_ns();
        if (now >= until) {
            return 0;
        }
    }
}

/* Manual progress: drive progress_fn between polls; never sleep. */
static int tw_cq_wait_manual(tw_cq_t *cq, tw_completion_t *out, int max, uint64_t deadline)
{
    tw_backoff_t b = TW_BACKOFF_INIT;

    for (;;) {
        int events = cq->progress_fn(cq->progress_arg);
        int n = tw_cq_take(cq, out, max);

        if (n > 0 || tw_time_ns() >= deadline) {
            return n;
        }
        if (events > 0) {
            tw_backoff_reset(&b);
        } else {
            tw_backoff_wait(&b);
        }
    }
}

int tw_cq_wait(tw_cq_t *cq, tw_completion_t *out, int max, int timeout_ms)
{
    uint64_t now, deadline;
    int n;

    if (cq == NULL || out == NULL || max <= 0) {
        return -1;
    }
    n = tw_cq_take(cq, out, max);
    if (n > 0) {
        return n;
    }
    /* About to wait: no wake-up of ours may wait with us (a handler may
     * not block, but a batch must never be what a waiter waits for). */
    if (tw_cq_batch.depth > 0) {
        tw_cq_batch_flush(NULL);
    }
    now = tw_time_ns();
    deadline = tw_deadline_ms_after(now, timeout_ms);
    tw_pe_lease_forget(); /* what this thread polled before its wait */
    if (cq->progress_fn != NULL) {
        if (timeout_ms == 0) {
            (void)cq->progress_fn(cq->progress_arg);
            return tw_cq_take(cq, out, max);
        }
        return tw_cq_wait_manual(cq, out, max, deadline);
    }
    if (timeout_ms == 0) {
        return 0;
    }
    switch (cq->wait_mode) {
    case TW_WAIT_SPIN:
        return tw_cq_wait_spin(cq, out, max, now, deadline);
    case TW_WAIT_ADAPTIVE: {
        /* Spin while a CPU is free for the producer (spin slots), or
         * as the process's one driving spinner: a waiter that drives the
         * transports itself (poll_fn, with progress threads) is much of
         * its own producer, and its spin yields the CPU every
         * TW_CQ_POLL_YIELD_EVERY empty turns, so a progress thread sharing
         * the CPU still runs. More than one such spinner per process
         * only takes the CPU from the engine doing the transports' work
         * (docs/decisions/cq-poll-drives.md): the others sleep. */
        bool slot = tw_spin_slot_get();
        bool driver = !slot && cq->poll_fn != NULL && tw_spin_driver_get();
        if (slot || driver) {
            uint64_t until = deadline - now > cq->spin_ns ? now + cq->spin_ns : deadline;
            n = tw_cq_wait_spin(cq, out, max, now, until);
            if (slot) {
                tw_spin_slot_put();
            }
            if (driver) {
                tw_spin_driver_put();
            }
            if (n > 0 || until == deadline) {
                return n;
            }
        }
        return tw_cq_wait_block(cq, out, max, deadline);
    }
    case TW_WAIT_BLOCK:
    default:
        return tw_cq_wait_block(cq, out, max, deadline);
    }
}

int tw_cq_fd(tw_cq_t *cq)
{
    int fd, expected = -1;

    if (cq == NULL) {
        return -1;
    }
    fd = atomic_load_explicit(&cq->efd, memory_order_acquire);
    if (fd >= 0) {
        return fd;
    }
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        tw_error("cq", "cannot create an eventfd for completion queue %p: %m", (void *)cq);
        return -1;
    }
    if (!atomic_compare_exchange_strong_explicit(&cq->efd, &expected, fd, memory_order_seq_cst,
                                                 memory_order_acquire)) {
        close(fd); /* another thread installed one first */
        return expected;
    }
    /* Store efd / load p_tail, against the producers' commit / fence /
     * load efd: records pushed before a producer could see the fd are
     * signaled here. */
    atomic_thread_fence(memory_order_seq_cst);
    if (!tw_ring_cqe_empty(&cq->ring)) {
        tw_cq_fd_signal(cq, fd);
    }
    return fd;
}
