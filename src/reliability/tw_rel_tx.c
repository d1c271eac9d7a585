/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Sending. An upper message (header + payload, up to TW_REL_MAX_MSG) is
 * cut into fragments that fit every path (the smallest max_short, minus
 * the rel header); the first carries the upper header. Each fragment
 * takes the peer's next 32-bit sequence number (serial arithmetic:
 * wraparound is ordinary). At most TW_REL_WIN fragments per peer are
 * unacknowledged -- Open MPI DR's "virtual fragment of up to 64 fragments
 * acked by one bitmask" is the window here -- and a message larger than
 * the window flows through it. Eager messages (am_short) are copied once,
 * into the message (up to TW_REL_SMALL bytes one from the peer's pool, so
 * a small send does not allocate once the pool is warm); large ones
 * (am_zcopy) are read from the caller's buffer until every fragment is
 * acked, then their completion runs.
 *
 * Every frame carries the sender's current ack (tw_rel_fill_ack). A whole
 * message in one fragment, sent while nothing is held out of order here
 * (no ack bits to carry), goes in the short form (tw_rel_proto.h).
 *
 * Back-pressure: at most TW_REL_QUEUE messages per peer are
 * unacknowledged; beyond that a send is TW_ERR_AGAIN.
 */
#include <string.h>

#include "core/tw_log.h"
#include "reliability/tw_rel_int.h"

#define TW_REL_SAMPLE_EVERY 16u /* manual progress: a send that reads the clock, of these */

/* The ack fields of a frame to the peer: what we hold of its fragments.
 * Lock held. */
static void tw_rel_fill_ack(const tw_rel_peer_t *p, tw_rel_hdr_t *h) TW_REQUIRES(p->lock)
{
    uint64_t bits = 0;

    for (uint32_t i = 0; p->nooo > 0 && i < TW_REL_WIN - 1; i++) {
        uint32_t seq = p->rcv_nxt + 1 + i;
        const tw_rel_held_t *held = p->ooo[seq % TW_REL_WIN];
        if (held != NULL && held->h.seq == seq) {
            bits |= 1ull << i;
        }
    }
    h->flags |= TW_REL_F_ACK;
    h->ack_base = p->rcv_nxt;
    h->ack_bits = bits;
}

/* A long-form header of @p type for path @p path. Lock held. */
static void tw_rel_hdr_init(const tw_rel_t *rel, const tw_rel_peer_t *p, tw_rel_hdr_t *h,
                            uint8_t type, int path) TW_REQUIRES(p->lock)
{
    memset(h, 0, sizeof(*h));
    h->version = TW_REL_VERSION;
    h->type = type;
    h->path = (uint8_t)path;
    h->src_epoch = rel->epoch;
    h->dst_epoch = p->epoch;
    tw_rel_fill_ack(p, h);
}

/* Every frame rel sends goes out here. Once rel is closing (its paths
 * close under it, the engines stopped) nothing goes out: a failover or an
 * ack triggered by what the paths complete as they close would reach a
 * path that closes next -- or queue a command that outlives it. */
static inline tw_status_t tw_rel_path_send(tw_rel_t *rel, int g, int peer, uint8_t am_id,
                                           const void *hdr, size_t hdr_len, const void *data,
                                           size_t len)
{
    if (TW_UNLIKELY(rel->super.closing)) {
        return TW_OK; /* lost: destroy completes what waits for it */
    }
    return tw_tl_am_short(rel->paths[g].iface, peer, am_id, hdr, hdr_len, data, len);
}

/* A control frame on path @p g; -1: the path the peer's last frame came
 * in on when we think it healthy (so acks follow a peer that failed over
 * before we noticed anything), else our current one. Lock held. */
tw_status_t tw_rel_tx_ctrl(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint8_t type, int g,
                           uint32_t cookie) TW_REQUIRES(p->lock)
{
    tw_rel_hdr_t h;
    tw_status_t st;

    if (p->closing) {
        /* It closed a path cleanly: it is past its quiesce and waits for
         * no ack, and the path left may be a dial it refuses. What it
         * still sends is taken in, unacknowledged. */
        p->ack_owed = 0;
        p->ack_due = 0;
        return TW_OK;
    }
    if (g < 0) {
        g = (p->paths_up >> p->rx_path & 1) ? p->rx_path : tw_rel_cur_path(p);
    }
    if (g < 0) {
        return TW_ERR_PEER_FAILED;
    }
    tw_rel_hdr_init(rel, p, &h, type, g);
    h.seq = cookie;
    h.crc = tw_rel_crc(&h, sizeof(h), NULL, 0);
    st = tw_rel_path_send(rel, g, peer, tw_rel_am_of(type), &h, sizeof(h), NULL, 0);
    if (st == TW_OK) {
        p->ack_owed = 0;
        p->ack_due = 0;
        if (type == TW_REL_T_ACK) {
            tw_stats_inc(rel->stats, TW_REL_STAT_ACKS_SENT);
        } else if (type == TW_REL_T_NACK) {
            tw_stats_inc(rel->stats, TW_REL_STAT_NACKS_SENT);
        }
    }
    return st;
}

/* Build fragment @p frag of @p m, sequence @p seq, right before its upper
 * header (m's room), and hand it to path @p g. The frame header goes in
 * field by field (one built aside and copied in would be read back in
 * wider loads than it was written with: store-forwarding stalls); the
 * transport copies the frame before it returns. Lock held. */
static tw_status_t tw_rel_frame_tx(tw_rel_t *rel, tw_rel_peer_t *p, int peer, tw_rel_smsg_t *m,
                                   uint32_t frag, uint32_t seq, int g) TW_REQUIRES(p->lock)
{
    unsigned char *room = m->bytes + TW_REL_ROOM; /* the upper header; frame headers end here */
    size_t cap = rel->frag_cap, first = cap - m->hdr_len;
    size_t off = frag == 0 ? 0 : first + (size_t)(frag - 1) * cap;
    size_t n = TW_MIN(frag == 0 ? first : cap, m->len - off);
    size_t uh = frag == 0 ? m->hdr_len : 0;
    const unsigned char *payload = m->data != NULL ? m->data + off : NULL; /* none: header only */

    if (m->nfrags == 1 && p->nooo == 0) {
        /* The short form: no ack bits to carry (nothing is held). */
        tw_rel_shdr_t *f = (tw_rel_shdr_t *)(void *)(room - sizeof(*f));
        f->version = TW_REL_VERSION;
        f->flags = TW_REL_F_ACK;
        f->am_id = m->am_id;
        f->path = (uint8_t)g;
        f->hdr_len = (uint16_t)uh;
        f->reserved = 0;
        f->seq = seq;
        f->ack_base = p->rcv_nxt;
        f->epochs = tw_rel_epochs(rel->epoch, p->epoch);
        f->crc = tw_rel_short_crc(f, sizeof(*f) + uh, payload, n);
        return tw_rel_path_send(rel, g, peer, TW_REL_AM_SDATA, f, sizeof(*f) + uh, payload, n);
    }
    tw_rel_hdr_t *f = (tw_rel_hdr_t *)(void *)(room - sizeof(*f));
    tw_rel_hdr_init(rel, p, f, TW_REL_T_DATA, g);
    f->am_id = m->am_id;
    f->hdr_len = (uint16_t)uh;
    f->seq = seq;
    f->frag = frag;
    f->nfrags = m->nfrags;
    f->msg_len = m->len;
    f->offset = off;
    f->len = (uint32_t)n;
    f->crc = tw_rel_crc(f, sizeof(*f) + uh, payload, n);
    return tw_rel_path_send(rel, g, peer, TW_REL_AM_DATA, f, sizeof(*f) + uh, payload, n);
}

/* Slot @p s just went out on path @p g: its timers. Lock held. */
static inline void tw_rel_slot_sent(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_slot_t *s, int g,
                                    uint64_t now) TW_REQUIRES(p->lock)
{
    if (s->sent_ns == 0 || s->path != g) {
        s->first_ns = now;
    }
    if (s->sent_ns != 0) { /* a retransmission (on this path or another) */
        s->stamp_early = false;
        s->tries++;
        s->rto_ns = TW_MIN(s->rto_ns * 2, rel->cfg.rto_max_ns);
        tw_stats_inc(rel->stats, TW_REL_STAT_RETRANSMITS);
    }
    s->path = (uint8_t)g;
    s->sent_ns = now;
    p->refused_ns = 0;
    s->due_ns = now + s->rto_ns;
    p->ack_owed = 0; /* piggybacked */
    p->ack_due = 0;
    tw_rel_count(&p->n_frags_sent);
    tw_rel_arm(rel, s->due_ns);
}

/* Transmit the fragment in slot @p s (sequence @p seq) on the current
 * path, falling over to the next when a transport refuses for good.
 * Lock held. */
tw_status_t tw_rel_tx_data(tw_rel_t *rel, tw_rel_peer_t *p, int peer, tw_rel_slot_t *s,
                           uint32_t seq, uint64_t now, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    tw_status_t st;
    int g;

    if (p->closing && !p->down) {
        /* Finalizing (see tw_rel_peer_t): held, not sent; its goodbye or
         * its last path's close decides. */
        s->due_ns = now + s->rto_ns;
        tw_rel_arm(rel, s->due_ns);
        return TW_OK;
    }
    for (;;) {
        g = tw_rel_cur_path(p);
        if (g < 0 || p->down) {
            return TW_ERR_PEER_FAILED;
        }
        st = tw_rel_frame_tx(rel, p, peer, s->msg, s->frag, seq, g);
        if (st == TW_OK || st == TW_ERR_AGAIN) {
            break;
        }
        /* TW_ERR_TRANSPORT: down for now (its peer_down may not have run
         * yet): probed, not dead. */
        tw_rel_path_lost(rel, p, peer, g, st != TW_ERR_TRANSPORT, tw_strerror(st), now, todo);
    }
    if (st == TW_ERR_AGAIN) {
        s->due_ns = now; /* next pass */
        tw_rel_arm(rel, now);
        return st;
    }
    tw_rel_slot_sent(rel, p, s, g, now);
    return TW_OK;
}

/* The next fragment of the queue's head takes the next sequence number
 * and its slot in the window (which has room). Lock held. */
static tw_rel_slot_t *tw_rel_slot_take(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_stamp_t stamp)
    TW_REQUIRES(p->lock)
{
    tw_rel_smsg_t *m = p->q_head;
    tw_rel_slot_t *s = &p->win[p->snd_nxt++ % TW_REL_WIN];

    *s = (tw_rel_slot_t){.msg = m,
                         .frag = m->issued++,
                         .rto_ns = tw_rel_rto(rel, p),
                         .stamp_read = stamp == TW_REL_STAMP_READ,
                         .stamp_early = stamp == TW_REL_STAMP_EARLY};
    if (m->issued == m->nfrags) {
        p->q_head = m->next;
        if (p->q_head == NULL) {
            p->q_tail = NULL;
        }
        m->next = NULL;
    }
    return s;
}

/* Move queued messages' fragments into the window while it has room.
 * Lock held. */
void tw_rel_push(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now, tw_rel_stamp_t stamp,
                 tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    while (p->q_head != NULL && !p->down && p->snd_nxt - p->snd_una < TW_REL_WIN) {
        uint32_t seq = p->snd_nxt;
        tw_rel_slot_t *s = tw_rel_slot_take(rel, p, stamp);

        if (tw_rel_tx_data(rel, p, peer, s, seq, now, todo) != TW_OK) {
            break;
        }
    }
}

static uint32_t tw_rel_nfrags(const tw_rel_t *rel, size_t hdr_len, size_t len)
{
    size_t first = rel->frag_cap - hdr_len;

    if (len <= first) {
        return 1;
    }
    return (uint32_t)(1 + (len - first + rel->frag_cap - 1) / rel->frag_cap);
}

static void tw_rel_smsg_fill(const tw_rel_t *rel, tw_rel_smsg_t *m, size_t alloc_len, uint8_t am_id,
                             const void *hdr, size_t hdr_len, const void *data, size_t len,
                             bool copy, tw_tl_comp_t *comp)
{
    *m = (tw_rel_smsg_t){.comp = comp,
                         .data = copy ? m->bytes + TW_REL_ROOM + hdr_len : data,
                         .len = len,
                         .alloc_len = alloc_len,
                         .nfrags = tw_rel_nfrags(rel, hdr_len, len),
                         .hdr_len = (uint16_t)hdr_len,
                         .am_id = am_id};
    if (hdr_len > 0) {
        memcpy(m->bytes + TW_REL_ROOM, hdr, hdr_len);
    }
    if (copy && len > 0) {
        memcpy(m->bytes + TW_REL_ROOM + hdr_len, data, len);
    }
}

/* May a message join the peer's queue? Not when the peer failed or left
 * (but a goodbye, @p bye, may follow its own), nor, back-pressure, when
 * TW_REL_QUEUE messages are unacknowledged (a goodbye is never refused
 * for that). Lock held. */
static tw_status_t tw_rel_admit(const tw_rel_t *rel, const tw_rel_peer_t *p, bool bye)
    TW_REQUIRES(p->lock)
{
    if (p->down || (p->left && !bye)) {
        return TW_ERR_PEER_FAILED;
    }
    if (!bye && p->nmsgs >= (unsigned)rel->cfg.queue) {
        return TW_ERR_AGAIN;
    }
    return TW_OK;
}

/* The time a send is stamped with, *@p now_p, and what kind of stamp it
 * is. Behind earlier fragments the latest reading will do (only the
 * oldest one's deadline counts). A fragment that goes into an empty
 * window starts the peer's retransmission timer: with an engine thread,
 * that takes a clock reading (an early stamp would wake the engine for
 * nothing); without one (manual progress), the peer's latest reading is
 * its early stamp -- usually made a moment ago, by the arrival this send
 * answers -- and the pass that finds it due times it from then on
 * instead of resending it, so its first timeout lies between TW_REL_RTO
 * and twice that. Every TW_REL_SAMPLE_EVERY-th such send still reads the
 * clock, for a round-trip sample. Lock held. */
static inline tw_rel_stamp_t tw_rel_send_stamp(tw_rel_t *rel, tw_rel_peer_t *p, uint64_t *now_p)
    TW_REQUIRES(p->lock)
{
    bool empty = p->snd_una == p->snd_nxt;
    uint64_t now = p->clock_ns;
    tw_rel_stamp_t stamp = TW_REL_STAMP_LATEST;

    if (empty && !rel->timer_used && p->srtt_ns != 0 && ++p->untimed < TW_REL_SAMPLE_EVERY) {
        stamp = TW_REL_STAMP_EARLY;
    } else if (empty) {
        p->untimed = 0;
        now = rel->clock();
        p->clock_ns = TW_MAX(p->clock_ns, now);
        stamp = TW_REL_STAMP_READ;
    }
    *now_p = now;
    return stamp;
}

/* Message @p m (admitted) joins the peer's queue, and what the window
 * takes of it goes out. Lock held. */
static inline void tw_rel_queue_and_send(tw_rel_t *rel, tw_rel_peer_t *p, int peer,
                                         tw_rel_smsg_t *m, tw_rel_deferred_t *todo)
    TW_REQUIRES(p->lock)
{
    /* A message in one fragment, with nothing queued before it and room
     * in the window, goes out first and takes its place in the queue and
     * its slot after: a hop's sending half is what comes before the
     * transport's publish. */
    uint32_t seq = p->snd_nxt;
    tw_status_t tx = TW_ERR_AGAIN;
    int g = -1;
    if (m->nfrags == 1 && p->q_head == NULL && seq - p->snd_una < TW_REL_WIN && !p->closing &&
        (g = tw_rel_cur_path(p)) >= 0) {
        tx = tw_rel_frame_tx(rel, p, peer, m, 0, seq, g);
    }
    if (p->q_tail != NULL) {
        p->q_tail->next = m;
    } else {
        p->q_head = m;
    }
    p->q_tail = m;
    p->nmsgs++;
    uint64_t now;
    tw_rel_stamp_t stamp = tw_rel_send_stamp(rel, p, &now);
    if (tx == TW_OK) {
        tw_rel_slot_sent(rel, p, tw_rel_slot_take(rel, p, stamp), g, now);
    } else {
        /* Not sent (or not tried): the general way, which retries,
         * fails over, or leaves it to the timer pass. */
        tw_rel_push(rel, p, peer, now, stamp, todo);
    }
}

/* Queue a message to @p peer and send what the window takes of it; @p bye:
 * the goodbye (quiesce). Takes the peer's lock. Thread: any. */
tw_status_t tw_rel_post(tw_rel_t *rel, int peer, uint8_t am_id, const void *hdr, size_t hdr_len,
                        const void *data, size_t len, bool copy, tw_tl_comp_t *comp, bool bye)
{
    size_t alloc_len = sizeof(tw_rel_smsg_t) + TW_REL_ROOM + hdr_len + (copy ? len : 0);
    tw_rel_deferred_t todo = {0};
    tw_rel_peer_t *p;
    tw_rel_smsg_t *m;
    tw_status_t st = TW_OK;

    if (peer < 0 || peer >= rel->size || rel->peers[peer].paths_reach == 0) {
        return TW_ERR_UNREACHABLE;
    }
    if (hdr_len > TW_REL_MAX_UHDR || len > TW_REL_MAX_MSG || (len > 0 && data == NULL)) {
        return TW_ERR_INVALID;
    }
    p = &rel->peers[peer];
    m = NULL;
    if (copy && hdr_len + len <= TW_REL_SMALL) {
        /* Small eager message: one lock for everything, the copy too
         * (at most TW_REL_SMALL bytes); checked before any allocation, so
         * a sender that retries against a stalled peer costs nothing. */
        alloc_len = sizeof(*m) + TW_REL_ROOM + TW_REL_SMALL;
        tw_mutex_lock(&p->lock);
        st = tw_rel_admit(rel, p, bye);
        if (st == TW_OK && (m = p->pool) != NULL) {
            p->pool = m->next;
            p->npool--;
        } else if (st == TW_OK && (m = tw_malloc(alloc_len)) == NULL) {
            st = TW_ERR_NOMEM;
        }
        if (st != TW_OK) {
            tw_mutex_unlock(&p->lock);
            if (st == TW_ERR_AGAIN) {
                tw_stats_inc(rel->stats, TW_REL_STAT_AGAIN);
            } else if (st == TW_ERR_NOMEM) {
                tw_error("rel", "cannot allocate a %zu-byte send", alloc_len);
            }
            return st;
        }
        tw_rel_smsg_fill(rel, m, alloc_len, am_id, hdr, hdr_len, data, len, copy, comp);
    } else {
        if ((m = tw_malloc(alloc_len)) == NULL) {
            tw_error("rel", "cannot allocate a %zu-byte send", alloc_len);
            return TW_ERR_NOMEM;
        }
        tw_rel_smsg_fill(rel, m, alloc_len, am_id, hdr, hdr_len, data, len, copy, comp);
        tw_mutex_lock(&p->lock);
        st = tw_rel_admit(rel, p, bye);
    }
    if (st == TW_OK) {
        tw_rel_queue_and_send(rel, p, peer, m, &todo);
    }
    tw_mutex_unlock(&p->lock);
    if (st != TW_OK) {
        if (st == TW_ERR_AGAIN) {
            tw_stats_inc(rel->stats, TW_REL_STAT_AGAIN);
        }
        tw_rel_smsg_free(m);
    }
    tw_rel_finish(rel, peer, &todo);
    return st;
}

tw_status_t tw_rel_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len)
{
    if (am_id == TW_REL_BYE_AM || hdr_len + len > iface->attr.max_short) {
        return TW_ERR_INVALID;
    }
    return tw_rel_post((tw_rel_t *)iface, peer, am_id, hdr, hdr_len, data, len, true, NULL, false);
}

tw_status_t tw_rel_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    if (am_id == TW_REL_BYE_AM || comp == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_rel_post((tw_rel_t *)iface, peer, am_id, hdr, hdr_len, data, len, false, comp, false);
}
