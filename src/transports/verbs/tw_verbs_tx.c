/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Sending on the verbs transport. Worker threads never touch the device:
 * am_short / am_zcopy / put / get / flush build an operation and hand it
 * to the device's engine through its submission ring (tw_tl_submit; a
 * full ring is TW_ERR_AGAIN), which queues it on the peer's endpoint and
 * posts it to the peer's RC QP.
 *
 * Wire (tw_verbs_proto.h): RC sends carry frames with a 16-byte header.
 * AM is an eager copy (header + payload <= 9 KiB - 16): inline when it
 * fits the QP's max_inline_data, else copied into a registered send
 * buffer. Coalescing: AMs and FINs that wait in a connection's queue
 * behind the frame being sent go into the same send buffer, back to back
 * (up to 9 KiB and 64 frames): one work request, one credit, one
 * completion for all; the receiver walks the frames. Nothing waits to be
 * coalesced -- only what is queued anyway (all credits in flight, or the
 * connection not up yet) -- so a lone message goes at once. A larger
 * am_zcopy is a rendezvous (tw_verbs_rndv.c): RTS names the sender's
 * buffer (registered for remote read for the occasion, or found in the
 * registration cache) and a send id; the operation completes when the
 * receiver's FIN comes. put/get are RDMA WRITE/READ with a key from
 * mem_reg; flush completes once every work request posted to the peer
 * before it completed (RC completes in order, and a write's completion
 * means the peer's HCA acknowledged it).
 *
 * Credits. Send side: each QP may have TW_VERBS_SQ_DEPTH work requests in
 * flight, every one signaled; operations beyond wait in the peer's queue
 * (in order) and go as completions return credits (or send buffers: a
 * queue that waits for one is drained again when any comes back). RDMA
 * reads use the same credits (the device limits reads in flight by
 * max_rd_atomic itself). Receive side: one SRQ for all peers, kept full
 * -- used buffers are re-posted in batches once a quarter of it is used
 * -- and RC QPs retry a receiver-not-ready forever (rnr_retry 7), so a
 * burst that finds the SRQ empty is delayed, never lost. Back-pressure to
 * callers: a full submission ring, or more than 64 Ki operations waiting
 * in queues, is TW_ERR_AGAIN; nothing is refused once accepted.
 *
 * Thread: the ops and tw_verbs_op_new any; the rest the engine.
 */
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <string.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/verbs/tw_verbs_int.h"

/* ---- operations ------------------------------------------------------------ */

tw_verbs_op_t *tw_verbs_op_new(size_t extra)
{
    size_t alloc_len = sizeof(tw_verbs_op_t) + extra;
    tw_verbs_op_t *op = tw_malloc(alloc_len);

    if (op != NULL) {
        memset(op, 0, sizeof(*op));
        op->alloc_len = alloc_len;
        op->sbuf = UINT32_MAX;
    }
    return op;
}

/* Release what an operation holds on the device. */
void tw_verbs_op_release(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    if (op->sbuf != UINT32_MAX) {
        dev->tx_free[dev->ntx_free++] = op->sbuf;
        op->sbuf = UINT32_MAX;
    }
    if (op->mr != NULL) {
        (void)ibv_dereg_mr(op->mr);
        op->mr = NULL;
    }
    if (op->region != NULL) {
        tw_verbs_rcache_put(&dev->vb->rcache, op->region);
        op->region = NULL;
    }
}

/* ---- posting ---------------------------------------------------------------- */

/* Coalescing: an AM or FIN waiting behind the frame being sent may share
 * its send (and its work request, credit and completion) when it fits. */
#define TW_VERBS_BATCH_MAX 64

static bool tw_verbs_batchable(const tw_verbs_op_t *op)
{
    return op != NULL && (op->kind == TW_VERBS_OP_AM || op->kind == TW_VERBS_OP_FIN);
}

static size_t tw_verbs_frame_size(const tw_verbs_op_t *op)
{
    return op->kind == TW_VERBS_OP_AM ? TW_VERBS_FRAME_LEN + op->inl_len
                                      : TW_VERBS_FRAME_LEN + TW_VERBS_FIN_LEN;
}

/* Write the frame of AM or FIN @p op at @p dst; returns its size. */
static size_t tw_verbs_frame_write(const tw_verbs_op_t *op, unsigned char *dst)
{
    tw_verbs_frame_t f = {.am_id = op->am_id};

    if (op->kind == TW_VERBS_OP_AM) {
        f.type = TW_VERBS_F_AM;
        f.hdr_len = op->hdr_len;
        f.len = op->inl_len - op->hdr_len;
    } else {
        f.type = TW_VERBS_F_FIN;
        f.sid = op->sid;
        f.status = op->status;
    }
    size_t n = tw_verbs_frame_pack(&f, dst);
    if (op->kind == TW_VERBS_OP_AM && op->inl_len > 0) {
        memcpy(dst + n, op->bytes, op->inl_len);
        n += op->inl_len;
    }
    return n;
}

/* Complete the frames coalesced behind @p op with @p st. */
void tw_verbs_batch_done(tw_verbs_op_t *op, tw_status_t st)
{
    while (op->batch != NULL) {
        tw_verbs_op_t *b = op->batch;
        op->batch = b->batch;
        if (b->comp != NULL) {
            b->comp->cb(b->comp, st);
        }
        tw_verbs_op_free(b);
    }
}

/* An RTS's source registered for remote read, and its send id, once (a
 * retry for want of a credit keeps both). Else the op completes with the
 * failure (TW_ERR_TRANSPORT, TW_ERR_NOMEM) and is freed. */
static tw_status_t tw_verbs_rts_prepare(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    uint32_t lkey;
    tw_status_t st;

    if (op->sid != 0) {
        return TW_OK;
    }
    st = tw_verbs_reg(dev, op->data, op->len, IBV_ACCESS_REMOTE_READ, &op->mr, &op->region, &lkey,
                      &op->rkey);
    if (st == TW_OK) {
        uint64_t sid = tw_verbs_rsend_add(dev, op);
        if (sid != UINT64_MAX) {
            op->sid = sid | (1ull << 63); /* nonzero marker; the frame does not carry the bit */
            return TW_OK;
        }
        tw_error("verbs", "out of memory for a rendezvous to rank %d", op->peer);
        st = TW_ERR_NOMEM;
    }
    atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
    tw_verbs_op_release(dev, op);
    op->comp->cb(op->comp, st);
    tw_verbs_op_free(op);
    return st;
}

/* Coalescing: the frames queued behind @p op go into its send buffer
 * @p buf after its own @p total bytes, in order; returns the new total. */
static size_t tw_verbs_coalesce(tw_verbs_ep_t *ep, tw_verbs_op_t *op, unsigned char *buf,
                                size_t total)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_op_t **tailp = &op->batch;

    for (unsigned k = 0; k < TW_VERBS_BATCH_MAX && tw_verbs_batchable(ep->head) &&
                         total + tw_verbs_frame_size(ep->head) <= TW_VERBS_SEG;
         k++) {
        tw_verbs_op_t *nx = ep->head;
        ep->head = nx->next;
        if (ep->head == NULL) {
            ep->tail = NULL;
        }
        total += tw_verbs_frame_write(nx, buf + total);
        nx->next = NULL;
        *tailp = nx;
        tailp = &nx->batch;
        atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
    }
    tw_trace("verbs", "%s: %zu bytes of frames to rank %d in one send", dev->name, total, ep->peer);
    return total;
}

/* The send of frame op @p op (AM, RTS, FIN, BYE) into @p wr: inline (a
 * copy in @p tmp, @p tmp_len bytes) when it fits, else from a send
 * buffer, with the frames queued behind it coalesced. TW_OK: ready to
 * post, a credit taken; TW_ERR_AGAIN: no credit or buffer now; another
 * status: @p op failed and is gone. */
static tw_status_t tw_verbs_post_frame(tw_verbs_ep_t *ep, tw_verbs_op_t *op, struct ibv_send_wr *wr,
                                       unsigned char *tmp, size_t tmp_len)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_sge *sge = wr->sg_list;
    unsigned char frame[TW_VERBS_FRAME_LEN + TW_VERBS_RTS_LEN];
    tw_verbs_frame_t f = {.am_id = op->am_id, .hdr_len = op->hdr_len};
    size_t flen, total;

    if (op->kind == TW_VERBS_OP_AM) {
        f.type = TW_VERBS_F_AM;
        f.len = op->inl_len - op->hdr_len;
    } else if (op->kind == TW_VERBS_OP_RTS) {
        tw_status_t st = tw_verbs_rts_prepare(dev, op);
        if (st != TW_OK) {
            return st;
        }
        f.type = TW_VERBS_F_RTS;
        f.len = op->len;
        f.raddr = (uint64_t)(uintptr_t)op->data;
        f.sid = op->sid & ~(1ull << 63);
        f.rkey = op->rkey;
    } else if (op->kind == TW_VERBS_OP_FIN) {
        f.type = TW_VERBS_F_FIN;
        f.hdr_len = 0;
        f.sid = op->sid;
        f.status = op->status;
    } else {
        f.type = TW_VERBS_F_BYE;
        f.hdr_len = 0;
    }
    flen = tw_verbs_frame_pack(&f, frame);
    total = flen + (op->kind == TW_VERBS_OP_AM || op->kind == TW_VERBS_OP_RTS ? op->inl_len : 0);
    wr->opcode = IBV_WR_SEND;
    bool more = op->kind != TW_VERBS_OP_BYE && tw_verbs_batchable(ep->head) &&
                total + tw_verbs_frame_size(ep->head) <= TW_VERBS_SEG;
    if (!more && total <= dev->max_inline && total <= tmp_len) {
        /* Small enough: the device copies it at post time. */
        memcpy(tmp, frame, flen);
        memcpy(tmp + flen, op->bytes, total - flen);
        sge->addr = (uintptr_t)tmp;
        sge->length = (uint32_t)total;
        wr->send_flags |= IBV_SEND_INLINE;
        return tw_verbs_credits_take(&ep->sq, 1) ? TW_OK : TW_ERR_AGAIN;
    }
    if (dev->ntx_free == 0) {
        dev->tx_starved = true; /* drained again once buffers come back */
        return TW_ERR_AGAIN;
    }
    if (!tw_verbs_credits_take(&ep->sq, 1)) {
        return TW_ERR_AGAIN;
    }
    op->sbuf = dev->tx_free[--dev->ntx_free];
    unsigned char *buf = tw_verbs_buf(dev, op->sbuf);
    memcpy(buf, frame, flen);
    memcpy(buf + flen, op->bytes, total - flen);
    if (more) {
        /* Frames queued behind it go in the same send, in order. */
        total = tw_verbs_coalesce(ep, op, buf, total);
    }
    sge->addr = (uintptr_t)buf;
    sge->length = (uint32_t)total;
    sge->lkey = dev->pool_mr->lkey;
    return TW_OK;
}

/* The RDMA WRITE or READ of @p op (PUT, GET, READ) into @p wr, its local
 * buffer registered (a READ's is its handle's). TW_OK: ready to post, a
 * credit taken; TW_ERR_AGAIN: no credit now; another status: @p op
 * failed and is gone. */
static tw_status_t tw_verbs_post_rdma(tw_verbs_ep_t *ep, tw_verbs_op_t *op, struct ibv_send_wr *wr)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_sge *sge = wr->sg_list;
    uint32_t lkey = 0, rkey_unused;
    const void *local = op->kind == TW_VERBS_OP_PUT ? op->data : op->dst;

    if (op->len > 0 && op->mr == NULL && op->region == NULL && op->kind != TW_VERBS_OP_READ) {
        /* A put's source is only read (it may be read-only memory). */
        tw_status_t st = tw_verbs_reg(dev, local, op->len,
                                      op->kind == TW_VERBS_OP_PUT ? 0 : IBV_ACCESS_LOCAL_WRITE,
                                      &op->mr, &op->region, &lkey, &rkey_unused);
        if (st != TW_OK) {
            atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
            op->comp->cb(op->comp, st);
            tw_verbs_op_free(op);
            return st;
        }
    }
    if (op->kind == TW_VERBS_OP_READ) {
        lkey = op->rndv->mr != NULL ? op->rndv->mr->lkey : op->rndv->region->lkey[dev->index];
    } else if (op->mr != NULL) {
        lkey = op->mr->lkey;
    } else if (op->region != NULL) {
        lkey = op->region->lkey[dev->index];
    }
    sge->addr = (uintptr_t)local;
    sge->length = (uint32_t)op->len;
    sge->lkey = lkey;
    wr->num_sge = op->len > 0 ? 1 : 0;
    wr->opcode = op->kind == TW_VERBS_OP_PUT ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    wr->wr.rdma.remote_addr = op->raddr;
    wr->wr.rdma.rkey = op->rkey;
    return tw_verbs_credits_take(&ep->sq, 1) ? TW_OK : TW_ERR_AGAIN;
}

/* Post @p op on @p ep's QP. TW_OK: posted. TW_ERR_AGAIN: no credit or
 * buffer now (it stays queued). Another status: a failure that is final;
 * the op was completed with it (and freed). */
static tw_status_t tw_verbs_post(tw_verbs_ep_t *ep, tw_verbs_op_t *op)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_sge sge = {0};
    unsigned char tmp[256];
    tw_status_t st;
    int rc;

    if (ep->sq.avail == 0) {
        return TW_ERR_AGAIN;
    }
    wr.wr_id = (uint64_t)(uintptr_t)op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    switch (op->kind) {
    case TW_VERBS_OP_AM:
    case TW_VERBS_OP_RTS:
    case TW_VERBS_OP_FIN:
    case TW_VERBS_OP_BYE:
        st = tw_verbs_post_frame(ep, op, &wr, tmp, sizeof(tmp));
        break;
    case TW_VERBS_OP_PUT:
    case TW_VERBS_OP_GET:
    case TW_VERBS_OP_READ:
        st = tw_verbs_post_rdma(ep, op, &wr);
        break;
    default:
        return TW_OK; /* not reached: FLUSH and QPERR are not posted */
    }
    if (st != TW_OK) {
        return st;
    }
    rc = ibv_post_send(ep->qp, &wr, &bad);
    atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
    if (rc != 0) {
        /* The QP is in error (or the request was bad): nothing will
         * complete for it, so complete it here and fail the peer. */
        ep->sq.avail++;
        ep->sq.posted--;
        tw_error("verbs", "%s: posting to rank %d failed: %s", dev->name, ep->peer, strerror(rc));
        /* (@p op is out of the queue: failing the peer aborts the rest.) */
        tw_verbs_fail_peer(ep, tw_verbs_qp_err_why(dev), "cannot post to its QP", true);
        st = dev->vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED;
        tw_verbs_batch_done(op, st);
        tw_verbs_op_abort(dev, op, st);
        return st;
    }
    op->pprev = NULL;
    op->pnext = ep->posted;
    if (ep->posted != NULL) {
        ep->posted->pprev = op;
    }
    ep->posted = op;
    return TW_OK;
}

void tw_verbs_flush_check(tw_verbs_ep_t *ep)
{
    for (tw_verbs_op_t **pp = &ep->flushes; *pp != NULL;) {
        tw_verbs_op_t *op = *pp;
        if (ep->sq.done >= op->target) {
            *pp = op->next;
            op->comp->cb(op->comp, TW_OK);
            tw_verbs_op_free(op);
        } else {
            pp = &op->next;
        }
    }
}

/* Post what waits in @p ep's queue while credits last. */
void tw_verbs_ep_drain(tw_verbs_ep_t *ep)
{
    while (ep->head != NULL && ep->ready && !ep->failed) {
        tw_verbs_op_t *op = ep->head;
        /* Out of the queue while it is posted: what posting calls may
         * queue (or abort) more. */
        ep->head = op->next;
        if (ep->head == NULL) {
            ep->tail = NULL;
        }
        if (op->kind == TW_VERBS_OP_FLUSH) {
            atomic_fetch_sub_explicit(&ep->dev->vb->queued, 1, memory_order_relaxed);
            op->target = ep->sq.posted;
            op->next = ep->flushes;
            ep->flushes = op;
            tw_verbs_flush_check(ep);
            continue;
        }
        if (op->kind == TW_VERBS_OP_QPERR) {
            atomic_fetch_sub_explicit(&ep->dev->vb->queued, 1, memory_order_relaxed);
            tw_verbs_op_free(op);
            continue;
        }
        if (tw_verbs_post(ep, op) == TW_ERR_AGAIN) {
            op->next = ep->head; /* back in front: no credit or buffer yet */
            ep->head = op;
            if (ep->tail == NULL) {
                ep->tail = op;
            }
            break;
        }
    }
}

/* Complete an operation that will never be posted, with @p st. */
void tw_verbs_op_abort(tw_verbs_dev_t *dev, tw_verbs_op_t *op, tw_status_t st)
{
    tw_verbs_op_release(dev, op);
    if (op->kind == TW_VERBS_OP_READ) {
        tw_verbs_read_done(dev, op->rndv, st);
    } else if (op->kind == TW_VERBS_OP_RTS && op->sid != 0) {
        (void)tw_verbs_rsend_done(dev, op->sid & ~(1ull << 63), op->peer, st);
    } else if (op->comp != NULL) {
        op->comp->cb(op->comp, st);
    }
    tw_verbs_op_free(op);
}

/* An operation reaches the engine. */
void tw_verbs_enqueue(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_ep_t *ep = &vb->eps[op->peer];

    if (op->kind == TW_VERBS_OP_QPERR) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        if (ep->qp != NULL && !ep->failed) {
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            int rc = ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
            tw_warn("verbs", "%s: test hook: QP to rank %d moved to the error state (%s)",
                    dev->name, op->peer, rc == 0 ? "ok" : strerror(rc));
            /* An idle QP has nothing to flush, and a modify raises no
             * async event: fail the peer (and tell it) now, as the first
             * flushed completion would. */
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "its QP was moved to the error state", true);
        }
        tw_verbs_op_free(op);
        return;
    }
    if (ep->failed || vb->closing || tw_verbs_port_state(dev) != TW_VERBS_PORT_UP) {
        /* (Accepted before the port went down: it completes like the
         * operations that were waiting then.) */
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_verbs_op_abort(dev, op, vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED);
        return;
    }
    if (op->kind == TW_VERBS_OP_FLUSH && ep->qp == NULL) {
        /* Nothing was ever posted to it: nothing to wait for. */
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        op->comp->cb(op->comp, TW_OK);
        tw_verbs_op_free(op);
        return;
    }
    op->next = NULL;
    if (ep->tail == NULL) {
        ep->head = op;
    } else {
        ep->tail->next = op;
    }
    ep->tail = op;
    if (ep->qp == NULL) {
        tw_verbs_connect(ep);
        return;
    }
    tw_verbs_ep_drain(ep);
}

void tw_verbs_enqueue_cmd(void *arg, void *data, uint64_t u64)
{
    (void)u64;
    tw_verbs_enqueue(arg, data);
}

/* ---- the ops ----------------------------------------------------------------- */

/* Hand @p op to its peer's device engine. Thread: any. */
static tw_status_t tw_verbs_submit(tw_verbs_iface_t *vb, tw_verbs_op_t *op, size_t len)
{
    tw_verbs_dev_t *dev = tw_verbs_dev_of(vb, op->peer);
    tw_status_t st;

    if (atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed) >= TW_VERBS_MAX_QUEUED) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_stats_inc(vb->super.stats, TW_TL_STAT_AGAIN);
        tw_verbs_op_free(op);
        return TW_ERR_AGAIN;
    }
    st = tw_tl_submit(&vb->super, dev->pe, tw_verbs_enqueue_cmd, dev, op, op->alloc_len, len);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
    }
    return st;
}

static tw_status_t tw_verbs_check_peer(tw_verbs_iface_t *vb, int peer)
{
    /* rud_qpn stays 0 for a peer addr_connect could not address (another
     * link layer): never a UD QP number (QP 0 is the SMI). */
    if (peer < 0 || peer >= vb->super.size || peer == vb->super.rank ||
        vb->eps[peer].rud_qpn == 0) {
        return TW_ERR_UNREACHABLE;
    }
    switch (atomic_load_explicit(&vb->down[peer], memory_order_acquire)) {
    case TW_VERBS_DOWN_NO:
        break;
    case TW_VERBS_DOWN_FOR_NOW:
        return TW_ERR_TRANSPORT;
    default:
        return TW_ERR_PEER_FAILED;
    }
    /* A port that is down refuses at once (not queued until it is back). */
    if (tw_verbs_port_state(tw_verbs_dev_of(vb, peer)) != TW_VERBS_PORT_UP) {
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

/* An eager frame op carrying header + payload. */
static tw_status_t tw_verbs_send_eager(tw_verbs_iface_t *vb, int peer, uint8_t am_id,
                                       const void *hdr, size_t hdr_len, const void *data,
                                       size_t len, tw_tl_comp_t *comp)
{
    tw_verbs_op_t *op = tw_verbs_op_new(hdr_len + len);

    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = TW_VERBS_OP_AM;
    op->peer = peer;
    op->am_id = am_id;
    op->hdr_len = (uint16_t)hdr_len;
    op->comp = comp;
    op->inl_len = hdr_len + len;
    if (hdr_len > 0) {
        memcpy(op->bytes, hdr, hdr_len);
    }
    if (len > 0) {
        memcpy(op->bytes + hdr_len, data, len);
    }
    return tw_verbs_submit(vb, op, len);
}

tw_status_t tw_verbs_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_status_t st = tw_verbs_check_peer(vb, peer);

    if (st != TW_OK) {
        return st;
    }
    if (hdr_len + len > iface->attr.max_short || hdr_len > TW_VERBS_MAX_HDR) {
        return TW_ERR_INVALID;
    }
    return tw_verbs_send_eager(vb, peer, am_id, hdr, hdr_len, data, len, NULL);
}

tw_status_t tw_verbs_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_status_t st = tw_verbs_check_peer(vb, peer);
    tw_verbs_op_t *op;

    if (st != TW_OK) {
        return st;
    }
    if (hdr_len > iface->attr.max_hdr || len > iface->attr.max_zcopy || comp == NULL) {
        return TW_ERR_INVALID;
    }
    if (hdr_len + len <= iface->attr.max_short || len == 0 || iface->recv_rndv == NULL) {
        if (hdr_len + len > iface->attr.max_short) {
            return TW_ERR_INVALID;
        }
        return tw_verbs_send_eager(vb, peer, am_id, hdr, hdr_len, data, len, comp);
    }
    op = tw_verbs_op_new(hdr_len);
    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = TW_VERBS_OP_RTS;
    op->peer = peer;
    op->am_id = am_id;
    op->hdr_len = (uint16_t)hdr_len;
    op->comp = comp;
    op->data = data;
    op->len = len;
    op->inl_len = hdr_len;
    memcpy(op->bytes, hdr, hdr_len);
    return tw_verbs_submit(vb, op, len);
}

static tw_status_t tw_verbs_rma(tw_tl_iface_t *iface, uint8_t kind, int peer, const void *src,
                                void *dst, size_t len, uint64_t raddr, const void *rkey,
                                tw_tl_comp_t *comp)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_status_t st = tw_verbs_check_peer(vb, peer);
    tw_verbs_op_t *op;
    uint32_t key = 0;

    if (st != TW_OK) {
        return st;
    }
    if (comp == NULL || len > 0x7fffffffu ||
        (kind != TW_VERBS_OP_FLUSH &&
         tw_verbs_rkey_parse(rkey, (unsigned)vb->eps[peer].rdev, &key) != TW_OK)) {
        return TW_ERR_INVALID;
    }
    op = tw_verbs_op_new(0);
    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = kind;
    op->peer = peer;
    op->comp = comp;
    op->data = src;
    op->dst = dst;
    op->len = len;
    op->raddr = raddr;
    op->rkey = key;
    return tw_verbs_submit(vb, op, len);
}

tw_status_t tw_verbs_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                               uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    return tw_verbs_rma(iface, TW_VERBS_OP_PUT, peer, src, NULL, len, raddr, rkey, comp);
}

tw_status_t tw_verbs_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                               uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    return tw_verbs_rma(iface, TW_VERBS_OP_GET, peer, NULL, dst, len, raddr, rkey, comp);
}

tw_status_t tw_verbs_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp)
{
    return tw_verbs_rma(iface, TW_VERBS_OP_FLUSH, peer, NULL, NULL, 0, 0, NULL, comp);
}
