/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Receiving. Per peer: rcv_nxt, the next fragment in order, and slots for
 * the TW_REL_WIN - 1 after it (held copies). A fragment before rcv_nxt is
 * a duplicate (dropped, counted, acked again at once: its sender lost our
 * ack); one past the window cannot be legitimate (dropped, counted); one
 * from another incarnation of the peer, or for another incarnation of us,
 * is stale (dropped, counted). So the duplicate tracker is bounded by the
 * window, and it wraps with the sequence numbers. Held fragments are
 * bounded by the window, a message being reassembled by its announced
 * length.
 *
 * What the receiver owes (tw_rel_ack.c has what acks do at the sender):
 * every frame rel sends carries its current ack; without reverse traffic
 * an ACK goes alone once TW_REL_ACK_EVERY fragments are unacked, at once
 * for every fragment of a message larger than TW_REL_ACK_BIG, the last
 * fragment of any message in several, and a goodbye, and otherwise when
 * the delayed-ack timer (TW_REL_ACK_DELAY) runs out. A fragment that
 * arrives ahead of a gap is held and the gap NACKed, once per gap (when it
 * fills and another shows, that one is NACKed too); a frame whose checksum
 * fails is answered with a NACK, at most once per half TW_REL_RTO.
 *
 * Delivery: in-order fragments are reassembled, and complete messages are
 * handed up in order, exactly once, by one thread at a time per peer (the
 * "deliverer": others queue their work behind it), never with a lock
 * held, so a handler may send. A lone in-order fragment is handed up
 * straight from the transport's buffer, without a copy. A waiting worker
 * (tw_rel_poll) hands up only what cannot run user code; an engine takes
 * the rest.
 */
#include <string.h>

#include "core/tw_log.h"
#include "reliability/tw_rel_int.h"

#define TW_REL_ACK_EVERY 48u   /* fragments unacked before an ACK goes alone (3/4 window) */
#define TW_REL_ACK_BIG   8192u /* larger: every fragment acked at once (its sender waits) */

/* Whether to log a peer's bad frame: the first 16 of rel's life, then
 * every 1000th (one count for every kind). */
static bool tw_rel_should_log(tw_rel_t *rel)
{
    uint64_t n = atomic_fetch_add_explicit(&rel->logged, 1, memory_order_relaxed);
    return n < 16 || n % 1000 == 0;
}

/* Apply the ack fields of an arrival. Lock held. */
static void tw_rel_ack_apply(tw_rel_t *rel, tw_rel_peer_t *p, const tw_rel_hdr_t *h,
                             tw_rel_now_t *t, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    uint32_t base = h->ack_base;
    bool news = false;

    if (tw_seq_lt(p->snd_nxt, base)) {
        tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
        return; /* acks what was never sent */
    }
    for (uint32_t seq = p->snd_una; tw_seq_lt(seq, base); seq++) {
        news |= tw_rel_mark_acked(rel, p, &p->win[seq % TW_REL_WIN], t, todo);
    }
    for (uint32_t i = 0; i < TW_REL_WIN - 1 && h->ack_bits != 0; i++) {
        uint32_t seq = base + 1 + i;
        if ((h->ack_bits >> i & 1) && !tw_seq_lt(seq, p->snd_una) && tw_seq_lt(seq, p->snd_nxt)) {
            news |= tw_rel_mark_acked(rel, p, &p->win[seq % TW_REL_WIN], t, todo);
        }
    }
    while (p->snd_una != p->snd_nxt && p->win[p->snd_una % TW_REL_WIN].acked) {
        p->win[p->snd_una % TW_REL_WIN].acked = false;
        p->snd_una++;
    }
    /* Something new was acknowledged: the peer's timer restarts, on the
     * oldest fragment still unacked -- from an exact reading, as an early
     * deadline would resend it for nothing. */
    if (news) {
        for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
            tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
            if (s->msg != NULL && !s->acked) {
                if (s->sent_ns != 0) {
                    s->due_ns = TW_MAX(s->due_ns, tw_rel_now(rel, p, t) + s->rto_ns);
                }
                break;
            }
        }
    }
}

/* One more fragment to ack: now, or soon. Lock held. */
static void tw_rel_ack_note(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                            uint64_t now) TW_REQUIRES(p->lock)
{
    /* A large message's sender waits for this ack to complete its send
     * (zero-copy): do not keep it waiting. Small ones wait for reverse
     * traffic, the TW_REL_ACK_EVERY-th fragment unacked, or the
     * delayed-ack timer. */
    bool urgent = h->msg_len > TW_REL_ACK_BIG || (h->nfrags > 1 && h->frag == h->nfrags - 1) ||
                  h->am_id == TW_REL_BYE_AM;

    if (++p->ack_owed >= TW_REL_ACK_EVERY || urgent) {
        (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
    } else if (p->ack_due == 0) {
        p->ack_due = now + rel->cfg.ack_delay_ns;
        tw_rel_arm(rel, p->ack_due);
    }
}

static tw_rel_held_t *tw_rel_held_new(tw_rel_t *rel, const tw_rel_hdr_t *h, size_t bytes)
{
    size_t alloc_len = sizeof(tw_rel_held_t) + bytes;
    tw_rel_held_t *held = tw_malloc(alloc_len);

    if (held == NULL) {
        if (tw_rel_should_log(rel)) {
            tw_error("rel", "out of memory holding %zu bytes", bytes);
        }
        return NULL;
    }
    held->next = NULL;
    held->h = *h;
    held->alloc_len = alloc_len;
    return held;
}

/* Lock held. */
static void tw_rel_dq_append(tw_rel_peer_t *p, tw_rel_held_t *d) TW_REQUIRES(p->lock)
{
    d->next = NULL;
    if (p->dq_tail != NULL) {
        p->dq_tail->next = d;
    } else {
        p->dq_head = d;
    }
    p->dq_tail = d;
}

/* Fragment rcv_nxt (header @p h, upper header @p uhdr, payload @p data)
 * joins its message; a complete message goes to the delivery queue.
 * @p own: a held copy of exactly this fragment that may be reused. Lock
 * held; the caller advances rcv_nxt. */
static void tw_rel_consume(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                           const unsigned char *uhdr, const unsigned char *data, tw_rel_held_t *own)
    TW_REQUIRES(p->lock)
{
    if (h->frag == 0) {
        if (p->reasm != NULL) {
            /* The previous message never ended: impossible from a sane
             * peer (its fragments are consecutive). */
            tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
            tw_rel_held_free(p->reasm);
            p->reasm = NULL;
        }
        if (h->nfrags == 1) {
            if (own == NULL) {
                own = tw_rel_held_new(rel, h, h->hdr_len + h->len);
                if (own == NULL) {
                    return;
                }
                memcpy(own->bytes, uhdr, h->hdr_len);
                memcpy(own->bytes + h->hdr_len, data, h->len);
            }
            tw_rel_dq_append(p, own);
            return;
        }
        p->reasm = tw_rel_held_new(rel, h, h->hdr_len + h->msg_len);
        if (p->reasm == NULL) {
            return;
        }
        memcpy(p->reasm->bytes, uhdr, h->hdr_len);
        memcpy(p->reasm->bytes + h->hdr_len, data, h->len);
        p->reasm_next = 1;
    } else {
        tw_rel_held_t *r = p->reasm;
        if (r == NULL || h->frag != p->reasm_next || h->nfrags != r->h.nfrags ||
            h->msg_len != r->h.msg_len || h->am_id != r->h.am_id) {
            if (r != NULL || tw_rel_should_log(rel)) {
                tw_warn("rel", "rank %d sent fragment %u of %u out of its message: dropped", peer,
                        h->frag, h->nfrags);
            }
            tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
            if (r != NULL) {
                tw_rel_held_free(r);
                p->reasm = NULL;
            }
            if (own != NULL) {
                tw_rel_held_free(own);
            }
            return;
        }
        memcpy(r->bytes + r->h.hdr_len + h->offset, data, h->len);
        if (++p->reasm_next == r->h.nfrags) {
            p->reasm = NULL;
            tw_rel_dq_append(p, r);
        }
    }
    if (own != NULL) {
        tw_rel_held_free(own);
    }
}

/* May this thread hand a message of upper am id @p am_id up? */
static bool tw_rel_may_deliver(const tw_rel_t *rel, uint8_t am_id)
{
    return !tw_rel_in_worker || (am_id < 64 && (rel->super.inline_am_ids >> am_id & 1));
}

#define TW_REL_DELIVERING 1u
#define TW_REL_PENDING    2u

/* Become the peer's deliverer, or leave the work just queued to the one
 * there is (marked pending: it looks again before it leaves). Lock held. */
static bool tw_rel_deliverer_enter(tw_rel_peer_t *p) TW_REQUIRES(p->lock)
{
    unsigned cur = atomic_load_explicit(&p->dstate, memory_order_relaxed);
    unsigned want;

    do {
        want = (cur & TW_REL_DELIVERING) ? cur | TW_REL_PENDING : TW_REL_DELIVERING;
    } while (!atomic_compare_exchange_weak_explicit(&p->dstate, &cur, want, memory_order_acq_rel,
                                                    memory_order_relaxed));
    return !(cur & TW_REL_DELIVERING);
}

/* The deliverer leaves, everything queued handed up (tw_rel_drain
 * returned): whoever queued more did so under the lock, before the drain
 * saw the queues empty. Lock held. */
static void tw_rel_deliverer_leave(tw_rel_peer_t *p) TW_REQUIRES(p->lock)
{
    atomic_store_explicit(&p->dstate, 0, memory_order_release);
}

/* Fragments are held past rcv_nxt, which is missing: NACK it, once per
 * gap. Lock held. */
static void tw_rel_nack_gap(tw_rel_t *rel, tw_rel_peer_t *p, int peer) TW_REQUIRES(p->lock)
{
    if (p->down || p->nooo == 0 || (p->nack_valid && p->nacked == p->rcv_nxt)) {
        return;
    }
    for (uint32_t i = 1; i < TW_REL_WIN; i++) {
        const tw_rel_held_t *held = p->ooo[(p->rcv_nxt + i) % TW_REL_WIN];
        if (held != NULL && held->h.seq == p->rcv_nxt + i) {
            p->nacked = p->rcv_nxt;
            p->nack_valid = true;
            (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_NACK, -1, 0);
            return;
        }
    }
}

/* Hand up, in order, whatever is ready; the lock is dropped around each
 * upcall. Only the peer's deliverer runs this. Lock held. */
static void tw_rel_drain(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now)
    TW_REQUIRES(p->lock)
{
    for (;;) {
        while (!p->down) {
            tw_rel_held_t *held = p->ooo[p->rcv_nxt % TW_REL_WIN];
            if (held == NULL || held->h.seq != p->rcv_nxt) {
                break;
            }
            p->ooo[p->rcv_nxt % TW_REL_WIN] = NULL;
            p->nooo--;
            p->rcv_nxt++;
            tw_rel_hdr_t hh = held->h;
            tw_rel_consume(rel, p, peer, &held->h, held->bytes, held->bytes + held->h.hdr_len,
                           held);
            tw_rel_ack_note(rel, p, peer, &hh, now);
        }
        tw_rel_nack_gap(rel, p, peer);
        if (p->dq_head == NULL) {
            return;
        }
        tw_rel_held_t *d = p->dq_head;
        if (!tw_rel_may_deliver(rel, d->h.am_id)) {
            /* User code: an engine takes it (and what follows) up. */
            p->engine_drain = true;
            atomic_store_explicit(&rel->drain_wanted, true, memory_order_release);
            tw_pe_wake(rel->pe);
            return;
        }
        p->dq_head = d->next;
        if (p->dq_head == NULL) {
            p->dq_tail = NULL;
        }
        if (d->h.am_id == TW_REL_BYE_AM && d->h.msg_len == 0 && d->h.hdr_len == 0) {
            /* Everything it sent before is handed up: it left. */
            tw_rel_held_free(d);
            p->left = true;
            tw_debug("rel", "rank %d said goodbye", peer);
            if (!p->reported) {
                p->reported = true;
                tw_mutex_unlock(&p->lock);
                if (rel->super.peer_down != NULL) {
                    rel->super.peer_down(rel->super.peer_down_arg, peer, TW_OK);
                }
                tw_mutex_lock(&p->lock);
            }
            continue;
        }
        tw_rel_count(&p->n_delivered);
        tw_mutex_unlock(&p->lock);
        rel->super.recv(rel->super.recv_arg, peer, d->h.am_id, d->bytes, d->h.hdr_len,
                        d->bytes + d->h.hdr_len, d->h.msg_len);
        tw_rel_held_free(d);
        tw_mutex_lock(&p->lock);
    }
}

/* A DATA frame passed its checks. Returns true when this thread is to
 * hand it up itself, straight from the transport's buffer, once it has
 * released the lock (tw_rel_recv_cb), and then leave as the deliverer
 * (tw_rel_deliverer_exit). Lock held (dropped while handing up others). */
static bool tw_rel_data_arrived(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                                const unsigned char *uhdr, const unsigned char *data, uint64_t now)
    TW_REQUIRES(p->lock)
{
    int32_t d = (int32_t)(h->seq - p->rcv_nxt);

    if (d < 0) {
        /* Had it: our ack was lost or is late. Say so again, now. */
        tw_stats_inc(rel->stats, TW_REL_STAT_DUPLICATES);
        (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
        return false;
    }
    if ((uint32_t)d >= TW_REL_WIN) {
        tw_stats_inc(rel->stats, TW_REL_STAT_OUT_OF_WINDOW);
        if (tw_rel_should_log(rel)) {
            tw_warn("rel", "rank %d sent fragment %u, %d past the window: dropped", peer, h->seq,
                    d);
        }
        return false;
    }
    if (d > 0) {
        tw_rel_held_t **slot = &p->ooo[h->seq % TW_REL_WIN];
        if (*slot != NULL) {
            tw_stats_inc(rel->stats, TW_REL_STAT_DUPLICATES);
            (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
            return false;
        }
        tw_rel_held_t *held = tw_rel_held_new(rel, h, h->hdr_len + h->len);
        if (held == NULL) {
            return false; /* as if lost: it comes again */
        }
        memcpy(held->bytes, uhdr, h->hdr_len);
        memcpy(held->bytes + h->hdr_len, data, h->len);
        *slot = held;
        p->nooo++;
        tw_stats_inc(rel->stats, TW_REL_STAT_OUT_OF_ORDER);
        if (!p->nack_valid || p->nacked != p->rcv_nxt) {
            tw_rel_nack_gap(rel, p, peer);
        } else {
            tw_rel_ack_note(rel, p, peer, h, now);
        }
        return false;
    }
    p->rcv_nxt++;
    if (atomic_load_explicit(&p->dstate, memory_order_relaxed) == 0 && p->dq_head == NULL &&
        p->reasm == NULL && h->nfrags == 1 && h->am_id != TW_REL_BYE_AM &&
        tw_rel_may_deliver(rel, h->am_id)) {
        /* In order and alone: straight up from the transport's buffer,
         * by this thread, after the lock. Nobody delivers, so nobody
         * but lock holders touches dstate. Fragments held behind this
         * one are now in order: the deliverer looks at them after. */
        atomic_store_explicit(&p->dstate, TW_REL_DELIVERING | (p->nooo > 0 ? TW_REL_PENDING : 0),
                              memory_order_relaxed);
        tw_rel_ack_note(rel, p, peer, h, now);
        return true;
    }
    tw_rel_consume(rel, p, peer, h, uhdr, data, NULL);
    tw_rel_ack_note(rel, p, peer, h, now);
    if (tw_rel_deliverer_enter(p)) {
        tw_rel_drain(rel, p, peer, now);
        tw_rel_deliverer_leave(p);
    }
    return false;
}

/* The deliverer of a lone arrival handed it up without the lock: it
 * leaves, unless work was queued for it meanwhile -- then it hands that
 * up too. Lock not held. */
static void tw_rel_deliverer_exit(tw_rel_t *rel, tw_rel_peer_t *p, int peer)
{
    unsigned cur = TW_REL_DELIVERING;

    if (atomic_compare_exchange_strong_explicit(&p->dstate, &cur, 0, memory_order_acq_rel,
                                                memory_order_relaxed)) {
        return;
    }
    tw_mutex_lock(&p->lock);
    atomic_store_explicit(&p->dstate, TW_REL_DELIVERING, memory_order_relaxed); /* looking now */
    tw_rel_drain(rel, p, peer, p->clock_ns);
    tw_rel_deliverer_leave(p);
    tw_mutex_unlock(&p->lock);
}

/* An engine hands up what workers left to it (tw_rel_may_deliver said no:
 * it runs user code); returns how many peers it drained. Takes each
 * peer's lock in turn. Thread: engine 0. */
int tw_rel_engine_drain(tw_rel_t *rel)
{
    int events = 0;

    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        tw_mutex_lock(&p->lock);
        if (p->engine_drain && tw_rel_deliverer_enter(p)) {
            p->engine_drain = false;
            tw_rel_drain(rel, p, peer, rel->clock());
            tw_rel_deliverer_leave(p);
            events++;
        }
        tw_mutex_unlock(&p->lock);
    }
    return events;
}

/* Whether an arrival from @p src is to be handled: it parses (one whose
 * checksum fails draws a NACK, at most once per half RTO) and is from
 * and for the current incarnations. Fills @p h. Lock not held (taken for
 * the NACK). */
static bool tw_rel_frame_accepted(tw_rel_t *rel, tw_rel_peer_t *p, int src, uint8_t am_id,
                                  const void *hdr, size_t hdr_len, const void *data, size_t len,
                                  tw_rel_hdr_t *h)
{
    const char *why = "?";
    uint64_t now;

    switch (tw_rel_parse(am_id, hdr, hdr_len, data, len, h, &why)) {
    case TW_REL_PARSE_OK:
        break;
    case TW_REL_PARSE_CRC:
        tw_stats_inc(rel->stats, TW_REL_STAT_CRC_FAILURES);
        tw_debug("rel", "a frame from rank %d failed its checksum: dropped", src);
        /* Ask for what we lack at once (at most once per half RTO). */
        now = rel->clock();
        tw_mutex_lock(&p->lock);
        if (!p->down && tw_rel_since(now, p->crc_nack_ns) >= rel->cfg.rto_ns / 2) {
            p->crc_nack_ns = now;
            (void)tw_rel_tx_ctrl(rel, p, src, TW_REL_T_NACK, -1, 0);
        }
        tw_mutex_unlock(&p->lock);
        return false;
    case TW_REL_PARSE_BAD:
        tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
        if (tw_rel_should_log(rel)) {
            tw_warn("rel", "dropped a frame from rank %d: %s", src, why);
        }
        return false;
    }
    if ((h->flags & TW_REL_F_SHORT) ? h->src_epoch != tw_rel_epochs(p->epoch, rel->epoch)
                                    : h->src_epoch != p->epoch || h->dst_epoch != rel->epoch) {
        tw_stats_inc(rel->stats, TW_REL_STAT_STALE);
        if (tw_rel_should_log(rel)) {
            tw_warn("rel", "dropped a frame from another incarnation of rank %d or of this rank",
                    src);
        }
        return false;
    }
    return true;
}

/* A frame other than DATA came in on @p path: what it asks of us. Lock
 * held. */
static void tw_rel_ctrl_arrived(tw_rel_t *rel, tw_rel_peer_t *p, int src, const tw_rel_path_t *path,
                                const tw_rel_hdr_t *h, uint64_t now, tw_rel_deferred_t *todo)
    TW_REQUIRES(p->lock)
{
    switch (h->type) {
    case TW_REL_T_NACK:
        tw_rel_nack_apply(rel, p, src, h, now, todo);
        break;
    case TW_REL_T_ACK:
        /* Selective acks past a gap say the same as a NACK (which may
         * itself have been lost). */
        if (h->ack_bits != 0) {
            tw_rel_nack_apply(rel, p, src, h, now, todo);
        }
        break;
    case TW_REL_T_PING:
        (void)tw_rel_tx_ctrl(rel, p, src, TW_REL_T_PONG, (int)path->index, h->seq);
        break;
    case TW_REL_T_PROBE:
        (void)tw_rel_tx_ctrl(rel, p, src, TW_REL_T_PROBE_ACK, (int)path->index, h->seq);
        break;
    case TW_REL_T_PROBE_ACK:
        tw_rel_probe_answered(rel, p, src, path->index);
        break;
    default: /* PONG: the ack fields and last_rx were the point */
        break;
    }
}

/* Transport arrival callback (recv_arg = the path). Takes the peer's
 * lock. Thread: an engine. */
void tw_rel_recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    tw_rel_path_t *path = arg;
    tw_rel_t *rel = path->rel;
    tw_rel_deferred_t todo = {0};
    const unsigned char *uhdr;
    bool up = false;
    tw_rel_hdr_t h;
    tw_rel_peer_t *p;
    uint64_t now;

    if (src < 0 || src >= rel->size) {
        tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
        return;
    }
    p = &rel->peers[src];
    if (!tw_rel_frame_accepted(rel, p, src, am_id, hdr, hdr_len, data, len, &h)) {
        return;
    }
    tw_mutex_lock(&p->lock);
    if (p->down) {
        tw_mutex_unlock(&p->lock);
        tw_stats_inc(rel->stats, TW_REL_STAT_STALE);
        return;
    }
    /* A clock reading only when this frame needs one (tw_rel_now): a
     * round-trip sample, a timer restart, a resend decision, a control
     * frame. */
    tw_rel_now_t t = {.ns = p->clock_ns, .read = false};
    if (h.type != TW_REL_T_DATA && h.type != TW_REL_T_ACK) {
        (void)tw_rel_now(rel, p, &t);
    }
    p->rx_path = (uint8_t)path->index;
    if (h.flags & TW_REL_F_ACK) {
        tw_rel_ack_apply(rel, p, &h, &t, &todo);
    }
    if (h.type == TW_REL_T_ACK && h.ack_bits != 0) {
        (void)tw_rel_now(rel, p, &t); /* for tw_rel_nack_apply */
    }
    now = t.ns;
    p->last_rx_ns = TW_MAX(p->last_rx_ns, now);
    p->pings = 0;
    uhdr = (const unsigned char *)hdr + hdr_len - h.hdr_len;
    if (h.type == TW_REL_T_DATA) {
        up = tw_rel_data_arrived(rel, p, src, &h, uhdr, data, now);
    } else {
        tw_rel_ctrl_arrived(rel, p, src, path, &h, now, &todo);
    }
    if (!p->down) {
        tw_rel_push(rel, p, src, now, t.read ? TW_REL_STAMP_READ : TW_REL_STAMP_EARLY, &todo);
    }
    if (up && p->down) {
        /* It failed on the way (a path refused the push): what it sent
         * and was not yet handed up is dropped. */
        tw_rel_deliverer_leave(p);
        up = false;
    } else if (up) {
        tw_rel_count(&p->n_delivered);
    }
    tw_mutex_unlock(&p->lock);
    tw_rel_finish(rel, src, &todo);
    if (up) {
        rel->super.recv(rel->super.recv_arg, src, h.am_id, uhdr, h.hdr_len, data, h.len);
        tw_rel_deliverer_exit(rel, p, src);
    }
}

/* A frame a transport announced (rendezvous: tcp does so for large
 * frames of inline am ids) is pulled into a buffer of ours, then handled
 * like any arrival. Header and payload follow the struct. */
typedef struct tw_rel_pull {
    tw_tl_comp_t comp; /* first: the transport hands it back */
    tw_rel_path_t *path;
    int src;
    uint8_t am_id;
    size_t hdr_len;
    size_t len;
    size_t alloc_len;
    unsigned char bytes[];
} tw_rel_pull_t;

static void tw_rel_pull_done(tw_tl_comp_t *comp, tw_status_t status)
{
    tw_rel_pull_t *q = (tw_rel_pull_t *)comp;

    if (status == TW_OK) {
        tw_rel_recv_cb(q->path, q->src, q->am_id, q->bytes, q->hdr_len, q->bytes + q->hdr_len,
                       q->len);
    }
    tw_free(q, q->alloc_len);
}

static void tw_rel_released(tw_tl_comp_t *comp, tw_status_t status)
{
    (void)comp, (void)status;
}

void tw_rel_rndv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len, size_t len,
                    tw_tl_rndv_t *rndv)
{
    static tw_tl_comp_t ignore = {.cb = tw_rel_released};
    tw_rel_path_t *path = arg;
    tw_tl_iface_t *iface = path->iface;
    size_t alloc_len = sizeof(tw_rel_pull_t) + hdr_len + len;
    tw_rel_pull_t *q;

    /* Rel frames are never larger than a transport's short message. */
    if (len > TW_REL_MAX_SHORT || hdr_len > sizeof(tw_rel_hdr_t) + TW_REL_MAX_UHDR ||
        (q = tw_malloc(alloc_len)) == NULL) {
        tw_stats_inc(path->rel->stats, TW_REL_STAT_BAD_FRAMES);
        tw_warn("rel", "rank %d announced a %zu-byte frame: released unread", src, len);
        (void)tw_tl_rndv_get(iface, rndv, NULL, 0, &ignore);
        return;
    }
    *q = (tw_rel_pull_t){.comp = {.cb = tw_rel_pull_done},
                         .path = path,
                         .src = src,
                         .am_id = am_id,
                         .hdr_len = hdr_len,
                         .len = len,
                         .alloc_len = alloc_len};
    memcpy(q->bytes, hdr, hdr_len);
    tw_status_t st = tw_tl_rndv_get(iface, rndv, q->bytes + hdr_len, len, &q->comp);
    if (st != TW_OK) {
        q->comp.cb(&q->comp, st);
    }
}
