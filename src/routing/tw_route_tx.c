/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Sending: this rank's messages (am_short at once, am_zcopy through the
 * queue), frames passed on for others, DOWNs, and the drainer that runs
 * on route's engine. The order rules are in tw_route_int.h.
 */
#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "routing/tw_route_int.h"

tw_tl_iface_t *tw_route_via(tw_route_t *rt, int rank)
{
    tw_tl_iface_t *via = atomic_load_explicit(&rt->via[rank], memory_order_acquire);

    if (via == NULL && rank != rt->rank) {
        for (unsigned i = 0; i < rt->ntaps && via == NULL; i++) {
            if (tw_tl_reachable(rt->inner[i], rank)) {
                via = rt->inner[i];
            }
        }
        if (via != NULL) {
            atomic_store_explicit(&rt->via[rank], via, memory_order_release);
        }
    }
    return via;
}

/* A message to @p dst (@p fits: its lengths are within our attr):
 * checks, and its next hop. */
static tw_status_t tw_route_check(tw_route_t *rt, int dst, size_t hdr_len, bool fits, int *h_p,
                                  tw_tl_iface_t **via_p)
{
    if (dst < 0 || dst >= rt->size || rt->node_of[dst] == rt->node) {
        return TW_ERR_UNREACHABLE;
    }
    if (hdr_len > rt->super.attr.max_hdr || !fits) {
        return TW_ERR_INVALID;
    }
    if (atomic_load_explicit(&rt->down[dst], memory_order_acquire)) {
        return TW_ERR_PEER_FAILED;
    }
    *h_p = tw_route_next(rt, dst);
    *via_p = tw_route_via(rt, *h_p);
    return *via_p != NULL ? TW_OK : TW_ERR_UNREACHABLE;
}

static void tw_route_hdr_fill(tw_route_t *rt, unsigned char *buf, int dst, uint8_t am_id,
                              const void *hdr, size_t hdr_len, uint64_t msg_len)
{
    tw_route_hdr_t h = {.version = TW_ROUTE_PROTO_VERSION,
                        .type = TW_ROUTE_T_DATA,
                        .am_id = am_id,
                        .hdr_len = (uint16_t)hdr_len,
                        .flags = (uint8_t)(TW_ROUTE_F_FIRST | (rt->ordered ? TW_ROUTE_F_SEQ : 0)),
                        .src = rt->rank,
                        .dst = dst,
                        .msg_len = (uint32_t)msg_len};
    memcpy(buf, &h, sizeof(h));
    if (hdr_len > 0) {
        memcpy(buf + sizeof(h), hdr, hdr_len);
    }
}

tw_status_t tw_route_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len)
{
    tw_route_t *rt = (tw_route_t *)iface;
    unsigned char buf[sizeof(tw_route_hdr_t) + TW_TL_HDR_MAX];
    tw_route_hdr_t *rh;
    tw_tl_iface_t *via;
    tw_status_t st;
    int h;

    st = tw_route_check(rt, peer, hdr_len, hdr_len + len <= iface->attr.max_short, &h, &via);
    if (st != TW_OK) {
        return st;
    }
    tw_route_hdr_fill(rt, buf, peer, am_id, hdr, hdr_len, len);
    rh = (tw_route_hdr_t *)(void *)buf;
    rh->flags |= TW_ROUTE_F_LAST;
    if (rt->ordered) {
        /* Numbered when it goes: a refused frame must not leave a gap. */
        tw_route_out_t *o = &rt->out[peer];
        tw_mutex_lock(&o->lock);
        rh->seq = o->seq;
        tw_route_seal(buf);
        st = tw_tl_am_short(via, h, TW_ROUTE_AM, buf, sizeof(*rh) + hdr_len, data, len);
        if (st == TW_OK) {
            o->seq++;
        }
        tw_mutex_unlock(&o->lock);
    } else {
        tw_route_seal(buf);
        st = tw_tl_am_short(via, h, TW_ROUTE_AM, buf, sizeof(*rh) + hdr_len, data, len);
    }
    if (st == TW_OK) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_SENT);
        tw_stats_add(rt->stats, TW_ROUTE_STAT_SENT_BYTES, len);
    } else if (st == TW_ERR_AGAIN) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_AGAIN);
    } else if (st == TW_ERR_INVALID) {
        st = TW_ERR_TRANSPORT; /* sized from its attr: the hop, not the caller */
    }
    return st;
}

/* Fragments message @p it goes in (the first also carries the upper
 * header). */
static uint32_t tw_route_nfrags(const tw_route_t *rt, const tw_route_item_t *it)
{
    size_t first = rt->frag - it->hdr_len, rest = rt->frag - sizeof(tw_route_hdr_t);

    return it->len <= first ? 1 : (uint32_t)(1 + (it->len - first + rest - 1) / rest);
}

static void tw_route_enqueue(tw_route_t *rt, int h, tw_route_item_t *it)
{
    tw_route_q_t *q = &rt->q[h];

    it->next = NULL;
    if (it->comp != NULL && rt->ordered) {
        tw_route_out_t *o = &rt->out[((const tw_route_hdr_t *)(const void *)it->hdr)->dst];
        tw_mutex_lock(&o->lock);
        it->seq = o->seq;
        o->seq += tw_route_nfrags(rt, it);
        tw_mutex_unlock(&o->lock);
    }
    tw_mutex_lock(&q->lock);
    if (q->tail != NULL) {
        q->tail->next = it;
    } else {
        q->head = it;
    }
    q->tail = it;
    atomic_fetch_add_explicit(&q->n, 1, memory_order_acq_rel);
    atomic_fetch_add_explicit(&rt->queued, 1, memory_order_acq_rel);
    tw_mutex_unlock(&q->lock);
    tw_stats_inc(rt->stats, TW_ROUTE_STAT_QUEUED);
    tw_pe_wake(rt->pe);
}

tw_status_t tw_route_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    tw_route_t *rt = (tw_route_t *)iface;
    size_t alloc_len = sizeof(tw_route_item_t) + sizeof(tw_route_hdr_t) + hdr_len;
    tw_route_item_t *it;
    tw_tl_iface_t *via;
    tw_status_t st;
    int h;

    st = tw_route_check(rt, peer, hdr_len, len <= iface->attr.max_zcopy && comp != NULL, &h, &via);
    if (st != TW_OK) {
        return st;
    }
    it = tw_malloc(alloc_len);
    if (it == NULL) {
        return TW_ERR_NOMEM;
    }
    *it = (tw_route_item_t){.alloc_len = alloc_len,
                            .comp = comp,
                            .data = data,
                            .len = len,
                            .hdr_len = sizeof(tw_route_hdr_t) + hdr_len};
    tw_route_hdr_fill(rt, it->hdr, peer, am_id, hdr, hdr_len, len);
    tw_route_enqueue(rt, h, it);
    return TW_OK;
}

void tw_route_forward(tw_route_t *rt, int h, const void *hdr, size_t hdr_len, const void *data,
                      size_t len)
{
    tw_tl_iface_t *via = tw_route_via(rt, h);
    tw_route_item_t *it;
    tw_status_t st = TW_ERR_AGAIN;

    if (via == NULL || atomic_load_explicit(&rt->gone[h], memory_order_acquire)) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED);
        tw_debug("route", "no way on to rank %d: frame dropped", h);
        return;
    }
    if (atomic_load_explicit(&rt->q[h].n, memory_order_acquire) == 0) {
        st = tw_tl_am_short(via, h, TW_ROUTE_AM, hdr, hdr_len, data, len);
    }
    if (st == TW_OK) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_FORWARDED);
        tw_stats_add(rt->stats, TW_ROUTE_STAT_FWD_BYTES, len);
        return;
    }
    if (st != TW_ERR_AGAIN) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED);
        tw_debug("route", "frame on to rank %d dropped: %s", h, tw_strerror(st));
        return;
    }
    it = tw_malloc(sizeof(*it) + hdr_len + len);
    if (it == NULL) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED);
        tw_error("route", "out of memory queueing a frame on to rank %d: dropped", h);
        return;
    }
    *it =
        (tw_route_item_t){.alloc_len = sizeof(*it) + hdr_len + len, .len = len, .hdr_len = hdr_len};
    memcpy(it->hdr, hdr, hdr_len);
    if (len > 0) {
        memcpy(it->hdr + hdr_len, data, len);
    }
    it->data = it->hdr + hdr_len;
    tw_route_enqueue(rt, h, it);
}

void tw_route_send_down(tw_route_t *rt, int h, int gone, uint8_t how)
{
    tw_route_hdr_t d = {.version = TW_ROUTE_PROTO_VERSION,
                        .type = TW_ROUTE_T_DOWN,
                        .am_id = how,
                        .src = rt->rank,
                        .dst = gone};

    tw_route_seal(&d);
    tw_route_forward(rt, h, &d, sizeof(d), NULL, 0);
}

/* Send what is left of @p it to @p h: TW_OK once all of it went, else
 * the status that stopped it (TW_ERR_AGAIN: no room now). */
static tw_status_t tw_route_item_send(tw_route_t *rt, int h, tw_route_item_t *it)
{
    tw_tl_iface_t *via = tw_route_via(rt, h);
    tw_route_hdr_t *rh = (tw_route_hdr_t *)(void *)it->hdr;
    tw_status_t st;

    if (via == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (it->comp == NULL) {
        st = tw_tl_am_short(via, h, TW_ROUTE_AM, it->hdr, it->hdr_len, it->data, it->len);
        if (st == TW_OK) {
            tw_stats_inc(rt->stats, TW_ROUTE_STAT_FORWARDED);
            tw_stats_add(rt->stats, TW_ROUTE_STAT_FWD_BYTES, it->len);
        }
        return st;
    }
    do {
        bool first = it->off == 0;
        size_t hl = first ? it->hdr_len : sizeof(*rh);
        size_t n = TW_MIN(it->len - it->off, rt->frag - hl);
        rh->flags = (uint8_t)((first ? TW_ROUTE_F_FIRST : 0) |
                              (it->off + n == it->len ? TW_ROUTE_F_LAST : 0));
        rh->offset = (uint32_t)it->off;
        if (!first) {
            rh->hdr_len = 0;
        }
        if (rt->ordered) {
            rh->flags |= TW_ROUTE_F_SEQ;
            rh->seq = it->seq;
        }
        tw_route_seal(rh);
        st = tw_tl_am_short(via, h, TW_ROUTE_AM, it->hdr, hl, it->data + it->off, n);
        if (st != TW_OK) {
            return st;
        }
        it->off += n;
        it->seq++;
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_SENT);
        tw_stats_add(rt->stats, TW_ROUTE_STAT_SENT_BYTES, n);
    } while (it->off < it->len);
    return TW_OK;
}

static void tw_route_item_done(tw_route_item_t *it, tw_status_t st)
{
    tw_tl_comp_t *comp = it->comp;

    tw_free(it, it->alloc_len);
    if (comp != NULL) {
        comp->cb(comp, st);
    }
}

/* Take the head of @p h's queue off (the drainer). */
static void tw_route_q_pop(tw_route_q_t *q)
{
    tw_mutex_lock(&q->lock);
    q->head = q->head->next;
    if (q->head == NULL) {
        q->tail = NULL;
    }
    tw_mutex_unlock(&q->lock);
}

void tw_route_q_flush(tw_route_t *rt, int h, tw_status_t status)
{
    tw_route_q_t *q = &rt->q[h];
    tw_route_item_t *it;

    tw_mutex_lock(&q->lock);
    it = q->head;
    q->head = q->tail = NULL;
    tw_mutex_unlock(&q->lock);
    while (it != NULL) {
        tw_route_item_t *next = it->next;
        atomic_fetch_sub_explicit(&q->n, 1, memory_order_acq_rel);
        atomic_fetch_sub_explicit(&rt->queued, 1, memory_order_acq_rel);
        tw_route_item_done(it, status);
        it = next;
    }
}

/* Come back in TW_ROUTE_RETRY_NS (a next hop was full). */
static void tw_route_retry_later(tw_route_t *rt)
{
    struct itimerspec its = {.it_value = {.tv_nsec = TW_ROUTE_RETRY_NS}};

    if (!rt->timer_armed && timerfd_settime(rt->timer_fd, 0, &its, NULL) == 0) {
        rt->timer_armed = true;
    }
}

int tw_route_progress(tw_tl_iface_t *iface)
{
    tw_route_t *rt = (tw_route_t *)iface;
    bool blocked = false;
    int events = 0;

    if (rt->timer_armed) {
        uint64_t ticks;
        if (read(rt->timer_fd, &ticks, sizeof(ticks)) < 0) {
            if (errno == EAGAIN) {
                return 0; /* not yet: the engine may sleep meanwhile */
            }
        }
        rt->timer_armed = false;
    }
    if (atomic_load_explicit(&rt->queued, memory_order_acquire) == 0) {
        return 0;
    }
    for (int h = 0; h < rt->size; h++) {
        tw_route_q_t *q = &rt->q[h];
        if (atomic_load_explicit(&q->n, memory_order_acquire) == 0) {
            continue;
        }
        for (;;) {
            tw_route_item_t *it;
            tw_status_t st;
            tw_mutex_lock(&q->lock);
            it = q->head;
            tw_mutex_unlock(&q->lock);
            if (it == NULL) {
                break;
            }
            {
                /* A message to a rank gone meanwhile fails (its peer_down
                 * has run or is running), sent or not. */
                int dst = ((const tw_route_hdr_t *)(const void *)it->hdr)->dst;
                bool lost =
                    it->comp != NULL && atomic_load_explicit(&rt->down[dst], memory_order_acquire);
                st = lost ? TW_ERR_PEER_FAILED : tw_route_item_send(rt, h, it);
            }
            if (st == TW_ERR_AGAIN) {
                blocked = true;
                break;
            }
            tw_route_q_pop(q);
            if (st != TW_OK) {
                tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED);
                tw_debug("route", "queued %s to rank %d failed: %s",
                         it->comp != NULL ? "message" : "frame", h, tw_strerror(st));
            }
            atomic_fetch_sub_explicit(&q->n, 1, memory_order_acq_rel);
            atomic_fetch_sub_explicit(&rt->queued, 1, memory_order_acq_rel);
            tw_route_item_done(it, st == TW_OK ? TW_OK : TW_ERR_PEER_FAILED);
            events++;
        }
    }
    if (blocked) {
        tw_route_retry_later(rt);
    }
    return events;
}

bool tw_route_queues_empty(tw_route_t *rt)
{
    return atomic_load_explicit(&rt->queued, memory_order_acquire) == 0;
}
