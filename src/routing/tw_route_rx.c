/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Arrivals through the taps: frames for this rank (handed up, rebuilt
 * first when in fragments), frames for others (a leader passes them on),
 * DOWNs, and the loss of a neighbour.
 *
 * Who learns what when a rank goes:
 *  - its leader (shm tells it) sends a DOWN to every other leader, and
 *    each leader to the ranks of its node: every rank of every other
 *    node reports it up;
 *  - when a leader goes, the ranks of its node lose every other node
 *    (their route has no first hop), and the other leaders lose its node
 *    (they tell their ranks).
 * TW_ERR_TRANSPORT (a path down for now) changes nothing here: sends
 * through it fail with it until it is back, and the layer above (rel)
 * probes.
 */
#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "routing/tw_route_int.h"

static tw_route_t *tw_route_of_tap(tw_tl_tap_t *tap)
{
    return ((tw_route_tap_t *)(void *)tap)->rt;
}

/* @p gone (a rank of another node) is unreachable: sends to it fail from
 * now on. Failed: reported up once, and what still comes from it is
 * dropped. Left cleanly, with no rel above: not reported up, and what
 * still comes from it is taken -- the news may overtake its last frames
 * (they cross other threads), and msg would fail the receives they
 * match. With rel above (which orders), a departure is reported. */
static void tw_route_mark_down(tw_route_t *rt, int gone, tw_status_t why)
{
    uint8_t want = why == TW_OK && rt->ordered ? TW_ROUTE_LEFT : TW_ROUTE_DOWN;
    uint8_t was;

    if (rt->node_of[gone] == rt->node) {
        return;
    }
    was = atomic_load_explicit(&rt->down[gone], memory_order_acquire);
    do {
        if (was == TW_ROUTE_DOWN || was == want) {
            return;
        }
    } while (!atomic_compare_exchange_weak_explicit(&rt->down[gone], &was, want,
                                                    memory_order_acq_rel, memory_order_acquire));
    if (want == TW_ROUTE_LEFT) {
        tw_debug("route", "rank %d left", gone);
        return;
    }
    tw_stats_inc(rt->stats, TW_ROUTE_STAT_DOWNS);
    tw_debug("route", "rank %d unreachable through the leaders (%s)", gone,
             why == TW_OK ? "it left" : "it or its leader failed");
    if (rt->super.peer_down != NULL) {
        rt->super.peer_down(rt->super.peer_down_arg, gone, why);
    }
}

static tw_status_t tw_route_why(uint8_t how)
{
    return how == TW_ROUTE_DOWN_LEFT ? TW_OK : TW_ERR_PEER_FAILED;
}

/* Tell the other ranks of our node (we are its leader) that @p gone is. */
static void tw_route_tell_node(tw_route_t *rt, int gone, uint8_t how)
{
    for (int x = 0; x < rt->size; x++) {
        if (x != rt->rank && x != gone && rt->node_of[x] == rt->node &&
            !atomic_load_explicit(&rt->gone[x], memory_order_acquire)) {
            tw_route_send_down(rt, x, gone, how);
        }
    }
}

static void tw_route_down_in(tw_route_t *rt, int from, const tw_route_hdr_t *h)
{
    if (rt->is_leader && rt->node_of[from] != rt->node) {
        tw_route_tell_node(rt, h->dst, h->am_id);
    }
    tw_route_mark_down(rt, h->dst, tw_route_why(h->am_id));
}

void tw_route_tap_peer_down(tw_tl_tap_t *tap, int peer, tw_status_t why)
{
    tw_route_t *rt = tw_route_of_tap(tap);
    uint8_t how = why == TW_OK ? TW_ROUTE_DOWN_LEFT : TW_ROUTE_DOWN_FAILED;
    int node;

    if (atomic_load_explicit(&rt->closed, memory_order_acquire) || why == TW_ERR_TRANSPORT ||
        peer < 0 || peer >= rt->size || peer == rt->rank || tw_route_via(rt, peer) != tap->iface) {
        return; /* not a neighbour we reach through this iface */
    }
    node = rt->node_of[peer];
    if (node == rt->node) {
        if (!rt->is_leader && peer != rt->leader) {
            return;
        }
        if (atomic_exchange_explicit(&rt->gone[peer], 1, memory_order_acq_rel) != 0) {
            return;
        }
        if (rt->is_leader) {
            /* One of our node's ranks: every other leader hears of it. */
            for (int n = 0; n < rt->nnodes; n++) {
                if (n != rt->node) {
                    tw_route_send_down(rt, rt->leader_of[n], peer, how);
                }
            }
            return;
        }
        /* Our leader: every rank of another node is cut off from us. */
        if (why != TW_OK) {
            tw_warn("route",
                    "rank %d, this node's leader, failed: the ranks of other nodes are "
                    "unreachable through it",
                    peer);
        }
        for (int x = 0; x < rt->size; x++) {
            tw_route_mark_down(rt, x, TW_ERR_PEER_FAILED);
        }
        return;
    }
    if (!rt->is_leader || peer != rt->leader_of[node] ||
        atomic_exchange_explicit(&rt->gone[peer], 1, memory_order_acq_rel) != 0) {
        return; /* a direct path of rel's to a rank we do not route through */
    }
    /* Another node's leader: that node is cut off, for us and our node. */
    if (why != TW_OK) {
        tw_warn("route",
                "rank %d, the leader of node %d, failed: that node's ranks are "
                "unreachable through it",
                peer, node);
    }
    for (int x = 0; x < rt->size; x++) {
        if (rt->node_of[x] == node) {
            tw_route_tell_node(rt, x, how);
            tw_route_mark_down(rt, x, why == TW_OK ? TW_OK : TW_ERR_PEER_FAILED);
        }
    }
}

static void tw_route_bad(tw_route_t *rt, int from, const char *why)
{
    tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED);
    tw_warn("route", "malformed frame from rank %d (%s): dropped", from, why);
}

static void tw_route_up(tw_route_t *rt, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                        const void *data, size_t len)
{
    tw_stats_inc(rt->stats, TW_ROUTE_STAT_DELIVERED);
    rt->super.recv(rt->super.recv_arg, src, am_id, hdr, hdr_len, data, len);
}

void tw_route_reasm_clear(tw_route_reasm_t *r)
{
    if (r->buf != NULL) {
        tw_free(r->buf, r->msg_len);
        r->buf = NULL;
    }
    while (r->held != NULL) {
        tw_route_held_t *f = r->held;
        r->held = f->next;
        tw_free(f, f->alloc_len);
    }
}

/* A fragment of a message in several, from @p h->src. Thread: one at a
 * time per sender (the arrival's engine, or the holder of r->busy). */
static void tw_route_reasm(tw_route_t *rt, int from, const tw_route_hdr_t *h, const void *uhdr,
                           const void *data, size_t len)
{
    tw_route_reasm_t *r = &rt->reasm[h->src];
    unsigned char *done = NULL;
    uint64_t done_len = 0;
    uint16_t hdr_len = 0;
    uint8_t am_id = 0;
    unsigned char hdr[TW_TL_HDR_MAX];
    const char *bad = NULL;

    tw_mutex_lock(&r->lock);
    if (h->flags & TW_ROUTE_F_FIRST) {
        if (r->buf != NULL) {
            bad = "a message began before the last one ended";
            tw_free(r->buf, r->msg_len);
        }
        r->buf = h->hdr_len <= sizeof(r->hdr) ? tw_malloc(h->msg_len) : NULL;
        if (r->buf == NULL) {
            bad = h->hdr_len > sizeof(r->hdr) ? "upper header too long" : "out of memory";
        } else {
            r->msg_len = h->msg_len;
            r->got = 0;
            r->am_id = h->am_id;
            r->hdr_len = h->hdr_len;
            memcpy(r->hdr, uhdr, h->hdr_len);
        }
    } else if (r->buf == NULL || h->msg_len != r->msg_len || h->offset != r->got) {
        bad = "a fragment out of its message";
    }
    if (r->buf != NULL && (bad == NULL || (h->flags & TW_ROUTE_F_FIRST))) {
        memcpy(r->buf + r->got, data, len);
        r->got += len;
        if (h->flags & TW_ROUTE_F_LAST) {
            done = r->buf;
            done_len = r->msg_len;
            am_id = r->am_id;
            hdr_len = r->hdr_len;
            memcpy(hdr, r->hdr, hdr_len);
            r->buf = NULL;
        }
    }
    tw_mutex_unlock(&r->lock);
    if (bad != NULL) {
        tw_route_bad(rt, from, bad);
    }
    if (done != NULL) {
        tw_route_up(rt, h->src, am_id, hdr, hdr_len, done, done_len);
        tw_free(done, done_len);
    }
}

/* A frame for us, in its turn: handed up, or a step of its message. */
static void tw_route_take(tw_route_t *rt, int from, const tw_route_hdr_t *h, const void *uhdr,
                          const void *data, size_t len)
{
    if ((h->flags & (TW_ROUTE_F_FIRST | TW_ROUTE_F_LAST)) == (TW_ROUTE_F_FIRST | TW_ROUTE_F_LAST)) {
        tw_route_up(rt, h->src, h->am_id, uhdr, h->hdr_len, data, len);
    } else {
        tw_route_reasm(rt, from, h, uhdr, data, len);
    }
}

/* Hold a frame that came before its turn (a copy, by number). False: it
 * was held already (a duplicate: the caller drops it). Lock held. */
static bool tw_route_hold(tw_route_t *rt, tw_route_reasm_t *r, const tw_route_hdr_t *h,
                          const void *uhdr, const void *data, size_t len)
{
    size_t alloc_len = sizeof(tw_route_held_t) + h->hdr_len + len;
    tw_route_held_t *f, **at = &r->held;

    while (*at != NULL && (int32_t)((*at)->h.seq - h->seq) < 0) {
        at = &(*at)->next;
    }
    if (*at != NULL && (*at)->h.seq == h->seq) {
        return false;
    }
    f = tw_malloc(alloc_len);
    if (f == NULL) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED);
        tw_error("route", "out of memory holding a frame of rank %d: dropped", h->src);
        return true;
    }
    *f = (tw_route_held_t){.alloc_len = alloc_len, .h = *h, .len = len};
    memcpy(f->bytes, uhdr, h->hdr_len);
    if (len > 0) {
        memcpy(f->bytes + h->hdr_len, data, len);
    }
    f->next = *at;
    *at = f;
    tw_stats_inc(rt->stats, TW_ROUTE_STAT_HELD);
    return true;
}

/* A numbered frame for us: handed up in its turn. Whoever finds the
 * next frame takes it, then the held ones that follow, alone (r->busy). */
static void tw_route_in_order(tw_route_t *rt, int from, const tw_route_hdr_t *h, const void *uhdr,
                              const void *data, size_t len)
{
    tw_route_reasm_t *r = &rt->reasm[h->src];

    tw_mutex_lock(&r->lock);
    if ((int32_t)(h->seq - r->next) < 0) {
        tw_mutex_unlock(&r->lock);
        tw_route_bad(rt, from, "a frame numbered before ones handed up");
        return;
    }
    if (h->seq != r->next || r->busy) {
        bool held = tw_route_hold(rt, r, h, uhdr, data, len);
        tw_mutex_unlock(&r->lock);
        if (!held) {
            tw_route_bad(rt, from, "a frame numbered as one already held");
        }
        return;
    }
    r->busy = true;
    r->next++;
    tw_mutex_unlock(&r->lock);
    tw_route_take(rt, from, h, uhdr, data, len);
    for (;;) {
        tw_route_held_t *f;
        tw_mutex_lock(&r->lock);
        f = r->held;
        if (f == NULL || f->h.seq != r->next) {
            r->busy = false;
            tw_mutex_unlock(&r->lock);
            return;
        }
        r->held = f->next;
        r->next++;
        tw_mutex_unlock(&r->lock);
        tw_route_take(rt, from, &f->h, f->bytes, f->bytes + f->h.hdr_len, f->len);
        tw_free(f, f->alloc_len);
    }
}

void tw_route_tap_recv(tw_tl_tap_t *tap, int from, const void *hdr, size_t hdr_len,
                       const void *data, size_t len)
{
    tw_route_t *rt = tw_route_of_tap(tap);
    const unsigned char *uhdr = (const unsigned char *)hdr + sizeof(tw_route_hdr_t);
    const char *why = NULL;
    tw_route_hdr_t h;

    if (atomic_load_explicit(&rt->closed, memory_order_acquire)) {
        return;
    }
    switch (tw_route_parse(hdr, hdr_len, len, rt->size, TW_ROUTE_MAX_MSG, &h, &why)) {
    case TW_OK:
        break;
    case TW_ERR_AGAIN:
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_CRC_FAILURES);
        tw_debug("route", "a frame from rank %d failed its checksum: dropped", from);
        return;
    default:
        tw_route_bad(rt, from, why);
        return;
    }
    if (h.type == TW_ROUTE_T_DOWN) {
        tw_route_down_in(rt, from, &h);
        return;
    }
    if (h.dst != rt->rank) {
        unsigned char buf[sizeof(tw_route_hdr_t) + TW_TL_HDR_MAX];
        int next = tw_route_next(rt, h.dst);
        if (!rt->is_leader || h.hops >= TW_ROUTE_MAX_HOPS || next == from ||
            hdr_len > sizeof(buf)) {
            tw_route_bad(rt, from, "a frame for another rank that this one does not pass on");
            return;
        }
        memcpy(buf, hdr, hdr_len);
        ((tw_route_hdr_t *)(void *)buf)->hops = (uint8_t)(h.hops + 1);
        tw_route_seal(buf);
        tw_route_forward(rt, next, buf, hdr_len, data, len);
        return;
    }
    if (h.src == rt->rank ||
        atomic_load_explicit(&rt->down[h.src], memory_order_acquire) == TW_ROUTE_DOWN) {
        tw_stats_inc(rt->stats, TW_ROUTE_STAT_DROPPED); /* from a rank gone for us */
        return;
    }
    if (h.flags & TW_ROUTE_F_SEQ) {
        tw_route_in_order(rt, from, &h, uhdr, data, len);
    } else {
        tw_route_take(rt, from, &h, uhdr, data, len);
    }
}
