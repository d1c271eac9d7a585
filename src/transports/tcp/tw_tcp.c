/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The TCP transport (first version; docs/tcp-plan.md has the whole plan).
 *
 * One libevent base per iface, driven only by its progress engine's owner
 * (the progress function runs event_base_loop(EVLOOP_NONBLOCK); every
 * socket is also watched by the engine's epoll so a sleeping engine wakes).
 * Worker threads never touch a socket: a send becomes a frame handed to
 * the engine through its submission lane (tw_pe_submit), appended to the
 * peer's endpoint queue and written with writev -- several queued frames
 * per syscall, partial writes resumed.
 *
 * Connections are made lazily, on the first frame to a peer:
 *   CLOSED -> CONNECTING (non-blocking connect) -> CONNECT_ACK (HELLO sent,
 *   waiting for WELCOME) -> CONNECTED (PROVE sent); FAILED.
 * The accepting side waits for HELLO, answers WELCOME, and takes the
 * connection once PROVE checks (tw_tcp_proto.h: both sides prove the job
 * key over the other's nonce; the key never travels). No frame is written
 * before a connection is CONNECTED, so when both ranks connect at once the
 * one initiated by the lower rank wins and the other is closed without
 * loss or error. A connection that fails the handshake (bad magic,
 * version, proof, or 2 s of silence) is closed, counted and logged.
 *
 * A clean close writes a FIN frame: the peer then knows it left. EOF
 * without FIN, a reset, or a bad frame fails the peer: its queued and
 * in-flight sends complete with TW_ERR_PEER_FAILED and the layer above is
 * told (peer_down).
 *
 * Limits of this version: listens on 127.0.0.1 only (twrun is a node-local
 * launcher), one engine carries every connection, no rendezvous (large
 * payloads stream inline and the send completes once written), and the
 * transport is used only when TW_TRANSPORTS names it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/base/tw_tl.h"
#include "transports/tcp/tw_tcp.h"
#include "transports/tcp/tw_tcp_proto.h"

#define TW_TCP_MAX_SHORT  (64u * 1024u)
#define TW_TCP_MAX_HDR    (TW_AM_HDR_MAX + 256u)
#define TW_TCP_MAX_LEN    (1ull << 30)
#define TW_TCP_HS_TIMEOUT (2ull * 1000 * 1000 * 1000)
#define TW_TCP_IOV        64

enum {
    TW_TCP_CLOSED,
    TW_TCP_CONNECTING,
    TW_TCP_CONNECT_ACK,
    TW_TCP_ACCEPTED, /* waiting for HELLO */
    TW_TCP_WELCOMED, /* WELCOME sent, waiting for PROVE */
    TW_TCP_CONNECTED,
    TW_TCP_FAILED
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
    unsigned char bytes[];
} tw_tcp_frame_out_t;

typedef struct tw_tcp_iface tw_tcp_iface_t;

typedef struct tw_tcp_conn {
    tw_tcp_iface_t *tcp;
    int fd;
    int state;
    int peer; /* -1 until HELLO names it (accepted side) */
    bool initiator;
    uint8_t nonce[16];      /* ours */
    uint8_t peer_nonce[16]; /* theirs */
    uint64_t hs_deadline;
    struct event *ev_read, *ev_write;
    unsigned char *in; /* receive buffer */
    size_t in_len, in_cap;
    struct tw_tcp_conn *next; /* handshaking connections */
} tw_tcp_conn_t;

typedef struct tw_tcp_ep {
    tw_tcp_conn_t *conn;      /* CONNECTED, or NULL */
    tw_tcp_conn_t *pending;   /* our connect, handshake in progress */
    tw_tcp_conn_t *accepting; /* the peer's connect, handshake in progress */
    tw_tcp_frame_out_t *head, *tail;
    struct sockaddr_in addr;
    bool have_addr;
    bool failed;
    bool left; /* FIN received */
} tw_tcp_ep_t;

struct tw_tcp_iface {
    tw_tl_iface_t super;
    struct event_base *base;
    int listen_fd;
    struct event *ev_accept;
    uint16_t port;
    uint8_t key[16];
    tw_tcp_ep_t *eps;           /* [size] */
    tw_tcp_conn_t *handshaking; /* engine owner */
    _Atomic(uint8_t) *down;     /* [size]: failed or left (any thread reads) */
    uint64_t next_check_ns;
    int events; /* callbacks that did work in this pass (progress returns it) */
};

typedef struct tw_tcp_addr {
    uint32_t magic;
    uint16_t port;
    uint16_t pad;
    uint32_t ipv4; /* network order */
} tw_tcp_addr_t;

static void tw_tcp_conn_close(tw_tcp_conn_t *c);
static void tw_tcp_fail_peer(tw_tcp_iface_t *tcp, int peer, tw_status_t why, const char *what);
static void tw_tcp_flush(tw_tcp_iface_t *tcp, tw_tcp_ep_t *ep);

/* ---- connections ---------------------------------------------------------- */

static void tw_tcp_on_read(evutil_socket_t fd, short what, void *arg);
static void tw_tcp_on_write(evutil_socket_t fd, short what, void *arg);

static tw_tcp_conn_t *tw_tcp_conn_new(tw_tcp_iface_t *tcp, int fd, int state, int peer,
                                      bool initiator)
{
    tw_tcp_conn_t *c = tw_calloc(1, sizeof(*c));
    int one = 1;

    if (c == NULL) {
        close(fd);
        return NULL;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->tcp = tcp;
    c->fd = fd;
    c->state = state;
    c->peer = peer;
    c->initiator = initiator;
    c->hs_deadline = tw_time_ns() + TW_TCP_HS_TIMEOUT;
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != (ssize_t)sizeof(c->nonce)) {
        tw_free(c, sizeof(*c));
        close(fd);
        return NULL;
    }
    c->ev_read = event_new(tcp->base, fd, EV_READ | EV_PERSIST, tw_tcp_on_read, c);
    c->ev_write = event_new(tcp->base, fd, EV_WRITE, tw_tcp_on_write, c);
    if (c->ev_read == NULL || c->ev_write == NULL || event_add(c->ev_read, NULL) != 0 ||
        tw_pe_watch(tcp->super.pe, fd) != TW_OK) {
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
    c->next = tcp->handshaking;
    tcp->handshaking = c;
    return c;
}

static void tw_tcp_unlink_handshaking(tw_tcp_conn_t *c)
{
    for (tw_tcp_conn_t **pp = &c->tcp->handshaking; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            return;
        }
    }
}

static void tw_tcp_conn_close(tw_tcp_conn_t *c)
{
    tw_tcp_iface_t *tcp = c->tcp;

    tw_tcp_unlink_handshaking(c);
    if (c->peer >= 0) {
        tw_tcp_ep_t *ep = &tcp->eps[c->peer];
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
    event_free(c->ev_read);
    event_free(c->ev_write);
    tw_pe_unwatch(tcp->super.pe, c->fd);
    close(c->fd);
    if (c->in != NULL) {
        tw_free(c->in, c->in_cap);
    }
    tw_free(c, sizeof(*c));
}

/* Write all of @p len bytes now (handshake messages, FIN: small). */
static bool tw_tcp_send_small(tw_tcp_conn_t *c, const void *buf, size_t len)
{
    const char *p = buf;
    for (int tries = 0; len > 0 && tries < 1000; tries++) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return false;
        } else {
            usleep(100);
        }
    }
    return len == 0;
}

static void tw_tcp_send_hs(tw_tcp_conn_t *c, uint8_t type, uint64_t proof)
{
    tw_tcp_hs_t hs = {.type = type,
                      .rank = (uint32_t)c->tcp->super.rank,
                      .size = (uint32_t)c->tcp->super.size,
                      .proof = proof};
    uint8_t buf[TW_TCP_HS_LEN];

    memcpy(hs.nonce, c->nonce, sizeof(hs.nonce));
    tw_tcp_hs_pack(&hs, buf);
    if (!tw_tcp_send_small(c, buf, sizeof(buf))) {
        c->state = TW_TCP_FAILED;
    }
}

/* A connection finished its handshake: it is the peer's from now on. The
 * rules at HELLO time (tw_tcp_on_hs) leave at most one handshake per
 * peer, so there is nothing to choose here. */
static void tw_tcp_established(tw_tcp_conn_t *c)
{
    tw_tcp_iface_t *tcp = c->tcp;
    tw_tcp_ep_t *ep = &tcp->eps[c->peer];

    tw_tcp_unlink_handshaking(c);
    if (ep->pending == c) {
        ep->pending = NULL;
    }
    if (ep->accepting == c) {
        ep->accepting = NULL;
    }
    c->state = TW_TCP_CONNECTED;
    ep->conn = c;
    tw_tcp_flush(tcp, ep);
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
    tw_tcp_iface_t *tcp = c->tcp;
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
        if (ep->failed || ep->conn != NULL || ep->accepting != NULL) {
            tw_warn("tcp", "handshake refused: rank %u is connected already", hs.rank);
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
        ep->accepting = c;
        memcpy(c->peer_nonce, hs.nonce, 16);
        c->state = TW_TCP_WELCOMED;
        tw_tcp_send_hs(c, TW_TCP_HS_WELCOME,
                       tw_tcp_hs_proof(tcp->key, 'A', c->peer_nonce, c->nonce,
                                       (uint32_t)tcp->super.rank, hs.rank));
        return c->state == TW_TCP_FAILED ? TW_TCP_HS_BAD : TW_TCP_HS_OK;
    }
    case TW_TCP_CONNECT_ACK: /* WELCOME: check the acceptor's proof */
        if ((int)hs.rank != c->peer ||
            hs.proof != tw_tcp_hs_proof(tcp->key, 'A', c->nonce, hs.nonce, hs.rank,
                                        (uint32_t)tcp->super.rank)) {
            tw_warn("tcp", "handshake refused: rank %d did not prove the job key", c->peer);
            return TW_TCP_HS_BAD;
        }
        memcpy(c->peer_nonce, hs.nonce, 16);
        tw_tcp_send_hs(c, TW_TCP_HS_PROVE,
                       tw_tcp_hs_proof(tcp->key, 'C', c->peer_nonce, c->nonce, hs.rank,
                                       (uint32_t)tcp->super.rank));
        if (c->state == TW_TCP_FAILED) {
            return TW_TCP_HS_BAD;
        }
        tw_tcp_established(c);
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

/* ---- receiving ------------------------------------------------------------- */

/* Deliver every complete frame in c->in; false: the stream is bad. */
static bool tw_tcp_parse_frames(tw_tcp_conn_t *c)
{
    tw_tcp_iface_t *tcp = c->tcp;
    size_t off = 0;

    while (c->in_len - off >= TW_TCP_FRAME_LEN && c->state == TW_TCP_CONNECTED) {
        tw_tcp_frame_t f;
        const char *why = "?";
        tw_status_t st = tw_tcp_frame_parse(c->in + off, c->in_len - off, TW_TCP_MAX_HDR,
                                            TW_TCP_MAX_LEN, &f, &why);
        size_t total;

        if (st != TW_OK) {
            tw_stats_inc(tcp->super.stats, TW_TL_STAT_BAD_FRAMES);
            tw_error("tcp", "rank %d sent a bad frame (%s): connection closed", c->peer, why);
            return false;
        }
        if (f.type == TW_TCP_FRAME_FIN) {
            tcp->eps[c->peer].left = true;
            off += TW_TCP_FRAME_LEN;
            continue;
        }
        total = TW_TCP_FRAME_LEN + f.hdr_len + (size_t)f.len;
        if (c->in_len - off < total) {
            if (total > c->in_cap) {
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
        tw_stats_inc(tcp->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(tcp->super.stats, TW_TL_STAT_RX_BYTES, f.len);
        tcp->events++;
        tcp->super.recv(tcp->super.recv_arg, c->peer, f.am_id, c->in + off + TW_TCP_FRAME_LEN,
                        f.hdr_len, c->in + off + TW_TCP_FRAME_LEN + f.hdr_len, (size_t)f.len);
        off += total;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return true;
}

static void tw_tcp_on_read(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_conn_t *c = arg;
    tw_tcp_iface_t *tcp = c->tcp;

    (void)what;
    for (;;) {
        if (c->in_cap - c->in_len < 4096 && c->in_cap < (1u << 20)) {
            size_t cap = c->in_cap == 0 ? 65536 : c->in_cap * 2;
            unsigned char *n = tw_malloc(cap);
            if (n == NULL) {
                break;
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
        ssize_t n = recv(fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            while (c->state != TW_TCP_CONNECTED && c->in_len >= TW_TCP_HS_LEN) {
                int rc = tw_tcp_on_hs(c, c->in);
                if (rc != TW_TCP_HS_OK) {
                    bool ours = c->initiator && c->peer >= 0;
                    if (rc == TW_TCP_HS_BAD) {
                        tw_stats_inc(tcp->super.stats, TW_TL_STAT_REFUSED);
                    }
                    if (ours && rc == TW_TCP_HS_BAD) {
                        /* Our connect to a rank of the job was refused. */
                        tw_tcp_fail_peer(tcp, c->peer, TW_ERR_PEER_FAILED, "the handshake failed");
                        return;
                    }
                    tw_tcp_conn_close(c);
                    return;
                }
                memmove(c->in, c->in + TW_TCP_HS_LEN, c->in_len - TW_TCP_HS_LEN);
                c->in_len -= TW_TCP_HS_LEN;
            }
            if (c->state != TW_TCP_CONNECTED) {
                continue; /* more handshake bytes to come */
            }
            if (!tw_tcp_parse_frames(c)) {
                tw_tcp_fail_peer(tcp, c->peer, TW_ERR_PEER_FAILED, "bad frame");
                return;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        /* EOF or error. */
        if (c->state == TW_TCP_CONNECTED) {
            int peer = c->peer;
            bool left = tcp->eps[peer].left;
            tw_tcp_fail_peer(tcp, peer, left ? TW_OK : TW_ERR_PEER_FAILED,
                             n == 0 ? "connection closed without FIN" : strerror(errno));
        } else if (c->initiator && c->peer >= 0 && c->peer < tcp->super.rank) {
            /* Our connect lost the simultaneous-connect rule (we are the
             * higher rank): the peer's own connection takes over. */
            tw_tcp_conn_close(c);
        } else if (c->initiator && c->peer >= 0) {
            tw_tcp_fail_peer(tcp, c->peer, TW_ERR_PEER_FAILED, "connection refused or reset");
        } else {
            tw_tcp_conn_close(c);
        }
        return;
    }
}

/* ---- sending ---------------------------------------------------------------- */

static void tw_tcp_frame_done(tw_tcp_frame_out_t *f, tw_status_t st)
{
    if (f->comp != NULL) {
        f->comp->cb(f->comp, st);
    }
    tw_free(f, f->alloc_len);
}

/* Write what the peer's queue holds: one writev for many frames. */
static void tw_tcp_flush(tw_tcp_iface_t *tcp, tw_tcp_ep_t *ep)
{
    tw_tcp_conn_t *c = ep->conn;

    while (c != NULL && ep->head != NULL) {
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
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                event_add(c->ev_write, NULL);
                return;
            }
            tw_tcp_fail_peer(tcp, c->peer, TW_ERR_PEER_FAILED, strerror(errno));
            return;
        }
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
            tcp->events++;
            ep->head = f->next;
            if (ep->head == NULL) {
                ep->tail = NULL;
            }
            tw_tcp_frame_done(f, TW_OK);
        }
    }
}

static void tw_tcp_on_write(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_conn_t *c = arg;
    (void)fd, (void)what;
    if (c->peer >= 0 && c->tcp->eps[c->peer].conn == c) {
        tw_tcp_flush(c->tcp, &c->tcp->eps[c->peer]);
    }
}

static void tw_tcp_connect(tw_tcp_iface_t *tcp, int peer)
{
    tw_tcp_ep_t *ep = &tcp->eps[peer];
    int fd;

    if (!ep->have_addr) {
        tw_tcp_fail_peer(tcp, peer, TW_ERR_PEER_FAILED, "no address");
        return;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        tw_tcp_fail_peer(tcp, peer, TW_ERR_PEER_FAILED, strerror(errno));
        return;
    }
    if (connect(fd, (struct sockaddr *)&ep->addr, sizeof(ep->addr)) != 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        tw_tcp_fail_peer(tcp, peer, TW_ERR_PEER_FAILED, strerror(err));
        return;
    }
    ep->pending = tw_tcp_conn_new(tcp, fd, TW_TCP_CONNECT_ACK, peer, true);
    if (ep->pending == NULL) {
        tw_tcp_fail_peer(tcp, peer, TW_ERR_PEER_FAILED, "out of memory");
        return;
    }
    /* The HELLO waits in the socket buffer until the connect completes. */
    tw_tcp_send_hs(ep->pending, TW_TCP_HS_HELLO, 0);
}

/* Engine side of a send (a submission command). */
static void tw_tcp_enqueue_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tcp_iface_t *tcp = arg;
    tw_tcp_frame_out_t *f = data;
    tw_tcp_ep_t *ep = &tcp->eps[f->peer];

    (void)u64;
    if (ep->failed) {
        tw_tcp_frame_done(f, TW_ERR_PEER_FAILED);
        return;
    }
    f->next = NULL;
    if (ep->tail == NULL) {
        ep->head = f;
    } else {
        ep->tail->next = f;
    }
    ep->tail = f;
    if (ep->conn == NULL) {
        if (ep->pending == NULL && ep->accepting == NULL) {
            tw_tcp_connect(tcp, f->peer);
        }
        return; /* flushed once a connection is up */
    }
    tw_tcp_flush(tcp, ep);
}

static tw_status_t tw_tcp_post(tw_tcp_iface_t *tcp, int peer, uint8_t am_id, const void *hdr,
                               size_t hdr_len, const void *data, size_t len, bool copy,
                               tw_tl_comp_t *comp)
{
    size_t head_len = TW_TCP_FRAME_LEN + hdr_len + (copy ? len : 0);
    size_t alloc_len = sizeof(tw_tcp_frame_out_t) + head_len;
    tw_tcp_frame_t fh = {
        .type = TW_TCP_FRAME_AM, .am_id = am_id, .hdr_len = (uint32_t)hdr_len, .len = len};
    tw_tcp_frame_out_t *f;

    if (peer < 0 || peer >= tcp->super.size || peer == tcp->super.rank) {
        return TW_ERR_UNREACHABLE;
    }
    if (atomic_load_explicit(&tcp->down[peer], memory_order_acquire)) {
        return TW_ERR_PEER_FAILED;
    }
    f = tw_malloc(alloc_len);
    if (f == NULL) {
        tw_error("tcp", "cannot allocate a %zu-byte frame for rank %d", alloc_len, peer);
        return TW_ERR_NOMEM;
    }
    *f = (tw_tcp_frame_out_t){.alloc_len = alloc_len,
                              .head_len = head_len,
                              .zdata = copy ? NULL : data,
                              .zlen = copy ? 0 : len,
                              .comp = comp,
                              .peer = peer};
    tw_tcp_frame_pack(&fh, f->bytes);
    if (hdr_len > 0) {
        memcpy(f->bytes + TW_TCP_FRAME_LEN, hdr, hdr_len);
    }
    if (copy && len > 0) {
        memcpy(f->bytes + TW_TCP_FRAME_LEN + hdr_len, data, len);
    }
    return tw_tl_submit(&tcp->super, tw_tcp_enqueue_cmd, f, alloc_len, len);
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

static void tw_tcp_fail_peer(tw_tcp_iface_t *tcp, int peer, tw_status_t why, const char *what)
{
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
        tw_tcp_frame_done(f, TW_ERR_PEER_FAILED);
    }
    ep->tail = NULL;
    if (tcp->super.peer_down != NULL) {
        tcp->super.peer_down(tcp->super.peer_down_arg, peer, why);
    }
}

/* ---- accept, progress ------------------------------------------------------------ */

static void tw_tcp_on_accept(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_iface_t *tcp = arg;

    (void)what;
    for (;;) {
        int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            return; /* EAGAIN, or a transient error: the next event retries */
        }
        (void)tw_tcp_conn_new(tcp, c, TW_TCP_ACCEPTED, -1, false);
    }
}

static int tw_tcp_progress(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    uint64_t now;

    tcp->events = 0;
    event_base_loop(tcp->base, EVLOOP_NONBLOCK);
    now = tw_time_ns();
    if (now >= tcp->next_check_ns) {
        tcp->next_check_ns = now + 100ull * 1000 * 1000;
        for (tw_tcp_conn_t *c = tcp->handshaking, *next; c != NULL; c = next) {
            next = c->next;
            if (now > c->hs_deadline) {
                tw_stats_inc(tcp->super.stats, TW_TL_STAT_REFUSED);
                tw_warn("tcp", "handshake timed out (%s side)",
                        c->initiator ? "connecting" : "accepting");
                if (c->initiator && c->peer >= 0) {
                    tw_tcp_fail_peer(tcp, c->peer, TW_ERR_PEER_FAILED, "handshake timed out");
                } else {
                    tw_tcp_conn_close(c);
                }
            }
        }
    }
    return tcp->events;
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
    return peer != iface->rank && peer >= 0 && peer < iface->size && tcp->eps[peer].have_addr;
}

static tw_status_t tw_tcp_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    tw_tcp_addr_t a = {.magic = TW_TCP_MAGIC, .port = tcp->port, .ipv4 = htonl(INADDR_LOOPBACK)};

    if (cap < sizeof(a)) {
        return TW_ERR_INVALID;
    }
    memcpy(buf, &a, sizeof(a));
    *len_p = sizeof(a);
    return TW_OK;
}

static tw_status_t tw_tcp_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    tw_tcp_addr_t a;

    if (len != sizeof(a)) {
        tw_error("tcp", "rank %d published a %zu-byte tcp address (want %zu)", peer, len,
                 sizeof(a));
        return TW_ERR_PROTOCOL;
    }
    memcpy(&a, addr, sizeof(a));
    if (a.magic != TW_TCP_MAGIC || a.port == 0) {
        tw_error("tcp", "rank %d published a malformed tcp address", peer);
        return TW_ERR_PROTOCOL;
    }
    tcp->eps[peer].addr = (struct sockaddr_in){
        .sin_family = AF_INET, .sin_port = htons(a.port), .sin_addr.s_addr = a.ipv4};
    tcp->eps[peer].have_addr = true;
    return TW_OK;
}

static tw_status_t tw_tcp_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_tcp_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_tcp_ops = {
    .name = "tcp",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY,
    .opt_in = true, /* until issue 4 is complete (docs/tcp-plan.md) */
    .query = tw_tcp_query,
    .iface_open = tw_tcp_iface_open,
    .iface_close = tw_tcp_iface_close,
    .addr_pack = tw_tcp_addr_pack,
    .addr_connect = tw_tcp_addr_connect,
    .ready = tw_tl_noaddr_ready,
    .reachable = tw_tcp_reachable,
    .am_short = tw_tcp_am_short,
    .am_zcopy = tw_tcp_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_tcp_progress,
    .poll = tw_tl_stub_progress,
};

static tw_status_t tw_tcp_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_TCP_MAX_SHORT,
        .max_hdr = TW_TCP_MAX_HDR,
        .max_zcopy = TW_TCP_MAX_LEN,
    };
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    tw_tcp_iface_t *tcp;
    tw_status_t st;

    pthread_once(&tw_tcp_evthread_once, tw_tcp_evthread_init);
    tcp = tw_calloc(1, sizeof(*tcp));
    if (tcp == NULL) {
        return TW_ERR_NOMEM;
    }
    tcp->listen_fd = -1;
    st = tw_tl_iface_init(&tcp->super, &tw_tcp_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(tcp, sizeof(*tcp));
        return st;
    }
    if (tw_tcp_key_parse(params->job_key, tcp->key) != TW_OK) {
        tw_error("tcp", "no job key: the TCP transport needs twrun's TW_JOB_KEY");
        st = TW_ERR_INVALID;
        goto err;
    }
    tcp->eps = tw_calloc((size_t)params->size, sizeof(*tcp->eps));
    tcp->down = tw_calloc((size_t)params->size, sizeof(*tcp->down));
    tcp->base = event_base_new();
    if (tcp->eps == NULL || tcp->down == NULL || tcp->base == NULL) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    tcp->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (tcp->listen_fd < 0 || bind(tcp->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(tcp->listen_fd, 128) != 0 ||
        getsockname(tcp->listen_fd, (struct sockaddr *)&sa, &sl) != 0) {
        tw_error("tcp", "cannot listen on 127.0.0.1: %m");
        st = TW_ERR_TRANSPORT;
        goto err;
    }
    tcp->port = ntohs(sa.sin_port);
    tcp->ev_accept =
        event_new(tcp->base, tcp->listen_fd, EV_READ | EV_PERSIST, tw_tcp_on_accept, tcp);
    if (tcp->ev_accept == NULL || event_add(tcp->ev_accept, NULL) != 0 ||
        tw_pe_watch(params->pe, tcp->listen_fd) != TW_OK) {
        st = TW_ERR_TRANSPORT;
        goto err;
    }
    *iface_p = &tcp->super;
    return TW_OK;

err:
    tw_tcp_iface_close(&tcp->super);
    return st;
}

static void tw_tcp_iface_close(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    if (tcp->eps != NULL && tcp->base != NULL) {
        /* What was sent before finalize still goes out (connections may
         * still be in their handshake): up to TW_TCP_HS_TIMEOUT. */
        uint64_t until = tw_time_ns() + TW_TCP_HS_TIMEOUT;
        while (tw_tcp_queued(tcp) && tw_time_ns() < until) {
            (void)tw_tcp_progress(iface);
            usleep(50);
        }
    }
    if (tcp->eps != NULL) {
        for (int r = 0; r < iface->size; r++) {
            tw_tcp_ep_t *ep = &tcp->eps[r];
            if (ep->conn != NULL) {
                /* Clean close: the peer must not report a failure. */
                tw_tcp_frame_t fin = {.type = TW_TCP_FRAME_FIN};
                uint8_t buf[TW_TCP_FRAME_LEN];
                tw_tcp_flush(tcp, ep);
                tw_tcp_frame_pack(&fin, buf);
                (void)tw_tcp_send_small(ep->conn, buf, sizeof(buf));
                tw_tcp_conn_close(ep->conn);
            }
            if (ep->pending != NULL) {
                tw_tcp_conn_close(ep->pending);
            }
            while (ep->head != NULL) {
                tw_tcp_frame_out_t *f = ep->head;
                ep->head = f->next;
                tw_tcp_frame_done(f, TW_ERR_CANCELED);
            }
        }
        tw_free(tcp->eps, (size_t)iface->size * sizeof(*tcp->eps));
    }
    while (tcp->handshaking != NULL) {
        tw_tcp_conn_t *c = tcp->handshaking;
        c->peer = -1;
        tw_tcp_conn_close(c);
    }
    if (tcp->down != NULL) {
        tw_free(tcp->down, (size_t)iface->size * sizeof(*tcp->down));
    }
    if (tcp->ev_accept != NULL) {
        event_free(tcp->ev_accept);
    }
    if (tcp->listen_fd >= 0) {
        tw_pe_unwatch(iface->pe, tcp->listen_fd);
        close(tcp->listen_fd);
    }
    if (tcp->base != NULL) {
        event_base_free(tcp->base);
    }
    tw_tl_iface_cleanup(iface);
    tw_free(tcp, sizeof(*tcp));
}

uint16_t tw_tcp_test_peer_port(tw_tl_iface_t *iface, int peer)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    if (peer < 0 || peer >= iface->size || !tcp->eps[peer].have_addr) {
        return 0;
    }
    return ntohs(tcp->eps[peer].addr.sin_port);
}
