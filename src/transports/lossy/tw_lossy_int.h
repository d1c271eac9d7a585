/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Internals of the lossy transport (tw_lossy.h), shared by its files:
 * tw_lossy.c (decisions, the ops, arrivals, progress), tw_lossy_hold.c
 * (held frames, deferred completions, the kill schedule) and
 * tw_lossy_iface.c (settings, wrap, close).
 *
 * Locking. `lock` guards the spec, the streams and path counts, the held
 * list and the deferred completions. Nothing calls the inner transport or
 * the layer above while holding it -- frames are collected, the lock is
 * dropped, then they are sent or delivered -- since self delivers inline
 * on the sending thread (back into our recv hook) and tcp lanes call the
 * recv hook from several engines at once.
 */
#ifndef TW_LOSSY_INT_H
#define TW_LOSSY_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tw_config.h"
#include "core/tw_lock.h"
#include "transports/base/tw_tl.h"
#include "transports/lossy/tw_fault.h"
#include "transports/lossy/tw_lossy.h"

#define TW_LOSSY_HOLD_MAX_NS 2000000u /* a reordered frame waits at most this long */

typedef struct tw_lossy_frame tw_lossy_frame_t;
struct tw_lossy_frame {
    tw_lossy_frame_t *next;
    size_t alloc_len;
    size_t hdr_len;
    size_t len;
    tw_fault_dir_t dir;
    int peer; /* tx: destination; rx: source */
    uint8_t am_id;
    unsigned copies;       /* sends or deliveries left (2 after dup) */
    uint64_t seq;          /* place in its path's stream */
    uint64_t release;      /* reorder: the path count that frees it; 0: none */
    uint64_t hold_until;   /* reorder: freed by then at the latest */
    uint64_t due;          /* delay: not before; 0: none */
    const void *zdata;     /* held by reference: the caller's payload ... */
    tw_tl_comp_t *comp;    /* ... and its completion; NULL: a copy */
    unsigned char bytes[]; /* header, then (copies) the payload */
};

/* A zero-copy completion to run from progress. */
typedef struct tw_lossy_done tw_lossy_done_t;
struct tw_lossy_done {
    tw_lossy_done_t *next;
    tw_tl_comp_t *comp;
};

typedef struct tw_lossy_path {
    tw_fault_rng_t rng[TW_FAULT_NDIRS];
    uint64_t draws[TW_FAULT_NDIRS]; /* decisions taken (to give one back) */
    uint64_t count[TW_FAULT_NDIRS]; /* frames that were not dropped */
} tw_lossy_path_t;

typedef struct tw_lossy_iface {
    tw_tl_iface_t super; /* the inner's attr, caps and pe; stats: fstats */
    /* Set by open, read-only after. */
    const char *name; /* the inner's, for log lines */
    tw_tl_iface_t *inner;
    tw_stats_t *fstats;
    uint64_t t0;              /* open: the schedule counts from here */
    int timer_fd;             /* rings at kill time */
    _Atomic uint64_t kill_at; /* absolute ns, UINT64_MAX: never (relaxed: a hint) */
    atomic_bool killed;       /* set once: sends fail, arrivals vanish */
    bool timer_watched;       /* engine owner only */
    bool kill_reported;       /* engine owner only */
    tw_mutex_t lock;
    /* Guarded by lock. */
    tw_fault_spec_t spec;
    tw_lossy_path_t *paths; /* [super.size] */
    uint64_t frames;        /* decisions taken, every peer and direction */
    tw_lossy_frame_t *held;
    tw_lossy_frame_t **held_tail;
    tw_lossy_done_t *done;
    tw_lossy_done_t **done_tail;
    bool in_blackhole; /* to say when it opens and heals */
} tw_lossy_iface_t;

/* What happens to one frame, and how to take the draw back. */
typedef struct tw_lossy_verdict {
    tw_fault_decision_t d;
    bool blackholed;
    uint64_t seq;          /* place in the path's stream (unless dropped) */
    uint64_t draw;         /* the path's draws before this one */
    tw_fault_rng_t before; /* the stream before this draw */
} tw_lossy_verdict_t;

extern const tw_tl_ops_t tw_lossy_ops;
extern const tw_cfg_table_t tw_lossy_cfg_table; /* TW_FAULT, TW_FAULT_ON, TW_FAULT_RANKS */
extern const char *const tw_lossy_dir_names[TW_FAULT_NDIRS]; /* "to", "from" */

extern const tw_tl_ops_t tw_lossy_ops;
extern const tw_cfg_table_t tw_lossy_cfg_table; /* TW_FAULT, TW_FAULT_ON, TW_FAULT_RANKS */
extern const char *const tw_lossy_dir_names[TW_FAULT_NDIRS]; /* "to", "from" */

static inline bool tw_lossy_is(const tw_tl_iface_t *iface)
{
    return iface != NULL && iface->ops == &tw_lossy_ops;
}

static inline tw_lossy_iface_t *tw_lossy_of(tw_tl_iface_t *iface)
{
    return (tw_lossy_iface_t *)iface;
}

static inline bool tw_lossy_spec_ok(const tw_fault_spec_t *spec)
{
    return spec->window >= 1 && spec->window <= TW_FAULT_WINDOW_MAX;
}

/* ---- tw_lossy_hold.c ---------------------------------------------------------------- */
tw_lossy_frame_t *tw_lossy_frame_new(tw_fault_dir_t dir, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len, bool by_ref);
void tw_lossy_flip(tw_lossy_frame_t *f, size_t bit);
void tw_lossy_hold(tw_lossy_iface_t *lossy, tw_lossy_frame_t *f, uint64_t seq, unsigned hold,
                   uint64_t delay_ns);
void tw_lossy_defer(tw_lossy_iface_t *lossy, tw_lossy_done_t *d, tw_tl_comp_t *comp);
tw_lossy_frame_t *tw_lossy_take_due_locked(tw_lossy_iface_t *lossy, uint64_t now)
    TW_REQUIRES(lossy->lock);
int tw_lossy_release(tw_lossy_iface_t *lossy, tw_lossy_frame_t *due, bool *stalled_p);
int tw_lossy_discard(tw_lossy_frame_t *list, tw_status_t st);
int tw_lossy_complete(tw_lossy_done_t *list);
void tw_lossy_arm_locked(tw_lossy_iface_t *lossy, uint64_t kill_ns) TW_REQUIRES(lossy->lock);
int tw_lossy_report_kill(tw_lossy_iface_t *lossy);

/* ---- tw_lossy_iface.c --------------------------------------------------------------- */
tw_status_t tw_lossy_query(char *why, size_t why_len);
tw_status_t tw_lossy_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                bool *wants_p);
tw_status_t tw_lossy_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                               const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
void tw_lossy_iface_close(tw_tl_iface_t *iface);

/* ---- tw_lossy.c ---------------------------------------------------------------------- */
void tw_lossy_bind_inner(tw_lossy_iface_t *lossy, const tw_tl_params_t *up);

#endif /* TW_LOSSY_INT_H */
