/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Completions of the verbs transport, and the device engine's progress
 * function. One CQ per device holds every completion: receives on the
 * SRQ, the UD QP's, and the RC sends, RDMA writes and reads, told apart
 * by the tag in wr_id (tw_verbs_int.h). Every work request is signaled,
 * so each gets exactly one completion -- also IBV_WC_WR_FLUSH_ERR after
 * its QP went to error -- and that completion is where its operation
 * completes and its credit comes back. The engine drains the whole CQ on
 * every pass (in batches of TW_VERBS_CQ_BATCH), so connection messages,
 * FINs and data are handled in CQ order, which keeps a QP's in order.
 *
 * Thread: engine.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_time.h"
#include "transports/verbs/tw_verbs_int.h"

static const char *tw_verbs_wc_str(enum ibv_wc_status s)
{
    return ibv_wc_status_str(s);
}

/* The frame at @p buf (of @p len bytes left in the receive): returns its
 * size, or 0 when it was bad (the peer has failed). */
static size_t tw_verbs_rx_frame(tw_verbs_dev_t *dev, tw_verbs_ep_t *ep, const unsigned char *buf,
                                size_t len)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_frame_t f;
    const char *why = "?";

    if (tw_verbs_frame_parse(buf, len, TW_VERBS_MAX_HDR, TW_VERBS_MAX_MSG, &f, &why) != TW_OK) {
        tw_stats_inc(vb->super.stats, TW_TL_STAT_BAD_FRAMES);
        tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, why, true);
        return 0;
    }
    switch (f.type) {
    case TW_VERBS_F_AM:
        tw_stats_inc(vb->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(vb->super.stats, TW_TL_STAT_RX_BYTES, f.len);
        vb->super.recv(vb->super.recv_arg, ep->peer, f.am_id, buf + f.hdr_off, f.hdr_len,
                       buf + f.data_off, (size_t)f.len);
        break;
    case TW_VERBS_F_RTS:
        return tw_verbs_rts_recv(dev, ep, &f, buf);
    case TW_VERBS_F_FIN:
        if (!tw_verbs_rsend_done(dev, f.sid, ep->peer, (tw_status_t)f.status)) {
            tw_stats_inc(vb->super.stats, TW_TL_STAT_BAD_FRAMES);
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "FIN for no rendezvous of ours", true);
        }
        break;
    case TW_VERBS_F_BYE:
        ep->left = true;
        tw_verbs_fail_peer(ep, TW_OK, "left", false);
        break;
    default:
        break;
    }
    return f.total;
}

/* A receive on the SRQ: one or more frames from the peer of its QP. */
static void tw_verbs_wc_recv(tw_verbs_dev_t *dev, const struct ibv_wc *wc, uint32_t idx)
{
    tw_verbs_iface_t *vb = dev->vb;
    int peer = tw_verbs_qpn_get(dev, wc->qp_num);

    dev->rx_posted--;
    if (wc->status == IBV_WC_SUCCESS && peer >= 0) {
        tw_verbs_ep_t *ep = &vb->eps[peer];
        if (!ep->failed) {
            if (!ep->ready && ep->state == TW_VERBS_EP_CONNECTED) {
                tw_verbs_set_ready(ep); /* its first frame: it is connected */
            }
            ep->last_ns = tw_time_ns();
            /* One or more frames (coalesced by the sender). */
            const unsigned char *buf = tw_verbs_buf(dev, idx);
            for (size_t off = 0, n; off < wc->byte_len && !ep->failed; off += n) {
                n = tw_verbs_rx_frame(dev, ep, buf + off, wc->byte_len - off);
                if (n == 0) {
                    break;
                }
            }
        }
    } else if (wc->status != IBV_WC_SUCCESS && peer >= 0 && !vb->closing && !vb->eps[peer].failed) {
        char what[96];
        snprintf(what, sizeof(what), "receive completed with %s", tw_verbs_wc_str(wc->status));
        tw_verbs_fail_peer(&vb->eps[peer], tw_verbs_wc_why(dev, wc->status), what, true);
    }
    dev->rx_free[dev->nrx_free++] = idx;
}

/* A receive on the UD QP: a connection message. */
static void tw_verbs_wc_ud_recv(tw_verbs_dev_t *dev, const struct ibv_wc *wc, uint32_t idx)
{
    if ((idx >> 8) != dev->ud_epoch) {
        return; /* posted before the UD QP was reset: re-posted since */
    }
    idx &= 0xffu;
    if (wc->status == IBV_WC_SUCCESS && wc->byte_len >= TW_VERBS_GRH) {
        tw_verbs_conn_recv(dev, dev->ud_pool + (size_t)idx * TW_VERBS_UD_BUF + TW_VERBS_GRH,
                           wc->byte_len - TW_VERBS_GRH);
    }
    if (!dev->vb->closing && tw_verbs_ud_post_recv(dev, idx) != TW_OK) {
        tw_warn("verbs", "%s: cannot re-post a UD receive", dev->name);
    }
}

/* A send, RDMA write or read of an operation: it completes, its credit
 * comes back, and what waits for either goes on. */
static void tw_verbs_wc_op(tw_verbs_dev_t *dev, const struct ibv_wc *wc)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_op_t *op = (tw_verbs_op_t *)(uintptr_t)wc->wr_id;
    tw_verbs_ep_t *ep = &vb->eps[op->peer];
    tw_status_t st = TW_OK;

    if (op->pprev != NULL) {
        op->pprev->pnext = op->pnext;
    } else {
        ep->posted = op->pnext;
    }
    if (op->pnext != NULL) {
        op->pnext->pprev = op->pprev;
    }
    if (!tw_verbs_credits_put(&ep->sq)) {
        tw_error("verbs", "%s: a completion nobody posted on rank %d's QP", dev->name, op->peer);
    }
    if (wc->status != IBV_WC_SUCCESS) {
        st = vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED;
        if (!ep->failed) {
            char what[96];
            snprintf(what, sizeof(what), "a work request completed with %s",
                     tw_verbs_wc_str(wc->status));
            tw_verbs_fail_peer(ep, ep->left ? TW_OK : tw_verbs_wc_why(dev, wc->status), what,
                               !ep->left);
        }
    }
    tw_verbs_op_release(dev, op);
    if (st == TW_OK) {
        ep->last_ns = tw_time_ns();
    }
    tw_verbs_batch_done(op, st);
    switch (op->kind) {
    case TW_VERBS_OP_RTS:
        if (st != TW_OK) {
            (void)tw_verbs_rsend_done(dev, op->sid & ~(1ull << 63), op->peer, st);
        }
        break;
    case TW_VERBS_OP_READ:
        tw_verbs_read_done(dev, op->rndv, st);
        break;
    default:
        if (op->comp != NULL) {
            op->comp->cb(op->comp, st);
        }
        break;
    }
    tw_verbs_op_free(op);
    if (ep->flushes != NULL) {
        tw_verbs_flush_check(ep);
    }
    if (ep->head != NULL) {
        tw_verbs_ep_drain(ep);
    }
}

void tw_verbs_wc(tw_verbs_dev_t *dev, const struct ibv_wc *wc)
{
    unsigned tag = (unsigned)(wc->wr_id & 3u);
    uint32_t idx = (uint32_t)(wc->wr_id >> 2);

    dev->events++;
    switch (tag) {
    case TW_VERBS_WR_RECV:
        tw_verbs_wc_recv(dev, wc, idx);
        break;
    case TW_VERBS_WR_UD_RECV:
        tw_verbs_wc_ud_recv(dev, wc, idx);
        break;
    case TW_VERBS_WR_UD_SEND:
        if ((idx >> 8) == dev->ud_epoch) { /* else: freed when the UD QP was reset */
            dev->ud_tx_free[dev->nud_tx_free++] = idx & 0xffu;
        }
        break;
    default:
        tw_verbs_wc_op(dev, wc);
        break;
    }
}

static int tw_verbs_poll_cq(tw_verbs_dev_t *dev)
{
    struct ibv_wc wc[TW_VERBS_CQ_BATCH];
    int total = 0, n;

    do {
        n = ibv_poll_cq(dev->cq, TW_VERBS_CQ_BATCH, wc);
        if (n < 0) {
            tw_error("verbs", "%s: polling the CQ failed", dev->name);
            break;
        }
        for (int i = 0; i < n; i++) {
            tw_verbs_wc(dev, &wc[i]);
        }
        total += n;
    } while (n == TW_VERBS_CQ_BATCH && total < 16 * TW_VERBS_CQ_BATCH);
    return total;
}

int tw_verbs_dev_progress(void *arg)
{
    tw_verbs_dev_t *dev = arg;
    struct ibv_cq *ecq;
    void *ectx;

    dev->events = 0;
    tw_pe_assert_owner(dev->pe);
    tw_verbs_lost_check(dev);
    /* Events are taken even from a lost CQ (its channel would stay
     * readable): it is not polled nor armed again. */
    while (ibv_get_cq_event(dev->chan, &ecq, &ectx) == 0) {
        ibv_ack_cq_events(ecq, 1);
        dev->armed = false;
    }
    if (!dev->cq_lost) {
        (void)tw_verbs_poll_cq(dev);
        tw_verbs_rx_refill(dev, false);
    }
    if (dev->tx_starved && dev->ntx_free > 0) {
        /* Buffers came back through other peers' completions. */
        tw_verbs_iface_t *vb = dev->vb;
        dev->tx_starved = false;
        for (int p = 0; p < vb->super.size; p++) {
            if (vb->eps[p].dev != dev) {
                continue;
            }
            if (vb->eps[p].head != NULL) {
                tw_verbs_ep_drain(&vb->eps[p]);
            }
        }
    }
    if (dev->timer_ns > 0) {
        uint64_t exp;
        if (read(dev->timer_fd, &exp, sizeof(exp)) < 0) {
            /* EAGAIN: not due; the checks below are cheap */
        }
        if (dev->conns != NULL) {
            tw_verbs_conn_tick(dev);
        }
        uint64_t now = tw_time_ns();
        if (tw_verbs_port_state(dev) == TW_VERBS_PORT_WAIT && now >= dev->port_check_ns) {
            tw_verbs_port_check(dev);
        }
        tw_verbs_liveness(dev, now);
    }
    if (!dev->armed && dev->cq != NULL && !dev->cq_lost) {
        if (ibv_req_notify_cq(dev->cq, 0) == 0) {
            dev->armed = true;
        }
        (void)tw_verbs_poll_cq(dev); /* what came before the arming */
        tw_verbs_rx_refill(dev, false);
    }
    tw_verbs_reset_check(dev); /* peers down for now whose QP flushed */
    return dev->events;
}
