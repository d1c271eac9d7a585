/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Running a schedule. tw_coll_exec takes the actions in order: a send
 * goes out -- copied when large, so the operation need not wait for it,
 * unless the schedule waits for it and the transport completes it without
 * the receiver (an exchange over tcp: tw_exec_send) -- a receive is
 * posted with the action as its user pointer, a wait stops the run until
 * that receive (or send) completed, reductions and copies run in place. Whoever
 * drives the operation calls it again when something happened: the
 * calling thread of a blocking collective, sleeping in its group's CQ in
 * between; engine 0 for a nonblocking one, on every pass.
 *
 * Failure. A receive that fails (its source died), a failure of the group
 * (a member down, a member's revocation: tw_group_fail) or a local error
 * stops the run. Then every receive still posted is taken back -- one
 * that matched already is waited for, its data is on the way, as is a
 * send still going from a buffer -- so nothing touches the caller's
 * buffers after the operation ended;
 * every other member is told (a revocation, once per group), so nobody
 * waits for a member that stopped; and the group stays failed.
 */
#include <sched.h>
#include <string.h>

#include "coll/tw_coll_int.h"
#include "coll/tw_coll_op.h"
#include "core/tw_log.h"
#include "core/tw_time.h"

static const char *const tw_coll_names[] = {[TW_COLL_BARRIER] = "barrier",
                                            [TW_COLL_BCAST] = "bcast",
                                            [TW_COLL_REDUCE] = "reduce",
                                            [TW_COLL_ALLREDUCE] = "allreduce"};

static void tw_exec_fail(tw_coll_op_t *op, tw_status_t st)
{
    if (op->status == TW_OK) {
        op->status = st;
    }
}

static void tw_exec_complete(tw_coll_op_t *op, const tw_completion_t *c)
{
    tw_coll_act_t *a = c->user;

    if (a == NULL) { /* tw_group_fail's wake-up: the group's status says why */
        int failed = atomic_load_explicit(&op->g->failed, memory_order_acquire);
        tw_exec_fail(op, failed != 0 ? (tw_status_t)failed : TW_ERR_PEER_FAILED);
        return;
    }
    a->done = true;
    op->outstanding--;
    if (a->kind == TW_ACT_SEND) {
        if (c->status != TW_OK) {
            tw_exec_fail(op, c->status);
        }
        return;
    }
    if (c->status == TW_OK && c->length == a->len) {
        return;
    }
    if (c->status == TW_OK || c->status == TW_ERR_TRUNCATED) {
        tw_error("coll",
                 "%s on a group of %d: rank %d sent %zu bytes where %zu were due "
                 "(members called it with different sizes)",
                 tw_coll_names[op->kind], op->g->n, c->peer, c->length, a->len);
        tw_exec_fail(op, TW_ERR_INVALID);
        return;
    }
    tw_exec_fail(op, c->status);
}

/* Tell every other member, once per group, that it failed here. */
static tw_status_t tw_exec_revoke(tw_coll_op_t *op)
{
    tw_group_t *g = op->g;
    uint8_t kind = TW_COLL_CTL_REVOKE;

    for (; !g->revoked && g->revoke_next < g->n; g->revoke_next++) {
        int m = g->revoke_next;
        if (m == g->me || tw_coll_is_down(g->coll, g->ranks[m])) {
            continue;
        }
        tw_status_t st = tw_msg_coll_ctl(g->coll->p.msg, g->ranks[m],
                                         TW_COLL_TAG(g->rids[m], op->seq, 0), &kind, 1);
        if (st == TW_ERR_AGAIN) {
            op->send_blocked = true;
            return TW_ERR_AGAIN;
        }
    }
    g->revoked = true;
    return TW_OK;
}

/* A send goes from the buffer when the schedule waits for it (zc) and
 * the transport completes it without the receiver (tw_msg_coll_detached:
 * tcp), which saves the copy of a large one; the wait then holds the
 * buffer, and a failure, until it is out. Else it is copied if large
 * (tw_coll_send) and done at once. */
static tw_status_t tw_exec_send(tw_coll_op_t *op, tw_coll_act_t *a)
{
    tw_group_t *g = op->g;
    tw_coll_t *coll = g->coll;
    int dst = g->ranks[a->peer];
    uint64_t tag = TW_COLL_TAG(g->rids[a->peer], op->seq, a->step);
    tw_status_t st;

    a->done = true;
    if (a->zc == TW_ZC_NEVER || (a->zc == TW_ZC_SMALL && a->len > TW_COLL_DIRECT_MAX) ||
        (a->zc == TW_ZC_BCAST && a->len > TW_COLL_DIRECT_BCAST_MAX) ||
        a->len <= tw_msg_eager_max(coll->p.msg, dst) || !tw_msg_coll_detached(coll->p.msg, dst)) {
        return tw_coll_send(coll, dst, tag, a->a, a->len);
    }
    st = tw_msg_coll_send(coll->p.msg, dst, tag, a->a, a->len, g->cq, a);
    if (st == TW_OK) {
        a->done = false;
        a->posted = true;
        op->outstanding++;
        tw_stats_inc(coll->stats, TW_COLL_STAT_SENT);
        tw_stats_inc(coll->stats, TW_COLL_STAT_DIRECT);
    }
    return st;
}

static tw_status_t tw_exec_abort(tw_coll_op_t *op)
{
    tw_group_t *g = op->g;

    for (unsigned i = 0; i < op->nacts && op->outstanding > 0; i++) {
        tw_coll_act_t *a = &op->acts[i];
        if (a->kind == TW_ACT_RECV && a->posted && !a->done &&
            tw_msg_coll_cancel(g->coll->p.msg, g->ranks[a->peer],
                               TW_COLL_TAG(g->rids[g->me], op->seq, a->step))) {
            a->done = true;
            op->outstanding--;
        }
    }
    if (op->outstanding > 0) {
        return TW_ERR_AGAIN; /* matched already: the data is on its way */
    }
    if (tw_exec_revoke(op) != TW_OK) {
        return TW_ERR_AGAIN;
    }
    tw_group_fail(g, op->status);
    return op->status;
}

tw_status_t tw_coll_exec(tw_coll_op_t *op, const tw_completion_t *c, int n)
{
    tw_group_t *g = op->g;
    tw_coll_t *coll = g->coll;
    tw_completion_t more[16];
    tw_status_t st;

    for (int i = 0; i < n; i++) {
        tw_exec_complete(op, &c[i]);
    }
    while ((n = tw_cq_take(g->cq, more, (int)TW_ARRAY_SIZE(more))) > 0) {
        for (int i = 0; i < n; i++) {
            tw_exec_complete(op, &more[i]);
        }
    }
    op->send_blocked = false;
    while (op->status == TW_OK) {
        int failed = atomic_load_explicit(&g->failed, memory_order_acquire);
        if (TW_UNLIKELY(failed != 0)) {
            tw_exec_fail(op, (tw_status_t)failed);
            break;
        }
        if (op->cursor == op->nacts) {
            return TW_OK; /* every receive had its wait */
        }
        tw_coll_act_t *a = &op->acts[op->cursor];
        switch ((tw_coll_act_kind_t)a->kind) {
        case TW_ACT_SEND:
            st = tw_exec_send(op, a);
            if (st == TW_ERR_AGAIN) {
                op->send_blocked = true;
                return TW_ERR_AGAIN;
            }
            if (st != TW_OK) {
                tw_exec_fail(op, st);
                continue;
            }
            break;
        case TW_ACT_RECV:
            a->done = false;
            st = tw_msg_coll_recv(coll->p.msg, g->ranks[a->peer],
                                  TW_COLL_TAG(g->rids[g->me], op->seq, a->step), a->dst, a->len,
                                  g->cq, a);
            if (st == TW_ERR_AGAIN) {
                op->send_blocked = true; /* the group's CQ: cannot stay full */
                return TW_ERR_AGAIN;
            }
            if (st != TW_OK) {
                tw_exec_fail(op, st);
                continue;
            }
            a->posted = true;
            op->outstanding++;
            break;
        case TW_ACT_WAIT:
            if (!op->acts[a->wait].done) {
                n = tw_cq_take(g->cq, more, (int)TW_ARRAY_SIZE(more));
                for (int i = 0; i < n; i++) {
                    tw_exec_complete(op, &more[i]);
                }
                if (!op->acts[a->wait].done) {
                    return op->status == TW_OK ? TW_ERR_AGAIN : tw_exec_abort(op);
                }
                continue; /* look at the status first */
            }
            break;
        case TW_ACT_REDUCE:
            tw_coll_reduce(a->dst, a->a, a->b, a->len, op->dt, op->rop);
            break;
        case TW_ACT_COPY:
            if (a->dst != a->a && a->len > 0) {
                memcpy(a->dst, a->a, a->len);
            }
            break;
        case TW_ACT_SHM:
            st = tw_cshm_step(op, a);
            if (st == TW_ERR_AGAIN) {
                return TW_ERR_AGAIN;
            }
            if (st != TW_OK) {
                tw_exec_fail(op, st);
                continue;
            }
            break;
        }
        op->cursor++;
    }
    return tw_exec_abort(op);
}

tw_status_t tw_coll_run(tw_coll_op_t *op)
{
    tw_group_t *g = op->g;
    tw_coll_t *coll = g->coll;
    tw_completion_t c[16];
    int n = 0;

    for (;;) {
        tw_status_t st = tw_coll_exec(op, c, n);
        if (st != TW_ERR_AGAIN) {
            return st;
        }
        if (op->send_blocked) {
            /* A full ring or CQ: the engine drains it. */
            n = 0;
            if (coll->p.manual) {
                (void)coll->p.progress_fn(coll->p.progress_arg);
            } else {
                tw_coll_reap_sends(coll);
                sched_yield();
            }
            continue;
        }
        n = tw_cq_wait(g->cq, c, (int)TW_ARRAY_SIZE(c), 100);
    }
}

/* A blocking operation ended with @p st: the group is free again. */
static tw_status_t tw_coll_done_blocking(tw_coll_op_t *op, tw_status_t st)
{
    tw_coll_t *coll = op->g->coll;

    tw_coll_op_release(op);
    tw_stats_inc(coll->stats, TW_COLL_STAT_OPS);
    if (st != TW_OK) {
        tw_stats_inc(coll->stats, TW_COLL_STAT_FAILED);
    }
    atomic_store_explicit(&op->g->busy, false, memory_order_release);
    return st;
}

tw_status_t tw_coll_post(tw_group_t *g, tw_coll_kind_t kind, const void *sendbuf, void *recvbuf,
                         size_t count, tw_dtype_t dt, tw_redop_t rop, int root, tw_cq_t *cq,
                         void *user, bool nb)
{
    tw_coll_t *coll = g->coll;
    tw_coll_op_t *op = &g->op;
    tw_coll_act_t one;
    bool idle = false;
    tw_status_t st;
    int failed;

    if (!atomic_compare_exchange_strong_explicit(&g->busy, &idle, true, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        tw_stats_inc(coll->stats, TW_COLL_STAT_BUSY);
        tw_error("coll",
                 "%s%s: another collective is outstanding on this group (one at a time "
                 "per group)",
                 nb ? "i" : "", tw_coll_names[kind]);
        return TW_ERR_INVALID;
    }
    failed = atomic_load_explicit(&g->failed, memory_order_acquire);
    if (failed != 0) {
        atomic_store_explicit(&g->busy, false, memory_order_release);
        return (tw_status_t)failed;
    }
    if (nb) {
        st = tw_cq_reserve(cq);
        if (st != TW_OK) {
            atomic_store_explicit(&g->busy, false, memory_order_release);
            return st;
        }
    }
    op->kind = kind;
    op->g = g;
    op->seq = g->seq++;
    op->sendbuf = sendbuf;
    op->recvbuf = recvbuf;
    op->count = count;
    op->dt = dt;
    op->rop = rop;
    op->root = root;
    op->nb = nb;
    op->posted_ns = nb ? tw_time_ns() : 0;
    op->cq = cq;
    op->user = user;
    if (!nb && tw_coll_schedule_step(op, &one)) {
        /* One step in the node's slot set, run here (blocking: it waits
         * inside, never TW_ERR_AGAIN): no list, no dispatch. 2 pinned
         * processes, medians of 5: barrier 0.139 -> 0.113 us. */
        st = tw_cshm_step(op, &one);
        if (st != TW_OK) {
            op->status = st; /* tell the others, fail the group */
            st = tw_coll_run(op);
        }
        return tw_coll_done_blocking(op, st);
    }
    st = tw_coll_schedule(op);
    if (st != TW_OK) {
        /* The others run it: they must hear that this member cannot. */
        op->nacts = 0;
        op->status = st;
    }
    if (!nb) {
        return tw_coll_done_blocking(op, tw_coll_run(op));
    }
    /* The caller starts it (the first sends go now), the engine ends it. */
    st = tw_coll_exec(op, NULL, 0);
    if (st == TW_ERR_AGAIN) {
        tw_coll_submit(coll, op);
    } else {
        tw_coll_nb_finish(coll, op, st);
    }
    return TW_OK;
}
