/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Messaging layer: eager and zero-copy sends, receive matching (tw_match.c)
 * and active-message dispatch.
 *
 * Send: the CQ slot is reserved first (TW_ERR_AGAIN when full), then the
 * message goes out as one transport active message: payloads up to the
 * eager limit are copied by am_short and the send completes at once; larger
 * ones go am_zcopy and complete when the transport says the buffer is free.
 * Receive: posted into the matching engine, or completed at once from an
 * unexpected message. Arrivals run on the progress engine: a tagged
 * message is matched (or queued as unexpected), an active message runs its
 * handler. Every wire header is checked before use; a bad one is dropped,
 * counted and logged.
 */
#include "msg/tw_msg_int.h"

#include <stdatomic.h>
#include <string.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "msg/tw_match.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma.h"
#include "progress/tw_cq.h"
#include "progress/tw_pe.h"

_Static_assert(sizeof(tw_msg_hdr_t) + TW_INJECT_MAX <= TW_TL_SHORT_MIN,
               "tw_send_inject's header and bytes fit every transport's am_short");

/* What the transports leave room for in front of a user's AM header. */
_Static_assert(sizeof(tw_msg_hdr_t) + TW_AM_HDR_MAX <= TW_TL_HDR_MAX,
               "msg's header and the user's fit the transports' header room");

/* Largest active-message payload accepted by rendezvous (it is staged in
 * memory before the handler runs). */
#define TW_MSG_AM_RNDV_MAX (256u << 20)

static const tw_stat_desc_t tw_msg_stat_descs[TW_MSG_STAT_COUNT] = {
    [TW_MSG_STAT_SENT] = {"sent", TW_STAT_COUNTER},
    [TW_MSG_STAT_SENT_BYTES] = {"sent_bytes", TW_STAT_COUNTER},
    [TW_MSG_STAT_EAGER] = {"eager", TW_STAT_COUNTER},
    [TW_MSG_STAT_ZCOPY] = {"zcopy", TW_STAT_COUNTER},
    [TW_MSG_STAT_RECVD] = {"received", TW_STAT_COUNTER},
    [TW_MSG_STAT_RECVD_BYTES] = {"received_bytes", TW_STAT_COUNTER},
    [TW_MSG_STAT_UNEXPECTED] = {"unexpected", TW_STAT_COUNTER},
    [TW_MSG_STAT_TRUNCATED] = {"truncated", TW_STAT_COUNTER},
    [TW_MSG_STAT_AM_RUN] = {"am_handled", TW_STAT_COUNTER},
    [TW_MSG_STAT_DROPPED] = {"dropped", TW_STAT_COUNTER},
    [TW_MSG_STAT_STALLS] = {"stalls", TW_STAT_COUNTER},
};

tw_status_t tw_msg_create(const tw_msg_params_t *params, tw_msg_t **msg_p)
{
    tw_msg_t *msg = tw_calloc(1, sizeof(*msg));
    tw_status_t st;

    if (msg == NULL) {
        return TW_ERR_NOMEM;
    }
    msg->rank = params->rank;
    msg->size = params->size;
    msg->ctx = params->ctx;
    msg->eager_limit = params->eager_limit;
    for (size_t i = 0; i < TW_ARRAY_SIZE(msg->am); i++) {
        atomic_init(&msg->am[i], NULL);
    }
    atomic_init(&msg->drop_logged, 0);
    atomic_init(&msg->coll_closed, false);
    msg->route = tw_calloc((size_t)params->size, sizeof(*msg->route));
    if (msg->route == NULL) {
        st = TW_ERR_NOMEM;
        goto err_free;
    }
    msg->down = tw_calloc((size_t)params->size, sizeof(*msg->down));
    if (msg->down == NULL) {
        st = TW_ERR_NOMEM;
        goto err_route;
    }
    msg->stats = tw_stats_create("msg", tw_msg_stat_descs, TW_MSG_STAT_COUNT);
    if (msg->stats == NULL) {
        st = TW_ERR_NOMEM;
        goto err_down;
    }
    st = tw_msg_stall_init(msg, params->stall_warn_ns);
    if (st != TW_OK) {
        goto err_stats;
    }
    st = tw_match_init(&msg->match, params->match_buckets);
    if (st != TW_OK) {
        goto err_stall;
    }
    st = tw_match_init(&msg->coll_match, 256);
    if (st != TW_OK) {
        tw_match_cleanup(&msg->match, NULL, NULL);
        goto err_stall;
    }
    tw_rma_params_t rp = {.rank = params->rank,
                          .size = params->size,
                          .route = msg->route,
                          .down = msg->down,
                          .eager_limit = params->eager_limit,
                          .stall = &msg->stall};
    st = tw_rma_create(&rp, &msg->rma);
    if (st != TW_OK) {
        goto err_match;
    }
    *msg_p = msg;
    return TW_OK;

err_match:
    tw_match_cleanup(&msg->coll_match, NULL, NULL);
    tw_match_cleanup(&msg->match, NULL, NULL);
err_stall:
    tw_msg_stall_cleanup(msg);
err_stats:
    tw_stats_destroy(msg->stats);
err_down:
    tw_free(msg->down, (size_t)params->size * sizeof(*msg->down));
err_route:
    tw_free(msg->route, (size_t)params->size * sizeof(*msg->route));
err_free:
    tw_free(msg, sizeof(*msg));
    return st;
}

/* Complete a posted receive that got no message with @p status. */
static void tw_msg_end_recv(tw_match_recv_t *r, tw_status_t status)
{
    tw_completion_t c = {.user = r->user,
                         .status = status,
                         .op = TW_OP_RECV,
                         .peer = r->src,
                         .tag = r->tag,
                         .length = 0};
    tw_cq_push(r->cq, &c);
    tw_free(r, sizeof(*r));
}

static void tw_msg_cancel_recv(tw_match_recv_t *r, void *arg)
{
    (void)arg;
    tw_msg_end_recv(r, TW_ERR_CANCELED);
}

void tw_msg_destroy(tw_msg_t *msg)
{
    tw_rma_destroy(msg->rma);
    tw_match_cleanup(&msg->match, tw_msg_cancel_recv, msg);
    tw_match_cleanup(&msg->coll_match, tw_msg_cancel_recv, msg);
    for (size_t i = 0; i < TW_ARRAY_SIZE(msg->am); i++) {
        tw_msg_am_entry_t *e = atomic_load_explicit(&msg->am[i], memory_order_acquire);
        if (e != NULL) {
            tw_free(e, sizeof(*e));
        }
    }
    tw_msg_stall_cleanup(msg);
    tw_stats_destroy(msg->stats);
    tw_free(msg->down, (size_t)msg->size * sizeof(*msg->down));
    tw_free(msg->route, (size_t)msg->size * sizeof(*msg->route));
    tw_free(msg, sizeof(*msg));
}

static bool tw_msg_is_down(tw_msg_t *msg, int peer)
{
    return atomic_load_explicit(&msg->down[peer], memory_order_seq_cst) != 0;
}

/* The matching space of transport am id @p am_id (TAG or COLL). */
static tw_match_t *tw_msg_space(tw_msg_t *msg, uint8_t am_id)
{
    return am_id == TW_MSG_AM_COLL ? &msg->coll_match : &msg->match;
}

static void tw_msg_fail_recv(tw_match_recv_t *r, void *arg)
{
    (void)arg;
    tw_msg_end_recv(r, TW_ERR_PEER_FAILED);
}

bool tw_msg_peer_down(tw_msg_t *msg, int peer)
{
    if (peer < 0 || peer >= msg->size) {
        return false;
    }
    /* Flag first, then sweep: a receive posted after the sweep sees the
     * flag (tw_msg_recv looks again after posting). */
    if (atomic_exchange_explicit(&msg->down[peer], 1, memory_order_seq_cst) != 0) {
        return false;
    }
    tw_match_fail_src(&msg->match, peer, tw_msg_fail_recv, msg);
    tw_match_fail_src(&msg->coll_match, peer, tw_msg_fail_recv, msg);
    tw_rma_peer_down(msg->rma, peer);
    return true;
}

tw_rma_t *tw_msg_rma(tw_msg_t *msg)
{
    return msg->rma;
}

void tw_msg_set_route(tw_msg_t *msg, int peer, tw_tl_iface_t *iface)
{
    msg->route[peer] = iface;
}

tw_stats_t *tw_msg_stats(tw_msg_t *msg)
{
    return msg->stats;
}

/* ---- sending --------------------------------------------------------- */

/* Thread: engine owner, or the sender for inline delivery. */
static void tw_msg_send_done(tw_tl_comp_t *comp, tw_status_t status)
{
    tw_msg_sreq_t *req = (tw_msg_sreq_t *)comp;
    tw_msg_flight_unlink(&req->fl);
    tw_stall_heard(&req->msg->stall, req->dst);
    tw_completion_t c = {.user = req->user,
                         .status = status,
                         .op = req->op,
                         .peer = req->dst,
                         .tag = req->tag,
                         .length = req->len};
    tw_cq_push(req->cq, &c);
    tw_free(req, sizeof(*req));
}

static tw_status_t tw_msg_post_send(tw_msg_t *msg, int dst, uint8_t am_id, const void *hdr,
                                    size_t hdr_len, const void *buf, size_t len, uint64_t tag,
                                    tw_op_t op, tw_cq_t *cq, void *user)
{
    tw_tl_iface_t *iface = msg->route[dst];
    tw_msg_sreq_t *req;
    tw_status_t st;

    if (iface == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (TW_UNLIKELY(tw_msg_is_down(msg, dst))) {
        return TW_ERR_PEER_FAILED;
    }
    st = tw_cq_reserve(cq);
    if (st != TW_OK) {
        return st;
    }
    if (len <= msg->eager_limit && hdr_len + len <= iface->attr.max_short) {
        st = tw_tl_am_short(iface, dst, am_id, hdr, hdr_len, buf, len);
        if (st != TW_OK) {
            goto err_unreserve;
        }
        tw_completion_t c = {
            .user = user, .status = TW_OK, .op = op, .peer = dst, .tag = tag, .length = len};
        tw_cq_push(cq, &c);
        tw_stats_inc(msg->stats, TW_MSG_STAT_EAGER);
    } else {
        if (len > iface->attr.max_zcopy) {
            st = TW_ERR_INVALID;
            goto err_unreserve;
        }
        req = tw_malloc(sizeof(*req));
        if (req == NULL) {
            st = TW_ERR_NOMEM;
            goto err_unreserve;
        }
        *req = (tw_msg_sreq_t){.comp = {.cb = tw_msg_send_done},
                               .msg = msg,
                               .cq = cq,
                               .user = user,
                               .tag = tag,
                               .len = len,
                               .dst = dst,
                               .op = op,
                               .am_id = am_id};
        tw_msg_flight_link(msg, &req->fl, false);
        st = tw_tl_am_zcopy(iface, dst, am_id, hdr, hdr_len, buf, len, &req->comp);
        if (st != TW_OK) {
            tw_msg_flight_unlink(&req->fl);
            tw_free(req, sizeof(*req));
            goto err_unreserve;
        }
        tw_stats_inc(msg->stats, TW_MSG_STAT_ZCOPY);
    }
    tw_stats_inc(msg->stats, TW_MSG_STAT_SENT);
    tw_stats_add(msg->stats, TW_MSG_STAT_SENT_BYTES, len);
    return TW_OK;

err_unreserve:
    tw_cq_unreserve(cq);
    return st;
}

/* One am_short of header and @p len <= TW_INJECT_MAX bytes, no completion. */
static tw_status_t tw_msg_inject(tw_msg_t *msg, uint8_t am_id, uint8_t type, int dst, uint64_t tag,
                                 const void *buf, size_t len)
{
    tw_msg_hdr_t hdr = {.version = TW_MSG_PROTO_VERSION,
                        .type = type,
                        .src_thread = tw_thread_index(),
                        .tag = tag,
                        .len = len};
    tw_tl_iface_t *iface = msg->route[dst];
    tw_status_t st;

    if (iface == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (TW_UNLIKELY(tw_msg_is_down(msg, dst))) {
        return TW_ERR_PEER_FAILED;
    }
    /* Every transport's max_short holds TW_TL_SHORT_MIN, and the header
     * and TW_INJECT_MAX bytes fit in that (asserted on top): one am_short,
     * which copies, whatever the eager limit. */
    st = tw_tl_am_short(iface, dst, am_id, &hdr, sizeof(hdr), buf, len);
    if (st != TW_OK) {
        return st;
    }
    tw_stats_inc(msg->stats, TW_MSG_STAT_EAGER);
    tw_stats_inc(msg->stats, TW_MSG_STAT_SENT);
    tw_stats_add(msg->stats, TW_MSG_STAT_SENT_BYTES, len);
    return TW_OK;
}

tw_status_t tw_msg_send_inject(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len)
{
    return tw_msg_inject(msg, TW_MSG_AM_TAG, TW_MSG_TYPE_TAG, dst, tag, buf, len);
}

tw_status_t tw_msg_coll_inject(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len)
{
    if (len > TW_INJECT_MAX) {
        return TW_ERR_INVALID;
    }
    return tw_msg_inject(msg, TW_MSG_AM_COLL, TW_MSG_TYPE_TAG, dst, tag, buf, len);
}

tw_status_t tw_msg_coll_ctl(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len)
{
    if (len > TW_INJECT_MAX) {
        return TW_ERR_INVALID;
    }
    return tw_msg_inject(msg, TW_MSG_AM_COLL, TW_MSG_TYPE_CTL, dst, tag, buf, len);
}

size_t tw_msg_eager_max(tw_msg_t *msg, int dst)
{
    tw_tl_iface_t *iface = msg->route[dst];
    size_t room;

    if (iface == NULL || iface->attr.max_short < sizeof(tw_msg_hdr_t)) {
        return 0;
    }
    room = iface->attr.max_short - sizeof(tw_msg_hdr_t);
    return TW_MIN(room, msg->eager_limit);
}

bool tw_msg_coll_detached(tw_msg_t *msg, int dst)
{
    tw_tl_iface_t *iface = msg->route[dst];

    return iface != NULL && (iface->caps & TW_TL_CAP_EAGER_IDS) != 0 &&
           (iface->eager_am_ids >> TW_MSG_AM_COLL & 1) != 0;
}

void tw_msg_coll_set_ctl(tw_msg_t *msg, tw_msg_ctl_fn_t fn, void *arg)
{
    msg->ctl_fn = fn;
    msg->ctl_arg = arg;
}

static tw_status_t tw_msg_send_tagged(tw_msg_t *msg, uint8_t am_id, int dst, uint64_t tag,
                                      const void *buf, size_t len, tw_cq_t *cq, void *user)
{
    tw_msg_hdr_t hdr = {.version = TW_MSG_PROTO_VERSION,
                        .type = TW_MSG_TYPE_TAG,
                        .src_thread = tw_thread_index(),
                        .tag = tag,
                        .len = len};
    return tw_msg_post_send(msg, dst, am_id, &hdr, sizeof(hdr), buf, len, tag, TW_OP_SEND, cq,
                            user);
}

tw_status_t tw_msg_send(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len,
                        tw_cq_t *cq, void *user)
{
    return tw_msg_send_tagged(msg, TW_MSG_AM_TAG, dst, tag, buf, len, cq, user);
}

tw_status_t tw_msg_coll_send(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len,
                             tw_cq_t *cq, void *user)
{
    return tw_msg_send_tagged(msg, TW_MSG_AM_COLL, dst, tag, buf, len, cq, user);
}

tw_status_t tw_msg_am_send(tw_msg_t *msg, int dst, uint8_t id, const void *hdr, size_t hdr_len,
                           const void *data, size_t len, tw_cq_t *cq, void *user)
{
    unsigned char wire[sizeof(tw_msg_hdr_t) + TW_AM_HDR_MAX];
    tw_msg_hdr_t h = {.version = TW_MSG_PROTO_VERSION,
                      .type = TW_MSG_TYPE_AM,
                      .am_id = id,
                      .am_hdr_len = (uint16_t)hdr_len,
                      .src_thread = tw_thread_index(),
                      .len = len};

    if (hdr_len > TW_AM_HDR_MAX) {
        return TW_ERR_INVALID;
    }
    memcpy(wire, &h, sizeof(h));
    if (hdr_len > 0) {
        memcpy(wire + sizeof(h), hdr, hdr_len);
    }
    return tw_msg_post_send(msg, dst, TW_MSG_AM_USER, wire, sizeof(h) + hdr_len, data, len, id,
                            TW_OP_AM_SEND, cq, user);
}

/* ---- receiving ------------------------------------------------------- */

/* Fill and complete a matched receive; frees @p r. Thread: any. */
static void tw_msg_finish_recv(tw_msg_t *msg, tw_match_recv_t *r, int src, uint64_t tag,
                               const void *data, size_t len)
{
    tw_completion_t c = {
        .user = r->user, .status = TW_OK, .op = TW_OP_RECV, .peer = src, .tag = tag, .length = len};
    size_t n = len;

    if (len > r->len) {
        n = r->len;
        c.status = TW_ERR_TRUNCATED;
        tw_stats_inc(msg->stats, TW_MSG_STAT_TRUNCATED);
    }
    if (n > 0) {
        memcpy(r->buf, data, n);
    }
    tw_stats_inc(msg->stats, TW_MSG_STAT_RECVD);
    tw_stats_add(msg->stats, TW_MSG_STAT_RECVD_BYTES, len);
    tw_cq_push(r->cq, &c);
    tw_free(r, sizeof(*r));
}

/* ---- rendezvous ------------------------------------------------------ */

/* A pulled tagged message landed (or failed). Thread: engine owner. */
static void tw_msg_rndv_recv_done(tw_tl_comp_t *comp, tw_status_t status)
{
    tw_msg_rreq_t *q = (tw_msg_rreq_t *)comp;
    tw_msg_t *msg = q->msg;
    tw_match_recv_t *r = q->r;
    tw_completion_t c = {.user = r->user,
                         .status = status,
                         .op = TW_OP_RECV,
                         .peer = q->src,
                         .tag = q->tag,
                         .length = status == TW_OK ? q->len : 0};

    tw_msg_flight_unlink(&q->fl);
    if (status == TW_OK && q->len > r->len) {
        c.status = TW_ERR_TRUNCATED;
        tw_stats_inc(msg->stats, TW_MSG_STAT_TRUNCATED);
    }
    if (status == TW_OK) {
        tw_stats_inc(msg->stats, TW_MSG_STAT_RECVD);
        tw_stats_add(msg->stats, TW_MSG_STAT_RECVD_BYTES, q->len);
    }
    tw_cq_push(r->cq, &c);
    tw_free(r, sizeof(*r));
    tw_free(q, q->alloc_len);
}

/* A pulled active-message payload landed: run the handler. */
static void tw_msg_rndv_am_done(tw_tl_comp_t *comp, tw_status_t status)
{
    tw_msg_rreq_t *q = (tw_msg_rreq_t *)comp;
    tw_msg_t *msg = q->msg;

    tw_msg_flight_unlink(&q->fl);
    if (status == TW_OK) {
        tw_msg_am_entry_t *e = atomic_load_explicit(&msg->am[q->am_id], memory_order_acquire);
        if (e != NULL) {
            e->fn(msg->ctx, q->src, q->bytes, q->am_hdr_len, q->bytes + q->am_hdr_len, q->len,
                  e->arg);
            tw_stats_inc(msg->stats, TW_MSG_STAT_AM_RUN);
        }
    }
    tw_free(q, q->alloc_len);
}

static void tw_msg_rndv_released(tw_tl_comp_t *comp, tw_status_t status)
{
    (void)comp, (void)status;
}

/* Completion for pulls of length 0 that only release a sender. */
static tw_tl_comp_t tw_msg_release_comp = {.cb = tw_msg_rndv_released};

/* Pull into the matched receive. Thread: an engine of the transport --
 * the one it announced on (recv_rndv), or the iface's (a hand-over). */
static void tw_msg_rndv_pull(tw_msg_rreq_t *q)
{
    size_t n = TW_MIN(q->len, q->r->len);
    tw_status_t st;

    tw_msg_flight_link(q->msg, &q->fl, true);
    st = tw_tl_rndv_get(q->iface, q->rndv, q->r->buf, n, &q->comp);
    if (st != TW_OK) {
        q->comp.cb(&q->comp, st);
    }
}

/* Release an announcement unread. Thread: engine owner. */
static void tw_msg_rndv_release_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tl_iface_t *iface = arg;

    (void)u64;
    tw_pe_assert_owner(iface->pe);
    if (tw_tl_rndv_get(iface, data, NULL, 0, &tw_msg_release_comp) != TW_OK) {
        tw_debug("msg", "releasing an announced message failed");
    }
}

static void tw_msg_rndv_pull_cmd(void *arg, void *data, uint64_t u64)
{
    (void)data, (void)u64;
    tw_msg_rndv_pull(arg);
}

/* A receive matched an unexpected rendezvous: the pull runs on the
 * engine that owns the transport (now, if that is us). Thread: any. */
static void tw_msg_rndv_matched(tw_msg_t *msg, tw_match_recv_t *r, tw_match_unexp_t *u)
{
    tw_tl_iface_t *iface = msg->route[u->src];
    tw_msg_rreq_t *q = tw_malloc(sizeof(*q));

    if (q == NULL) {
        /* The receive fails; the announcement is released (pulled with
         * length 0), so its sender's operation completes too. */
        tw_error("msg", "out of memory pulling a %zu-byte message from rank %d", u->len, u->src);
        tw_completion_t c = {.user = r->user,
                             .status = TW_ERR_NOMEM,
                             .op = TW_OP_RECV,
                             .peer = u->src,
                             .tag = u->tag};
        tw_cq_push(r->cq, &c);
        tw_free(r, sizeof(*r));
        tw_pe_cmd_t cmd = {.fn = tw_msg_rndv_release_cmd, .arg = iface, .data = u->rndv};
        tw_match_unexp_free(u);
        tw_pe_hand_over(iface->pe, &cmd);
        return;
    }
    *q = (tw_msg_rreq_t){.comp = {.cb = tw_msg_rndv_recv_done},
                         .msg = msg,
                         .r = r,
                         .iface = iface,
                         .rndv = u->rndv,
                         .src = u->src,
                         .tag = u->tag,
                         .len = u->len,
                         .alloc_len = sizeof(*q)};
    tw_match_unexp_free(u);
    tw_pe_cmd_t cmd = {.fn = tw_msg_rndv_pull_cmd, .arg = q};
    /* Now if we are the owner; never fails: the sender waits for it. */
    tw_pe_hand_over(iface->pe, &cmd);
}

static tw_status_t tw_msg_post_recv(tw_msg_t *msg, tw_match_t *m, int src, uint64_t tag,
                                    uint64_t ignore_mask, void *buf, size_t len, tw_cq_t *cq,
                                    void *user)
{
    tw_match_recv_t *r;
    tw_match_unexp_t *u;
    tw_status_t st;

    st = tw_cq_reserve(cq);
    if (st != TW_OK) {
        return st;
    }
    r = tw_malloc(sizeof(*r));
    if (r == NULL) {
        tw_cq_unreserve(cq);
        return TW_ERR_NOMEM;
    }
    *r = (tw_match_recv_t){.src = src,
                           .tag = tag,
                           .ignore = ignore_mask,
                           .buf = buf,
                           .len = len,
                           .cq = cq,
                           .user = user,
                           .stall = tw_stall_now(&msg->stall)};
    u = tw_match_post(m, r);
    if (u == NULL) {
        /* Posted. If its source is gone, make sure it does not wait
         * forever (the sweep may have run before the post). */
        if (src != TW_ANY_SOURCE && tw_msg_is_down(msg, src)) {
            tw_match_fail_src(m, src, tw_msg_fail_recv, msg);
        }
    } else if (u->rndv != NULL) {
        tw_msg_rndv_matched(msg, r, u);
    } else {
        tw_msg_finish_recv(msg, r, u->src, u->tag, u->data, u->len);
        tw_match_unexp_free(u);
    }
    return TW_OK;
}

tw_status_t tw_msg_recv(tw_msg_t *msg, int src, uint64_t tag, uint64_t ignore_mask, void *buf,
                        size_t len, tw_cq_t *cq, void *user)
{
    return tw_msg_post_recv(msg, &msg->match, src, tag, ignore_mask, buf, len, cq, user);
}

tw_status_t tw_msg_coll_recv(tw_msg_t *msg, int src, uint64_t tag, void *buf, size_t len,
                             tw_cq_t *cq, void *user)
{
    return tw_msg_post_recv(msg, &msg->coll_match, src, tag, 0, buf, len, cq, user);
}

bool tw_msg_coll_cancel(tw_msg_t *msg, int src, uint64_t tag)
{
    tw_match_recv_t *r = tw_match_cancel(&msg->coll_match, src, tag);

    if (r == NULL) {
        return false;
    }
    tw_cq_unreserve(r->cq);
    tw_free(r, sizeof(*r));
    return true;
}

/* A leftover unexpected message: freed; a rendezvous one is released on
 * the engine that owns its transport, so its sender completes. */
static void tw_msg_purge_one(tw_match_unexp_t *u, void *arg)
{
    tw_msg_t *msg = arg;

    if (u->rndv != NULL) {
        tw_tl_iface_t *iface = msg->route[u->src];
        tw_pe_cmd_t cmd = {.fn = tw_msg_rndv_release_cmd, .arg = iface, .data = u->rndv};
        tw_pe_hand_over(iface->pe, &cmd);
    }
    tw_match_unexp_free(u);
}

void tw_msg_coll_purge(tw_msg_t *msg, uint64_t tag, uint64_t mask)
{
    tw_match_purge(&msg->coll_match, tag, mask, tw_msg_purge_one, msg);
}

/* Flag, then purge; an arrival queues, then looks at the flag (after
 * the bucket's lock): one of the two sees the other's message. */
void tw_msg_coll_close(tw_msg_t *msg)
{
    atomic_store_explicit(&msg->coll_closed, true, memory_order_seq_cst);
    tw_msg_coll_purge(msg, 0, 0);
}

tw_status_t tw_msg_am_register(tw_msg_t *msg, uint8_t id, tw_am_handler_t fn, void *arg)
{
    tw_msg_am_entry_t *e = tw_malloc(sizeof(*e)), *expected = NULL;

    if (e == NULL) {
        return TW_ERR_NOMEM;
    }
    e->fn = fn;
    e->arg = arg;
    if (!atomic_compare_exchange_strong_explicit(&msg->am[id], &expected, e, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        tw_free(e, sizeof(*e));
        tw_error("msg", "active-message id %u is already registered", id);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

/* A bad arrival: count it; log the first few and then every 1000th, so a
 * hostile or broken peer cannot flood the log. */
static void tw_msg_drop(tw_msg_t *msg, int src, const char *why)
{
    uint64_t n = atomic_fetch_add_explicit(&msg->drop_logged, 1, memory_order_relaxed);

    tw_stats_inc(msg->stats, TW_MSG_STAT_DROPPED);
    if (n < 16 || n % 1000 == 0) {
        tw_warn("msg", "dropped a message from rank %d: %s (%llu dropped so far)", src, why,
                (unsigned long long)n + 1);
    }
}

void tw_msg_recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    tw_msg_t *msg = arg;
    tw_msg_hdr_t h;

    tw_stall_heard(&msg->stall, src);
    if (am_id == TW_MSG_AM_RMA) {
        tw_rma_recv(msg->rma, src, hdr, hdr_len, data, len);
        return;
    }
    if ((am_id != TW_MSG_AM_TAG && am_id != TW_MSG_AM_USER && am_id != TW_MSG_AM_COLL) ||
        hdr_len < sizeof(h)) {
        tw_msg_drop(msg, src, "unknown transport am id or short header");
        return;
    }
    memcpy(&h, hdr, sizeof(h));
    if (h.version != TW_MSG_PROTO_VERSION) {
        tw_msg_drop(msg, src, "unsupported protocol version");
        return;
    }
    if (h.len != len) {
        tw_msg_drop(msg, src, "payload length does not match the header");
        return;
    }
    if (am_id == TW_MSG_AM_COLL && h.type == TW_MSG_TYPE_CTL && hdr_len == sizeof(h) &&
        h.am_hdr_len == 0) {
        if (msg->ctl_fn != NULL) {
            msg->ctl_fn(msg->ctl_arg, src, h.tag, data, len);
        }
        return;
    }
    if ((am_id == TW_MSG_AM_TAG || am_id == TW_MSG_AM_COLL) && h.type == TW_MSG_TYPE_TAG &&
        hdr_len == sizeof(h) && h.am_hdr_len == 0) {
        tw_status_t st;
        tw_match_recv_t *r =
            tw_match_arrive(tw_msg_space(msg, am_id), src, h.tag, data, len, NULL, &st);
        if (r != NULL) {
            tw_msg_finish_recv(msg, r, src, h.tag, data, len);
        } else if (st == TW_OK) {
            tw_stats_inc(msg->stats, TW_MSG_STAT_UNEXPECTED);
            if (am_id == TW_MSG_AM_COLL &&
                atomic_load_explicit(&msg->coll_closed, memory_order_seq_cst)) {
                tw_msg_coll_purge(msg, h.tag, UINT64_MAX); /* finalizing: nobody reads it */
            }
        } else {
            tw_stats_inc(msg->stats, TW_MSG_STAT_DROPPED);
        }
    } else if (am_id == TW_MSG_AM_USER && h.type == TW_MSG_TYPE_AM &&
               hdr_len == sizeof(h) + h.am_hdr_len && h.am_hdr_len <= TW_AM_HDR_MAX) {
        tw_msg_am_entry_t *e = atomic_load_explicit(&msg->am[h.am_id], memory_order_acquire);
        if (e == NULL) {
            tw_msg_drop(msg, src, "no handler registered for its active-message id");
            return;
        }
        e->fn(msg->ctx, src, (const unsigned char *)hdr + sizeof(h), h.am_hdr_len, data, len,
              e->arg);
        tw_stats_inc(msg->stats, TW_MSG_STAT_AM_RUN);
    } else {
        tw_msg_drop(msg, src, "malformed header");
    }
}

/* A rendezvous announcement arrived. Thread: engine owner. */
void tw_msg_rndv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len, size_t len,
                    tw_tl_rndv_t *rndv)
{
    tw_msg_t *msg = arg;
    tw_tl_iface_t *iface = msg->route[src];
    tw_msg_hdr_t h;

    tw_stall_heard(&msg->stall, src);
    if (am_id == TW_MSG_AM_RMA) {
        tw_rma_rndv(msg->rma, src, hdr, hdr_len, len, rndv);
        return;
    }
    if ((am_id != TW_MSG_AM_TAG && am_id != TW_MSG_AM_USER && am_id != TW_MSG_AM_COLL) ||
        hdr_len < sizeof(h)) {
        tw_msg_drop(msg, src, "unknown transport am id or short header (rendezvous)");
        goto release;
    }
    memcpy(&h, hdr, sizeof(h));
    if (h.version != TW_MSG_PROTO_VERSION || h.len != len) {
        tw_msg_drop(msg, src, "bad version or length (rendezvous)");
        goto release;
    }
    if ((am_id == TW_MSG_AM_TAG || am_id == TW_MSG_AM_COLL) && h.type == TW_MSG_TYPE_TAG &&
        hdr_len == sizeof(h) && h.am_hdr_len == 0) {
        tw_status_t st;
        tw_match_recv_t *r =
            tw_match_arrive(tw_msg_space(msg, am_id), src, h.tag, NULL, len, rndv, &st);
        if (r != NULL) {
            tw_msg_rreq_t *q = tw_malloc(sizeof(*q));
            if (q == NULL) {
                tw_error("msg", "out of memory pulling a %zu-byte message from rank %d", len, src);
                tw_completion_t c = {.user = r->user,
                                     .status = TW_ERR_NOMEM,
                                     .op = TW_OP_RECV,
                                     .peer = src,
                                     .tag = h.tag};
                tw_cq_push(r->cq, &c);
                tw_free(r, sizeof(*r));
                goto release;
            }
            *q = (tw_msg_rreq_t){.comp = {.cb = tw_msg_rndv_recv_done},
                                 .msg = msg,
                                 .r = r,
                                 .iface = iface,
                                 .rndv = rndv,
                                 .src = src,
                                 .tag = h.tag,
                                 .len = len,
                                 .alloc_len = sizeof(*q)};
            tw_msg_rndv_pull(q);
        } else if (st == TW_OK) {
            tw_stats_inc(msg->stats, TW_MSG_STAT_UNEXPECTED);
            if (am_id == TW_MSG_AM_COLL &&
                atomic_load_explicit(&msg->coll_closed, memory_order_seq_cst)) {
                tw_msg_coll_purge(msg, h.tag, UINT64_MAX); /* finalizing: nobody reads it */
            }
        } else {
            tw_stats_inc(msg->stats, TW_MSG_STAT_DROPPED);
            goto release;
        }
        return;
    }
    if (am_id == TW_MSG_AM_USER && h.type == TW_MSG_TYPE_AM &&
        hdr_len == sizeof(h) + h.am_hdr_len && h.am_hdr_len <= TW_AM_HDR_MAX) {
        size_t alloc_len = sizeof(tw_msg_rreq_t) + h.am_hdr_len + len;
        tw_msg_rreq_t *q;
        if (atomic_load_explicit(&msg->am[h.am_id], memory_order_acquire) == NULL) {
            tw_msg_drop(msg, src, "no handler registered for its active-message id");
            goto release;
        }
        if (len > TW_MSG_AM_RNDV_MAX || (q = tw_malloc(alloc_len)) == NULL) {
            tw_msg_drop(msg, src, "active-message payload too large to stage");
            goto release;
        }
        *q = (tw_msg_rreq_t){.comp = {.cb = tw_msg_rndv_am_done},
                             .msg = msg,
                             .iface = iface,
                             .rndv = rndv,
                             .src = src,
                             .len = len,
                             .alloc_len = alloc_len,
                             .am_id = h.am_id,
                             .am_hdr_len = h.am_hdr_len};
        memcpy(q->bytes, (const unsigned char *)hdr + sizeof(h), h.am_hdr_len);
        tw_msg_flight_link(msg, &q->fl, true);
        tw_status_t st = tw_tl_rndv_get(iface, rndv, q->bytes + h.am_hdr_len, len, &q->comp);
        if (st != TW_OK) {
            q->comp.cb(&q->comp, st);
        }
        return;
    }
    tw_msg_drop(msg, src, "malformed header (rendezvous)");
release:
    /* Release the sender: its send completes, the data is not read. */
    if (tw_tl_rndv_get(iface, rndv, NULL, 0, &tw_msg_release_comp) != TW_OK) {
        tw_debug("msg", "releasing a rendezvous of rank %d failed", src);
    }
}
