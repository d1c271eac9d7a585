/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The lossy transport (tw_lossy.h): seeded faults on another transport's
 * active messages.
 *
 * Decisions. Every frame sent to peer p (am_short, am_zcopy) or arriving
 * from it (the recv hook) draws one tw_fault_decide from the stream of
 * (p, direction), under the iface lock: a seed gives the same faults to
 * the same frames of a path. A send the inner transport refuses
 * (TW_ERR_AGAIN, or an error) gives its draw back when no other frame of
 * that path drew since, so back-pressure does not shift the faults of the
 * frames that follow.
 *
 * Faults on the way out: drop returns TW_OK having sent nothing; corrupt
 * sends a copy with one bit flipped (bits count the header bytes first,
 * then the payload); dup sends twice; reorder and delay copy the frame
 * and hold it. A zero-copy frame is faulted by copy only when header and
 * payload fit the inner's max_short: the copy goes out with am_short and
 * the caller's completion runs from our progress (never inline). A larger
 * one is forwarded uncorrupted and not duplicated; reordered or delayed,
 * it is held by reference (header copied) and forwarded with the caller's
 * completion when released. On the way in the same faults apply to what
 * is delivered to the layer above.
 *
 * Holding. A held frame remembers its place `seq` in its path's stream
 * (the frames that were not dropped). Reordered with hold h, it is
 * released once h later frames of that path went by, or 2 ms after it was
 * held, whichever comes first; delayed, not before delay_time. Released
 * frames leave from progress on the engine (tx: inner am_short, kept for
 * the next pass on TW_ERR_AGAIN; rx: the caller's recv) in the order they
 * would have left one by one: by release point, then seq. The engine must
 * not sleep through a hold it cannot see, so progress reports an event
 * while anything is held, and a thread that holds a frame wakes it.
 *
 * Schedule (from open). The kill is noticed by the first frame decided
 * after it or by progress (a timerfd wakes a sleeping engine at kill
 * time), whichever comes first; from then on sends fail with
 * TW_ERR_PEER_FAILED, arrivals vanish, held frames are discarded, and
 * progress reports peer_down(TW_ERR_PEER_FAILED) once for every other
 * rank the inner reaches. The blackhole drops every frame in
 * [blackhole, blackhole + blackhole_for) and says when it opens and heals.
 *
 * Locking. `lock` guards the spec, the streams and path counts, the held
 * list and the deferred completions. Nothing calls the inner transport or
 * the layer above while holding it -- frames are collected, the lock is
 * dropped, then they are sent or delivered -- since self delivers inline
 * on the sending thread (back into our recv hook) and tcp lanes call the
 * recv hook from several engines at once.
 */
#include "transports/lossy/tw_lossy.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"

#define TW_LOSSY_HOLD_MAX_NS 2000000u /* a reordered frame waits at most this long */

static const tw_stat_desc_t tw_lossy_stat_descs[TW_LOSSY_STAT_COUNT] = {
    [TW_LOSSY_STAT_DROPPED] = {"dropped", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_CORRUPTED] = {"corrupted", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_DUPLICATED] = {"duplicated", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_REORDERED] = {"reordered", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_DELAYED] = {"delayed", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_BLACKHOLED] = {"blackholed", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_KILLED_PATHS] = {"killed_paths", TW_STAT_COUNTER},
};

static const char *const tw_lossy_dir_names[TW_FAULT_NDIRS] = {"to", "from"};

/* A frame held back (reorder, delay, a duplicate the inner refused). */
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
    pthread_mutex_t lock;
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

static bool tw_lossy_is(const tw_tl_iface_t *iface)
{
    return iface != NULL && iface->ops == &tw_lossy_ops;
}

/* The layer above names frame classes; the fault rules speak of types. */
_Static_assert(TW_FAULT_DATA == (int)TW_TL_FRAME_DATA && TW_FAULT_ACK == (int)TW_TL_FRAME_ACK &&
                   TW_FAULT_NACK == (int)TW_TL_FRAME_NACK &&
                   TW_FAULT_CTRL == (int)TW_TL_FRAME_CTRL &&
                   TW_FAULT_NTYPES == (int)TW_TL_FRAME_NCLASSES,
               "fault types are frame classes");

static tw_fault_type_t tw_lossy_type_of(uint8_t frame_class)
{
    return frame_class < TW_FAULT_NTYPES ? (tw_fault_type_t)frame_class : TW_FAULT_DATA;
}

static tw_lossy_iface_t *tw_lossy_of(tw_tl_iface_t *iface)
{
    return (tw_lossy_iface_t *)iface;
}

static bool tw_lossy_spec_ok(const tw_fault_spec_t *spec)
{
    return spec->window >= 1 && spec->window <= TW_FAULT_WINDOW_MAX;
}

/* ---- decisions ----------------------------------------------------------------- */

/* The first sign of the kill. Thread: any. */
static void tw_lossy_kill(tw_lossy_iface_t *lossy)
{
    if (atomic_exchange_explicit(&lossy->killed, true, memory_order_acq_rel)) {
        return;
    }
    tw_stats_inc(lossy->fstats, TW_LOSSY_STAT_KILLED_PATHS);
    tw_info("lossy", "%s: path of rank %d killed (TW_FAULT kill): its peers are reported failed",
            lossy->name, lossy->super.rank);
    tw_pe_wake(lossy->super.pe); /* the report is the engine's */
}

static void tw_lossy_judge(tw_lossy_iface_t *lossy, tw_fault_dir_t dir, int peer, uint8_t am_id,
                           size_t frame_len, tw_lossy_verdict_t *v)
{
    const uint8_t *cls = lossy->super.am_class;
    tw_fault_type_t type = am_id < 64 && cls != NULL ? tw_lossy_type_of(cls[am_id]) : TW_FAULT_DATA;
    uint64_t elapsed = tw_time_ns() - lossy->t0, bh_at, bh_len;
    tw_lossy_path_t *path;
    int news = 0; /* 1: the blackhole opened, 2: it healed */

    pthread_mutex_lock(&lossy->lock);
    path = &lossy->paths[peer];
    v->before = path->rng[dir];
    v->draw = path->draws[dir]++;
    tw_fault_decide(&lossy->spec, &path->rng[dir], dir, type, frame_len, elapsed, &v->d);
    bh_at = lossy->spec.blackhole_ns;
    bh_len = lossy->spec.blackhole_len_ns;
    /* blackhole_after: from the N-th frame decided on (either way, any
     * peer) the path is dark for good, however fast the frames come. */
    bool dark = lossy->spec.blackhole_frames != 0 && lossy->frames >= lossy->spec.blackhole_frames;
    lossy->frames++;
    if (dark && !v->d.killed) {
        v->d = (tw_fault_decision_t){.drop = true};
    }
    v->blackholed =
        v->d.drop && !v->d.killed &&
        (dark || (bh_at != 0 && elapsed >= bh_at && (bh_len == 0 || elapsed - bh_at < bh_len)));
    v->seq = v->d.drop ? 0 : path->count[dir]++;
    if (v->blackholed && !lossy->in_blackhole) {
        lossy->in_blackhole = true;
        news = 1;
    } else if (lossy->in_blackhole && !v->d.killed && lossy->spec.blackhole_frames == 0 &&
               (bh_at == 0 || (bh_len != 0 && elapsed - bh_at >= bh_len))) {
        lossy->in_blackhole = false;
        news = 2;
    }
    pthread_mutex_unlock(&lossy->lock);

    if (news == 1) {
        tw_info("lossy",
                "%s: blackhole open on rank %d at %.3f ms (TW_FAULT blackhole): every "
                "frame is lost%s",
                lossy->name, lossy->super.rank, (double)elapsed / 1e6,
                bh_len != 0 && lossy->spec.blackhole_frames == 0 ? " until it heals" : "");
    } else if (news == 2) {
        tw_info("lossy", "%s: blackhole on rank %d healed at %.3f ms", lossy->name,
                lossy->super.rank, (double)elapsed / 1e6);
    }
    if (v->d.killed) {
        tw_lossy_kill(lossy);
    } else if (v->d.drop || v->d.corrupt || v->d.dup || v->d.hold > 0 || v->d.delay_ns > 0) {
        tw_debug("lossy", "%s: frame %s %d (am %u, %zu bytes):%s%s%s%s%s", lossy->name,
                 tw_lossy_dir_names[dir], peer, am_id, frame_len,
                 v->blackholed ? " blackholed"
                 : v->d.drop   ? " dropped"
                               : "",
                 v->d.corrupt ? " corrupted" : "", v->d.dup ? " duplicated" : "",
                 v->d.hold > 0 ? " reordered" : "", v->d.delay_ns > 0 ? " delayed" : "");
    }
}

/* Give the draw back: the frame never left (the inner refused it). */
static void tw_lossy_undo(tw_lossy_iface_t *lossy, tw_fault_dir_t dir, int peer,
                          const tw_lossy_verdict_t *v)
{
    pthread_mutex_lock(&lossy->lock);
    tw_lossy_path_t *path = &lossy->paths[peer];
    if (path->draws[dir] == v->draw + 1) { /* nobody drew since */
        path->rng[dir] = v->before;
        path->draws[dir] = v->draw;
        if (!v->d.drop) {
            path->count[dir]--;
        }
    }
    pthread_mutex_unlock(&lossy->lock);
}

static void tw_lossy_count(tw_lossy_iface_t *lossy, const tw_lossy_verdict_t *v, bool corrupt,
                           bool dup)
{
    if (corrupt) {
        tw_stats_inc(lossy->fstats, TW_LOSSY_STAT_CORRUPTED);
    }
    if (dup) {
        tw_stats_inc(lossy->fstats, TW_LOSSY_STAT_DUPLICATED);
    }
    if (v->d.hold > 0) {
        tw_stats_inc(lossy->fstats, TW_LOSSY_STAT_REORDERED);
    }
    if (v->d.delay_ns > 0) {
        tw_stats_inc(lossy->fstats, TW_LOSSY_STAT_DELAYED);
    }
}

/* ---- held frames and deferred completions --------------------------------------- */

/* A copy of the frame (@p by_ref: of the header only). */
static tw_lossy_frame_t *tw_lossy_frame_new(tw_fault_dir_t dir, int peer, uint8_t am_id,
                                            const void *hdr, size_t hdr_len, const void *data,
                                            size_t len, bool by_ref)
{
    size_t alloc_len = sizeof(tw_lossy_frame_t) + hdr_len + (by_ref ? 0 : len);
    tw_lossy_frame_t *f = tw_malloc(alloc_len);

    if (f == NULL) {
        tw_error("lossy", "cannot allocate a %zu-byte copy of a frame %s %d", alloc_len,
                 tw_lossy_dir_names[dir], peer);
        return NULL;
    }
    memset(f, 0, sizeof(*f));
    f->alloc_len = alloc_len;
    f->hdr_len = hdr_len;
    f->len = len;
    f->dir = dir;
    f->peer = peer;
    f->am_id = am_id;
    f->copies = 1;
    if (hdr_len > 0) {
        memcpy(f->bytes, hdr, hdr_len);
    }
    if (!by_ref && len > 0) {
        memcpy(f->bytes + hdr_len, data, len);
    }
    return f;
}

static void tw_lossy_flip(tw_lossy_frame_t *f, size_t bit)
{
    f->bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
}

/* Hold @p f: @p hold later frames of its path (0: none), @p delay_ns. */
static void tw_lossy_hold(tw_lossy_iface_t *lossy, tw_lossy_frame_t *f, uint64_t seq, unsigned hold,
                          uint64_t delay_ns)
{
    uint64_t now = tw_time_ns();

    f->seq = seq;
    f->release = hold > 0 ? seq + 1 + hold : 0;
    f->hold_until = now + TW_LOSSY_HOLD_MAX_NS;
    f->due = delay_ns > 0 ? now + delay_ns : 0;
    f->next = NULL;
    pthread_mutex_lock(&lossy->lock);
    *lossy->held_tail = f;
    lossy->held_tail = &f->next;
    pthread_mutex_unlock(&lossy->lock);
    tw_pe_wake(lossy->super.pe);
}

/* Complete @p comp from progress (@p d: a node allocated beforehand). */
static void tw_lossy_defer(tw_lossy_iface_t *lossy, tw_lossy_done_t *d, tw_tl_comp_t *comp)
{
    d->comp = comp;
    d->next = NULL;
    pthread_mutex_lock(&lossy->lock);
    *lossy->done_tail = d;
    lossy->done_tail = &d->next;
    pthread_mutex_unlock(&lossy->lock);
    tw_pe_wake(lossy->super.pe);
}

/* Take the held frames that may leave now. */
static tw_lossy_frame_t *tw_lossy_take_due_locked(tw_lossy_iface_t *lossy, uint64_t now)
{
    tw_lossy_frame_t *due = NULL, **due_tail = &due, **pp = &lossy->held;

    while (*pp != NULL) {
        tw_lossy_frame_t *f = *pp;
        const tw_lossy_path_t *path = &lossy->paths[f->peer];
        if (now < f->due ||
            (f->release != 0 && path->count[f->dir] < f->release && now < f->hold_until)) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        f->next = NULL;
        *due_tail = f;
        due_tail = &f->next;
    }
    lossy->held_tail = pp;
    return due;
}

/* Release order: by release point (a delayed frame's is its own place),
 * then by place. Frames of different paths compare arbitrarily. */
static bool tw_lossy_before(const tw_lossy_frame_t *a, const tw_lossy_frame_t *b)
{
    uint64_t ka = a->release != 0 ? a->release : a->seq;
    uint64_t kb = b->release != 0 ? b->release : b->seq;

    return ka != kb ? ka < kb : a->seq < b->seq;
}

/* Merge sort of a list (stable). */
static tw_lossy_frame_t *tw_lossy_sort(tw_lossy_frame_t *list)
{
    tw_lossy_frame_t *slow = list, *fast, *a, *b, *out = NULL, **tail = &out;

    if (list == NULL || list->next == NULL) {
        return list;
    }
    for (fast = list->next; fast != NULL && fast->next != NULL; fast = fast->next->next) {
        slow = slow->next;
    }
    b = slow->next;
    slow->next = NULL;
    a = tw_lossy_sort(list);
    b = tw_lossy_sort(b);
    while (a != NULL && b != NULL) {
        tw_lossy_frame_t **take = tw_lossy_before(b, a) ? &b : &a;
        *tail = *take;
        tail = &(*take)->next;
        *take = (*take)->next;
    }
    *tail = a != NULL ? a : b;
    return out;
}

/* Send a released frame; TW_ERR_AGAIN keeps it (what was sent is not
 * sent again), else it is freed. Thread: engine owner. */
static tw_status_t tw_lossy_send_held(tw_lossy_iface_t *lossy, tw_lossy_frame_t *f)
{
    tw_tl_iface_t *inner = lossy->inner;
    tw_status_t st;

    if (f->comp != NULL) {
        st = tw_tl_am_zcopy(inner, f->peer, f->am_id, f->bytes, f->hdr_len, f->zdata, f->len,
                            f->comp);
        if (st == TW_ERR_AGAIN) {
            return st;
        }
        if (st != TW_OK) {
            f->comp->cb(f->comp, st); /* the inner took nothing: it completes here */
        }
    } else {
        for (; f->copies > 0; f->copies--) {
            st = tw_tl_am_short(inner, f->peer, f->am_id, f->bytes, f->hdr_len,
                                f->bytes + f->hdr_len, f->len);
            if (st == TW_ERR_AGAIN) {
                return st;
            }
            if (st != TW_OK) {
                tw_debug("lossy", "%s: held frame to %d lost: %s", lossy->name, f->peer,
                         tw_strerror(st));
            }
        }
    }
    tw_free(f, f->alloc_len);
    return TW_OK;
}

/* Send or deliver released frames in release order. On TW_ERR_AGAIN the
 * outgoing rest goes back to the head of the held list, in order (sets
 * *stalled_p). Returns frames handled. Thread: engine owner. */
static int tw_lossy_release(tw_lossy_iface_t *lossy, tw_lossy_frame_t *due, bool *stalled_p)
{
    tw_lossy_frame_t *back = NULL, **back_tail = &back, *next;
    bool stalled = false;
    int n = 0;

    for (tw_lossy_frame_t *f = tw_lossy_sort(due); f != NULL; f = next) {
        next = f->next;
        f->next = NULL;
        if (f->dir == TW_FAULT_RX) {
            bool killed = atomic_load_explicit(&lossy->killed, memory_order_acquire);
            for (; f->copies > 0 && !killed; f->copies--) {
                lossy->super.recv(lossy->super.recv_arg, f->peer, f->am_id, f->bytes, f->hdr_len,
                                  f->bytes + f->hdr_len, f->len);
            }
            tw_free(f, f->alloc_len);
            n++;
            continue;
        }
        if (!stalled && tw_lossy_send_held(lossy, f) == TW_OK) {
            n++;
            continue;
        }
        stalled = true; /* the inner is full: keep the order, retry next pass */
        *back_tail = f;
        back_tail = &f->next;
    }
    if (back != NULL) {
        pthread_mutex_lock(&lossy->lock);
        *back_tail = lossy->held;
        if (lossy->held == NULL) {
            lossy->held_tail = back_tail;
        }
        lossy->held = back;
        pthread_mutex_unlock(&lossy->lock);
    }
    *stalled_p = stalled;
    return n;
}

/* Free frames that will never leave; a zero-copy one completes with @p st. */
static int tw_lossy_discard(tw_lossy_frame_t *list, tw_status_t st)
{
    int n = 0;

    for (tw_lossy_frame_t *f = list, *next; f != NULL; f = next) {
        next = f->next;
        if (f->comp != NULL) {
            f->comp->cb(f->comp, st);
        }
        tw_free(f, f->alloc_len);
        n++;
    }
    return n;
}

static int tw_lossy_complete(tw_lossy_done_t *list)
{
    int n = 0;

    for (tw_lossy_done_t *d = list, *next; d != NULL; d = next) {
        next = d->next;
        d->comp->cb(d->comp, TW_OK);
        tw_free(d, sizeof(*d));
        n++;
    }
    return n;
}

/* ---- kill schedule ---------------------------------------------------------------- */

/* Set the kill time from @p kill_ns (0: never). Caller holds lossy->lock,
 * so the timer and the spec agree. */
static void tw_lossy_arm_locked(tw_lossy_iface_t *lossy, uint64_t kill_ns)
{
    uint64_t at = kill_ns == 0                       ? UINT64_MAX
                  : kill_ns > UINT64_MAX - lossy->t0 ? UINT64_MAX
                                                     : lossy->t0 + kill_ns;
    struct itimerspec its;

    memset(&its, 0, sizeof(its)); /* zero: disarmed */
    if (at != UINT64_MAX) {
        its.it_value.tv_sec = (time_t)(at / 1000000000u);
        its.it_value.tv_nsec = (long)(at % 1000000000u);
    }
    atomic_store_explicit(&lossy->kill_at, at, memory_order_relaxed);
    if (timerfd_settime(lossy->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
        tw_warn("lossy",
                "%s: cannot arm the kill timer (timerfd_settime: %m): the kill is "
                "noticed by traffic only",
                lossy->name);
    }
}

/* Tell the layer above that every peer this path reached is gone.
 * Thread: engine owner. */
static int tw_lossy_report_kill(tw_lossy_iface_t *lossy)
{
    tw_tl_iface_t *inner = lossy->inner;
    int n = 1;

    lossy->kill_reported = true;
    if (lossy->timer_watched) {
        tw_pe_unwatch(lossy->super.pe, lossy->timer_fd);
        lossy->timer_watched = false;
    }
    for (int peer = 0; peer < lossy->super.size; peer++) {
        if (peer == lossy->super.rank || !tw_tl_reachable(inner, peer)) {
            continue;
        }
        if (lossy->super.peer_down != NULL) {
            lossy->super.peer_down(lossy->super.peer_down_arg, peer, TW_ERR_PEER_FAILED);
        }
        n++;
    }
    return n;
}

/* ---- the ops ---------------------------------------------------------------------- */

static tw_status_t tw_lossy_tx(tw_lossy_iface_t *lossy, int peer, uint8_t am_id, const void *hdr,
                               size_t hdr_len, const void *data, size_t len, bool zcopy,
                               tw_tl_comp_t *comp)
{
    tw_tl_iface_t *inner = lossy->inner;
    const size_t max_short = inner->attr.max_short;
    const bool fits = hdr_len <= max_short && len <= max_short - hdr_len;
    tw_lossy_done_t *done = NULL;
    tw_lossy_frame_t *f = NULL;
    tw_lossy_verdict_t v;
    bool by_copy, corrupt, dup, held;
    tw_status_t st;

    if (atomic_load_explicit(&lossy->killed, memory_order_acquire)) {
        return TW_ERR_PEER_FAILED;
    }
    if (peer < 0 || peer >= lossy->super.size ||
        (zcopy ? hdr_len > inner->attr.max_hdr || len > inner->attr.max_zcopy || comp == NULL
               : !fits)) {
        /* Not a frame the inner takes: its own refusal, no draw. */
        return zcopy ? tw_tl_am_zcopy(inner, peer, am_id, hdr, hdr_len, data, len, comp)
                     : tw_tl_am_short(inner, peer, am_id, hdr, hdr_len, data, len);
    }
    if (zcopy) {
        done = tw_malloc(sizeof(*done)); /* before the draw: no failure after it */
        if (done == NULL) {
            tw_error("lossy", "cannot allocate a completion record for a frame to %d", peer);
            return TW_ERR_NOMEM;
        }
    }
    tw_lossy_judge(lossy, TW_FAULT_TX, peer, am_id, hdr_len + len, &v);
    if (v.d.killed) {
        st = TW_ERR_PEER_FAILED;
        goto out;
    }
    if (v.d.drop) {
        tw_stats_inc(lossy->fstats,
                     v.blackholed ? TW_LOSSY_STAT_BLACKHOLED : TW_LOSSY_STAT_DROPPED);
        if (zcopy) {
            tw_lossy_defer(lossy, done, comp);
            done = NULL;
        }
        st = TW_OK;
        goto out;
    }
    by_copy = !zcopy || fits;
    corrupt = v.d.corrupt && by_copy;
    dup = v.d.dup && by_copy;
    held = v.d.hold > 0 || v.d.delay_ns > 0;
    if (corrupt || held || (zcopy && dup)) {
        f = tw_lossy_frame_new(TW_FAULT_TX, peer, am_id, hdr, hdr_len, data, len, !by_copy);
        if (f == NULL) {
            tw_lossy_undo(lossy, TW_FAULT_TX, peer, &v);
            st = TW_ERR_NOMEM;
            goto out;
        }
        if (corrupt) {
            tw_lossy_flip(f, v.d.bit);
        }
    }
    if (held) {
        f->copies = dup ? 2 : 1;
        if (!by_copy) {
            f->zdata = data;
            f->comp = comp;
        } else if (zcopy) {
            tw_lossy_defer(lossy, done, comp); /* copied: the caller's buffer is free */
            done = NULL;
        }
        tw_lossy_count(lossy, &v, corrupt, dup);
        tw_lossy_hold(lossy, f, v.seq, v.d.hold, v.d.delay_ns);
        f = NULL;
        st = TW_OK;
        goto out;
    }
    if (zcopy && !corrupt) {
        st = tw_tl_am_zcopy(inner, peer, am_id, hdr, hdr_len, data, len, comp);
    } else if (f != NULL) {
        st = tw_tl_am_short(inner, peer, am_id, f->bytes, hdr_len, f->bytes + hdr_len, len);
    } else {
        st = tw_tl_am_short(inner, peer, am_id, hdr, hdr_len, data, len);
    }
    if (st != TW_OK) {
        tw_lossy_undo(lossy, TW_FAULT_TX, peer, &v);
        goto out;
    }
    if (zcopy && corrupt) {
        tw_lossy_defer(lossy, done, comp); /* the corrupted copy went out short */
        done = NULL;
    }
    if (dup) {
        /* A zero-copy frame's second copy comes from f: its completion may
         * already have run (self, inline ids) and freed the payload. */
        tw_status_t st2 = f != NULL ? tw_tl_am_short(inner, peer, am_id, f->bytes, hdr_len,
                                                     f->bytes + hdr_len, len)
                                    : tw_tl_am_short(inner, peer, am_id, hdr, hdr_len, data, len);
        if (st2 == TW_ERR_AGAIN) {
            if (f == NULL) {
                f = tw_lossy_frame_new(TW_FAULT_TX, peer, am_id, hdr, hdr_len, data, len, false);
            }
            if (f != NULL) {
                tw_lossy_hold(lossy, f, v.seq, 0, 0); /* the next pass sends it */
                f = NULL;
            }
        } else if (st2 != TW_OK) {
            tw_debug("lossy", "%s: duplicate to %d lost: %s", lossy->name, peer, tw_strerror(st2));
        }
    }
    tw_lossy_count(lossy, &v, corrupt, dup);
    st = TW_OK;
out:
    if (f != NULL) {
        tw_free(f, f->alloc_len);
    }
    tw_free(done, sizeof(*done));
    return st;
}

static tw_status_t tw_lossy_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len)
{
    return tw_lossy_tx(tw_lossy_of(iface), peer, am_id, hdr, hdr_len, data, len, false, NULL);
}

static tw_status_t tw_lossy_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len,
                                     tw_tl_comp_t *comp)
{
    return tw_lossy_tx(tw_lossy_of(iface), peer, am_id, hdr, hdr_len, data, len, true, comp);
}

/* The inner's arrivals. Thread: an engine owner, or the sender (inline ids). */
static void tw_lossy_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                          const void *data, size_t len)
{
    tw_lossy_iface_t *lossy = arg;
    tw_lossy_frame_t *f = NULL;
    tw_lossy_verdict_t v;
    bool held;

    if (atomic_load_explicit(&lossy->killed, memory_order_acquire)) {
        return;
    }
    if (src < 0 || src >= lossy->super.size) { /* not a path of ours: untouched */
        lossy->super.recv(lossy->super.recv_arg, src, am_id, hdr, hdr_len, data, len);
        return;
    }
    tw_lossy_judge(lossy, TW_FAULT_RX, src, am_id, hdr_len + len, &v);
    if (v.d.killed) {
        return;
    }
    if (v.d.drop) {
        tw_stats_inc(lossy->fstats,
                     v.blackholed ? TW_LOSSY_STAT_BLACKHOLED : TW_LOSSY_STAT_DROPPED);
        return;
    }
    held = v.d.hold > 0 || v.d.delay_ns > 0;
    if (v.d.corrupt || held) {
        f = tw_lossy_frame_new(TW_FAULT_RX, src, am_id, hdr, hdr_len, data, len, false);
        if (f == NULL) {
            v.d = (tw_fault_decision_t){0}; /* logged; better delivered unharmed than lost */
            held = false;
        } else if (v.d.corrupt) {
            tw_lossy_flip(f, v.d.bit);
        }
    }
    tw_lossy_count(lossy, &v, v.d.corrupt, v.d.dup);
    if (held) {
        f->copies = v.d.dup ? 2 : 1;
        tw_lossy_hold(lossy, f, v.seq, v.d.hold, v.d.delay_ns);
        return;
    }
    if (f != NULL) {
        hdr = f->bytes;
        data = f->bytes + hdr_len;
    }
    for (int i = v.d.dup ? 2 : 1; i > 0; i--) {
        lossy->super.recv(lossy->super.recv_arg, src, am_id, hdr, hdr_len, data, len);
    }
    if (f != NULL) {
        tw_free(f, f->alloc_len);
    }
}

static void tw_lossy_recv_rndv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                               size_t len, tw_tl_rndv_t *rndv)
{
    tw_lossy_iface_t *lossy = arg;

    lossy->super.recv_rndv(lossy->super.recv_arg, src, am_id, hdr, hdr_len, len, rndv);
}

static void tw_lossy_peer_down(void *arg, int peer, tw_status_t why)
{
    tw_lossy_iface_t *lossy = arg;

    if (lossy->super.peer_down != NULL) {
        lossy->super.peer_down(lossy->super.peer_down_arg, peer, why);
    }
}

static int tw_lossy_progress(tw_tl_iface_t *iface)
{
    tw_lossy_iface_t *lossy = tw_lossy_of(iface);
    tw_lossy_frame_t *due = NULL, *dead = NULL;
    tw_lossy_done_t *done;
    int events = 0;
    uint64_t now = tw_time_ns();
    bool killed, busy, stalled;

    if (now >= atomic_load_explicit(&lossy->kill_at, memory_order_relaxed)) {
        tw_lossy_kill(lossy);
    }
    killed = atomic_load_explicit(&lossy->killed, memory_order_acquire);
    pthread_mutex_lock(&lossy->lock);
    done = lossy->done;
    lossy->done = NULL;
    lossy->done_tail = &lossy->done;
    if (killed) {
        dead = lossy->held;
        lossy->held = NULL;
        lossy->held_tail = &lossy->held;
    } else if (lossy->held != NULL) {
        due = tw_lossy_take_due_locked(lossy, now);
    }
    busy = lossy->held != NULL;
    pthread_mutex_unlock(&lossy->lock);

    if (killed && !lossy->kill_reported) {
        events += tw_lossy_report_kill(lossy);
    }
    events += tw_lossy_release(lossy, due, &stalled);
    events += tw_lossy_discard(dead, TW_ERR_PEER_FAILED);
    events += tw_lossy_complete(done);
    /* Held frames wait on clocks the engine cannot see: keep it awake. */
    return events + (busy || stalled ? 1 : 0);
}

static int tw_lossy_poll(tw_tl_iface_t *iface)
{
    return tw_tl_poll(tw_lossy_of(iface)->inner);
}

static bool tw_lossy_reachable(tw_tl_iface_t *iface, int peer)
{
    return tw_tl_reachable(tw_lossy_of(iface)->inner, peer);
}

/* Registration is the inner's (its keys, its device): faults are injected
 * on frames, not on one-sided operations. */
static tw_status_t tw_lossy_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                                    size_t *key_len_p, void **handle_p)
{
    tw_tl_iface_t *inner = tw_lossy_of(iface)->inner;

    return tw_tl_mem_reg(inner, addr, len, key, key_len_p, handle_p);
}

static tw_status_t tw_lossy_mem_dereg(tw_tl_iface_t *iface, void *handle)
{
    tw_tl_iface_t *inner = tw_lossy_of(iface)->inner;

    return tw_tl_mem_dereg(inner, handle);
}

static tw_status_t tw_lossy_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                                      uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    tw_tl_iface_t *inner = tw_lossy_of(iface)->inner;

    return tw_tl_put_zcopy(inner, peer, src, len, raddr, rkey, comp);
}

static tw_status_t tw_lossy_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                                      uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    tw_tl_iface_t *inner = tw_lossy_of(iface)->inner;

    return tw_tl_get_zcopy(inner, peer, dst, len, raddr, rkey, comp);
}

static tw_status_t tw_lossy_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp)
{
    tw_tl_iface_t *inner = tw_lossy_of(iface)->inner;

    return tw_tl_flush(inner, peer, comp);
}

static tw_status_t tw_lossy_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *rndv, void *dst,
                                     size_t len, tw_tl_comp_t *comp)
{
    tw_tl_iface_t *inner = tw_lossy_of(iface)->inner;

    return tw_tl_rndv_get(inner, rndv, dst, len, comp);
}

static tw_status_t tw_lossy_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

/* ---- settings ---------------------------------------------------------------------- */

typedef struct tw_lossy_cfg {
    char fault[TW_CFG_STRLEN]; /* TW_FAULT: the spec (tw_fault.h) */
    char on[TW_CFG_STRLEN];    /* TW_FAULT_ON: which transports (empty: all) */
    char ranks[TW_CFG_STRLEN]; /* TW_FAULT_RANKS: in which ranks (empty: all) */
} tw_lossy_cfg_t;

static const tw_cfg_entry_t tw_lossy_cfg_entries[] = {
    {.name = "TW_FAULT",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "fault injection (testing): e.g. drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=42",
     .offset = offsetof(tw_lossy_cfg_t, fault)},
    {.name = "TW_FAULT_ON",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "transports TW_FAULT applies to (comma list); empty = every one",
     .offset = offsetof(tw_lossy_cfg_t, on)},
    {.name = "TW_FAULT_RANKS",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "ranks in which TW_FAULT applies (comma list); empty = every one",
     .offset = offsetof(tw_lossy_cfg_t, ranks)},
};

static const tw_cfg_table_t tw_lossy_cfg_table = {
    .module = "lossy",
    .entries = tw_lossy_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_lossy_cfg_entries),
};

/* Read TW_FAULT*: *@p any_p says whether there is anything to inject.
 * Every transport and rank the lists name must exist: a typo would
 * silently inject nothing. */
static tw_status_t tw_lossy_settings(const tw_tl_params_t *params, tw_lossy_cfg_t *c,
                                     tw_fault_spec_t *spec, bool *any_p)
{
    char why[128], buf[TW_CFG_STRLEN];
    char *save = NULL, *end;

    *any_p = false;
    tw_cfg_set_defaults(&tw_lossy_cfg_table, c);
    if (tw_cfg_apply_env(&tw_lossy_cfg_table, c) != TW_OK) {
        return TW_ERR_INVALID;
    }
    if (c->fault[0] == '\0') {
        return TW_OK;
    }
    if (tw_fault_parse(c->fault, spec, why, sizeof(why)) != TW_OK) {
        tw_error("init", "TW_FAULT=%s: %s", c->fault, why);
        return TW_ERR_INVALID;
    }
    snprintf(buf, sizeof(buf), "%s", c->on);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        if (tw_tl_find(t) == NULL) {
            tw_error("init", "TW_FAULT_ON=%s: no transport '%s'", c->on, t);
            return TW_ERR_INVALID;
        }
    }
    snprintf(buf, sizeof(buf), "%s", c->ranks);
    save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        long r = strtol(t, &end, 10);
        if (*end != '\0' || r < 0 || r >= params->size) {
            tw_error("init", "TW_FAULT_RANKS=%s: '%s' is not a rank of this job of %d", c->ranks, t,
                     params->size);
            return TW_ERR_INVALID;
        }
    }
    *any_p = spec->any;
    return TW_OK;
}

static tw_status_t tw_lossy_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                       bool *wants_p)
{
    tw_lossy_cfg_t c;
    tw_fault_spec_t spec;
    char rank[16];
    bool any;
    tw_status_t st = tw_lossy_settings(params, &c, &spec, &any);

    snprintf(rank, sizeof(rank), "%d", params->rank);
    *wants_p = st == TW_OK && any && tw_cfg_list_has(c.on, inner->ops->name, NULL) &&
               tw_cfg_list_has(c.ranks, rank, NULL);
    return st;
}

static tw_status_t tw_lossy_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                                      const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    tw_lossy_cfg_t c;
    tw_fault_spec_t spec;
    bool any;
    tw_status_t st;

    if (n != 1) {
        tw_error("lossy", "lossy wraps one transport at a time, not %u", n);
        return TW_ERR_INVALID;
    }
    st = tw_lossy_settings(params, &c, &spec, &any);
    if (st != TW_OK) {
        return st;
    }
    tw_info("init", "transport %s: fault injection TW_FAULT=%s", inner[0]->ops->name, c.fault);
    return tw_lossy_wrap(inner[0], params, &spec, iface_p);
}

/* ---- open --------------------------------------------------------------------------- */

/* The inner delivers to our hooks; what it may deliver inline, and the
 * frame classes, are the layer above's. */
static void tw_lossy_bind_inner(tw_lossy_iface_t *lossy, const tw_tl_params_t *up)
{
    tw_tl_params_t hooks = *up;

    hooks.recv = tw_lossy_recv;
    hooks.recv_arg = lossy;
    hooks.recv_rndv = up->recv_rndv != NULL ? tw_lossy_recv_rndv : NULL;
    hooks.peer_down = tw_lossy_peer_down;
    hooks.peer_down_arg = lossy;
    tw_tl_bind(lossy->inner, &hooks);
}

static void tw_lossy_bind(tw_tl_iface_t *iface, const tw_tl_params_t *up)
{
    tw_tl_iface_bind(iface, up);
    tw_lossy_bind_inner(tw_lossy_of(iface), up);
}

static void tw_lossy_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_lossy_ops = {
    .name = "lossy",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_PUT | TW_TL_CAP_GET |
            TW_TL_CAP_FLUSH | TW_TL_CAP_RNDV | TW_TL_CAP_POLL | TW_TL_CAP_MEM_REG |
            TW_TL_CAP_INLINE_SEND | TW_TL_CAP_WRAPPER,
    .cfg = &tw_lossy_cfg_table,
    .query = tw_lossy_query,
    .iface_open = tw_tl_stub_iface_open,
    .wrap_wants = tw_lossy_wrap_wants,
    .wrap_open = tw_lossy_wrap_open,
    .iface_close = tw_lossy_iface_close,
    .bind = tw_lossy_bind,
    .addr_pack = tw_tl_noaddr_pack,
    .addr_connect = tw_tl_noaddr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_lossy_reachable,
    .am_short = tw_lossy_am_short,
    .am_zcopy = tw_lossy_am_zcopy,
    .put_zcopy = tw_lossy_put_zcopy,
    .get_zcopy = tw_lossy_get_zcopy,
    .flush = tw_lossy_flush,
    .rndv_get = tw_lossy_rndv_get,
    .progress = tw_lossy_progress,
    .poll = tw_lossy_poll,
    .mem_reg = tw_lossy_mem_reg,
    .mem_dereg = tw_lossy_mem_dereg,
};

tw_status_t tw_lossy_wrap(tw_tl_iface_t *inner, const tw_tl_params_t *params,
                          const tw_fault_spec_t *spec, tw_tl_iface_t **iface_p)
{
    tw_lossy_iface_t *lossy;
    char name[64];
    tw_status_t st;

    if (inner == NULL || params == NULL || spec == NULL || iface_p == NULL || params->size < 1 ||
        params->recv == NULL || !tw_lossy_spec_ok(spec)) {
        tw_error("lossy", "tw_lossy_wrap: NULL argument, no recv callback or a bad spec");
        return TW_ERR_INVALID;
    }
    lossy = tw_calloc(1, sizeof(*lossy));
    if (lossy == NULL) {
        tw_error("lossy", "cannot allocate a lossy iface for %s", inner->ops->name);
        return TW_ERR_NOMEM;
    }
    lossy->paths = tw_calloc((size_t)params->size, sizeof(*lossy->paths));
    if (lossy->paths == NULL) {
        tw_error("lossy", "cannot allocate fault streams for %d peers", params->size);
        st = TW_ERR_NOMEM;
        goto err_free;
    }
    snprintf(name, sizeof(name), "lossy:%s", inner->ops->name);
    lossy->fstats = tw_stats_create(name, tw_lossy_stat_descs, TW_LOSSY_STAT_COUNT);
    if (lossy->fstats == NULL) {
        tw_error("lossy", "%s: cannot allocate counters", name);
        st = TW_ERR_NOMEM;
        goto err_paths;
    }
    lossy->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (lossy->timer_fd < 0) {
        tw_error("lossy", "%s: cannot create the kill timer (timerfd_create: %m)", name);
        st = TW_ERR_TRANSPORT;
        goto err_stats;
    }
    if (pthread_mutex_init(&lossy->lock, NULL) != 0) {
        tw_error("lossy", "%s: cannot initialise a mutex", name);
        st = TW_ERR_NOMEM;
        goto err_timer;
    }
    st = tw_pe_watch(inner->pe, lossy->timer_fd); /* logs its failure */
    if (st != TW_OK) {
        goto err_mutex;
    }
    lossy->timer_watched = true;
    lossy->spec = *spec;
    for (int peer = 0; peer < params->size; peer++) {
        for (int dir = 0; dir < TW_FAULT_NDIRS; dir++) {
            tw_fault_rng_init(&lossy->paths[peer].rng[dir], spec->seed, params->rank, peer,
                              (tw_fault_dir_t)dir);
        }
    }
    lossy->held_tail = &lossy->held;
    lossy->done_tail = &lossy->done;
    atomic_init(&lossy->killed, false);
    atomic_init(&lossy->kill_at, UINT64_MAX);
    lossy->name = inner->name;
    lossy->inner = inner;
    /* It runs where the inner runs, and does what the inner does. */
    tw_tl_wrapper_init(&lossy->super, &tw_lossy_ops, params, inner->caps, lossy->fstats,
                       &lossy->inner, 1);
    lossy->super.name = inner->name;
    lossy->super.pe = inner->pe;
    lossy->super.attr = inner->attr;
    tw_lossy_bind_inner(lossy, params);
    lossy->t0 = tw_time_ns();
    pthread_mutex_lock(&lossy->lock);
    tw_lossy_arm_locked(lossy, spec->kill_ns);
    pthread_mutex_unlock(&lossy->lock);
    tw_debug("lossy",
             "%s wrapped with faults (seed %" PRIu64 ", blackhole %" PRIu64 " ns for %" PRIu64
             " ns, kill %" PRIu64 " ns)",
             inner->ops->name, spec->seed, spec->blackhole_ns, spec->blackhole_len_ns,
             spec->kill_ns);
    *iface_p = &lossy->super;
    return TW_OK;

err_mutex:
    pthread_mutex_destroy(&lossy->lock);
err_timer:
    close(lossy->timer_fd);
err_stats:
    tw_stats_destroy(lossy->fstats);
err_paths:
    tw_free(lossy->paths, (size_t)params->size * sizeof(*lossy->paths));
err_free:
    tw_free(lossy, sizeof(*lossy));
    return st;
}

/* After the engine stopped, and after the inner closed (tw_tl_close):
 * what it still delivered came through our hooks; now what we hold is
 * dropped (a zero-copy frame held by reference completes TW_ERR_CANCELED)
 * and deferred completions run. */
static void tw_lossy_iface_close(tw_tl_iface_t *iface)
{
    tw_lossy_iface_t *lossy = tw_lossy_of(iface);
    tw_lossy_frame_t *held;
    tw_lossy_done_t *done;

    if (lossy->timer_watched) {
        tw_pe_unwatch(lossy->super.pe, lossy->timer_fd);
    }
    close(lossy->timer_fd);
    pthread_mutex_lock(&lossy->lock);
    held = lossy->held;
    done = lossy->done;
    lossy->held = NULL;
    lossy->done = NULL;
    pthread_mutex_unlock(&lossy->lock);
    tw_lossy_discard(held, TW_ERR_CANCELED);
    tw_lossy_complete(done);
    pthread_mutex_destroy(&lossy->lock);
    tw_stats_destroy(lossy->fstats);
    tw_free(lossy->paths, (size_t)lossy->super.size * sizeof(*lossy->paths));
    tw_free(lossy, sizeof(*lossy));
}

void tw_lossy_set_spec(tw_tl_iface_t *iface, const tw_fault_spec_t *spec)
{
    tw_lossy_iface_t *lossy = tw_lossy_of(iface);

    if (!tw_lossy_is(iface) || spec == NULL || !tw_lossy_spec_ok(spec)) {
        tw_error("lossy", "tw_lossy_set_spec: not a lossy iface, or a bad spec");
        return;
    }
    pthread_mutex_lock(&lossy->lock);
    lossy->spec = *spec;
    tw_lossy_arm_locked(lossy, spec->kill_ns);
    pthread_mutex_unlock(&lossy->lock);
}

tw_stats_t *tw_lossy_stats(const tw_tl_iface_t *iface)
{
    return tw_lossy_is(iface) ? ((const tw_lossy_iface_t *)(const void *)iface)->fstats : NULL;
}

tw_tl_iface_t *tw_lossy_inner(const tw_tl_iface_t *iface)
{
    return tw_lossy_is(iface) ? ((const tw_lossy_iface_t *)(const void *)iface)->inner : NULL;
}
