/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided operations emulated over active messages (am id
 * TW_MSG_AM_RMA, header in tw_rma_proto.h), on any route: shm, tcp,
 * self, or reliability's. Both ends' arrivals are here: the target
 * serving requests, the origin taking replies.
 *
 * The target's engine looks the region up, checks key and bounds, and
 * copies (or pulls a large put straight into the region by rendezvous;
 * answers a large get with a zero-copy send of the region's bytes), then
 * answers. A put completes when its ack arrives, a get when its bytes
 * landed.
 *
 * Replies come from the target's engine, which must not wait for a busy
 * transport: a reply refused with TW_ERR_AGAIN is kept on a list that a
 * progress function of engine 0 retries (a get is served again from the
 * region then, since it may have been deregistered meanwhile).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma_int.h"

/* A bad or stale arrival: count it, and log it (rate-limited). */
static void tw_rma_drop(tw_rma_t *rma, int src, const char *why)
{
    uint64_t n = tw_rma_log_due(&rma->drop_logged);

    tw_stats_inc(rma->stats, TW_RMA_STAT_DROPPED);
    if (n != 0) {
        tw_warn("rma", "dropped a one-sided message from rank %d: %s (%llu so far)", src, why,
                (unsigned long long)n);
    }
}

/* ---- the target: serving requests --------------------------------------- */

static void tw_rma_defer(tw_rma_t *rma, int src, const tw_rma_hdr_t *h)
{
    tw_rma_defer_t *d = tw_malloc(sizeof(*d));

    if (d == NULL) {
        /* The origin's operation waits until the peer fails or finalize. */
        tw_error("rma", "out of memory keeping a reply to rank %d", src);
        return;
    }
    d->next = NULL;
    d->src = src;
    d->h = *h;
    tw_mutex_lock(&rma->defer_lock);
    if (rma->dtail != NULL) {
        rma->dtail->next = d;
    } else {
        rma->dhead = d;
    }
    rma->dtail = d;
    atomic_fetch_add_explicit(&rma->ndefer, 1, memory_order_relaxed);
    tw_mutex_unlock(&rma->defer_lock);
    tw_stats_inc(rma->stats, TW_RMA_STAT_DEFERRED);
}

/* A reply's send failed with @p st: keep it for later, or give up on a
 * peer that is gone (its operations fail there). */
static void tw_rma_send_failed(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, tw_status_t st)
{
    if (st == TW_ERR_AGAIN) {
        tw_rma_defer(rma, src, h);
    } else {
        tw_debug("rma", "no reply to rank %d: %s", src, tw_strerror(st));
    }
}

static void tw_rma_ack(tw_rma_t *rma, int src, uint64_t cookie, tw_status_t st)
{
    tw_rma_hdr_t a = {.version = TW_RMA_HDR_VERSION,
                      .type = TW_RMA_PUT_ACK,
                      .status = (int16_t)st,
                      .cookie = cookie};
    tw_tl_iface_t *iface = rma->route[src];
    tw_status_t sst = tw_tl_am_short(iface, src, TW_MSG_AM_RMA, &a, sizeof(a), NULL, 0);

    if (sst != TW_OK) {
        tw_rma_send_failed(rma, src, &a, sst);
    }
}

static void tw_rma_serve_put(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, const void *data,
                             size_t len)
{
    tw_status_t st = TW_ERR_PROTOCOL;
    tw_mr_t *mr;

    if (h->len == len) {
        tw_rwlock_rdlock(&rma->reg_lock);
        st = tw_rma_lookup_locked(rma, src, h, &mr);
        if (st == TW_OK && len > 0) {
            TW_TSAN_ACQUIRE(&rma->tsan_causal);
            memcpy((void *)(uintptr_t)h->addr, data, len);
        }
        tw_rwlock_unlock(&rma->reg_lock);
    } else {
        tw_rma_drop(rma, src, "put length does not match its payload");
    }
    if (st == TW_OK) {
        tw_stats_inc(rma->stats, TW_RMA_STAT_SERVED);
    }
    tw_rma_ack(rma, src, h->cookie, st);
}

static void tw_rma_xfer_done(tw_tl_comp_t *comp, tw_status_t st)
{
    tw_rma_xfer_t *x = (tw_rma_xfer_t *)comp;

    atomic_fetch_sub_explicit(&x->mr->inflight, 1, memory_order_release);
    tw_free(x, sizeof(*x));
    (void)st; /* the origin's get fails through its own transport */
}

static void tw_rma_serve_get(tw_rma_t *rma, int src, const tw_rma_hdr_t *h)
{
    tw_tl_iface_t *iface = rma->route[src];
    tw_rma_hdr_t r = {.version = TW_RMA_HDR_VERSION, .type = TW_RMA_GET_REP, .cookie = h->cookie};
    const void *addr = (const void *)(uintptr_t)h->addr;
    tw_rma_xfer_t *x = NULL;
    tw_status_t st, sst;
    tw_mr_t *mr;

    tw_rwlock_rdlock(&rma->reg_lock);
    st = tw_rma_lookup_locked(rma, src, h, &mr);
    if (st == TW_OK && h->len > iface->attr.max_zcopy) {
        st = TW_ERR_INVALID;
    }
    if (st != TW_OK) {
        tw_rwlock_unlock(&rma->reg_lock);
        r.status = (int16_t)st;
        sst = tw_tl_am_short(iface, src, TW_MSG_AM_RMA, &r, sizeof(r), NULL, 0);
        if (sst != TW_OK) {
            tw_rma_send_failed(rma, src, &r, sst);
        }
        return;
    }
    r.len = h->len;
    TW_TSAN_ACQUIRE(&rma->tsan_causal);
    if (h->len <= rma->eager_limit && sizeof(r) + h->len <= iface->attr.max_short) {
        /* Copied under the read lock: deregistration waits for it. */
        sst = tw_tl_am_short(iface, src, TW_MSG_AM_RMA, &r, sizeof(r), addr, h->len);
        tw_rwlock_unlock(&rma->reg_lock);
    } else {
        atomic_fetch_add_explicit(&mr->inflight, 1, memory_order_relaxed);
        tw_rwlock_unlock(&rma->reg_lock);
        x = tw_malloc(sizeof(*x));
        if (x == NULL) {
            sst = TW_ERR_AGAIN; /* try again later */
        } else {
            *x =
                (tw_rma_xfer_t){.comp = {.cb = tw_rma_xfer_done}, .rma = rma, .mr = mr, .src = src};
            sst = tw_tl_am_zcopy(iface, src, TW_MSG_AM_RMA, &r, sizeof(r), addr, h->len, &x->comp);
        }
        if (sst != TW_OK) {
            tw_free(x, sizeof(*x));
            atomic_fetch_sub_explicit(&mr->inflight, 1, memory_order_release);
        }
    }
    if (sst == TW_OK) {
        tw_stats_inc(rma->stats, TW_RMA_STAT_SERVED);
    } else {
        tw_rma_send_failed(rma, src, h, sst); /* served again from the request */
    }
}

int tw_rma_progress(void *arg)
{
    tw_rma_t *rma = arg;
    tw_rma_defer_t *d;
    int events = 0;

    if (atomic_load_explicit(&rma->ndefer, memory_order_relaxed) == 0) {
        return 0;
    }
    tw_mutex_lock(&rma->defer_lock);
    d = rma->dhead;
    rma->dhead = rma->dtail = NULL;
    atomic_store_explicit(&rma->ndefer, 0, memory_order_relaxed);
    tw_mutex_unlock(&rma->defer_lock);
    while (d != NULL) {
        tw_rma_defer_t *next = d->next;
        if (!tw_rma_is_down(rma, d->src)) {
            if (d->h.type == TW_RMA_GET_REQ) {
                tw_rma_serve_get(rma, d->src, &d->h);
            } else {
                tw_tl_iface_t *iface = rma->route[d->src];
                tw_status_t st =
                    tw_tl_am_short(iface, d->src, TW_MSG_AM_RMA, &d->h, sizeof(d->h), NULL, 0);
                if (st != TW_OK) {
                    tw_rma_send_failed(rma, d->src, &d->h, st);
                }
            }
        }
        tw_free(d, sizeof(*d));
        events++;
        d = next;
    }
    return events;
}

/* ---- arrivals ----------------------------------------------------------- */

/* Check an RMA header; false (counted, logged) if it is not one. */
static bool tw_rma_parse(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, tw_rma_hdr_t *h)
{
    const char *why = NULL;

    if (tw_rma_hdr_parse(hdr, hdr_len, h, &why) != TW_OK) {
        tw_rma_drop(rma, src, why);
        return false;
    }
    return true;
}

/* The target refused an operation of ours (its reason is logged there):
 * say so here too, then fail it with the target's status. */
static void tw_rma_refused(tw_rma_t *rma, int src, tw_rma_op_t *op, tw_status_t st)
{
    uint64_t n = tw_rma_log_due(&rma->failed_logged);

    if (n != 0) {
        tw_warn("rma", "rank %d refused a %s of %zu bytes: %s (%llu so far)", src,
                op->op == TW_OP_PUT ? "put" : "get", op->len, tw_strerror(st),
                (unsigned long long)n);
    }
    tw_rma_event(op, st);
}

static void tw_rma_got_get_rep(tw_rma_t *rma, int src, const tw_rma_hdr_t *h, const void *data,
                               size_t len)
{
    tw_rma_op_t *op = tw_rma_slot_take(rma, h->cookie, src, TW_OP_GET);

    if (op == NULL) {
        tw_rma_drop(rma, src, "a reply to no get waiting for it");
        return;
    }
    if (h->status != TW_OK) {
        tw_rma_refused(rma, src, op, (tw_status_t)h->status);
    } else if (h->len != len || len != op->len) {
        tw_rma_drop(rma, src, "get reply of the wrong length");
        tw_rma_event(op, TW_ERR_PROTOCOL);
    } else {
        if (len > 0) {
            memcpy(op->dst, data, len);
        }
        tw_rma_event(op, TW_OK);
    }
}

void tw_rma_recv(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, const void *data,
                 size_t len)
{
    tw_rma_hdr_t h;
    tw_rma_op_t *op;

    if (!tw_rma_parse(rma, src, hdr, hdr_len, &h)) {
        return;
    }
    switch (h.type) {
    case TW_RMA_PUT_REQ:
        tw_rma_serve_put(rma, src, &h, data, len);
        break;
    case TW_RMA_GET_REQ:
        if (len != 0) {
            tw_rma_drop(rma, src, "get request with a payload");
            break;
        }
        tw_rma_serve_get(rma, src, &h);
        break;
    case TW_RMA_PUT_ACK:
        op = tw_rma_slot_take(rma, h.cookie, src, TW_OP_PUT);
        if (op == NULL || len != 0) {
            tw_rma_drop(rma, src, "an ack of no put waiting for it");
            if (op != NULL) {
                tw_rma_event(op, TW_ERR_PROTOCOL);
            }
            break;
        }
        if (h.status != TW_OK) {
            tw_rma_refused(rma, src, op, (tw_status_t)h.status);
        } else {
            tw_rma_event(op, TW_OK);
        }
        break;
    default:
        tw_rma_got_get_rep(rma, src, &h, data, len);
        break;
    }
}

static void tw_rma_released(tw_tl_comp_t *comp, tw_status_t st)
{
    (void)comp, (void)st;
}

static tw_tl_comp_t tw_rma_release_comp = {.cb = tw_rma_released};

/* The pull of a large put landed in the region (or failed): answer. */
static void tw_rma_pull_done(tw_tl_comp_t *comp, tw_status_t st)
{
    tw_rma_xfer_t *x = (tw_rma_xfer_t *)comp;
    tw_rma_t *rma = x->rma;
    int src = x->src;
    uint64_t cookie = x->cookie;

    atomic_fetch_sub_explicit(&x->mr->inflight, 1, memory_order_release);
    tw_free(x, sizeof(*x));
    if (st == TW_OK) {
        tw_stats_inc(rma->stats, TW_RMA_STAT_SERVED);
    }
    if (st != TW_ERR_PEER_FAILED && st != TW_ERR_CANCELED) {
        tw_rma_ack(rma, src, cookie, st);
    }
}

void tw_rma_rndv(tw_rma_t *rma, int src, const void *hdr, size_t hdr_len, size_t len,
                 tw_tl_rndv_t *rndv)
{
    tw_tl_iface_t *iface = rma->route[src];
    tw_rma_hdr_t h;
    tw_status_t st;

    if (!tw_rma_parse(rma, src, hdr, hdr_len, &h)) {
        goto release;
    }
    if (h.type == TW_RMA_PUT_REQ) {
        tw_rma_xfer_t *x = NULL;
        tw_mr_t *mr = NULL;
        st = TW_ERR_PROTOCOL;
        if (h.len == len) {
            tw_rwlock_rdlock(&rma->reg_lock);
            st = tw_rma_lookup_locked(rma, src, &h, &mr);
            if (st == TW_OK) {
                atomic_fetch_add_explicit(&mr->inflight, 1, memory_order_relaxed);
            }
            tw_rwlock_unlock(&rma->reg_lock);
        } else {
            tw_rma_drop(rma, src, "put length does not match its payload");
        }
        if (st == TW_OK && (x = tw_malloc(sizeof(*x))) == NULL) {
            atomic_fetch_sub_explicit(&mr->inflight, 1, memory_order_release);
            st = TW_ERR_NOMEM;
        }
        if (st != TW_OK) {
            tw_rma_ack(rma, src, h.cookie, st);
            goto release;
        }
        *x = (tw_rma_xfer_t){
            .comp = {.cb = tw_rma_pull_done}, .rma = rma, .mr = mr, .cookie = h.cookie, .src = src};
        TW_TSAN_ACQUIRE(&rma->tsan_causal);
        st = tw_tl_rndv_get(iface, rndv, (void *)(uintptr_t)h.addr, len, &x->comp);
        if (st != TW_OK) {
            tw_rma_pull_done(&x->comp, st);
        }
        return;
    }
    if (h.type == TW_RMA_GET_REP) {
        tw_rma_op_t *op = tw_rma_slot_take(rma, h.cookie, src, TW_OP_GET);
        if (op == NULL) {
            tw_rma_drop(rma, src, "a reply to no get waiting for it");
            goto release;
        }
        if (h.status != TW_OK || h.len != len || len != op->len) {
            tw_rma_drop(rma, src, "get reply of the wrong length");
            if (h.status != TW_OK) {
                tw_rma_refused(rma, src, op, (tw_status_t)h.status);
            } else {
                tw_rma_event(op, TW_ERR_PROTOCOL);
            }
            goto release;
        }
        st = tw_tl_rndv_get(iface, rndv, op->dst, len, &op->comp);
        if (st != TW_OK) {
            tw_rma_event(op, st);
        }
        return;
    }
    tw_rma_drop(rma, src, "a request or ack too large for its kind");
release:
    if (tw_tl_rndv_get(iface, rndv, NULL, 0, &tw_rma_release_comp) != TW_OK) {
        tw_debug("rma", "releasing a rendezvous of rank %d failed", src);
    }
}
