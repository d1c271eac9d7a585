/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * route's insides: the types, what guards each field, prototypes across
 * files.
 *
 * Threads. The upper layer sends from any thread (am_short straight to
 * the next hop's transport; am_zcopy queues). Frames arrive on the
 * threads of the transports route taps (their engines), which forward
 * them (leaders), build and hand up messages, and take DOWNs. route's own
 * engine (progress) drains the queues and completes zcopy sends.
 *
 * Order. A transport keeps order per sending thread only (tcp hands a
 * busy lane's frames to its engine through per-thread submission lanes),
 * and a frame passes through several threads on its way (the sender, or
 * route's engine for a queued message; each leader's engines). So, with
 * no rel above to order and repair, every DATA frame is numbered per
 * (src, dst) when it is made -- the k fragments of a message get k
 * consecutive numbers -- and the receiver hands frames up in that order,
 * holding (copied) any that overtook an earlier one. Nothing is lost
 * between neighbours without rel (the transports are reliable; a
 * neighbour that fails fails what went through it), so a gap always
 * fills. Queues only absorb back-pressure: a leader queues what its next
 * hop cannot take now, and this rank's zcopy messages wait in them for
 * route's engine to send their fragments.
 */
#ifndef TW_ROUTE_INT_H
#define TW_ROUTE_INT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/tw_lock.h"
#include "core/tw_stats.h"
#include "routing/tw_route.h"
#include "routing/tw_route_proto.h"

#define TW_ROUTE_MAX_TAPS 8
#define TW_ROUTE_MAX_MSG  (1ull << 30)
#define TW_ROUTE_RETRY_NS 20000u /* a full next hop is tried again this much later */

/* A queued frame (copied: a leader's forward that found no room) or a
 * zcopy message of this rank (by reference, sent in fragments from @p off
 * by the drainer; @p comp completes it). */
typedef struct tw_route_item tw_route_item_t;
struct tw_route_item {
    tw_route_item_t *next;
    size_t alloc_len;
    tw_tl_comp_t *comp; /* a message: NULL for a frame */
    const unsigned char *data;
    size_t len;          /* payload bytes */
    size_t off;          /* message: payload bytes sent so far */
    uint32_t seq;        /* message: its next fragment's number */
    size_t hdr_len;      /* bytes of hdr: the route header, then the upper's */
    unsigned char hdr[]; /* then, for a frame, its payload */
};

/* What waits for next hop @p h (head and tail under lock). */
typedef struct tw_route_q {
    tw_mutex_t lock;
    tw_route_item_t *head;
    tw_route_item_t *tail;
    _Atomic uint32_t n; /* items queued (the head being sent included) */
} tw_route_q_t;

/* A frame that arrived before an earlier one of its sender (copied). */
typedef struct tw_route_held tw_route_held_t;
struct tw_route_held {
    tw_route_held_t *next;
    size_t alloc_len;
    tw_route_hdr_t h;
    size_t len;
    unsigned char bytes[]; /* the upper header, then the payload */
};

/* Arrivals from @p src, all under lock: the number of the next frame to
 * hand up, the frames held for it (by number), whether a thread is
 * handing up (it takes the held frames that become next; others only
 * hold), and the message being rebuilt from its fragments. */
typedef struct tw_route_reasm {
    tw_mutex_t lock;
    uint32_t next;
    bool busy;
    tw_route_held_t *held;
    unsigned char *buf; /* msg_len bytes; NULL: none under way */
    uint64_t msg_len;
    uint64_t got;
    uint8_t am_id;
    uint16_t hdr_len;
    unsigned char hdr[TW_TL_HDR_MAX];
} tw_route_reasm_t;

/* Our frames to one rank (numbered when ordered): @p seq is the next
 * frame's number, under @p lock, which an am_short holds while it sends
 * (a refused frame leaves no gap). */
typedef struct tw_route_out {
    tw_mutex_t lock;
    uint32_t seq;
} tw_route_out_t;

typedef struct tw_route tw_route_t;

/* A rank of another node, for us. */
enum { TW_ROUTE_UP, TW_ROUTE_LEFT, TW_ROUTE_DOWN };

typedef struct tw_route_tap {
    tw_tl_tap_t tap;
    tw_route_t *rt;
} tw_route_tap_t;

struct tw_route {
    tw_tl_iface_t super;
    tw_route_cfg_t cfg;
    tw_stats_t *stats;
    tw_pe_t *pe;
    int rank, size;
    int node;   /* ours */
    int leader; /* our node's */
    bool is_leader;
    int nnodes;
    int *node_of;   /* [size] */
    int *leader_of; /* [nnodes]: each node's lowest rank */
    size_t frag;    /* the largest frame every tapped iface carries */
    /* The ifaces we send through and take our frames from, in routing
     * order; each keeps its tap (and a reference to us) until it closes. */
    tw_tl_iface_t *inner[TW_ROUTE_MAX_TAPS];
    tw_route_tap_t *taps[TW_ROUTE_MAX_TAPS];
    unsigned ntaps;
    /* Per rank: the first tapped iface that reaches it (found on first
     * use, after the address exchange), its queue as a next hop, the
     * rebuilding of its messages, and whether it is down for us. */
    _Atomic(tw_tl_iface_t *) *via;
    tw_route_q_t *q;
    tw_route_reasm_t *reasm;
    tw_route_out_t *out;     /* [size]: numbering our frames to each rank */
    bool ordered;            /* number DATA frames (no rel above) */
    bool locks;              /* the per-rank locks are initialized */
    _Atomic uint8_t *down;   /* reported unreachable up (once) */
    _Atomic uint8_t *gone;   /* a neighbour's loss handled (once) */
    _Atomic uint32_t queued; /* items in every queue */
    /* A queue's next hop had no room: the engine comes back when this
     * timer fires (TW_ROUTE_RETRY_NS), not by spinning on a core the hop
     * may need to make room. Engine owner only. */
    int timer_fd;
    bool timer_watched;
    bool timer_armed;
    _Atomic bool closed;   /* iface_close ran: taps deliver nothing to us */
    _Atomic unsigned refs; /* the iface and each tap */
};

/* tw_route_tx.c */
tw_status_t tw_route_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len);
tw_status_t tw_route_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
int tw_route_progress(tw_tl_iface_t *iface);
/** Pass a frame on to neighbour @p h: now if nothing waits for it and it
 * has room, else queued (copied). Thread: any. */
void tw_route_forward(tw_route_t *rt, int h, const void *hdr, size_t hdr_len, const void *data,
                      size_t len);
/** Tell neighbour @p h that @p gone is unreachable (@p how: TW_ROUTE_DOWN_*). */
void tw_route_send_down(tw_route_t *rt, int h, int gone, uint8_t how);
/** The first tapped iface that reaches @p rank, or NULL. Thread: any. */
tw_tl_iface_t *tw_route_via(tw_route_t *rt, int rank);
/** Drop what waits (zcopy messages complete with @p status). */
void tw_route_q_flush(tw_route_t *rt, int h, tw_status_t status);
bool tw_route_queues_empty(tw_route_t *rt);

/* tw_route_rx.c */
void tw_route_tap_recv(tw_tl_tap_t *tap, int src, const void *hdr, size_t hdr_len, const void *data,
                       size_t len);
void tw_route_tap_peer_down(tw_tl_tap_t *tap, int peer, tw_status_t why);
/** Free what @p r holds (the message being rebuilt, the held frames). */
void tw_route_reasm_clear(tw_route_reasm_t *r);

/** The next hop to @p dst from here. */
static inline int tw_route_next(const tw_route_t *rt, int dst)
{
    int nd = rt->node_of[dst];

    if (nd == rt->node) {
        return dst;
    }
    return rt->is_leader ? rt->leader_of[nd] : rt->leader;
}

#endif /* TW_ROUTE_INT_H */
