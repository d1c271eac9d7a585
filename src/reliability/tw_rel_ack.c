/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Acks at the sender: what an ack or a NACK does to the send window.
 * (tw_rel_rx.c decides when the receiver sends them, and applies the ack
 * fields every arrival carries, inlined in the receive callback.) An ack
 * is (base, bits): every fragment before base arrived, and bit i says
 * base + 1 + i did. A message whose fragments are all acked completes;
 * an eager one goes back to its peer's pool.
 */
#include "reliability/tw_rel_int.h"

/* A round trip measured on a fragment sent once (Karn: never on a
 * retransmitted one, whose ack may answer either copy). Lock held. */
static void tw_rel_rtt_sample(tw_rel_peer_t *p, uint64_t rtt) TW_REQUIRES(p->lock)
{
    if (p->srtt_ns == 0) {
        p->srtt_ns = rtt;
        p->rttvar_ns = rtt / 2;
        return;
    }
    uint64_t err = rtt > p->srtt_ns ? rtt - p->srtt_ns : p->srtt_ns - rtt;
    p->rttvar_ns = (3 * p->rttvar_ns + err) / 4;
    p->srtt_ns = (7 * p->srtt_ns + rtt) / 8;
}

/* An ack covers slot @p s. Returns whether @p s was not acknowledged
 * before. Lock held. */
bool tw_rel_mark_acked(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_slot_t *s, tw_rel_now_t *t,
                       tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    tw_rel_smsg_t *m = s->msg;

    if (m == NULL || s->acked) {
        return false;
    }
    if (s->stamp_read && s->tries == 0 && s->sent_ns != 0) {
        uint64_t now = tw_rel_now(rel, p, t);
        if (now > s->sent_ns) {
            tw_rel_rtt_sample(p, now - s->sent_ns);
        }
    }
    p->progress_ns = TW_MAX(p->progress_ns, t->ns);
    s->acked = true;
    s->msg = NULL;
    if (++m->acked == m->nfrags && !m->failing) {
        p->nmsgs--;
        if (m->comp == NULL && m->alloc_len == sizeof(*m) + TW_REL_ROOM + TW_REL_SMALL &&
            p->npool < TW_REL_POOL) {
            m->next = p->pool; /* eager: nothing to complete, keep it */
            p->pool = m;
            p->npool++;
            return true;
        }
        m->status = TW_OK;
        m->next = todo->done;
        todo->done = m;
    }
    return true;
}

/* A NACK: resend the first fragment the receiver lacks, unless it went
 * out less than a round trip ago (then it is late, not lost). The next
 * gap gets its own NACK once this one is filled. Lock held. */
void tw_rel_nack_apply(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                       uint64_t now, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    uint32_t seq = h->ack_base;
    tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
    uint64_t fresh = TW_MAX(p->srtt_ns, rel->cfg.rto_ns / 2);

    if (tw_seq_lt(seq, p->snd_una) || !tw_seq_lt(seq, p->snd_nxt) || s->msg == NULL || s->acked ||
        s->sent_ns == 0 || tw_rel_since(now, s->sent_ns) < fresh) {
        return;
    }
    (void)tw_rel_tx_data(rel, p, peer, s, seq, now, todo);
}
