/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The TCP transport.
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
 * Sends. A send becomes a frame appended to the peer's queue, which the
 * lane writes with one writev for many frames (partial writes resume at
 * their offset), so a burst of small messages costs one syscall, not one
 * each. TCP_NODELAY. Who appends: when the lane's engine is free (its
 * lock), the peer is connected and no earlier frame waits in the
 * submission lanes, the sending thread itself -- and a lone message is
 * written at once, while one that follows another within TW_TCP_BURST
 * marks the peer dirty for the next pass. Otherwise the frame goes to the
 * engine through its submission lane (tw_tl_submit) and the engine
 * appends it; dirty queues are written once per pass.
 *
 * Worker polling. tw_progress and tw_cq_wait poll the lanes whose engine
 * is idle (ops->poll), as over shm: they read and deliver tagged frames
 * themselves. Frames for user AM handlers stay in the buffer for the
 * engine, and a failure found there is reported (peer_down) by the engine:
 * user code runs on progress threads only.
 *
 * Connections are made lazily, on the first frame to a peer:
 *   CLOSED -> CONNECTING (non-blocking connect) -> CONNECT_ACK (HELLO
 *   queued, waiting for WELCOME) -> CONNECTED (PROVE sent); FAILED.
 * The accepting side waits for HELLO, answers WELCOME, and takes the
 * connection once PROVE checks (tw_tcp_proto.h: both sides prove the job
 * key over the other's nonce; the key never travels). Handshake messages
 * are written without blocking (EV_WRITE finishes a partial one), and no
 * frame is written before the connection is CONNECTED, so when both ranks
 * connect at once the one initiated by the lower rank wins and the other
 * is closed without loss or error. A connection that fails the handshake
 * (bad magic, version, proof, wrong lane, or 2 s of silence) is closed,
 * counted (tl stat "refused") and logged. A connect that fails outright
 * tries the peer's next published address.
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
 * EOF without FIN, a reset, a socket error (including the user timeout),
 * silence past the timeout, or a bad frame fails the peer: its queued and
 * in-flight sends complete with TW_ERR_PEER_FAILED and the layer above is
 * told (peer_down), from the lane's engine thread.
 *
 * Addresses. TW_TCP_IF names the interfaces to listen on (comma list);
 * by default loopback when every rank is on this node, otherwise every
 * non-loopback IPv4 and IPv6 address (link-local IPv6 is skipped: it needs
 * a scope). The address blob: magic u32 | lanes u8 | addresses u8 |
 * flags u8 | pad u8 | timeout ms u32 | per address: family u8 (4 or 6),
 * pad[3], address[16] (network order), lanes x port u16 (network order).
 *
 * Rendezvous, receive side. A tagged payload of TW_TCP_RNDV_MIN or more
 * is announced to the layer above (recv_rndv) as soon as its header is
 * in; if a receive matches, rndv_get names the user's buffer and the
 * payload is read from the socket straight into it (past a truncating
 * receive's length it is read and dropped). Unmatched, it is staged in a
 * buffer of its own, and a later rndv_get copies out what arrived and
 * takes the rest directly. rndv_get from another thread is applied by the
 * handle's lane (a command). The sender is unchanged: zcopy frames
 * complete once the socket took them.
 *
 * Left out (docs/tcp-plan.md): a sender-side rendezvous (so a send
 * completes only once received); a pool for frames handed to a busy
 * engine (only the lock holder uses a lane's pool, so those frames come
 * from jemalloc's thread cache).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_siphash.h"
#include "core/tw_time.h"
#include "transports/base/tw_tl.h"
#include "transports/tcp/tw_tcp.h"
#include "transports/tcp/tw_tcp_proto.h"

#define TW_TCP_MAX_SHORT  (64u * 1024u)
#define TW_TCP_MAX_HDR    (TW_AM_HDR_MAX + 256u)
#define TW_TCP_MAX_LEN    (1ull << 30)
#define TW_TCP_HS_TIMEOUT (2ull * 1000 * 1000 * 1000)
#define TW_TCP_IOV        128
#define TW_TCP_MAX_ADDRS  8
#define TW_TCP_MAX_LANES  16
#define TW_TCP_IDLE_LOOP  (1000ull * 1000) /* a lane without connections: 1 ms */
/* A worker's send within this long of the previous write to the peer is
 * part of a burst: it is queued for the next pass's writev (the sender's
 * own tw_cq_wait / tw_progress, or the engine) instead of a syscall of its
 * own. Longer than one tw_send, shorter than a TCP round trip, so a
 * ping-pong writes every message at once. */
#define TW_TCP_BURST (2000ull)
/* Tagged payloads from this size on are announced to the layer above as a
 * rendezvous (recv_rndv) before their bytes are read, so a matched receive
 * takes them straight from the socket into the user's buffer. */
/* Frames whose header bytes (frame + am header + copied payload) fit this
 * come from a lane's pool when the lane's lock is held (direct sends,
 * control frames): no malloc/free per small message. */
#define TW_TCP_POOL_HEAD   256u
#define TW_TCP_POOL_MAX    1024u
#define TW_TCP_POOL_ALLOC  (sizeof(tw_tcp_frame_out_t) + TW_TCP_POOL_HEAD)
#define TW_TCP_RNDV_MIN    (32u * 1024u)
#define TW_TCP_ADDR_HDR    12u
#define TW_TCP_ADDR_ENTRY  20u
#define TW_TCP_FLAG_THREAD 0x01u /* blob flag: the rank runs progress threads */

enum {
    TW_TCP_CLOSED,
    TW_TCP_CONNECT_ACK, /* connecting; HELLO queued, waiting for WELCOME */
    TW_TCP_ACCEPTED,    /* waiting for HELLO */
    TW_TCP_WELCOMED,    /* WELCOME sent, waiting for PROVE */
    TW_TCP_CONNECTED,
    TW_TCP_FAILED
};

typedef struct tw_tcp_cfg {
    char ifs[TW_CFG_STRLEN];
    char af[TW_CFG_STRLEN];
    uint64_t timeout_ns;
    int threads;
} tw_tcp_cfg_t;

static const tw_cfg_entry_t tw_tcp_cfg_entries[] = {
    {.name = "TW_TCP_IF",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "tcp transport: interfaces to listen on (comma list, e.g. eth0,ib0); empty = "
             "loopback when every rank is on this node, else every non-loopback address",
     .offset = offsetof(tw_tcp_cfg_t, ifs)},
    {.name = "TW_TCP_AF",
     .type = TW_CFG_STRING,
     .defval = "inet,inet6",
     .help = "tcp transport: address families to listen on and dial, in order of preference "
             "(inet, inet6)",
     .offset = offsetof(tw_tcp_cfg_t, af)},
    {.name = "TW_TCP_TIMEOUT",
     .type = TW_CFG_DURATION,
     .defval = "10s",
     .help = "tcp transport: a peer silent (or its data unacknowledged) this long has failed "
             "(TCP_USER_TIMEOUT, keepalive, PING on idle connections); 0 = never",
     .offset = offsetof(tw_tcp_cfg_t, timeout_ns),
     .max = 3600ull * 1000 * 1000 * 1000},
    {.name = "TW_TCP_THREADS",
     .type = TW_CFG_INT,
     .defval = "-1",
     .help = "tcp transport: lanes (event bases, each with its progress engine) carrying the "
             "connections; -1 = one per CPU socket (one in manual mode)",
     .offset = offsetof(tw_tcp_cfg_t, threads),
     .min = -1,
     .max = TW_TCP_MAX_LANES},
};

const tw_cfg_table_t tw_tcp_cfg_table = {
    .module = "tcp",
    .entries = tw_tcp_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_tcp_cfg_entries),
};

/* One frame waiting to be written. Header bytes follow the struct; the
 * payload follows them (short) or is the caller's (zcopy). */
typedef struct tw_tcp_frame_out {
    struct tw_tcp_frame_out *next;
    size_t alloc_len;
    size_t head_len; /* frame header + am header (+ payload when copied) */
    const void *zdata;
    size_t zlen;
    tw_tl_comp_t *comp; /* zcopy: completes once written */
    size_t off;         /* bytes of head + zdata already written */
    int peer;
    bool pooled; /* returns to its lane's pool */
    unsigned char bytes[];
} tw_tcp_frame_out_t;

typedef struct tw_tcp_iface tw_tcp_iface_t;
typedef struct tw_tcp_lane tw_tcp_lane_t;

typedef struct tw_tcp_addr {
    struct sockaddr_storage ss;
    socklen_t len;
} tw_tcp_addr_t;

/* A payload announced with recv_rndv; its bytes follow in the stream. */
struct tw_tl_rndv {
    tw_tcp_lane_t *lane;
    struct tw_tl_rndv *prev, *next; /* the lane's live handles (close frees them) */
    int peer;
    size_t len;         /* announced */
    size_t got;         /* arrived so far */
    unsigned char *buf; /* staged here while nobody asked for it */
    void *dst;          /* then here, once rndv_get came */
    size_t dst_len;
    tw_tl_comp_t *comp;
    bool have_get, done, failed;
    /* rndv_get from another thread: its arguments, applied by the lane */
    void *get_dst;
    size_t get_len;
    tw_tl_comp_t *get_comp;
};

typedef struct tw_tcp_conn {
    tw_tcp_lane_t *lane;
    int fd;
    int state;
    int peer; /* -1 until HELLO names it (accepted side) */
    bool initiator;
    int addr_index;         /* initiator: which of the peer's addresses */
    uint8_t nonce[16];      /* ours */
    uint8_t peer_nonce[16]; /* theirs */
    uint8_t hs_out[TW_TCP_HS_LEN];
    uint8_t hs_off, hs_len; /* handshake bytes still to write */
    uint64_t hs_deadline;
    uint64_t last_rx, last_tx;
    bool want_out; /* waiting for room in the socket (EV_WRITE, engine epoll) */
    struct event *ev_read, *ev_write;
    unsigned char *in; /* receive buffer */
    size_t in_len, in_cap;
    tw_tl_rndv_t *rx;         /* the payload the stream is in, or NULL */
    struct tw_tcp_conn *next; /* handshaking connections */
} tw_tcp_conn_t;

typedef struct tw_tcp_ep {
    tw_tcp_conn_t *conn;      /* CONNECTED, or NULL */
    tw_tcp_conn_t *pending;   /* our connect, handshake in progress */
    tw_tcp_conn_t *accepting; /* the peer's connect, handshake in progress */
    tw_tcp_frame_out_t *head, *tail;
    unsigned queued;
    bool dirty; /* on the lane's dirty list */
    struct tw_tcp_ep *next_dirty;
    tw_tcp_addr_t addrs[TW_TCP_MAX_ADDRS]; /* with the port of our lane there */
    int naddrs;
    uint64_t silence_ns; /* fail it after this much silence; 0 = never */
    uint64_t hs_ns;      /* a handshake with it may take this long */
    bool failed;
    bool left;    /* FIN received */
    bool reparse; /* c->in holds a frame a worker could not deliver */
    int down_why; /* the peer_down to report (TW_OK or an error), when on downs */
    struct tw_tcp_ep *next_down;
} tw_tcp_ep_t;

typedef struct tw_tcp_listener {
    int fd;
    struct event *ev;
} tw_tcp_listener_t;

struct tw_tcp_lane {
    tw_tcp_iface_t *tcp;
    int index;
    tw_pe_t *pe; /* drives this lane */
    bool own_pe; /* ours (lane > 0), not the context's */
    struct event_base *base;
    tw_tcp_listener_t lis[TW_TCP_MAX_ADDRS];
    uint16_t ports[TW_TCP_MAX_ADDRS];
    int timer_fd;
    struct event *ev_timer;
    uint64_t last_tick;
    tw_tcp_conn_t *handshaking;
    tw_tcp_ep_t *dirty;
    unsigned nconns; /* open connections (any state) */
    uint64_t last_loop;
    int events; /* callbacks that did work in this pass (progress returns it) */
    /* A worker thread runs the lane (it holds the engine's lock: direct
     * send, tw_progress / tw_cq_wait polling): it delivers tagged frames
     * only, and leaves user AM handlers and peer_down to the engine. */
    bool in_worker;
    unsigned nreparse;        /* eps with reparse set */
    tw_tcp_ep_t *downs;       /* eps with a peer_down to report */
    tw_tl_rndv_t handles;     /* list head of live rendezvous handles */
    _Atomic(unsigned) cmds;   /* frames submitted to the engine, not yet queued */
    tw_tcp_frame_out_t *pool; /* free small frames (lock holder) */
    unsigned npool;
};

struct tw_tcp_iface {
    tw_tl_iface_t super;
    tw_tcp_cfg_t cfg;
    uint8_t key[16];
    bool threads; /* we run progress threads (published) */
    bool closing;
    int nlanes;
    tw_tcp_lane_t *lanes;
    int naddrs;
    tw_tcp_addr_t addrs[TW_TCP_MAX_ADDRS]; /* where we listen (port 0) */
    uint64_t tick_ns;
    tw_tcp_ep_t *eps;       /* [size]; eps[p] is owned by lane p % nlanes */
    _Atomic(uint8_t) *down; /* [size]: failed or left (any thread reads) */
};

static void tw_tcp_conn_close(tw_tcp_conn_t *c);
static void tw_tcp_rndv_abort(tw_tcp_conn_t *c);
static void tw_tcp_fail_peer(tw_tcp_lane_t *lane, int peer, tw_status_t why, const char *what);
static void tw_tcp_flush(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep);
static void tw_tcp_connect(tw_tcp_lane_t *lane, int peer, int addr_index);

static tw_tcp_lane_t *tw_tcp_lane_of(tw_tcp_iface_t *tcp, int peer)
{
    return &tcp->lanes[peer % tcp->nlanes];
}

static const char *tw_tcp_addr_str(const tw_tcp_addr_t *a, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    const struct sockaddr *sa = (const struct sockaddr *)&a->ss;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&a->ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a->ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    }
    return buf;
}

/* ---- connections ---------------------------------------------------------- */

static void tw_tcp_on_read(evutil_socket_t fd, short what, void *arg);
static void tw_tcp_on_write(evutil_socket_t fd, short what, void *arg);

/* Socket options every connection gets: no Nagle, and the liveness bound. */
static void tw_tcp_sockopts(const tw_tcp_iface_t *tcp, int fd)
{
    int one = 1;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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

static void tw_tcp_unlink_handshaking(tw_tcp_conn_t *c)
{
    for (tw_tcp_conn_t **pp = &c->lane->handshaking; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            return;
        }
    }
}

static void tw_tcp_conn_close(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;

    tw_tcp_unlink_handshaking(c);
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
    close(c->fd);
    if (c->in != NULL) {
        tw_free(c->in, c->in_cap);
    }
    lane->nconns--;
    tw_free(c, sizeof(*c));
}

/* Wait for room in the socket (@p on), or stop: both libevent's EV_WRITE
 * and the engine's epoll, so a sleeping engine wakes for it. */
static void tw_tcp_want_out(tw_tcp_conn_t *c, bool on)
{
    if (on) {
        event_add(c->ev_write, NULL);
    }
    if (c->want_out != on && c->lane->pe != NULL) {
        c->want_out = on;
        (void)tw_pe_watch_out(c->lane->pe, c->fd, on);
    }
}

/* Write what is left of the handshake message. False: the socket failed
 * (errno says why); otherwise EV_WRITE finishes a partial write. */
static bool tw_tcp_hs_write(tw_tcp_conn_t *c)
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

/* Queue @p ep for the write at the end of the progress pass. */
static void tw_tcp_mark_dirty(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep)
{
    if (!ep->dirty) {
        ep->dirty = true;
        ep->next_dirty = lane->dirty;
        lane->dirty = ep;
    }
}

/* A connection finished its handshake: it is the peer's from now on. The
 * rules at HELLO time (tw_tcp_on_hs) leave at most one handshake per
 * peer, so there is nothing to choose here. */
static void tw_tcp_established(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_ep_t *ep = &lane->tcp->eps[c->peer];

    tw_tcp_unlink_handshaking(c);
    if (ep->pending == c) {
        ep->pending = NULL;
    }
    if (ep->accepting == c) {
        ep->accepting = NULL;
    }
    c->state = TW_TCP_CONNECTED;
    ep->conn = c;
    tw_tcp_mark_dirty(lane, ep); /* written after this callback: @p c may be in use */
}

enum { TW_TCP_HS_BAD, TW_TCP_HS_OK, TW_TCP_HS_DROP };

/*
 * A handshake message arrived on @p c. Simultaneous connects are settled
 * when the HELLO comes in, before either side can send data: a rank that
 * has its own connect in progress to the same peer keeps the one started
 * by the lower rank and closes the other (the loser's initiator sees EOF
 * during its handshake and knows it lost: it is the higher rank). A rank
 * that accepted a connect does not start its own. So no data ever goes on
 * a connection that is later closed.
 * Returns OK, BAD (refused: count and close), DROP (lost the rule: close
 * quietly).
 */
static int tw_tcp_on_hs(tw_tcp_conn_t *c, const uint8_t *buf)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
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
    case TW_TCP_ACCEPTED: { /* HELLO */
        tw_tcp_ep_t *ep = &tcp->eps[hs.rank];
        if ((int)hs.rank % tcp->nlanes != lane->index) {
            tw_warn("tcp", "handshake refused: rank %u dialed lane %d, not %d", hs.rank,
                    lane->index, (int)hs.rank % tcp->nlanes);
            return TW_TCP_HS_BAD;
        }
        if (ep->conn != NULL && (int)hs.rank > tcp->super.rank) {
            /* The loser of a simultaneous connect tried again before our
             * connection reached it: it drops this one as it did the
             * first (EOF during its handshake), quietly on both sides. */
            return TW_TCP_HS_DROP;
        }
        if (ep->failed || ep->conn != NULL || ep->accepting != NULL) {
            tw_warn("tcp", "handshake refused: rank %u is %s", hs.rank,
                    ep->failed ? "failed" : "connected already");
            return TW_TCP_HS_BAD;
        }
        if (ep->pending != NULL) {
            if ((int)hs.rank > tcp->super.rank) {
                return TW_TCP_HS_DROP; /* ours wins: it was started by the lower rank */
            }
            tw_debug("tcp", "rank %u and we connected at once: its connection wins", hs.rank);
            tw_tcp_conn_close(ep->pending); /* quietly: the peer drops it as the loser */
        }
        c->peer = (int)hs.rank;
        c->hs_deadline = tw_time_ns() + ep->hs_ns; /* now we know whose it is */
        ep->accepting = c;
        memcpy(c->peer_nonce, hs.nonce, 16);
        c->state = TW_TCP_WELCOMED;
        if (!tw_tcp_send_hs(c, TW_TCP_HS_WELCOME,
                            tw_tcp_hs_proof(tcp->key, 'A', c->peer_nonce, c->nonce,
                                            (uint32_t)tcp->super.rank, hs.rank))) {
            return TW_TCP_HS_DROP; /* the client went away */
        }
        return TW_TCP_HS_OK;
    }
    case TW_TCP_CONNECT_ACK: /* WELCOME: check the acceptor's proof */
        if ((int)hs.rank != c->peer ||
            hs.proof != tw_tcp_hs_proof(tcp->key, 'A', c->nonce, hs.nonce, hs.rank,
                                        (uint32_t)tcp->super.rank)) {
            tw_warn("tcp", "handshake refused: rank %d did not prove the job key", c->peer);
            return TW_TCP_HS_BAD;
        }
        memcpy(c->peer_nonce, hs.nonce, 16);
        if (!tw_tcp_send_hs(c, TW_TCP_HS_PROVE,
                            tw_tcp_hs_proof(tcp->key, 'C', c->peer_nonce, c->nonce, hs.rank,
                                            (uint32_t)tcp->super.rank))) {
            return TW_TCP_HS_BAD;
        }
        tw_tcp_established(c); /* frames follow the PROVE's last byte */
        return TW_TCP_HS_OK;
    case TW_TCP_WELCOMED: /* PROVE: check the connector's proof */
        if ((int)hs.rank != c->peer || memcmp(hs.nonce, c->peer_nonce, 16) != 0 ||
            hs.proof != tw_tcp_hs_proof(tcp->key, 'C', c->nonce, c->peer_nonce,
                                        (uint32_t)tcp->super.rank, hs.rank)) {
            tw_warn("tcp", "handshake refused: a client claiming rank %u did not prove the key",
                    hs.rank);
            return TW_TCP_HS_BAD;
        }
        tw_tcp_established(c);
        return TW_TCP_HS_OK;
    default:
        return TW_TCP_HS_BAD;
    }
}

/* The socket of @p c reported EOF (@p err 0) or error @p err. */
static void tw_tcp_conn_broken(tw_tcp_conn_t *c, int err)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    int peer = c->peer;

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

/* ---- rendezvous (receive side) ---------------------------------------------- */

static void tw_tcp_rndv_free(tw_tl_rndv_t *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
    if (h->buf != NULL) {
        tw_free(h->buf, h->len);
    }
    tw_free(h, sizeof(*h));
}

/* @p n payload bytes of @p h arrived at @p p (NULL: already in place). */
static void tw_tcp_rndv_sink(tw_tl_rndv_t *h, const unsigned char *p, size_t n)
{
    if (p != NULL && h->have_get && h->got < h->dst_len) {
        size_t k = TW_MIN(n, h->dst_len - h->got);
        memcpy((unsigned char *)h->dst + h->got, p, k);
    } else if (p != NULL && !h->have_get) {
        memcpy(h->buf + h->got, p, n);
    }
    h->got += n;
}

/* The last payload byte of @p h arrived. */
static void tw_tcp_rndv_done(tw_tcp_conn_t *c)
{
    tw_tl_rndv_t *h = c->rx;

    c->rx = NULL;
    h->done = true;
    if (h->have_get) {
        tw_tl_comp_t *comp = h->comp;
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_OK);
    } /* else staged: rndv_get copies it out */
}

/* The stream of @p c ended inside a payload. */
static void tw_tcp_rndv_abort(tw_tcp_conn_t *c)
{
    tw_tl_rndv_t *h = c->rx;

    c->rx = NULL;
    if (h->have_get) {
        tw_tl_comp_t *comp = h->comp;
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_ERR_PEER_FAILED);
    } else {
        h->failed = true; /* the layer above still holds it */
    }
}

/* rndv_get on the lane's engine. */
static void tw_tcp_rndv_apply(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp)
{
    tw_tcp_iface_t *tcp = h->lane->tcp;

    if (len > h->len) {
        len = h->len;
    }
    if (h->failed) {
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_ERR_PEER_FAILED);
        return;
    }
    if (h->got > 0 && len > 0) {
        memcpy(dst, h->buf, TW_MIN(h->got, len)); /* what was staged */
    }
    tw_stats_add(tcp->super.stats, TW_TL_STAT_RX_BYTES, len);
    if (h->done) {
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_OK);
        return;
    }
    if (h->buf != NULL) {
        tw_free(h->buf, h->len);
        h->buf = NULL;
    }
    h->have_get = true; /* the rest goes straight to dst (or nowhere past len) */
    h->dst = dst;
    h->dst_len = len;
    h->comp = comp;
}

/* The handle whose announcement this thread is delivering: a receive that
 * matches inside recv_rndv applies at once. Thread-local, not a field of the
 * handle: once announced, the handle is visible to other threads, which
 * must not read a flag its lane is still writing. */
static TW_TLS tw_tl_rndv_t *tw_tcp_announcing;

static void tw_tcp_rndv_apply_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tl_rndv_t *h = data;

    (void)arg, (void)u64;
    tw_tcp_rndv_apply(h, h->get_dst, h->get_len, h->get_comp);
}

static tw_status_t tw_tcp_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                                   tw_tl_comp_t *comp)
{
    tw_tcp_lane_t *lane = h->lane;
    tw_pe_cmd_t cmd = {.fn = tw_tcp_rndv_apply_cmd, .arg = lane, .data = h};

    (void)iface;
    if (tw_tcp_announcing == h || tw_pe_is_owner(lane->pe)) {
        tw_tcp_rndv_apply(h, dst, len, comp);
        return TW_OK;
    }
    /* Another lane's engine (or a worker): the handle's lane applies it. */
    h->get_dst = dst;
    h->get_len = len;
    h->get_comp = comp;
    tw_pe_hand_over(lane->pe, &cmd); /* never fails: the sender waits for it */
    return TW_OK;
}

/* A tagged frame of @p len payload bytes begins at @p hdr: announce it, and
 * take what of its payload is at hand (@p avail bytes at @p data). */
static bool tw_tcp_rndv_begin(tw_tcp_conn_t *c, uint8_t am_id, const unsigned char *hdr,
                              size_t hdr_len, size_t len, const unsigned char *data, size_t avail)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tl_rndv_t *h = tw_calloc(1, sizeof(*h));

    if (h == NULL) {
        tw_error("tcp", "out of memory for a %zu-byte message from rank %d", len, c->peer);
        return false;
    }
    h->lane = lane;
    h->peer = c->peer;
    h->len = len;
    h->next = lane->handles.next;
    h->prev = &lane->handles;
    h->next->prev = h;
    lane->handles.next = h;
    c->rx = h;
    tw_stats_inc(tcp->super.stats, TW_TL_STAT_RX_MSGS);
    lane->events++;
    tw_tl_rndv_t *outer = tw_tcp_announcing;
    tw_tcp_announcing = h;
    tcp->super.recv_rndv(tcp->super.recv_arg, c->peer, am_id, hdr, hdr_len, len, h);
    tw_tcp_announcing = outer;
    if (!h->have_get && (h->buf = tw_malloc(len)) == NULL) {
        /* Bounded by TW_TCP_MAX_LEN (the parser checked it). */
        tw_error("tcp", "out of memory staging a %zu-byte message from rank %d", len, c->peer);
        return false;
    }
    tw_tcp_rndv_sink(h, data, TW_MIN(avail, len));
    if (h->got == len) {
        tw_tcp_rndv_done(c);
    }
    return true;
}

/* ---- receiving ------------------------------------------------------------- */

/* Deliver every complete frame in c->in; false: the stream is bad. */
static bool tw_tcp_parse_frames(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    size_t off = 0;

    while (c->state == TW_TCP_CONNECTED) {
        tw_tcp_frame_t f;
        if (c->rx != NULL) {
            /* Payload bytes of an announced message (past a truncating
             * receive's length they are only counted). */
            size_t n = TW_MIN(c->in_len - off, c->rx->len - c->rx->got);
            if (n == 0) {
                break;
            }
            tw_tcp_rndv_sink(c->rx, c->in + off, n);
            off += n;
            if (c->rx->got < c->rx->len) {
                break;
            }
            tw_tcp_rndv_done(c);
            continue;
        }
        if (c->in_len - off < TW_TCP_FRAME_LEN) {
            break;
        }
        const char *why = "?";
        tw_status_t st = tw_tcp_frame_parse(c->in + off, c->in_len - off, TW_TCP_MAX_HDR,
                                            TW_TCP_MAX_LEN, &f, &why);
        size_t total;

        if (st != TW_OK) {
            tw_stats_inc(tcp->super.stats, TW_TL_STAT_BAD_FRAMES);
            tw_error("tcp", "rank %d sent a bad frame (%s): connection closed", c->peer, why);
            return false;
        }
        if (f.type != TW_TCP_FRAME_AM) {
            if (f.type == TW_TCP_FRAME_FIN) {
                tcp->eps[c->peer].left = true;
            }
            off += TW_TCP_FRAME_LEN; /* PING: its arrival was the point */
            continue;
        }
        if (f.len >= TW_TCP_RNDV_MIN && f.am_id < 64 &&
            (tcp->super.inline_am_ids & (1ull << f.am_id)) && tcp->super.recv_rndv != NULL) {
            size_t head = TW_TCP_FRAME_LEN + f.hdr_len, avail;
            if (c->in_len - off < head) {
                break; /* the header first */
            }
            avail = TW_MIN(c->in_len - off - head, (size_t)f.len);
            if (!tw_tcp_rndv_begin(c, f.am_id, c->in + off + TW_TCP_FRAME_LEN, f.hdr_len,
                                   (size_t)f.len, c->in + off + head, avail)) {
                return false;
            }
            off += head + avail;
            if (c->rx != NULL) {
                break; /* the rest of the payload comes from the socket */
            }
            continue;
        }
        total = TW_TCP_FRAME_LEN + f.hdr_len + (size_t)f.len;
        if (c->in_len - off < total) {
            if (total > c->in_cap) {
                /* Bounded: the parser checked both lengths. */
                unsigned char *n = tw_malloc(total);
                if (n == NULL) {
                    tw_error("tcp", "out of memory for a %zu-byte frame from rank %d", total,
                             c->peer);
                    return false;
                }
                memcpy(n, c->in + off, c->in_len - off);
                tw_free(c->in, c->in_cap);
                c->in = n;
                c->in_cap = total;
                c->in_len -= off;
                off = 0;
            }
            break;
        }
        if (lane->in_worker && (f.am_id >= 64 || !(tcp->super.inline_am_ids & (1ull << f.am_id)))) {
            /* User code runs on the engine: it parses from here on. */
            tw_tcp_ep_t *ep = &tcp->eps[c->peer];
            if (!ep->reparse) {
                ep->reparse = true;
                lane->nreparse++;
                tw_pe_wake(lane->pe);
            }
            break;
        }
        tw_stats_inc(tcp->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(tcp->super.stats, TW_TL_STAT_RX_BYTES, f.len);
        lane->events++;
        tcp->super.recv(tcp->super.recv_arg, c->peer, f.am_id, c->in + off + TW_TCP_FRAME_LEN,
                        f.hdr_len, c->in + off + TW_TCP_FRAME_LEN + f.hdr_len, (size_t)f.len);
        off += total;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return true;
}

/* A recv returned @p n <= 0: TW_TCP_RX_RETRY (EINTR), 1 (nothing more
 * for now), or 0 (EOF or an error: the connection is handled, and gone). */
enum { TW_TCP_RX_RETRY = -1 };
static int tw_tcp_recv_end(tw_tcp_conn_t *c, ssize_t n)
{
    if (n < 0 && errno == EINTR) {
        return TW_TCP_RX_RETRY;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return 1;
    }
    tw_tcp_conn_broken(c, n == 0 ? 0 : errno);
    return 0;
}

/* Read what the socket holds. False: @p c is gone (closed or failed). */
static bool tw_tcp_read(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;

    for (;;) {
        tw_tl_rndv_t *h = c->rx;
        if (h != NULL && (!h->have_get || h->got < h->dst_len)) {
            /* Inside a payload: into the user's buffer, or its staging. */
            size_t want = h->have_get ? TW_MIN(h->len, h->dst_len) - h->got : h->len - h->got;
            unsigned char *to = h->have_get ? (unsigned char *)h->dst + h->got : h->buf + h->got;
            ssize_t n = recv(c->fd, to, want, 0);
            if (n > 0) {
                c->last_rx = tw_time_ns();
                tw_tcp_rndv_sink(h, NULL, (size_t)n);
                if (h->got == h->len) {
                    tw_tcp_rndv_done(c);
                    if (!tw_tcp_parse_frames(c)) { /* what followed it in the buffer */
                        tw_tcp_fail_peer(lane, c->peer, TW_ERR_PEER_FAILED, "bad frame");
                        return false;
                    }
                }
                if ((size_t)n < want) {
                    return true; /* drained: epoll says when there is more */
                }
                continue;
            }
            int end = tw_tcp_recv_end(c, n);
            if (end == TW_TCP_RX_RETRY) {
                continue;
            }
            return end == 1;
        }
        if (c->in_len == c->in_cap && c->in_cap > 0) {
            /* Full of frames a worker left for the engine (complete frames
             * are otherwise consumed): the engine reads on. End this
             * event_base_loop pass: the socket stays readable, and
             * EVLOOP_NONBLOCK goes round again as long as a dispatch finds
             * active events, so the worker would call us back forever
             * while holding the engine's lock -- and only the engine can
             * empty this buffer. */
            event_base_loopbreak(lane->base);
            return true;
        }
        if (c->in_cap - c->in_len < 4096 && c->in_cap < (1u << 20)) {
            size_t cap = c->in_cap == 0 ? 65536 : c->in_cap * 2;
            unsigned char *n = tw_malloc(cap);
            if (n == NULL) {
                return true; /* try again on the next event */
            }
            if (c->in_len > 0) {
                memcpy(n, c->in, c->in_len);
            }
            if (c->in != NULL) {
                tw_free(c->in, c->in_cap);
            }
            c->in = n;
            c->in_cap = cap;
        }
        size_t space = c->in_cap - c->in_len;
        ssize_t n = recv(c->fd, c->in + c->in_len, space, 0);
        if (n > 0) {
            /* Less than asked for: the socket is drained (epoll is
             * level-triggered), so no recv only to hear EAGAIN. */
            bool drained = (size_t)n < space;
            c->in_len += (size_t)n;
            c->last_rx = tw_time_ns();
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
            if (c->state == TW_TCP_CONNECTED && !(lane->in_worker && tcp->eps[c->peer].reparse) &&
                !tw_tcp_parse_frames(c)) {
                tw_tcp_fail_peer(lane, c->peer, TW_ERR_PEER_FAILED, "bad frame");
                return false;
            }
            /* (Not connected: more handshake bytes to come. A held frame:
             * the engine parses on from it.) */
            if (drained) {
                return true;
            }
            continue;
        }
        int end = tw_tcp_recv_end(c, n);
        if (end == TW_TCP_RX_RETRY) {
            continue;
        }
        return end == 1;
    }
}

static void tw_tcp_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    (void)tw_tcp_read(arg);
}

/* ---- sending ---------------------------------------------------------------- */

/* A frame for @p head_len header bytes: from the pool when it fits (the
 * caller holds @p lane's lock), else from the allocator. */
static tw_tcp_frame_out_t *tw_tcp_frame_get(tw_tcp_lane_t *lane, size_t head_len)
{
    tw_tcp_frame_out_t *f;

    if (lane != NULL && head_len <= TW_TCP_POOL_HEAD) {
        f = lane->pool;
        if (f != NULL) {
            lane->pool = f->next;
            lane->npool--;
        } else if ((f = tw_malloc(TW_TCP_POOL_ALLOC)) == NULL) {
            return NULL;
        }
        *f = (tw_tcp_frame_out_t){.alloc_len = TW_TCP_POOL_ALLOC, .pooled = true};
        return f;
    }
    f = tw_malloc(sizeof(*f) + head_len);
    if (f != NULL) {
        *f = (tw_tcp_frame_out_t){.alloc_len = sizeof(*f) + head_len};
    }
    return f;
}

/* @p f is written or failed: complete it, and recycle it (lock holder). */
static void tw_tcp_frame_done(tw_tcp_lane_t *lane, tw_tcp_frame_out_t *f, tw_status_t st)
{
    if (f->comp != NULL) {
        f->comp->cb(f->comp, st);
    }
    if (f->pooled && lane->npool < TW_TCP_POOL_MAX) {
        f->next = lane->pool;
        lane->pool = f;
        lane->npool++;
        return;
    }
    tw_free(f, f->alloc_len);
}

/* Fill @p f with an AM frame to @p peer. */
static void tw_tcp_frame_fill(tw_tcp_frame_out_t *f, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, bool copy,
                              tw_tl_comp_t *comp)
{
    tw_tcp_frame_t fh = {
        .type = TW_TCP_FRAME_AM, .am_id = am_id, .hdr_len = (uint32_t)hdr_len, .len = len};

    f->head_len = TW_TCP_FRAME_LEN + hdr_len + (copy ? len : 0);
    f->zdata = copy ? NULL : data;
    f->zlen = copy ? 0 : len;
    f->comp = comp;
    f->peer = peer;
    tw_tcp_frame_pack(&fh, f->bytes);
    if (hdr_len > 0) {
        memcpy(f->bytes + TW_TCP_FRAME_LEN, hdr, hdr_len);
    }
    if (copy && len > 0) {
        memcpy(f->bytes + TW_TCP_FRAME_LEN + hdr_len, data, len);
    }
}

/* Write what the peer's queue holds: one writev for many frames. */
static void tw_tcp_flush(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep)
{
    tw_tcp_conn_t *c = ep->conn;

    if (c == NULL) {
        return;
    }
    if (c->hs_off < c->hs_len) { /* the PROVE goes first */
        if (!tw_tcp_hs_write(c)) {
            tw_tcp_conn_broken(c, errno);
            return;
        }
        if (c->hs_off < c->hs_len) {
            return; /* EV_WRITE comes back here */
        }
    }
    while (ep->head != NULL) {
        struct iovec iov[TW_TCP_IOV];
        int n = 0;
        for (tw_tcp_frame_out_t *f = ep->head; f != NULL && n + 2 <= TW_TCP_IOV; f = f->next) {
            size_t off = f->off;
            if (off < f->head_len) {
                iov[n++] = (struct iovec){f->bytes + off, f->head_len - off};
                off = f->head_len;
            }
            if (f->zlen > 0 && off - f->head_len < f->zlen) {
                iov[n++] = (struct iovec){(char *)f->zdata + (off - f->head_len),
                                          f->zlen - (off - f->head_len)};
            }
        }
        /* sendmsg, not writev: a peer that reset the connection must
         * give EPIPE here, not a SIGPIPE that kills the process. */
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                tw_tcp_want_out(c, true);
                return;
            }
            tw_tcp_conn_broken(c, errno);
            return;
        }
        c->last_tx = tw_time_ns();
        size_t left = (size_t)w;
        while (left > 0 && ep->head != NULL) {
            tw_tcp_frame_out_t *f = ep->head;
            size_t rest = f->head_len + f->zlen - f->off;
            if (left < rest) {
                f->off += left;
                left = 0;
                break;
            }
            left -= rest;
            lane->events++;
            ep->head = f->next;
            ep->queued--;
            if (ep->head == NULL) {
                ep->tail = NULL;
            }
            tw_tcp_frame_done(lane, f, TW_OK);
        }
    }
    if (c->want_out) {
        tw_tcp_want_out(c, false); /* all out */
    }
}

static void tw_tcp_on_write(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_conn_t *c = arg;
    tw_tcp_iface_t *tcp = c->lane->tcp;

    (void)fd, (void)what;
    if (c->state != TW_TCP_CONNECTED) {
        if (!tw_tcp_hs_write(c)) {
            tw_tcp_conn_broken(c, errno);
        }
        return;
    }
    if (c->peer >= 0 && tcp->eps[c->peer].conn == c) {
        tw_tcp_flush(c->lane, &tcp->eps[c->peer]);
    }
}

static void tw_tcp_connect(tw_tcp_lane_t *lane, int peer, int addr_index)
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

/* Queue @p f to its peer (engine side). */
static void tw_tcp_enqueue(tw_tcp_lane_t *lane, tw_tcp_frame_out_t *f)
{
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_ep_t *ep = &tcp->eps[f->peer];

    if (ep->failed || tcp->closing) {
        tw_tcp_frame_done(lane, f, ep->failed ? TW_ERR_PEER_FAILED : TW_ERR_CANCELED);
        return;
    }
    f->next = NULL;
    if (ep->tail == NULL) {
        ep->head = f;
    } else {
        ep->tail->next = f;
    }
    ep->tail = f;
    ep->queued++;
    if (ep->conn == NULL) {
        if (ep->pending == NULL && ep->accepting == NULL) {
            tw_tcp_connect(lane, f->peer, 0);
        }
        return; /* flushed once a connection is up */
    }
    if (ep->queued >= TW_TCP_IOV / 2) {
        tw_tcp_flush(lane, ep); /* enough for one full writev */
    } else {
        tw_tcp_mark_dirty(lane, ep);
    }
}

/* Submission command: a worker's frame reaches the lane's engine. */
static void tw_tcp_enqueue_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tcp_lane_t *lane = arg;

    (void)u64;
    atomic_fetch_sub_explicit(&lane->cmds, 1, memory_order_relaxed);
    tw_tcp_enqueue(lane, data);
}

/* A worker writes its frame itself when the lane's engine is free, the
 * peer is connected, and no earlier frame waits in the submission lanes
 * (so nothing is overtaken). */
typedef struct tw_tcp_direct {
    tw_tcp_lane_t *lane;
    int peer;
    uint8_t am_id;
    bool copy;
    bool done;
    tw_status_t st;
    const void *hdr, *data;
    size_t hdr_len, len;
    tw_tl_comp_t *comp;
} tw_tcp_direct_t;

static int tw_tcp_direct_fn(void *arg)
{
    tw_tcp_direct_t *d = arg;
    tw_tcp_lane_t *lane = d->lane;
    tw_tcp_ep_t *ep = &lane->tcp->eps[d->peer];
    tw_tcp_frame_out_t *f;

    if (atomic_load_explicit(&lane->cmds, memory_order_relaxed) != 0 || ep->conn == NULL ||
        ep->failed || lane->tcp->closing) {
        return 0;
    }
    f = tw_tcp_frame_get(lane, TW_TCP_FRAME_LEN + d->hdr_len + (d->copy ? d->len : 0));
    d->done = true;
    if (f == NULL) {
        d->st = TW_ERR_NOMEM;
        return 1;
    }
    tw_tcp_frame_fill(f, d->peer, d->am_id, d->hdr, d->hdr_len, d->data, d->len, d->copy, d->comp);
    lane->in_worker = true;
    tw_tcp_enqueue(lane, f);
    if (ep->conn != NULL && ep->queued == 1 && tw_time_ns() - ep->conn->last_tx >= TW_TCP_BURST) {
        tw_tcp_flush(lane, ep); /* a lone message: out now */
    } else if (lane->tcp->threads) {
        tw_pe_wake(lane->pe); /* part of a burst: the next pass writes them together */
    }
    lane->in_worker = false;
    d->st = TW_OK;
    return 1;
}

/* A frame that carries nothing but its type (FIN, PING). */
static void tw_tcp_enqueue_ctl(tw_tcp_lane_t *lane, int peer, uint8_t type)
{
    tw_tcp_frame_out_t *f = tw_tcp_frame_get(lane, TW_TCP_FRAME_LEN);
    tw_tcp_frame_t fh = {.type = type};

    if (f == NULL) {
        return; /* a missed PING or FIN: the peer copes (the next tick retries) */
    }
    f->head_len = TW_TCP_FRAME_LEN;
    f->peer = peer;
    tw_tcp_frame_pack(&fh, f->bytes);
    tw_tcp_enqueue(lane, f);
}

/* Write every dirty queue of @p lane (once per progress pass). */
static void tw_tcp_flush_dirty(tw_tcp_lane_t *lane)
{
    while (lane->dirty != NULL) {
        tw_tcp_ep_t *ep = lane->dirty;
        lane->dirty = ep->next_dirty;
        ep->dirty = false;
        tw_tcp_flush(lane, ep);
    }
}

static tw_status_t tw_tcp_post(tw_tcp_iface_t *tcp, int peer, uint8_t am_id, const void *hdr,
                               size_t hdr_len, const void *data, size_t len, bool copy,
                               tw_tl_comp_t *comp)
{
    size_t head_len = TW_TCP_FRAME_LEN + hdr_len + (copy ? len : 0);
    tw_tcp_lane_t *lane;
    tw_tcp_frame_out_t *f;

    if (peer < 0 || peer >= tcp->super.size || peer == tcp->super.rank) {
        return TW_ERR_UNREACHABLE;
    }
    if (atomic_load_explicit(&tcp->down[peer], memory_order_acquire)) {
        return TW_ERR_PEER_FAILED;
    }
    lane = tw_tcp_lane_of(tcp, peer);
    if (atomic_load_explicit(&lane->cmds, memory_order_relaxed) == 0) {
        tw_tcp_direct_t d = {.lane = lane,
                             .peer = peer,
                             .am_id = am_id,
                             .copy = copy,
                             .hdr = hdr,
                             .hdr_len = hdr_len,
                             .data = data,
                             .len = len,
                             .comp = comp};
        (void)tw_pe_try_call(lane->pe, tw_tcp_direct_fn, &d);
        if (d.done && d.st == TW_OK) {
            tw_stats_inc(tcp->super.stats, TW_TL_STAT_TX_MSGS);
            tw_stats_add(tcp->super.stats, TW_TL_STAT_TX_BYTES, len);
        }
        if (d.done) {
            return d.st;
        }
    }
    f = tw_tcp_frame_get(NULL, head_len);
    if (f == NULL) {
        tw_error("tcp", "cannot allocate a frame of %zu bytes for rank %d", head_len, peer);
        return TW_ERR_NOMEM;
    }
    tw_tcp_frame_fill(f, peer, am_id, hdr, hdr_len, data, len, copy, comp);
    size_t alloc_len = f->alloc_len;
    atomic_fetch_add_explicit(&lane->cmds, 1, memory_order_relaxed);
    tw_status_t st =
        tw_tl_submit(&tcp->super, lane->pe, tw_tcp_enqueue_cmd, lane, f, alloc_len, len);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&lane->cmds, 1, memory_order_relaxed);
    }
    return st;
}

static tw_status_t tw_tcp_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                   size_t hdr_len, const void *data, size_t len)
{
    if (hdr_len + len > iface->attr.max_short) {
        return TW_ERR_INVALID;
    }
    return tw_tcp_post((tw_tcp_iface_t *)iface, peer, am_id, hdr, hdr_len, data, len, true, NULL);
}

static tw_status_t tw_tcp_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                   size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    if (hdr_len > iface->attr.max_hdr || len > iface->attr.max_zcopy || comp == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_tcp_post((tw_tcp_iface_t *)iface, peer, am_id, hdr, hdr_len, data, len, false, comp);
}

/* ---- failure ------------------------------------------------------------------ */

/* Close every connection of @p ep and complete its queued frames with @p st. */
static void tw_tcp_ep_close(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep, tw_status_t st)
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
}

static void tw_tcp_fail_peer(tw_tcp_lane_t *lane, int peer, tw_status_t why, const char *what)
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
        if (ep->conn != NULL && (!tw_tcp_parse_frames(ep->conn) || !tw_tcp_read(ep->conn))) {
            if (ep->conn != NULL) {
                tw_tcp_fail_peer(lane, p, TW_ERR_PEER_FAILED, "bad frame");
            }
        }
    }
}

/* ---- accept, timers, progress ----------------------------------------------------- */

static void tw_tcp_on_accept(evutil_socket_t fd, short what, void *arg)
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

static int tw_tcp_lane_progress(void *arg)
{
    tw_tcp_lane_t *lane = arg;

    lane->events = 0;
    if (!lane->in_worker && (lane->downs != NULL || lane->nreparse > 0)) {
        tw_tcp_worker_leftovers(lane);
    }
    tw_tcp_flush_dirty(lane);
    if (lane->nconns > 0 || tw_time_ns() - lane->last_loop >= TW_TCP_IDLE_LOOP) {
        event_base_loop(lane->base, EVLOOP_NONBLOCK);
        if (lane->nconns == 0) {
            lane->last_loop = tw_time_ns();
        }
        tw_tcp_flush_dirty(lane);
    }
    return lane->events;
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
    events = tw_tcp_lane_progress(lane);
    lane->in_worker = false;
    return events;
}

/* tw_progress / tw_cq_wait with progress threads: the caller holds lane
 * 0's engine (the context's); the other lanes are tried. */
static int tw_tcp_poll(tw_tl_iface_t *iface)
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
static int tw_tcp_progress(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    int events = tw_tcp_lane_progress(&tcp->lanes[0]);

    if (!tcp->threads) {
        for (int k = 1; k < tcp->nlanes; k++) {
            events += tw_pe_progress(tcp->lanes[k].pe);
        }
    }
    return events;
}

/* Frames still queued to a live peer (finalize lets them out first). */
static bool tw_tcp_queued(const tw_tcp_iface_t *tcp)
{
    for (int r = 0; r < tcp->super.size; r++) {
        if (tcp->eps[r].head != NULL && !tcp->eps[r].failed) {
            return true;
        }
    }
    return false;
}

/* ---- addresses --------------------------------------------------------------------- */

static bool tw_tcp_if_listed(const char *list, const char *name)
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        if (strcmp(t, name) == 0) {
            return true;
        }
    }
    return false;
}

/* Where to listen: TW_TCP_IF's interfaces, or loopback for a job on one
 * node, or every non-loopback address. */
/* TW_TCP_AF: the families in order of preference (AF_INET, AF_INET6). */
static int tw_tcp_parse_af(const char *text, int fam[2])
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;
    int n = 0;

    snprintf(buf, sizeof(buf), "%s", text);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        int f = strcmp(t, "inet") == 0 ? AF_INET : strcmp(t, "inet6") == 0 ? AF_INET6 : -1;
        if (f < 0 || n == 2 || (n == 1 && fam[0] == f)) {
            return 0;
        }
        fam[n++] = f;
    }
    return n;
}

static tw_status_t tw_tcp_pick_addrs(tw_tcp_iface_t *tcp, const tw_tl_params_t *params)
{
    const char *list = tcp->cfg.ifs;
    bool local = list[0] == '\0' && params->local_size == params->size;
    struct ifaddrs *ifs = NULL;
    char seen[256] = "";
    int fam[2], nfam = tw_tcp_parse_af(tcp->cfg.af, fam);

    if (nfam == 0) {
        tw_error("tcp", "TW_TCP_AF='%s': want inet, inet6, or both in order of preference",
                 tcp->cfg.af);
        return TW_ERR_INVALID;
    }
    if (local) {
        /* One node: the loopback address of the preferred family. */
        if (fam[0] == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&tcp->addrs[0].ss;
            *in = (struct sockaddr_in){.sin_family = AF_INET,
                                       .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            tcp->addrs[0].len = sizeof(*in);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&tcp->addrs[0].ss;
            *in6 = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
            tcp->addrs[0].len = sizeof(*in6);
        }
        tcp->naddrs = 1;
        return TW_OK;
    }
    if (getifaddrs(&ifs) != 0) {
        tw_error("tcp", "getifaddrs failed: %m");
        return TW_ERR_TRANSPORT;
    }
    for (int k = 0; k < nfam; k++) {
        for (struct ifaddrs *i = ifs; i != NULL && tcp->naddrs < TW_TCP_MAX_ADDRS;
             i = i->ifa_next) {
            const struct sockaddr *sa = i->ifa_addr;
            tw_tcp_addr_t *a = &tcp->addrs[tcp->naddrs];

            if (sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
                continue;
            }
            if (strlen(seen) + strlen(i->ifa_name) + 2 < sizeof(seen) &&
                strstr(seen, i->ifa_name) == NULL) {
                strcat(seen, seen[0] != '\0' ? "," : "");
                strcat(seen, i->ifa_name);
            }
            if (!(i->ifa_flags & IFF_UP) || sa->sa_family != fam[k]) {
                continue;
            }
            if (list[0] != '\0' ? !tw_tcp_if_listed(list, i->ifa_name)
                                : (i->ifa_flags & IFF_LOOPBACK) != 0) {
                continue;
            }
            if (sa->sa_family == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
                continue; /* needs a scope id the peers cannot use */
            }
            a->len =
                sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
            memset(&a->ss, 0, sizeof(a->ss));
            memcpy(&a->ss, sa, a->len);
            tcp->naddrs++;
        }
    }
    freeifaddrs(ifs);
    if (tcp->naddrs == 0) {
        tw_error("tcp",
                 "no address to listen on: TW_TCP_IF='%s' matches no interface that is up "
                 "with an address of TW_TCP_AF='%s' (IPv6: global scope) (interfaces here: %s)",
                 list, tcp->cfg.af, seen);
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

static tw_status_t tw_tcp_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    size_t entry = TW_TCP_ADDR_ENTRY + 2u * (size_t)tcp->nlanes;
    size_t len = TW_TCP_ADDR_HDR + (size_t)tcp->naddrs * entry;
    uint64_t ms = tcp->cfg.timeout_ns / 1000000u;
    uint32_t magic = TW_TCP_MAGIC, ms32 = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    unsigned char *p = buf;

    if (cap < len) {
        return TW_ERR_INVALID;
    }
    memset(p, 0, len);
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(magic >> (8 * i));
        p[8 + i] = (unsigned char)(ms32 >> (8 * i));
    }
    p[4] = (unsigned char)tcp->nlanes;
    p[5] = (unsigned char)tcp->naddrs;
    p[6] = tcp->threads ? TW_TCP_FLAG_THREAD : 0;
    for (int a = 0; a < tcp->naddrs; a++) {
        unsigned char *e = p + TW_TCP_ADDR_HDR + (size_t)a * entry;
        const struct sockaddr *sa = (const struct sockaddr *)&tcp->addrs[a].ss;
        if (sa->sa_family == AF_INET) {
            e[0] = 4;
            memcpy(e + 4, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else {
            e[0] = 6;
            memcpy(e + 4, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        }
        for (int k = 0; k < tcp->nlanes; k++) {
            uint16_t port = htons(tcp->lanes[k].ports[a]);
            memcpy(e + TW_TCP_ADDR_ENTRY + 2 * k, &port, 2);
        }
    }
    *len_p = len;
    return TW_OK;
}

static tw_status_t tw_tcp_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    const unsigned char *p = addr;
    tw_tcp_ep_t *ep = &tcp->eps[peer];
    uint32_t magic = 0, ms = 0;
    unsigned nlanes, naddrs;
    size_t entry;

    if (len < TW_TCP_ADDR_HDR) {
        tw_error("tcp", "rank %d published a %zu-byte tcp address", peer, len);
        return TW_ERR_PROTOCOL;
    }
    for (int i = 0; i < 4; i++) {
        magic |= (uint32_t)p[i] << (8 * i);
        ms |= (uint32_t)p[8 + i] << (8 * i);
    }
    nlanes = p[4];
    naddrs = p[5];
    entry = TW_TCP_ADDR_ENTRY + 2u * nlanes;
    if (magic != TW_TCP_MAGIC || nlanes == 0 || nlanes > TW_TCP_MAX_LANES || naddrs == 0 ||
        naddrs > TW_TCP_MAX_ADDRS || len != TW_TCP_ADDR_HDR + naddrs * entry) {
        tw_error("tcp", "rank %d published a malformed tcp address (%zu bytes)", peer, len);
        return TW_ERR_PROTOCOL;
    }
    ep->naddrs = 0;
    for (unsigned a = 0; a < naddrs; a++) {
        const unsigned char *e = p + TW_TCP_ADDR_HDR + a * entry;
        tw_tcp_addr_t *dst = &ep->addrs[ep->naddrs];
        uint16_t port;

        /* Its lane for us: our rank modulo its lane count. */
        memcpy(&port, e + TW_TCP_ADDR_ENTRY + 2 * ((unsigned)tcp->super.rank % nlanes), 2);
        if (port == 0 || (e[0] != 4 && e[0] != 6)) {
            tw_error("tcp", "rank %d published a malformed tcp address entry", peer);
            return TW_ERR_PROTOCOL;
        }
        memset(dst, 0, sizeof(*dst));
        if (e[0] == 4) {
            struct sockaddr_in *in = (struct sockaddr_in *)&dst->ss;
            in->sin_family = AF_INET;
            in->sin_port = port;
            memcpy(&in->sin_addr, e + 4, 4);
            dst->len = sizeof(*in);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&dst->ss;
            in6->sin6_family = AF_INET6;
            in6->sin6_port = port;
            memcpy(&in6->sin6_addr, e + 4, 16);
            dst->len = sizeof(*in6);
        }
        ep->naddrs++;
    }
    if ((p[6] & TW_TCP_FLAG_THREAD) && ms > 0 && tcp->cfg.timeout_ns > 0) {
        uint64_t theirs = (uint64_t)ms * 1000000u;
        ep->silence_ns = theirs > tcp->cfg.timeout_ns ? theirs : tcp->cfg.timeout_ns;
    }
    /* A rank in manual mode answers a handshake only when it calls
     * tw_progress: give it TW_TCP_TIMEOUT (0: forever), not the 2 s a
     * progress thread needs at most. */
    ep->hs_ns = TW_TCP_HS_TIMEOUT;
    if (!(p[6] & TW_TCP_FLAG_THREAD)) {
        ep->hs_ns = tcp->cfg.timeout_ns == 0 ? UINT64_MAX / 2
                                             : TW_MAX(TW_TCP_HS_TIMEOUT, tcp->cfg.timeout_ns);
    }
    return TW_OK;
}

/* ---- setup ----------------------------------------------------------------------- */

static pthread_once_t tw_tcp_evthread_once = PTHREAD_ONCE_INIT;

static void tw_tcp_evthread_init(void)
{
    (void)evthread_use_pthreads();
}

static tw_status_t tw_tcp_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

static bool tw_tcp_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    return peer != iface->rank && peer >= 0 && peer < iface->size && tcp->eps[peer].naddrs > 0;
}

/* Every address is known: the lanes of our own engines may start. */
static void tw_tcp_ready(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    for (int k = 1; k < tcp->nlanes && tcp->threads; k++) {
        if (tw_pe_start(tcp->lanes[k].pe) != TW_OK) {
            /* Its commands still run: tw_tcp_progress drives it instead. */
            tw_warn("tcp", "cannot start the thread of lane %d: lane 0's engine drives it", k);
            tcp->threads = false;
        }
    }
}

static tw_status_t tw_tcp_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_tcp_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_tcp_ops = {
    .name = "tcp",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_RNDV | TW_TL_CAP_POLL,
    .cfg = &tw_tcp_cfg_table,
    .query = tw_tcp_query,
    .iface_open = tw_tcp_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_tcp_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tcp_addr_pack,
    .addr_connect = tw_tcp_addr_connect,
    .ready = tw_tcp_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_tcp_reachable,
    .am_short = tw_tcp_am_short,
    .am_zcopy = tw_tcp_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tcp_rndv_get,
    .progress = tw_tcp_progress,
    .poll = tw_tcp_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

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

static tw_status_t tw_tcp_lane_open(tw_tcp_iface_t *tcp, int k, const tw_tl_params_t *params)
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
        st = tw_pe_add(lane->pe, tw_tcp_lane_progress, lane, -1);
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
    struct event_config *ecfg = event_config_new();
    if (ecfg == NULL ||
        event_config_set_flag(ecfg, EVENT_BASE_FLAG_NOLOCK | EVENT_BASE_FLAG_NO_CACHE_TIME) != 0) {
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

static tw_status_t tw_tcp_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_TCP_MAX_SHORT,
        .max_hdr = TW_TCP_MAX_HDR,
        .max_zcopy = TW_TCP_MAX_LEN,
    };
    tw_tcp_iface_t *tcp;
    tw_status_t st;

    pthread_once(&tw_tcp_evthread_once, tw_tcp_evthread_init);
    tcp = tw_calloc(1, sizeof(*tcp));
    if (tcp == NULL) {
        return TW_ERR_NOMEM;
    }
    st = tw_tl_iface_init(&tcp->super, &tw_tcp_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(tcp, sizeof(*tcp));
        return st;
    }
    tw_cfg_set_defaults(&tw_tcp_cfg_table, &tcp->cfg);
    if (tw_cfg_apply_env(&tw_tcp_cfg_table, &tcp->cfg) != TW_OK) {
        st = TW_ERR_INVALID;
        goto err;
    }
    if (tw_siphash_key_parse(params->job_key, tcp->key) != TW_OK) {
        tw_error("tcp", "no job key: the TCP transport needs twrun's TW_JOB_KEY");
        st = TW_ERR_INVALID;
        goto err;
    }
    tcp->threads = tw_pe_has_thread(params->pe);
    tcp->nlanes = tcp->cfg.threads;
    if (tcp->nlanes <= 0) {
        tcp->nlanes = tcp->threads ? tw_topo_num_packages() : 1;
    }
    if (tcp->nlanes > TW_TCP_MAX_LANES) {
        tcp->nlanes = TW_TCP_MAX_LANES;
    }
    /* The tick: an eighth of the timeout, between 10 ms and 250 ms. */
    tcp->tick_ns = tcp->cfg.timeout_ns / 8;
    if (tcp->tick_ns < 10000000u || tcp->tick_ns > 250000000u) {
        tcp->tick_ns = tcp->tick_ns < 10000000u && tcp->cfg.timeout_ns > 0 ? 10000000u : 250000000u;
    }
    st = tw_tcp_pick_addrs(tcp, params);
    if (st != TW_OK) {
        goto err;
    }
    tcp->eps = tw_calloc((size_t)params->size, sizeof(*tcp->eps));
    tcp->down = tw_calloc((size_t)params->size, sizeof(*tcp->down));
    tcp->lanes = tw_calloc((size_t)tcp->nlanes, sizeof(*tcp->lanes));
    if (tcp->eps == NULL || tcp->down == NULL || tcp->lanes == NULL) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    for (int i = 0; i < params->size; i++) {
        tcp->eps[i].hs_ns = TW_TCP_HS_TIMEOUT; /* until its address says otherwise */
    }
    for (int k = 0; k < tcp->nlanes; k++) {
        st = tw_tcp_lane_open(tcp, k, params);
        if (st != TW_OK) {
            goto err;
        }
    }
    *iface_p = &tcp->super;
    return TW_OK;

err:
    tw_tcp_iface_close(&tcp->super);
    return st;
}

static void tw_tcp_lane_close(tw_tcp_lane_t *lane)
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

static void tw_tcp_iface_close(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    /* The caller drives every lane from here on. */
    for (int k = 1; tcp->lanes != NULL && k < tcp->nlanes; k++) {
        tw_pe_stop(tcp->lanes[k].pe);
    }
    if (tcp->eps != NULL && tcp->lanes != NULL && tcp->lanes[tcp->nlanes - 1].base != NULL) {
        /* Clean close: what was sent before finalize still goes out,
         * then a FIN, so the peers do not report a failure (connections
         * may still be in their handshake): up to TW_TCP_HS_TIMEOUT. */
        uint64_t until = tw_time_ns() + TW_TCP_HS_TIMEOUT;
        for (int r = 0; r < iface->size; r++) {
            tw_tcp_ep_t *ep = &tcp->eps[r];
            if (!ep->failed && (ep->conn != NULL || ep->pending != NULL || ep->accepting != NULL)) {
                tw_tcp_enqueue_ctl(tw_tcp_lane_of(tcp, r), r, TW_TCP_FRAME_FIN);
            }
        }
        while (tw_tcp_queued(tcp) && tw_time_ns() < until) {
            (void)tw_tcp_lane_progress(&tcp->lanes[0]);
            for (int k = 1; k < tcp->nlanes; k++) {
                (void)tw_pe_progress(tcp->lanes[k].pe);
            }
            usleep(50);
        }
    }
    tcp->closing = true; /* late commands: TW_ERR_CANCELED */
    for (int k = 1; tcp->lanes != NULL && k < tcp->nlanes; k++) {
        tw_pe_destroy(tcp->lanes[k].pe);
        tcp->lanes[k].pe = NULL;
    }
    if (tcp->eps != NULL && tcp->lanes != NULL) {
        for (int r = 0; r < iface->size; r++) {
            tw_tcp_ep_close(tw_tcp_lane_of(tcp, r), &tcp->eps[r], TW_ERR_CANCELED);
        }
    }
    if (tcp->eps != NULL) {
        tw_free(tcp->eps, (size_t)iface->size * sizeof(*tcp->eps));
    }
    if (tcp->lanes != NULL) {
        for (int k = 0; k < tcp->nlanes; k++) {
            tw_tcp_lane_close(&tcp->lanes[k]);
        }
        tw_free(tcp->lanes, (size_t)tcp->nlanes * sizeof(*tcp->lanes));
    }
    if (tcp->down != NULL) {
        tw_free(tcp->down, (size_t)iface->size * sizeof(*tcp->down));
    }
    tw_tl_iface_cleanup(iface);
    tw_free(tcp, sizeof(*tcp));
}

uint16_t tw_tcp_test_peer_port(tw_tl_iface_t *iface, int peer)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    if (peer < 0 || peer >= iface->size || tcp->eps[peer].naddrs == 0) {
        return 0;
    }
    return ntohs(((struct sockaddr_in *)&tcp->eps[peer].addrs[0].ss)->sin_port);
}
