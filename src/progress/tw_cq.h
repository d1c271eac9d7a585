/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Completion queue internals (the public half is in threadwire.h:
 * tw_cq_poll, tw_cq_wait, tw_cq_fd, tw_cq_destroy are implemented in
 * tw_cq.c; tw_cq_create lives in the runtime because it validates the
 * context).
 *
 * Producer protocol (every layer that completes operations):
 *   1. at post time, tw_cq_reserve(cq) -- TW_ERR_AGAIN when depth
 *      operations are already outstanding; return that to the caller;
 *   2. if the post then fails, tw_cq_unreserve(cq);
 *   3. when the operation finishes, tw_cq_push(cq, &completion) exactly
 *      once. It never fails and never blocks for long: the reservation
 *      guarantees ring space.
 */
#ifndef TW_CQ_H
#define TW_CQ_H

#include <stdbool.h>

#include "core/tw_stats.h"
#include "threadwire/threadwire.h"

/* Counters of the group passed in tw_cq_params_t.stats (may be shared by
 * all CQs of a context). */
enum {
    TW_CQ_STAT_PUSHED,    /* completions pushed */
    TW_CQ_STAT_WAKEUPS,   /* futex/eventfd wake-ups paid by producers */
    TW_CQ_STAT_DEPTH_HWM, /* most outstanding operations seen on one CQ */
    TW_CQ_STAT_AGAIN,     /* reservations refused (CQ full) */
    TW_CQ_STAT_COUNT
};
extern const tw_stat_desc_t tw_cq_stat_descs[TW_CQ_STAT_COUNT];

typedef struct tw_cq_params {
    unsigned depth;           /* 1 .. TW_CQ_DEPTH_MAX */
    tw_wait_mode_t wait_mode; /* how tw_cq_wait waits */
    uint64_t spin_ns;         /* adaptive: spin this long before sleeping */
    /* Manual mode: tw_cq_wait calls this between polls instead of
     * sleeping (it drives progress); NULL when progress threads run. */
    int (*progress_fn)(void *arg);
    void *progress_arg;
    /* Thread mode: tw_cq_wait calls this while it spins (never in place
     * of sleeping): the waiting thread polls transports itself when the
     * progress thread is idle (tw_pe_try_call). May be NULL. Same arg. */
    int (*poll_fn)(void *arg);
    void *owner;       /* the context; only compared, never used */
    tw_stats_t *stats; /* optional, tw_cq_stat_descs layout */
} tw_cq_params_t;

#define TW_CQ_DEPTH_MAX (1u << 20)

/** Create a CQ. TW_ERR_INVALID for depth 0 or > max; TW_ERR_NOMEM. */
tw_status_t tw_cq_open(const tw_cq_params_t *params, tw_cq_t **cq_p);
void *tw_cq_owner(const tw_cq_t *cq);

/** Reserve room for one completion. Thread: any. */
tw_status_t tw_cq_reserve(tw_cq_t *cq);
/** Give back a reservation whose operation was never posted. Thread: any. */
void tw_cq_unreserve(tw_cq_t *cq);
/** Deliver a completion against an earlier reservation; wakes waiters only
 * if one is announced. Thread: any. */
void tw_cq_push(tw_cq_t *cq, const tw_completion_t *c);
/** Take up to @p max completions the CQ holds now: tw_cq_poll without
 * driving progress when it is empty (and without counting it as an
 * empty poll). For the library's own looks at a CQ it will wait on
 * anyway. Thread: any. */
int tw_cq_take(tw_cq_t *cq, tw_completion_t *out, int max);

/** A batch of pushes on this thread: between begin and end, a push that
 * finds a waiter leaves the futex wake-up (and its own "done" mark) for
 * end, once per CQ -- so a progress pass that completes 32 operations
 * wakes a sleeping thread once, at the end, instead of handing it the CPU
 * after the first (the waiter often shares it). Nests; tw_cq_destroy on
 * the batching thread ends the batch's hold on that CQ first.
 * Thread: the caller's own. */
void tw_cq_batch_begin(void);
void tw_cq_batch_end(void);
/** Operations reserved and not yet pushed (racy snapshot). */
unsigned tw_cq_inflight(const tw_cq_t *cq);
/** Threads announced as sleeping in tw_cq_wait (racy snapshot; tests). */
unsigned tw_cq_waiters(const tw_cq_t *cq);

#endif /* TW_CQ_H */
