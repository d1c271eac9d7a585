/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided operations (tw_put, tw_get, tw_flush) and the registry of
 * memory regions they address. Part of the messaging layer: it shares its
 * routes and its record of failed peers. src/msg/README.md has the
 * overview, tw_rma_int.h the internals, tw_rma_proto.h the wire formats.
 */
#ifndef TW_RMA_H
#define TW_RMA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_stats.h"
#include "threadwire/threadwire.h"
#include "transports/base/tw_tl.h"

typedef struct tw_rma tw_rma_t;

/*
 * ThreadSanitizer builds only (nothing otherwise). A thread that posts an
 * operation to a peer (a message, a put, a flush...) may thereby cause,
 * through that peer or a chain of peers, a put into or a get from this
 * process's regions that a progress thread serves later: "read my window,
 * then tell the writer it may write again" is the common case. TSan cannot
 * see that order across processes, so every posting call releases a token
 * (TW_RMA_POSTING, in the API's post checks) and serving a peer's put or
 * get acquires it before it touches the region.
 */
#if TW_TSAN
void tw_rma_tsan_posting(tw_rma_t *rma);
#define TW_RMA_POSTING(rma) tw_rma_tsan_posting(rma)
#else
#define TW_RMA_POSTING(rma) ((void)0)
#endif

typedef struct tw_rma_params {
    int rank;
    int size;
    tw_tl_iface_t *const *route; /* [size]: the messaging layer's routes */
    const atomic_uchar *down;    /* [size]: 1 once the peer is gone */
    size_t eager_limit;          /* replies up to this are copied (am_short) */
    struct tw_stall *stall;      /* the watchdog, which visits the waiting operations; or NULL */
} tw_rma_params_t;

enum {
    TW_RMA_STAT_PUTS,
    TW_RMA_STAT_PUT_BYTES,
    TW_RMA_STAT_GETS,
    TW_RMA_STAT_GET_BYTES,
    TW_RMA_STAT_FLUSHES,
    TW_RMA_STAT_DIRECT,   /* operations the transport did by RDMA */
    TW_RMA_STAT_SERVED,   /* requests of peers served here */
    TW_RMA_STAT_REFUSED,  /* requests of peers refused (region, key, bounds) */
    TW_RMA_STAT_DEFERRED, /* replies retried later (transport busy) */
    TW_RMA_STAT_DROPPED,  /* malformed or stale arrivals */
    TW_RMA_STAT_COUNT
};

tw_status_t tw_rma_create(const tw_rma_params_t *params, tw_rma_t **rma_p);
/** Finalize, before the transports close: every region still registered
 * is released (transport registrations, registry) and marked dead, so a
 * later tw_mem_deregister only frees its handle. */
void tw_rma_release_regions(tw_rma_t *rma);
/** Finalize, after the transports closed: operations still waiting for
 * a peer's reply complete TW_ERR_CANCELED, then everything is freed. */
void tw_rma_destroy(tw_rma_t *rma);
tw_stats_t *tw_rma_stats(tw_rma_t *rma);

/** Manual progress: deregistration drives @p fn(@p arg) while transfers
 * into or out of the region finish (before traffic). */
void tw_rma_set_progress(tw_rma_t *rma, int (*fn)(void *), void *arg);

/** Register every later region with @p iface too (its mem_reg slot: a
 * transport that does RDMA itself), so packed keys carry its key (before
 * traffic; at most a few). Thread: the caller of tw_init. */
tw_status_t tw_rma_add_registrar(tw_rma_t *rma, tw_tl_iface_t *iface);

/* The public calls, their arguments checked by the runtime (context, CQ,
 * rank ranges, buffers). Thread: any. */
tw_status_t tw_rma_mem_register(tw_rma_t *rma, void *addr, size_t len, tw_mr_t **mr_p);
tw_status_t tw_rma_mem_deregister(tw_mr_t *mr);
tw_status_t tw_rma_mr_pack(const tw_mr_t *mr, void *rkey, size_t *rkey_len);
tw_status_t tw_rma_put(tw_rma_t *rma, int dst, const void *src, size_t len, uint64_t raddr,
                       const void *rkey, tw_cq_t *cq, void *user);
tw_status_t tw_rma_get(tw_rma_t *rma, int src, void *dst, size_t len, uint64_t raddr,
                       const void *rkey, tw_cq_t *cq, void *user);
tw_status_t tw_rma_flush(tw_rma_t *rma, int peer, tw_cq_t *cq, void *user);

/* From the messaging layer (engine threads). */
void tw_rma_recv(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, const void *data,
                 size_t len);
void tw_rma_rndv(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, size_t len,
                 tw_tl_rndv_t *rndv);
/** @p peer is gone (the down flag is already set): operations waiting for
 * its replies complete TW_ERR_PEER_FAILED. Thread: any. */
void tw_rma_peer_down(tw_rma_t *rma, int peer);
/** Replies that found their transport busy, retried (a progress
 * function of engine 0; arg = rma). Returns events handled, and stays
 * above 0 while some wait, so the engine does not sleep on them. */
int tw_rma_progress(void *arg);

#endif /* TW_RMA_H */
