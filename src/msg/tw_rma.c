/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided operations: creation, the origin's posting, the table of
 * operations waiting for a reply, and teardown. src/msg/README.md has
 * the overview; the regions are in tw_rma_mem.c, the emulation over
 * active messages in tw_rma_sw.c, completion and flush in tw_rma_flush.c.
 *
 * Direct or emulated, chosen per operation: direct when the route to the
 * peer has TW_TL_CAP_PUT / GET and the remote key has a section of that
 * transport (put_zcopy / get_zcopy: the transport's completion is the
 * operation's, as an RC write completes once the responder acknowledged
 * it); emulated otherwise, or when the transport declines this one.
 *
 * An emulated operation waits for its reply in a slot; requests and
 * replies carry its cookie, the slot's index and generation, so a stale,
 * duplicated or forged reply finds nothing and is dropped.
 *
 * A peer that goes down fails its waiting emulated operations
 * (TW_ERR_PEER_FAILED) from the sweep; direct ones and rendezvous pulls
 * are completed by their transport. Posting and the sweep race safely: a
 * post enters its slot, then looks at the down flag (the sweep sets the
 * flag, then looks at the slots); whoever takes the slot out owns the
 * completion.
 */
#include "msg/tw_rma.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma_int.h"
#include "progress/tw_cq.h"

static const tw_stat_desc_t tw_rma_stat_descs[TW_RMA_STAT_COUNT] = {
    [TW_RMA_STAT_PUTS] = {"puts", TW_STAT_COUNTER},
    [TW_RMA_STAT_PUT_BYTES] = {"put_bytes", TW_STAT_COUNTER},
    [TW_RMA_STAT_GETS] = {"gets", TW_STAT_COUNTER},
    [TW_RMA_STAT_GET_BYTES] = {"get_bytes", TW_STAT_COUNTER},
    [TW_RMA_STAT_FLUSHES] = {"flushes", TW_STAT_COUNTER},
    [TW_RMA_STAT_DIRECT] = {"direct", TW_STAT_COUNTER},
    [TW_RMA_STAT_SERVED] = {"served", TW_STAT_COUNTER},
    [TW_RMA_STAT_REFUSED] = {"refused", TW_STAT_COUNTER},
    [TW_RMA_STAT_DEFERRED] = {"deferred", TW_STAT_COUNTER},
    [TW_RMA_STAT_DROPPED] = {"dropped", TW_STAT_COUNTER},
};

tw_stats_t *tw_rma_stats(tw_rma_t *rma)
{
    return rma->stats;
}

/* The watchdog's view: the emulated operations waiting for a reply. */
static void tw_rma_stall_walk(void *arg, tw_stall_visit_t *v)
{
    tw_rma_t *rma = arg;

    tw_mutex_lock(&rma->slot_lock);
    for (uint32_t i = 0; i < rma->nslots; i++) {
        tw_rma_op_t *op = rma->slots[i];
        if (op != NULL) {
            tw_tl_iface_t *iface = rma->route[op->peer];
            tw_stall_desc_t d = {.op = op->op == TW_OP_GET ? "get" : "put",
                                 .peer = op->peer,
                                 .len = op->len,
                                 .tl = iface != NULL ? iface->name : NULL,
                                 .waits = "the target to serve it and reply"};
            tw_stall_check(v, &op->stall, &d);
        }
    }
    tw_mutex_unlock(&rma->slot_lock);
}

tw_status_t tw_rma_create(const tw_rma_params_t *params, tw_rma_t **rma_p)
{
    tw_rma_t *rma = tw_calloc(1, sizeof(*rma));

    if (rma == NULL) {
        return TW_ERR_NOMEM;
    }
    rma->rank = params->rank;
    rma->size = params->size;
    rma->route = params->route;
    rma->down = params->down;
    rma->eager_limit = params->eager_limit;
    rma->free_head = TW_RMA_NONE;
    atomic_init(&rma->next_id, 1);
    atomic_init(&rma->ndefer, 0);
    atomic_init(&rma->drop_logged, 0);
    atomic_init(&rma->refused_logged, 0);
    atomic_init(&rma->failed_logged, 0);
    rma->peers = tw_calloc((size_t)params->size, sizeof(*rma->peers));
    rma->stats = tw_stats_create("rma", tw_rma_stat_descs, TW_RMA_STAT_COUNT);
    if (rma->peers == NULL || rma->stats == NULL) {
        if (rma->stats != NULL) {
            tw_stats_destroy(rma->stats);
        }
        tw_free(rma->peers, (size_t)params->size * sizeof(*rma->peers));
        tw_free(rma, sizeof(*rma));
        return TW_ERR_NOMEM;
    }
    for (int i = 0; i < params->size; i++) {
        tw_mutex_init(&rma->peers[i].lock, TW_LOCK_RANK_RMA_PEER, "one-sided peer");
    }
    tw_rwlock_init(&rma->reg_lock, TW_LOCK_RANK_RMA_REG, "region registry");
    tw_mutex_init(&rma->slot_lock, TW_LOCK_RANK_RMA_SLOT, "one-sided slots");
    tw_mutex_init(&rma->defer_lock, TW_LOCK_RANK_RMA_DEFER, "deferred replies");
    rma->stall = params->stall;
    if (rma->stall != NULL && tw_stall_on(rma->stall)) {
        (void)tw_stall_add_walker(rma->stall, tw_rma_stall_walk, rma); /* room for it */
    }
    *rma_p = rma;
    return TW_OK;
}

/* ---- the table of operations waiting for a reply ----------------------- */

static tw_status_t tw_rma_slot_grow(tw_rma_t *rma)
{
    uint32_t n = rma->nslots == 0 ? 64 : rma->nslots * 2;
    tw_rma_op_t **slots;
    uint32_t *gen, *next;

    if (n > TW_RMA_SLOTS_MAX) {
        return TW_ERR_NOMEM;
    }
    slots = tw_calloc(n, sizeof(*slots));
    gen = tw_calloc(n, sizeof(*gen));
    next = tw_calloc(n, sizeof(*next));
    if (slots == NULL || gen == NULL || next == NULL) {
        tw_free(slots, n * sizeof(*slots));
        tw_free(gen, n * sizeof(*gen));
        tw_free(next, n * sizeof(*next));
        return TW_ERR_NOMEM;
    }
    if (rma->nslots > 0) {
        memcpy(slots, rma->slots, rma->nslots * sizeof(*slots));
        memcpy(gen, rma->slot_gen, rma->nslots * sizeof(*gen));
        memcpy(next, rma->slot_next, rma->nslots * sizeof(*next));
        tw_free(rma->slots, rma->nslots * sizeof(*slots));
        tw_free(rma->slot_gen, rma->nslots * sizeof(*gen));
        tw_free(rma->slot_next, rma->nslots * sizeof(*next));
    }
    /* The new half joins the free list (it was empty). */
    for (uint32_t i = rma->nslots; i < n; i++) {
        gen[i] = 1;
        next[i] = i + 1 < n ? i + 1 : TW_RMA_NONE;
    }
    rma->free_head = rma->nslots;
    rma->slots = slots;
    rma->slot_gen = gen;
    rma->slot_next = next;
    rma->nslots = n;
    return TW_OK;
}

/* Give @p op a slot and its cookie. */
static tw_status_t tw_rma_slot_add(tw_rma_t *rma, tw_rma_op_t *op)
{
    tw_status_t st = TW_OK;
    uint32_t i;

    tw_mutex_lock(&rma->slot_lock);
    if (rma->free_head == TW_RMA_NONE) {
        st = tw_rma_slot_grow(rma);
    }
    if (st == TW_OK) {
        i = rma->free_head;
        rma->free_head = rma->slot_next[i];
        rma->slots[i] = op;
        op->cookie = (uint64_t)rma->slot_gen[i] << 32 | i;
        if (rma->stall != NULL) {
            op->stall = tw_stall_now(rma->stall);
        }
    }
    tw_mutex_unlock(&rma->slot_lock);
    return st;
}

/* Slot lock held. */
static void tw_rma_slot_free(tw_rma_t *rma, uint32_t i)
{
    rma->slots[i] = NULL;
    rma->slot_gen[i] = rma->slot_gen[i] == UINT32_MAX ? 1 : rma->slot_gen[i] + 1;
    rma->slot_next[i] = rma->free_head;
    rma->free_head = i;
}

/* Take out the operation @p cookie names if it waits for @p peer's reply
 * of kind @p op; NULL if there is none (stale, duplicated or forged). */
tw_rma_op_t *tw_rma_slot_take(tw_rma_t *rma, uint64_t cookie, int peer, tw_op_t op)
{
    uint32_t i = (uint32_t)cookie;
    tw_rma_op_t *o = NULL;

    tw_mutex_lock(&rma->slot_lock);
    if (i < rma->nslots && rma->slots[i] != NULL && rma->slots[i]->cookie == cookie &&
        rma->slots[i]->peer == peer && rma->slots[i]->op == op) {
        o = rma->slots[i];
        tw_rma_slot_free(rma, i);
    }
    tw_mutex_unlock(&rma->slot_lock);
    return o;
}

/* Take @p op out of its slot if it is still there (nobody answered or
 * swept it). */
static bool tw_rma_slot_drop(tw_rma_t *rma, tw_rma_op_t *op)
{
    return tw_rma_slot_take(rma, op->cookie, op->peer, op->op) == op;
}

/* Fail every operation waiting for a reply of @p peer (-1: of anyone)
 * with @p why: whoever takes an operation out of its slot completes it. */
static void tw_rma_sweep(tw_rma_t *rma, int peer, tw_status_t why)
{
    tw_rma_op_t *swept = NULL;

    tw_mutex_lock(&rma->slot_lock);
    for (uint32_t i = 0; i < rma->nslots; i++) {
        tw_rma_op_t *op = rma->slots[i];
        if (op != NULL && (peer < 0 || op->peer == peer)) {
            tw_rma_slot_free(rma, i);
            op->swept = swept;
            swept = op;
        }
    }
    tw_mutex_unlock(&rma->slot_lock);
    while (swept != NULL) {
        tw_rma_op_t *next = swept->swept;
        tw_rma_event(swept, why);
        swept = next;
    }
}

#if TW_TSAN
void tw_rma_tsan_posting(tw_rma_t *rma)
{
    TW_TSAN_RELEASE(&rma->tsan_causal);
}
#endif

void tw_rma_peer_down(tw_rma_t *rma, int peer)
{
    tw_rma_sweep(rma, peer, TW_ERR_PEER_FAILED);
}

/* ---- the origin: posting ------------------------------------------------ */

static tw_rma_op_t *tw_rma_op_new(tw_rma_t *rma, int peer, tw_op_t kind, void *dst, size_t len,
                                  tw_cq_t *cq, void *user)
{
    tw_rma_op_t *op = tw_malloc(sizeof(*op));

    if (op != NULL) {
        *op = (tw_rma_op_t){.comp = {.cb = tw_rma_comp_cb},
                            .rma = rma,
                            .cq = cq,
                            .user = user,
                            .dst = dst,
                            .len = len,
                            .peer = peer,
                            .op = kind};
        atomic_init(&op->refs, 0);
        atomic_init(&op->status, TW_OK);
    }
    return op;
}

/* Common start of a post: route, peer state, CQ room. */
tw_status_t tw_rma_post_begin(tw_rma_t *rma, int peer, tw_cq_t *cq)
{
    if (rma->route[peer] == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (tw_rma_is_down(rma, peer)) {
        return TW_ERR_PEER_FAILED;
    }
    return tw_cq_reserve(cq);
}

/* A zero-length operation: nothing to move, complete it now. */
static tw_status_t tw_rma_post_empty(tw_cq_t *cq, tw_op_t kind, int peer, void *user)
{
    tw_completion_t c = {.user = user, .status = TW_OK, .op = kind, .peer = peer};

    tw_cq_push(cq, &c);
    return TW_OK;
}

/* Emulate @p op (its request header @p h) over active messages. The
 * operation has refs = 1 (the poster) on entry. */
static tw_status_t tw_rma_emulate(tw_rma_t *rma, tw_rma_op_t *op, tw_rma_hdr_t *h, const void *data)
{
    tw_tl_iface_t *iface = rma->route[op->peer];
    size_t len = op->op == TW_OP_PUT ? op->len : 0;
    bool zcopy = false;
    tw_status_t st;

    if (len > iface->attr.max_zcopy) {
        return TW_ERR_INVALID;
    }
    if (len > rma->eager_limit || sizeof(*h) + len > iface->attr.max_short) {
        zcopy = true;
    }
    /* The reply, and the transport's completion of a zero-copy send. */
    atomic_fetch_add_explicit(&op->refs, zcopy ? 2 : 1, memory_order_relaxed);
    st = tw_rma_slot_add(rma, op);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&op->refs, zcopy ? 2 : 1, memory_order_relaxed);
        return st;
    }
    h->cookie = op->cookie;
    if (tw_rma_is_down(rma, op->peer)) {
        st = TW_ERR_PEER_FAILED; /* the sweep may have run before the slot existed */
    } else if (zcopy) {
        st = tw_tl_am_zcopy(iface, op->peer, TW_MSG_AM_RMA, h, sizeof(*h), data, len, &op->comp);
    } else {
        st = tw_tl_am_short(iface, op->peer, TW_MSG_AM_RMA, h, sizeof(*h), data, len);
    }
    if (st == TW_OK) {
        return TW_OK;
    }
    if (tw_rma_slot_drop(rma, op)) {
        /* Nothing else holds it: the post fails. */
        atomic_fetch_sub_explicit(&op->refs, zcopy ? 2 : 1, memory_order_relaxed);
        return st;
    }
    /* The peer-down sweep took the reply's share and reports it; the send
     * never took the transport's. The post stands, failed. */
    if (zcopy) {
        tw_rma_event(op, st);
    }
    return TW_OK;
}

/* Post @p op, direct if the route can and the key allows, else emulated.
 * On failure the caller undoes the post. */
static tw_status_t tw_rma_post(tw_rma_t *rma, tw_rma_op_t *op, const tw_rma_rkey_t *k,
                               uint64_t raddr, const void *src)
{
    tw_tl_iface_t *iface = rma->route[op->peer];
    uint32_t cap = op->op == TW_OP_PUT ? TW_TL_CAP_PUT : TW_TL_CAP_GET;
    const uint8_t *tlkey = (iface->caps & cap) != 0 ? tw_rma_rkey_find(k, iface->name) : NULL;
    tw_rma_hdr_t h = {.version = TW_RMA_HDR_VERSION,
                      .type = op->op == TW_OP_PUT ? TW_RMA_PUT_REQ : TW_RMA_GET_REQ,
                      .region = k->h.id,
                      .key = k->h.key,
                      .addr = raddr,
                      .len = op->len};
    tw_status_t st = TW_ERR_INVALID;

    atomic_store_explicit(&op->refs, 1, memory_order_relaxed); /* the poster */
    if (tlkey != NULL) {
        atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
        if (op->op == TW_OP_PUT) {
            st = tw_tl_put_zcopy(iface, op->peer, src, op->len, raddr, tlkey, &op->comp);
        } else {
            st = tw_tl_get_zcopy(iface, op->peer, op->dst, op->len, raddr, tlkey, &op->comp);
        }
        if (st == TW_OK) {
            tw_stats_inc(rma->stats, TW_RMA_STAT_DIRECT);
            return TW_OK;
        }
        atomic_fetch_sub_explicit(&op->refs, 1, memory_order_relaxed);
        if (st != TW_ERR_INVALID) {
            return st;
        }
        /* Not one the transport can do (too long, no key for the device
         * it would use): emulate it. */
    }
    return tw_rma_emulate(rma, op, &h, src);
}

static tw_status_t tw_rma_start(tw_rma_t *rma, int peer, tw_op_t kind, const void *src, void *dst,
                                size_t len, uint64_t raddr, const void *rkey, tw_cq_t *cq,
                                void *user)
{
    const char *fn = kind == TW_OP_PUT ? "tw_put" : "tw_get";
    tw_rma_rkey_t k;
    tw_rma_op_t *op;
    tw_status_t st;

    st = tw_rma_rkey_check(fn, rkey, peer, raddr, len, &k);
    if (st != TW_OK) {
        return st;
    }
    st = tw_rma_post_begin(rma, peer, cq);
    if (st != TW_OK) {
        return st;
    }
    if (len == 0) {
        tw_stats_inc(rma->stats, kind == TW_OP_PUT ? TW_RMA_STAT_PUTS : TW_RMA_STAT_GETS);
        return tw_rma_post_empty(cq, kind, peer, user);
    }
    op = tw_rma_op_new(rma, peer, kind, dst, len, cq, user);
    if (op == NULL) {
        tw_cq_unreserve(cq);
        return TW_ERR_NOMEM;
    }
    if (kind == TW_OP_PUT) {
        tw_rma_list(rma, op);
    }
    st = tw_rma_post(rma, op, &k, raddr, src);
    if (st != TW_OK) {
        tw_rma_unpost(op);
        return st;
    }
    tw_stats_inc(rma->stats, kind == TW_OP_PUT ? TW_RMA_STAT_PUTS : TW_RMA_STAT_GETS);
    tw_stats_add(rma->stats, kind == TW_OP_PUT ? TW_RMA_STAT_PUT_BYTES : TW_RMA_STAT_GET_BYTES,
                 len);
    tw_rma_event(op, TW_OK); /* the poster's share: it may complete now */
    return TW_OK;
}

tw_status_t tw_rma_put(tw_rma_t *rma, int dst, const void *src, size_t len, uint64_t raddr,
                       const void *rkey, tw_cq_t *cq, void *user)
{
    return tw_rma_start(rma, dst, TW_OP_PUT, src, NULL, len, raddr, rkey, cq, user);
}

tw_status_t tw_rma_get(tw_rma_t *rma, int src, void *dst, size_t len, uint64_t raddr,
                       const void *rkey, tw_cq_t *cq, void *user)
{
    return tw_rma_start(rma, src, TW_OP_GET, NULL, dst, len, raddr, rkey, cq, user);
}

/* ---- teardown ----------------------------------------------------------- */

void tw_rma_destroy(tw_rma_t *rma)
{
    tw_rma_defer_t *d;

    /* The transports are closed: no reply comes any more. */
    tw_rma_sweep(rma, -1, TW_ERR_CANCELED);
    for (int i = 0; i < rma->size; i++) {
        tw_rma_peer_t *p = &rma->peers[i];
        if (p->head != NULL) {
            /* A transport closed without completing an operation. */
            tw_error("rma", "puts to rank %d still posted at finalize", i);
        }
        tw_rma_flushes_complete(rma, i, p->fhead, TW_ERR_CANCELED);
        tw_mutex_destroy(&p->lock);
    }
    d = rma->dhead;
    while (d != NULL) {
        tw_rma_defer_t *next = d->next;
        tw_free(d, sizeof(*d));
        d = next;
    }
    tw_free(rma->slots, rma->nslots * sizeof(*rma->slots));
    tw_free(rma->slot_gen, rma->nslots * sizeof(*rma->slot_gen));
    tw_free(rma->slot_next, rma->nslots * sizeof(*rma->slot_next));
    tw_rwlock_destroy(&rma->reg_lock);
    tw_mutex_destroy(&rma->slot_lock);
    tw_mutex_destroy(&rma->defer_lock);
    tw_stats_destroy(rma->stats);
    tw_free(rma->peers, (size_t)rma->size * sizeof(*rma->peers));
    tw_free(rma, sizeof(*rma));
}
