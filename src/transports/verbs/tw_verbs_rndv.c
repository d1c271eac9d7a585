/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Rendezvous on the verbs transport. The sender's RTS (tw_verbs_tx.c)
 * names its buffer, the buffer's rkey and a send id from the device's
 * send table; the receiver's handle (tw_tl_rndv_t) takes rndv_get, which
 * reads the payload with RDMA READ (1 GiB, or the port's max_msg_sz, per
 * work request) straight into the destination and then sends FIN with
 * the outcome; FIN completes the sender's operation and frees its slot.
 * Send ids carry a generation of their slot, so a late or forged FIN
 * finds nothing (and fails the peer).
 *
 * rndv_get may come from any thread: off the engine it is handed over
 * (tw_pe_hand_over, which never fails: the sender waits for it); inside
 * the recv_rndv callback that announced the handle it runs at once.
 * Thread: engine, but for rndv_get.
 */
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <string.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/verbs/tw_verbs_int.h"

/* ---- send side: the table of rendezvous sends waiting for FIN --------------- */

uint64_t tw_verbs_rsend_add(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    tw_verbs_rsend_t *s;

    if (dev->rsend_free == UINT32_MAX) {
        uint32_t n = dev->nrsends == 0 ? 256 : dev->nrsends * 2;
        tw_verbs_rsend_t *a = tw_calloc(n, sizeof(*a));
        if (a == NULL) {
            return UINT64_MAX;
        }
        if (dev->nrsends > 0) {
            memcpy(a, dev->rsends, dev->nrsends * sizeof(*a));
            tw_free(dev->rsends, dev->nrsends * sizeof(*a));
        }
        for (uint32_t i = n; i-- > dev->nrsends;) {
            a[i].next_free = dev->rsend_free;
            dev->rsend_free = i;
        }
        dev->rsends = a;
        dev->nrsends = n;
    }
    uint32_t idx = dev->rsend_free;
    s = &dev->rsends[idx];
    dev->rsend_free = s->next_free;
    s->comp = op->comp;
    s->mr = op->mr;
    s->region = op->region;
    s->peer = op->peer;
    op->mr = NULL; /* the slot holds them until FIN */
    op->region = NULL;
    return (uint64_t)s->gen << 32 | idx;
}

/* Complete rendezvous send @p sid of @p peer; false if there is none. */
bool tw_verbs_rsend_done(tw_verbs_dev_t *dev, uint64_t sid, int peer, tw_status_t st)
{
    uint32_t idx = (uint32_t)sid, gen = (uint32_t)(sid >> 32);
    tw_verbs_rsend_t *s;
    tw_tl_comp_t *comp;

    if (idx >= dev->nrsends || (s = &dev->rsends[idx])->comp == NULL || s->gen != gen ||
        s->peer != peer) {
        return false;
    }
    comp = s->comp;
    if (s->mr != NULL) {
        (void)ibv_dereg_mr(s->mr);
    }
    if (s->region != NULL) {
        tw_verbs_rcache_put(&dev->vb->rcache, s->region);
    }
    s->comp = NULL;
    s->mr = NULL;
    s->region = NULL;
    s->gen = (s->gen + 1) & 0x7fffffffu; /* bit 63 of a sid is the "registered" mark */
    s->next_free = dev->rsend_free;
    dev->rsend_free = idx;
    comp->cb(comp, st);
    return true;
}

/* Complete every rendezvous send to @p peer that waits for its FIN. */
void tw_verbs_rsend_fail(tw_verbs_dev_t *dev, int peer, tw_status_t st)
{
    for (uint32_t i = 0; i < dev->nrsends; i++) {
        tw_verbs_rsend_t *s = &dev->rsends[i];
        if (s->comp != NULL && s->peer == peer) {
            (void)tw_verbs_rsend_done(dev, (uint64_t)s->gen << 32 | i, peer, st);
        }
    }
}

/* ---- receive side -------------------------------------------------------------- */

static void tw_verbs_handle_free(tw_tl_rndv_t *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
    tw_free(h, sizeof(*h));
}

static void tw_verbs_send_fin(tw_verbs_dev_t *dev, int peer, uint64_t sid, tw_status_t st)
{
    tw_verbs_op_t *op = tw_verbs_op_new(0);

    if (op == NULL) {
        tw_error("verbs", "out of memory answering rank %d's rendezvous", peer);
        return; /* its send completes when it fails or closes */
    }
    op->kind = TW_VERBS_OP_FIN;
    op->peer = peer;
    op->sid = sid;
    op->status = st;
    atomic_fetch_add_explicit(&dev->vb->queued, 1, memory_order_relaxed);
    tw_verbs_enqueue(dev, op);
}

/* rndv_get on the device's engine. */
static void tw_verbs_rndv_apply(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp)
{
    tw_verbs_dev_t *dev = h->dev;
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_ep_t *ep = &vb->eps[h->peer];
    uint32_t lkey, rkey_unused;
    unsigned n;

    if (len > h->len) {
        len = h->len;
    }
    if (ep->failed || vb->closing || h->gen != ep->gen) {
        /* (Of a connection that was reset since: its sender's operation
         * completed when that connection failed.) */
        tw_verbs_handle_free(h);
        comp->cb(comp, vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED);
        return;
    }
    if (len == 0) {
        tw_verbs_send_fin(dev, h->peer, h->sid, TW_OK);
        tw_verbs_handle_free(h);
        comp->cb(comp, TW_OK);
        return;
    }
    if (tw_verbs_reg(dev, dst, len, IBV_ACCESS_LOCAL_WRITE, &h->mr, &h->region, &lkey,
                     &rkey_unused) != TW_OK) {
        tw_verbs_send_fin(dev, h->peer, h->sid, TW_ERR_TRANSPORT);
        tw_verbs_handle_free(h);
        comp->cb(comp, TW_ERR_TRANSPORT);
        return;
    }
    h->comp = comp;
    h->st = TW_OK;
    size_t chunk = dev->max_msg > 0 && dev->max_msg < TW_VERBS_READ_CHUNK
                       ? (size_t)dev->max_msg
                       : (size_t)TW_VERBS_READ_CHUNK;
    n = (unsigned)((len + chunk - 1) / chunk);
    h->reads_left = n;
    tw_stats_add(vb->super.stats, TW_TL_STAT_RX_BYTES, len);
    for (unsigned k = 0; k < n; k++) {
        size_t off = (size_t)k * chunk;
        tw_verbs_op_t *op = tw_verbs_op_new(0);
        if (op == NULL) {
            /* Account for the reads never made; the last completion ends it. */
            h->reads_left -= n - k - 1; /* this read's share ends it below */
            tw_verbs_read_done(dev, h, TW_ERR_NOMEM);
            break;
        }
        op->kind = TW_VERBS_OP_READ;
        op->peer = h->peer;
        op->rndv = h;
        op->dst = (unsigned char *)dst + off;
        op->len = TW_MIN(len - off, chunk);
        op->raddr = h->raddr + off;
        op->rkey = h->rkey;
        atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_verbs_enqueue(dev, op);
    }
}

/* A read of handle @p h completed with @p st. */
void tw_verbs_read_done(tw_verbs_dev_t *dev, tw_tl_rndv_t *h, tw_status_t st)
{
    if (st != TW_OK && h->st == TW_OK) {
        h->st = st;
    }
    if (--h->reads_left > 0) {
        return;
    }
    tw_tl_comp_t *comp = h->comp;
    tw_status_t fst = h->st;
    if (h->mr != NULL) {
        (void)ibv_dereg_mr(h->mr);
    }
    if (h->region != NULL) {
        tw_verbs_rcache_put(&dev->vb->rcache, h->region);
    }
    if (!dev->vb->eps[h->peer].failed && h->gen == dev->vb->eps[h->peer].gen) {
        tw_verbs_send_fin(dev, h->peer, h->sid, fst); /* the sender's op completes so */
    }
    tw_verbs_handle_free(h);
    comp->cb(comp, fst);
}

/* An RTS arrived from @p ep's peer (frame @p f at @p buf): a handle for
 * it goes up through recv_rndv. Returns the frame's size, or 0 when the
 * peer has failed. */
size_t tw_verbs_rts_recv(tw_verbs_dev_t *dev, tw_verbs_ep_t *ep, const tw_verbs_frame_t *f,
                         const unsigned char *buf)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_tl_rndv_t *h;

    if (vb->super.recv_rndv == NULL) {
        tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "a rendezvous nobody can take", true);
        return 0;
    }
    h = tw_calloc(1, sizeof(*h));
    if (h == NULL) {
        tw_error("verbs", "out of memory taking a rendezvous from rank %d", ep->peer);
        tw_verbs_send_fin(dev, ep->peer, f->sid, TW_ERR_NOMEM);
        return f->total; /* its sender learns; the frames after it still count */
    }
    h->dev = dev;
    h->peer = ep->peer;
    h->gen = ep->gen;
    h->raddr = f->raddr;
    h->rkey = f->rkey;
    h->len = f->len;
    h->sid = f->sid;
    h->next = dev->handles.next;
    h->prev = &dev->handles;
    h->next->prev = h;
    dev->handles.next = h;
    tw_stats_inc(vb->super.stats, TW_TL_STAT_RX_MSGS);
    tw_tl_rndv_announce(&vb->super, ep->peer, f->am_id, buf + f->hdr_off, f->hdr_len,
                        (size_t)f->len, h);
    return f->total;
}

tw_status_t tw_verbs_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                              tw_tl_comp_t *comp)
{
    (void)iface;
    tw_tl_rndv_pull_on(h->dev->pe, h, &h->pull, tw_verbs_rndv_apply, dst, len, comp);
    return TW_OK;
}

/* The rendezvous handles still held and the registrations they and the
 * cache keep: released for every device before any device closes (a
 * region spans all devices, and an MR must go before its PD). */
void tw_verbs_dev_release_handles(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    while (dev->handles.next != &dev->handles) {
        tw_tl_rndv_t *h = dev->handles.next;
        if (h->mr != NULL) {
            (void)ibv_dereg_mr(h->mr);
        }
        if (h->region != NULL) {
            tw_verbs_rcache_put(&vb->rcache, h->region);
        }
        tw_verbs_handle_free(h);
    }
}
