/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Timers: one timerfd, and rel's progress function on engine 0.
 * - retransmission: one timer per peer, on its oldest unacked fragment;
 *   srtt + 4 rttvar (tw_rel_rto), at least TW_REL_RTO, doubled per retry
 *   up to TW_REL_RTO_MAX, restarted by an ack that acknowledges something
 *   new;
 * - path failure: a fragment unacked after TW_REL_MIN_TRIES tries on a
 *   path, when no ack has acknowledged anything new for
 *   TW_REL_PATH_TIMEOUT, fails that path for that peer (a lossy path
 *   still makes progress; a dead one does not); so does a path whose
 *   transport refused every frame (TW_ERR_AGAIN) that long;
 * - delayed ack: TW_REL_ACK_DELAY;
 * - keepalive: a peer silent for TW_REL_KEEPALIVE is pinged (it answers
 *   PONG from its engine); silent for TW_REL_KEEPALIVE * TW_REL_MISSES,
 *   with TW_REL_MISSES - 1 pings unanswered, it has failed, whatever its
 *   transports say (a stopped process's kernel still acks TCP); not
 *   while we leave with our goodbye unacknowledged (that is the probe then);
 * - probes of failed paths, every TW_REL_PROBE (tw_rel_path.c).
 *
 * The clock is read only where a time must be exact: a round-trip
 * sample, a timer restart, a resend decision, a control frame, a timer
 * pass (docs/decisions/rel-clock-readings.md). Elsewhere the peer's
 * latest reading stands in (tw_rel_now_t, tw_rel_stamp_t), and every use
 * of it errs on the safe side: an ack deadline comes early, and a data
 * arrival's last_rx_ns may be early -- so the keepalive also waits for
 * misses - 1 unanswered pings before it fails a peer.
 *
 * Each peer's earliest deadline lowers rel's next_due; a pass over the
 * peers runs when it is reached -- by a waiting worker in tw_rel_poll,
 * or by the engine, which the one-shot timerfd, armed TW_REL_TIMER_SLACK
 * after next_due, wakes only when nobody else got there first (the engine
 * may share a core with the worker it would steal from). In manual mode
 * the callers of tw_progress run the passes and no timer is armed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "reliability/tw_rel_int.h"

#define TW_REL_TIMER_SLACK 250000ull /* ns the engine's timer fires after a deadline */
#define TW_REL_MIN_TRIES   6u

/* Arm the timerfd (one-shot, absolute) for @p due unless it is armed for
 * earlier: the engine wakes only when something is due and nobody saw to
 * it first (waiting workers run the same pass, tw_rel_poll, and usually
 * find the deadline moved: an ack came). TW_REL_TIMER_SLACK late, so a
 * worker that polls gets there first and the engine -- which may share
 * its core -- stays asleep. Any thread; takes arm_lock, may hold a
 * peer's lock. */
void tw_rel_timer_at(tw_rel_t *rel, uint64_t due)
{
    struct itimerspec its = {{0, 0}, {0, 0}};

    if (!rel->timer_used) {
        return;
    }
    due = due > UINT64_MAX - TW_REL_TIMER_SLACK ? UINT64_MAX : due + TW_REL_TIMER_SLACK;
    if (due >= atomic_load_explicit(&rel->armed_at, memory_order_relaxed)) {
        return;
    }
    tw_mutex_lock(&rel->arm_lock);
    if (due < atomic_load_explicit(&rel->armed_at, memory_order_relaxed)) {
        atomic_store_explicit(&rel->armed_at, due, memory_order_relaxed);
        due = TW_MAX(due, 1); /* 0 would disarm */
        its.it_value.tv_sec = (time_t)(due / 1000000000u);
        its.it_value.tv_nsec = (long)(due % 1000000000u);
        if (timerfd_settime(rel->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
            tw_warn("rel", "cannot set the timer: %s", strerror(errno));
        }
    }
    tw_mutex_unlock(&rel->arm_lock);
}

/* The current path has refused (TW_ERR_AGAIN) every data frame for the
 * path timeout, and the peer acknowledged nothing new meanwhile: as lost
 * as one whose retransmissions go unanswered (a hop that stopped
 * reading, a ring nobody drains). Without this bound the fragment would
 * be offered on every pass for ever. Starts the count at the first
 * refusal (@p now: a fresh reading). Lock held. */
static bool tw_rel_refused_long(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now)
    TW_REQUIRES(p->lock)
{
    if (p->refused_ns == 0) {
        p->refused_ns = now;
        return false;
    }
    if (peer == rel->rank || tw_rel_cur_path(p) < 0 ||
        tw_rel_since(now, TW_MAX(p->refused_ns, p->progress_ns)) < rel->cfg.path_timeout_ns) {
        return false;
    }
    p->refused_ns = 0;
    return true;
}

/* The peer's retransmission timer; returns the earliest deadline of the
 * fragments it looked at (UINT64_MAX: none). Lock held. */
static uint64_t tw_rel_resend_due(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now,
                                  int *events, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    uint64_t next = UINT64_MAX;

restart:;
    /* One retransmission timer per peer, as TCP has: only the oldest
     * unacked fragment is resent on timeout (the others are likely held
     * behind it at the receiver, whose NACKs name the next gap), and an
     * ack that acknowledges something new restarts it. Fragments never
     * sent on the current path (after AGAIN, or a failover) go at once. */
    bool oldest = true;
    int cur = tw_rel_cur_path(p);
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt && !p->down; seq++) {
        tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg == NULL || s->acked) {
            continue;
        }
        bool fresh = s->sent_ns == 0 || s->path != cur;
        if (!oldest && !fresh) {
            continue; /* waits for the oldest */
        }
        oldest = false;
        if (s->due_ns <= now && s->stamp_early && !fresh) {
            /* Sent at some time since sent_ns (TW_REL_STAMP_EARLY):
             * its timeout runs from now. */
            s->stamp_early = false;
            s->due_ns = now + s->rto_ns;
        } else if (s->due_ns <= now && p->left) {
            /* It said goodbye: it has finalized, and acks for what it got
             * before have had a timeout to arrive. Nothing sent again
             * would be received -- over tcp a dial it refuses: what is
             * left fails, quietly (a departure, reported already). */
            tw_rel_peer_fail(rel, p, peer, "it left", todo);
            return UINT64_MAX;
        } else if (s->due_ns <= now) {
            /* Never to ourselves: that path is in-process, only ever
             * slow (our own engine starved), and failing it would fail
             * this very rank. Never for a fresh fragment: its path is
             * not the current one (failed back from, or lost already:
             * then the call changes nothing and the pass would restart
             * for ever); it goes on the current path, tries afresh. */
            if (peer != rel->rank && !fresh && s->tries >= TW_REL_MIN_TRIES &&
                tw_rel_since(now, TW_MAX(s->first_ns, p->progress_ns)) >=
                    rel->cfg.path_timeout_ns) {
                tw_rel_path_lost(rel, p, peer, s->path, false, "retransmissions unanswered", now,
                                 todo);
                goto restart;
            }
            (*events)++;
            if (tw_rel_tx_data(rel, p, peer, s, seq, now, todo) == TW_ERR_AGAIN) {
                if (tw_rel_refused_long(rel, p, peer, now)) {
                    tw_rel_path_lost(rel, p, peer, tw_rel_cur_path(p), false,
                                     "it refused every frame", now, todo);
                    goto restart;
                }
                next = now;
                break;
            }
        }
        next = TW_MIN(next, s->due_ns);
    }
    return next;
}

/* The delayed ack goes when due (and stays due if the path refused it).
 * Returns its deadline; UINT64_MAX: none. Lock held. */
static uint64_t tw_rel_ack_due(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now, int *events)
    TW_REQUIRES(p->lock)
{
    if (p->ack_due == 0) {
        return UINT64_MAX;
    }
    if (p->ack_due <= now) {
        (*events)++;
        if (tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0) != TW_OK) {
            p->ack_due = now;
        }
    }
    return p->ack_due != 0 ? p->ack_due : UINT64_MAX;
}

/* Keepalive: a peer silent for TW_REL_KEEPALIVE is pinged, one silent for
 * TW_REL_MISSES times that has failed. Returns false when it failed it;
 * lowers *@p next_p to when to look again. Lock held. */
static bool tw_rel_keepalive(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now,
                             tw_rel_deferred_t *todo, uint64_t *next_p) TW_REQUIRES(p->lock)
{
    if (peer == rel->rank || p->left) {
        return true;
    }
    uint64_t silent = tw_rel_since(now, p->last_rx_ns);
    if (p->closing) {
        /* Finalizing (tw_rel_peer_t): no pings to it -- a dial it would
         * refuse; silent for a keepalive period since it began (what it
         * still sends on another path may be on its way), it has left. */
        uint64_t quiet = TW_MIN(silent, tw_rel_since(now, p->closing_ns));
        if (quiet >= rel->cfg.keepalive_ns) {
            p->left = true;
            if (!p->reported) {
                p->reported = true;
                todo->report = true;
                todo->why = TW_OK;
            }
            tw_rel_peer_fail(rel, p, peer, "it closed without a goodbye", todo);
            return false;
        }
        *next_p = TW_MIN(*next_p, TW_MAX(p->last_rx_ns, p->closing_ns) + rel->cfg.keepalive_ns);
        return true;
    }
    if (atomic_load_explicit(&rel->leaving, memory_order_relaxed) && tw_rel_bye_unacked(p)) {
        /* We leave and our goodbye went (after all we sent): no pings. They
         * would go on every path, a standby one too -- a dial of a rank
         * that may have left (over tcp a refused connect, an error line).
         * The goodbye's retransmissions are the probe; unanswered for the
         * path timeout, they end it quietly (tw_rel_path_lost). */
        return true;
    }
    /* Failed once silent that long with misses - 1 pings unanswered:
     * last_rx_ns may be an earlier reading than the frame's arrival
     * (tw_rel_now_t), so a pass after a long pause of progress
     * pings first. */
    if (silent >= rel->cfg.keepalive_ns * (uint64_t)rel->cfg.misses &&
        p->pings + 1 >= (unsigned)rel->cfg.misses) {
        char what[96];
        snprintf(what, sizeof(what), "silent for %llu ms (keepalive %llu ms x %d)",
                 (unsigned long long)(silent / 1000000),
                 (unsigned long long)(rel->cfg.keepalive_ns / 1000000), rel->cfg.misses);
        tw_rel_peer_fail(rel, p, peer, what, todo);
        return false;
    }
    if (silent >= rel->cfg.keepalive_ns && now >= p->ping_due) {
        /* On every usable path: one that works is enough. */
        p->ping_due = now + rel->cfg.keepalive_ns;
        p->pings++;
        for (unsigned g = 0; g < rel->npaths; g++) {
            if ((p->paths_reach & (uint8_t)~p->paths_dead) >> g & 1 &&
                tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_PING, (int)g, (uint32_t)(now >> 20)) ==
                    TW_OK) {
                tw_stats_inc(rel->stats, TW_REL_STAT_PINGS);
            }
        }
    }
    *next_p = TW_MIN(*next_p, TW_MAX(p->last_rx_ns + rel->cfg.keepalive_ns, p->ping_due));
    return true;
}

/* Timers of one peer; returns its next deadline. Lock held. */
static uint64_t tw_rel_peer_tick(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now,
                                 int *events, tw_rel_deferred_t *todo) TW_REQUIRES(p->lock)
{
    uint64_t next;

    p->clock_ns = TW_MAX(p->clock_ns, now);
    next = tw_rel_resend_due(rel, p, peer, now, events, todo);
    if (p->down) {
        return UINT64_MAX;
    }
    tw_rel_push(rel, p, peer, now, TW_REL_STAMP_READ, todo);
    next = TW_MIN(next, tw_rel_ack_due(rel, p, peer, now, events));
    if (!tw_rel_keepalive(rel, p, peer, now, todo, &next)) {
        return UINT64_MAX;
    }
    return TW_MIN(next, tw_rel_probe(rel, p, peer, now));
}

/* The timer pass over every peer; returns events. Whoever wins the pass
 * flag runs it: the engine, or a waiting worker (tw_rel_poll). Takes
 * each peer's lock in turn. */
int tw_rel_timers(tw_rel_t *rel, bool check)
{
    static TW_TLS const tw_rel_t *last;
    static TW_TLS unsigned skip;
    uint64_t now, next, armed;
    int events = 0;

    /* Callers spin on this: read the clock on every 8th call of a thread
     * for one rel only, or when told to (the engine woke: its timer may
     * have fired). */
    if (!check && last == rel && skip-- > 0) {
        return 0;
    }
    last = rel;
    skip = 7;
    now = rel->clock();
    if (now < atomic_load_explicit(&rel->next_due, memory_order_relaxed) ||
        atomic_flag_test_and_set_explicit(&rel->in_pass, memory_order_acquire)) {
        return 0;
    }
    /* The timer fired or is about to: it is armed for nothing now. */
    armed = atomic_load_explicit(&rel->armed_at, memory_order_relaxed);
    if (armed <= now + TW_REL_TIMER_SLACK) { /* for a deadline that has passed */
        (void)atomic_compare_exchange_strong_explicit(&rel->armed_at, &armed, UINT64_MAX,
                                                      memory_order_relaxed, memory_order_relaxed);
    }
    /* Peers' deadlines lower this again as the pass finds them. */
    next = now + TW_MIN(rel->cfg.keepalive_ns, rel->cfg.probe_ns);
    atomic_store_explicit(&rel->next_due, next, memory_order_relaxed);
    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        tw_rel_deferred_t todo = {0};
        uint64_t due;

        if (p->paths_reach == 0) {
            continue;
        }
        tw_mutex_lock(&p->lock);
        due = tw_rel_peer_tick(rel, p, peer, now, &events, &todo);
        tw_mutex_unlock(&p->lock);
        tw_rel_finish(rel, peer, &todo);
        if (due < next) {
            tw_rel_arm(rel, TW_MAX(due, now));
        }
    }
    tw_rel_timer_at(rel, atomic_load_explicit(&rel->next_due, memory_order_relaxed));
    atomic_flag_clear_explicit(&rel->in_pass, memory_order_release);
    return events;
}

static int tw_rel_progress(void *arg)
{
    tw_rel_t *rel = arg;
    int events = 0;

    /* The engine (or a manual-mode caller) spins on this: unless a
     * worker left messages to hand up, look at the timers (and whether
     * the engine woke: its timerfd may have fired) on every 16th pass
     * only -- a clock reading on every pass costs a spinning caller more
     * than the timers need, and a woken engine passes 16 times in
     * microseconds (its timerfd stays readable until read). */
    if ((++rel->passes & 15u) != 0 &&
        !atomic_load_explicit(&rel->drain_wanted, memory_order_relaxed)) {
        return 0;
    }
    uint64_t w = tw_pe_wakeups(rel->pe);
    bool woke = w != rel->wakeups;
    if (woke) {
        uint64_t ticks;
        rel->wakeups = w;
        if (read(rel->timer_fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN) {
            tw_debug("rel", "timer read: %s", strerror(errno));
        }
    }
    /* Messages a worker could not hand up (they run user code). */
    if (atomic_load_explicit(&rel->drain_wanted, memory_order_acquire) &&
        atomic_exchange_explicit(&rel->drain_wanted, false, memory_order_acq_rel)) {
        events += tw_rel_engine_drain(rel);
    }
    return events + tw_rel_timers(rel, true);
}

int tw_rel_progress_op(tw_tl_iface_t *iface)
{
    return tw_rel_progress(iface);
}
