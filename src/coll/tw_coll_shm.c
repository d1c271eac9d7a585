/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Collectives within a node through shared memory (tw_coll_shm.h has the
 * layout and the rules). The algorithms, with s = the operation's number
 * on the group + 1 and n members on this node:
 *
 *   barrier     every member stores arrive = 2s and waits for everyone's
 *               (one step, n - 1 reads: no release needed)
 *   fan-in/out  towards / from one member: arrive = 2s up, release = 2s+1
 *               down (a barrier across nodes: in, leaders, out)
 *   allreduce   up to 56 bytes: payload and arrive = 2s in one line, every
 *               member reads every line and reduces them in member order
 *               -- the same bits everywhere, one step. Larger: chunks of
 *               16 KiB through each member's ring of cells; chunk k is
 *               copied in, published (prog), every member reduces it from
 *               all cells in member order into its result, and acks.
 *   reduce      the same, only the root reads
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
#include "coll/tw_coll_shm.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll/tw_coll_int.h"
#include "coll/tw_coll_op.h"
#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "shmem/tw_seg.h"

#define TW_CSEG_MAGIC        0x7477637365673031ull /* "twcseg01" */
#define TW_CSEG_VERSION      2u
#define TW_CSEG_DESC_OFF     4096u
#define TW_CSHM_MEMBER_BYTES sizeof(tw_cshm_member_t)

_Static_assert(sizeof(tw_cshm_line_t) == 64, "a line is 64 bytes");
_Static_assert(sizeof(tw_cshm_member_t) == 512, "a member's lines are 4 x 128 bytes");
_Static_assert(sizeof(tw_cshm_head_t) == 128, "the head is 128 bytes");

typedef struct tw_cseg_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nlocal; /* ranks on the node */
    uint32_t nslots;
    uint32_t chunk;
    uint32_t cells;
    uint32_t reserved;
    uint64_t slot_bytes;
    uint64_t size;
    _Atomic uint64_t attached; /* a bit per local rank */
    /* Single-copy bcasts: the leader's TW_COLL_CMA, and a word of its
     * memory the others read at attach (process_vm_readv); a bit per
     * local rank that could. */
    uint64_t cma_min;
    uint64_t probe_pid;
    uint64_t probe_addr;
    uint64_t probe_value;
    _Atomic uint64_t cma_ok;
} tw_cseg_hdr_t;

typedef struct tw_cseg_desc {
    _Atomic uint64_t owner;   /* 0: free */
    _Atomic uint64_t members; /* local ranks still holding it (bits) */
    unsigned char pad[112];
} tw_cseg_desc_t;

/* The node segment as this rank sees it. */
struct tw_cshm_node {
    tw_seg_t seg;
    tw_cseg_hdr_t *hdr;
    tw_cseg_desc_t *desc;
    unsigned char *slots;
    int nlocal;     /* ranks on the node */
    int local_rank; /* mine among them */
    int *ranks;     /* [nlocal] their world ranks */
    uint64_t slot_bytes;
    unsigned nslots;
    atomic_uint claims; /* tokens */
    uint64_t spin_ns;   /* TW_COLL_SPIN, or 0 when the node's ranks outnumber its CPUs */
    int cpus;           /* CPUs this process may run on */
    atomic_int waiters; /* this process's threads in a blocking wait */
    uint64_t size;      /* of the segment */
    char name[TW_SEG_NAME_MAX];
    size_t cma_min; /* bcasts this large go by process_vm_readv; 0 = never (agreed) */
    pid_t pid;
};

/* Bytes of a cell on a node of @p nlocal ranks. */
static size_t tw_cshm_chunk(int nlocal)
{
    size_t c = TW_CSHM_CHUNK_MAX;
    for (int n = 4; n < nlocal && c > TW_CSHM_CHUNK_MIN; n *= 2) {
        c /= 2;
    }
    return c;
}

/* Sizes of one slot set for @p nlocal ranks. */
static uint64_t tw_cseg_slot_bytes(int nlocal)
{
    uint64_t ring = (uint64_t)tw_cshm_chunk(nlocal) * TW_CSHM_CELLS;
    uint64_t b = sizeof(tw_cshm_head_t) + (uint64_t)nlocal * (TW_CSHM_MEMBER_BYTES + ring);
    return (b + 4095) & ~(uint64_t)4095;
}

static uint64_t tw_cseg_slots_off(unsigned nslots)
{
    return (TW_CSEG_DESC_OFF + (uint64_t)nslots * sizeof(tw_cseg_desc_t) + 4095) & ~(uint64_t)4095;
}

/* ---- waiting and waking -------------------------------------------------- */

static long tw_futex(void *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

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

    for (unsigned polls = 1;; polls++) {
        if (atomic_load_explicit(w, memory_order_relaxed) >= target) {
            atomic_thread_fence(memory_order_acquire);
            break;
        }
        if ((polls & 255) != 0) {
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
             * may be one of them -- yield at once. (Counted only now: a
             * locked add right after publishing would stall until the
             * readers gave our line back.) */
            start = now;
            if (atomic_fetch_add_explicit(&node->waiters, 1, memory_order_relaxed) + 1 >
                node->cpus) {
                spin_ns = 0;
            }
        }
        if (now - start < spin_ns) {
            continue; /* spin */
        }
        if (now - start < spin_ns + 1000000u) {
            sched_yield(); /* let whoever shares this core run */
            continue;
        }
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
#define CS_AWAIT(op, j, w, t)                                 \
    do {                                                      \
        (op)->cs.pc = __LINE__;                               \
        /* fall through */                                    \
    case __LINE__:;                                           \
        tw_status_t st_ = tw_cshm_await((op), (j), (w), (t)); \
        if (st_ != TW_OK) {                                   \
            return st_;                                       \
        }                                                     \
    } while (0)

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
        if (a->sub == TW_CSHM_ALLREDUCE || a->sub == TW_CSHM_BARRIER || me == root) {
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
 */
static tw_status_t tw_cshm_chunks(tw_coll_op_t *op, tw_coll_act_t *a)
{
    tw_group_t *g = op->g;
    tw_cshm_bind_t *b = &g->shm;
    int n = g->nlocal, me = g->my_local, root = a->peer;
    uint64_t s = a->sn;
    bool bcast = a->sub == TW_CSHM_BCAST;
    size_t esize = bcast ? 1 : tw_coll_dtype_size(op->dt);
    size_t bytes = a->len * esize;
    /* Elements per chunk: whole elements only. */
    size_t per = bcast ? b->chunk : (b->chunk / esize) * esize;
    size_t nch = (bytes + per - 1) / per;
    bool writer = !bcast || me == root;
    bool reader = a->sub == TW_CSHM_ALLREDUCE || (me == root) != bcast;

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
                } else if (s > 1 && b->seen[op->cs.j] < s - 1) {
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->done, s - 1);
                    tw_cshm_saw(b, op->cs.j, s - 1);
                }
            }
            {
                size_t off = op->cs.k * per, len = TW_MIN(per, bytes - off);
                const unsigned char *src = bcast ? (const unsigned char *)a->dst : a->a;
                memcpy(b->cells[me] + (op->cs.k % TW_CSHM_CELLS) * b->chunk, src + off, len);
                tw_cshm_publish(b, &b->mem[me]->prog, TW_CSHM_PROG(s, op->cs.k + 1));
            }
        }
        if (reader) {
            for (op->cs.j = 0; op->cs.j < n; op->cs.j++) {
                if ((bcast && op->cs.j == root) || (!bcast && op->cs.j != me)) {
                    CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->prog, TW_CSHM_PROG(s, op->cs.k + 1));
                }
            }
            {
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
                    tw_cshm_reduce_all(op, dst, src, n, len / esize);
                }
                tw_cshm_publish(b, &b->mem[me]->ack, TW_CSHM_PROG(s, op->cs.k + 1));
            }
        }
    }
    CS_END(op);
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
                CS_AWAIT(op, op->cs.j, &b->mem[op->cs.j]->arrive[buf].seq, 2 * s);
                op->cs.k += b->mem[op->cs.j]->arrive[buf].data[0] != 1;
            }
        }
        if (op->cs.k > 0) {
            op->cs.pc = 0;
            return TW_ERR_TRANSPORT; /* they said why */
        }
    } else {
        CS_AWAIT(op, root, &b->mem[root]->release[buf].seq, 2 * s + 1);
        tw_cshm_saw(b, root, s - 1);
        memcpy(&m, b->mem[root]->release[buf].data, sizeof(m));
        st = m.len == a->len ? tw_cshm_cma_read((pid_t)m.pid, a->dst, m.addr, a->len)
                             : TW_ERR_INVALID;
        b->mem[me]->arrive[buf].data[0] = st == TW_OK ? 1 : 2;
        tw_cshm_publish(b, &b->mem[me]->arrive[buf].seq, 2 * s);
        if (st != TW_OK) {
            if (st == TW_ERR_INVALID) {
                tw_error("coll",
                         "bcast on a group of %d: the root has %llu bytes where %zu are due "
                         "(members called it with different sizes)",
                         g->n, (unsigned long long)m.len, a->len);
            } else if (st != TW_ERR_PEER_FAILED) { /* a root that died: its transport says so */
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

tw_status_t tw_cshm_step(tw_coll_op_t *op, tw_coll_act_t *a)
{
    size_t esize = a->sub == TW_CSHM_BCAST ? 1 : tw_coll_dtype_size(op->dt);
    tw_status_t st;

    op->shm_waiting = false;
    size_t cma_min = op->g->coll->node->cma_min;

    if (a->sub == TW_CSHM_BARRIER || a->sub == TW_CSHM_FANIN || a->sub == TW_CSHM_FANOUT ||
        a->len * esize <= TW_CSHM_INLINE) {
        st = tw_cshm_inline(op, a);
    } else if (a->sub == TW_CSHM_BCAST && cma_min > 0 && a->len >= cma_min && op->g->nlocal > 2) {
        /* Two members: the pipelined copy through the cells keeps both
         * busy and wins (1 MiB: 37 us against 64 us for one copy, measured
         * on 2 cores); from three on, the one copy each does wins. */
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

/* ---- the node segment ---------------------------------------------------- */

/* The leader's entry in its address blob: u64 size (host order: only the
 * ranks of its node read it), the segment's name with its NUL. */
#define TW_CSEG_ADDR_MIN 10u

static tw_status_t tw_cseg_layout(tw_cshm_node_t *node, uint64_t *size_p)
{
    node->slot_bytes = tw_cseg_slot_bytes(node->nlocal);
    *size_p = tw_cseg_slots_off(node->nslots) + node->nslots * node->slot_bytes;
    return TW_OK;
}

static void tw_cseg_map(tw_cshm_node_t *node)
{
    unsigned char *base = node->seg.base;

    node->hdr = (tw_cseg_hdr_t *)base;
    node->desc = (tw_cseg_desc_t *)(base + TW_CSEG_DESC_OFF);
    node->slots = base + tw_cseg_slots_off(node->nslots);
}

static bool tw_cseg_valid(const tw_cshm_node_t *node, uint64_t size)
{
    const tw_cseg_hdr_t *h = node->hdr;

    return h->magic == TW_CSEG_MAGIC && h->version == TW_CSEG_VERSION &&
           h->nlocal == (uint32_t)node->nlocal && h->nslots == node->nslots &&
           h->chunk == tw_cshm_chunk(node->nlocal) && h->cells == TW_CSHM_CELLS &&
           h->slot_bytes == node->slot_bytes && h->size == size;
}

/* What the node's other ranks read of the leader's memory at attach. */
static const uint64_t tw_cseg_probe_word = TW_CSEG_MAGIC ^ 0x5a5a5a5a5a5a5a5aull;

/* The leader: create and initialize the segment (its name still linked). */
static tw_status_t tw_cseg_create(tw_coll_t *coll, tw_cshm_node_t *node, uint64_t size)
{
    int nlocal = node->nlocal;
    tw_status_t st = tw_seg_make_name(coll->p.job_key, node->name, sizeof(node->name));

    if (st == TW_OK) {
        st = tw_seg_create(node->name, size, &node->seg);
    }
    if (st != TW_OK) {
        return st;
    }
    tw_cseg_map(node);
    tw_cseg_hdr_t *h = node->hdr;
    h->magic = TW_CSEG_MAGIC;
    h->version = TW_CSEG_VERSION;
    h->nlocal = (uint32_t)nlocal;
    h->nslots = node->nslots;
    h->chunk = (uint32_t)tw_cshm_chunk(nlocal);
    h->cells = TW_CSHM_CELLS;
    h->slot_bytes = node->slot_bytes;
    h->size = size;
    atomic_store(&h->attached, 1);
    h->cma_min = coll->cfg.cma_min;
    h->probe_pid = (uint64_t)node->pid;
    h->probe_addr = (uint64_t)(uintptr_t)&tw_cseg_probe_word;
    h->probe_value = tw_cseg_probe_word;
    atomic_store(&h->cma_ok, coll->cfg.cma_min > 0 ? 1 : 0);
    /* Slot set 0 is the world's, held by every local rank. */
    atomic_store(&node->desc[0].members, nlocal == 64 ? UINT64_MAX : (1ull << nlocal) - 1);
    atomic_store(&node->desc[0].owner, 1);
    return TW_OK;
}

static void tw_cshm_node_free(tw_cshm_node_t *node)
{
    if (node->seg.base != NULL) {
        if (node->local_rank == 0) {
            (void)tw_seg_unlink(&node->seg); /* tw_init failed before setup did */
        }
        tw_seg_detach(&node->seg);
    }
    tw_free(node->ranks, (size_t)node->nlocal * sizeof(int));
    tw_free(node, sizeof(*node));
}

tw_status_t tw_cshm_node_prepare(tw_coll_t *coll)
{
    tw_cshm_node_t *node;
    int me = coll->p.rank, mynode = coll->p.node_of[me], nlocal = 0;
    tw_status_t st;

    for (int r = 0; r < coll->p.size; r++) {
        nlocal += coll->p.node_of[r] == mynode;
    }
    if (nlocal < 2 || coll->cfg.slots == 0) {
        return TW_OK;
    }
    if (!coll->p.node_shm) {
        /* TW_TRANSPORTS without shm: no shared memory between the node's
         * ranks. */
        tw_debug("coll", "no shm transport: collectives within the node run point to point");
        return TW_OK;
    }
    if (nlocal > (int)TW_CSHM_MAX_LOCAL) {
        tw_warn("coll",
                "%d ranks on this node: shared-memory collectives serve at most %u; "
                "point to point instead",
                nlocal, TW_CSHM_MAX_LOCAL);
        return TW_OK;
    }
    node = tw_calloc(1, sizeof(*node));
    if (node == NULL || (node->ranks = tw_malloc((size_t)nlocal * sizeof(int))) == NULL) {
        tw_free(node, sizeof(*node));
        return TW_ERR_NOMEM;
    }
    node->seg.fd = -1;
    for (int r = 0; r < coll->p.size; r++) {
        if (coll->p.node_of[r] == mynode) {
            if (r == me) {
                node->local_rank = node->nlocal;
            }
            node->ranks[node->nlocal++] = r;
        }
    }
    node->nslots = coll->cfg.slots;
    atomic_init(&node->claims, 0);
    /* More ranks than CPUs: whoever we wait for needs our CPU -- yield at
     * once instead of spinning (the node's ranks share its CPUs). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    node->spin_ns = ncpu > 0 && nlocal > ncpu ? 0 : coll->cfg.spin_ns;
    cpu_set_t mask;
    node->cpus = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : (int)ncpu;
    node->cpus = node->cpus > 0 ? node->cpus : 1;
    atomic_init(&node->waiters, 0);
    node->pid = getpid();
    tw_cseg_layout(node, &node->size);
    if (node->local_rank == 0) {
        st = tw_cseg_create(coll, node, node->size);
        if (st != TW_OK) {
            tw_warn("coll", "no shared-memory collectives on this node (%s): point to point",
                    tw_strerror(st));
            tw_cshm_node_free(node);
            return TW_OK;
        }
    }
    coll->node = node;
    return TW_OK;
}

int tw_cshm_node_leader(const tw_coll_t *coll)
{
    const tw_cshm_node_t *node = coll->node;

    return node != NULL && node->local_rank != 0 ? node->ranks[0] : -1;
}

size_t tw_cshm_node_addr(const tw_coll_t *coll, void *buf, size_t room)
{
    const tw_cshm_node_t *node = coll->node;
    size_t n;

    if (node == NULL || node->local_rank != 0) {
        return 0;
    }
    n = strlen(node->name) + 1;
    if (room < 8 + n) {
        return 0;
    }
    memcpy(buf, &node->size, 8);
    memcpy((unsigned char *)buf + 8, node->name, n);
    return 8 + n;
}

void tw_cshm_node_attach(tw_coll_t *coll, const void *addr, size_t len)
{
    tw_cshm_node_t *node = coll->node;
    const unsigned char *a = addr;
    tw_status_t st = TW_ERR_PROTOCOL;

    if (node == NULL || node->local_rank == 0) {
        return;
    }
    if (addr == NULL) {
        /* The leader has none (it said why). */
        tw_debug("coll", "rank %d published no collectives segment: point to point",
                 node->ranks[0]);
        tw_cshm_node_free(node);
        coll->node = NULL;
        return;
    }
    uint64_t size = 0;
    if (len >= TW_CSEG_ADDR_MIN) {
        memcpy(&size, a, 8);
    }
    if (len >= TW_CSEG_ADDR_MIN && len - 8 <= sizeof(node->name) && a[len - 1] == '\0' &&
        size == node->size) {
        memcpy(node->name, a + 8, len - 8);
        st = tw_seg_attach(node->name, node->size, &node->seg);
    }
    if (st == TW_OK) {
        tw_cseg_map(node);
        st = tw_cseg_valid(node, node->size) ? TW_OK : TW_ERR_PROTOCOL;
    }
    if (st != TW_OK) {
        tw_warn("coll", "cannot attach the collectives' segment of rank %d (%s): point to point",
                node->ranks[0], tw_strerror(st));
        tw_cshm_node_free(node);
        coll->node = NULL;
        return;
    }
    atomic_fetch_or(&node->hdr->attached, 1ull << node->local_rank);
    /* Single copy needs every rank able to read the others' memory (yama's
     * ptrace_scope=1 refuses siblings): try the leader's word. */
    uint64_t v = 0;
    const tw_cseg_hdr_t *h = node->hdr;
    if (h->cma_min > 0 && coll->cfg.cma_min > 0 &&
        tw_cshm_cma_read((pid_t)h->probe_pid, &v, h->probe_addr, sizeof(v)) == TW_OK &&
        v == h->probe_value) {
        atomic_fetch_or(&node->hdr->cma_ok, 1ull << node->local_rank);
    }
}

tw_status_t tw_cshm_node_setup(tw_coll_t *coll)
{
    tw_cshm_node_t *node = coll->node;
    uint64_t all;

    if (node == NULL) {
        return TW_OK;
    }
    if (node->local_rank == 0) {
        (void)tw_seg_unlink(&node->seg); /* everyone attached, or never will */
    }
    /* Every rank attached before the exchange's closing barrier, so every
     * local rank reads the same mask here. */
    all = node->nlocal == 64 ? UINT64_MAX : (1ull << node->nlocal) - 1;
    node->cma_min = atomic_load(&node->hdr->cma_ok) == all ? (size_t)node->hdr->cma_min : 0;
    if (node->cma_min == 0 && node->hdr->cma_min > 0) {
        tw_debug("coll", "a rank of this node cannot read the others' memory (process_vm_readv; "
                         "see /proc/sys/kernel/yama/ptrace_scope): bcasts go through the cells");
    }
    if (atomic_load(&node->hdr->attached) != all) {
        /* Groups without the missing rank may still use the segment; the
         * world group may not. */
        tw_warn("coll", "a rank of this node could not attach the collectives' segment: the "
                        "world group runs point to point here");
        return TW_OK;
    }
    return tw_cshm_bind(coll->world, 0);
}

void tw_cshm_node_teardown(tw_coll_t *coll)
{
    tw_cshm_node_t *node = coll->node;

    if (node == NULL) {
        return;
    }
    tw_cshm_node_free(node);
    coll->node = NULL;
}

/* The node-local rank of world rank @p rank, or -1. */
static int tw_cshm_local_rank(const tw_cshm_node_t *node, int rank)
{
    for (int i = 0; i < node->nlocal; i++) {
        if (node->ranks[i] == rank) {
            return i;
        }
    }
    return -1;
}

/* Bits (node-local ranks) of @p g's members on this node. */
static uint64_t tw_cshm_bits(const tw_cshm_node_t *node, const tw_group_t *g)
{
    uint64_t bits = 0;

    for (int i = 0; i < g->nlocal; i++) {
        int lr = tw_cshm_local_rank(node, g->ranks[g->local[i]]);
        if (lr >= 0) {
            bits |= 1ull << lr;
        }
    }
    return bits;
}

bool tw_cshm_usable(tw_coll_t *coll, tw_group_t *g)
{
    tw_cshm_node_t *node = coll->node;

    if (node == NULL || g->nlocal < 2) {
        return false;
    }
    uint64_t bits = tw_cshm_bits(node, g);
    return (atomic_load_explicit(&node->hdr->attached, memory_order_acquire) & bits) == bits;
}

int tw_cshm_claim(tw_coll_t *coll, tw_group_t *g)
{
    tw_cshm_node_t *node = coll->node;
    uint64_t token;

    if (!tw_cshm_usable(coll, g)) {
        return -1;
    }
    token = ((uint64_t)(unsigned)coll->p.rank + 1) << 32 | (atomic_fetch_add(&node->claims, 1) + 1);
    for (unsigned i = 1; i < node->nslots; i++) {
        uint64_t free_ = 0;
        if (atomic_load_explicit(&node->desc[i].owner, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong_explicit(&node->desc[i].owner, &free_, token,
                                                     memory_order_acq_rel, memory_order_relaxed)) {
            continue;
        }
        /* Nobody holds it: the lines start from zero for the new group. */
        memset(node->slots + i * node->slot_bytes, 0,
               sizeof(tw_cshm_head_t) + (size_t)node->nlocal * TW_CSHM_MEMBER_BYTES);
        atomic_store_explicit(&node->desc[i].members, tw_cshm_bits(node, g), memory_order_release);
        return (int)i;
    }
    tw_debug("coll", "no free slot set (TW_COLL_SLOTS=%u): a group runs point to point",
             node->nslots);
    return -1;
}

tw_status_t tw_cshm_bind(tw_group_t *g, int slot)
{
    tw_cshm_node_t *node = g->coll->node;
    tw_cshm_bind_t *b = &g->shm;
    unsigned char *base;

    b->slot = -1;
    if (slot < 0 || node == NULL) {
        return TW_OK;
    }
    /* Named by a message (WELCOME): only a claimable set, never the
     * world's, and one that holds this group's members here. */
    if ((unsigned)slot >= node->nslots || (slot == 0) != g->world || g->nlocal > node->nlocal) {
        tw_error("coll", "slot set %d cannot serve this group (%u sets): refused", slot,
                 node->nslots);
        return TW_ERR_PROTOCOL;
    }
    b->mem = tw_calloc((size_t)g->nlocal, sizeof(*b->mem));
    b->cells = tw_calloc((size_t)g->nlocal, sizeof(*b->cells));
    b->seen = tw_calloc((size_t)g->nlocal, sizeof(*b->seen));
    if (b->mem == NULL || b->cells == NULL || b->seen == NULL) {
        tw_cshm_unbind(g);
        return TW_ERR_NOMEM;
    }
    base = node->slots + (size_t)slot * node->slot_bytes;
    b->chunk = tw_cshm_chunk(node->nlocal);
    b->head = (tw_cshm_head_t *)base;
    for (int j = 0; j < g->nlocal; j++) {
        b->mem[j] =
            (tw_cshm_member_t *)(base + sizeof(tw_cshm_head_t) + (size_t)j * TW_CSHM_MEMBER_BYTES);
        b->cells[j] = base + sizeof(tw_cshm_head_t) + (size_t)node->nlocal * TW_CSHM_MEMBER_BYTES +
                      (size_t)j * TW_CSHM_CELLS * b->chunk;
    }
    b->slot = slot;
    return TW_OK;
}

void tw_cshm_unbind(tw_group_t *g)
{
    tw_coll_t *coll = g->coll;
    tw_cshm_node_t *node = coll->node;
    tw_cshm_bind_t *b = &g->shm;
    size_t n = (size_t)g->nlocal;

    if (b->slot >= 0 && node != NULL) {
        /* Let go: mine, and the bits of members known gone. */
        uint64_t mine = 0;
        for (int i = 0; i < g->nlocal; i++) {
            int r = g->ranks[g->local[i]];
            int lr = tw_cshm_local_rank(node, r);
            if (lr >= 0 && (r == coll->p.rank || tw_coll_is_down(coll, r))) {
                mine |= 1ull << lr;
            }
        }
        tw_cseg_desc_t *d = &node->desc[b->slot];
        uint64_t old = atomic_fetch_and_explicit(&d->members, ~mine, memory_order_acq_rel);
        if (b->slot > 0 && (old & ~mine) == 0 && (old & mine) != 0) {
            atomic_store_explicit(&d->owner, 0, memory_order_release); /* the last one */
        }
    }
    tw_free(b->mem, n * sizeof(*b->mem));
    tw_free(b->cells, n * sizeof(*b->cells));
    tw_free(b->seen, n * sizeof(*b->seen));
    b->mem = NULL;
    b->cells = NULL;
    b->seen = NULL;
    b->slot = -1;
}

void tw_cshm_release(tw_group_t *g)
{
    tw_cshm_node_t *node = g->coll->node;
    tw_cshm_bind_t *b = &g->shm;

    if (b->slot > 0 && node != NULL) {
        atomic_store_explicit(&node->desc[b->slot].members, 0, memory_order_relaxed);
        atomic_store_explicit(&node->desc[b->slot].owner, 0, memory_order_release);
    }
    b->slot = -1;
    tw_cshm_unbind(g);
}

void tw_cshm_abort(tw_group_t *g)
{
    tw_cshm_bind_t *b = &g->shm;

    if (b->slot < 0) {
        return;
    }
    atomic_store_explicit(&b->head->abort, 1, memory_order_seq_cst);
    for (int j = 0; j < g->nlocal; j++) {
        tw_cshm_member_t *m = b->mem[j];
        _Atomic uint64_t *words[] = {
            &m->arrive[0].seq, &m->arrive[1].seq, &m->release[0].seq, &m->release[1].seq, &m->prog,
            &m->ack,           &m->done};
        for (size_t i = 0; i < TW_ARRAY_SIZE(words); i++) {
            (void)tw_futex((void *)words[i], FUTEX_WAKE, INT_MAX, NULL);
        }
    }
}
