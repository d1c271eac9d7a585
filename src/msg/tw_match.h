/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Tag matching engine: posted receives and unexpected messages, MPI
 * semantics (a message matches the earliest-posted matching receive; a
 * receive matches the earliest-arrived matching message), no global lock
 * on the common path. tw_match.c explains the algorithm.
 */
#ifndef TW_MATCH_H
#define TW_MATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_atomic.h"
#include "core/tw_lock.h"
#include "msg/tw_stall.h"
#include "threadwire/threadwire.h"

/** A posted receive; the caller allocates it and owns it again once it
 * is returned by tw_match_post/arrive/cleanup. */
typedef struct tw_match_recv {
    struct tw_match_recv *next;
    uint64_t seq; /* post order, set by the engine when posted (matched or not) */
    int src;      /* rank or TW_ANY_SOURCE */
    uint64_t tag;
    uint64_t ignore; /* tag bits that do not take part in the match */
    void *buf;       /* the rest is the caller's */
    size_t len;
    tw_cq_t *cq;
    void *user;
    tw_stall_mark_t stall; /* the watchdog's (tw_stall.h) */
} tw_match_recv_t;

/** An unexpected message: a copy of its payload waiting for a receive --
 * or, for a rendezvous, only the handle to pull it with (no data). */
typedef struct tw_match_unexp {
    struct tw_match_unexp *next;
    uint64_t seq; /* arrival order, set by the engine */
    int src;
    uint64_t tag;
    size_t len;
    void *rndv; /* rendezvous handle, or NULL when data[] holds the payload */
    unsigned char data[];
} tw_match_unexp_t;

typedef struct tw_match_bucket {
    tw_spinlock_t lock;
    tw_match_recv_t *posted_head; /* guarded by lock */
    tw_match_recv_t *posted_tail; /* guarded by lock */
    tw_match_unexp_t *unexp_head; /* guarded by lock */
    tw_match_unexp_t *unexp_tail; /* guarded by lock */
} TW_ALIGNED(TW_CACHELINE) tw_match_bucket_t;

typedef struct tw_match {
    tw_match_bucket_t *buckets;
    unsigned nbuckets; /* power of two */
    /* Wildcard path. Lock order: wild_lock, then one bucket lock. */
    tw_mutex_t wild_lock;
    atomic_uint n_wild;         /* posted wildcard receives; written under wild_lock */
    tw_match_recv_t *wild_head; /* guarded by wild_lock */
    tw_match_recv_t *wild_tail; /* guarded by wild_lock */
    atomic_uint_fast64_t post_seq;
    atomic_uint_fast64_t arrival_seq;
    atomic_uint_fast64_t n_unexp; /* unexpected messages queued (stats) */
} tw_match_t;

/** @p nbuckets: power of two, 1 .. 65536. TW_ERR_INVALID / TW_ERR_NOMEM. */
tw_status_t tw_match_init(tw_match_t *m, unsigned nbuckets);

/**
 * Hand every posted receive to @p cancel (to complete it CANCELED) and
 * free every unexpected message. No concurrent use.
 */
void tw_match_cleanup(tw_match_t *m, void (*cancel)(tw_match_recv_t *r, void *arg), void *arg);

/**
 * Post @p r. Returns the earliest-arrived unexpected message that matches
 * (the caller copies it out and frees it with tw_match_unexp_free; @p r is
 * not kept), or NULL when @p r is now posted. Thread: any.
 */
tw_match_unexp_t *tw_match_post(tw_match_t *m, tw_match_recv_t *r);

/**
 * A message arrived. Returns the earliest-posted matching receive (removed;
 * the caller fills and completes it), or NULL when the message was queued
 * as unexpected (payload copied; with @p rndv != NULL only the handle is
 * kept) -- or could not be: then *st_p is
 * TW_ERR_NOMEM. Messages from one sender must arrive in send order, from
 * one thread at a time. Thread: any.
 */
tw_match_recv_t *tw_match_arrive(tw_match_t *m, int src, uint64_t tag, const void *data, size_t len,
                                 void *rndv, tw_status_t *st_p);

/**
 * Take every posted receive naming @p src (exact or masked; not
 * TW_ANY_SOURCE) and hand each to @p fail. Thread: any.
 */
void tw_match_fail_src(tw_match_t *m, int src, void (*fail)(tw_match_recv_t *r, void *arg),
                       void *arg);

void tw_match_unexp_free(tw_match_unexp_t *u);

/** Hand every posted receive to @p fn, under the lock that keeps it
 * posted (@p fn must not post or match). Thread: any. */
void tw_match_walk(tw_match_t *m, void (*fn)(tw_match_recv_t *r, void *arg), void *arg);

/**
 * Take back the earliest posted exact receive for (@p src, @p tag) (no
 * wildcard, no ignored bits), or NULL when there is none (it matched, or
 * was never posted). The caller owns what is returned. Thread: any.
 */
tw_match_recv_t *tw_match_cancel(tw_match_t *m, int src, uint64_t tag);

/**
 * Take every unexpected message whose tag equals @p tag on the bits of
 * @p mask and hand each to @p fn (which frees it). Thread: any.
 */
void tw_match_purge(tw_match_t *m, uint64_t tag, uint64_t mask,
                    void (*fn)(tw_match_unexp_t *u, void *arg), void *arg);

static inline bool tw_match_hits(const tw_match_recv_t *r, int src, uint64_t tag)
{
    return (r->src == TW_ANY_SOURCE || r->src == src) && ((r->tag ^ tag) & ~r->ignore) == 0;
}

#endif /* TW_MATCH_H */
