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

const char *const tw_lossy_dir_names[TW_FAULT_NDIRS] = {"to", "from"};

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

    tw_mutex_lock(&lossy->lock);
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
    tw_mutex_unlock(&lossy->lock);

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
    tw_mutex_lock(&lossy->lock);
    tw_lossy_path_t *path = &lossy->paths[peer];
    if (path->draws[dir] == v->draw + 1) { /* nobody drew since */
        path->rng[dir] = v->before;
        path->draws[dir] = v->draw;
        if (!v->d.drop) {
            path->count[dir]--;
        }
    }
    tw_mutex_unlock(&lossy->lock);
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
    tw_mutex_lock(&lossy->lock);
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
    tw_mutex_unlock(&lossy->lock);

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

/* The inner delivers to our hooks; what it may deliver inline, and the
 * frame classes, are the layer above's. */
void tw_lossy_bind_inner(tw_lossy_iface_t *lossy, const tw_tl_params_t *up)
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
