/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Paths and peers failing. A path fails for a peer when its transport
 * reports the peer down -- for good (TW_ERR_PEER_FAILED, TW_OK: that
 * connection is gone, the path is dead for that peer) or for now
 * (TW_ERR_TRANSPORT: a port went down; probed, may come back) -- when its
 * transport refuses a send (dead; for now if it says TW_ERR_TRANSPORT,
 * which it does while the path is down, possibly before its peer_down
 * ran), or when its retries run out (probed). Unacknowledged fragments
 * then go again, at once, on the next healthy path: sequence numbers
 * belong to the peer, not the path, so the receiver's tracker drops
 * whatever arrives twice.
 *
 * A probe is a control frame on a failed path, every TW_REL_PROBE; a
 * transport that refuses it (its path still down) just fails that probe.
 * The peer answers on the path the probe came in on. After TW_REL_PROBES
 * answers the path is healthy again and, being earlier in routing order,
 * carries the traffic from then on (fail-back).
 *
 * With no path left, or after the keepalive bound, the peer has failed:
 * every operation to it completes with TW_ERR_PEER_FAILED, what it sent
 * and was not yet handed up is dropped, later frames from it are
 * discarded as stale, and the upper layer's peer_down (msg, then the
 * error handler) runs once. Nothing aborts.
 */
#include "core/tw_log.h"
#include "reliability/tw_rel_int.h"

bool tw_rel_bye_unacked(const tw_rel_peer_t *p)
{
    /* The goodbye is posted last (tw_rel_quiesce): in the window, nothing
     * of ours is queued behind it. */
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
        const tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg != NULL && !s->acked && s->msg->am_id == TW_REL_BYE_AM && s->msg->len == 0 &&
            s->msg->hdr_len == 0) {
            return true;
        }
    }
    return false;
}

/* Path @p g no longer reaches @p peer: for good (@p dead: its transport
 * said so) or until probes say otherwise. @p what NULL: the peer closed it
 * cleanly -- it is leaving (finalize closes its paths after its goodbye),
 * so what is left moves to another path without a warning. Lock held. */
void tw_rel_path_lost(tw_rel_t *rel, tw_rel_peer_t *p, int peer, int g, bool dead, const char *what,
                      uint64_t now, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    uint8_t bit = (uint8_t)(1u << g);
    int was = tw_rel_cur_path(p);

    if (dead) {
        p->paths_dead |= bit;
    }
    if ((p->paths_up & bit) == 0) {
        return;
    }
    p->paths_up &= (uint8_t)~bit;
    p->probe_ok[g] = 0;
    p->refused_ns = 0; /* the next path's count starts afresh */
    if (what == NULL && p->left) {
        /* It said goodbye and now closes its paths: it has finalized, and
         * nothing we still owe it would be received. Resending on another
         * path would only dial a rank that is gone (over tcp: a refused
         * connect, an error line); fail what is left, quietly. */
        tw_rel_peer_fail(rel, p, peer, "it left", todo);
        return;
    }
    if (what != NULL && atomic_load_explicit(&rel->leaving, memory_order_relaxed) &&
        tw_rel_bye_unacked(p)) {
        /* We are leaving and our goodbye, after all we sent, is
         * unanswered: it has most likely left -- its goodbye to us lost
         * on the way, and its acks of ours (a peer that has our goodbye
         * leaves without waiting for our ack of its own; its last ack
         * goes once). Failing over would dial a rank that is gone -- over
         * tcp a refused connect, an error line -- for messages it no
         * longer needs: we are done with it, quietly. */
        tw_debug("rel",
                 "path %s to rank %d failed (%s) while we leave, our goodbye "
                 "unacknowledged: done with it",
                 rel->paths[g].iface->name, peer, what);
        p->left = true;
        tw_rel_peer_fail(rel, p, peer, "it left", todo);
        return;
    }
    if (tw_rel_cur_path(p) < 0) {
        tw_rel_peer_fail(rel, p, peer, what != NULL ? what : "it closed", todo);
        return;
    }
    if (was != g) {
        return; /* a standby path: nothing went over it */
    }
    if (what == NULL) {
        /* Closed cleanly, its goodbye not here yet: it is finalizing.
         * What it still sends on other paths is taken in, but nothing
         * goes to it any more -- it would not be received, and over tcp
         * it would be a dial the rank refuses, an error line. Its goodbye
         * (then p->left) or its last path's close fails what is left,
         * quietly. */
        tw_debug("rel", "path %s to rank %d closed (it is leaving): holding what is left",
                 rel->paths[g].iface->name, peer);
        if (!p->closing) {
            p->closing = true;
            p->closing_ns = now;
        }
        return;
    }
    tw_stats_inc(rel->stats, TW_REL_STAT_FAILOVERS);
    {
        tw_warn("rel", "path %s to rank %d failed (%s): failing over to %s",
                rel->paths[g].iface->name, peer, what, rel->paths[tw_rel_cur_path(p)].iface->name);
    }
    /* Everything unacked goes again, at once, on the next path. */
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
        tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg != NULL && !s->acked) {
            s->tries = 0;
            s->rto_ns = tw_rel_rto(rel, p);
            s->due_ns = now;
        }
    }
    if (!dead) {
        p->probe_due = now + rel->cfg.probe_ns;
    }
    tw_rel_arm(rel, now);
}

/* The peer is gone: fail what we owe it, drop what it sent. Lock held. */
void tw_rel_peer_fail(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const char *what,
                      tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    if (p->down) {
        return;
    }
    p->down = true;
    /* The queue first: its head may also have fragments in the window,
     * and `next` links the queue until the message moves to the list. */
    for (tw_rel_smsg_t *m = p->q_head, *next; m != NULL; m = next) {
        next = m->next;
        if (!m->failing) {
            m->failing = true;
            m->status = TW_ERR_PEER_FAILED;
            m->next = todo->done;
            todo->done = m;
        }
    }
    p->q_head = p->q_tail = NULL;
    p->nmsgs = 0;
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
        tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg != NULL && !s->acked && !s->msg->failing) {
            s->msg->failing = true;
            s->msg->status = TW_ERR_PEER_FAILED;
            s->msg->next = todo->done;
            todo->done = s->msg;
        }
        s->msg = NULL;
    }
    p->snd_una = p->snd_nxt;
    for (unsigned i = 0; i < TW_REL_WIN; i++) {
        if (p->ooo[i] != NULL) {
            tw_rel_held_free(p->ooo[i]);
            p->ooo[i] = NULL;
        }
    }
    p->nooo = 0;
    if (p->reasm != NULL) {
        tw_rel_held_free(p->reasm);
        p->reasm = NULL;
    }
    /* Complete messages waiting for the deliverer (who is handing up
     * another right now) still go up: they were acked. */
    p->ack_due = 0;
    if (p->left) {
        tw_debug("rel", "rank %d left; its unacknowledged operations fail (%s)", peer, what);
        return; /* reported as a clean departure already */
    }
    tw_stats_inc(rel->stats, TW_REL_STAT_PEER_FAILURES);
    tw_error("rel", "rank %d failed: %s; its operations complete with TW_ERR_PEER_FAILED", peer,
             what);
    if (!p->reported) {
        p->reported = true;
        todo->report = true;
        todo->why = TW_ERR_PEER_FAILED;
    }
}

/* Path @p g answered a probe of @p peer: after TW_REL_PROBES answers it
 * is healthy again, and carries the traffic if it comes first in routing
 * order (fail-back). Lock held. */
void tw_rel_probe_answered(tw_rel_t *rel, tw_rel_peer_t *p, int peer, unsigned g)
    TW_REQUIRES(p->lock)
{
    uint8_t bit = (uint8_t)(1u << g);

    if ((p->paths_reach & bit) && !(p->paths_up & bit) && !(p->paths_dead & bit) &&
        ++p->probe_ok[g] >= (unsigned)rel->cfg.probes) {
        int was = tw_rel_cur_path(p);
        p->paths_up |= bit;
        p->probe_ok[g] = 0;
        if (tw_rel_cur_path(p) != was) {
            tw_stats_inc(rel->stats, TW_REL_STAT_FAILBACKS);
            tw_warn("rel", "path %s to rank %d is healthy again: failing back",
                    rel->paths[g].iface->name, peer);
        }
    }
}

/* Probe the peer's failed paths that are not dead, every TW_REL_PROBE.
 * Returns when the next probe is due (UINT64_MAX: nothing to probe).
 * Lock held. */
uint64_t tw_rel_probe(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now) TW_REQUIRES(p->lock)
{
    uint8_t probing = p->paths_reach & (uint8_t)~p->paths_up & (uint8_t)~p->paths_dead;

    if (probing == 0) {
        return UINT64_MAX;
    }
    if (now >= p->probe_due) {
        p->probe_due = now + rel->cfg.probe_ns;
        for (unsigned g = 0; g < rel->npaths; g++) {
            if (probing >> g & 1) {
                (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_PROBE, (int)g, (uint32_t)g);
            }
        }
    }
    return p->probe_due;
}

/* A transport lost a peer. Takes the peer's lock. Thread: an engine. */
void tw_rel_peer_down_cb(void *arg, int peer, tw_status_t why)
{
    tw_rel_path_t *path = arg;
    tw_rel_t *rel = path->rel;
    tw_rel_deferred_t todo = {0};
    tw_rel_peer_t *p;

    if (peer < 0 || peer >= rel->size) {
        return;
    }
    p = &rel->peers[peer];
    tw_mutex_lock(&p->lock);
    if (!p->down) {
        uint8_t others = p->paths_up & p->paths_reach & (uint8_t) ~(1u << path->index);
        if (why == TW_OK && others == 0 && !p->left) {
            /* Its last path closed cleanly: it left (without a goodbye,
             * or the goodbye is still on its way on another path). */
            p->left = true;
            if (!p->reported) {
                p->reported = true;
                todo.report = true;
                todo.why = TW_OK;
            }
        }
        /* TW_ERR_TRANSPORT: the path is down for now (a port went down):
         * fail over and probe it; the transport takes sends again once it
         * is back, and the probes' answers bring the traffic back. */
        tw_rel_path_lost(rel, p, peer, (int)path->index, why != TW_ERR_TRANSPORT,
                         why == TW_OK ? NULL : tw_strerror(why), rel->clock(), &todo);
    }
    tw_mutex_unlock(&p->lock);
    tw_rel_finish(rel, peer, &todo);
}
