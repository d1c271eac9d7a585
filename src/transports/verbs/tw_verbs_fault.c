/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Failure and fail-back on the verbs transport.
 *
 * Errors. Every work request is signaled, so every one gets exactly one
 * completion, including IBV_WC_WR_FLUSH_ERR after its QP went to error;
 * the credit counters check it, and close waits for the flushes before it
 * destroys a QP. A completion with an error status (retry exceeded,
 * remote access, flush, ...) fails the peer: its QP is moved to error (so
 * whatever is still posted flushes), queued operations and rendezvous in
 * either direction complete TW_ERR_PEER_FAILED, peer_down runs, and the
 * peer is told over UD (best effort) so it fails us too rather than wait
 * for its own retries. That is for good (peer_down TW_ERR_PEER_FAILED,
 * told with DOWN) for errors the peer answered with (remote access,
 * invalid request, ...) or of our own memory, unless our port is down
 * when the error is seen (ibv_query_port says so, or PORT_ERR came).
 * Errors of the path -- retries exceeded (the peer's port may be down), a
 * local QP operation error (what rxe reports when the route under its
 * port went away, before the port shows down), a flush as the first sign
 * -- are for now: the peer is down for now as under Fail-back, is told
 * with RESET instead of DOWN, and the connection made again decides (a
 * dead peer does not answer it, and fails for good then). A bad frame, or
 * a FIN for no rendezvous of ours, fails the peer the same way. A peer
 * that dies with work requests of ours in flight is noticed by the QP's
 * retries (7 retries of 268 ms); one we only wait for (a receive, a
 * rendezvous it never pulled) by liveness (tw_verbs_liveness). A clean
 * close sends BYE: the peer reports peer_down(TW_OK).
 *
 * Device events come from the async event thread (tw_verbs_async.c),
 * handed to the device's engine with tw_verbs_dev_report -- but
 * device-wide faults (DEVICE_FATAL, CQ_ERR, SRQ_ERR) come through a flag
 * the engine reads on every pass (tw_verbs_dev_lost), which a full
 * submission lane cannot lose. They fail the device's peers for good
 * (nothing comes back on a dead device), and so do QP fatal events while
 * the port is up. When the CQ is gone (CQ_ERR, DEVICE_FATAL) nothing
 * flushes: every work request still posted -- each endpoint keeps the
 * list -- completes by hand, as a flush would have, and the CQ is not
 * polled again.
 *
 * Fail-back. A port that goes down (IBV_EVENT_PORT_ERR, or a work request
 * failing while ibv_query_port says it is down) takes its device's peers
 * down for now, not for good, as a path error of one QP does its peer:
 * their operations complete TW_ERR_PEER_FAILED as above, peer_down runs
 * with TW_ERR_TRANSPORT (rel fails over and probes the path; without rel
 * the runtime counts it a failure), nobody is told while the port is
 * down, and sends to them fail at once with TW_ERR_TRANSPORT instead of
 * queueing (the ops read the port state and vb->down). Once the old QP
 * flushed (sq.done == sq.posted) the endpoint is reset to "not connected"
 * with a new generation (tw_verbs_ep_reset, tw_verbs_cm.c).
 * IBV_EVENT_PORT_ACTIVE makes the port usable again once our GID is back
 * (ibv_query_gid_ex; one that came back at another index is used there;
 * an InfiniBand port that came back with another LID stays down: peers
 * know the old one) and the UD QP is in RTS (rxe moves it to error when a
 * datagram is posted while the netdev is down: it is brought back through
 * RESET, and an epoch in the UD work request ids tells completions from
 * before apart). The next send to a reset peer -- a rel probe -- connects
 * again; a connection made again that gets no answer within
 * TW_VERBS_TIMEOUT fails for good.
 *
 * Thread: engine, but for what runs on the async event thread
 * (tw_verbs_async_event, tw_verbs_dev_lost, tw_verbs_dev_report) and the
 * test hooks (any).
 */
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_time.h"
#include "transports/verbs/tw_verbs_int.h"

/* ---- peers ---------------------------------------------------------------------- */

/* Fail @p ep's peer: for good (@p why TW_ERR_PEER_FAILED, or TW_OK: it
 * left; TW_ERR_CANCELED while closing), or for now (TW_ERR_TRANSPORT: the
 * path is down; the endpoint is reset once its QP flushed,
 * tw_verbs_reset_check). Either way its QP goes to error, what is queued
 * or waits for it completes TW_ERR_PEER_FAILED, and peer_down runs with
 * @p why. @p tell: send it DOWN (for good) or RESET (for now, unless our
 * port is down). Thread: engine. */
void tw_verbs_fail_peer(tw_verbs_ep_t *ep, tw_status_t why, const char *what, bool tell)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;
    tw_status_t st = vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED;
    bool fornow = why == TW_ERR_TRANSPORT && !vb->closing;

    if (ep->failed) {
        return;
    }
    ep->failed = true;
    ep->for_now = fornow;
    atomic_store_explicit(&vb->down[ep->peer], fornow ? TW_VERBS_DOWN_FOR_NOW : TW_VERBS_DOWN_GONE,
                          memory_order_release);
    if (ep->ready) {
        dev->nready--;
    }
    tw_verbs_conn_unwatch(ep);
    tw_verbs_timer_update(dev);
    if (why == TW_OK) {
        tw_debug("verbs", "rank %d left the job", ep->peer);
    } else if (fornow) {
        tw_warn("verbs",
                "%s: rank %d is down for now: %s; its operations complete with "
                "TW_ERR_PEER_FAILED, new ones are refused (TW_ERR_TRANSPORT) until its "
                "connection is reset (and the port up), then connect again",
                dev->name, ep->peer, what);
    } else if (!vb->closing) {
        tw_error("verbs",
                 "%s: rank %d failed: %s; its operations complete with "
                 "TW_ERR_PEER_FAILED",
                 dev->name, ep->peer, what);
    }
    if (fornow) {
        ep->fail_ns = tw_time_ns();
        ep->flush_overdue = false;
        dev->nresets++;
    }
    if (tell && why != TW_OK && ep->qp != NULL &&
        (!fornow || tw_verbs_port_state(dev) == TW_VERBS_PORT_UP)) {
        tw_verbs_conn_send(ep, fornow ? TW_VERBS_C_RESET : TW_VERBS_C_DOWN);
    }
    if (ep->qp != NULL) {
        /* Whatever is posted flushes: each completes as it comes back. */
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        (void)ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
    }
    while (ep->head != NULL) {
        tw_verbs_op_t *op = ep->head;
        ep->head = op->next;
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_verbs_op_abort(dev, op, st);
    }
    ep->tail = NULL;
    while (ep->flushes != NULL) {
        tw_verbs_op_t *op = ep->flushes;
        ep->flushes = op->next;
        op->comp->cb(op->comp, st);
        tw_verbs_op_free(op);
    }
    /* Rendezvous sends waiting for its FIN. */
    tw_verbs_rsend_fail(dev, ep->peer, st);
    /* Its announced messages: rndv_get finds the peer failed (or, after a
     * reset, a handle of an older connection); reads in flight complete
     * as their work requests flush. */
    if (vb->super.peer_down != NULL && !vb->closing) {
        vb->super.peer_down(vb->super.peer_down_arg, ep->peer, why);
    }
}

/* A peer failed for now turns out to be gone for good (it told us, or
 * the device died): no reset, sends fail with TW_ERR_PEER_FAILED. peer_down
 * does not run again (it ran once for this connection: the runtime's error
 * handler must not see one failure twice); rel's probes are refused.
 * Thread: engine. */
void tw_verbs_ep_final(tw_verbs_ep_t *ep, const char *what)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;

    if (!ep->failed || !ep->for_now) {
        return;
    }
    ep->for_now = false;
    dev->nresets--;
    atomic_store_explicit(&vb->down[ep->peer], TW_VERBS_DOWN_GONE, memory_order_release);
    if (vb->closing) {
        return;
    }
    tw_error("verbs", "%s: rank %d (down for now) failed for good: %s", dev->name, ep->peer, what);
}

/* Reset the peers failed for now whose QP has nothing left to flush.
 * Thread: engine. */
void tw_verbs_reset_check(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;
    uint64_t now = 0;

    if (dev->nresets == 0 || vb->closing) {
        return;
    }
    for (int p = 0; p < vb->super.size && dev->nresets > 0; p++) {
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev || !ep->failed || !ep->for_now) {
            continue;
        }
        if (ep->qp == NULL || ep->sq.posted == ep->sq.done) {
            tw_verbs_ep_reset(ep);
            continue;
        }
        now = now != 0 ? now : tw_time_ns();
        if (!ep->flush_overdue && now - ep->fail_ns > TW_VERBS_CLOSE_NS) {
            ep->flush_overdue = true;
            tw_warn("verbs",
                    "%s: the QP to rank %d has not flushed %llu work requests in %.1f s: it "
                    "stays down until it does",
                    dev->name, p, (unsigned long long)(ep->sq.posted - ep->sq.done),
                    (double)(now - ep->fail_ns) / 1e9);
        }
    }
}

/* ---- devices -------------------------------------------------------------------- */

/* Posted work requests completed by hand after a lost CQ (tests). */
static atomic_ulong tw_verbs_lost_ops;

#if TW_TESTING
unsigned long tw_verbs_test_lost_ops(void)
{
    return atomic_load_explicit(&tw_verbs_lost_ops, memory_order_relaxed);
}
#endif

/* The CQ is gone (CQ_ERR, DEVICE_FATAL): no completion comes for what is
 * in the send queues, so each posted work request completes here, as a
 * flush would have -- exactly once, as every other path. Thread: engine. */
static void tw_verbs_dev_cq_lost(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;
    unsigned long n = 0;

    dev->cq_lost = true;
    for (int p = 0; p < vb->super.size; p++) {
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev) {
            continue;
        }
        while (ep->posted != NULL) {
            struct ibv_wc wc = {.wr_id = (uint64_t)(uintptr_t)ep->posted,
                                .status = IBV_WC_WR_FLUSH_ERR,
                                .qp_num = ep->qp != NULL ? ep->qp->qp_num : 0};
            tw_verbs_wc(dev, &wc); /* takes it off the list */
            n++;
        }
    }
    atomic_fetch_add_explicit(&tw_verbs_lost_ops, n, memory_order_relaxed);
    if (n > 0) {
        tw_warn("verbs", "%s: completed %lu posted work request(s) that its lost CQ never will",
                dev->name, n);
    }
}

/* Device-wide faults (device, SRQ or CQ fatal): every peer on the device
 * fails for good. */
void tw_verbs_dev_fatal(tw_verbs_dev_t *dev, const char *what, bool cq_lost)
{
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev || p == vb->super.rank) {
            continue;
        }
        tw_verbs_fail_peer(&vb->eps[p], TW_ERR_PEER_FAILED, what, false);
        tw_verbs_ep_final(&vb->eps[p], what);
    }
    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
    dev->fatal = true;
    if (cq_lost && !dev->cq_lost) {
        tw_verbs_dev_cq_lost(dev);
    }
    tw_verbs_timer_update(dev);
}

/* A device-wide fault the async thread flagged. Thread: engine. */
void tw_verbs_lost_check(tw_verbs_dev_t *dev)
{
    int kind = atomic_load_explicit(&dev->lost_kind, memory_order_acquire);

    if (TW_LIKELY(kind == 0) || (dev->fatal && (kind < TW_VERBS_LOST_CQ || dev->cq_lost))) {
        return;
    }
    tw_verbs_dev_fatal(dev, atomic_load_explicit(&dev->lost_what, memory_order_acquire),
                       kind >= TW_VERBS_LOST_CQ);
    tw_verbs_reset_check(dev);
}

void tw_verbs_dev_lost(tw_verbs_dev_t *dev, int kind, const char *what)
{
    int old = atomic_load_explicit(&dev->lost_kind, memory_order_relaxed);

    atomic_store_explicit(&dev->lost_what, what, memory_order_relaxed);
    while (old < kind &&
           !atomic_compare_exchange_weak_explicit(&dev->lost_kind, &old, kind, memory_order_release,
                                                  memory_order_relaxed)) {
    }
    tw_pe_wake(dev->pe);
}

/* ---- ports ---------------------------------------------------------------------- */

/* The port went down (PORT_ERR): every peer on the device is down for now;
 * nothing connects until tw_verbs_port_up. Thread: the device's engine. */
void tw_verbs_port_down(tw_verbs_dev_t *dev, const char *what)
{
    tw_verbs_iface_t *vb = dev->vb;

    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
    tw_verbs_timer_update(dev);
    for (int p = 0; p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev || p == vb->super.rank) {
            continue;
        }
        tw_verbs_fail_peer(&vb->eps[p], dev->fatal ? TW_ERR_PEER_FAILED : TW_ERR_TRANSPORT, what,
                           false);
    }
    tw_verbs_reset_check(dev);
}

/* The UD QP back in RTS, when it is not (rxe moves it to error when a
 * datagram is posted while the netdev is down): through RESET, which
 * drops what was posted -- completions of that still coming carry the
 * old epoch and are ignored -- then the receives are posted again and the
 * send buffers are all free. TW_ERR_TRANSPORT (logged). Thread: engine. */
static tw_status_t tw_verbs_ud_recover(tw_verbs_dev_t *dev)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = ibv_query_qp(dev->ud, &a, IBV_QP_STATE, &ia);

    if (rc == 0 && a.qp_state == IBV_QPS_RTS) {
        return TW_OK;
    }
    if (rc != 0) {
        tw_error("verbs", "%s: cannot query the UD QP: %s", dev->name, strerror(rc));
        return TW_ERR_TRANSPORT;
    }
    tw_info("verbs", "%s: the UD QP is in state %d: bringing it back", dev->name, (int)a.qp_state);
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
    rc = ibv_modify_qp(dev->ud, &a, IBV_QP_STATE);
    if (rc != 0) {
        tw_error("verbs", "%s: cannot reset the UD QP: %s", dev->name, strerror(rc));
        return TW_ERR_TRANSPORT;
    }
    dev->ud_epoch = (dev->ud_epoch + 1) & 0xffffffu;
    dev->nud_tx_free = 0;
    for (unsigned i = 0; i < TW_VERBS_UD_TX; i++) {
        dev->ud_tx_free[dev->nud_tx_free++] = i;
    }
    return tw_verbs_ud_up(dev);
}

/* Is our GID (value and type) at index @p i of our port? */
static bool tw_verbs_gid_is_ours(tw_verbs_dev_t *dev, int i)
{
    struct ibv_gid_entry e;

    if (ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)i, &e, 0) != 0) {
        return false;
    }
    return memcmp(e.gid.raw, dev->gid.raw, 16) == 0 &&
           (dev->gid_type < 0 || (int)e.gid_type == dev->gid_type);
}

/* Is the port usable again: active, and our address (the GID, or on
 * InfiniBand the LID, that peers got at startup) still ours? A GID that
 * came back at another index is used there. Thread: engine. */
void tw_verbs_port_check(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;
    struct ibv_port_attr pa;
    int found = -1;

    dev->port_check_ns = tw_time_ns() + 100ull * 1000 * 1000;
    if (ibv_query_port(dev->ctx, dev->port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
        return; /* not yet */
    }
    if (dev->link == TW_VERBS_LINK_IB && pa.lid != dev->lid) {
        tw_error("verbs",
                 "%s port %u came back with LID %u, not %u: peers cannot reach it, it stays "
                 "down",
                 dev->name, dev->port, pa.lid, dev->lid);
        atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
        tw_verbs_timer_update(dev);
        return;
    }
    if (tw_verbs_gid_is_ours(dev, dev->gid_index)) {
        found = dev->gid_index;
    }
    for (int i = 0; found < 0 && i < TW_MIN(pa.gid_tbl_len, TW_VERBS_GID_SCAN); i++) {
        if (tw_verbs_gid_is_ours(dev, i)) {
            found = i;
        }
    }
    if (found < 0) {
        return; /* our GID is not back (yet): look again */
    }
    if (found != dev->gid_index) {
        tw_info("verbs", "%s port %u: our GID is at index %d now (was %d)", dev->name, dev->port,
                found, dev->gid_index);
        dev->gid_index = found;
        for (int p = 0; p < vb->super.size; p++) {
            if (vb->eps[p].dev == dev && vb->eps[p].ah_attr.is_global) {
                vb->eps[p].ah_attr.grh.sgid_index = (uint8_t)found;
            }
        }
    }
    if (tw_verbs_ud_recover(dev) != TW_OK) {
        tw_error("verbs",
                 "%s port %u is active again, but connections cannot be set up: it "
                 "stays down",
                 dev->name, dev->port);
        atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
        tw_verbs_timer_update(dev);
        return;
    }
    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_UP, memory_order_release);
    tw_verbs_timer_update(dev);
    tw_info("verbs", "%s port %u is usable again: its peers connect again on their next send",
            dev->name, dev->port);
}

/* PORT_ACTIVE: the port may be used again once our address is back
 * (tw_verbs_port_check, again every 100 ms until it is). Peers down for
 * now connect again on their next operation (a rel probe). Thread: the
 * device's engine. */
void tw_verbs_port_up(tw_verbs_dev_t *dev)
{
    if (dev->fatal || tw_verbs_port_state(dev) != TW_VERBS_PORT_DOWN) {
        return;
    }
    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_WAIT, memory_order_release);
    tw_verbs_port_check(dev);
    tw_verbs_timer_update(dev);
}

/* ---- why a peer fails ------------------------------------------------------------ */

/* How a peer fails for error completion @p s on its QP. Errors of the
 * path are for now: no answer (retries exceeded: the peer's port may be
 * down), a local QP operation error (rxe's when the route under the port
 * went away -- before ibv_query_port shows the port down), a flush as the
 * first sign; the connection made again decides (a dead peer does not
 * answer it: for good then, and rel's keepalive judges it anyway). Errors
 * the peer answered with, or of our own memory, are for good unless our
 * port is down. Thread: engine. */
tw_status_t tw_verbs_wc_why(tw_verbs_dev_t *dev, enum ibv_wc_status s)
{
    if (dev->fatal) {
        return TW_ERR_PEER_FAILED;
    }
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
        return TW_ERR_TRANSPORT;
    default:
        return tw_verbs_qp_err_why(dev);
    }
}

/* How a peer fails for an error on its QP: for now while our port is
 * down (a work request fails when the port under it went away, often
 * before PORT_ERR reached this engine; the port is then marked down here
 * already), else for good. Thread: engine. */
tw_status_t tw_verbs_qp_err_why(tw_verbs_dev_t *dev)
{
    struct ibv_port_attr pa;

    if (dev->fatal) {
        return TW_ERR_PEER_FAILED;
    }
    if (tw_verbs_port_state(dev) != TW_VERBS_PORT_UP) {
        return TW_ERR_TRANSPORT;
    }
    if (ibv_query_port(dev->ctx, dev->port, &pa) == 0 && pa.state != IBV_PORT_ACTIVE) {
        tw_debug("verbs", "%s port %u is down (PORT_ERR on its way)", dev->name, dev->port);
        atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
        tw_verbs_timer_update(dev);
        return TW_ERR_TRANSPORT;
    }
    return TW_ERR_PEER_FAILED;
}

void tw_verbs_qp_fatal(tw_verbs_dev_t *dev, uint32_t qp_num, const char *what)
{
    int peer = tw_verbs_qpn_get(dev, qp_num);

    /* For good -- unless our port is down: then that is why, and the QP
     * goes with the reset anyway. */
    if (peer >= 0 && dev->vb->eps[peer].dev == dev && !dev->vb->eps[peer].failed) {
        tw_verbs_fail_peer(&dev->vb->eps[peer], tw_verbs_qp_err_why(dev), what, true);
    }
}

/* ---- events from the async event thread -------------------------------------------- */

/* An async event handed to the device's engine (tw_verbs_dev_report). */
static void tw_verbs_event_cmd(void *arg, void *data, uint64_t u64)
{
    tw_verbs_dev_t *dev = arg;
    const char *what = data;

    if (u64 == UINT64_MAX) {
        tw_verbs_dev_fatal(dev, what, false);
    } else if (u64 == UINT64_MAX - 1) {
        tw_verbs_srq_low(dev);
    } else if (u64 == UINT64_MAX - 2) {
        tw_verbs_port_down(dev, what);
    } else if (u64 == UINT64_MAX - 3) {
        tw_verbs_port_up(dev);
    } else {
        tw_verbs_qp_fatal(dev, (uint32_t)u64, what);
    }
    tw_verbs_reset_check(dev);
}

tw_status_t tw_verbs_dev_report(tw_verbs_dev_t *dev, int64_t qp_num, const char *what)
{
    tw_pe_cmd_t cmd = {.fn = tw_verbs_event_cmd,
                       .arg = dev,
                       .data = (void *)(uintptr_t)what,
                       .u64 = qp_num == TW_VERBS_REPORT_SRQ         ? UINT64_MAX - 1
                              : qp_num == TW_VERBS_REPORT_PORT_DOWN ? UINT64_MAX - 2
                              : qp_num == TW_VERBS_REPORT_PORT_UP   ? UINT64_MAX - 3
                              : qp_num < 0                          ? UINT64_MAX
                                                                    : (uint64_t)qp_num};

    return tw_pe_submit(dev->pe, &cmd);
}

/* An async event of @p arg's device, on the async event thread: log it and
 * hand what it asks for to the device's engine. Acknowledged by the
 * thread when this returns. */
void tw_verbs_async_event(void *arg, const struct ibv_async_event *ev)
{
    tw_verbs_dev_t *dev = arg;
    tw_va_action_t act = tw_va_classify(ev->event_type);
    const char *type = ibv_event_type_str(ev->event_type);
    int64_t what_qp = -1;
    const char *what = NULL;

    switch (act) {
    case TW_VA_PORT_DOWN:
        if (ev->element.port_num != dev->port) {
            return;
        }
        what = "its port went down (IBV_EVENT_PORT_ERR)";
        break;
    case TW_VA_PORT_UP:
        if (ev->element.port_num != dev->port) {
            return;
        }
        tw_info("verbs", "%s: async event %s: port %u is active again", dev->name, type, dev->port);
        what_qp = TW_VERBS_REPORT_PORT_UP;
        break;
    case TW_VA_DEVICE_FATAL:
    case TW_VA_SRQ_FATAL:
    case TW_VA_CQ_FATAL:
        /* Through a flag the engine looks at on every pass, not the lane:
         * this must not be lost. The CQ's loss also means the posted work
         * requests never complete by themselves. */
        tw_warn("verbs", "%s: async event %s: %s", dev->name, type, tw_va_action_name(act));
        tw_verbs_dev_lost(dev, act == TW_VA_SRQ_FATAL ? TW_VERBS_LOST_SRQ : TW_VERBS_LOST_CQ,
                          act == TW_VA_DEVICE_FATAL ? "the device failed (IBV_EVENT_DEVICE_FATAL)"
                          : act == TW_VA_CQ_FATAL   ? "the device's CQ failed (IBV_EVENT_CQ_ERR)"
                                                  : "the device's SRQ failed (IBV_EVENT_SRQ_ERR)");
        return;
    case TW_VA_QP_FATAL:
        if (ev->element.qp == NULL || ev->element.qp == dev->ud) {
            what = "its connection QP failed";
        } else {
            what_qp = ev->element.qp->qp_num;
            what = ev->event_type == IBV_EVENT_QP_FATAL ? "its QP failed (IBV_EVENT_QP_FATAL)"
                   : ev->event_type == IBV_EVENT_QP_REQ_ERR
                       ? "its QP failed (IBV_EVENT_QP_REQ_ERR)"
                       : "its QP failed (IBV_EVENT_QP_ACCESS_ERR)";
        }
        break;
    case TW_VA_SRQ_LIMIT:
        what_qp = TW_VERBS_REPORT_SRQ;
        break;
    case TW_VA_IGNORE:
        tw_debug("verbs", "%s: async event %s", dev->name, type);
        return;
    }
    if (what != NULL) {
        tw_warn("verbs", "%s: async event %s: %s", dev->name, type, tw_va_action_name(act));
        if (what_qp == -1 && tw_va_peer_status(act) == TW_ERR_TRANSPORT) {
            what_qp = TW_VERBS_REPORT_PORT_DOWN; /* the device's peers: down for now */
        }
    }
    /* The engine's lane may be full for a moment: this thread can wait. */
    for (int i = 0; tw_verbs_dev_report(dev, what_qp, what) == TW_ERR_AGAIN; i++) {
        if (i == 10000) {
            tw_error("verbs", "%s: cannot hand async event %s to the engine", dev->name, type);
            return;
        }
        usleep(100);
    }
}

/* ---- test hooks ------------------------------------------------------------------- */

#if TW_TESTING
tw_status_t tw_verbs_test_dev_lost(tw_tl_iface_t *iface, int kind)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    if (iface == NULL || iface->ops != &tw_verbs_ops || vb->ndev == 0 ||
        (kind != TW_VERBS_LOST_SRQ && kind != TW_VERBS_LOST_CQ)) {
        return TW_ERR_INVALID;
    }
    tw_verbs_dev_lost(&vb->devs[0], kind, "test hook: the device was lost");
    return TW_OK;
}
#endif

tw_status_t tw_verbs_force_qp_error(tw_tl_iface_t *iface, int peer)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_op_t *op;
    tw_status_t st;

    if (iface == NULL || iface->ops != &tw_verbs_ops || peer < 0 || peer >= iface->size ||
        peer == iface->rank) {
        return TW_ERR_INVALID;
    }
    op = tw_verbs_op_new(0);
    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = TW_VERBS_OP_QPERR;
    op->peer = peer;
    atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed);
    st = tw_tl_submit(iface, tw_verbs_dev_of(vb, peer)->pe, tw_verbs_enqueue_cmd,
                      tw_verbs_dev_of(vb, peer), op, op->alloc_len, 0);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
    }
    return st;
}
