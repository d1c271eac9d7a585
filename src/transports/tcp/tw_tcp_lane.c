/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP lanes: the event bases and what drives them, liveness, and peer
 * failure.
 *
 * Lanes. The iface runs TW_TCP_THREADS lanes (default: one per CPU socket,
 * one in manual mode). A lane is a libevent base with its own listening
 * sockets, timer and connections, driven by exactly one progress engine:
 * lane 0 by the context's engine, lane k > 0 by an engine of our own (with
 * a thread when the context has progress threads; otherwise tw_progress
 * drives it through lane 0). The connection to rank p lives on lane
 * p % lanes, on both sides: each rank publishes one port per lane, and a
 * connector dials the port of the lane that owns it on the acceptor
 * (a HELLO that reaches the wrong lane is refused). So no socket ever
 * changes thread, and every peer's frames stay in order.
 *
 * Engines drive a lane by running event_base_loop(EVLOOP_NONBLOCK) in
 * their progress pass; every socket (and the lane's timerfd) is also in
 * the engine's epoll set (tw_pe_watch), so a sleeping engine wakes for it.
 * A lane without connections runs its loop at most once a millisecond,
 * which keeps an unused transport (shm carries node-local traffic) out of
 * the other transports' latency.
 *
 * Waiting. A lane that may hold few connections (its job's ranks on it,
 * other than us, at most TW_TCP_POLL_MAX) has libevent wait with poll(2),
 * a larger one with epoll. On this project's test machine an epoll_wait
 * that returns a socket costs about 0.8 us more than an empty one, a
 * poll(2) over a few sockets 0.1 us more; 8 B across two emulated nodes
 * went from 13.0 to 11.8 us on a busy host, 8.59 to 8.36 on a quiet one
 * (BENCHMARKS.md, "poll for few sockets"). An
 * empty poll(2) costs more per socket (1.3 us for 1, 2.0 for 16, 3.5 for
 * 32, where epoll stays near 1.1), and every pass pays it.
 *
 * Reading without polling. A thread that polls a lane rather than sleeps
 * on it -- a worker spinning in tw_cq_wait, tw_cq_poll or tw_progress
 * with the lane's engine free, or tw_progress in manual mode -- reads a
 * lane of at most TW_TCP_DIRECT_RECV established connections with
 * recv(2) directly (tw_tcp_lane_direct), and runs the event loop only
 * on every 64th pass or after 1 ms (accepts, the timer, sockets waiting
 * for room). An empty recv costs what an empty poll does (1.2-1.5 us
 * here), and a message found costs one syscall, not two, with none of
 * the loop's own work: a barrier across two emulated nodes 15.6 -> 12.1
 * us (Open MPI 15.6), where a raw socket exchange takes 9.4-10.4. An
 * engine's own pass reads first too, and runs the loop only when that
 * found nothing (tw_tcp_lane_engine): with the workers asleep, that
 * barrier 21.9 -> 17.6 us.
 *
 * Liveness. TW_TCP_TIMEOUT (default 10 s; 0 = off) bounds how long a peer
 * may stay silent: the kernel aborts a connection whose sent data stays
 * unacknowledged that long (TCP_USER_TIMEOUT, which also covers a zero
 * window) and probes idle ones (SO_KEEPALIVE); and, since a stopped or
 * hung process's kernel still answers both, the lanes send a PING frame on
 * any connection idle for a quarter of the timeout, and declare a peer
 * failed when nothing arrived from it for the larger of its timeout and
 * ours. Only peers that run progress threads are judged by silence (they
 * publish that flag): a manual-mode rank may legitimately not progress
 * for a while -- for the same reason a handshake with one may take
 * TW_TCP_TIMEOUT, not the 2 s allowed to a rank with progress threads.
 *
 * Failure. A clean close writes a FIN frame: the peer then knows it left.
 * A write that meets the peer's close (EPIPE, ECONNRESET) stops writing and
 * leaves the verdict to the read side, which may still hold that FIN
 * unread (a send written at once can come before the loop reads).
 * EOF without FIN, a reset, a socket error (including the user timeout),
 * silence past the timeout, or a bad frame fails the peer: its queued and
 * in-flight sends complete with TW_ERR_PEER_FAILED and the layer above is
 * told (peer_down), from the lane's engine thread.
 */
#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/tcp/tw_tcp_int.h"

#define TW_TCP_IDLE_LOOP (1000ull * 1000) /* a lane without connections: 1 ms */
/* Passes that read the sockets directly (TW_TCP_DIRECT_RECV) run the
 * event loop once in this many, and at least this often. */
#define TW_TCP_DIRECT_LOOP    64u
#define TW_TCP_DIRECT_LOOP_NS (1000ull * 1000) /* 1 ms */

/* Close every connection of @p ep and complete its queued frames with @p st. */
void tw_tcp_ep_close(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep, tw_status_t st)
{
    if (ep->conn != NULL) {
        tw_tcp_conn_close(ep->conn);
    }
    if (ep->pending != NULL) {
        tw_tcp_conn_close(ep->pending);
    }
    if (ep->accepting != NULL) {
        tw_tcp_conn_close(ep->accepting);
    }
    while (ep->head != NULL) {
        tw_tcp_frame_out_t *f = ep->head;
        ep->head = f->next;
        tw_tcp_frame_done(lane, f, st);
    }
    ep->tail = NULL;
    ep->queued = 0;
    /* No frame points into their buffers any more: the rendezvous sends
     * and pulls with it complete. */
    tw_tcp_rsends_fail(ep, st);
    tw_tcp_pulls_fail(ep, st);
}

void tw_tcp_fail_peer(tw_tcp_lane_t *lane, int peer, tw_status_t why, const char *what)
{
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_ep_t *ep = &tcp->eps[peer];

    if (ep->failed) {
        return;
    }
    ep->failed = true;
    atomic_store_explicit(&tcp->down[peer], 1, memory_order_release);
    if (why == TW_OK) {
        tw_debug("tcp", "rank %d left the job", peer);
    } else {
        tw_error("tcp", "rank %d failed: %s; its operations complete with TW_ERR_PEER_FAILED", peer,
                 what);
    }
    tw_tcp_ep_close(lane, ep, TW_ERR_PEER_FAILED);
    if (ep->reparse) {
        ep->reparse = false;
        lane->nreparse--;
    }
    if (lane->in_worker) {
        ep->down_why = (int)why; /* reported by the engine (user code) */
        ep->next_down = lane->downs;
        lane->downs = ep;
        tw_pe_wake(lane->pe);
    } else if (tcp->super.peer_down != NULL) {
        tcp->super.peer_down(tcp->super.peer_down_arg, peer, why);
    }
}

/* Engine side: what workers left for it -- frames held for user code,
 * failures to report. */
static void tw_tcp_worker_leftovers(tw_tcp_lane_t *lane)
{
    tw_tcp_iface_t *tcp = lane->tcp;

    while (lane->downs != NULL) {
        tw_tcp_ep_t *ep = lane->downs;
        lane->downs = ep->next_down;
        if (tcp->super.peer_down != NULL) {
            tcp->super.peer_down(tcp->super.peer_down_arg, (int)(ep - tcp->eps),
                                 (tw_status_t)ep->down_why);
        }
    }
    for (int p = lane->index; lane->nreparse > 0 && p < tcp->super.size; p += tcp->nlanes) {
        tw_tcp_ep_t *ep = &tcp->eps[p];
        if (!ep->reparse) {
            continue;
        }
        ep->reparse = false;
        lane->nreparse--;
        if (ep->conn != NULL && !tw_tcp_parse_frames(ep->conn)) {
            tw_tcp_fail_bad(ep->conn);
        } else if (ep->conn != NULL) {
            (void)tw_tcp_read(ep->conn); /* false: it is gone, and handled */
        }
    }
}

/* Liveness of the connected peers of @p lane: PING the idle ones, fail
 * the silent ones. */
static void tw_tcp_check_peers(tw_tcp_lane_t *lane, uint64_t now, bool grace)
{
    tw_tcp_iface_t *tcp = lane->tcp;
    uint64_t ping_after = tcp->cfg.timeout_ns / 4;

    for (int p = lane->index; p < tcp->super.size; p += tcp->nlanes) {
        tw_tcp_ep_t *ep = &tcp->eps[p];
        tw_tcp_conn_t *c = ep->conn;

        if (c == NULL || ep->failed) {
            continue;
        }
        if (grace) {
            c->last_rx = now; /* we were not running: do not blame the peer */
        }
        if (ep->head == NULL && now - c->last_tx >= ping_after) {
            tw_tcp_enqueue_ctl(lane, p, TW_TCP_FRAME_PING);
            tw_tcp_flush(lane, ep);
        }
        c = ep->conn; /* the flush may have failed it */
        if (c == NULL || ep->silence_ns == 0 || now - c->last_rx <= ep->silence_ns) {
            continue;
        }
        if (!tw_tcp_read(c) || ep->conn == NULL || tw_time_ns() - c->last_rx <= ep->silence_ns) {
            continue; /* it had something for us after all (or is gone) */
        }
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "nothing heard for %.1f s (TW_TCP_TIMEOUT): hung, stopped or "
                 "unreachable",
                 (double)(now - c->last_rx) / 1e9);
        tw_tcp_fail_peer(lane, p, TW_ERR_PEER_FAILED, msg);
    }
}

static void tw_tcp_on_tick(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_lane_t *lane = arg;
    tw_tcp_iface_t *tcp = lane->tcp;
    uint64_t expirations, now = tw_time_ns();
    bool grace;

    (void)what;
    if (read(fd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: a spurious wake-up; the checks below are cheap anyway */
    }
    /* A lane that did not run for half the timeout (a stopped process, a
     * starved thread) gives its peers a fresh start rather than blame. */
    grace = tcp->cfg.timeout_ns > 0 && now - lane->last_tick > tcp->cfg.timeout_ns / 2;
    lane->last_tick = now;
    /* Closing one connection may close others (a failed peer's): look
     * again from the start after each. */
    for (tw_tcp_conn_t *c = lane->handshaking; c != NULL;) {
        if (now <= c->hs_deadline) {
            c = c->next;
            continue;
        }
        {
            tw_stats_inc(tcp->super.stats, TW_TL_STAT_REFUSED);
            tw_warn("tcp", "handshake timed out (%s side)",
                    c->initiator ? "connecting" : "accepting");
            if (c->initiator && c->peer >= 0) {
                tw_tcp_fail_peer(lane, c->peer, TW_ERR_PEER_FAILED, "handshake timed out");
            } else {
                tw_tcp_conn_close(c);
            }
        }
        c = lane->handshaking;
    }
    if (tcp->cfg.timeout_ns > 0) {
        tw_tcp_check_peers(lane, now, grace);
    }
}

int tw_tcp_lane_progress(void *arg)
{
    tw_tcp_lane_t *lane = arg;

    tw_pe_assert_owner(lane->pe);
    lane->events = 0;
    lane->busy++;
    if (!lane->in_worker && (lane->downs != NULL || lane->nreparse > 0)) {
        tw_tcp_worker_leftovers(lane);
    }
    tw_tcp_flush_dirty(lane);
    /* Without connections, the loop runs for accepts every ms or so: the
     * coarse clock (a spinning engine passes here millions of times a
     * second; a new connection waits a tick more at worst). */
    if (lane->nconns > 0 || tw_pe_pass_coarse_ns(lane->pe) - lane->last_loop >= TW_TCP_IDLE_LOOP) {
        event_base_loop(lane->base, EVLOOP_NONBLOCK);
        lane->last_loop = tw_pe_pass_coarse_ns(lane->pe);
        tw_tcp_flush_dirty(lane);
    }
    lane->busy--;
    return lane->events;
}

/* May this pass read the lane's sockets itself (tw_tcp_lane_pass)? Its
 * connections all established and few, nothing waiting for room in a
 * socket, nothing left for the engine; and not the TW_TCP_DIRECT_LOOP-th
 * such pass in a row, nor TW_TCP_DIRECT_LOOP_NS after the last event
 * loop: that one runs the loop (accepts, the liveness timer, anything
 * else), so a thread that polls seldom loses nothing. */
static bool tw_tcp_lane_direct(tw_tcp_lane_t *lane)
{
    if (lane->nlive == 0 || lane->nlive > (unsigned)lane->tcp->cfg.direct_recv ||
        lane->nconns != lane->nlive || lane->nwant_out > 0 || lane->nreparse > 0 ||
        lane->downs != NULL) {
        return false;
    }
    return ++lane->direct_turns % TW_TCP_DIRECT_LOOP != 0 &&
           tw_pe_pass_coarse_ns(lane->pe) - lane->last_loop < TW_TCP_DIRECT_LOOP_NS;
}

/* Read every live connection with recv(2), no poll(2) first: on this
 * project's test machine either syscall costs 1.2-1.5 us, so a message
 * found by polling costs two. */
static int tw_tcp_lane_read_direct(tw_tcp_lane_t *lane)
{
    lane->events = 0;
    lane->busy++;
    tw_tcp_flush_dirty(lane); /* (a direct send leaves its peer on the list) */
    for (tw_tcp_conn_t *c = lane->live; c != NULL; c = c->next) {
        if (!tw_tcp_read(c)) {
            break; /* @p c is gone; the rest wait for the next pass */
        }
    }
    tw_tcp_flush_dirty(lane); /* what the frames read made us send */
    lane->busy--;
    if (lane->events > 0) {
        tw_stats_inc(lane->tcp->super.stats, TW_TL_STAT_RX_DIRECT);
    }
    return lane->events;
}

/* A pass of a thread that polls the lane instead of sleeping on it (a
 * worker's tw_cq_wait spin, tw_cq_poll, tw_progress; tw_progress in
 * manual mode): direct reads when it may, else the progress pass. */
static int tw_tcp_lane_pass(tw_tcp_lane_t *lane)
{
    return tw_tcp_lane_direct(lane) ? tw_tcp_lane_read_direct(lane) : tw_tcp_lane_progress(lane);
}

/* An engine's own pass (its thread, woken by one of the lane's fds, or
 * spinning): the few connections read first when it may, and the event
 * loop only when that found nothing -- the wake-up was for an accept, the
 * timer, room in a socket -- so a message costs the wake-up and one read. */
static int tw_tcp_lane_engine(void *arg)
{
    tw_tcp_lane_t *lane = arg;
    int events;

    if (tw_tcp_lane_direct(lane) && (events = tw_tcp_lane_read_direct(lane)) > 0) {
        return events;
    }
    return tw_tcp_lane_progress(lane);
}

/* A worker polls a lane (it holds the lane engine's lock). */
static int tw_tcp_lane_poll(void *arg)
{
    tw_tcp_lane_t *lane = arg;
    int events;

    if (lane->nconns == 0 && lane->dirty == NULL) {
        return 0;
    }
    lane->in_worker = true;
    events = tw_tcp_lane_pass(lane);
    lane->in_worker = false;
    if (lane->dirty == NULL && lane->nwant_out == 0 && lane->handles.next == &lane->handles) {
        /* Nothing outbound nor half-received: its thread need not watch
         * the sockets while workers poll them. */
        tw_pe_lease(lane->pe);
    }
    return events;
}

/* tw_progress / tw_cq_wait with progress threads: each lane is polled if
 * its engine is idle (its try-lock). */
int tw_tcp_poll(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    int events = 0;

    for (int k = 0; k < tcp->nlanes; k++) {
        events += tw_pe_try_call(tcp->lanes[k].pe, tw_tcp_lane_poll, &tcp->lanes[k]);
    }
    return events;
}

/* The context's engine: lane 0, and the other lanes when they have no
 * thread of their own (manual progress). */
int tw_tcp_progress(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    /* Manual mode: this is the caller's tw_progress, which polls. */
    int events =
        tcp->threads ? tw_tcp_lane_engine(&tcp->lanes[0]) : tw_tcp_lane_pass(&tcp->lanes[0]);

    if (!tcp->threads) {
        for (int k = 1; k < tcp->nlanes; k++) {
            events += tw_pe_progress(tcp->lanes[k].pe);
        }
    }
    return events;
}

/* Frames still queued to a live peer (finalize lets them out first). */
bool tw_tcp_queued(const tw_tcp_iface_t *tcp)
{
    for (int r = 0; r < tcp->super.size; r++) {
        if (tcp->eps[r].head != NULL && !tcp->eps[r].failed) {
            return true;
        }
    }
    return false;
}

static tw_status_t tw_tcp_listen(tw_tcp_lane_t *lane, int a)
{
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_addr_t bound = tcp->addrs[a];
    int fd = socket(bound.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    char s[80];

    lane->lis[a].fd = fd;
    if (fd >= 0 && bound.ss.ss_family == AF_INET6) {
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&bound.ss, bound.len) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound.ss, &bound.len) != 0) {
        tw_error("tcp", "cannot listen on %s: %m", tw_tcp_addr_str(&tcp->addrs[a], s, sizeof(s)));
        return TW_ERR_TRANSPORT;
    }
    lane->ports[a] = ntohs(((struct sockaddr_in *)&bound.ss)->sin_port); /* same offset in v6 */
    lane->lis[a].ev = event_new(lane->base, fd, EV_READ | EV_PERSIST, tw_tcp_on_accept, lane);
    if (lane->lis[a].ev == NULL || event_add(lane->lis[a].ev, NULL) != 0 ||
        tw_pe_watch(lane->pe, fd) != TW_OK) {
        return TW_ERR_TRANSPORT;
    }
    tw_debug("tcp", "lane %d listening on %s", lane->index, tw_tcp_addr_str(&bound, s, sizeof(s)));
    return TW_OK;
}

/* The ranks other than us whose connection would live on lane @p k. */
static int tw_tcp_lane_peers(const tw_tcp_iface_t *tcp, int k)
{
    int n = 0;

    for (int r = k; r < tcp->super.size; r += tcp->nlanes) {
        n += r != tcp->super.rank;
    }
    return n;
}

tw_status_t tw_tcp_lane_open(tw_tcp_iface_t *tcp, int k, const tw_tl_params_t *params)
{
    tw_tcp_lane_t *lane = &tcp->lanes[k];
    struct itimerspec its = {0};
    tw_status_t st;

    lane->tcp = tcp;
    lane->index = k;
    lane->handles.next = lane->handles.prev = &lane->handles;
    lane->timer_fd = -1;
    for (int a = 0; a < TW_TCP_MAX_ADDRS; a++) {
        lane->lis[a].fd = -1;
    }
    lane->pe = params->pe;
    if (k > 0) {
        tw_pe_params_t p = *params->pe_params;
        char name[32];
        int npkg = tw_topo_num_packages();
        snprintf(name, sizeof(name), "tcp%d", k);
        p.name = name;
        p.bind_package = p.thread ? k % npkg : -1;
        st = tw_pe_create(&p, &lane->pe);
        if (st != TW_OK) {
            lane->pe = NULL;
            return st;
        }
        lane->own_pe = true;
        st = tw_pe_add(lane->pe, tw_tcp_lane_engine, lane, -1);
        if (st == TW_OK) {
            st = tw_pe_workers_poll(lane->pe); /* tw_cq_wait polls it too */
        }
        if (st != TW_OK) {
            return st;
        }
    }
    /* Whoever holds the lane engine's lock (the engine, or a worker in
     * tw_tcp_direct_fn / tw_tcp_lane_poll) is the only one touching the
     * base, so libevent's own lock would only cost a mutex pair per pass;
     * and no libevent timer is used (the tick is a timerfd), so its time
     * cache would only cost a clock read per pass. */
    int peers = tw_tcp_lane_peers(tcp, k);
    bool use_poll = peers <= tcp->cfg.poll_max;
    struct event_config *ecfg = event_config_new();
    if (ecfg == NULL ||
        event_config_set_flag(ecfg, EVENT_BASE_FLAG_NOLOCK | EVENT_BASE_FLAG_NO_CACHE_TIME) != 0 ||
        (use_poll && event_config_avoid_method(ecfg, "epoll") != 0)) {
        if (ecfg != NULL) {
            event_config_free(ecfg);
        }
        tw_error("tcp", "cannot configure an event base for lane %d", k);
        return TW_ERR_NOMEM;
    }
    lane->base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    if (lane->base == NULL) {
        tw_error("tcp", "cannot make an event base for lane %d", k);
        return TW_ERR_NOMEM;
    }
    tw_debug("tcp", "lane %d waits with %s (%d peer%s on it, TW_TCP_POLL_MAX %d)", k,
             event_base_get_method(lane->base), peers, peers == 1 ? "" : "s", tcp->cfg.poll_max);
    for (int a = 0; a < tcp->naddrs; a++) {
        st = tw_tcp_listen(lane, a);
        if (st != TW_OK) {
            return st;
        }
    }
    /* The tick: handshake deadlines, PINGs, silent peers. */
    lane->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    its.it_interval.tv_sec = (time_t)(tcp->tick_ns / 1000000000u);
    its.it_interval.tv_nsec = (long)(tcp->tick_ns % 1000000000u);
    its.it_value = its.it_interval;
    lane->last_tick = tw_time_ns();
    if (lane->timer_fd < 0 || timerfd_settime(lane->timer_fd, 0, &its, NULL) != 0) {
        tw_error("tcp", "cannot make a timer: %m");
        return TW_ERR_TRANSPORT;
    }
    lane->ev_timer =
        event_new(lane->base, lane->timer_fd, EV_READ | EV_PERSIST, tw_tcp_on_tick, lane);
    if (lane->ev_timer == NULL || event_add(lane->ev_timer, NULL) != 0 ||
        tw_pe_watch(lane->pe, lane->timer_fd) != TW_OK) {
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

void tw_tcp_lane_close(tw_tcp_lane_t *lane)
{
    tw_tcp_iface_t *tcp = lane->tcp;

    if (tcp == NULL) {
        return; /* never opened */
    }
    while (lane->handshaking != NULL) {
        tw_tcp_conn_t *c = lane->handshaking;
        c->peer = -1;
        tw_tcp_conn_close(c);
    }
    while (lane->live != NULL) {
        tw_tcp_conn_close(lane->live); /* (its peer's ep forgets it) */
    }
    while (lane->handles.next != &lane->handles) {
        tw_tcp_rndv_free(lane->handles.next); /* staged, never asked for */
    }
    while (lane->pool != NULL) {
        tw_tcp_frame_out_t *f = lane->pool;
        lane->pool = f->next;
        tw_free(f, f->alloc_len);
    }
    for (int a = 0; a < TW_TCP_MAX_ADDRS; a++) {
        if (lane->lis[a].ev != NULL) {
            event_free(lane->lis[a].ev);
        }
        if (lane->lis[a].fd >= 0) {
            if (lane->pe != NULL) {
                tw_pe_unwatch(lane->pe, lane->lis[a].fd);
            }
            close(lane->lis[a].fd);
        }
    }
    if (lane->ev_timer != NULL) {
        event_free(lane->ev_timer);
    }
    if (lane->timer_fd >= 0) {
        if (lane->pe != NULL) {
            tw_pe_unwatch(lane->pe, lane->timer_fd);
        }
        close(lane->timer_fd);
    }
    if (lane->base != NULL) {
        event_base_free(lane->base);
    }
}
