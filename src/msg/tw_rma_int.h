/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Internals of the one-sided operations, shared by tw_rma.c (create, the
 * slot table, posting, teardown), tw_rma_mem.c (regions, remote keys),
 * tw_rma_sw.c (emulation over active messages: serving, arrivals) and
 * tw_rma_flush.c (completion, put lists, flush). src/msg/README.md has
 * the overview.
 *
 * Locks, each taken alone (none nests inside another of these):
 *   reg_lock    rwlock of the region registry. Readers: engines serving a
 *               request, across the lookup and the copy (and an am_short
 *               that copies the region's bytes out); writers: register,
 *               deregister, release at finalize.
 *   slot_lock   the table of operations waiting for a reply.
 *   peer->lock  one per peer: its put list and its flushes.
 *   defer_lock  the replies kept for later.
 * None is held while a completion is pushed or a transport is called,
 * except reg_lock's read side across that am_short.
 */
#ifndef TW_RMA_INT_H
#define TW_RMA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tw_lock.h"
#include "msg/tw_rma.h"
#include "msg/tw_rma_proto.h"
#include "msg/tw_stall.h"
#include "progress/tw_cq.h"

#define TW_RMA_MAX_REG   TW_RMA_RKEY_SECT_MAX /* transports that register memory */
#define TW_RMA_BUCKETS   256                  /* registry hash */
#define TW_RMA_SLOTS_MAX (1u << 24)
#define TW_MR_MAGIC      0x746d7231u
#define TW_RMA_NONE      UINT32_MAX

/* A region's registration with one transport. */
typedef struct tw_rma_tlkey {
    tw_tl_iface_t *iface;
    void *handle;
    uint8_t len;
    uint8_t bytes[TW_TL_KEY_MAX];
} tw_rma_tlkey_t;

/* The public tw_mr_t. Set at register and read-only after, except where
 * a field says otherwise. */
struct tw_mr {
    uint32_t magic;   /* cleared by deregister */
    atomic_bool dead; /* released at finalize: only the handle is left */
    tw_rma_t *rma;
    tw_mr_t *next; /* registry chain; guarded by rma->reg_lock */
    uint64_t id;
    uint64_t key;
    uintptr_t base;
    size_t len;
    /* Pulls into it and zero-copy replies from it; any thread, atomic.
     * Raised under reg_lock's read side, so deregistration, which
     * unpublishes first, sees every one it must wait for. */
    atomic_uint inflight;
    /* Emptied by deregister once drained, or by release at finalize
     * (under reg_lock's write side). */
    unsigned ntl;
    tw_rma_tlkey_t tl[TW_RMA_MAX_REG];
};

/* An operation of this origin. Set at post and read-only after, except
 * where a field says otherwise. */
typedef struct tw_rma_op tw_rma_op_t;
struct tw_rma_op {
    tw_tl_comp_t comp; /* first: transports hand it back */
    tw_rma_t *rma;
    tw_rma_op_t *prev, *next; /* the peer's put list; guarded by peers[peer].lock */
    tw_rma_op_t *swept;       /* the peer-down sweep's list; the sweeper's */
    tw_cq_t *cq;
    void *user;
    void *dst; /* get */
    size_t len;
    uint64_t seq;    /* its place in the put list; guarded by peers[peer].lock */
    uint64_t cookie; /* emulated: its slot; written under slot_lock before it is sent */
    int peer;
    tw_op_t op;
    /* On the put list: set under the peer's lock, read by whoever
     * completes it (the refs decrement orders the two). */
    bool listed;
    atomic_int refs;       /* events still to come, + 1 while posting */
    atomic_int status;     /* first error wins */
    tw_stall_mark_t stall; /* emulated: set, then read, under slot_lock */
};

typedef struct tw_rma_flush_req tw_rma_flush_req_t;
struct tw_rma_flush_req {
    tw_rma_flush_req_t *next; /* guarded by the peer's lock while queued */
    tw_cq_t *cq;
    void *user;
    uint64_t upto; /* waits for every put numbered below */
};

typedef struct tw_rma_peer {
    tw_mutex_t lock;
    uint64_t next_seq;                 /* guarded by lock */
    tw_rma_op_t *head, *tail;          /* puts not complete, in order; guarded by lock */
    tw_rma_flush_req_t *fhead, *ftail; /* guarded by lock */
} tw_rma_peer_t;

typedef struct tw_rma_defer tw_rma_defer_t;
struct tw_rma_defer {
    tw_rma_defer_t *next; /* guarded by rma->defer_lock while queued */
    int src;
    tw_rma_hdr_t h; /* the ack to send, or the get to serve */
};

/* A rendezvous pull of a large put into a region (target side), or a
 * zero-copy reply out of one. Set when posted; the transport's completion
 * callback frees it. */
typedef struct tw_rma_xfer {
    tw_tl_comp_t comp; /* first */
    tw_rma_t *rma;
    tw_mr_t *mr;
    uint64_t cookie;
    int src;
} tw_rma_xfer_t;

struct tw_rma {
    /* Set at create, read-only after. */
    int rank;
    int size;
    tw_tl_iface_t *const *route;
    const atomic_uchar *down;
    size_t eager_limit;
    tw_stats_t *stats;
    tw_rma_peer_t *peers; /* [size] */
    /* Set before traffic by the caller of tw_init, read-only after. */
    unsigned nreg;
    tw_tl_iface_t *reg[TW_RMA_MAX_REG]; /* transports that register memory */
    int (*progress)(void *);            /* manual mode: drives the context */
    void *progress_arg;
    /* ThreadSanitizer builds: TW_RMA_POSTING releases it, serving a
     * peer's put or get acquires it (tw_rma.h). */
    char tsan_causal;
    /* The region registry. */
    tw_rwlock_t reg_lock;
    tw_mr_t *buckets[TW_RMA_BUCKETS]; /* guarded by reg_lock */
    atomic_uint_fast64_t next_id;     /* any thread, atomic relaxed: a counter */
    tw_stall_t *stall;                /* the watchdog (tw_stall.h) */
    /* The operations waiting for a reply (tw_rma.c). */
    tw_mutex_t slot_lock;
    tw_rma_op_t **slots; /* guarded by slot_lock, as are the four below */
    uint32_t *slot_gen;
    uint32_t *slot_next;
    uint32_t nslots;
    uint32_t free_head;
    /* Replies kept for later (tw_rma_sw.c). */
    tw_mutex_t defer_lock;
    tw_rma_defer_t *dhead, *dtail; /* guarded by defer_lock */
    atomic_uint ndefer;            /* written under defer_lock, read relaxed: a hint */
    /* Log rate limits (tw_rma_log_due); any thread, atomic relaxed. */
    atomic_uint_fast64_t drop_logged;
    atomic_uint_fast64_t refused_logged;
    atomic_uint_fast64_t failed_logged;
};

static inline bool tw_rma_is_down(const tw_rma_t *rma, int peer)
{
    return atomic_load_explicit(&rma->down[peer], memory_order_seq_cst) != 0;
}

/** Count one more of a kind of trouble in @p counter. Returns how many so
 * far when this one is to be logged -- the first 16, then every 1000th,
 * so a broken or hostile peer cannot flood the log -- else 0. */
static inline uint64_t tw_rma_log_due(atomic_uint_fast64_t *counter)
{
    uint64_t n = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);

    return n < 16 || n % 1000 == 0 ? n + 1 : 0;
}

/* tw_rma.c */
/** Start of every post: a route, the peer alive, room on @p cq (reserved). */
tw_status_t tw_rma_post_begin(tw_rma_t *rma, int peer, tw_cq_t *cq);
/** Take out the operation @p cookie names if it waits for @p peer's
 * reply of kind @p op; NULL if there is none (stale, duplicated or
 * forged). Whoever takes an operation out completes it. */
tw_rma_op_t *tw_rma_slot_take(tw_rma_t *rma, uint64_t cookie, int peer, tw_op_t op);

/* tw_rma_mem.c */
/** Unpack the remote key handed to @p fn (tw_put / tw_get) into @p k
 * and check it is of @p peer's memory and covers [@p raddr, + @p len);
 * TW_ERR_INVALID (logged) if not. */
tw_status_t tw_rma_rkey_check(const char *fn, const void *rkey, int peer, uint64_t raddr,
                              size_t len, tw_rma_rkey_t *k);
/** The region a request names, if key and bounds fit; else
 * TW_ERR_INVALID (counted, logged). Caller holds reg_lock. */
tw_status_t tw_rma_lookup_locked(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, tw_mr_t **mr_p)
    TW_TSA(requires_shared_capability(rma->reg_lock));

/* tw_rma_flush.c */
/** Give put @p op its number and append it to its peer's list. */
void tw_rma_list(tw_rma_t *rma, tw_rma_op_t *op);
/** One of the events @p op waits for happened; the last completes it.
 * Thread: any. */
void tw_rma_event(tw_rma_op_t *op, tw_status_t st);
/** The transports' completion callback of an operation (its comp). */
void tw_rma_comp_cb(tw_tl_comp_t *comp, tw_status_t st);
/** A post that failed before anything took @p op: undo it. */
void tw_rma_unpost(tw_rma_op_t *op);
/** Complete the flushes @p f (a list) of @p peer with @p why (TW_OK
 * turns into TW_ERR_PEER_FAILED for a peer that is down), and free them. */
void tw_rma_flushes_complete(tw_rma_t *rma, int peer, tw_rma_flush_req_t *f, tw_status_t why);

#endif /* TW_RMA_INT_H */
