/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Completion of one-sided operations, the puts each peer has in flight,
 * and tw_flush.
 *
 * Direct or emulated, a put completes when its bytes are visible at the
 * target, so a flush waits for the puts to its peer posted before it:
 * every put takes a sequence number from its peer and joins the peer's
 * list in that order; a flush records the next number and completes once
 * no put below it is left (at once when the list is empty). Completions
 * are pushed after the peer's lock is dropped.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "core/tw_mem.h"
#include "msg/tw_rma_int.h"
#include "progress/tw_cq.h"

/* Flushes of @p p that no earlier put holds back. Peer lock held. */
static tw_rma_flush_req_t *tw_rma_flushes_ready(tw_rma_peer_t *p)
{
    tw_rma_flush_req_t *ready = NULL, **tail = &ready;

    while (p->fhead != NULL && (p->head == NULL || p->head->seq >= p->fhead->upto)) {
        tw_rma_flush_req_t *f = p->fhead;
        p->fhead = f->next;
        f->next = NULL;
        *tail = f;
        tail = &f->next;
    }
    if (p->fhead == NULL) {
        p->ftail = NULL;
    }
    return ready;
}

void tw_rma_flushes_complete(tw_rma_t *rma, int peer, tw_rma_flush_req_t *f, tw_status_t why)
{
    while (f != NULL) {
        tw_rma_flush_req_t *next = f->next;
        tw_status_t st = why;
        if (st == TW_OK && tw_rma_is_down(rma, peer)) {
            st = TW_ERR_PEER_FAILED;
        }
        tw_completion_t c = {.user = f->user, .status = st, .op = TW_OP_FLUSH, .peer = peer};
        tw_cq_push(f->cq, &c);
        tw_free(f, sizeof(*f));
        f = next;
    }
}

/* Take a put out of its peer's list; returns the flushes it released. */
static tw_rma_flush_req_t *tw_rma_unlist(tw_rma_t *rma, tw_rma_op_t *op)
{
    tw_rma_peer_t *p = &rma->peers[op->peer];
    tw_rma_flush_req_t *ready;

    tw_mutex_lock(&p->lock);
    if (op->prev != NULL) {
        op->prev->next = op->next;
    } else {
        p->head = op->next;
    }
    if (op->next != NULL) {
        op->next->prev = op->prev;
    } else {
        p->tail = op->prev;
    }
    op->listed = false;
    ready = tw_rma_flushes_ready(p);
    tw_mutex_unlock(&p->lock);
    return ready;
}

void tw_rma_list(tw_rma_t *rma, tw_rma_op_t *op)
{
    tw_rma_peer_t *p = &rma->peers[op->peer];

    tw_mutex_lock(&p->lock);
    op->seq = p->next_seq++;
    op->prev = p->tail;
    op->next = NULL;
    if (p->tail != NULL) {
        p->tail->next = op;
    } else {
        p->head = op;
    }
    p->tail = op;
    op->listed = true;
    tw_mutex_unlock(&p->lock);
}

static void tw_rma_complete(tw_rma_op_t *op)
{
    tw_rma_t *rma = op->rma;
    tw_status_t st = (tw_status_t)atomic_load_explicit(&op->status, memory_order_acquire);
    tw_completion_t c = {.user = op->user,
                         .status = st,
                         .op = op->op,
                         .peer = op->peer,
                         .length = st == TW_OK ? op->len : 0};
    tw_rma_flush_req_t *ready = op->listed ? tw_rma_unlist(rma, op) : NULL;
    int peer = op->peer;

    tw_cq_push(op->cq, &c);
    tw_free(op, sizeof(*op));
    tw_rma_flushes_complete(rma, peer, ready, TW_OK);
}

void tw_rma_event(tw_rma_op_t *op, tw_status_t st)
{
    if (st != TW_OK) {
        int ok = TW_OK;
        atomic_compare_exchange_strong_explicit(&op->status, &ok, (int)st, memory_order_acq_rel,
                                                memory_order_relaxed);
    }
    if (atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) == 1) {
        tw_rma_complete(op);
    }
}

void tw_rma_comp_cb(tw_tl_comp_t *comp, tw_status_t st)
{
    tw_rma_event((tw_rma_op_t *)comp, st);
}

void tw_rma_unpost(tw_rma_op_t *op)
{
    tw_rma_t *rma = op->rma;
    tw_rma_flush_req_t *ready = op->listed ? tw_rma_unlist(rma, op) : NULL;
    int peer = op->peer;

    tw_cq_unreserve(op->cq);
    tw_free(op, sizeof(*op));
    tw_rma_flushes_complete(rma, peer, ready, TW_OK);
}

tw_status_t tw_rma_flush(tw_rma_t *rma, int peer, tw_cq_t *cq, void *user)
{
    tw_rma_peer_t *p = &rma->peers[peer];
    tw_rma_flush_req_t *f;
    tw_status_t st = tw_rma_post_begin(rma, peer, cq);

    if (st != TW_OK) {
        return st;
    }
    tw_stats_inc(rma->stats, TW_RMA_STAT_FLUSHES);
    f = tw_malloc(sizeof(*f));
    if (f == NULL) {
        tw_cq_unreserve(cq);
        return TW_ERR_NOMEM;
    }
    *f = (tw_rma_flush_req_t){.cq = cq, .user = user};
    tw_mutex_lock(&p->lock);
    if (p->head == NULL) {
        tw_mutex_unlock(&p->lock);
        tw_rma_flushes_complete(rma, peer, f, TW_OK);
        return TW_OK;
    }
    f->upto = p->next_seq;
    if (p->ftail != NULL) {
        p->ftail->next = f;
    } else {
        p->fhead = f;
    }
    p->ftail = f;
    tw_mutex_unlock(&p->lock);
    return TW_OK;
}
