/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Internals of the TCP transport: the types every tw_tcp_*.c shares and
 * the functions they call across files (README.md maps the files).
 *
 * Who may touch what. A lane is run by exactly one thread at a time: its
 * engine (the progress pass, the commands submitted to it), or a worker
 * that holds the engine's try-lock (tw_pe_try_call: a direct send,
 * tw_progress / tw_cq_wait polling). "Engine or try-lock holder" below
 * means that thread, for the lane that owns the object: a connection's
 * lane, a peer's lane (peer p: lane p % nlanes), a handle's lane. Such a
 * field needs no lock and no atomic. What other threads read says so.
 */
#ifndef TW_TCP_INT_H
#define TW_TCP_INT_H

#include <event2/event.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/tw_config.h"
#include "transports/base/tw_tl.h"
#include "transports/tcp/tw_tcp_proto.h"

#define TW_TCP_MAX_SHORT (64u * 1024u)
_Static_assert(TW_TCP_MAX_SHORT >= TW_TL_SHORT_MIN, "tcp's am_short holds TW_TL_SHORT_MIN");
#define TW_TCP_MAX_HDR    TW_TL_HDR_MAX
#define TW_TCP_MAX_LEN    (1ull << 30)
#define TW_TCP_HS_TIMEOUT (2ull * 1000 * 1000 * 1000)

/* The states of a connection (tw_tcp_cm.c). A connection that fails or
 * loses is closed and freed, so none is ever "closed" or "failed": the
 * peer's failure is tw_tcp_ep_t.failed. */
enum {
    TW_TCP_CONNECT_ACK = 1, /* connecting; HELLO queued, waiting for WELCOME */
    TW_TCP_ACCEPTED,        /* waiting for HELLO */
    TW_TCP_WELCOMED,        /* WELCOME sent, waiting for PROVE */
    TW_TCP_CONNECTED
};

/* TW_TCP_* (tw_tcp_cfg_table). Set at open, read-only after. */
typedef struct tw_tcp_cfg {
    char ifs[TW_CFG_STRLEN];
    char af[TW_CFG_STRLEN];
    uint64_t timeout_ns;
    int threads;
    size_t rndv_thresh;             /* am_zcopy payloads from this size on: RTS */
    char congestion[TW_CFG_STRLEN]; /* TCP_CONGESTION of every connection; "": the host's */
    size_t notsent_lowat;           /* TCP_NOTSENT_LOWAT of every connection; 0: the host's */
    int poll_max;                   /* a lane with at most this many peers waits with poll(2) */
    int direct_recv;                /* a polling thread reads up to this many with recv(2) alone */
} tw_tcp_cfg_t;

typedef struct tw_tcp_rsend tw_tcp_rsend_t;

/* One frame waiting to be written. Header bytes follow the struct; the
 * payload follows them (short) or is the caller's (zcopy). Owned by its
 * maker until queued (tw_tcp_enqueue, or submitted to the engine), then by
 * the engine or try-lock holder of its peer's lane. */
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
    /* A rendezvous send's RTS (rs_data false) or DATA (true), else NULL. */
    tw_tcp_rsend_t *rs;
    bool rs_data;
    unsigned char bytes[];
} tw_tcp_frame_out_t;

/* A large am_zcopy announced by RTS (tw_tcp_tx.c): the payload stays in
 * the caller's buffer until the receiver asks for it (CTS) and says it
 * landed (DONE). Made by the sender; from the enqueue of its RTS on, on
 * its peer's list (ep->rs_head), owned by the engine or try-lock holder
 * of the peer's lane, which completes it exactly once: DONE (TW_OK), a
 * CTS of length 0 (TW_OK: released), or the peer's failure / the iface's
 * close (tw_tcp_ep_close: TW_ERR_PEER_FAILED / TW_ERR_CANCELED). */
struct tw_tcp_rsend {
    tw_tcp_rsend_t *next;
    uint64_t cookie; /* set when its RTS is queued */
    const void *data;
    size_t len;
    tw_tl_comp_t *comp;
    _Atomic(unsigned) *live; /* the iface's count of them (tw_tcp_iface_t.rsends) */
    bool asked;              /* a CTS came: its DATA is queued or written */
    bool data_sent;          /* the whole DATA frame is written */
};

typedef struct tw_tcp_iface tw_tcp_iface_t;
typedef struct tw_tcp_lane tw_tcp_lane_t;

typedef struct tw_tcp_addr {
    struct sockaddr_storage ss;
    socklen_t len;
} tw_tcp_addr_t;

/* A payload announced with recv_rndv: its bytes follow in the stream (an
 * AM frame of an inline id), or wait at the sender (an RTS: @p rts).
 * Engine or try-lock holder of @p lane, except where a field says. */
struct tw_tl_rndv {
    tw_tcp_lane_t *lane;            /* set when announced, read-only after */
    struct tw_tl_rndv *prev, *next; /* the lane's live handles (close frees them) */
    int peer;                       /* set when announced, read-only after */
    bool rts;                       /* set when announced, read-only after */
    bool engine_only;               /* not an inline id: its completion runs user code */
    uint64_t cookie;                /* rts: the sender's */
    struct tw_tl_rndv *next_pull;   /* rts: CTS sent, on ep->pull_head until DATA */
    struct tw_tcp_frame_out *cts;   /* rts: its CTS, made with it (sending it never fails) */
    size_t len;                     /* announced (rts: the DATA's length once asked) */
    size_t got;                     /* arrived so far */
    unsigned char *buf;             /* staged here while nobody asked for it */
    void *dst;                      /* then here, once rndv_get came */
    size_t dst_len;
    tw_tl_comp_t *comp;
    bool have_get, done, failed;
    tw_tl_rndv_pull_t pull; /* rndv_get from another thread: handed to the lane */
};

/* One socket. Every field: engine or try-lock holder of @p lane. */
typedef struct tw_tcp_conn {
    tw_tcp_lane_t *lane;
    int fd;
    int state; /* TW_TCP_CONNECT_ACK ... TW_TCP_CONNECTED */
    int peer;  /* -1 until HELLO names it (accepted side) */
    bool initiator;
    int addr_index;         /* initiator: which of the peer's addresses */
    uint8_t nonce[16];      /* ours */
    uint8_t peer_nonce[16]; /* theirs */
    uint8_t hs_out[TW_TCP_HS_LEN];
    uint8_t hs_off, hs_len; /* handshake bytes still to write */
    uint64_t hs_deadline;
    /* Last read: the coarse clock (liveness counts seconds). Last write:
     * tw_time_ns (TW_TCP_BURST counts microseconds). */
    uint64_t last_rx, last_tx;
    bool want_out; /* waiting for room in the socket (EV_WRITE, engine epoll) */
    /* The peer closed: the errno (EPIPE, ECONNRESET) of the write that
     * found it, 0 before. No more writes; the read side, which may still
     * hold its FIN, decides -- and reports this error where it finds an
     * end without FIN (the write took the socket's error). */
    int wr_err;
    struct event *ev_read, *ev_write;
    unsigned char *in; /* receive buffer */
    size_t in_len, in_cap;
    tw_tl_rndv_t *rx;         /* the payload the stream is in, or NULL */
    const char *bad;          /* why the stream is bad (static text), for the log line */
    struct tw_tcp_conn *next; /* the lane's handshaking or (CONNECTED) live connections */
} tw_tcp_conn_t;

/* A peer (rank p), owned by lane p % nlanes: engine or try-lock holder of
 * that lane, except the fields written by addr_connect. */
typedef struct tw_tcp_ep {
    tw_tcp_conn_t *conn;      /* CONNECTED, or NULL */
    tw_tcp_conn_t *pending;   /* our connect, handshake in progress */
    tw_tcp_conn_t *accepting; /* the peer's connect, handshake in progress */
    tw_tcp_frame_out_t *head, *tail;
    unsigned queued;
    tw_tcp_rsend_t *rs_head, *rs_tail;   /* our rendezvous sends announced to it */
    uint64_t rs_cookie;                  /* the last cookie given on this connection */
    tw_tl_rndv_t *pull_head, *pull_tail; /* its sends we asked for (CTS), in order */
    bool dirty;                          /* on the lane's dirty list */
    struct tw_tcp_ep *next_dirty;
    /* addrs .. hs_ns: written by addr_connect (init, before ready), read-only
     * after (reachable reads naddrs from any thread). */
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

/* A libevent base with its listeners, timer and connections. */
struct tw_tcp_lane {
    tw_tcp_iface_t *tcp;     /* set at open, read-only after */
    int index;               /* set at open, read-only after */
    tw_pe_t *pe;             /* drives the lane; set at open, read-only till close */
    bool own_pe;             /* ours (lane > 0); set at open, read-only after */
    struct event_base *base; /* set at open; run by engine or try-lock holder */
    tw_tcp_listener_t lis[TW_TCP_MAX_ADDRS]; /* set at open, read-only after */
    uint16_t ports[TW_TCP_MAX_ADDRS];        /* set at open, read-only after */
    int timer_fd;                            /* set at open, read-only after */
    struct event *ev_timer;                  /* set at open, read-only after */
    uint64_t last_tick;                      /* engine or try-lock holder */
    tw_tcp_conn_t *handshaking;              /* engine or try-lock holder */
    tw_tcp_conn_t *live;                     /* CONNECTED ones; engine or try-lock holder */
    unsigned nlive;                          /* engine or try-lock holder */
    unsigned direct_turns; /* passes that could read directly (tw_tcp_lane_direct); idem */
    tw_tcp_ep_t *dirty;    /* engine or try-lock holder */
    unsigned nwant_out; /* conns waiting for room (the engine's epoll); engine or try-lock holder */
    unsigned nconns;    /* open connections (any state); engine or try-lock holder */
    uint64_t last_loop; /* the event loop's last run (coarse); engine or try-lock holder */
    /* Callbacks that did work in this pass (progress returns it); engine
     * or try-lock holder. */
    int events;
    /* True while a worker holding the engine's try-lock runs the lane
     * (direct send, tw_progress / tw_cq_wait polling): it delivers frames
     * of inline ids only, and leaves user AM handlers and peer_down to
     * the engine. Set and cleared by that worker; the engine sees false. */
    bool in_worker;
    /* > 0 while the lane runs code that calls out of it (its progress
     * pass, a direct send, a rendezvous pull): a send that its owner
     * posts from there is queued, never written in the middle of a
     * flush or a parse. Engine or try-lock holder. */
    unsigned busy;
    unsigned nreparse; /* eps with reparse set; engine or try-lock holder */
    /* Eps with a peer_down to report: added by a try-lock holder (a
     * worker), reported by the engine. */
    tw_tcp_ep_t *downs;
    tw_tl_rndv_t handles; /* list head of live rendezvous handles; engine or try-lock holder */
    /* Frames submitted to the engine and not yet queued: any thread,
     * atomic relaxed (a direct send goes only while it is 0). */
    _Atomic(unsigned) cmds;
    tw_tcp_frame_out_t *pool; /* free small frames; engine or try-lock holder */
    unsigned npool;           /* engine or try-lock holder */
};

struct tw_tcp_iface {
    tw_tl_iface_t super;
    tw_tcp_cfg_t cfg;     /* set at open, read-only after */
    uint8_t key[16];      /* set at open, read-only after */
    bool threads;         /* we run progress threads (published); set at open, cleared
                           * by ready (before tw_init returns), read-only after */
    bool closing;         /* set by iface_close once the lane threads stopped */
    int nlanes;           /* set at open, read-only after */
    tw_tcp_lane_t *lanes; /* [nlanes]; set at open, read-only after */
    int naddrs;           /* set at open, read-only after */
    tw_tcp_addr_t addrs[TW_TCP_MAX_ADDRS]; /* where we listen (port 0); set at open */
    uint64_t tick_ns;                      /* set at open, read-only after */
    tw_tcp_ep_t *eps;                      /* [size]; eps[p] is owned by lane p % nlanes */
    _Atomic(uint8_t) *down;                /* [size]: failed or left; written by the peer's lane
                                            * (release), read by any thread (acquire) */
    _Atomic(unsigned) rsends;              /* rendezvous sends not complete; any thread */
};

static inline tw_tcp_lane_t *tw_tcp_lane_of(tw_tcp_iface_t *tcp, int peer)
{
    return &tcp->lanes[peer % tcp->nlanes];
}

/* ---- tw_tcp_cm.c: connections ---- */

void tw_tcp_connect(tw_tcp_lane_t *lane, int peer, int addr_index);
void tw_tcp_conn_close(tw_tcp_conn_t *c);
void tw_tcp_conn_broken(tw_tcp_conn_t *c, int err);
bool tw_tcp_hs_write(tw_tcp_conn_t *c);
bool tw_tcp_conn_handshake(tw_tcp_conn_t *c);
void tw_tcp_want_out(tw_tcp_conn_t *c, bool on);
void tw_tcp_on_accept(evutil_socket_t fd, short what, void *arg);
tw_status_t tw_tcp_check_congestion(const char *name);

/* ---- tw_tcp_rx.c: receiving ---- */

bool tw_tcp_read(tw_tcp_conn_t *c);
bool tw_tcp_parse_frames(tw_tcp_conn_t *c);
void tw_tcp_on_read(evutil_socket_t fd, short what, void *arg);
void tw_tcp_rndv_abort(tw_tcp_conn_t *c);
void tw_tcp_rndv_free(tw_tl_rndv_t *h);
void tw_tcp_pulls_fail(tw_tcp_ep_t *ep, tw_status_t st);
void tw_tcp_fail_bad(tw_tcp_conn_t *c);
tw_status_t tw_tcp_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                            tw_tl_comp_t *comp);

/* ---- tw_tcp_tx.c: sending ---- */

void tw_tcp_frame_done(tw_tcp_lane_t *lane, tw_tcp_frame_out_t *f, tw_status_t st);
void tw_tcp_flush(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep);
void tw_tcp_mark_dirty(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep);
void tw_tcp_enqueue_ctl(tw_tcp_lane_t *lane, int peer, uint8_t type);
tw_tcp_frame_out_t *tw_tcp_rndv_ctl_get(tw_tcp_lane_t *lane);
bool tw_tcp_queue_rndv_ctl(tw_tcp_lane_t *lane, int peer, tw_tcp_frame_out_t *f, uint8_t type,
                           uint64_t cookie, uint64_t len);
bool tw_tcp_on_cts(tw_tcp_conn_t *c, uint64_t cookie, uint64_t len);
bool tw_tcp_on_done(tw_tcp_conn_t *c, uint64_t cookie);
void tw_tcp_rsends_fail(tw_tcp_ep_t *ep, tw_status_t st);
void tw_tcp_on_write(evutil_socket_t fd, short what, void *arg);
tw_status_t tw_tcp_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len);
tw_status_t tw_tcp_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);

/* Write every dirty queue of @p lane (twice per progress pass: inline,
 * so a pass with nothing to write costs a load, not a call). */
static inline void tw_tcp_flush_dirty(tw_tcp_lane_t *lane)
{
    while (lane->dirty != NULL) {
        tw_tcp_ep_t *ep = lane->dirty;
        lane->dirty = ep->next_dirty;
        ep->dirty = false;
        tw_tcp_flush(lane, ep);
    }
}

/* ---- tw_tcp_lane.c: lanes, liveness, failure ---- */

void tw_tcp_fail_peer(tw_tcp_lane_t *lane, int peer, tw_status_t why, const char *what);
void tw_tcp_ep_close(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep, tw_status_t st);
int tw_tcp_lane_progress(void *arg);
int tw_tcp_poll(tw_tl_iface_t *iface);
int tw_tcp_progress(tw_tl_iface_t *iface);
bool tw_tcp_queued(const tw_tcp_iface_t *tcp);
tw_status_t tw_tcp_lane_open(tw_tcp_iface_t *tcp, int k, const tw_tl_params_t *params);
void tw_tcp_lane_close(tw_tcp_lane_t *lane);

/* ---- tw_tcp_net.c: addresses ---- */

const char *tw_tcp_addr_str(const tw_tcp_addr_t *a, char *buf, size_t len);
tw_status_t tw_tcp_pick_addrs(tw_tcp_iface_t *tcp, const tw_tl_params_t *params);
tw_status_t tw_tcp_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p);
tw_status_t tw_tcp_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len);

#endif /* TW_TCP_INT_H */
