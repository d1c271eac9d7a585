/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The stall watchdog (TW_STALL_WARN). An operation outstanding longer
 * than the limit while its peer sent us nothing and took nothing from us
 * gets one warning line -- the operation, peer, tag, size, transport and
 * what it waits for -- and the "stalls" counter; tw_stats_print lists the
 * ones still outstanding.
 *
 * Time is counted in epochs, not read from a clock on the hot path: a tick
 * on engine 0 (a timerfd wakes it; in manual mode the tick runs inside
 * tw_progress) raises the epoch every half limit. A post records the epoch
 * (one relaxed load); an arrival from a peer, or a transport completion of
 * an operation to it, records the epoch as the peer's last sign of life
 * (two relaxed loads, a store once per epoch). At each tick the layers that
 * keep operations (walkers) visit them under their own locks; an operation
 * posted at least three epochs ago (older than the limit) whose peer has
 * been quiet as long is stalled. A wildcard receive counts any peer's sign
 * of life. A tick a whole period late (the process was stopped or starved,
 * or in manual mode not progressed) counts every peer as heard: their
 * silence meanwhile was ours. A collective waiting on the node's shared
 * memory (blocking, or on engine 0) checks for itself (tw_stall_note,
 * tw_coll_shm.c): the member it waits for has not moved for the limit. A
 * receive pulling its data (rendezvous) is watched from the pull's start;
 * its bytes arrive below this layer, so a pull that takes longer than the
 * limit with no other sign from its peer (gigabytes over a slow link) is
 * reported too.
 *
 * The cost when on: one relaxed load per post, two per arrival, a list link
 * per zero-copy send and per pull (tw_msg.c), and a walk of the outstanding
 * operations every half limit. Off (TW_STALL_WARN=0): none of the walks, no
 * timer, no links.
 */
#ifndef TW_STALL_H
#define TW_STALL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tw_compiler.h"
#include "core/tw_stats.h"
#include "threadwire/threadwire.h"

typedef struct tw_pe tw_pe_t;

/** Kept in each watched operation; written by the poster, then under the
 * walker's lock. */
typedef struct tw_stall_mark {
    uint32_t epoch; /* tw_stall_epoch() when it was posted */
    bool warned;    /* its line was written */
} tw_stall_mark_t;

/** What a walker says about one operation. */
typedef struct tw_stall_desc {
    const char *op;    /* "receive", "send", "put", ... */
    int peer;          /* or TW_ANY_SOURCE */
    bool has_tag;      /* tag below is meaningful */
    uint64_t tag;      /* tag, or the active-message id */
    size_t len;        /* bytes (a receive: its buffer) */
    const char *tl;    /* the transport to the peer, or NULL */
    const char *prep;  /* "from", "to", "with" before the peer; NULL: by op */
    const char *waits; /* "a matching send", ... */
} tw_stall_desc_t;

typedef struct tw_stall_visit tw_stall_visit_t;
/** Visit every operation a layer keeps: tw_stall_check each, under the
 * lock that keeps it from completing meanwhile. Thread: engine 0's owner,
 * or a tw_stats_print caller. */
typedef void (*tw_stall_walk_fn_t)(void *arg, tw_stall_visit_t *v);

#define TW_STALL_MAX_WALKERS 4

typedef struct tw_stall {
    uint64_t period_ns; /* half the limit; 0 = off */
    atomic_uint epoch;  /* raised by the tick */
    atomic_uint heard_any;
    atomic_uint *heard; /* [size]: epoch of each peer's last sign of life; NULL when off */
    int size;
    tw_stats_t *stats; /* counts into stats[stat_id] */
    unsigned stat_id;
    int timer_fd;
    tw_pe_t *pe;       /* engine that runs the tick */
    uint64_t next_ns;  /* the tick's: next one due */
    unsigned nwalkers; /* set before the tick starts */
    struct {
        tw_stall_walk_fn_t fn;
        void *arg;
    } walkers[TW_STALL_MAX_WALKERS];
} tw_stall_t;

/** @p warn_ns 0 = off. TW_ERR_NOMEM. */
tw_status_t tw_stall_init(tw_stall_t *s, uint64_t warn_ns, int size, tw_stats_t *stats,
                          unsigned stat_id);
void tw_stall_cleanup(tw_stall_t *s);
/** A layer's walker. Before tw_stall_start. */
tw_status_t tw_stall_add_walker(tw_stall_t *s, tw_stall_walk_fn_t fn, void *arg);
/** Run the tick on @p pe (a progress function, and a timerfd that wakes
 * it). Before the engine starts. Nothing to do when off. */
tw_status_t tw_stall_start(tw_stall_t *s, tw_pe_t *pe);

static inline bool tw_stall_on(const tw_stall_t *s)
{
    return s->period_ns != 0;
}

/** The mark of an operation posted now. Thread: any. */
static inline tw_stall_mark_t tw_stall_now(tw_stall_t *s)
{
    return (tw_stall_mark_t){.epoch = atomic_load_explicit(&s->epoch, memory_order_relaxed)};
}

/** @p peer showed a sign of life. Thread: any. */
static inline void tw_stall_heard(tw_stall_t *s, int peer)
{
    if (!tw_stall_on(s)) {
        return;
    }
    unsigned e = atomic_load_explicit(&s->epoch, memory_order_relaxed);
    if (TW_UNLIKELY(atomic_load_explicit(&s->heard[peer], memory_order_relaxed) != e)) {
        atomic_store_explicit(&s->heard[peer], e, memory_order_relaxed);
        atomic_store_explicit(&s->heard_any, e, memory_order_relaxed);
    }
}

/** One operation of a walk: warns once when it is stalled, or (from
 * tw_stall_print) lists it when it was warned of. Thread: the walker's,
 * under the lock that keeps @p m's operation. */
void tw_stall_check(tw_stall_visit_t *v, tw_stall_mark_t *m, const tw_stall_desc_t *d);

/** A wait its caller runs itself (a blocking collective on the node's
 * shared memory), stalled @p over_s seconds: one warning line, counted.
 * Not listed by tw_stall_print. Thread: any. */
void tw_stall_note(tw_stall_t *s, const tw_stall_desc_t *d, double over_s);

/** TW_STALL_WARN in ns (0: off). */
static inline uint64_t tw_stall_limit_ns(const tw_stall_t *s)
{
    return s->period_ns * 2;
}

/** The operations warned of and still outstanding, a line each, led by
 * @p indent; "none" when there are none. Thread: any. */
void tw_stall_print(tw_stall_t *s, FILE *out, const char *indent);

#endif /* TW_STALL_H */
