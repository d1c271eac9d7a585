/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The lossy transport's held frames, deferred completions and kill
 * schedule.
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
 */
#include <inttypes.h>
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
#include "transports/lossy/tw_lossy_int.h"

/* ---- held frames and deferred completions --------------------------------------- */

/* A copy of the frame (@p by_ref: of the header only). */
tw_lossy_frame_t *tw_lossy_frame_new(tw_fault_dir_t dir, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len, bool by_ref)
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

void tw_lossy_flip(tw_lossy_frame_t *f, size_t bit)
{
    f->bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
}

/* Hold @p f: @p hold later frames of its path (0: none), @p delay_ns. */
void tw_lossy_hold(tw_lossy_iface_t *lossy, tw_lossy_frame_t *f, uint64_t seq, unsigned hold,
                   uint64_t delay_ns)
{
    uint64_t now = tw_time_ns();

    f->seq = seq;
    f->release = hold > 0 ? seq + 1 + hold : 0;
    f->hold_until = now + TW_LOSSY_HOLD_MAX_NS;
    f->due = delay_ns > 0 ? now + delay_ns : 0;
    f->next = NULL;
    tw_mutex_lock(&lossy->lock);
    *lossy->held_tail = f;
    lossy->held_tail = &f->next;
    tw_mutex_unlock(&lossy->lock);
    tw_pe_wake(lossy->super.pe);
}

/* Complete @p comp from progress (@p d: a node allocated beforehand). */
void tw_lossy_defer(tw_lossy_iface_t *lossy, tw_lossy_done_t *d, tw_tl_comp_t *comp)
{
    d->comp = comp;
    d->next = NULL;
    tw_mutex_lock(&lossy->lock);
    *lossy->done_tail = d;
    lossy->done_tail = &d->next;
    tw_mutex_unlock(&lossy->lock);
    tw_pe_wake(lossy->super.pe);
}

/* Take the held frames that may leave now. */
tw_lossy_frame_t *tw_lossy_take_due_locked(tw_lossy_iface_t *lossy, uint64_t now)
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
int tw_lossy_release(tw_lossy_iface_t *lossy, tw_lossy_frame_t *due, bool *stalled_p)
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
        tw_mutex_lock(&lossy->lock);
        *back_tail = lossy->held;
        if (lossy->held == NULL) {
            lossy->held_tail = back_tail;
        }
        lossy->held = back;
        tw_mutex_unlock(&lossy->lock);
    }
    *stalled_p = stalled;
    return n;
}

/* Free frames that will never leave; a zero-copy one completes with @p st. */
int tw_lossy_discard(tw_lossy_frame_t *list, tw_status_t st)
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

int tw_lossy_complete(tw_lossy_done_t *list)
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
void tw_lossy_arm_locked(tw_lossy_iface_t *lossy, uint64_t kill_ns)
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
int tw_lossy_report_kill(tw_lossy_iface_t *lossy)
{
    tw_tl_iface_t *inner = lossy->inner;
    int n = 1;

    tw_pe_assert_owner(lossy->super.pe);
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
