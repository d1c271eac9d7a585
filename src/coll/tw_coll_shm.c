/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Collectives within a node through shared memory (tw_coll_shm.h has the
 * layout and the rules). The algorithms, with s = the operation's number
 * on the group + 1 and n members on this node:
 *
 *   barrier     flat: every member stores arrive = 2s and waits for
 *               everyone's (one step, n - 1 reads: no release needed);
 *               gather (TW_COLL_BARRIER; over 2 members): the first
 *               member waits for everyone's arrive, then stores release
 *               = 2s+1, which the others wait for. On an oversubscribed
 *               node (auto) it leaves first, so a bcast from it that
 *               follows is published before the others look for it --
 *               flat, they looked at once and lost their turn on the
 *               core while it ran late (4 ranks on 2 cores, 8 B bcast:
 *               0.14 us against 3.9; the barrier itself 11.2 against 8.1)
 *   fan-in/out  towards / from one member: arrive = 2s up, release = 2s+1
 *               down (a barrier across nodes: in, leaders, out)
 *   allreduce   up to 56 bytes: payload and arrive = 2s in one line, every
 *               member reads every line and reduces them in member order
 *               -- the same bits everywhere, one step. Larger: chunks of
 *               16-64 KiB through each member's ring of cells; chunk k is
 *               copied in, published (prog), member j reduces slice j of
 *               it from all cells in member order (published: red), every
 *               member copies the slices into its result, and acks (below
 *               256 B every member reduces it all, one step less). From
 *               TW_COLL_CMA_ALLREDUCE bytes: one copy (process_vm_readv).
 *   reduce      the same, unsplit: only the root reads and reduces
 *   bcast       up to 56 bytes: the root's release line; larger: chunks
 *               through the root's cells, each reader acks
 *
 * Reuse. A member rewrites its arrive[b] / release[b] line (last used by
 * operation s-2) only when every member finished s-2, and cell c when its
 * readers acked the chunk it held (or finished every earlier operation).
 * What a member finished is cached (seen[]) from what it published, so the
 * steady state reads nothing extra.
 *
 * Each algorithm is a small coroutine: its position and loop counters
 * live in op->cs, so a nonblocking operation returns TW_ERR_AGAIN where a
 * blocking one would wait, and resumes there on the engine's next pass.
 */
#define _GNU_SOURCE
#include "coll/tw_coll_seg.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "coll/tw_coll_int.h"
#include "coll/tw_coll_op.h"
#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "msg/tw_msg.h"
#include "msg/tw_stall.h"

/* ---- waiting and waking -------------------------------------------------- */

/* Waits that yield at once after one whose spin (TW_COLL_SPIN) ran out. */
#define TW_CSHM_SPIN_SKIP 8u

/*
 * Publish @p v in @p w and wake its sleepers, if the slot set has any.
 * A release store and a plain load, no fence between them: a seq_cst
 * store (or a fence) would stall until this core owns the line again --
 * a whole line transfer, since the readers hold it -- and triple the
 * latency of a barrier. The price: a waiter that announces its sleep
 * just as we store may miss the wake-up and sleep out its 1 ms timeout;
 * only waits that already lasted over a millisecond ever sleep.
 */
static void tw_cshm_publish(const tw_cshm_bind_t *b, _Atomic uint64_t *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_release);
    if (atomic_load_explicit(&b->head->sleepers, memory_order_relaxed) != 0) {
        (void)tw_futex((void *)w, FUTEX_WAKE, INT_MAX, NULL);
    }
}

/* Why a wait must stop, or TW_OK. */
static tw_status_t tw_cshm_failed(const tw_group_t *g)
{
    int failed = atomic_load_explicit(&g->failed, memory_order_acquire);

    if (failed != 0) {
        return (tw_status_t)failed;
    }
    if (atomic_load_explicit(&g->shm.head->abort, memory_order_acquire) != 0) {
        return TW_ERR_PEER_FAILED;
    }
    return TW_OK;
}

/* Member @p j (local position) left cleanly and *w is still short of
 * @p target: it never wrote what we wait for (it wrote everything before
 * it left), so nothing will. */
static bool tw_cshm_gone(const tw_group_t *g, int j, _Atomic uint64_t *w, uint64_t target)
{
    return tw_coll_is_down(g->coll, g->ranks[g->local[j]]) &&
           atomic_load_explicit(w, memory_order_acquire) < target;
}

static tw_status_t tw_cshm_wait_loop(tw_coll_op_t *op, int j, _Atomic uint64_t *w, uint64_t target,
                                     uint64_t spin_ns);

/* The stall watchdog (TW_STALL_WARN) for a wait on a member: one line
 * when its word has not moved for the limit. A blocking wait keeps @p st
 * on its stack, a nonblocking operation in op->shm_stall. */
static void tw_cshm_stall_check(tw_coll_op_t *op, int j, _Atomic uint64_t *w, uint64_t now,
                                tw_cshm_stall_t *st)
{
    static const char *const kinds[] = {"barrier", "bcast", "reduce", "allreduce"};
    tw_stall_t *s = tw_msg_stall(op->g->coll->p.msg);
    uint64_t v = atomic_load_explicit(w, memory_order_relaxed), limit = tw_stall_limit_ns(s);

    if (limit == 0 || st->warned) {
        return;
    }
    if (st->since == 0 || v != st->last) {
        st->last = v;
        st->since = now;
        return;
    }
    if (now - st->since < limit) {
        return;
    }
    int peer = op->g->ranks[op->g->local[j]];
    char waits[96];
    snprintf(waits, sizeof(waits), "rank %d to reach the group's collective number %llu", peer,
             (unsigned long long)op->seq + 1);
    tw_stall_desc_t d = {.op = kinds[op->kind],
                         .prep = "with",
                         .peer = peer,
                         .len = op->kind == TW_COLL_BARRIER ? 0
                                : op->kind == TW_COLL_BCAST
                                    ? op->count
                                    : op->count * tw_coll_dtype_size(op->dt),
                         .tl = "shm (the node's collective segment)",
                         .waits = waits};
    st->warned = true;
    tw_stall_note(s, &d, (double)(now - st->since) / 1e9);
}

/* Wait until member @p j's word *w >= target: TW_OK (acquire),
 * TW_ERR_AGAIN (nonblocking and not yet), or why the group failed. */
static tw_status_t tw_cshm_await(tw_coll_op_t *op, int j, _Atomic uint64_t *w, uint64_t target)
{
    tw_group_t *g = op->g;
    tw_cshm_node_t *node = g->coll->node;
    uint64_t spin_ns = node->spin_ns;
    tw_status_t st;

    if (TW_LIKELY(atomic_load_explicit(w, memory_order_acquire) >= target)) {
        return TW_OK;
    }
    if (op->nb) {
        st = tw_cshm_failed(g);
        if (st == TW_OK && tw_cshm_gone(g, j, w, target)) {
            st = TW_ERR_PEER_FAILED;
        }
        op->shm_waiting = st == TW_OK;
        if (st == TW_OK) {
            tw_cshm_stall_check(op, j, w, tw_time_coarse_ns(), &op->shm_stall);
        }
        return st == TW_OK ? TW_ERR_AGAIN : st;
    }
    st = tw_cshm_wait_loop(op, j, w, target, spin_ns);
    return st;
}

static tw_status_t tw_cshm_wait_loop(tw_coll_op_t *op, int j, _Atomic uint64_t *w, uint64_t target,
                                     uint64_t spin_ns)
{
    tw_group_t *g = op->g;
    tw_cshm_bind_t *b = &g->shm;
    tw_cshm_node_t *node = g->coll->node;
    uint64_t start = 0;
    tw_status_t st = TW_OK;
    /* Polls between looks at the clock: 256 while spinning (the first
     * look after 32, ~1 us); none when we yield at once (256 pauses are
     * ~10 us, several handoffs). */
    unsigned mask = spin_ns == 0 ? 0 : 255;
    bool adaptive = false; /* this wait may find spinning in vain */
    tw_cshm_stall_t stall = {.last = atomic_load_explicit(w, memory_order_relaxed)};

    for (unsigned polls = 1;; polls++) {
        if (atomic_load_explicit(w, memory_order_relaxed) >= target) {
            atomic_thread_fence(memory_order_acquire);
            break;
        }
        if ((polls & mask) != 0 && polls != 32) {
            tw_cpu_relax();
            continue;
        }
        st = tw_cshm_failed(g);
        if (st == TW_OK && tw_cshm_gone(g, j, w, target)) {
            st = TW_ERR_PEER_FAILED;
        }
        if (st != TW_OK) {
            break;
        }
        uint64_t now = tw_time_ns();
        if (start == 0) {
            /* A wait that lasts: count it. More of our threads waiting
             * than CPUs to run them, and the one that would end a wait
             * may be one of them -- yield at once, except the group's
             * first member on the node: it keeps spinning, so while its
             * partners yield their cores round, the pairs of one group
             * line up and run a stretch of operations together instead
             * of every side yielding in step (two threads per process on
             * 2 cores, a group each: barriers 0.82x of one thread's rate
             * against 0.65x). (Counted only now: a locked add right
             * after publishing would stall until the readers gave our
             * line back.) */
            start = now;
            if (atomic_fetch_add_explicit(&node->waiters, 1, memory_order_relaxed) + 1 >
                node->cpus) {
                if (g->my_local != 0) {
                    spin_ns = 0;
                    mask = 0;
                }
            } else if (b->spin_skip > 0) {
                /* Spins ended in vain lately: yield from the start. */
                b->spin_skip--;
                spin_ns = 0;
                mask = 0;
            } else {
                adaptive = spin_ns > 0;
            }
        }
        if (now - start < spin_ns) {
            continue; /* spin */
        }
        if (adaptive) {
            /* The spin did not pay: the one we wait for runs late, or
             * off-CPU (ranks outnumber the cores where the node's count
             * cannot show it: emulated nodes on one machine, other
             * jobs). The next waits yield at once, as MPI's
             * yield-when-idle does, until one spins again. */
            adaptive = false;
            b->spin_skip = TW_CSHM_SPIN_SKIP;
        }
        if (now - start < spin_ns + 1000000u) {
            sched_yield(); /* let whoever shares this core run */
            continue;
        }
        tw_cshm_stall_check(op, j, w, now, &stall);
        /* Sleep, at most a millisecond: a lost wake-up or a failure
         * without one costs that much, never a hang. */
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
        atomic_fetch_add_explicit(&b->head->sleepers, 1, memory_order_seq_cst);
        uint64_t v = atomic_load_explicit(w, memory_order_seq_cst);
        if (v < target) {
            (void)tw_futex((void *)w, FUTEX_WAIT, (uint32_t)v, &ts);
        }
        atomic_fetch_sub_explicit(&b->head->sleepers, 1, memory_order_seq_cst);
    }
    if (start != 0) {
        atomic_fetch_sub_explicit(&node->waiters, 1, memory_order_relaxed);
    }
    return st;
}

/* ---- the coroutines --------------------------------------------------------- */

#define CS_BEGIN(op)       \
    switch ((op)->cs.pc) { \
    case 0:
#define CS_END(op)   \
    }                \
    (op)->cs.pc = 0; \
    return TW_OK
/* Wait for *w >= t from member j; if the wait fails, run @p fail (then
 * return why). */
#define CS_AWAIT_OR(op, j, w, t, fail)                        \
    do {                                                      \
        (op)->cs.pc = __LINE__;                               \
        /* fall through */                                    \
    case __LINE__:;                                           \
        tw_status_t st_ = tw_cshm_await((op), (j), (w), (t)); \
        if (st_ != TW_OK) {                                   \
            if (st_ != TW_ERR_AGAIN) {                        \
                fail;                                         \
            }                                                 \
            return st_;                                       \
        }                                                     \
    } while (0)
#define CS_AWAIT(op, j, w, t) CS_AWAIT_OR(op, j, w, t, (void)0)

/* Every other member of the slot set @p b finished step @p upto (its done
 * word), as far as we know or once we see it. */
#define CS_AWAIT_DONE(op, b, n, me, upto)                                    \
    for ((op)->cs.j = 0; (op)->cs.j < (n); (op)->cs.j++) {                   \
        if ((op)->cs.j != (me) && (b)->seen[(op)->cs.j] < (upto)) {          \
            CS_AWAIT((op), (op)->cs.j, &(b)->mem[(op)->cs.j]->done, (upto)); \
            tw_cshm_saw((b), (op)->cs.j, (upto));                            \
        }                                                                    \
    }

/* Chunk progress word of operation s: (s << 24) | chunks. */
#define TW_CSHM_PROG(s, k) (((uint64_t)(s) << 24) | (uint64_t)(k))

static void tw_cshm_saw(tw_cshm_bind_t *b, int j, uint64_t finished)
{
    if (b->seen[j] < finished) {
        b->seen[j] = finished;
    }
}

/* Reduce @p len elements of every member's @p src(j) into @p dst, in
 * member order. */
static void tw_cshm_reduce_all(tw_coll_op_t *op, void *dst, const unsigned char *const *src, int n,
                               size_t count)
{
    size_t bytes = count * tw_coll_dtype_size(op->dt);

    if (n == 1) {
        memcpy(dst, src[0], bytes);
        return;
    }
    tw_coll_reduce(dst, src[0], src[1], count, op->dt, op->rop);
    for (int j = 2; j < n; j++) {
        tw_coll_reduce(dst, dst, src[j], count, op->dt, op->rop);
    }
}

/*
 * Up to 56 bytes: barrier, fan-in/out, allreduce, reduce, bcast through
 * the arrive and release lines.
 */
static tw_status_t tw_cshm_inline(tw_coll_op_t *op, tw_coll_act_t *a)
{
    tw_group_t *g = op->g;
    tw_cshm_bind_t *b = &g->shm;
    int n = g->nlocal, me = g->my_local, root = a->peer;
    uint64_t s = a->sn;
    unsigned buf = (unsigned)(s & 1);
    size_t esize =
        a->sub == TW_CSHM_BCAST || a->sub == TW_CSHM_FANOUT ? 1 : tw_coll_dtype_size(op->dt);
    size_t bytes = a->len * esize;
    bool up = a->sub != TW_CSHM_BCAST && a->sub != TW_CSHM_FANOUT;
    bool i_write_data = bytes > 0 && (up || me == root);
    bool gather = a->sub == TW_CSHM_BARRIER && n > 2 && g->coll->node->gather;

    CS_BEGIN(op);
    /* The line I rewrite was read in operation s-2: everyone done with it. */
    if (i_write_data && s > 2) {
        CS_AWAIT_DONE(op, b, n, me, s - 2);
    }
    if (up) {
        tw_cshm_line_t *l = &b->mem[me]->arrive[buf];
        if (bytes > 0) {
            memcpy(l->data, a->a, bytes);
        }
        tw_cshm_publish(b, &l->seq, 2 * s);
        if (a->sub == TW_CSHM_ALLREDUCE || (a->sub == TW_CSHM_BARRIER && !gather) || me == root) {
            for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
                if (op->cs.j != me) {
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->arrive[buf].seq, 2 * s);
                    tw_cshm_saw(b, op->cs.j, s - 1);
                }
            }
            if (bytes > 0) {
                const unsigned char *src[TW_CSHM_MAX_LOCAL];
                for (int j = 0; j < n; j++) {
                    src[j] = b->mem[j]->arrive[buf].data;
                }
                tw_cshm_reduce_all(op, a->dst, src, n, a->len);
            }
        }
        if (gather && me == root) {
            tw_cshm_publish(b, &b->mem[me]->release[buf].seq, 2 * s + 1);
        } else if (gather) {
            CS_AWAIT(op, root, &b->mem[root]->release[buf].seq, 2 * s + 1);
            /* The root saw every member arrive: all finished s-1. */
            for (int j = 0; j < n; j++) {
                tw_cshm_saw(b, j, s - 1);
            }
        }
    } else if (me == root) {
        tw_cshm_line_t *l = &b->mem[me]->release[buf];
        if (bytes > 0) {
            memcpy(l->data, a->dst, bytes);
        }
        tw_cshm_publish(b, &l->seq, 2 * s + 1);
    } else {
        CS_AWAIT(op, root, &b->mem[root]->release[buf].seq, 2 * s + 1);
        tw_cshm_saw(b, root, s - 1);
        if (bytes > 0) {
            memcpy(a->dst, b->mem[root]->release[buf].data, bytes);
        }
    }
    CS_END(op);
}

/*
 * Larger: chunks through the cells. Writers (every member for allreduce
 * and reduce, the root for bcast) copy chunk k into cell k % CELLS of
 * their ring and publish prog; readers (everyone, the root, the
 * non-roots) wait for the writers' prog, consume, and ack.
 *
 * An allreduce (from TW_CSHM_SPLIT_MIN bytes) splits each chunk in n
 * slices (whole elements): member j reduces slice j of every cell, in
 * member order, into its result and back into slice j of its own cell
 * (which no one else reads in that phase), publishes red, then copies
 * the other slices from their reducers' cells. Each member reads about
 * two chunks' worth instead of n and reduces 1/n of it, with the bits
 * every member reducing all of it in member order would get. Measured
 * (1 MiB doubles, medians of 3): 2 pinned processes 190 us against 215
 * for every member reducing it all; 4 on 2 cores 588 against 770.
 */
/* Smaller allreduces skip the split's extra step (red): 2 pinned
 * processes, 64 B 0.34-0.37 us unsplit against 0.41-0.43 split; from
 * 1 KiB the split wins (0.51-0.57 against 0.57-0.62). */
#define TW_CSHM_SPLIT_MIN 256u

static void tw_cshm_slice(size_t count, int n, int j, size_t *first, size_t *num)
{
    size_t lo = count * (size_t)j / (size_t)n, hi = count * (size_t)(j + 1) / (size_t)n;

    *first = lo;
    *num = hi - lo;
}
/* Bytes one chunk step moves (whole elements of @p esize): a cell's
 * worth -- but a reduce of under TW_CSHM_PIPE cells goes in TW_CSHM_PIPE
 * steps (of TW_CSHM_PIPE_MIN bytes at least), so the root reduces one
 * while the others copy in the next (64 KiB between 2 pinned members:
 * 10.7 -> 9.8 us). Only a reduce: allreduce and bcast gained nothing
 * beyond the noise, and every step a nonblocking one waits for costs it
 * a tick of engine 0's timer (TW_COLL_TIMER_NS): an iallreduce of 64 KiB
 * went from 22 to 50 us, its overlap from 40 % to 10 %. Not on an
 * oversubscribed node: there each step may cost a handoff. The same on
 * every member (operation, message size and node only). */
#define TW_CSHM_PIPE     4u
#define TW_CSHM_PIPE_MIN (4u << 10)

static size_t tw_cshm_per_step(const tw_group_t *g, int sub, size_t bytes, size_t esize)
{
    size_t per = g->shm.chunk;

    if (sub == TW_CSHM_REDUCE && !g->coll->node->oversub && bytes < TW_CSHM_PIPE * per) {
        per = TW_MAX((bytes + TW_CSHM_PIPE - 1) / TW_CSHM_PIPE, (size_t)TW_CSHM_PIPE_MIN);
        per = TW_MIN(per, g->shm.chunk);
    }
    return TW_MAX(per / esize, (size_t)1) * esize;
}

static tw_status_t tw_cshm_chunks(tw_coll_op_t *op, tw_coll_act_t *a)
{
    tw_group_t *g = op->g;
    tw_cshm_bind_t *b = &g->shm;
    int n = g->nlocal, me = g->my_local, root = a->peer;
    uint64_t s = a->sn;
    bool bcast = a->sub == TW_CSHM_BCAST;
    size_t esize = bcast ? 1 : tw_coll_dtype_size(op->dt);
    size_t bytes = a->len * esize;
    size_t per = tw_cshm_per_step(g, a->sub, bytes, esize);
    size_t nch = (bytes + per - 1) / per;
    bool reader = a->sub == TW_CSHM_ALLREDUCE || (me == root) != bcast;
    bool split = a->sub == TW_CSHM_ALLREDUCE && bytes >= TW_CSHM_SPLIT_MIN;
    /* A reduce's root reads its own part from its buffer, not a cell --
     * unless in place, where the result would overwrite it before it
     * is read (member order: dst = m0 (+) m1 first). */
    bool own = a->sub == TW_CSHM_REDUCE && me == root && (a->a != a->dst || me < 2);
    bool writer = (!bcast || me == root) && !own;

    CS_BEGIN(op);
    for (op->cs.k = 0; op->cs.k < nch; op->cs.k++) {
        if (writer) {
            /* My cell k % CELLS is free once its readers had what it held. */
            for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
                if (op->cs.j == me) {
                    continue;
                }
                if (op->cs.k >= TW_CSHM_CELLS) {
                    if (a->sub == TW_CSHM_REDUCE && op->cs.j != root) {
                        continue; /* only the root reads a reduce */
                    }
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->ack,
                             TW_CSHM_PROG(s, op->cs.k - TW_CSHM_CELLS + 1));
                } else if (op->cs.k == 0 && b->seen[op->cs.j] < b->cell_op) {
                    /* Every cell was last written by op cell_op at the
                     * latest: its readers finished it. Not s - 1: a
                     * barrier just before leaves the cells alone, and
                     * waiting for every member to have left it made the
                     * root of a bcast wait for the slowest. */
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->done, b->cell_op);
                    tw_cshm_saw(b, op->cs.j, b->cell_op);
                }
            }
            {
                size_t off = op->cs.k * per, len = TW_MIN(per, bytes - off);
                const unsigned char *src = bcast ? (const unsigned char *)a->dst : a->a;
                memcpy(b->cells[me] + (op->cs.k % TW_CSHM_CELLS) * b->chunk, src + off, len);
                b->cell_op = s;
                tw_cshm_publish(b, &b->mem[me]->prog, TW_CSHM_PROG(s, op->cs.k + 1));
            }
        }
        if (reader) {
            for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
                if ((bcast && op->cs.j == root) || (!bcast && op->cs.j != me)) {
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->prog, TW_CSHM_PROG(s, op->cs.k + 1));
                }
            }
            if (split) {
                size_t off = op->cs.k * per, len = TW_MIN(per, bytes - off), first, num;
                size_t cell = (op->cs.k % TW_CSHM_CELLS) * b->chunk;
                unsigned char *dst = (unsigned char *)a->dst + off;
                const unsigned char *src[TW_CSHM_MAX_LOCAL];
                tw_cshm_slice(len / esize, n, me, &first, &num);
                for (int j = 0; j < n; j++) {
                    src[j] = b->cells[j] + cell + first * esize;
                }
                if (num > 0) {
                    tw_cshm_reduce_all(op, dst + first * esize, src, n, num);
                    memcpy(b->cells[me] + cell + first * esize, dst + first * esize, num * esize);
                }
                tw_cshm_publish(b, &b->mem[me]->red, TW_CSHM_PROG(s, op->cs.k + 1));
                for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
                    if (op->cs.j == me) {
                        continue;
                    }
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->red, TW_CSHM_PROG(s, op->cs.k + 1));
                    off = op->cs.k * per;
                    len = TW_MIN(per, bytes - off);
                    cell = (op->cs.k % TW_CSHM_CELLS) * b->chunk;
                    tw_cshm_slice(len / esize, n, op->cs.j, &first, &num);
                    memcpy((unsigned char *)a->dst + off + first * esize,
                           b->cells[op->cs.j] + cell + first * esize, num * esize);
                }
                tw_cshm_publish(b, &b->mem[me]->ack, TW_CSHM_PROG(s, op->cs.k + 1));
            } else {
                size_t off = op->cs.k * per, len = TW_MIN(per, bytes - off);
                size_t cell = (op->cs.k % TW_CSHM_CELLS) * b->chunk;
                unsigned char *dst = (unsigned char *)a->dst + off;
                if (bcast) {
                    memcpy(dst, b->cells[root] + cell, len);
                } else {
                    const unsigned char *src[TW_CSHM_MAX_LOCAL];
                    for (int j = 0; j < n; j++) {
                        src[j] = b->cells[j] + cell;
                    }
                    if (own) {
                        src[me] = (const unsigned char *)a->a + off;
                    }
                    tw_cshm_reduce_all(op, dst, src, n, len / esize);
                }
                tw_cshm_publish(b, &b->mem[me]->ack, TW_CSHM_PROG(s, op->cs.k + 1));
            }
        }
    }
    CS_END(op);
}

/* Single copy and failure (tw_coll_shm.h): read @p len bytes at @p addr
 * of member process @p pid in step @p s, announced, unless the slot set
 * was aborted. */
static tw_status_t tw_cshm_cma_get(tw_group_t *g, uint64_t s, pid_t pid, void *dst, uint64_t addr,
                                   size_t len)
{
    tw_cshm_bind_t *b = &g->shm;
    _Atomic uint64_t *reading = &b->mem[g->my_local]->cma_read;
    tw_status_t st;

    atomic_store_explicit(reading, s, memory_order_seq_cst);
    if (atomic_load_explicit(&b->head->abort, memory_order_seq_cst) == 0) {
        st = tw_cshm_cma_read(pid, dst, addr, len);
    } else {
        st = tw_cshm_failed(g);
        st = st != TW_OK ? st : TW_ERR_PEER_FAILED;
    }
    atomic_store_explicit(reading, 0, memory_order_release);
    return st;
}

/* Step @p s failed after this member published its buffers: abort the
 * slot set and wait until no live member reads them. A read ends on its
 * own (one process_vm_readv), so this waits at most that long. */
static void tw_cshm_cma_withdraw(tw_group_t *g, uint64_t s)
{
    tw_cshm_bind_t *b = &g->shm;

    tw_cshm_abort(g);
    for (int j = 0; j < g->nlocal; j++) {
        while (j != g->my_local &&
               atomic_load_explicit(&b->mem[j]->cma_read, memory_order_seq_cst) == s &&
               !tw_coll_is_down(g->coll, g->ranks[g->local[j]])) {
            sched_yield();
        }
    }
}

/*
 * Single copy (TW_COLL_CMA): the root publishes where its buffer is in
 * its release line; every other member reads it straight into its own
 * with process_vm_readv and answers in its arrive line (1 read, 2
 * failed); the root returns once all answered, so its buffer stays put
 * until then. A read that fails fails the operation (and so the group).
 */
typedef struct tw_cshm_cma_msg {
    uint64_t pid;
    uint64_t addr;
    uint64_t len;
} tw_cshm_cma_msg_t;

static tw_status_t tw_cshm_cma(tw_coll_op_t *op, tw_coll_act_t *a)
{
    tw_group_t *g = op->g;
    tw_cshm_bind_t *b = &g->shm;
    int n = g->nlocal, me = g->my_local, root = a->peer;
    uint64_t s = a->sn;
    unsigned buf = (unsigned)(s & 1);
    tw_cshm_cma_msg_t m;
    tw_status_t st;

    CS_BEGIN(op);
    /* The line I rewrite was read in operation s-2: everyone done with it. */
    if (s > 2) {
        CS_AWAIT_DONE(op, b, n, me, s - 2);
    }
    if (me == root) {
        m = (tw_cshm_cma_msg_t){.pid = (uint64_t)g->coll->node->pid,
                                .addr = (uint64_t)(uintptr_t)a->dst,
                                .len = a->len};
        memcpy(b->mem[me]->release[buf].data, &m, sizeof(m));
        tw_cshm_publish(b, &b->mem[me]->release[buf].seq, 2 * s + 1);
        op->cs.k = 0; /* members that could not read */
        for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
            if (op->cs.j != me) {
                CS_AWAIT_OR(op, op->cs.j, &b->mem[op->cs.j]->arrive[buf].seq, 2 * s,
                            tw_cshm_cma_withdraw(g, s));
                op->cs.k += b->mem[op->cs.j]->arrive[buf].data[0] != 1;
            }
        }
        if (op->cs.k > 0) {
            /* They said why (a read refused), or the slot set was aborted. */
            st = tw_cshm_failed(g);
            op->cs.pc = 0;
            return st != TW_OK ? st : TW_ERR_TRANSPORT;
        }
    } else {
        CS_AWAIT(op, root, &b->mem[root]->release[buf].seq, 2 * s + 1);
        tw_cshm_saw(b, root, s - 1);
        memcpy(&m, b->mem[root]->release[buf].data, sizeof(m));
        st = m.len == a->len ? tw_cshm_cma_get(g, s, (pid_t)m.pid, a->dst, m.addr, a->len)
                             : TW_ERR_INVALID;
        b->mem[me]->arrive[buf].data[0] = st == TW_OK ? 1 : 2;
        tw_cshm_publish(b, &b->mem[me]->arrive[buf].seq, 2 * s);
        if (st != TW_OK) {
            if (st == TW_ERR_INVALID) {
                tw_error("coll",
                         "bcast on a group of %d: the root has %llu bytes where %zu are due "
                         "(members called it with different sizes)",
                         g->n, (unsigned long long)m.len, a->len);
            } else if (st != TW_ERR_PEER_FAILED && /* a root that died: its transport says so */
                       atomic_load_explicit(&b->head->abort, memory_order_relaxed) == 0) {
                tw_error("coll",
                         "bcast: cannot read %zu bytes of the root's buffer (rank %d, "
                         "process_vm_readv: %s)",
                         a->len, g->ranks[g->local[root]], tw_strerror(st));
            }
            op->cs.pc = 0;
            return st;
        }
    }
    CS_END(op);
}

/*
 * Single-copy allreduce (TW_COLL_CMA): arrive carries {pid, send, recv}
 * of each member; member j reads slice j of every send buffer (its own
 * from memory) and reduces it in member order into scratch, then into its
 * receive buffer's slice j, and publishes release; everyone then reads the
 * other slices from their reducers' receive buffers and publishes ack;
 * a member returns once every other acked, so its buffers stay put while
 * read. In place is safe: a member writes slice k of its buffer only
 * after k said (release) it read slice k of everyone's.
 */
typedef struct tw_cshm_cma_ar {
    uint64_t pid;
    uint64_t send;
    uint64_t recv;
    uint64_t len; /* bytes */
} tw_cshm_cma_ar_t;

static tw_status_t tw_cshm_cma_allreduce(tw_coll_op_t *op, tw_coll_act_t *a)
{
    tw_group_t *g = op->g;
    tw_cshm_bind_t *b = &g->shm;
    int n = g->nlocal, me = g->my_local;
    uint64_t s = a->sn;
    unsigned buf = (unsigned)(s & 1);
    size_t esize = tw_coll_dtype_size(op->dt), bytes = a->len * esize, first, num;
    tw_cshm_cma_ar_t m;
    tw_status_t st = TW_OK;

    CS_BEGIN(op);
    if (s > 2) {
        CS_AWAIT_DONE(op, b, n, me, s - 2);
    }
    m = (tw_cshm_cma_ar_t){.pid = (uint64_t)g->coll->node->pid,
                           .send = (uint64_t)(uintptr_t)a->a,
                           .recv = (uint64_t)(uintptr_t)a->dst,
                           .len = bytes};
    memcpy(b->mem[me]->arrive[buf].data, &m, sizeof(m));
    tw_cshm_publish(b, &b->mem[me]->arrive[buf].seq, 2 * s);
    /* From here on the others may read my buffers: a failure withdraws. */
    for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
        if (op->cs.j != me) {
            CS_AWAIT_OR(op, op->cs.j, &b->mem[op->cs.j]->arrive[buf].seq, 2 * s,
                        tw_cshm_cma_withdraw(g, s));
            tw_cshm_saw(b, op->cs.j, s - 1);
        }
    }
    tw_cshm_slice(a->len, n, me, &first, &num);
    if (b->tmp_len < 2 * num * esize) {
        tw_free(b->tmp, b->tmp_len);
        b->tmp_len = 2 * num * esize;
        b->tmp = tw_malloc(b->tmp_len);
        if (b->tmp == NULL) {
            b->tmp_len = 0;
            st = TW_ERR_NOMEM;
        }
    }
    for (int j = 0; st == TW_OK && num > 0 && j < n; j++) {
        unsigned char *acc = b->tmp, *in = j == 0 ? acc : b->tmp + num * esize;
        if (j == me) {
            memcpy(in, (const unsigned char *)a->a + first * esize, num * esize);
        } else {
            memcpy(&m, b->mem[j]->arrive[buf].data, sizeof(m));
            st = m.len != bytes
                     ? TW_ERR_INVALID
                     : tw_cshm_cma_get(g, s, (pid_t)m.pid, in, m.send + first * esize, num * esize);
        }
        if (st == TW_OK && j > 0) {
            tw_coll_reduce(acc, acc, in, num, op->dt, op->rop);
        }
    }
    if (st != TW_OK) {
        /* A member that died: its transport says so; aborted: who failed it. */
        if (st != TW_ERR_PEER_FAILED &&
            atomic_load_explicit(&b->head->abort, memory_order_relaxed) == 0) {
            tw_error(
                "coll", "allreduce on a group of %d: cannot read the members' buffers (%s)", g->n,
                st == TW_ERR_INVALID ? "members called it with different counts" : tw_strerror(st));
        }
        tw_cshm_cma_withdraw(g, s);
        op->cs.pc = 0;
        return st;
    }
    if (num > 0) {
        memcpy((unsigned char *)a->dst + first * esize, b->tmp, num * esize);
    }
    tw_cshm_publish(b, &b->mem[me]->release[buf].seq, 2 * s + 1);
    for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
        if (op->cs.j == me) {
            continue;
        }
        CS_AWAIT_OR(op, op->cs.j, &b->mem[op->cs.j]->release[buf].seq, 2 * s + 1,
                    tw_cshm_cma_withdraw(g, s));
        memcpy(&m, b->mem[op->cs.j]->arrive[buf].data, sizeof(m));
        tw_cshm_slice(a->len, n, op->cs.j, &first, &num);
        st = num == 0 ? TW_OK
                      : tw_cshm_cma_get(g, s, (pid_t)m.pid, (unsigned char *)a->dst + first * esize,
                                        m.recv + first * esize, num * esize);
        if (st != TW_OK) {
            if (st != TW_ERR_PEER_FAILED &&
                atomic_load_explicit(&b->head->abort, memory_order_relaxed) == 0) {
                tw_error("coll", "allreduce: cannot read rank %d's result (%s)",
                         g->ranks[g->local[op->cs.j]], tw_strerror(st));
            }
            tw_cshm_cma_withdraw(g, s);
            op->cs.pc = 0;
            return st;
        }
    }
    tw_cshm_publish(b, &b->mem[me]->ack, TW_CSHM_PROG(s, 1));
    for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
        if (op->cs.j != me) {
            CS_AWAIT_OR(op, op->cs.j, &b->mem[op->cs.j]->ack, TW_CSHM_PROG(s, 1),
                        tw_cshm_cma_withdraw(g, s));
        }
    }
    CS_END(op);
}

tw_status_t tw_cshm_step(tw_coll_op_t *op, tw_coll_act_t *a)
{
    size_t esize = a->sub == TW_CSHM_BCAST ? 1 : tw_coll_dtype_size(op->dt);
    tw_status_t st;

    op->shm_waiting = false;
    const tw_cshm_node_t *node = op->g->coll->node;
    size_t cma_min = node->cma_min;

    if (a->sub == TW_CSHM_BARRIER || a->sub == TW_CSHM_FANIN || a->sub == TW_CSHM_FANOUT ||
        a->len * esize <= TW_CSHM_INLINE) {
        st = tw_cshm_inline(op, a);
    } else if (a->sub == TW_CSHM_ALLREDUCE && node->cma_ar_min > 0 && !node->oversub &&
               a->len * esize >= node->cma_ar_min) {
        /* 2 pinned processes, 1 MiB: 165-169 us against 185-206 through
         * the cells (Open MPI tuned 160-189). Not oversubscribed: 4 on 2
         * cores, the extra syncs and reads cost 603-627 against 391-402. */
        st = tw_cshm_cma_allreduce(op, a);
    } else if (a->sub == TW_CSHM_BCAST && cma_min > 0 && a->len >= cma_min) {
        /* One copy each, from two members on: 2 pinned processes, 1 MiB,
         * 91-97 us against 160-167 through the cells (Open MPI tuned in
         * the same run 80-98). (An earlier 2-core machine had it the
         * other way between two: 64 against 37; TW_COLL_CMA=0 there.) */
        st = tw_cshm_cma(op, a);
    } else {
        st = tw_cshm_chunks(op, a);
    }
    if (st == TW_OK) {
        /* Done with everything this step read: its lines may be reused. */
        tw_cshm_publish(&op->g->shm, &op->g->shm.mem[op->g->my_local]->done, a->sn);
    } else if (st != TW_ERR_AGAIN) {
        op->cs.pc = 0;
    }
    return st;
}
