/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP connections: socket options, the handshake, simultaneous connects,
 * accept, and what a broken socket means.
 *
 * Connections are made lazily, on the first frame to a peer, and go
 * through these states (tw_tcp_int.h):
 *   connector: CONNECT_ACK (non-blocking connect, HELLO queued, waiting
 *              for WELCOME) -> CONNECTED (WELCOME's proof checked, PROVE
 *              queued ahead of the frames);
 *   acceptor:  ACCEPTED (waiting for HELLO) -> WELCOMED (WELCOME sent,
 *              waiting for PROVE) -> CONNECTED (PROVE's proof checked).
 * A connection that fails or loses, in any state, is closed and freed.
 * Both sides prove the job key over the other's nonce (tw_tcp_proto.h:
 * the key never travels). Handshake messages are written without blocking
 * (EV_WRITE finishes a partial one), and no frame is written before the
 * connection is CONNECTED, so when both ranks connect at once the one
 * initiated by the lower rank wins and the other is closed without loss
 * or error (tw_tcp_on_hello). A connection that fails the handshake (bad
 * magic, version, proof, wrong lane, or silence past its deadline: 2 s,
 * TW_TCP_TIMEOUT with a rank without progress threads) is closed, counted
 * (tl stat "refused") and logged; when it was our connect to a rank of
 * the job, that rank has failed. A connect that fails outright tries the
 * peer's next published address.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/tcp/tw_tcp_int.h"

/* TW_TCP_CONGESTION on @p fd. */
static int tw_tcp_set_congestion(int fd, const char *name)
{
    return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name));
}

/* Whether this host lets us use congestion control @p name: tried on a
 * socket of our own, so a name it lacks fails tw_init with the list it
 * has, not every connection later. */
tw_status_t tw_tcp_check_congestion(const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char have[256] = "?";

    if (fd < 0) {
        fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    if (fd < 0) {
        tw_error("tcp", "TW_TCP_CONGESTION=%s: cannot open a socket to try it: %m", name);
        return TW_ERR_INVALID;
    }
    if (tw_tcp_set_congestion(fd, name) == 0) {
        close(fd);
        return TW_OK;
    }
    int err = errno;
    close(fd);
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_allowed_congestion_control", "r");
    if (f != NULL) {
        if (fgets(have, sizeof(have), f) != NULL) {
            have[strcspn(have, "\n")] = '\0';
        }
        fclose(f);
    }
    tw_error("tcp",
             "TW_TCP_CONGESTION=%s: %s (this host allows: %s; "
             "net.ipv4.tcp_allowed_congestion_control)",
             name, strerror(err), have);
    return TW_ERR_INVALID;
}

/* Socket options every connection gets: no Nagle, TW_TCP_CONGESTION,
 * TW_TCP_NOTSENT_LOWAT and the liveness bound. */
static void tw_tcp_sockopts(const tw_tcp_iface_t *tcp, int fd)
{
    int one = 1;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (tcp->cfg.congestion[0] != '\0' && tw_tcp_set_congestion(fd, tcp->cfg.congestion) != 0) {
        tw_debug("tcp", "TCP_CONGESTION %s: %m", tcp->cfg.congestion); /* allowed at open */
    }
    if (tcp->cfg.notsent_lowat > 0) {
        int lowat = (int)tcp->cfg.notsent_lowat;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat)) != 0) {
            tw_debug("tcp", "TCP_NOTSENT_LOWAT %d: %m", lowat);
        }
    }
    if (tcp->cfg.timeout_ns > 0) {
        unsigned ms = (unsigned)(tcp->cfg.timeout_ns / 1000000u);
        int probe_s = (int)(tcp->cfg.timeout_ns / 3000000000ull);
        int cnt = 3;
        if (ms == 0) {
            ms = 1;
        }
        if (probe_s < 1) {
            probe_s = 1;
        }
        (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    }
}

static tw_tcp_conn_t *tw_tcp_conn_new(tw_tcp_lane_t *lane, int fd, int state, int peer,
                                      bool initiator)
{
    tw_tcp_conn_t *c = tw_calloc(1, sizeof(*c));
    uint64_t now = tw_time_ns();

    if (c == NULL) {
        close(fd);
        return NULL;
    }
    tw_tcp_sockopts(lane->tcp, fd);
    c->lane = lane;
    c->fd = fd;
    c->state = state;
    c->peer = peer;
    c->initiator = initiator;
    c->hs_deadline = now + (peer >= 0 ? lane->tcp->eps[peer].hs_ns : TW_TCP_HS_TIMEOUT);
    c->last_rx = c->last_tx = now;
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != (ssize_t)sizeof(c->nonce)) {
        tw_free(c, sizeof(*c));
        close(fd);
        return NULL;
    }
    c->ev_read = event_new(lane->base, fd, EV_READ | EV_PERSIST, tw_tcp_on_read, c);
    c->ev_write = event_new(lane->base, fd, EV_WRITE, tw_tcp_on_write, c);
    if (c->ev_read == NULL || c->ev_write == NULL || event_add(c->ev_read, NULL) != 0 ||
        tw_pe_watch(lane->pe, fd) != TW_OK) {
        if (c->ev_read != NULL) {
            event_free(c->ev_read);
        }
        if (c->ev_write != NULL) {
            event_free(c->ev_write);
        }
        tw_free(c, sizeof(*c));
        close(fd);
        return NULL;
    }
    c->next = lane->handshaking;
    lane->handshaking = c;
    lane->nconns++;
    return c;
}

/* Off the lane's list @p c is on, if any: handshaking or, CONNECTED,
 * live. */
static void tw_tcp_unlink(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    bool live = c->state == TW_TCP_CONNECTED;

    for (tw_tcp_conn_t **pp = live ? &lane->live : &lane->handshaking; *pp != NULL;
         pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            lane->nlive -= live;
            return;
        }
    }
}

void tw_tcp_conn_close(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;

    tw_tcp_unlink(c);
    if (c->peer >= 0) {
        tw_tcp_ep_t *ep = &lane->tcp->eps[c->peer];
        if (ep->conn == c) {
            ep->conn = NULL;
        }
        if (ep->pending == c) {
            ep->pending = NULL;
        }
        if (ep->accepting == c) {
            ep->accepting = NULL;
        }
    }
    if (c->rx != NULL) {
        tw_tcp_rndv_abort(c);
    }
    event_free(c->ev_read);
    event_free(c->ev_write);
    if (lane->pe != NULL) {
        tw_pe_unwatch(lane->pe, c->fd);
    }
    if (c->want_out) {
        lane->nwant_out--;
    }
    close(c->fd);
    if (c->in != NULL) {
        tw_free(c->in, c->in_cap);
    }
    lane->nconns--;
    tw_free(c, sizeof(*c));
}

/* Wait for room in the socket (@p on), or stop: both libevent's EV_WRITE
 * and the engine's epoll, so a sleeping engine wakes for it. */
void tw_tcp_want_out(tw_tcp_conn_t *c, bool on)
{
    if (on) {
        event_add(c->ev_write, NULL);
    }
    if (c->want_out != on && c->lane->pe != NULL) {
        c->want_out = on;
        c->lane->nwant_out = on ? c->lane->nwant_out + 1 : c->lane->nwant_out - 1;
        (void)tw_pe_watch_out(c->lane->pe, c->fd, on);
        if (on) {
            tw_pe_lease_break(c->lane->pe); /* only its epoll sees the room */
        }
    }
}

/* Write what is left of the handshake message. False: the socket failed
 * (errno says why); otherwise EV_WRITE finishes a partial write. */
bool tw_tcp_hs_write(tw_tcp_conn_t *c)
{
    while (c->hs_off < c->hs_len) {
        ssize_t n = send(c->fd, c->hs_out + c->hs_off, c->hs_len - c->hs_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->hs_off = (uint8_t)(c->hs_off + n);
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            tw_tcp_want_out(c, true);
            return true;
        }
        return false;
    }
    if (c->want_out && c->state != TW_TCP_CONNECTED) {
        tw_tcp_want_out(c, false); /* now we wait for the answer */
    }
    return true;
}

static bool tw_tcp_send_hs(tw_tcp_conn_t *c, uint8_t type, uint64_t proof)
{
    tw_tcp_iface_t *tcp = c->lane->tcp;
    tw_tcp_hs_t hs = {.type = type,
                      .rank = (uint32_t)tcp->super.rank,
                      .size = (uint32_t)tcp->super.size,
                      .proof = proof};

    memcpy(hs.nonce, c->nonce, sizeof(hs.nonce));
    tw_tcp_hs_pack(&hs, c->hs_out);
    c->hs_off = 0;
    c->hs_len = TW_TCP_HS_LEN;
    return tw_tcp_hs_write(c);
}

/* A connection finished its handshake: it is the peer's from now on. The
 * rules at HELLO time (tw_tcp_on_hello) leave at most one handshake per
 * peer, so there is nothing to choose here. */
static void tw_tcp_established(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_ep_t *ep = &lane->tcp->eps[c->peer];

    tw_tcp_unlink(c);
    if (ep->pending == c) {
        ep->pending = NULL;
    }
    if (ep->accepting == c) {
        ep->accepting = NULL;
    }
    c->state = TW_TCP_CONNECTED;
    c->next = lane->live;
    lane->live = c;
    lane->nlive++;
    ep->conn = c;
    tw_tcp_mark_dirty(lane, ep); /* written after this callback: @p c may be in use */
}

enum { TW_TCP_HS_BAD, TW_TCP_HS_OK, TW_TCP_HS_DROP };

/*
 * HELLO on an accepted connection. Simultaneous connects are settled
 * here, before either side can send data: a rank that has its own
 * connect in progress to the same peer keeps the one started by the
 * lower rank and closes the other (the loser's initiator sees EOF during
 * its handshake and knows it lost: it is the higher rank). A rank that
 * accepted a connect does not start its own. So no data ever goes on a
 * connection that is later closed.
 */
static int tw_tcp_on_hello(tw_tcp_conn_t *c, const tw_tcp_hs_t *hs)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_ep_t *ep = &tcp->eps[hs->rank];

    if ((int)hs->rank % tcp->nlanes != lane->index) {
        tw_warn("tcp", "handshake refused: rank %u dialed lane %d, not %d", hs->rank, lane->index,
                (int)hs->rank % tcp->nlanes);
        return TW_TCP_HS_BAD;
    }
    if (ep->conn != NULL && (int)hs->rank > tcp->super.rank) {
        /* The loser of a simultaneous connect tried again before our
         * connection reached it: it drops this one as it did the
         * first (EOF during its handshake), quietly on both sides. */
        return TW_TCP_HS_DROP;
    }
    if (ep->failed || ep->conn != NULL || ep->accepting != NULL) {
        tw_warn("tcp", "handshake refused: rank %u is %s", hs->rank,
                ep->failed ? "failed" : "connected already");
        return TW_TCP_HS_BAD;
    }
    if (ep->pending != NULL) {
        if ((int)hs->rank > tcp->super.rank) {
            return TW_TCP_HS_DROP; /* ours wins: it was started by the lower rank */
        }
        tw_debug("tcp", "rank %u and we connected at once: its connection wins", hs->rank);
        tw_tcp_conn_close(ep->pending); /* quietly: the peer drops it as the loser */
    }
    c->peer = (int)hs->rank;
    c->hs_deadline = tw_time_ns() + ep->hs_ns; /* now we know whose it is */
    ep->accepting = c;
    memcpy(c->peer_nonce, hs->nonce, 16);
    c->state = TW_TCP_WELCOMED;
    if (!tw_tcp_send_hs(c, TW_TCP_HS_WELCOME,
                        tw_tcp_hs_proof(tcp->key, 'A', c->peer_nonce, c->nonce,
                                        (uint32_t)tcp->super.rank, hs->rank))) {
        return TW_TCP_HS_DROP; /* the client went away */
    }
    return TW_TCP_HS_OK;
}

/* WELCOME on our connect: check the acceptor's proof, then prove ours. */
static int tw_tcp_on_welcome(tw_tcp_conn_t *c, const tw_tcp_hs_t *hs)
{
    tw_tcp_iface_t *tcp = c->lane->tcp;

    if ((int)hs->rank != c->peer ||
        hs->proof != tw_tcp_hs_proof(tcp->key, 'A', c->nonce, hs->nonce, hs->rank,
                                     (uint32_t)tcp->super.rank)) {
        tw_warn("tcp", "handshake refused: rank %d did not prove the job key", c->peer);
        return TW_TCP_HS_BAD;
    }
    memcpy(c->peer_nonce, hs->nonce, 16);
    if (!tw_tcp_send_hs(c, TW_TCP_HS_PROVE,
                        tw_tcp_hs_proof(tcp->key, 'C', c->peer_nonce, c->nonce, hs->rank,
                                        (uint32_t)tcp->super.rank))) {
        return TW_TCP_HS_BAD;
    }
    tw_tcp_established(c); /* frames follow the PROVE's last byte */
    return TW_TCP_HS_OK;
}

/* PROVE on an accepted connection: check the connector's proof. */
static int tw_tcp_on_prove(tw_tcp_conn_t *c, const tw_tcp_hs_t *hs)
{
    tw_tcp_iface_t *tcp = c->lane->tcp;

    if ((int)hs->rank != c->peer || memcmp(hs->nonce, c->peer_nonce, 16) != 0 ||
        hs->proof != tw_tcp_hs_proof(tcp->key, 'C', c->nonce, c->peer_nonce,
                                     (uint32_t)tcp->super.rank, hs->rank)) {
        tw_warn("tcp", "handshake refused: a client claiming rank %u did not prove the key",
                hs->rank);
        return TW_TCP_HS_BAD;
    }
    tw_tcp_established(c);
    return TW_TCP_HS_OK;
}

/* A handshake message arrived on @p c. Returns OK, BAD (refused: count
 * and close), DROP (lost the simultaneous-connect rule: close quietly). */
static int tw_tcp_on_hs(tw_tcp_conn_t *c, const uint8_t *buf)
{
    tw_tcp_iface_t *tcp = c->lane->tcp;
    tw_tcp_hs_t hs;
    const char *why = "?";
    uint8_t want = c->state == TW_TCP_ACCEPTED      ? TW_TCP_HS_HELLO
                   : c->state == TW_TCP_CONNECT_ACK ? TW_TCP_HS_WELCOME
                                                    : TW_TCP_HS_PROVE;

    if (tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, want, (uint32_t)tcp->super.size, &hs, &why) != TW_OK) {
        tw_warn("tcp", "handshake refused: %s", why);
        return TW_TCP_HS_BAD;
    }
    if ((int)hs.rank == tcp->super.rank) {
        tw_warn("tcp", "handshake refused: a connection from our own rank");
        return TW_TCP_HS_BAD;
    }
    switch (c->state) {
    case TW_TCP_ACCEPTED:
        return tw_tcp_on_hello(c, &hs);
    case TW_TCP_CONNECT_ACK:
        return tw_tcp_on_welcome(c, &hs);
    case TW_TCP_WELCOMED:
        return tw_tcp_on_prove(c, &hs);
    default:
        return TW_TCP_HS_BAD;
    }
}

/* Take the handshake messages c->in holds, until @p c is CONNECTED (the
 * bytes after it are frames). False: @p c was refused or lost, and is
 * gone. */
bool tw_tcp_conn_handshake(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;

    while (c->state != TW_TCP_CONNECTED && c->in_len >= TW_TCP_HS_LEN) {
        int rc = tw_tcp_on_hs(c, c->in);
        if (rc != TW_TCP_HS_OK) {
            if (rc == TW_TCP_HS_BAD) {
                tw_stats_inc(tcp->super.stats, TW_TL_STAT_REFUSED);
            }
            if (c->initiator && c->peer >= 0 && rc == TW_TCP_HS_BAD) {
                /* Our connect to a rank of the job was refused. */
                tw_tcp_fail_peer(lane, c->peer, TW_ERR_PEER_FAILED, "the handshake failed");
            } else {
                tw_tcp_conn_close(c);
            }
            return false;
        }
        memmove(c->in, c->in + TW_TCP_HS_LEN, c->in_len - TW_TCP_HS_LEN);
        c->in_len -= TW_TCP_HS_LEN;
    }
    return true;
}

/* The socket of @p c reported EOF (@p err 0) or error @p err. */
void tw_tcp_conn_broken(tw_tcp_conn_t *c, int err)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    int peer = c->peer;

    if (err == 0 && c->wr_err != 0) {
        err = c->wr_err; /* the reset our write met (tw_tcp_flush) */
    }
    if (c->state == TW_TCP_CONNECTED) {
        bool left = tcp->eps[peer].left;
        tw_tcp_fail_peer(lane, peer, left ? TW_OK : TW_ERR_PEER_FAILED,
                         err == 0 ? "connection closed without FIN" : strerror(err));
    } else if (c->initiator && peer >= 0 && err == 0 && peer < tcp->super.rank) {
        /* Our connect lost the simultaneous-connect rule (we are the
         * higher rank): the peer's own connection takes over. */
        tw_tcp_conn_close(c);
    } else if (c->initiator && peer >= 0 && err != 0 && c->hs_off == 0 &&
               c->addr_index + 1 < tcp->eps[peer].naddrs) {
        /* The connect itself failed: try the peer's next address. */
        int next = c->addr_index + 1;
        char a[80];
        tw_debug("tcp", "connect to rank %d at %s failed (%s): trying its next address", peer,
                 tw_tcp_addr_str(&tcp->eps[peer].addrs[c->addr_index], a, sizeof(a)),
                 strerror(err));
        tw_tcp_conn_close(c);
        tw_tcp_connect(lane, peer, next);
    } else if (c->initiator && peer >= 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "connection refused or reset during the handshake (%s)",
                 err == 0 ? "EOF" : strerror(err));
        tw_tcp_fail_peer(lane, peer, TW_ERR_PEER_FAILED, msg);
    } else {
        tw_tcp_conn_close(c);
    }
}

void tw_tcp_connect(tw_tcp_lane_t *lane, int peer, int addr_index)
{
    tw_tcp_ep_t *ep = &lane->tcp->eps[peer];
    const tw_tcp_addr_t *a;
    int fd;

    if (addr_index >= ep->naddrs) {
        tw_tcp_fail_peer(lane, peer, TW_ERR_PEER_FAILED, "no address");
        return;
    }
    a = &ep->addrs[addr_index];
    fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        tw_tcp_fail_peer(lane, peer, TW_ERR_PEER_FAILED, strerror(errno));
        return;
    }
    if (connect(fd, (const struct sockaddr *)&a->ss, a->len) != 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        if (addr_index + 1 < ep->naddrs) {
            tw_tcp_connect(lane, peer, addr_index + 1);
        } else {
            tw_tcp_fail_peer(lane, peer, TW_ERR_PEER_FAILED, strerror(err));
        }
        return;
    }
    ep->pending = tw_tcp_conn_new(lane, fd, TW_TCP_CONNECT_ACK, peer, true);
    if (ep->pending == NULL) {
        tw_tcp_fail_peer(lane, peer, TW_ERR_PEER_FAILED, "out of memory");
        return;
    }
    ep->pending->addr_index = addr_index;
    /* The HELLO waits for the connect to complete (EV_WRITE). */
    if (!tw_tcp_send_hs(ep->pending, TW_TCP_HS_HELLO, 0)) {
        tw_tcp_conn_broken(ep->pending, errno);
    }
}

void tw_tcp_on_accept(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_lane_t *lane = arg;

    (void)what;
    for (;;) {
        int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            return; /* EAGAIN, or a transient error: the next event retries */
        }
        lane->events++;
        (void)tw_tcp_conn_new(lane, c, TW_TCP_ACCEPTED, -1, false);
    }
}
