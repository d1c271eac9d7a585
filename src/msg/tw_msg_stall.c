/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * What the stall watchdog (tw_stall.h) sees of the messaging layer: the
 * posted receives of both matching spaces, the receives pulling their
 * data (rendezvous) and the zero-copy sends in flight, each with the
 * peer, tag, size, transport and what it waits for.
 */
#include "core/tw_mem.h"
#include "msg/tw_msg_int.h"
#include "msg/tw_msg_proto.h"

static const char *tw_msg_tl_name(tw_msg_t *msg, int peer)
{
    return peer >= 0 && peer < msg->size && msg->route[peer] != NULL ? msg->route[peer]->name
                                                                     : NULL;
}

typedef struct tw_msg_walk {
    tw_msg_t *msg;
    tw_stall_visit_t *v;
    const char *op;
} tw_msg_walk_t;

static void tw_msg_stall_recv(tw_match_recv_t *r, void *arg)
{
    tw_msg_walk_t *w = arg;
    tw_stall_desc_t d = {.op = w->op,
                         .peer = r->src,
                         .has_tag = true,
                         .tag = r->tag,
                         .len = r->len,
                         .tl = tw_msg_tl_name(w->msg, r->src),
                         .waits = "a matching send"};

    tw_stall_check(w->v, &r->stall, &d);
}

/* What a zero-copy send waits for, by what its transport does. */
static const char *tw_msg_send_waits(tw_msg_t *msg, int dst)
{
    tw_tl_iface_t *iface = msg->route[dst];

    if (iface == NULL) {
        return "its transport";
    }
    if (iface->caps & TW_TL_CAP_RNDV) {
        return "the receiver to match it and pull the data (rendezvous)";
    }
    return iface->caps & TW_TL_CAP_WRAPPER ? "the receiver's acknowledgement"
                                           : "its transport to deliver it (send credits)";
}

static void tw_msg_stall_walk(void *arg, tw_stall_visit_t *v)
{
    tw_msg_t *msg = arg;
    tw_msg_walk_t w = {.msg = msg, .v = v, .op = "receive"};

    tw_match_walk(&msg->match, tw_msg_stall_recv, &w);
    w.op = "collective receive";
    tw_match_walk(&msg->coll_match, tw_msg_stall_recv, &w);
    for (unsigned i = 0; i < TW_MSG_SEND_LISTS; i++) {
        tw_spinlock_lock(&msg->sends[i].lock);
        for (tw_msg_flight_t *fl = msg->sends[i].head; fl != NULL; fl = fl->next) {
            tw_stall_desc_t d;
            if (fl->pull) {
                tw_msg_rreq_t *q = TW_CONTAINER_OF(fl, tw_msg_rreq_t, fl);
                d = (tw_stall_desc_t){.op = q->r == NULL ? "active message payload"
                                                         : "receive (pulling)",
                                      .peer = q->src,
                                      .prep = "from",
                                      .has_tag = q->r != NULL,
                                      .tag = q->tag,
                                      .len = q->len,
                                      .tl = tw_msg_tl_name(msg, q->src),
                                      .waits = "the sender's data (rendezvous)"};
            } else {
                tw_msg_sreq_t *q = TW_CONTAINER_OF(fl, tw_msg_sreq_t, fl);
                d = (tw_stall_desc_t){.op = q->am_id == TW_MSG_AM_USER   ? "active message"
                                            : q->am_id == TW_MSG_AM_COLL ? "collective send"
                                                                         : "send",
                                      .peer = q->dst,
                                      .has_tag = true,
                                      .tag = q->tag,
                                      .len = q->len,
                                      .tl = tw_msg_tl_name(msg, q->dst),
                                      .waits = tw_msg_send_waits(msg, q->dst)};
            }
            tw_stall_check(v, &fl->stall, &d);
        }
        tw_spinlock_unlock(&msg->sends[i].lock);
    }
}

tw_status_t tw_msg_stall_init(tw_msg_t *msg, uint64_t warn_ns)
{
    tw_status_t st = tw_stall_init(&msg->stall, warn_ns, msg->size, msg->stats, TW_MSG_STAT_STALLS);

    if (st != TW_OK || !tw_stall_on(&msg->stall)) {
        return st;
    }
    msg->sends = tw_malloc_aligned(TW_CACHELINE, TW_MSG_SEND_LISTS * sizeof(*msg->sends));
    if (msg->sends == NULL) {
        tw_stall_cleanup(&msg->stall);
        return TW_ERR_NOMEM;
    }
    for (unsigned i = 0; i < TW_MSG_SEND_LISTS; i++) {
        tw_spinlock_init(&msg->sends[i].lock);
        msg->sends[i].head = NULL;
    }
    return tw_stall_add_walker(&msg->stall, tw_msg_stall_walk, msg);
}

void tw_msg_stall_cleanup(tw_msg_t *msg)
{
    tw_free_aligned(msg->sends, TW_CACHELINE, TW_MSG_SEND_LISTS * sizeof(*msg->sends));
    msg->sends = NULL;
    tw_stall_cleanup(&msg->stall);
}

tw_stall_t *tw_msg_stall(tw_msg_t *msg)
{
    return &msg->stall;
}
