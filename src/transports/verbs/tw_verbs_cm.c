/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Connections of the verbs transport: one RC QP per peer, made lazily on
 * the first operation for it; the RC QP numbers go over the device's UD
 * QP (like openib's udcm), signed with the job key (SipHash; the UD Q_Key
 * is derived from the key too, so other jobs' datagrams are not accepted):
 *   REQ (my QPN, PSN)  -> the peer creates its QP if it has none, moves it
 *                         to RTR/RTS toward mine, answers
 *   REP (its QPN, PSN) -> I move mine to RTR/RTS: both can now receive, I
 *                         send, and answer
 *   RTU                -> the peer sends too (so does its first arrival
 *                         on the RC QP, should the RTU be lost).
 *
 * A side has at most one QP per peer and every message names it, so a
 * simultaneous connect needs no tie-break: each side connects its one QP
 * to the QPN the other announced (a REQ that crosses ours is answered
 * like any REQ). UD is unreliable: a side that is not yet allowed to send
 * repeats its REQ (or, having answered one, its REP) after 20 ms,
 * doubling to 1 s; duplicates are answered again, idempotently. A peer
 * that does not answer within TW_VERBS_TIMEOUT has failed. Operations for
 * a peer that is not connected yet wait in its queue.
 *
 * Generations tell an old connection's messages from the new one's once
 * an endpoint was reset (tw_verbs_fault.c). Each endpoint has one (gen,
 * from 1, + 1 at each reset) and every connection message carries the
 * sender's (gen) and the receiver's as the sender knows it (echo: our
 * rgen, 0 if none). We remember the peer's generation of the connection
 * we are in (rgen, set when our QP connects to its QPN) and, after a
 * reset, hear only newer ones (rgen_min = rgen + 1): a REQ, REP, RESET or
 * DOWN delayed from before the reset is stale and dropped. A REP, RTU,
 * PING or PONG must echo our current generation, a DOWN or RESET ours or
 * 0 (a peer that never connected): one meant for an endpoint of ours
 * from before a reset (a REP answering an older REQ) is stale too. A peer
 * that hears from a newer generation of ours while connected to an older
 * one knows we lost the connection (our port went down, its did not): it
 * fails us for now too, resets once flushed, and answers our REQ, which
 * we repeat meanwhile, from a new endpoint of its own -- newer than the
 * one we knew, as ours requires. RESET (sent when we fail a peer for now
 * while our port is up) has it do so at once rather than when its own
 * retries run out. A peer failed for good ignores all of it (it learns by
 * its own retries); so does one whose port is not up. A DOWN of the
 * current generation turns "for now" into "for good": no reset, sends
 * fail with TW_ERR_PEER_FAILED, peer_down does not run twice for one
 * failure. Rendezvous handles remember their connection's generation: one
 * announced before a reset is refused (TW_ERR_PEER_FAILED) and sends no
 * FIN on the new connection.
 *
 * Thread: engine, for everything here but the test hook.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/timerfd.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/verbs/tw_verbs_int.h"

/* ---- QP number map ----------------------------------------------------- */

static unsigned tw_verbs_qpn_slot(uint32_t qpn, unsigned cap)
{
    return (unsigned)((qpn * 2654435761u) & (cap - 1));
}

static tw_status_t tw_verbs_qpn_put(tw_verbs_dev_t *dev, uint32_t qpn, int peer)
{
    unsigned i = tw_verbs_qpn_slot(qpn, dev->qpn_cap);

    for (unsigned k = 0; k < dev->qpn_cap; k++, i = (i + 1) & (dev->qpn_cap - 1)) {
        if (dev->qpn_vals[i] < 0 || dev->qpn_keys[i] == qpn) {
            dev->qpn_keys[i] = qpn;
            dev->qpn_vals[i] = peer;
            return TW_OK;
        }
    }
    return TW_ERR_NOMEM;
}

int tw_verbs_qpn_get(const tw_verbs_dev_t *dev, uint32_t qpn)
{
    unsigned i = tw_verbs_qpn_slot(qpn, dev->qpn_cap);

    for (unsigned k = 0; k < dev->qpn_cap; k++, i = (i + 1) & (dev->qpn_cap - 1)) {
        if (dev->qpn_vals[i] < 0) {
            return -1;
        }
        if (dev->qpn_keys[i] == qpn) {
            return dev->qpn_vals[i];
        }
    }
    return -1;
}

/* Forget @p qpn (its QP is destroyed). Linear probing: the entries after
 * it in its cluster that may not stay behind the hole move into it. */
static void tw_verbs_qpn_del(tw_verbs_dev_t *dev, uint32_t qpn)
{
    unsigned mask = dev->qpn_cap - 1, i = tw_verbs_qpn_slot(qpn, dev->qpn_cap), k;

    for (k = 0; k < dev->qpn_cap; k++, i = (i + 1) & mask) {
        if (dev->qpn_vals[i] < 0) {
            return;
        }
        if (dev->qpn_keys[i] == qpn) {
            break;
        }
    }
    if (k == dev->qpn_cap) {
        return;
    }
    unsigned hole = i;
    for (unsigned j = (i + 1) & mask; j != i && dev->qpn_vals[j] >= 0; j = (j + 1) & mask) {
        unsigned home = tw_verbs_qpn_slot(dev->qpn_keys[j], dev->qpn_cap);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            dev->qpn_keys[hole] = dev->qpn_keys[j];
            dev->qpn_vals[hole] = dev->qpn_vals[j];
            hole = j;
        }
    }
    dev->qpn_vals[hole] = -1;
}

/* The map of @p dev for @p size ranks: at most one QP per peer, at most
 * half full. */
tw_status_t tw_verbs_qpn_init(tw_verbs_dev_t *dev, int size)
{
    dev->qpn_cap = 16;
    while (dev->qpn_cap < 2u * (unsigned)size) {
        dev->qpn_cap *= 2;
    }
    dev->qpn_keys = tw_calloc(dev->qpn_cap, sizeof(*dev->qpn_keys));
    dev->qpn_vals = tw_calloc(dev->qpn_cap, sizeof(*dev->qpn_vals));
    if (dev->qpn_keys == NULL || dev->qpn_vals == NULL) {
        tw_verbs_qpn_cleanup(dev);
        return TW_ERR_NOMEM;
    }
    for (unsigned i = 0; i < dev->qpn_cap; i++) {
        dev->qpn_vals[i] = -1;
    }
    return TW_OK;
}

void tw_verbs_qpn_cleanup(tw_verbs_dev_t *dev)
{
    if (dev->qpn_keys != NULL) {
        tw_free(dev->qpn_keys, dev->qpn_cap * sizeof(*dev->qpn_keys));
        dev->qpn_keys = NULL;
    }
    if (dev->qpn_vals != NULL) {
        tw_free(dev->qpn_vals, dev->qpn_cap * sizeof(*dev->qpn_vals));
        dev->qpn_vals = NULL;
    }
}

/* ---- QP state machine ---------------------------------------------------- */

/* The device's timerfd: a fast tick while connections are being set up
 * or the port is waiting for our address to come back, a slower one for
 * liveness while peers are connected, else off. */
void tw_verbs_timer_update(tw_verbs_dev_t *dev)
{
    uint64_t t = dev->vb->cfg.conn_timeout_ns;
    bool fast = dev->conns != NULL || tw_verbs_port_state(dev) == TW_VERBS_PORT_WAIT;
    uint64_t want = fast ? TW_VERBS_TICK_NS
                    : t > 0 && dev->nready > 0
                        ? TW_MIN(TW_MAX(t / 8, TW_VERBS_TICK_NS), 250ull * 1000 * 1000)
                        : 0;
    struct itimerspec its = {0};

    if (dev->timer_ns == want) {
        return;
    }
    its.it_interval.tv_sec = (time_t)(want / 1000000000u);
    its.it_interval.tv_nsec = (long)(want % 1000000000u);
    its.it_value = its.it_interval;
    (void)timerfd_settime(dev->timer_fd, 0, &its, NULL);
    dev->timer_ns = want;
}

static void tw_verbs_conn_watch(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;
    uint64_t now = tw_time_ns();

    if (ep->on_conn) {
        return;
    }
    ep->on_conn = true;
    ep->rtx_ns = TW_VERBS_RTX_FIRST;
    ep->next_tx_ns = now + ep->rtx_ns;
    ep->deadline_ns =
        dev->vb->cfg.conn_timeout_ns == 0 ? UINT64_MAX : now + dev->vb->cfg.conn_timeout_ns;
    ep->next_conn = dev->conns;
    dev->conns = ep;
    tw_verbs_timer_update(dev);
}

void tw_verbs_conn_unwatch(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;

    if (!ep->on_conn) {
        return;
    }
    for (tw_verbs_ep_t **pp = &dev->conns; *pp != NULL; pp = &(*pp)->next_conn) {
        if (*pp == ep) {
            *pp = ep->next_conn;
            break;
        }
    }
    ep->on_conn = false;
    tw_verbs_timer_update(dev);
}

/* @p ep's QP, in INIT (TW_VERBS_EP_INIT). TW_ERR_TRANSPORT,
 * TW_ERR_NOMEM (logged). */
static tw_status_t tw_verbs_qp_create(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_qp_init_attr ia = {.send_cq = dev->cq,
                                  .recv_cq = dev->cq,
                                  .srq = dev->srq,
                                  .qp_type = IBV_QPT_RC,
                                  .sq_sig_all = 1,
                                  .cap = {.max_send_wr = dev->sq_depth,
                                          .max_send_sge = 1,
                                          .max_inline_data = dev->max_inline}};
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = dev->port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_WRITE};
    uint32_t psn = 0;
    tw_status_t st = TW_ERR_TRANSPORT;
    int rc;

    ep->qp = ibv_create_qp(dev->qp_pd, &ia);
    if (ep->qp == NULL && dev->max_inline > 0) {
        ia.cap.max_inline_data = 0; /* some providers refuse any inline size */
        ep->qp = ibv_create_qp(dev->qp_pd, &ia);
        if (ep->qp != NULL) {
            dev->max_inline = 0;
        }
    }
    if (ep->qp == NULL) {
        tw_error("verbs", "%s: cannot create an RC QP for rank %d: %m", dev->name, ep->peer);
        return TW_ERR_TRANSPORT;
    }
    rc = ibv_modify_qp(ep->qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        tw_error("verbs", "%s: RC QP for rank %d: INIT failed: %s", dev->name, ep->peer,
                 strerror(rc));
        goto err_qp;
    }
    st = tw_verbs_qpn_put(dev, ep->qp->qp_num, ep->peer);
    if (st != TW_OK) {
        tw_error("verbs", "%s: QP number table full", dev->name);
        goto err_qp;
    }
    if (getrandom(&psn, sizeof(psn), 0) != (ssize_t)sizeof(psn)) {
        psn = (uint32_t)tw_time_ns();
    }
    ep->psn = psn & 0xffffffu;
    tw_verbs_credits_init(&ep->sq, dev->sq_depth);
    ep->state = TW_VERBS_EP_INIT;
    return TW_OK;

err_qp:
    (void)ibv_destroy_qp(ep->qp);
    ep->qp = NULL;
    return st;
}

/* INIT -> RTR -> RTS toward the peer's QP @p rqpn, of its endpoint
 * generation @p rgen. TW_ERR_TRANSPORT (logged). */
static tw_status_t tw_verbs_qp_connect(tw_verbs_ep_t *ep, uint32_t rqpn, uint32_t rpsn,
                                       uint32_t rgen)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = ep->mtu,
                            .dest_qp_num = rqpn,
                            .rq_psn = rpsn,
                            .max_dest_rd_atomic = (uint8_t)dev->rd_atomic,
                            .min_rnr_timer = 12,
                            .ah_attr = ep->ah_attr};
    int rc = ibv_modify_qp(ep->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);

    if (rc != 0) {
        tw_error("verbs", "%s: RC QP for rank %d: RTR failed: %s", dev->name, ep->peer,
                 strerror(rc));
        return TW_ERR_TRANSPORT;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 16; /* 4.096 us * 2^16 = 268 ms per try */
    a.retry_cnt = 7;
    a.rnr_retry = 7; /* forever: an empty SRQ delays, never fails */
    a.sq_psn = ep->psn;
    a.max_rd_atomic = (uint8_t)dev->rd_atomic;
    rc = ibv_modify_qp(ep->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        tw_error("verbs", "%s: RC QP for rank %d: RTS failed: %s", dev->name, ep->peer,
                 strerror(rc));
        return TW_ERR_TRANSPORT;
    }
    ep->rqpn = rqpn;
    ep->rpsn = rpsn;
    ep->rgen = rgen;
    ep->state = TW_VERBS_EP_CONNECTED;
    tw_debug("verbs", "%s: rank %d connected (QP %u -> %u, generations %u -> %u)", dev->name,
             ep->peer, ep->qp->qp_num, rqpn, ep->gen, rgen);
    return TW_OK;
}

void tw_verbs_set_ready(tw_verbs_ep_t *ep)
{
    if (ep->ready || ep->failed) {
        return;
    }
    ep->ready = true;
    ep->last_ns = tw_time_ns();
    ep->dev->nready++;
    tw_verbs_conn_unwatch(ep);
    tw_verbs_timer_update(ep->dev);
    tw_verbs_ep_drain(ep);
}

/* Start connecting to @p ep's peer (first operation for it). */
void tw_verbs_connect(tw_verbs_ep_t *ep)
{
    if (ep->qp != NULL || ep->failed) {
        return;
    }
    if (tw_verbs_qp_create(ep) != TW_OK) {
        tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot create a QP", false);
        return;
    }
    tw_verbs_conn_send(ep, TW_VERBS_C_REQ);
    tw_verbs_conn_watch(ep);
}

/* Back to "not connected" (a peer failed for now whose QP flushed): the
 * QP and address handle go (the port may come back with another GID
 * index), our generation grows, and from the peer only an endpoint newer
 * than the one we were connected to is heard. The next operation for the
 * peer connects again. Thread: engine. */
void tw_verbs_ep_reset(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;

    if (ep->qp != NULL) {
        uint32_t qpn = ep->qp->qp_num;
        int rc = ibv_destroy_qp(ep->qp);
        if (rc != 0) {
            /* Leaked, not reused: the new connection gets a QP of its own. */
            tw_warn("verbs", "%s: cannot destroy the old QP to rank %d: %s", dev->name, ep->peer,
                    strerror(rc));
        }
        tw_verbs_qpn_del(dev, qpn);
        ep->qp = NULL;
    }
    if (ep->ah != NULL) {
        (void)ibv_destroy_ah(ep->ah);
        ep->ah = NULL;
    }
    ep->state = TW_VERBS_EP_IDLE;
    ep->ready = false;
    ep->failed = false;
    ep->for_now = false;
    ep->flush_overdue = false;
    ep->ping_ns = 0;
    if (ep->rgen != 0) {
        ep->rgen_min = ep->rgen + 1;
    }
    ep->rgen = 0;
    ep->rqpn = ep->rpsn = 0;
    ep->gen = ep->gen == UINT32_MAX ? 1 : ep->gen + 1;
    dev->nresets--;
    atomic_store_explicit(&vb->down[ep->peer], TW_VERBS_DOWN_NO, memory_order_release);
    tw_debug("verbs", "%s: rank %d: connection reset (generation %u): the next send connects",
             dev->name, ep->peer, ep->gen);
}

/* ---- connection messages ------------------------------------------------ */

#if TW_TESTING
/* Test hook: drop every Nth connection message we send (0 = none). */
static atomic_uint tw_verbs_drop_every;
static atomic_uint tw_verbs_drop_count;

void tw_verbs_test_drop_conn(unsigned every)
{
    atomic_store_explicit(&tw_verbs_drop_every, every, memory_order_relaxed);
}

static bool tw_verbs_drop_now(void)
{
    unsigned every = atomic_load_explicit(&tw_verbs_drop_every, memory_order_relaxed);

    return every > 0 &&
           (atomic_fetch_add_explicit(&tw_verbs_drop_count, 1, memory_order_relaxed) + 1) % every ==
               0;
}
#else
static bool tw_verbs_drop_now(void)
{
    return false;
}
#endif

void tw_verbs_conn_send(tw_verbs_ep_t *ep, uint8_t type)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_conn_t c = {.type = type,
                         .src_rank = (uint32_t)vb->super.rank,
                         .dst_rank = (uint32_t)ep->peer,
                         .size = (uint32_t)vb->super.size,
                         .src_dev = (uint8_t)dev->index,
                         .dst_dev = ep->rdev,
                         .qpn = ep->qp != NULL ? ep->qp->qp_num : 0,
                         .psn = ep->psn,
                         .gen = ep->gen,
                         .echo = ep->rgen};
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_sge sge;
    uint32_t idx;
    unsigned char *buf;
    int rc;

    if (dev->nud_tx_free == 0) {
        return; /* the retransmission timer tries again */
    }
    if (TW_UNLIKELY(tw_verbs_drop_now())) {
        tw_debug("verbs", "test hook: connection message %u to rank %d dropped", type, ep->peer);
        return;
    }
    if (ep->ah == NULL) {
        ep->ah = ibv_create_ah(dev->pd, &ep->ah_attr);
        if (ep->ah == NULL) {
            int err = errno;
            if (tw_verbs_qp_err_why(dev) == TW_ERR_TRANSPORT) {
                /* Our port went down (PORT_ERR is on its way): expected. */
                tw_debug("verbs", "%s: no address handle for rank %d: port down (%s)", dev->name,
                         ep->peer, strerror(err));
                return;
            }
            tw_error("verbs", "%s: cannot make an address handle for rank %d: %s", dev->name,
                     ep->peer, strerror(err));
            return;
        }
    }
    idx = dev->ud_tx_free[--dev->nud_tx_free];
    buf = dev->ud_pool + (size_t)(TW_VERBS_UD_RX + idx) * TW_VERBS_UD_BUF;
    tw_verbs_conn_pack(&c, vb->key, buf);
    sge = (struct ibv_sge){
        .addr = (uintptr_t)buf, .length = TW_VERBS_CONN_LEN, .lkey = dev->pool_mr->lkey};
    wr.wr_id = TW_VERBS_WR_UD(dev, idx, TW_VERBS_WR_UD_SEND);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ep->ah;
    wr.wr.ud.remote_qpn = ep->rud_qpn;
    wr.wr.ud.remote_qkey = vb->qkey;
    rc = ibv_post_send(dev->ud, &wr, &bad);
    if (rc != 0) {
        dev->ud_tx_free[dev->nud_tx_free++] = idx;
        tw_warn("verbs", "%s: cannot send a connection message to rank %d: %s", dev->name, ep->peer,
                strerror(rc));
    }
}

/* DOWN or RESET: the peer failed us, for good or for now. */
static void tw_verbs_conn_recv_down(tw_verbs_ep_t *ep, const tw_verbs_conn_t *c)
{
    if (ep->state == TW_VERBS_EP_CONNECTED && c->gen == ep->rgen && ep->rqpn != c->qpn) {
        return; /* not about our connection */
    }
    if (c->type == TW_VERBS_C_RESET) {
        if (!ep->failed && ep->qp != NULL) {
            tw_verbs_fail_peer(ep, TW_ERR_TRANSPORT, "it lost our connection (for now)", false);
        }
    } else if (!ep->failed) {
        tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "it reported our connection failed", false);
    } else if (ep->for_now) {
        tw_verbs_ep_final(ep, "it reported our connection failed");
    }
}

/* REQ, REP, RTU, PING or PONG of the connection we are in or making. */
static void tw_verbs_conn_recv_setup(tw_verbs_ep_t *ep, const tw_verbs_conn_t *c)
{
    switch (c->type) {
    case TW_VERBS_C_REQ:
        if (ep->qp == NULL && tw_verbs_qp_create(ep) != TW_OK) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot create a QP", false);
            return;
        }
        if (ep->state != TW_VERBS_EP_CONNECTED &&
            tw_verbs_qp_connect(ep, c->qpn, c->psn, c->gen) != TW_OK) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot connect the QP", false);
            return;
        }
        tw_verbs_conn_send(ep, TW_VERBS_C_REP);
        if (!ep->ready) {
            tw_verbs_conn_watch(ep); /* REP again until it answers */
        }
        break;
    case TW_VERBS_C_REP:
        if (ep->qp == NULL) {
            return; /* we never asked */
        }
        if (ep->state != TW_VERBS_EP_CONNECTED &&
            tw_verbs_qp_connect(ep, c->qpn, c->psn, c->gen) != TW_OK) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot connect the QP", false);
            return;
        }
        tw_verbs_conn_send(ep, TW_VERBS_C_RTU);
        tw_verbs_set_ready(ep);
        break;
    case TW_VERBS_C_RTU:
        if (ep->state == TW_VERBS_EP_CONNECTED) {
            tw_verbs_set_ready(ep);
        }
        break;
    case TW_VERBS_C_PING:
        if (ep->ready) {
            tw_verbs_conn_send(ep, TW_VERBS_C_PONG);
        }
        break;
    case TW_VERBS_C_PONG: /* its arrival was the point */
        break;
    default:
        break;
    }
}

/* A connection message arrived on @p dev's UD QP. */
void tw_verbs_conn_recv(tw_verbs_dev_t *dev, const unsigned char *buf, size_t len)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_conn_t c;
    const char *why = "?";
    tw_verbs_ep_t *ep;

    if (tw_verbs_conn_parse(buf, len, vb->key, (uint32_t)vb->super.rank, (uint32_t)vb->super.size,
                            &c, &why) != TW_OK) {
        tw_stats_inc(vb->super.stats, TW_TL_STAT_REFUSED);
        tw_warn("verbs", "%s: connection message refused: %s", dev->name, why);
        return;
    }
    ep = &vb->eps[c.src_rank];
    if (ep->dev != dev || c.src_dev != ep->rdev || c.dst_dev != dev->index) {
        tw_stats_inc(vb->super.stats, TW_TL_STAT_REFUSED);
        tw_warn("verbs", "%s: rank %u's connection message names the wrong devices", dev->name,
                c.src_rank);
        return;
    }
    dev->events++;
    /* From an endpoint of the peer's older than the one we are connected
     * to, or than the one our reset waits for; or for an older endpoint of
     * ours: the past. */
    if (tw_verbs_conn_stale(&c, ep->gen, ep->state == TW_VERBS_EP_CONNECTED, ep->rgen,
                            ep->rgen_min)) {
        tw_debug("verbs",
                 "%s: rank %u's connection message %u (generation %u, for our %u) is stale: "
                 "ours is %u",
                 dev->name, c.src_rank, c.type, c.gen, c.echo, ep->gen);
        return;
    }
    if (c.type == TW_VERBS_C_DOWN || c.type == TW_VERBS_C_RESET) {
        tw_verbs_conn_recv_down(ep, &c);
        return;
    }
    if (ep->failed) {
        /* For good: it will learn by its own retries, or has already. For
         * now: it repeats its REQ until our reset is done. */
        return;
    }
    if (tw_verbs_port_state(dev) != TW_VERBS_PORT_UP) {
        return; /* nothing connects now; it repeats */
    }
    if (ep->state == TW_VERBS_EP_CONNECTED && c.gen > ep->rgen) {
        /* Its endpoint is new: it lost the connection we are in (its port
         * went down, or it failed us for now) and reconnects. Ours is
         * dead too, for now: once our QP flushed, its next REQ is
         * answered. */
        tw_verbs_fail_peer(ep, TW_ERR_TRANSPORT, "it reconnects from a new endpoint", false);
        return;
    }
    if (ep->ready) {
        ep->last_ns = tw_time_ns();
    }
    if (ep->state == TW_VERBS_EP_CONNECTED && ep->rqpn != c.qpn) {
        tw_warn("verbs", "%s: rank %u announced QP %u, but we are connected to QP %u: ignored",
                dev->name, c.src_rank, c.qpn, ep->rqpn);
        return;
    }
    tw_verbs_conn_recv_setup(ep, &c);
}

/* ---- liveness, retransmission ------------------------------------------- */

/* Liveness. A connected peer we heard nothing from (no arrival, no
 * acknowledged send) for a quarter of TW_VERBS_TIMEOUT gets a PING over UD,
 * which its engine answers with a PONG; one that runs progress threads and
 * stays silent for the whole timeout has failed (died, hung, stopped, or
 * unreachable) -- also while we only wait for it (a receive, or a
 * rendezvous it never pulled), where no work request of ours would notice.
 * A rank in manual mode answers only inside tw_progress, so it is pinged
 * but not judged (as over tcp). If our own engine did not run for half the
 * timeout (we were stopped), the peers get a fresh start, not the blame. */
void tw_verbs_liveness(tw_verbs_dev_t *dev, uint64_t now)
{
    tw_verbs_iface_t *vb = dev->vb;
    uint64_t t = vb->cfg.conn_timeout_ns;
    bool grace = dev->last_tick_ns != 0 && now - dev->last_tick_ns > t / 2;

    dev->last_tick_ns = now;
    if (t == 0 || dev->nready == 0) {
        return;
    }
    for (int p = 0; p < vb->super.size; p++) {
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev || !ep->ready || ep->failed) {
            continue;
        }
        if (grace) {
            ep->last_ns = now;
            continue;
        }
        if (ep->silence_fails && now - ep->last_ns > t) {
            char what[128];
            snprintf(what, sizeof(what),
                     "nothing heard for %.1f s (TW_VERBS_TIMEOUT): died, hung, stopped or "
                     "unreachable",
                     (double)(now - ep->last_ns) / 1e9);
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, what, true);
            continue;
        }
        if (now - ep->last_ns >= t / 4 && now - ep->ping_ns >= t / 4) {
            ep->ping_ns = now;
            tw_trace("verbs", "%s: PING to rank %d", dev->name, p);
            tw_verbs_conn_send(ep, TW_VERBS_C_PING);
        }
    }
}

/* Retransmissions and deadlines of connections being set up. */
void tw_verbs_conn_tick(tw_verbs_dev_t *dev)
{
    uint64_t now = tw_time_ns();
    for (tw_verbs_ep_t *ep = dev->conns, *next; ep != NULL; ep = next) {
        next = ep->next_conn;
        if (now >= ep->deadline_ns) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED,
                               "no answer to connection requests (TW_VERBS_TIMEOUT)", true);
            next = dev->conns; /* the list changed */
            continue;
        }
        if (now >= ep->next_tx_ns) {
            tw_verbs_conn_send(ep, ep->state == TW_VERBS_EP_CONNECTED ? TW_VERBS_C_REP
                                                                      : TW_VERBS_C_REQ);
            ep->rtx_ns = TW_MIN(ep->rtx_ns * 2, TW_VERBS_RTX_MAX);
            ep->next_tx_ns = now + ep->rtx_ns;
        }
    }
}
