/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Internals of the reliability layer, shared by its files (README.md: the
 * overview, and which file does what).
 *
 * Locks. Each peer has a pthread mutex, p->lock. It guards the peer's
 * state (each field below says what guards it), and it is the one lock
 * on the reliable small-message path: taken once per send and once per
 * arrival. Its critical sections call the paths (a tcp write is a
 * syscall), too long for a spinlock that may share its CPU with the
 * holder (docs/decisions/rel-peer-lock.md). It is never held across an
 * upcall (the layer above's recv and peer_down) or a completion: what
 * is found under it goes into a tw_rel_deferred_t and is done after the
 * unlock (tw_rel_finish), and the deliverer drops it around each message
 * it hands up -- so a handler may send. A thread holds one peer's lock at a
 * time. Under it rel calls the paths' send ops, so a path must not call
 * rel back from inside one: a path that delivers on the sending thread
 * (self) gets no inline am ids (tw_rel_take_path). rel->arm_lock, the
 * timerfd's, is taken under p->lock and nothing is taken under it; the
 * one syscall a small send may make is re-arming the timerfd when its
 * deadline is the earliest (about once per window).
 *
 * "Lock held" in a function's comment: its caller holds p->lock of the
 * peer it is given.
 */
#ifndef TW_REL_INT_H
#define TW_REL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_lock.h"
#include "core/tw_mem.h"
#include "reliability/tw_rel.h"
#include "reliability/tw_rel_proto.h"

#define TW_REL_WIN       64u           /* unacknowledged fragments per peer */
#define TW_REL_MAX_SHORT (64u * 1024u) /* frames on a path, and an am_short, at most */
_Static_assert(TW_REL_MAX_SHORT >= TW_TL_SHORT_MIN, "rel's am_short holds TW_TL_SHORT_MIN");
#define TW_REL_SMALL 256u /* eager messages up to this (header + payload) are pooled */
#define TW_REL_POOL  64u  /* per peer */

/* Set while a waiting worker polls the transports (tw_rel_poll): what it
 * receives must not run user code here. */
extern TW_TLS bool tw_rel_in_worker;

/* An upper message being sent: room for a rel header (TW_REL_ROOM), the
 * upper header, then (eager) the payload -- so a first fragment's frame
 * header is built in place, in front of the upper header, not copied.
 * Fields without a note: set at post, read-only once it is queued. Once
 * on a tw_rel_deferred_t, all of it is that list owner's. */
#define TW_REL_ROOM sizeof(tw_rel_hdr_t)
typedef struct tw_rel_smsg {
    struct tw_rel_smsg *next; /* send queue or pool (p->lock), then the completion list */
    tw_tl_comp_t *comp;       /* zcopy: runs once every fragment is acked */
    const unsigned char *data;
    size_t len;
    size_t alloc_len;
    uint32_t nfrags;
    uint32_t issued, acked; /* fragments taken into the window, acked; p->lock */
    tw_status_t status;     /* for the completion list; p->lock */
    bool failing;           /* already on a failure list; p->lock */
    uint16_t hdr_len;
    uint8_t am_id;
    _Alignas(8) unsigned char bytes[]; /* TW_REL_ROOM, upper header, payload */
} tw_rel_smsg_t;

/* A fragment in the send window (in use while its seq is in [una, nxt)).
 * Every field: p->lock. */
typedef struct tw_rel_slot {
    tw_rel_smsg_t *msg; /* NULL once acked */
    uint64_t first_ns;  /* first transmission on its current path */
    uint64_t sent_ns;   /* last transmission; 0: not yet (the transport said AGAIN) */
    uint64_t due_ns;    /* (re)transmit at */
    uint64_t rto_ns;
    uint32_t frag;
    uint16_t tries;
    uint8_t path;
    bool acked;
    bool stamp_read;  /* sent_ns is a clock reading of its first send (RTT sample) */
    bool stamp_early; /* sent_ns is an earlier reading (TW_REL_STAMP_EARLY): not yet timed */
} tw_rel_slot_t;

/* A fragment held for its turn, or a whole message waiting for the
 * deliverer: upper header, then payload. Guarded by p->lock while it is
 * in ooo[], reasm or the delivery queue; the deliverer's once it took it
 * off the queue. */
typedef struct tw_rel_held {
    struct tw_rel_held *next;
    tw_rel_hdr_t h;
    size_t alloc_len;
    unsigned char bytes[];
} tw_rel_held_t;

/* One per rank, this one included. */
typedef struct tw_rel_peer {
    tw_mutex_t lock;
    /* Sending: p->lock. */
    uint32_t snd_una, snd_nxt;
    uint64_t srtt_ns, rttvar_ns; /* round-trip estimate (0: no sample yet) */
    uint64_t progress_ns;        /* an ack last acknowledged something new */
    uint64_t refused_ns;         /* the path has refused (AGAIN) every data frame since; 0: no */
    uint64_t clock_ns;           /* the latest clock reading made for this peer */
    unsigned untimed;            /* sends into an empty window since one read the clock */
    tw_rel_slot_t win[TW_REL_WIN];
    tw_rel_smsg_t *q_head, *q_tail; /* messages with fragments not yet in the window */
    tw_rel_smsg_t *pool;            /* free small eager messages */
    unsigned npool;
    unsigned nmsgs; /* messages not completely acked */
    /* Receiving: p->lock, but dstate. */
    uint32_t rcv_nxt;
    tw_rel_held_t *ooo[TW_REL_WIN];
    unsigned nooo;        /* how many of ooo[] are held */
    tw_rel_held_t *reasm; /* the message being put together */
    uint32_t reasm_next;
    tw_rel_held_t *dq_head, *dq_tail; /* complete, in order, for the deliverer */
    /* Who hands messages up (TW_REL_DELIVERING): one thread at a time.
     * Atomic: changed under p->lock, except that the deliverer of a lone
     * arrival leaves without it (tw_rel_deliverer_exit); TW_REL_PENDING:
     * work was queued for it meanwhile, so it must look again. */
    _Atomic unsigned dstate;
    bool engine_drain; /* dq's head runs user code: an engine hands it up */
    /* Acks owed: p->lock. */
    unsigned ack_owed;
    uint64_t ack_due; /* 0: no ack scheduled */
    uint32_t nacked;  /* the gap (rcv_nxt) last nacked */
    bool nack_valid;
    uint64_t crc_nack_ns;
    /* Paths: p->lock, but paths_reach. Sets of paths, bit g =
     * rel->paths[g]: those that reach the peer (set at wrap for this
     * rank, at addr_connect for the others, before ready; read-only
     * after, and read without the lock), those healthy for it (probed
     * back when not) and those dead for it. */
    uint8_t paths_reach, paths_up, paths_dead;
    uint8_t rx_path; /* where its last frame came in: answers go back there */
    uint8_t probe_ok[TW_REL_MAX_PATHS];
    uint64_t probe_due;
    /* Liveness: p->lock, but epoch. */
    uint32_t epoch; /* its incarnation: set before ready, read-only after (read unlocked) */
    uint64_t last_rx_ns, ping_due;
    unsigned pings; /* ping rounds since its last frame */
    bool down, left, reported;
    /* A path of it closed cleanly before its goodbye came: it is
     * finalizing. Nothing more is sent to it (it would not be received;
     * over tcp, a dial it refuses), what it still sends on other paths is
     * taken in, and its goodbye or its last path's close ends it. */
    bool closing;
    uint64_t closing_ns; /* when it began (keepalive counts silence from then) */
    /* The two per-message counters, bumped under p->lock (a plain load
     * and store, no atomic add) and summed into rel's stats on read, by
     * any thread (atomic relaxed). */
    _Atomic uint64_t n_frags_sent, n_delivered;
} tw_rel_peer_t;

/* Set at wrap, read-only after. */
typedef struct tw_rel_path {
    struct tw_rel *rel;
    tw_tl_iface_t *iface;
    unsigned index;
} tw_rel_path_t;

/* Fields without a note: set at wrap, read-only after. */
typedef struct tw_rel tw_rel_t;
struct tw_rel {
    tw_tl_iface_t super; /* what msg routes to (its callbacks set by bind, before traffic) */
    tw_rel_cfg_t cfg;
    uint64_t (*clock)(void);
    int rank;
    int size;
    tw_pe_t *pe;
    tw_rel_path_t paths[TW_REL_MAX_PATHS];
    tw_tl_iface_t *inner[TW_REL_MAX_PATHS]; /* the paths' ifaces (owned) */
    unsigned npaths;
    uint32_t epoch;
    size_t frag_cap; /* upper header + payload bytes per fragment */
    tw_rel_peer_t *peers;
    int timer_fd;
    uint64_t wakeups; /* engine 0's progress function only */
    unsigned passes;  /* the same: its passes */
    /* The earliest deadline any peer has. Any thread, atomic relaxed:
     * lowered by a CAS (tw_rel_arm), reset by the timer pass. */
    _Atomic uint64_t next_due;
    /* What the timerfd is armed for (UINT64_MAX: nothing). Written under
     * arm_lock, or reset by the timer pass's CAS; any thread reads it
     * relaxed, to skip the lock. */
    _Atomic uint64_t armed_at;
    tw_mutex_t arm_lock; /* the timerfd's setting; nothing is taken under it */
    bool timer_used;     /* an engine thread sleeps on the timerfd; set at ready, then read-only */
    atomic_flag in_pass; /* held by the thread that runs the timer pass */
    /* Some peer's engine_drain is set: set (release) under that peer's
     * lock, taken (acq_rel exchange) by the engine. */
    atomic_bool drain_wanted;
    /* tw_finalize's quiesce began: set once (relaxed), read under a
     * peer's lock (tw_rel_path_lost). */
    atomic_bool leaving;
    atomic_uint_fast64_t logged; /* tw_rel_should_log's count; any thread, relaxed */
    tw_stats_t *stats;
};

/* Work found under a peer's lock, deferred until it is released: a
 * local of the thread that holds the lock. */
typedef struct tw_rel_deferred {
    tw_rel_smsg_t *done; /* completions to run, then free */
    bool report;
    tw_status_t why;
} tw_rel_deferred_t;

/* What the time a fragment is pushed with (tw_rel_push's @p now) is. */
typedef enum {
    TW_REL_STAMP_READ,   /* a clock reading made for this send: an RTT sample */
    TW_REL_STAMP_LATEST, /* the peer's latest reading, made for this burst */
    TW_REL_STAMP_EARLY   /* the peer's latest reading, possibly much older */
} tw_rel_stamp_t;

/* The time an arrival is handled at, read from the clock only when
 * something needs it exact (tw_rel_now): otherwise the peer's latest
 * reading (made by an earlier arrival, a send that sampled the round
 * trip, or a timer pass -- which runs at least every TW_REL_PROBE while
 * anything drives progress). What may use that earlier reading errs on
 * the safe side with it: an ack deadline comes early, not late; path and
 * keepalive deadlines, which count seconds, come a little early. */
typedef struct tw_rel_now {
    uint64_t ns;
    bool read;
} tw_rel_now_t;

/* Time from @p t to @p now; 0 if another thread stamped @p t after this
 * one read @p now. */
static inline uint64_t tw_rel_since(uint64_t now, uint64_t t)
{
    return now > t ? now - t : 0;
}

static inline bool tw_seq_lt(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

/* Count one event in a per-peer counter. Lock held: one writer. */
static inline void tw_rel_count(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* The path a peer's traffic goes on: the first healthy one; -1: none.
 * Lock held. */
static inline int tw_rel_cur_path(const tw_rel_peer_t *p) TW_REQUIRES(p->lock)
{
    uint8_t ok = p->paths_up & p->paths_reach;
    return ok == 0 ? -1 : __builtin_ctz(ok);
}

/* The retransmission timeout of a fresh fragment: srtt + 4 rttvar
 * (Jacobson), within [TW_REL_RTO, TW_REL_RTO_MAX]. Lock held. */
static inline uint64_t tw_rel_rto(const tw_rel_t *rel, const tw_rel_peer_t *p) TW_REQUIRES(p->lock)
{
    uint64_t rto = p->srtt_ns + 4 * p->rttvar_ns;
    return TW_MIN(TW_MAX(rto, rel->cfg.rto_ns), rel->cfg.rto_max_ns);
}

/* tw_rel_tx.c */
tw_status_t tw_rel_tx_ctrl(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint8_t type, int g,
                           uint32_t cookie) TW_REQUIRES(p->lock);
tw_status_t tw_rel_tx_data(tw_rel_t *rel, tw_rel_peer_t *p, int peer, tw_rel_slot_t *s,
                           uint32_t seq, uint64_t now, tw_rel_deferred_t *todo)
    TW_REQUIRES(p->lock);
void tw_rel_push(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now, tw_rel_stamp_t stamp,
                 tw_rel_deferred_t *todo) TW_REQUIRES(p->lock);
tw_status_t tw_rel_post(tw_rel_t *rel, int peer, uint8_t am_id, const void *hdr, size_t hdr_len,
                        const void *data, size_t len, bool copy, tw_tl_comp_t *comp, bool bye);
tw_status_t tw_rel_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len);
tw_status_t tw_rel_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);

/* tw_rel_ack.c */
bool tw_rel_mark_acked(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_slot_t *s, tw_rel_now_t *t,
                       tw_rel_deferred_t *todo) TW_REQUIRES(p->lock);
void tw_rel_nack_apply(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                       uint64_t now, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock);

/* tw_rel_rx.c */
void tw_rel_recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len);
void tw_rel_rndv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len, size_t len,
                    tw_tl_rndv_t *rndv);
int tw_rel_engine_drain(tw_rel_t *rel);

/* tw_rel_timer.c */
void tw_rel_timer_at(tw_rel_t *rel, uint64_t due);
int tw_rel_timers(tw_rel_t *rel, bool check);
int tw_rel_progress_op(tw_tl_iface_t *iface);

/* tw_rel_path.c */
/* Our goodbye, after everything else we sent the peer, waits for its
 * ack. Lock held. */
bool tw_rel_bye_unacked(const tw_rel_peer_t *p) TW_REQUIRES(p->lock);
void tw_rel_path_lost(tw_rel_t *rel, tw_rel_peer_t *p, int peer, int g, bool dead, const char *what,
                      uint64_t now, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock);
void tw_rel_peer_fail(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const char *what,
                      tw_rel_deferred_t *todo) TW_REQUIRES(p->lock);
void tw_rel_peer_down_cb(void *arg, int peer, tw_status_t why);
void tw_rel_probe_answered(tw_rel_t *rel, tw_rel_peer_t *p, int peer, unsigned g)
    TW_REQUIRES(p->lock);
uint64_t tw_rel_probe(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now) TW_REQUIRES(p->lock);

/* Something is outstanding at @p due: make sure a pass looks then. Any
 * thread; may hold a peer's lock. */
static inline void tw_rel_arm(tw_rel_t *rel, uint64_t due)
{
    uint64_t cur = atomic_load_explicit(&rel->next_due, memory_order_relaxed);

    while (due < cur &&
           !atomic_compare_exchange_weak_explicit(&rel->next_due, &cur, due, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    if (rel->timer_used) {
        tw_rel_timer_at(rel, due);
    }
}

/* The exact time, read once per arrival (@p t); raises the peer's
 * latest reading. Lock held. */
static inline uint64_t tw_rel_now(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_now_t *t)
    TW_REQUIRES(p->lock)
{
    if (!t->read) {
        t->read = true;
        t->ns = rel->clock();
        p->clock_ns = TW_MAX(p->clock_ns, t->ns);
    }
    return t->ns;
}

static inline void tw_rel_smsg_free(tw_rel_smsg_t *m)
{
    tw_free(m, m->alloc_len);
}

static inline void tw_rel_held_free(tw_rel_held_t *h)
{
    tw_free(h, h->alloc_len);
}

/* After the lock (not held): completions, then the report upward. */
static inline void tw_rel_finish(tw_rel_t *rel, int peer, tw_rel_deferred_t *todo)
{
    while (todo->done != NULL) {
        tw_rel_smsg_t *m = todo->done;
        todo->done = m->next;
        if (m->comp != NULL) {
            m->comp->cb(m->comp, m->status);
        }
        tw_rel_smsg_free(m);
    }
    if (todo->report) {
        todo->report = false;
        if (rel->super.peer_down != NULL) {
            rel->super.peer_down(rel->super.peer_down_arg, peer, todo->why);
        }
    }
}

#endif /* TW_REL_INT_H */
