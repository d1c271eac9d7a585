/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Schedules: the algorithms, written down as lists of actions.
 *
 * Point to point (any group, any layout):
 *   barrier    dissemination: round k, send to +2^k, receive from -2^k
 *   bcast      binomial tree from the root
 *   reduce     binomial tree to the root; a parent combines its
 *              children in ascending relative rank: acc = acc (+) child
 *   allreduce  recursive doubling; with p not a power of two, the first
 *              2r members pair up first (the even one hands its operand
 *              to the odd one and gets the result back at the end). A
 *              round combines lower (+) higher, so both partners compute
 *              the same bits and so does everyone.
 *              From TW_COLL_RSAG bytes (512 KiB; 0 = never), Rabenseifner
 *              instead: the same pairing, then among the p2 remaining a
 *              reduce-scatter by recursive halving (round k: keep half
 *              the blocks, send the other half to the partner across bit
 *              k, combine lower (+) higher) and an allgather by recursive
 *              doubling (the rounds backwards, sending what one holds).
 *              Each member sends 2 (p2-1)/p2 vectors and reduces
 *              (p2-1)/p2, not one of each per round (log2 p2), in twice
 *              the rounds: it wins where the bytes cost more than the
 *              rounds (among 4 on 2 cores, point to point: from 512 KiB;
 *              among 2 or 3, where p2 = 2 and the bytes sent are the
 *              same, only from about 2 MiB). The
 *              blocks split the vector on elements, p2 of them (the
 *              first count % p2 one element longer); fewer elements than
 *              p2: recursive doubling. Each element meets the same
 *              combinations in the same order either way, so the choice
 *              changes no bit.
 *
 * Across nodes (a group on several nodes, not one member per node): a
 * node's members first combine towards one representative -- the node's
 * leader, or the root on the root's node -- the representatives run the
 * algorithm among themselves, and each hands the result back within its
 * node. Every member's result comes from the same representatives'
 * computation, so reductions stay bit-identical everywhere, and the
 * combination order depends on the layout (and root) alone.
 *
 * Steps: every round takes a fresh step number, counted the same way on
 * every member (the number of rounds depends only on sizes and layout),
 * so a message can only ever meet the receive of its own round. The
 * allreduce's algorithm, and so its count of steps, depends only on the
 * count, the dtype, the member count and TW_COLL_RSAG: the same on every
 * member.
 */
#include <string.h>

#include "coll/tw_coll_int.h"
#include "coll/tw_coll_op.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"

/* Room for @p more actions. */
static tw_status_t tw_sched_room(tw_coll_op_t *op, unsigned more)
{
    if (op->nacts + more <= op->cap) {
        return TW_OK;
    }
    unsigned cap = TW_MAX(op->cap * 2, op->nacts + more + 16);
    tw_coll_act_t *a = tw_malloc(cap * sizeof(*a));
    if (a == NULL) {
        return TW_ERR_NOMEM;
    }
    if (op->nacts > 0) {
        memcpy(a, op->acts, op->nacts * sizeof(*a));
    }
    tw_free(op->acts, op->cap * sizeof(*op->acts));
    op->acts = a;
    op->cap = cap;
    return TW_OK;
}

/* Builders record the first failure in *st and do nothing after it. */
typedef struct tw_sched {
    tw_coll_op_t *op;
    tw_status_t st;
    size_t esize; /* bytes of an element */
} tw_sched_t;

static unsigned tw_sched_add(tw_sched_t *s, tw_coll_act_t a)
{
    if (s->st == TW_OK) {
        s->st = tw_sched_room(s->op, 1);
    }
    if (s->st != TW_OK) {
        return 0;
    }
    s->op->acts[s->op->nacts] = a;
    return s->op->nacts++;
}

static void tw_sched_send(tw_sched_t *s, int peer, unsigned step, const void *buf, size_t len)
{
    tw_sched_add(
        s, (tw_coll_act_t){
               .kind = TW_ACT_SEND, .step = (uint8_t)step, .peer = peer, .a = buf, .len = len});
}

/* Receive and wait for it before whatever follows. */
static void tw_sched_recv_wait(tw_sched_t *s, int peer, unsigned step, void *buf, size_t len)
{
    unsigned i = tw_sched_add(
        s, (tw_coll_act_t){
               .kind = TW_ACT_RECV, .step = (uint8_t)step, .peer = peer, .dst = buf, .len = len});
    tw_sched_add(s, (tw_coll_act_t){.kind = TW_ACT_WAIT, .wait = i});
}

/* A send that may go from @p buf (tw_exec_send, @p zc): the schedule
 * waits for it (tw_sched_wait) before it writes @p buf or ends. Returns
 * its index. */
static unsigned tw_sched_send_zc(tw_sched_t *s, int peer, unsigned step, const void *buf,
                                 size_t len, tw_coll_zc_t zc)
{
    return tw_sched_add(s, (tw_coll_act_t){.kind = TW_ACT_SEND,
                                           .step = (uint8_t)step,
                                           .peer = peer,
                                           .a = buf,
                                           .len = len,
                                           .zc = (uint8_t)zc});
}

static void tw_sched_wait(tw_sched_t *s, unsigned i)
{
    tw_sched_add(s, (tw_coll_act_t){.kind = TW_ACT_WAIT, .wait = i});
}

/* Exchange with @p peer: the receive is posted before the send, so the
 * partner's payload, sent at the same time, lands in @p rbuf (over tcp,
 * read from the socket straight into it) rather than being staged as
 * unexpected and copied again; then wait for it. */
static void tw_sched_sendrecv(tw_sched_t *s, int peer, unsigned step, const void *sbuf, size_t slen,
                              void *rbuf, size_t rlen)
{
    unsigned i = tw_sched_add(
        s, (tw_coll_act_t){
               .kind = TW_ACT_RECV, .step = (uint8_t)step, .peer = peer, .dst = rbuf, .len = rlen});
    unsigned j = tw_sched_send_zc(s, peer, step, sbuf, slen, TW_ZC_ALWAYS);
    tw_sched_wait(s, i);
    tw_sched_wait(s, j);
}

/* dst = a (+) b over @p n elements. */
static void tw_sched_reduce_n(tw_sched_t *s, void *dst, const void *a, const void *b, size_t n)
{
    if (n > 0) {
        tw_sched_add(s,
                     (tw_coll_act_t){.kind = TW_ACT_REDUCE, .dst = dst, .a = a, .b = b, .len = n});
    }
}

static void tw_sched_reduce(tw_sched_t *s, void *dst, const void *a, const void *b)
{
    tw_sched_reduce_n(s, dst, a, b, s->op->count);
}

/* Rounds of recursive doubling over @p np (the power of two below it). */
static unsigned tw_sched_log2(int np)
{
    unsigned r = 0;
    while ((2 << r) <= np) {
        r++;
    }
    return r;
}

/* Rounds of dissemination over @p np: ceil(log2 np). */
static unsigned tw_sched_clog2(int np)
{
    unsigned r = 0;
    while ((1 << r) < np) {
        r++;
    }
    return r;
}

/* Does @p op's allreduce over @p np members go by Rabenseifner? Every
 * member answers the same: count, dtype and np are the same everywhere
 * (and the threshold, which must be). Every member of the p2 must own
 * one element at least, else recursive doubling. */
static bool tw_sched_rsag(const tw_coll_op_t *op, int np)
{
    size_t min = op->g->coll->cfg.rsag_min;
    size_t bytes = op->count * tw_coll_dtype_size(op->dt);

    return min > 0 && bytes >= min && np > 1 && op->count >= ((size_t)1 << tw_sched_log2(np));
}

/* ---- the algorithms, over parts[0 .. np-1] (group ranks), me at pos ----
 * Each uses the steps base .. base + tw_sched_steps(op, np) - 1. */

/* Rabenseifner's rounds: np < 2^31, so at most 2 * 30 + 2 steps, which
 * leaves room for a step before and after the top phase. */
_Static_assert(2 * 30 + 2 + 2 <= TW_COLL_STEP_MAX, "a step is 8 bits: see tw_coll_int.h");

static unsigned tw_sched_steps(const tw_coll_op_t *op, int np)
{
    switch (op->kind) {
    case TW_COLL_BARRIER:
        return tw_sched_clog2(np);
    case TW_COLL_ALLREDUCE:
        /* pairing, rounds (halving + doubling for Rabenseifner), pairing */
        return (tw_sched_rsag(op, np) ? 2 : 1) * tw_sched_log2(np) + 2;
    case TW_COLL_BCAST:
    case TW_COLL_REDUCE:
        break;
    }
    return 1; /* a tree: one message per pair */
}

static void tw_sched_dissemination(tw_sched_t *s, const int *parts, int np, int pos, unsigned base)
{
    unsigned k = 0;
    for (int dist = 1; dist < np; dist <<= 1, k++) {
        tw_sched_send(s, parts[(pos + dist) % np], base + k, NULL, 0);
        tw_sched_recv_wait(s, parts[(pos - dist + np) % np], base + k, NULL, 0);
    }
}

static void tw_sched_bcast_tree(tw_sched_t *s, const int *parts, int np, int pos, int rootpos,
                                void *buf, size_t len, unsigned step)
{
    int vr = (pos - rootpos + np) % np, mask = 1, nsent = 0;
    unsigned sent[32];

    while (mask < np) {
        if (vr & mask) {
            tw_sched_recv_wait(s, parts[(vr - mask + rootpos) % np], step, buf, len);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < np) {
            sent[nsent++] =
                tw_sched_send_zc(s, parts[(vr + mask + rootpos) % np], step, buf, len, TW_ZC_BCAST);
        }
    }
    while (nsent > 0) {
        tw_sched_wait(s, sent[--nsent]);
    }
}

/* Result in @p acc at rootpos; @p tmp holds one child's operand. */
static void tw_sched_reduce_tree(tw_sched_t *s, const int *parts, int np, int pos, int rootpos,
                                 void *acc, void *tmp, size_t bytes, unsigned step)
{
    int vr = (pos - rootpos + np) % np;

    for (int mask = 1; mask < np; mask <<= 1) {
        if (vr & mask) {
            tw_sched_wait(s, tw_sched_send_zc(s, parts[(vr - mask + rootpos) % np], step, acc,
                                              bytes, TW_ZC_SMALL));
            break;
        }
        if (vr + mask < np) {
            tw_sched_recv_wait(s, parts[(vr + mask + rootpos) % np], step, tmp, bytes);
            tw_sched_reduce(s, acc, acc, tmp);
        }
    }
}

/* The pairing before recursive doubling or Rabenseifner over np members
 * (rem = np - p2): among the first 2 rem, the even one hands its operand
 * (step @p first) to the odd one, which combines it (even (+) odd), and
 * gets the result back at step @p last. Returns my position among the p2
 * that go on, or -1 (handed over: the schedule is complete). */
static int tw_sched_pair_in(tw_sched_t *s, const int *parts, int rem, int pos, void *acc, void *tmp,
                            size_t bytes, unsigned first, unsigned last)
{
    if (pos >= 2 * rem) {
        return pos - rem;
    }
    if (pos % 2 == 0) {
        tw_sched_send(s, parts[pos + 1], first, acc, bytes);
        tw_sched_recv_wait(s, parts[pos + 1], last, acc, bytes);
        return -1;
    }
    tw_sched_recv_wait(s, parts[pos - 1], first, tmp, bytes);
    tw_sched_reduce(s, acc, tmp, acc);
    return pos / 2;
}

/* The group rank at position @p pn among the p2 that go on. */
static int tw_sched_p2_rank(const int *parts, int rem, int pn)
{
    return parts[pn < rem ? 2 * pn + 1 : pn + rem];
}

static void tw_sched_allreduce_rd(tw_sched_t *s, const int *parts, int np, int pos, void *acc,
                                  void *tmp, size_t bytes, unsigned base)
{
    unsigned rounds = tw_sched_log2(np);
    int p2 = 1 << rounds, rem = np - p2, npos;
    unsigned first = base, last = base + rounds + 1;

    npos = tw_sched_pair_in(s, parts, rem, pos, acc, tmp, bytes, first, last);
    if (npos < 0) {
        return;
    }
    for (unsigned k = 0; k < rounds; k++) {
        int pn = npos ^ (1 << k);
        int peer = tw_sched_p2_rank(parts, rem, pn);
        tw_sched_sendrecv(s, peer, base + 1 + k, acc, bytes, tmp, bytes);
        if (pn < npos) {
            tw_sched_reduce(s, acc, tmp, acc);
        } else {
            tw_sched_reduce(s, acc, acc, tmp);
        }
    }
    if (pos < 2 * rem) {
        tw_sched_send(s, parts[pos - 1], last, acc, bytes);
    }
}

/* Block @p b's first element, of p2 blocks of @p count: the first
 * count % p2 blocks have one element more. */
static size_t tw_sched_block(size_t count, int p2, int b)
{
    size_t q = count / (size_t)p2, r = count % (size_t)p2;

    return (size_t)b * q + TW_MIN((size_t)b, r);
}

/*
 * Rabenseifner: the pairing of tw_sched_allreduce_rd, then among the p2
 * a reduce-scatter by recursive halving and an allgather by recursive
 * doubling over p2 blocks of the vector. Halving round k pairs across
 * bit k of the position (as doubling's round k does): each partner
 * keeps one half of the blocks both hold -- the lower half the one
 * whose bit k is 0 -- sends the other, and combines what it keeps lower
 * (+) higher. So an element's value comes from the same combinations in
 * the same order as under recursive doubling (the same bits), computed
 * once by its owner; after round k a member holds p2 / 2^(k+1) blocks,
 * after the last one block (the bit-reversed position). The allgather
 * runs the rounds backwards, each partner sending what it holds, which
 * is the sibling of what the other holds.
 */
static void tw_sched_allreduce_rsag(tw_sched_t *s, const int *parts, int np, int pos,
                                    unsigned char *acc, unsigned char *tmp, unsigned base)
{
    unsigned rounds = tw_sched_log2(np);
    int p2 = 1 << rounds, rem = np - p2, npos, lo = 0, hi = p2; /* my blocks: [lo, hi) */
    unsigned first = base, step = base + 1, last = base + 2 * rounds + 1;
    size_t count = s->op->count, es = s->esize, bytes = count * es;

    npos = tw_sched_pair_in(s, parts, rem, pos, acc, tmp, bytes, first, last);
    if (npos < 0) {
        return;
    }
    for (unsigned k = 0; k < rounds; k++, step++) {
        int pn = npos ^ (1 << k), mid = (lo + hi) / 2;
        int peer = tw_sched_p2_rank(parts, rem, pn);
        bool upper = (npos >> k) & 1;
        int klo = upper ? mid : lo, khi = upper ? hi : mid; /* kept */
        size_t so = tw_sched_block(count, p2, upper ? lo : mid);
        size_t sn = tw_sched_block(count, p2, upper ? mid : hi) - so;
        size_t ko = tw_sched_block(count, p2, klo);
        size_t kn = tw_sched_block(count, p2, khi) - ko;
        tw_sched_sendrecv(s, peer, step, acc + so * es, sn * es, tmp + ko * es, kn * es);
        if (pn < npos) {
            tw_sched_reduce_n(s, acc + ko * es, tmp + ko * es, acc + ko * es, kn);
        } else {
            tw_sched_reduce_n(s, acc + ko * es, acc + ko * es, tmp + ko * es, kn);
        }
        lo = klo;
        hi = khi;
    }
    for (unsigned k = rounds; k-- > 0; step++) {
        int pn = npos ^ (1 << k), w = hi - lo;
        int peer = tw_sched_p2_rank(parts, rem, pn);
        int plo = (npos >> k) & 1 ? lo - w : hi; /* the partner's blocks: [plo, plo + w) */
        size_t mo = tw_sched_block(count, p2, lo), mn = tw_sched_block(count, p2, hi) - mo;
        size_t po = tw_sched_block(count, p2, plo), pl = tw_sched_block(count, p2, plo + w) - po;
        tw_sched_sendrecv(s, peer, step, acc + mo * es, mn * es, acc + po * es, pl * es);
        lo = TW_MIN(lo, plo);
        hi = lo + 2 * w;
    }
    if (pos < 2 * rem) {
        tw_sched_send(s, parts[pos - 1], last, acc, bytes);
    }
}

/* Allreduce over parts[] into @p acc (@p tmp: scratch of as many bytes):
 * Rabenseifner for large vectors (TW_COLL_RSAG), else recursive
 * doubling. Steps: tw_sched_steps(op, np) from @p base. */
static void tw_sched_allreduce(tw_sched_t *s, const int *parts, int np, int pos, void *acc,
                               void *tmp, unsigned base)
{
    if (tw_sched_rsag(s->op, np)) {
        tw_sched_allreduce_rsag(s, parts, np, pos, acc, tmp, base);
    } else {
        tw_sched_allreduce_rd(s, parts, np, pos, acc, tmp, s->op->count * s->esize, base);
    }
}

/* A step within this node's slot set. */
static void tw_sched_shm(tw_sched_t *s, uint8_t sub, int lroot, const void *src, void *dst,
                         size_t len)
{
    tw_sched_add(s, (tw_coll_act_t){.kind = TW_ACT_SHM,
                                    .sub = sub,
                                    .peer = lroot,
                                    .a = src,
                                    .dst = dst,
                                    .len = len,
                                    .sn = ++s->op->g->shm_sn});
}

/* ---- composing them over the group's layout ----------------------------- */

/* Scratch of at least @p len bytes (kept between operations). */
static unsigned char *tw_sched_scratch(tw_sched_t *s, size_t len)
{
    tw_coll_op_t *op = s->op;

    if (s->st != TW_OK) {
        return NULL;
    }
    if (op->scratch_len < len) {
        unsigned char *p = tw_malloc(len);
        if (p == NULL) {
            s->st = TW_ERR_NOMEM;
            return NULL;
        }
        tw_free(op->scratch, op->scratch_len);
        op->scratch = p;
        op->scratch_len = len;
    }
    return op->scratch;
}

/* A reduction's accumulator: the caller's recvbuf where the result goes
 * (every member of an allreduce, the root of a reduce), scratch
 * elsewhere; with @p tmp_p, scratch for one more operand there too. */
static void *tw_sched_acc(tw_sched_t *s, void **tmp_p)
{
    tw_coll_op_t *op = s->op;
    size_t bytes = op->count * tw_coll_dtype_size(op->dt);
    size_t slot = (bytes + 63) & ~(size_t)63;
    bool mine = op->kind == TW_COLL_ALLREDUCE || op->g->me == op->root;
    unsigned char *sc = NULL;

    if (tmp_p != NULL || !mine) {
        sc = tw_sched_scratch(s, 2 * slot);
    }
    if (tmp_p != NULL) {
        *tmp_p = sc != NULL ? sc + slot : NULL;
    }
    return mine ? op->recvbuf : sc;
}

/* The layout one operation runs on. Flat (one node, or one member per
 * node): one algorithm over every member. Otherwise three phases: within
 * each node towards its representative (the root on the root's node, the
 * leader elsewhere), among the representatives, within each node back. */
typedef struct tw_sched_plan {
    bool flat;
    int *top; /* [ntop] group ranks: every member, or the representatives */
    int ntop;
    int toppos;    /* my position in top, -1 when I am not in it */
    int lroot;     /* my node's representative's position in g->local */
    unsigned base; /* first step of the top phase */
    unsigned tail; /* first step after it */
} tw_sched_plan_t;

static tw_status_t tw_sched_plan(const tw_coll_op_t *op, tw_sched_plan_t *p)
{
    const tw_group_t *g = op->g;
    int root = op->kind == TW_COLL_BCAST || op->kind == TW_COLL_REDUCE ? op->root : -1;

    p->flat = g->nnodes == 1 || g->nnodes == g->n;
    p->ntop = p->flat ? g->n : g->nnodes;
    p->top = g->plan_top; /* the group's: no allocation per collective */
    p->toppos = -1;
    for (int k = 0; k < p->ntop; k++) {
        p->top[k] = p->flat ? k : g->leader[k];
    }
    if (!p->flat && root >= 0) {
        p->top[g->node_idx[root]] = root;
    }
    for (int k = 0; k < p->ntop; k++) {
        if (p->top[k] == g->me) {
            p->toppos = k;
        }
    }
    p->lroot = 0;
    if (!p->flat) {
        int rep = p->top[g->node_idx[g->me]];
        for (int i = 0; i < g->nlocal; i++) {
            if (g->local[i] == rep) {
                p->lroot = i;
            }
        }
    }
    p->base = p->flat ? 0 : 1; /* step 0: the first local phase */
    p->tail = p->base + tw_sched_steps(op, p->ntop);
    return TW_OK;
}

/* A group on one node: the whole operation is one step in its slot set,
 * with the node's result (reduce: at the root) in @p acc. Written field
 * by field: a struct built aside and copied is read back in wider loads
 * than it was written with (store-forwarding stalls: 25 ns a barrier). */
static void tw_sched_one_step(tw_coll_op_t *op, void *acc, tw_coll_act_t *a)
{
    static const uint8_t subs[] = {[TW_COLL_BARRIER] = TW_CSHM_BARRIER,
                                   [TW_COLL_BCAST] = TW_CSHM_BCAST,
                                   [TW_COLL_REDUCE] = TW_CSHM_REDUCE,
                                   [TW_COLL_ALLREDUCE] = TW_CSHM_ALLREDUCE};
    bool barrier = op->kind == TW_COLL_BARRIER, data_in = !barrier && op->kind != TW_COLL_BCAST;

    memset(a, 0, sizeof(*a));
    a->kind = TW_ACT_SHM;
    a->sub = subs[op->kind];
    a->peer = barrier ? 0 : op->root;
    a->a = data_in ? op->sendbuf : NULL;
    a->dst = barrier ? NULL : acc;
    a->len = barrier ? 0 : op->count;
    a->sn = ++op->g->shm_sn;
}

/*
 * This node's members share a slot set: the phases within the node go
 * through it. One node: one step. Several: towards the representative,
 * the representatives point to point, back from it.
 */
static void tw_sched_with_shm(tw_sched_t *s, const tw_sched_plan_t *p)
{
    tw_coll_op_t *op = s->op;
    tw_group_t *g = op->g;
    bool in_top = p->toppos >= 0, one = g->nnodes == 1;
    int lroot = one ? op->root : p->lroot;

    if (one) {
        void *acc = op->kind == TW_COLL_BARRIER ? NULL : op->recvbuf;
        if (op->kind == TW_COLL_REDUCE || op->kind == TW_COLL_ALLREDUCE) {
            acc = tw_sched_acc(s, NULL);
        }
        if (s->st == TW_OK) {
            s->st = tw_sched_room(op, 1);
        }
        if (s->st == TW_OK) {
            tw_sched_one_step(op, acc, &op->acts[op->nacts++]);
        }
        return;
    }
    switch (op->kind) {
    case TW_COLL_BARRIER:
        tw_sched_shm(s, TW_CSHM_FANIN, lroot, NULL, NULL, 0);
        if (in_top) {
            tw_sched_dissemination(s, p->top, p->ntop, p->toppos, p->base);
        }
        tw_sched_shm(s, TW_CSHM_FANOUT, lroot, NULL, NULL, 0);
        break;
    case TW_COLL_BCAST:
        if (in_top) {
            tw_sched_bcast_tree(s, p->top, p->ntop, p->toppos, g->node_idx[op->root], op->recvbuf,
                                op->count, p->base);
        }
        tw_sched_shm(s, TW_CSHM_BCAST, lroot, NULL, op->recvbuf, op->count);
        break;
    case TW_COLL_REDUCE:
    case TW_COLL_ALLREDUCE: {
        bool all = op->kind == TW_COLL_ALLREDUCE;
        size_t bytes = op->count * tw_coll_dtype_size(op->dt);
        void *tmp = NULL;
        /* The node's result lands in acc at its representative. */
        void *acc = tw_sched_acc(s, &tmp);
        if (s->st != TW_OK) {
            break;
        }
        tw_sched_shm(s, TW_CSHM_REDUCE, lroot, op->sendbuf, acc, op->count);
        if (in_top && all) {
            tw_sched_allreduce(s, p->top, p->ntop, p->toppos, acc, tmp, p->base);
        } else if (in_top) {
            tw_sched_reduce_tree(s, p->top, p->ntop, p->toppos, g->node_idx[op->root], acc, tmp,
                                 bytes, p->base);
        }
        if (all) {
            tw_sched_shm(s, TW_CSHM_BCAST, lroot, NULL, acc, bytes);
        }
        break;
    }
    }
}

static void tw_sched_reset(tw_coll_op_t *op)
{
    op->nacts = 0;
    op->cursor = 0;
    op->outstanding = 0;
    op->status = TW_OK;
    op->send_blocked = false;
    op->shm_waiting = false;
    op->shm_stall = (tw_cshm_stall_t){0};
    op->cs.pc = 0;
}

bool tw_coll_schedule_step(tw_coll_op_t *op, tw_coll_act_t *a)
{
    const tw_group_t *g = op->g;

    if (g->shm.slot < 0 || g->nnodes != 1 || (op->count == 0 && op->kind != TW_COLL_BARRIER) ||
        (op->kind == TW_COLL_REDUCE && g->me != op->root)) {
        return false;
    }
    tw_sched_reset(op);
    tw_sched_one_step(op, op->recvbuf, a);
    return true;
}

tw_status_t tw_coll_schedule(tw_coll_op_t *op)
{
    tw_group_t *g = op->g;
    tw_sched_t s = {.op = op, .st = TW_OK, .esize = tw_coll_dtype_size(op->dt)};
    tw_sched_plan_t p;
    bool in_top;

    tw_sched_reset(op);
    if (op->count == 0 && op->kind != TW_COLL_BARRIER) {
        return TW_OK; /* nothing moves: every member agrees on that */
    }
    s.st = tw_sched_plan(op, &p);
    if (s.st != TW_OK) {
        return s.st;
    }
    in_top = p.toppos >= 0;
    if (p.tail > TW_COLL_STEP_MAX) {
        s.st = TW_ERR_INVALID; /* 2^250 members */
    }
    if (g->shm.slot >= 0) {
        tw_sched_with_shm(&s, &p);
        return s.st;
    }

    switch (op->kind) {
    case TW_COLL_BARRIER:
        if (!p.flat) {
            tw_sched_reduce_tree(&s, g->local, g->nlocal, g->my_local, p.lroot, NULL, NULL, 0, 0);
        }
        if (in_top) {
            tw_sched_dissemination(&s, p.top, p.ntop, p.toppos, p.base);
        }
        if (!p.flat) {
            tw_sched_bcast_tree(&s, g->local, g->nlocal, g->my_local, p.lroot, NULL, 0, p.tail);
        }
        break;
    case TW_COLL_BCAST:
        if (in_top) {
            tw_sched_bcast_tree(&s, p.top, p.ntop, p.toppos,
                                p.flat ? op->root : g->node_idx[op->root], op->recvbuf, op->count,
                                p.base);
        }
        if (!p.flat) {
            tw_sched_bcast_tree(&s, g->local, g->nlocal, g->my_local, p.lroot, op->recvbuf,
                                op->count, p.tail);
        }
        break;
    case TW_COLL_REDUCE:
    case TW_COLL_ALLREDUCE: {
        bool all = op->kind == TW_COLL_ALLREDUCE;
        size_t bytes = op->count * tw_coll_dtype_size(op->dt);
        void *tmp = NULL;
        void *acc = tw_sched_acc(&s, &tmp);
        if (s.st != TW_OK) {
            break;
        }
        if (acc != op->sendbuf) {
            tw_sched_add(&s, (tw_coll_act_t){
                                 .kind = TW_ACT_COPY, .dst = acc, .a = op->sendbuf, .len = bytes});
        }
        if (!p.flat) {
            tw_sched_reduce_tree(&s, g->local, g->nlocal, g->my_local, p.lroot, acc, tmp, bytes, 0);
        }
        if (in_top && all) {
            tw_sched_allreduce(&s, p.top, p.ntop, p.toppos, acc, tmp, p.base);
        } else if (in_top) {
            tw_sched_reduce_tree(&s, p.top, p.ntop, p.toppos,
                                 p.flat ? op->root : g->node_idx[op->root], acc, tmp, bytes,
                                 p.base);
        }
        if (!p.flat && all) {
            tw_sched_bcast_tree(&s, g->local, g->nlocal, g->my_local, p.lroot, acc, bytes, p.tail);
        }
        break;
    }
    }
    return s.st;
}

size_t tw_coll_op_length(const tw_coll_op_t *op)
{
    switch (op->kind) {
    case TW_COLL_BARRIER:
        return 0;
    case TW_COLL_BCAST:
        return op->count;
    case TW_COLL_REDUCE:
    case TW_COLL_ALLREDUCE:
        return op->count * tw_coll_dtype_size(op->dt);
    }
    return 0;
}

void tw_coll_op_release(tw_coll_op_t *op)
{
    op->nacts = 0;
    op->cursor = 0;
}

void tw_coll_op_free(tw_coll_op_t *op)
{
    tw_free(op->acts, op->cap * sizeof(*op->acts));
    tw_free(op->scratch, op->scratch_len);
    op->acts = NULL;
    op->scratch = NULL;
    op->cap = 0;
    op->scratch_len = 0;
}
