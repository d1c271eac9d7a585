/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The messaging layer's own types, shared by tw_msg.c (sending, receiving,
 * dispatch) and tw_msg_stall.c (what the stall watchdog sees of them).
 */
#ifndef TW_MSG_INT_H
#define TW_MSG_INT_H

#include <stdatomic.h>

#include "core/tw_atomic.h"
#include "core/tw_lock.h"
#include "msg/tw_match.h"
#include "msg/tw_msg.h"
#include "msg/tw_rma.h"
#include "msg/tw_stall.h"

typedef struct tw_msg_am_entry {
    tw_am_handler_t fn;
    void *arg;
} tw_msg_am_entry_t;

struct tw_msg {
    tw_match_t match;
    tw_match_t coll_match; /* TW_MSG_AM_COLL: the library's own tags */
    tw_msg_ctl_fn_t ctl_fn;
    void *ctl_arg;
    tw_tl_iface_t **route; /* [size]; written before traffic, then read-only */
    tw_stats_t *stats;
    tw_context_t *ctx;
    size_t eager_limit;
    int rank;
    int size;
    _Atomic(tw_msg_am_entry_t *) am[256];
    atomic_uint_fast64_t drop_logged;
    atomic_bool coll_closed;    /* tw_msg_coll_close: no collective reads again */
    atomic_uchar *down;         /* [size]: 1 once the peer is gone */
    tw_rma_t *rma;              /* one-sided operations (tw_rma.c) */
    tw_stall_t stall;           /* the watchdog (tw_stall.h) */
    struct tw_msg_sends *sends; /* [TW_MSG_SEND_LISTS] with the watchdog on */
};

/* An operation in flight the watchdog (TW_STALL_WARN) looks at: a
 * zero-copy send, or a receive pulling its data (rendezvous). With the
 * watchdog on it is on one of msg->sends' lists, guarded by its lock. */
typedef struct tw_msg_flight {
    struct tw_msg_flight *prev, *next;
    struct tw_msg_sends *list; /* NULL: on none */
    tw_stall_mark_t stall;
    bool pull; /* in a tw_msg_rreq_t; else in a tw_msg_sreq_t */
} tw_msg_flight_t;

/* A receive filled by a rendezvous pull: a matched tagged receive (r), or
 * the payload of a user active message (r == NULL: the handler runs once
 * it landed; header and payload follow the struct). */
typedef struct tw_msg_rreq {
    tw_tl_comp_t comp; /* first: the transport hands it back */
    tw_msg_flight_t fl;
    tw_msg_t *msg;
    tw_match_recv_t *r;
    tw_tl_iface_t *iface;
    tw_tl_rndv_t *rndv;
    int src;
    uint64_t tag;
    size_t len; /* announced */
    size_t alloc_len;
    uint8_t am_id;
    uint16_t am_hdr_len;
    unsigned char bytes[]; /* AM: user header, then payload */
} tw_msg_rreq_t;

/* A zero-copy send waiting for its transport completion. */
typedef struct tw_msg_sreq tw_msg_sreq_t;
struct tw_msg_sreq {
    tw_tl_comp_t comp; /* first: the transport hands it back */
    tw_msg_t *msg;
    tw_cq_t *cq;
    void *user;
    uint64_t tag;
    size_t len;
    int dst;
    tw_op_t op;
    uint8_t am_id;
    tw_msg_flight_t fl;
};

/* The zero-copy sends and the pulls in flight, for the watchdog: a few
 * lists, each poster on the one of its thread index, so posters rarely
 * share a lock. */
#define TW_MSG_SEND_LISTS 8
typedef struct tw_msg_sends {
    tw_spinlock_t lock;
    tw_msg_flight_t *head; /* guarded by lock */
} TW_ALIGNED(TW_CACHELINE) tw_msg_sends_t;

/* With the watchdog on, an operation goes on its thread's list before
 * the transport can complete it. */
static inline void tw_msg_flight_link(tw_msg_t *msg, tw_msg_flight_t *fl, bool pull)
{
    if (msg->sends == NULL) {
        return;
    }
    tw_msg_sends_t *l = &msg->sends[tw_thread_index() % TW_MSG_SEND_LISTS];

    fl->list = l;
    fl->pull = pull;
    fl->stall = tw_stall_now(&msg->stall);
    fl->prev = NULL;
    tw_spinlock_lock(&l->lock);
    fl->next = l->head;
    if (l->head != NULL) {
        l->head->prev = fl;
    }
    l->head = fl;
    tw_spinlock_unlock(&l->lock);
}

static inline void tw_msg_flight_unlink(tw_msg_flight_t *fl)
{
    tw_msg_sends_t *l = fl->list;

    if (l == NULL) {
        return;
    }
    tw_spinlock_lock(&l->lock);
    if (fl->prev != NULL) {
        fl->prev->next = fl->next;
    } else {
        l->head = fl->next;
    }
    if (fl->next != NULL) {
        fl->next->prev = fl->prev;
    }
    tw_spinlock_unlock(&l->lock);
    fl->list = NULL;
}

/* tw_msg_stall.c: the watchdog for this layer (TW_STALL_WARN); with it on,
 * msg->sends holds the zero-copy sends in flight. */
tw_status_t tw_msg_stall_init(tw_msg_t *msg, uint64_t warn_ns);
void tw_msg_stall_cleanup(tw_msg_t *msg);

#endif /* TW_MSG_INT_H */
