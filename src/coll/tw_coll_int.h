/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Collectives internals: the context's part, groups, operations and their
 * schedules.
 *
 * A collective runs as a schedule: a list of actions (send, receive, wait
 * for a receive, reduce, copy) built when it is posted, then executed by
 * whoever drives it -- the calling thread for a blocking call, engine 0
 * for a nonblocking one (tw_coll_exec.c). Only one thread touches an
 * operation at a time: the caller until it hands it to the engine, the
 * engine after.
 *
 * Messages of collectives are the library's own tagged messages
 * (tw_msg_coll_*: no user tag meets them). A tag names the receiver's
 * group, the operation and the step, exactly:
 *
 *   bits 63..32  rid: the RECEIVER's id of the group -- its index in the
 *                receiver's group table (low 16 bits) and the generation
 *                of that entry (high 16): unique among the receiver's
 *                live groups, and a destroyed group's late messages name
 *                an older generation
 *   bits 31..8   the operation's sequence number on the group (mod 2^24:
 *                no member runs 2^24 collectives ahead of another)
 *   bits  7..0   the step (round) within the operation: 0 .. TW_COLL_STEP_MAX
 *
 * Group creation uses tags whose low byte is TW_COLL_STEP_JOIN / _WELCOME
 * and whose upper 56 bits hash the rank list and key: never an
 * operation's tag. Every member learns every other member's rid then.
 * The world group is entry 0, generation 0, on every rank: no exchange.
 */
#ifndef TW_COLL_INT_H
#define TW_COLL_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "coll/tw_coll.h"
#include "coll/tw_coll_shm.h"
#include "core/tw_lock.h"
#include "core/tw_stats.h"

#define TW_GROUP_MAGIC    0x74776770u /* "twgp" */
#define TW_COLL_STEP_MAX  0xFBu       /* last step an operation may use */
#define TW_COLL_STEP_JOIN 0xFFu       /* member -> first member: I am here */
#define TW_COLL_STEP_WELC 0xFEu       /* first member -> member: the rids */
#define TW_COLL_TAG(rid, seq, step) \
    (((uint64_t)(rid) << 32) | (((uint64_t)(seq)&0xFFFFFFu) << 8) | (uint64_t)(step))
#define TW_COLL_TAG_RID(tag)    ((uint32_t)((tag) >> 32))
#define TW_COLL_RID(index, gen) (((uint32_t)(gen) << 16) | (uint32_t)(index))
#define TW_COLL_TABLE_MAX       65536u /* group table entries (index is 16 bits) */

/* Control message kinds (tw_msg_coll_ctl payload byte 0). */
enum { TW_COLL_CTL_REVOKE = 1 };

typedef struct tw_coll_cfg {
    uint64_t create_timeout_ns; /* TW_COLL_CREATE_TIMEOUT */
    unsigned slots;             /* TW_COLL_SLOTS */
    uint64_t spin_ns;           /* TW_COLL_SPIN */
    size_t cma_min;             /* TW_COLL_CMA: 0 = never */
    size_t cma_ar_min;          /* TW_COLL_CMA_ALLREDUCE: 0 = never */
    size_t rsag_min;            /* TW_COLL_RSAG: 0 = never */
    int barrier;                /* TW_COLL_BARRIER: TW_CSHM_BARRIER_* */
} tw_coll_cfg_t;

enum {
    TW_COLL_STAT_OPS,     /* collectives completed */
    TW_COLL_STAT_NB,      /* of them nonblocking */
    TW_COLL_STAT_FAILED,  /* completed with an error */
    TW_COLL_STAT_SENT,    /* messages sent */
    TW_COLL_STAT_STAGED,  /* of them copied first (above the eager limit) */
    TW_COLL_STAT_DIRECT,  /* of them sent from the buffer and waited for (idem) */
    TW_COLL_STAT_REVOKES, /* revocations received */
    TW_COLL_STAT_GROUPS,  /* groups created */
    TW_COLL_STAT_BUSY,    /* calls refused: a collective outstanding on the group */
    TW_COLL_STAT_COUNT
};

typedef enum tw_coll_kind {
    TW_COLL_BARRIER,
    TW_COLL_BCAST,
    TW_COLL_REDUCE,
    TW_COLL_ALLREDUCE
} tw_coll_kind_t;

typedef enum tw_coll_act_kind {
    TW_ACT_SEND,   /* buf a, len bytes, to member peer at step */
    TW_ACT_RECV,   /* into dst, len bytes, from member peer at step */
    TW_ACT_WAIT,   /* until the receive at index `wait` completed */
    TW_ACT_REDUCE, /* dst = a (+) b, len elements */
    TW_ACT_COPY,   /* dst <- a, len bytes */
    TW_ACT_SHM     /* within the node's slot set: sub, root = peer (local position) */
} tw_coll_act_kind_t;

/* What a TW_ACT_SHM does (tw_coll_shm.c). */
enum {
    TW_CSHM_BARRIER,   /* every member */
    TW_CSHM_FANIN,     /* towards peer */
    TW_CSHM_FANOUT,    /* from peer */
    TW_CSHM_ALLREDUCE, /* a -> dst, len elements */
    TW_CSHM_REDUCE,    /* a -> dst at peer */
    TW_CSHM_BCAST      /* dst from peer, len bytes */
};

/* TW_COLL_BARRIER (its names' order). */
enum { TW_CSHM_BARRIER_AUTO, TW_CSHM_BARRIER_FLAT, TW_CSHM_BARRIER_GATHER };

/* Whether a send may go from the operation's buffer (tw_exec_send). */
typedef enum tw_coll_zc {
    TW_ZC_NEVER,  /* copied when large: the operation never waits for it */
    TW_ZC_ALWAYS, /* an exchange: its step waits for the partner's payload anyway */
    /* A tree's send, which nothing else waits for: from the buffer up to
     * TW_COLL_DIRECT_MAX bytes, which the sockets take at once; a larger
     * one would hold the sender until its receiver read most of it, where
     * a copy lets it return (the progress thread sends the rest). */
    TW_ZC_SMALL,
    TW_ZC_BCAST, /* a bcast tree's: the same up to TW_COLL_DIRECT_BCAST_MAX */
} tw_coll_zc_t;

/* TW_ZC_SMALL's bound (2 emulated nodes, reduce of 1 MiB: the wait cost
 * more than the copy, 422 us against 267; of 512 KiB and less, the copy
 * did). */
#define TW_COLL_DIRECT_MAX (512u * 1024u)
/* TW_ZC_BCAST's: a bcast of 1 MiB from the buffer took 150 us against 234
 * copied under cubic, 399 against 442 under bbr; of 2 and 4 MiB, 1.3-1.4x
 * the copy's time under bbr. */
#define TW_COLL_DIRECT_BCAST_MAX (1024u * 1024u)

typedef struct tw_coll_act {
    uint8_t kind;
    uint8_t step;
    uint8_t sub; /* TW_ACT_SHM */
    uint64_t sn; /* TW_ACT_SHM: its number among the group's shm steps (from 1) */
    bool posted; /* RECV, SEND from the buffer: handed to msg */
    bool done;   /* RECV: completed (or taken back); SEND: out of the buffer */
    uint8_t zc;  /* SEND: may go from the buffer (tw_coll_zc_t), a WAIT on it follows */
    int peer;    /* group rank */
    unsigned wait;
    void *dst;
    const void *a, *b;
    size_t len;
} tw_coll_act_t;

/* The stall watchdog (TW_STALL_WARN) on a wait for a member's word in
 * the node's slot set (tw_coll_shm.c): the word as last seen, when it last
 * moved (0: not yet looked), whether its line was written. */
typedef struct tw_cshm_stall {
    uint64_t last;
    uint64_t since;
    bool warned;
} tw_cshm_stall_t;

typedef struct tw_coll_op {
    tw_coll_kind_t kind;
    struct tw_group *g;
    uint64_t seq;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements (reductions), bytes (bcast) */
    tw_dtype_t dt;
    tw_redop_t rop;
    int root;
    tw_coll_act_t *acts;
    unsigned nacts, cap, cursor;
    unsigned outstanding;      /* receives posted, not completed */
    tw_status_t status;        /* first error */
    bool send_blocked;         /* the last send said AGAIN */
    bool shm_waiting;          /* a nonblocking one waits on the slot set */
    uint64_t posted_ns;        /* nonblocking: when it was posted */
    tw_cshm_stall_t shm_stall; /* nonblocking: the watchdog on its shm waits */
    struct {
        unsigned pc; /* where the shm coroutine stopped (0: start) */
        int j;
        size_t k;
    } cs;
    unsigned char *scratch;
    size_t scratch_len;
    /* nonblocking */
    bool nb;
    tw_cq_t *cq;
    void *user;
    struct tw_coll_op *next; /* the engine's list */
} tw_coll_op_t;

/* A group: immutable after creation except what is marked. */
struct tw_group {
    atomic_uint magic;
    tw_coll_t *coll;
    int n;          /* members */
    int me;         /* my group rank */
    int *ranks;     /* [n] world ranks */
    uint32_t *rids; /* [n] each member's id of the group (tags to it) */
    unsigned index; /* my table entry */
    uint64_t key;
    bool world;
    /* layout: the nodes the group spans */
    int nnodes;    /* nodes with members */
    int *node_idx; /* [n] member -> index of its node among the group's */
    int *leader;   /* [nnodes] first member (group order) on each node */
    int *local;    /* [nlocal] members on my node, group order */
    int *plan_top; /* [n] a schedule's top level (busy holder) */
    int nlocal;
    int my_local; /* my index in local */
    /* state */
    atomic_bool busy;   /* a collective is outstanding (the op below) */
    atomic_int failed;  /* 0, or the status every later collective gets */
    atomic_bool woken;  /* the failure was pushed to cq (once) */
    uint64_t seq;       /* next operation; written by the busy holder */
    tw_cshm_bind_t shm; /* this node's slot set, if any */
    uint64_t shm_sn;    /* shm steps scheduled; written by the busy holder */
    bool revoked;       /* the members were told it failed (busy holder) */
    int revoke_next;    /* the next member to tell (busy holder) */
    tw_cq_t *cq;        /* receive completions of the operation */
    int cq_fd;          /* engine 0 watches it (nonblocking), or -1 */
    tw_coll_op_t op;    /* the outstanding operation (busy) */
};

struct tw_coll {
    tw_coll_params_t p;
    tw_coll_cfg_t cfg;
    tw_stats_t *stats;
    tw_cq_t *send_cq;   /* completions of sends over TW_INJECT_MAX (frees staged copies) */
    tw_mutex_t lock;    /* the group table */
    tw_group_t **table; /* [table_len] live groups; guarded by lock */
    uint16_t *gen;      /* [table_len] generation of each entry; guarded by lock */
    unsigned table_len; /* guarded by lock */
    tw_group_t *world;
    struct tw_cshm_node *node; /* the node segment, or NULL */
    atomic_uchar *down;        /* [size]: 1 once the rank is gone */
    int timer_fd;              /* wakes engine 0 while nonblocking ones wait on shm */
    bool timer_armed;          /* engine 0's */
    /* engine 0's nonblocking operations: posted through its ring, then
     * the engine's alone */
    tw_coll_op_t *active;
    atomic_uint nactive;
    atomic_bool stopping;
};

/* ---- tw_coll.c ---------------------------------------------------------- */
/** The group of table entry @p rid (generation checked), with the table
 * lock held by the caller, or NULL. */
tw_group_t *tw_coll_lookup(tw_coll_t *coll, uint32_t rid) TW_REQUIRES(coll->lock);
/** Mark @p g failed with @p st (first one wins) and wake its waiter. */
void tw_group_fail(tw_group_t *g, tw_status_t st);
/** Take a free table entry for @p g: its rid. TW_ERR_NOMEM when full. */
tw_status_t tw_coll_table_add(tw_coll_t *coll, tw_group_t *g, uint32_t *rid_p);
void tw_coll_table_del(tw_coll_t *coll, tw_group_t *g);
/** End a nonblocking operation with @p st: the group is free again before
 * the caller can see the completion on its CQ. Thread: its driver. */
void tw_coll_nb_finish(tw_coll_t *coll, tw_coll_op_t *op, tw_status_t st);
/** Hand a posted operation to engine 0. */
void tw_coll_submit(tw_coll_t *coll, tw_coll_op_t *op);
/** Is world rank @p rank known gone? */
bool tw_coll_is_down(tw_coll_t *coll, int rank);
/** Wait on @p g's CQ until *pending receives (their user pointers are
 * bools, set on completion) completed or @p deadline_ns passed
 * (TW_ERR_TIMEOUT); the first failed one's status. */
tw_status_t tw_coll_wait_flags(tw_group_t *g, unsigned *pending, uint64_t deadline_ns);
/** Drain the send CQ (staged copies freed). Thread: any. */
void tw_coll_reap_sends(tw_coll_t *coll);

/* ---- tw_coll_group.c ------------------------------------------------------ */
/** A group object for @p ranks (layout computed, CQ made); rids unset. */
tw_status_t tw_group_alloc(tw_coll_t *coll, const int *ranks, int n, int me, tw_group_t **g_p);
void tw_group_free(tw_group_t *g);
/** Take @p g out of the table, drop what members sent it, free it. */
void tw_group_destroy_internal(tw_group_t *g);

/* ---- tw_coll_sched.c ------------------------------------------------------ */
/** Build @p op's schedule from its arguments (kind, buffers, root) and
 * the group's layout. TW_ERR_NOMEM. */
tw_status_t tw_coll_schedule(tw_coll_op_t *op);
/** The schedule of @p op when it is one shared-memory step (a group on
 * one node with a slot set; not a reduce's non-root, which reduces into
 * scratch): *@p a, without building a list; false otherwise. */
bool tw_coll_schedule_step(tw_coll_op_t *op, tw_coll_act_t *a);
void tw_coll_op_release(tw_coll_op_t *op);
/** Free what an operation keeps between uses (actions, scratch). */
void tw_coll_op_free(tw_coll_op_t *op);
/** Bytes of the operation's result (its completion's length). */
size_t tw_coll_op_length(const tw_coll_op_t *op);

/* ---- tw_coll_exec.c ------------------------------------------------------- */
/** Run @p op as far as it goes: TW_OK done, TW_ERR_AGAIN waiting, else
 * failed (every receive taken back or completed). Thread: its driver. */
tw_status_t tw_coll_exec(tw_coll_op_t *op, const tw_completion_t *c, int n);
/** Run a posted operation to its end in the calling thread. */
tw_status_t tw_coll_run(tw_coll_op_t *op);
/** Post and, for blocking calls, run: the body of every public call. */
tw_status_t tw_coll_post(tw_group_t *g, tw_coll_kind_t kind, const void *sendbuf, void *recvbuf,
                         size_t count, tw_dtype_t dt, tw_redop_t rop, int root, tw_cq_t *cq,
                         void *user, bool nb);
/** Send @p len bytes of @p buf to world rank @p dst with @p tag: copied
 * (injected up to TW_INJECT_MAX, without a completion; eager, or staged
 * when larger), so @p buf is free on return. */
tw_status_t tw_coll_send(tw_coll_t *coll, int dst, uint64_t tag, const void *buf, size_t len);

#endif /* TW_COLL_INT_H */
