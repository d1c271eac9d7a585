/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Progress engines (see tw_pe.h for the model).
 *
 * Ownership. A pe is run by whoever holds its try-lock `lock` (an atomic
 * exchange): its own thread, or a tw_pe_progress caller in manual mode or
 * after the thread stopped. tw_pe_progress never waits for it -- a busy pe
 * is skipped -- and the thread holds it while it runs, letting go only
 * around sleeps and idle spins (where a waiting worker may take it for a
 * transport poll, tw_pe_try_call). `owner` names the holder for
 * tw_pe_is_owner.
 *
 * One loop body (tw_pe_run_locked) serves both: run up to a batch of
 * commands from the submission lanes, then every progress function, and
 * report how much was done.
 *
 * Submission lanes. The submission queue is multi-producer, single
 * consumer, but not one shared ring: a ring with ordered commits makes every
 * producer wait for the one before it, and on 2 cores with several workers
 * that producer is often preempted between reserve and commit (measured:
 * 4 workers fell from 2 M to 0.05 M submissions/s, all in commit waits).
 * Instead the pe has TW_PE_LANES rings, allocated on first use, and a
 * submitter uses lane tw_thread_index() % TW_PE_LANES: up to that many
 * live threads never wait for each other, and commands of one thread stay
 * in order. Threads that share a lane still work (each lane is an MP ring).
 * The owner visits every allocated lane each pass, starting at a rotating
 * lane for fairness.
 *
 * Sleeping without lost wake-ups (Dekker, as in tw_cq.c):
 *     owner thread                         submitter
 *     store(sleeping, 1)   [seq_cst]       enqueue (store p_tail)
 *     fence                [seq_cst]       fence               [seq_cst]
 *     run the loop body once more          if load(sleeping):
 *     if it did nothing: epoll_wait            write(doorbell)
 *     store(sleeping, 0); drain doorbell
 * Whichever fence comes second sees the other side's store: the owner's
 * last look finds the command, or the submitter rings. A doorbell rung
 * just after the owner woke only costs one spurious loop later. Fds
 * registered with tw_pe_add sit in the same epoll set (level-triggered),
 * and epoll_wait never sleeps more than a second, as a safety net.
 *
 * Stop: set `stop`, ring the doorbell unconditionally, join.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
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

TW_RING_DEFINE(cmd, tw_pe_cmd)

#define TW_PE_MAX_FNS         16
#define TW_PE_RING_DEFAULT    1024u
#define TW_PE_LANES           16u
#define TW_PE_SPIN_NS_DEFAULT 50000u
#define TW_PE_CMD_BATCH       64         /* commands per loop, then the functions */
#define TW_PE_SPIN_LOOPS      64         /* spin mode: empty loops before yielding */
#define TW_PE_SLEEP_MAX_MS    1000       /* epoll_wait safety net */
#define TW_PE_DOORBELL_TAG    0          /* epoll data of the doorbell; fns use i + 1 */
#define TW_PE_WATCH_TAG       UINT64_MAX /* epoll data of watched fds */
#define TW_PE_MAX_WORDS       4
#define TW_PE_EPOLL_EVENTS    (TW_PE_MAX_FNS + 1)
#define TW_PE_LEASE_NS        200000u /* a worker's poll keeps the engine aside this long */
#define TW_PE_LEASED_MAX      4       /* engines one thread leases during one wait */

static const tw_stat_desc_t tw_pe_stat_descs[TW_PE_STAT_COUNT] = {
    [TW_PE_STAT_LOOPS] = {.name = "loops", .kind = TW_STAT_COUNTER},
    [TW_PE_STAT_EVENTS] = {.name = "events", .kind = TW_STAT_COUNTER},
    [TW_PE_STAT_CMDS] = {.name = "cmds", .kind = TW_STAT_COUNTER},
    [TW_PE_STAT_SLEEPS] = {.name = "sleeps", .kind = TW_STAT_COUNTER},
    [TW_PE_STAT_DOORBELL] = {.name = "doorbell", .kind = TW_STAT_COUNTER},
    [TW_PE_STAT_AGAIN] = {.name = "again", .kind = TW_STAT_COUNTER},
};

typedef enum tw_pe_state {
    TW_PE_CREATED, /* tw_pe_add allowed */
    TW_PE_RUNNING, /* thread started */
    TW_PE_STOPPED  /* thread joined (or never had one and stop was called) */
} tw_pe_state_t;

typedef struct tw_pe_fn_entry {
    tw_pe_fn_t fn;
    void *arg;
    int fd; /* -1 = none */
} tw_pe_fn_entry_t;

struct tw_pe {
    /* Lanes: set once (CAS) by their first submitter, freed by destroy.
     * Thread: any enqueues; the lock holder dequeues. */
    _Atomic(tw_ring_cmd_t *) lanes[TW_PE_LANES];
    unsigned lane_depth;
    unsigned next_lane; /* lock holder only */

    /* Try-lock of the pe: who runs it. */
    atomic_uint lock TW_ALIGNED(TW_CACHELINE); /* 0 free, 1 held */
    atomic_uint owner;                         /* tw_thread_index() + 1 of the holder */

    /* Read by every submitter; written by the thread around its sleeps. */
    atomic_uint sleeping TW_ALIGNED(TW_CACHELINE);
    atomic_uint stop;

    /* 1 once a submitter's command is in a lane; the lock holder clears it
     * before it looks at the lanes, and skips them while it is 0 (a pass
     * of a spinning engine would otherwise load 16 lanes' tails). */
    atomic_uint cmds_pending TW_ALIGNED(TW_CACHELINE);

    /* Until when (tw_time_ns) waiting workers poll this engine's
     * transports for themselves (tw_pe_lease; 0: nobody), and 1 while the
     * thread sleeps aside from those transports' fds meanwhile. */
    _Atomic uint64_t lease TW_ALIGNED(TW_CACHELINE);
    atomic_uint aside;

    /* Immutable after tw_pe_start (fns: written by the creator before). */
    int doorbell_fd TW_ALIGNED(TW_CACHELINE);
    int epoll_fd;
    bool thread;
    tw_wait_mode_t wait_mode;
    uint64_t spin_ns;
    int bind_package;
    char *name;
    tw_stats_t *stats;
    unsigned nfns;
    tw_pe_fn_entry_t fns[TW_PE_MAX_FNS];
    unsigned nwords;
    _Atomic uint32_t *words[TW_PE_MAX_WORDS]; /* mirrors of `sleeping` */
    bool workers_poll;                        /* adaptive: sleep at once when idle */
    int aside_fd;     /* epoll set of the doorbell and the functions' fds, no watched fd */
    uint64_t wakeups; /* lock holder only */
    uint64_t pass_ns; /* lock holder only: the coarse clock at the pass's start */
    /* Passes and their events: written by the lock holder only (no
     * atomic add on every pass of a spinning engine), summed into the
     * stats on read (tw_pe_stats_source). */
    _Atomic uint64_t loops, events;

    /* Creator thread only (start/stop/destroy are not concurrent). */
    tw_pe_state_t state;
    pthread_t tid_handle;

    /* Written by the thread before it sets `ready` (release); read after. */
    atomic_uint ready;
    atomic_int tid;
    char binding[64];
};

/* ---- try-lock ---------------------------------------------------------- */

static inline bool tw_pe_trylock(tw_pe_t *pe)
{
    if (atomic_load_explicit(&pe->lock, memory_order_relaxed) != 0 ||
        atomic_exchange_explicit(&pe->lock, 1, memory_order_acquire) != 0) {
        return false;
    }
    atomic_store_explicit(&pe->owner, tw_thread_index() + 1, memory_order_relaxed);
    return true;
}

/* The thread (and destroy) may wait for a manual caller to finish its
 * pass, which is short; anyone else uses tw_pe_trylock. */
static void tw_pe_lock_wait(tw_pe_t *pe)
{
    tw_backoff_t b = TW_BACKOFF_INIT;

    while (!tw_pe_trylock(pe)) {
        tw_backoff_wait(&b);
    }
}

static inline void tw_pe_unlock(tw_pe_t *pe)
{
    atomic_store_explicit(&pe->owner, 0, memory_order_relaxed);
    atomic_store_explicit(&pe->lock, 0, memory_order_release);
}

uint64_t tw_pe_pass_coarse_ns(const tw_pe_t *pe)
{
    /* Not inside a pass of this pe (a test driving a transport directly):
     * a reading of its own. */
    if (TW_UNLIKELY(!tw_pe_is_owner(pe))) {
        return tw_time_coarse_ns();
    }
    return pe->pass_ns;
}

bool tw_pe_is_owner(const tw_pe_t *pe)
{
    return atomic_load_explicit(&pe->owner, memory_order_relaxed) == tw_thread_index() + 1;
}

/* ---- the loop body ------------------------------------------------------ */

/* Run up to @p max commands; returns how many ran. @p all: look at every
 * lane whatever cmds_pending says. Thread: lock holder.
 *     submitter                          lock holder
 *     commit the command (p_tail)        store(cmds_pending, 0)
 *     fence [seq_cst] (enqueue_mp)       fence [seq_cst]
 *     store(cmds_pending, 1) [seq_cst]   load every lane's p_tail
 * A submitter whose 1 the holder's 0 overwrote committed before it: the
 * fences order that commit before the holder's loads, so the scan finds
 * it. One that stores its 1 after the 0 is seen by the next pass. */
static unsigned tw_pe_run_cmds_locked(tw_pe_t *pe, unsigned max, bool all)
{
    tw_pe_cmd_t cmd;
    unsigned n = 0, start = pe->next_lane;

    if (!all) {
        if (atomic_load_explicit(&pe->cmds_pending, memory_order_relaxed) == 0) {
            return 0;
        }
        atomic_store_explicit(&pe->cmds_pending, 0, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
    }

    for (unsigned k = 0; k < TW_PE_LANES && n < max; k++) {
        unsigned i = (start + k) % TW_PE_LANES;
        tw_ring_cmd_t *lane = atomic_load_explicit(&pe->lanes[i], memory_order_acquire);

        if (lane == NULL) {
            continue;
        }
        while (n < max && tw_ring_cmd_dequeue_sc(lane, &cmd)) {
            cmd.fn(cmd.arg, cmd.data, cmd.u64);
            n++;
        }
    }
    pe->next_lane = (start + 1) % TW_PE_LANES;
    if (n > 0) {
        tw_stats_add(pe->stats, TW_PE_STAT_CMDS, n);
        if (n >= max) {
            /* Stopped at the batch: there may be more for the next pass. */
            atomic_store_explicit(&pe->cmds_pending, 1, memory_order_relaxed);
        }
    }
    return n;
}

/* One pass: commands, then every progress function. Returns the work
 * done (commands run + events reported). Thread: lock holder. */
static uint64_t tw_pe_stats_source(void *arg, unsigned id)
{
    const tw_pe_t *pe = arg;

    switch (id) {
    case TW_PE_STAT_LOOPS:
        return atomic_load_explicit(&pe->loops, memory_order_relaxed);
    case TW_PE_STAT_EVENTS:
        return atomic_load_explicit(&pe->events, memory_order_relaxed);
    default:
        return 0;
    }
}

static int tw_pe_run_locked(tw_pe_t *pe)
{
    int events = 0;
    unsigned ncmd;

    pe->pass_ns = tw_time_coarse_ns();
    /* A sleeping worker is woken once per pass, after it (tw_cq.h). */
    tw_cq_batch_begin();
    ncmd = tw_pe_run_cmds_locked(pe, TW_PE_CMD_BATCH, false);
    for (unsigned i = 0; i < pe->nfns; i++) {
        int r = pe->fns[i].fn(pe->fns[i].arg);
        if (r > 0) {
            events += r;
        }
    }
    tw_cq_batch_end();
    atomic_store_explicit(&pe->loops, atomic_load_explicit(&pe->loops, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (events > 0) {
        atomic_store_explicit(
            &pe->events, atomic_load_explicit(&pe->events, memory_order_relaxed) + (uint64_t)events,
            memory_order_relaxed);
    }
    return events + (int)ncmd;
}

int tw_pe_progress(tw_pe_t *pe)
{
    int n;

    if (!tw_pe_trylock(pe)) {
        return 0;
    }
    n = tw_pe_run_locked(pe);
    tw_pe_unlock(pe);
    return n;
}

#if TW_TESTING
static atomic_uint tw_pe_submit_fails; /* test hook: hand-overs that find no lane */

unsigned tw_pe_test_submit_fail(unsigned n)
{
    return atomic_exchange_explicit(&tw_pe_submit_fails, n, memory_order_relaxed);
}

/* The hook's next failure, if one is due. */
static bool tw_pe_submit_fail_now(void)
{
    unsigned n = atomic_load_explicit(&tw_pe_submit_fails, memory_order_relaxed);

    while (n > 0) {
        if (atomic_compare_exchange_weak_explicit(&tw_pe_submit_fails, &n, n - 1,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            return true;
        }
    }
    return false;
}
#else
static bool tw_pe_submit_fail_now(void)
{
    return false;
}
#endif

static int tw_pe_run_cmd(void *arg)
{
    const tw_pe_cmd_t *cmd = arg;

    cmd->fn(cmd->arg, cmd->data, cmd->u64);
    return 1;
}

void tw_pe_hand_over(tw_pe_t *pe, const tw_pe_cmd_t *cmd)
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    tw_pe_cmd_t copy = *cmd;
    tw_status_t st;

    if (tw_pe_is_owner(pe)) {
        (void)tw_pe_run_cmd(&copy);
        return;
    }
    st = TW_UNLIKELY(tw_pe_submit_fail_now()) ? TW_ERR_NOMEM : tw_pe_submit(pe, cmd);
    while (st == TW_ERR_AGAIN) {
        /* A progress thread drains the lane; in manual mode we do. */
        if (!pe->thread) {
            tw_pe_progress(pe);
        }
        tw_backoff_wait(&b);
        st = tw_pe_submit(pe, cmd);
    }
    if (st == TW_OK) {
        return;
    }
    tw_warn("progress", "no submission lane to %s: running the command as its owner", pe->name);
    tw_backoff_reset(&b);
    while (tw_pe_try_call(pe, tw_pe_run_cmd, &copy) == 0) {
        tw_backoff_wait(&b);
    }
}

int tw_pe_try_call(tw_pe_t *pe, tw_pe_fn_t fn, void *arg)
{
    int n;

    if (!tw_pe_trylock(pe)) {
        return 0;
    }
    tw_cq_batch_begin();
    n = fn(arg);
    tw_cq_batch_end();
    tw_pe_unlock(pe);
    return n;
}

bool tw_pe_has_thread(const tw_pe_t *pe)
{
    return pe->thread;
}

/* ---- doorbell ----------------------------------------------------------- */

static void tw_pe_ring_doorbell(tw_pe_t *pe)
{
    uint64_t one = 1;
    ssize_t r = write(pe->doorbell_fd, &one, sizeof(one));

    /* EAGAIN only if the counter would overflow 2^64-2: never. */
    (void)r;
}

static void tw_pe_drain_doorbell(tw_pe_t *pe)
{
    uint64_t v;
    ssize_t r = read(pe->doorbell_fd, &v, sizeof(v));

    (void)r; /* EAGAIN: nothing to drain */
}

/* After publishing work and a seq_cst fence: ring only if the owner
 * announced it sleeps. */
static inline void tw_pe_kick_fenced(tw_pe_t *pe)
{
    /* seq_cst: after tw_pe_submit's seq_cst store of cmds_pending, a
     * store/load pair of its own against the sleeper's. */
    if (atomic_load_explicit(&pe->sleeping, memory_order_seq_cst) != 0) {
        tw_pe_ring_doorbell(pe);
        tw_stats_inc(pe->stats, TW_PE_STAT_DOORBELL);
    }
}

/* The caller's lane, allocated on its first use. NULL: out of memory. */
static tw_ring_cmd_t *tw_pe_lane(tw_pe_t *pe)
{
    unsigned i = tw_thread_index() % TW_PE_LANES;
    tw_ring_cmd_t *lane = atomic_load_explicit(&pe->lanes[i], memory_order_acquire), *expected;

    if (TW_LIKELY(lane != NULL)) {
        return lane;
    }
    lane = tw_malloc_aligned(TW_CACHELINE, sizeof(*lane));
    if (lane == NULL) {
        return NULL;
    }
    if (tw_ring_cmd_init(lane, pe->lane_depth) != TW_OK) {
        tw_free_aligned(lane, TW_CACHELINE, sizeof(*lane));
        return NULL;
    }
    expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&pe->lanes[i], &expected, lane,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        tw_ring_cmd_cleanup(lane); /* another thread of this lane won */
        tw_free_aligned(lane, TW_CACHELINE, sizeof(*lane));
        lane = expected;
    }
    return lane;
}

tw_status_t tw_pe_submit(tw_pe_t *pe, const tw_pe_cmd_t *cmd)
{
    tw_ring_cmd_t *lane = tw_pe_lane(pe);

    if (TW_UNLIKELY(lane == NULL)) {
        tw_error("progress", "cannot allocate a submission lane of %s (%u entries)", pe->name,
                 pe->lane_depth);
        return TW_ERR_NOMEM;
    }
    if (!tw_ring_cmd_enqueue_mp(lane, cmd)) {
        tw_stats_inc(pe->stats, TW_PE_STAT_AGAIN);
        return TW_ERR_AGAIN;
    }
    /* After the commit and the enqueue's seq_cst fence (tw_ring_commit_mp):
     * see tw_pe_run_cmds_locked. Then store cmds_pending / load sleeping,
     * both seq_cst, against the sleeper's store sleeping / fence / pass. */
    atomic_store_explicit(&pe->cmds_pending, 1, memory_order_seq_cst);
    tw_pe_kick_fenced(pe);
    return TW_OK;
}

void tw_pe_wake(tw_pe_t *pe)
{
    /* The caller's own publication / load sleeping. */
    atomic_thread_fence(memory_order_seq_cst);
    tw_pe_kick_fenced(pe);
}

/* ---- the progress thread ------------------------------------------------ */

/* The flag, and (but aside) its mirrors in shared memory that other
 * processes read before they wake us through a watched fd. */
static void tw_pe_set_sleeping(tw_pe_t *pe, uint32_t v, bool aside)
{
    atomic_store_explicit(&pe->sleeping, v, memory_order_seq_cst);
    atomic_store_explicit(&pe->aside, v & aside, memory_order_seq_cst);
    for (unsigned i = 0; i < pe->nwords && !aside; i++) {
        atomic_store_explicit(pe->words[i], v, memory_order_seq_cst);
    }
}

/* Announce, look once more, sleep in epoll. Called with the lock held;
 * returns with it held. @p aside (workers poll our transports: see
 * tw_pe_lease): sleep until the lease ends at the latest, on the
 * doorbell and the functions' fds (timers) only, not on the watched fds
 * (sockets, pidfds) the workers take in -- each arrival there would wake
 * us to find it taken, on a CPU the worker needs -- and not mirrored into
 * the shared sleep words (the workers poll shared memory too). The
 * lease's end rings the doorbell after a look at `aside` (Dekker). */
static void tw_pe_sleep_locked(tw_pe_t *pe, bool aside)
{
    struct epoll_event ev[TW_PE_EPOLL_EVENTS];
    uint64_t until = 0, now = 0;
    int n;

    tw_pe_set_sleeping(pe, 1, aside);
    /* Store sleeping / load p_tail: the owner half of the Dekker pair. */
    atomic_thread_fence(memory_order_seq_cst);
    if (aside) {
        now = tw_time_ns();
        until = atomic_load_explicit(&pe->lease, memory_order_relaxed);
    }
    if (atomic_load_explicit(&pe->stop, memory_order_acquire) != 0 || (aside && until <= now) ||
        tw_pe_run_locked(pe) > 0) {
        tw_pe_set_sleeping(pe, 0, aside);
        return;
    }
    tw_stats_inc(pe->stats, TW_PE_STAT_SLEEPS);
    pe->wakeups++;
    tw_pe_unlock(pe);
    if (aside) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)TW_MIN(until - now, 999999999u)};
        n = epoll_pwait2(pe->aside_fd, ev, TW_PE_EPOLL_EVENTS, &ts, NULL);
        if (n < 0 && errno == ENOSYS) {
            n = epoll_wait(pe->aside_fd, ev, TW_PE_EPOLL_EVENTS, 1); /* before Linux 5.11 */
        }
    } else {
        n = epoll_wait(pe->epoll_fd, ev, TW_PE_EPOLL_EVENTS, TW_PE_SLEEP_MAX_MS);
    }
    tw_pe_set_sleeping(pe, 0, aside);
    if (n < 0 && errno != EINTR) {
        tw_warn("progress", "epoll_wait on progress engine %s failed: %m", pe->name);
    }
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u64 == TW_PE_DOORBELL_TAG) {
            tw_pe_drain_doorbell(pe);
        }
    }
    tw_pe_lock_wait(pe);
}

/* True when waiting workers poll @p pe's transports (tw_pe_lease). */
static bool tw_pe_leased(tw_pe_t *pe)
{
    uint64_t until = atomic_load_explicit(&pe->lease, memory_order_relaxed);

    return pe->workers_poll && pe->wait_mode != TW_WAIT_SPIN && until != 0 && until > tw_time_ns();
}

static void tw_pe_thread_setup(tw_pe_t *pe)
{
    char tname[16];

    snprintf(tname, sizeof(tname), "tw-%s", pe->name); /* truncated to 15 */
    pthread_setname_np(pthread_self(), tname);
    atomic_store_explicit(&pe->tid, tw_gettid(), memory_order_relaxed);
    snprintf(pe->binding, sizeof(pe->binding), "unbound");
    if (pe->bind_package >= 0) {
        char text[sizeof(pe->binding)];
        tw_status_t st = tw_topo_bind_package(pe->bind_package, text, sizeof(text));
        if (st == TW_OK) {
            snprintf(pe->binding, sizeof(pe->binding), "%s", text);
        } else {
            tw_warn("progress",
                    "cannot bind progress thread %s to package %d (%s); running unbound", pe->name,
                    pe->bind_package, tw_strerror(st));
        }
    }
}

static void *tw_pe_thread_main(void *arg)
{
    tw_pe_t *pe = arg;
    tw_backoff_t b = TW_BACKOFF_INIT;
    uint64_t idle_since = 0;
    unsigned idle_loops = 0;
    bool spinning = false; /* holds a spin slot */

    tw_pe_thread_setup(pe);
    /* Release: binding and tid are visible to tw_pe_start's caller. */
    atomic_store_explicit(&pe->ready, 1, memory_order_release);

    tw_pe_lock_wait(pe);
    while (atomic_load_explicit(&pe->stop, memory_order_acquire) == 0) {
        if (tw_pe_run_locked(pe) > 0) {
            if (spinning) {
                tw_spin_slot_put();
                spinning = false;
            }
            idle_loops = 0;
            idle_since = 0;
            tw_backoff_reset(&b);
            continue;
        }
        bool aside = tw_pe_leased(pe);
        switch (aside ? TW_WAIT_BLOCK : pe->wait_mode) {
        case TW_WAIT_SPIN:
            /* Never sleeps, but yields: a spinner may share its core
             * with the very thread it waits for. */
            tw_pe_unlock(pe); /* a waiting worker may poll meanwhile */
            if (++idle_loops > TW_PE_SPIN_LOOPS) {
                sched_yield();
            } else {
                tw_cpu_relax();
            }
            tw_pe_lock_wait(pe);
            break;
        case TW_WAIT_ADAPTIVE: {
            uint64_t now = tw_time_ns();
            if (idle_since == 0) {
                idle_since = now;
                /* Spin only while a CPU is free (see tw_spin_slot_get),
                 * and leave the spinning to waiting workers when they
                 * poll for themselves (tw_pe_workers_poll). */
                spinning = !pe->workers_poll && tw_spin_slot_get();
            }
            if (spinning && now - idle_since < pe->spin_ns) {
                tw_pe_unlock(pe); /* a waiting worker may poll meanwhile */
                tw_backoff_wait(&b);
                tw_pe_lock_wait(pe);
                break;
            }
            if (pe->workers_poll && now - idle_since < pe->spin_ns) {
                /* No spin slot: stay awake for bursts, but only yield. */
                tw_pe_unlock(pe);
                sched_yield();
                tw_pe_lock_wait(pe);
                break;
            }
            if (spinning) {
                tw_spin_slot_put();
                spinning = false;
            }
            tw_pe_sleep_locked(pe, false);
            idle_since = 0;
            tw_backoff_reset(&b);
            break;
        }
        case TW_WAIT_BLOCK:
        default:
            if (spinning) { /* adaptive, leased meanwhile */
                tw_spin_slot_put();
                spinning = false;
            }
            tw_pe_sleep_locked(pe, aside);
            idle_since = 0;
            tw_backoff_reset(&b);
            break;
        }
    }
    if (spinning) {
        tw_spin_slot_put();
    }
    tw_pe_unlock(pe);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

tw_status_t tw_pe_create(const tw_pe_params_t *params, tw_pe_t **pe_p)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TW_PE_DOORBELL_TAG};
    const char *name;
    tw_status_t st;
    tw_pe_t *pe;

    if (params == NULL || pe_p == NULL) {
        tw_error("progress", "tw_pe_create: NULL %s", params == NULL ? "params" : "pe_p");
        return TW_ERR_INVALID;
    }
    if ((unsigned)params->wait_mode > (unsigned)TW_WAIT_BLOCK) {
        tw_error("progress", "progress engine wait mode %d unknown", (int)params->wait_mode);
        return TW_ERR_INVALID;
    }
    name = params->name != NULL ? params->name : "pe";

    pe = tw_malloc_aligned(TW_CACHELINE, sizeof(*pe));
    if (pe == NULL) {
        tw_error("progress", "cannot allocate progress engine %s", name);
        return TW_ERR_NOMEM;
    }
    memset(pe, 0, sizeof(*pe));
    atomic_init(&pe->lock, 0);
    atomic_init(&pe->owner, 0);
    atomic_init(&pe->loops, 0);
    atomic_init(&pe->events, 0);
    atomic_init(&pe->sleeping, 0);
    atomic_init(&pe->cmds_pending, 0);
    atomic_init(&pe->stop, 0);
    atomic_init(&pe->lease, 0);
    atomic_init(&pe->aside, 0);
    pe->aside_fd = -1;
    atomic_init(&pe->ready, 0);
    atomic_init(&pe->tid, 0);
    pe->thread = params->thread;
    pe->wait_mode = params->wait_mode;
    pe->spin_ns = params->spin_ns != 0 ? params->spin_ns : TW_PE_SPIN_NS_DEFAULT;
    pe->bind_package = params->bind_package;
    pe->state = TW_PE_CREATED;
    snprintf(pe->binding, sizeof(pe->binding), "unbound");

    pe->name = tw_strdup(name);
    if (pe->name == NULL) {
        tw_error("progress", "cannot allocate progress engine %s", name);
        st = TW_ERR_NOMEM;
        goto err_free;
    }
    pe->lane_depth = params->ring_depth != 0 ? params->ring_depth : TW_PE_RING_DEFAULT;
    for (unsigned i = 0; i < TW_PE_LANES; i++) {
        atomic_init(&pe->lanes[i], NULL);
    }
    pe->next_lane = 0;
    pe->stats = tw_stats_create(name, tw_pe_stat_descs, TW_PE_STAT_COUNT);
    if (pe->stats == NULL) {
        tw_error("progress", "cannot allocate counters of progress engine %s", name);
        st = TW_ERR_NOMEM;
        goto err_name;
    }
    tw_stats_set_source(pe->stats, tw_pe_stats_source, pe);
    pe->doorbell_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (pe->doorbell_fd < 0) {
        tw_error("progress", "eventfd for progress engine %s failed: %m", name);
        st = TW_ERR_TRANSPORT;
        goto err_stats;
    }
    pe->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (pe->epoll_fd < 0) {
        tw_error("progress", "epoll_create1 for progress engine %s failed: %m", name);
        st = TW_ERR_TRANSPORT;
        goto err_doorbell;
    }
    pe->aside_fd = epoll_create1(EPOLL_CLOEXEC);
    if (pe->aside_fd < 0 || epoll_ctl(pe->epoll_fd, EPOLL_CTL_ADD, pe->doorbell_fd, &ev) != 0 ||
        epoll_ctl(pe->aside_fd, EPOLL_CTL_ADD, pe->doorbell_fd, &ev) != 0) {
        tw_error("progress", "epoll set of progress engine %s: %m", name);
        st = TW_ERR_TRANSPORT;
        goto err_epoll;
    }
    *pe_p = pe;
    return TW_OK;

err_epoll:
    if (pe->aside_fd >= 0) {
        close(pe->aside_fd);
    }
    close(pe->epoll_fd);
err_doorbell:
    close(pe->doorbell_fd);
err_stats:
    tw_stats_destroy(pe->stats);
err_name:
    tw_free(pe->name, strlen(pe->name) + 1);
err_free:
    tw_free_aligned(pe, TW_CACHELINE, sizeof(*pe));
    return st;
}

tw_status_t tw_pe_add(tw_pe_t *pe, tw_pe_fn_t fn, void *arg, int fd)
{
    if (pe == NULL || fn == NULL) {
        tw_error("progress", "tw_pe_add: NULL %s", pe == NULL ? "pe" : "fn");
        return TW_ERR_INVALID;
    }
    if (pe->state != TW_PE_CREATED) {
        tw_error("progress", "tw_pe_add on %s after start", pe->name);
        return TW_ERR_INVALID;
    }
    if (pe->nfns == TW_PE_MAX_FNS) {
        tw_error("progress", "progress engine %s holds %d functions already", pe->name,
                 TW_PE_MAX_FNS);
        return TW_ERR_INVALID;
    }
    if (fd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = pe->nfns + 1};
        if (epoll_ctl(pe->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0 ||
            epoll_ctl(pe->aside_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            tw_error("progress", "epoll_ctl(fd %d) for progress engine %s failed: %m", fd,
                     pe->name);
            return TW_ERR_TRANSPORT;
        }
    }
    pe->fns[pe->nfns] = (tw_pe_fn_entry_t){.fn = fn, .arg = arg, .fd = fd};
    pe->nfns++;
    return TW_OK;
}

tw_status_t tw_pe_watch(tw_pe_t *pe, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TW_PE_WATCH_TAG};

    if (epoll_ctl(pe->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        tw_error("progress", "epoll_ctl(watch fd %d) for progress engine %s failed: %m", fd,
                 pe->name);
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

tw_status_t tw_pe_watch_out(tw_pe_t *pe, int fd, bool on)
{
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0u), .data.u64 = TW_PE_WATCH_TAG};

    if (epoll_ctl(pe->epoll_fd, EPOLL_CTL_MOD, fd, &ev) != 0) {
        tw_error("progress", "epoll_ctl(watch fd %d for writing) for progress engine %s failed: %m",
                 fd, pe->name);
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

void tw_pe_unwatch(tw_pe_t *pe, int fd)
{
    (void)epoll_ctl(pe->epoll_fd, EPOLL_CTL_DEL, fd, NULL);
}

tw_status_t tw_pe_add_sleep_word(tw_pe_t *pe, void *word_)
{
    _Atomic uint32_t *word = word_;

    if (pe->state != TW_PE_CREATED || pe->nwords == TW_PE_MAX_WORDS) {
        tw_error("progress", "tw_pe_add_sleep_word on %s: after start or too many", pe->name);
        return TW_ERR_INVALID;
    }
    atomic_store_explicit(word, 0, memory_order_relaxed);
    pe->words[pe->nwords++] = word;
    return TW_OK;
}

tw_status_t tw_pe_workers_poll(tw_pe_t *pe)
{
    if (pe->state != TW_PE_CREATED) {
        return TW_ERR_INVALID;
    }
    pe->workers_poll = true;
    return TW_OK;
}

/* The engines this thread leased during its current wait. */
static TW_TLS tw_pe_t *tw_pe_leased_by_me[TW_PE_LEASED_MAX];
static TW_TLS unsigned tw_pe_nleased;

/* The clock as this thread's waiter read it for its current polls (0:
 * none). A stale reading shortens a lease, never lengthens it. */
static TW_TLS uint64_t tw_pe_lease_now;

void tw_pe_lease_clock(uint64_t now)
{
    tw_pe_lease_now = now;
}

void tw_pe_lease(tw_pe_t *pe)
{
    uint64_t until, cur;
    unsigned i;

    if (!pe->workers_poll || !pe->thread) {
        return;
    }
    until = (tw_pe_lease_now != 0 ? tw_pe_lease_now : tw_time_ns()) + TW_PE_LEASE_NS;
    cur = atomic_load_explicit(&pe->lease, memory_order_relaxed);
    if (until > cur + TW_PE_LEASE_NS / 4) { /* a store per quarter lease, not per poll */
        atomic_store_explicit(&pe->lease, until, memory_order_relaxed);
    }
    for (i = 0; i < tw_pe_nleased && tw_pe_leased_by_me[i] != pe; i++) {
    }
    if (i == tw_pe_nleased && i < TW_PE_LEASED_MAX) {
        tw_pe_leased_by_me[tw_pe_nleased++] = pe;
    }
}

void tw_pe_lease_forget(void)
{
    tw_pe_nleased = 0;
}

void tw_pe_lease_break(tw_pe_t *pe)
{
    if (atomic_load_explicit(&pe->lease, memory_order_relaxed) == 0) {
        return;
    }
    atomic_store_explicit(&pe->lease, 0, memory_order_seq_cst);
    /* Store lease / load aside: against tw_pe_sleep_locked's (aside). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&pe->aside, memory_order_relaxed) != 0) {
        tw_stats_inc(pe->stats, TW_PE_STAT_DOORBELL);
        tw_pe_ring_doorbell(pe);
    }
}

void tw_pe_lease_end(void)
{
    for (unsigned i = 0; i < tw_pe_nleased; i++) {
        tw_pe_lease_break(tw_pe_leased_by_me[i]);
    }
    tw_pe_nleased = 0;
}

uint64_t tw_pe_wakeups(const tw_pe_t *pe)
{
    return pe->wakeups;
}

tw_status_t tw_pe_start(tw_pe_t *pe)
{
    tw_backoff_t b = TW_BACKOFF_INIT;
    int rc;

    if (pe == NULL || pe->state != TW_PE_CREATED) {
        tw_error("progress", "tw_pe_start: %s", pe == NULL ? "NULL pe" : "started twice");
        return TW_ERR_INVALID;
    }
    if (!pe->thread) {
        return TW_OK; /* manual mode: callers drive tw_pe_progress */
    }
    rc = pthread_create(&pe->tid_handle, NULL, tw_pe_thread_main, pe);
    if (rc != 0) {
        errno = rc;
        tw_error("progress", "cannot start progress thread %s: %m", pe->name);
        return TW_ERR_TRANSPORT;
    }
    pe->state = TW_PE_RUNNING;
    /* Return once the thread is named, bound and has its tid. */
    while (atomic_load_explicit(&pe->ready, memory_order_acquire) == 0) {
        tw_backoff_wait(&b);
    }
    return TW_OK;
}

void tw_pe_stop(tw_pe_t *pe)
{
    tw_assert(pe == NULL || !tw_pe_is_owner(pe)); /* would join itself */
    if (pe == NULL || pe->state != TW_PE_RUNNING) {
        if (pe != NULL) {
            pe->state = TW_PE_STOPPED;
        }
        return;
    }
    atomic_store_explicit(&pe->stop, 1, memory_order_seq_cst);
    tw_pe_ring_doorbell(pe); /* unconditionally: it may be about to sleep */
    pthread_join(pe->tid_handle, NULL);
    atomic_store_explicit(&pe->tid, 0, memory_order_relaxed);
    pe->state = TW_PE_STOPPED;
}

unsigned tw_pe_run_cmd_batch(tw_pe_t *pe)
{
    unsigned n;

    tw_pe_lock_wait(pe);
    n = tw_pe_run_cmds_locked(pe, TW_PE_CMD_BATCH, true);
    tw_pe_unlock(pe);
    return n;
}

void tw_pe_destroy(tw_pe_t *pe)
{
    if (pe == NULL) {
        return;
    }
    tw_pe_stop(pe);
    while (tw_pe_run_cmd_batch(pe) > 0) { /* what is still queued; commands may queue more */
    }

    close(pe->epoll_fd);
    close(pe->aside_fd);
    close(pe->doorbell_fd);
    tw_stats_destroy(pe->stats);
    for (unsigned i = 0; i < TW_PE_LANES; i++) {
        tw_ring_cmd_t *lane = atomic_load_explicit(&pe->lanes[i], memory_order_acquire);
        if (lane != NULL) {
            tw_ring_cmd_cleanup(lane);
            tw_free_aligned(lane, TW_CACHELINE, sizeof(*lane));
        }
    }
    tw_free(pe->name, strlen(pe->name) + 1);
    tw_free_aligned(pe, TW_CACHELINE, sizeof(*pe));
}

/* ---- introspection ------------------------------------------------------ */

tw_stats_t *tw_pe_stats(tw_pe_t *pe)
{
    return pe->stats;
}

const char *tw_pe_name(const tw_pe_t *pe)
{
    return pe->name;
}

int tw_pe_tid(const tw_pe_t *pe)
{
    return atomic_load_explicit(&pe->tid, memory_order_relaxed);
}

const char *tw_pe_binding(const tw_pe_t *pe)
{
    /* Written by the thread before `ready`; tw_pe_start waited for it. */
    return pe->binding;
}
