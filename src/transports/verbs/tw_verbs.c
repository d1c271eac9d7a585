/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The InfiniBand verbs transport (libibverbs: InfiniBand, RoCE, Soft-RoCE).
 *
 * Devices. query lists the RDMA devices (ibv_get_device_list), filtered by
 * TW_VERBS_DEVICES (name or name:port); none is "unavailable" with the reason,
 * and nothing else is affected (the transport is opt-in for now). iface_open
 * opens each listed device's first active port (or the named one). Per device:
 * a PD; one registered pool of 9 KiB buffers -- TW_VERBS_RX_DEPTH for the SRQ,
 * 256 for sends that do not fit inline, and a few small ones for the UD QP;
 * one SRQ shared by every RC QP of the device; one CQ with a completion
 * channel; one UD QP for connection setup and liveness. Ranks a and b talk
 * through device (a + b) mod the smaller of their device counts, the same
 * index on both sides (devices of one index form a rail; pairs spread over the
 * rails). Port attributes come from ibv_query_port: active_mtu is the path MTU
 * (the smaller of both sides'); on an Ethernet port (RoCE) we address with a
 * GRH (is_global = 1, sgid_index), choosing the first IPv4-mapped RoCE v2 GID
 * among indexes 0-15 (TW_VERBS_GID_INDEX overrides); on an InfiniBand port by
 * LID (with a GRH only if the peer's GID prefix differs).
 *
 * Threads. Each device has a progress engine of its own, made like the
 * context's (params->pe_params; a thread when the context has them, else
 * driven from tw_progress through the context's engine). That engine owns the
 * device: its QPs, SRQ and CQ are touched by its owner only, so no lock is
 * needed, and where the provider has them the QPs live in a thread domain
 * (ibv_alloc_td + ibv_alloc_parent_domain) and the CQ is created
 * single-threaded (ibv_create_cq_ex, IBV_CREATE_CQ_ATTR_SINGLE_THREADED): the
 * provider drops its own locks. A provider without them gets a plain PD or CQ,
 * logged at debug level (rxe has single-threaded CQs but no thread domains).
 * The engine polls while there is work and then sleeps in epoll on the
 * completion channel's fd (armed with ibv_req_notify_cq, and the CQ is polled
 * again after arming, so nothing slips between) and on a timerfd that ticks
 * every 10 ms while connections are being set up and every TW_VERBS_TIMEOUT /
 * 8 (at most 250 ms) for liveness. Worker threads never touch the device:
 * am_short / am_zcopy / put / get / flush build an operation and hand it to
 * the device's engine through its submission ring (tw_tl_submit); a full ring
 * is TW_ERR_AGAIN. Callbacks (arrivals, completions, peer_down) run on the
 * device's engine. rndv_get from another thread is handed to it with a command
 * (as tcp's lanes do).
 *
 * One CQ, not a high/low pair: openib split them so that control messages were
 * not stuck behind bulk completions in one polling thread. Here a device's
 * engine drains the whole CQ every pass (in batches of 32) and nothing else
 * competes for it, so a second CQ would only add a poll; connection messages,
 * FINs and data completions are handled in CQ order, which also keeps a QP's
 * completions in order.
 *
 * Connections are made lazily, on the first operation for a peer, with an RC
 * QP per peer; the bootstrap blob (addr_pack) carries each device's GID, LID,
 * port, link layer, MTU and UD QP number, and whether the rank runs progress
 * threads. The RC QP numbers go over UD (like openib's udcm), signed with the
 * job key (SipHash; the UD Q_Key is also derived from the key, so other jobs'
 * traffic is not accepted):
 *   REQ (my QPN, PSN)  -> the peer creates its QP if it has none, moves it
 *                         to RTR/RTS toward mine, answers
 *   REP (its QPN, PSN) -> I move mine to RTR/RTS: both can now receive, I
 *                         send, and answer
 *   RTU                -> the peer sends too (so does its first arrival
 *                         on the RC QP, should the RTU be lost).
 *
 * A side has at most one QP per peer and every message names it, so a
 * simultaneous connect needs no tie-break: each side connects its one QP to
 * the QPN the other announced (a REQ that crosses ours is answered like any
 * REQ). UD is unreliable: a side that is not yet allowed to send repeats its
 * REQ (or, having answered one, its REP) after 20 ms, doubling to 1 s;
 * duplicates are answered again, idempotently. A peer that does not answer
 * within TW_VERBS_TIMEOUT has failed. Operations for a peer that is not
 * connected yet wait in its queue. Every message also carries the
 * generation of the sender's endpoint for the receiver (see Fail-back).
 *
 * Wire (tw_verbs_proto.h): RC sends carry frames with a 16-byte header. AM is
 * an eager copy (header + payload <= 9 KiB - 16): inline when it fits the QP's
 * max_inline_data, else copied into a registered send buffer. Small-message
 * coalescing: AMs and FINs that wait in a connection's queue behind the frame
 * being sent go into the same send buffer, back to back (up to 9 KiB and 64
 * frames): one work request, one credit, one completion for all; the receiver
 * walks the frames. Nothing waits to be coalesced -- only what is queued
 * anyway (all credits in flight, or the connection not up yet) -- so a lone
 * message goes at once. A larger am_zcopy is a rendezvous: RTS names the
 * sender's buffer (registered for remote read for the occasion, or found in
 * the registration cache) and a send id; the receiver's rndv_get reads it with
 * RDMA READ (1 GiB, or the port's max_msg_sz, per work request) straight into
 * the destination, then sends FIN, and the sender's operation completes.
 * put/get are RDMA WRITE/READ with a key from tw_verbs_mem_reg; flush
 * completes once every work request posted to the peer before it completed (RC
 * completes in order, and a write's completion means the peer's HCA
 * acknowledged it).
 *
 * Credits. Send side: each QP may have TW_VERBS_SQ_DEPTH work requests in
 * flight, every one signaled; operations beyond wait in the peer's queue (in
 * order) and go as completions return credits (or send buffers: a queue that
 * waits for one is drained again when any comes back). RDMA reads use the same
 * credits (the device limits reads in flight by max_rd_atomic itself). Receive
 * side: one SRQ for all peers, kept full -- used buffers are re-posted in
 * batches once a quarter of it is used -- and RC QPs retry a
 * receiver-not-ready forever (rnr_retry 7), so a burst that finds the SRQ
 * empty is delayed, never lost. Back-pressure to callers: a full submission
 * ring, or more than 64 Ki operations waiting in queues, is TW_ERR_AGAIN;
 * nothing is refused once accepted.
 *
 * Errors. Every work request is signaled, so every one gets exactly one
 * completion, including IBV_WC_WR_FLUSH_ERR after its QP went to error; the
 * credit counters check it, and close waits for the flushes before it destroys
 * a QP. A completion with an error status (retry exceeded, remote access,
 * flush, ...) fails the peer: its QP is moved to error (so whatever is still
 * posted flushes), queued operations and rendezvous in either direction
 * complete TW_ERR_PEER_FAILED, peer_down runs, and the peer is told with a
 * DOWN message over UD (best effort) so it fails us too rather than wait for
 * its own retries. That is for good (peer_down TW_ERR_PEER_FAILED) for
 * errors the peer answered with (remote access, invalid request, ...) or of
 * our own memory, unless our port is down when the error is seen
 * (ibv_query_port says so, or PORT_ERR came). Errors of the path -- retries
 * exceeded (the peer's port may be down), a local QP operation error (what
 * rxe reports when the route under its port went away, before the port
 * shows down), a flush as the first sign -- are for now: the peer is down
 * for now as under Fail-back, is told with RESET instead of DOWN, and the
 * connection made again decides (a dead peer does not answer it, and fails
 * for good then). A bad frame, or a FIN for no rendezvous of ours, fails the
 * peer the same way. A peer that dies with work requests of ours in flight is
 * noticed by the QP's retries (7 tries of 268 ms); one we only wait for (a
 * receive, a rendezvous it never pulled) by liveness: a connected peer silent
 * for a quarter of TW_VERBS_TIMEOUT is PINGed over UD and its engine answers
 * PONG; a peer that runs progress threads and stays silent for the whole
 * timeout has failed (a rank in manual mode is not judged by silence, as over
 * tcp). A clean close sends BYE: the peer reports peer_down(TW_OK).
 * tw_verbs_dev_fatal() / tw_verbs_port_down() / tw_verbs_port_up() /
 * tw_verbs_qp_fatal() are where the async event thread (device fatal, port
 * down and up, QP fatal; tw_verbs_async.c, not this file's job) fails or
 * restores what depended on a device or a QP, handed over with
 * tw_verbs_dev_report();
 * tw_verbs_force_qp_error() is the test hook that moves a QP to error.
 * Device-wide faults (DEVICE_FATAL, CQ_ERR, SRQ_ERR) come through a flag
 * the engine reads on every pass (tw_verbs_dev_lost), which a full
 * submission lane cannot lose. When the CQ is gone (CQ_ERR, DEVICE_FATAL)
 * nothing flushes: every work request still posted -- each endpoint keeps
 * the list -- completes by hand, as a flush would have, and the CQ is not
 * polled again. The CQ is sized for every completion the device can owe
 * at once (receives, UD, each peer's send credits); where the device's
 * max_cqe is smaller, the per-peer send credits shrink to fit.
 *
 * Fail-back. A port that goes down (IBV_EVENT_PORT_ERR, or a work request
 * failing while ibv_query_port says it is down) takes its device's peers
 * down for now, not for good, as a path error of one QP does its peer:
 * their operations complete TW_ERR_PEER_FAILED as above, peer_down runs
 * with TW_ERR_TRANSPORT (rel fails over and probes the path; without rel
 * the runtime counts it a failure), nobody is told while the port is down,
 * and sends to them fail at once with TW_ERR_TRANSPORT instead of queueing
 * (am_short and friends read the port state and vb->down). Once the old QP
 * flushed (sq.done == sq.posted) the endpoint is reset to "not connected":
 * QP and address handle destroyed, the QP number forgotten, our generation
 * for that peer + 1. IBV_EVENT_PORT_ACTIVE, handed to the device's engine
 * like the other events, makes the port usable again once our GID is back
 * (ibv_query_gid_ex; one that came back at another index is used there; an
 * InfiniBand port that came back with another LID stays down: peers know
 * the old one) and the UD QP is in RTS (rxe moves it to error when a
 * datagram is posted while the netdev is down: it is brought back through
 * RESET, and an epoch in the UD work request ids tells completions from
 * before apart). The next send to a reset peer -- a rel probe -- connects
 * again: REQ / REP / RTU as above.
 *
 * Generations tell the old connection's messages from the new one's. Each
 * endpoint has one (gen, from 1, + 1 at each reset) and every connection
 * message carries the sender's (gen) and the receiver's as the sender knows
 * it (echo: our rgen, 0 if none). We remember the peer's generation of the
 * connection we are in (rgen, set when our QP connects to its QPN) and,
 * after a reset, hear only newer ones (rgen_min = rgen + 1): a REQ, REP,
 * RESET or DOWN delayed from before the reset is stale and dropped. A REP,
 * RTU, PING or PONG must echo our current generation, a DOWN or RESET ours
 * or 0 (a peer that never connected): one meant for an endpoint of ours
 * from before a reset (a REP answering an older REQ) is stale too. A peer
 * that hears from a newer generation of ours while connected to an older
 * one knows we lost the connection (our port went down, its did not): it
 * fails us for now too, resets once flushed, and answers our REQ, which we
 * repeat meanwhile, from a new endpoint of its own -- newer than the one
 * we knew, as ours requires. RESET (sent when we fail a peer for now while
 * our port is up) has it do so at once rather than when its own retries
 * run out. A peer failed for good ignores all of it, as before (it learns
 * by its own retries); so does one whose port is not up. A DOWN of the
 * current generation turns "for now" into "for good": no reset, sends fail
 * with TW_ERR_PEER_FAILED, peer_down does not run twice for one failure.
 * Rendezvous handles remember their connection's generation: one announced
 * before a reset is refused (TW_ERR_PEER_FAILED) and sends no FIN on the
 * new connection. A connection made again that gets no answer within
 * TW_VERBS_TIMEOUT fails for good. DEVICE_FATAL, SRQ_ERR and CQ_ERR still
 * fail the device's peers for good (nothing comes back on a dead device),
 * and so do QP fatal events while the port is up.
 *
 * Left out: a direct post from workers when the engine is idle (tcp's try-lock
 * path: every operation takes one hop through the submission ring), XRC/DC,
 * ODP, more than one port per device, worker polling (ops->poll). Death of a
 * manual-mode peer that we only wait for is noticed only when something we
 * post to it runs out of retries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_siphash.h"
#include "core/tw_time.h"
#include "transports/base/tw_tl.h"
#include "transports/verbs/tw_verbs.h"
#include "transports/verbs/tw_verbs_async.h"
#include "transports/verbs/tw_verbs_proto.h"
#include "transports/verbs/tw_verbs_rcache.h"

#define TW_VERBS_SEG         9216u /* receive / send buffer */
#define TW_VERBS_MAX_HDR     (TW_AM_HDR_MAX + 256u)
#define TW_VERBS_MAX_MSG     (1ull << 40)
#define TW_VERBS_TX_BUFS     256u
#define TW_VERBS_UD_RX       64u
#define TW_VERBS_UD_TX       32u
#define TW_VERBS_UD_BUF      128u /* GRH (40) + a connection message */
#define TW_VERBS_GRH         40u
#define TW_VERBS_CQ_BATCH    32
#define TW_VERBS_READ_CHUNK  (1ull << 30)
#define TW_VERBS_MAX_QUEUED  65536u
#define TW_VERBS_INLINE_WANT 128u
#define TW_VERBS_RTX_FIRST   (20ull * 1000 * 1000)
#define TW_VERBS_RTX_MAX     (1000ull * 1000 * 1000)
#define TW_VERBS_TICK_NS     (10ull * 1000 * 1000)
#define TW_VERBS_CLOSE_NS    (2ull * 1000 * 1000 * 1000)
#define TW_VERBS_GID_SCAN    16

/* wr_id tags: send operations are op pointers (8-aligned, tag 0). UD
 * work requests also carry the UD QP's epoch above their buffer index
 * (8 bits), so completions from before a recovery of the UD QP are told
 * apart (tw_verbs_ud_recover). */
enum { TW_VERBS_WR_OP = 0, TW_VERBS_WR_RECV = 1, TW_VERBS_WR_UD_RECV = 2, TW_VERBS_WR_UD_SEND = 3 };
#define TW_VERBS_WR(idx, tag)       (((uint64_t)(idx) << 2) | (tag))
#define TW_VERBS_WR_UD(dev, idx, t) TW_VERBS_WR((uint64_t)(dev)->ud_epoch << 8 | (idx), t)

enum {
    TW_VERBS_OP_AM,    /* eager frame (am_short, small am_zcopy) */
    TW_VERBS_OP_RTS,   /* rendezvous announce (large am_zcopy) */
    TW_VERBS_OP_FIN,   /* receiver -> sender: rendezvous done */
    TW_VERBS_OP_BYE,   /* clean close */
    TW_VERBS_OP_PUT,   /* RDMA WRITE */
    TW_VERBS_OP_GET,   /* RDMA READ (get_zcopy) */
    TW_VERBS_OP_READ,  /* RDMA READ of a rendezvous chunk */
    TW_VERBS_OP_FLUSH, /* completes when what was posted before did */
    TW_VERBS_OP_QPERR  /* test hook: move the QP to error */
};

/* The device's port, as the engine knows it (workers read it to fail
 * sends fast while it is down). */
enum {
    TW_VERBS_PORT_UP,   /* usable */
    TW_VERBS_PORT_DOWN, /* PORT_ERR: peers down for now, nothing connects */
    TW_VERBS_PORT_WAIT  /* PORT_ACTIVE, but our address is not back yet */
};

/* vb->down[peer] */
enum { TW_VERBS_DOWN_NO, TW_VERBS_DOWN_GONE, TW_VERBS_DOWN_FOR_NOW };

enum {
    TW_VERBS_EP_IDLE,      /* no QP */
    TW_VERBS_EP_INIT,      /* QP in INIT; REQ sent, remote unknown */
    TW_VERBS_EP_CONNECTED, /* RTR/RTS toward the remote QP */
};

typedef struct tw_verbs_iface tw_verbs_iface_t;

/* An operation, from the caller to the device's engine. Frame ops carry
 * the AM header (and an eager payload) in bytes[]. */
typedef struct tw_verbs_op {
    struct tw_verbs_op *next;
    struct tw_verbs_op *batch;         /* frames coalesced into this one's send */
    struct tw_verbs_op *pprev, *pnext; /* its endpoint's posted list */
    size_t alloc_len;
    uint8_t kind;
    uint8_t am_id;
    uint16_t hdr_len;
    int peer;
    tw_tl_comp_t *comp;
    const void *data; /* RTS source, PUT source */
    void *dst;        /* GET / READ destination */
    size_t len;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t sbuf;             /* send buffer in use, or UINT32_MAX */
    struct ibv_mr *mr;         /* a registration for this operation */
    tw_verbs_region_t *region; /* or a cached one (referenced) */
    struct tw_tl_rndv *rndv;   /* READ: its handle; FIN: none */
    uint64_t sid;              /* RTS / FIN */
    int32_t status;            /* FIN */
    uint64_t target;           /* FLUSH: sq.posted when it was reached */
    size_t inl_len;            /* bytes in bytes[] */
    unsigned char bytes[];
} tw_verbs_op_t;

/* A rendezvous send waiting for FIN. Engine owned. */
typedef struct tw_verbs_rsend {
    tw_tl_comp_t *comp; /* NULL: free */
    struct ibv_mr *mr;
    tw_verbs_region_t *region;
    int peer;
    uint32_t gen;
    uint32_t next_free;
} tw_verbs_rsend_t;

/* The receiver's handle of an announced message. */
struct tw_tl_rndv {
    tw_verbs_dev_t *dev;
    struct tw_tl_rndv *prev, *next; /* the device's live handles */
    int peer;
    uint64_t raddr;
    uint32_t rkey;
    uint64_t len;
    uint64_t sid;
    /* once rndv_get came */
    tw_tl_comp_t *comp;
    struct ibv_mr *mr;
    tw_verbs_region_t *region;
    unsigned reads_left;
    tw_status_t st;
    uint32_t gen; /* the connection it came on (ep->gen then) */
    /* rndv_get from another thread: its arguments */
    void *get_dst;
    size_t get_len;
    tw_tl_comp_t *get_comp;
};

typedef struct tw_verbs_ep {
    tw_verbs_dev_t *dev;
    int peer;
    int state;
    bool ready;     /* we may send: the peer's QP is connected to ours */
    bool failed;    /* down (failed or left) */
    bool transient; /* failed for now (TW_ERR_TRANSPORT): reset once flushed */
    bool stuck;     /* ... and its QP did not flush in time (logged once) */
    bool left;      /* BYE received */
    bool on_conn;
    bool judge;       /* it runs progress threads: silence means failure */
    uint64_t ping_ns; /* our last PING */
    uint64_t last_ns; /* something arrived from it, or a send was acked */
    struct ibv_qp *qp;
    struct ibv_ah *ah; /* to the peer's UD QP */
    struct ibv_ah_attr ah_attr;
    uint32_t rud_qpn;
    uint8_t rdev; /* the peer's device index for us */
    enum ibv_mtu mtu;
    uint32_t psn, rqpn, rpsn;
    tw_verbs_credits_t sq;
    tw_verbs_op_t *head, *tail; /* waiting to be posted */
    tw_verbs_op_t *flushes;     /* FLUSH ops waiting for sq.done >= target */
    tw_verbs_op_t *posted;      /* in the send queue, not completed yet */
    uint64_t deadline_ns, next_tx_ns, rtx_ns;
    uint64_t fail_ns; /* when it failed for now */
    /* Generations (Fail-back, in the essay): ours for this peer (>= 1,
     * +1 at each reset), the peer's of the connection we are in (0: none
     * yet), and the oldest of the peer's we still listen to. */
    uint32_t gen, rgen, rgen_min;
    struct tw_verbs_ep *next_conn;
} tw_verbs_ep_t;

struct tw_verbs_dev {
    tw_verbs_iface_t *vb;
    bool watched; /* by the async event thread */
    int index;
    char name[64];
    uint8_t port;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_td *td;
    struct ibv_pd *qp_pd; /* the parent domain, or pd */
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    struct ibv_cq_ex *cqx; /* when made with ibv_create_cq_ex */
    struct ibv_srq *srq;
    struct ibv_qp *ud;
    uint32_t ud_epoch; /* +1 at each recovery of the UD QP */
    bool armed;
    /* port */
    _Atomic(uint8_t) port_state; /* TW_VERBS_PORT_*: the engine writes, workers read */
    uint64_t port_check_ns;      /* TW_VERBS_PORT_WAIT: next look at the port */
    unsigned nresets;            /* peers failed for now, not reset yet */
    bool fatal;                  /* the device failed: nothing comes back */
    bool cq_lost;                /* ... nor from its CQ: never polled again */
    /* A device-wide fault from the async event thread (TW_VERBS_LOST_*),
     * looked at on every pass: it cannot be lost to a full lane. */
    atomic_int lost_kind;
    _Atomic(const char *) lost_what;
    enum ibv_mtu mtu;
    uint16_t lid;
    uint8_t link;
    int gid_index;
    int gid_type; /* enum ibv_gid_type of the GID chosen, or -1: unknown */
    union ibv_gid gid;
    uint32_t max_inline;
    uint32_t sq_depth;
    uint32_t rd_atomic;
    uint64_t max_msg;
    /* buffers: [rx_depth receive][TX_BUFS send] x SEG, then UD rx + tx */
    unsigned char *pool;
    size_t pool_len;
    struct ibv_mr *pool_mr;
    unsigned rx_depth;
    unsigned rx_posted;
    uint32_t *rx_free; /* buffers to re-post */
    unsigned nrx_free;
    uint32_t *tx_free;
    unsigned ntx_free;
    bool tx_starved; /* a queue waits for a send buffer, not a credit */
    unsigned char *ud_pool;
    uint32_t ud_tx_free[TW_VERBS_UD_TX];
    unsigned nud_tx_free;
    /* engine */
    tw_pe_t *pe;
    int timer_fd;
    uint64_t timer_ns; /* the timerfd's period now, 0 = off */
    unsigned nready;   /* ready peers on this device (liveness) */
    uint64_t last_tick_ns;
    tw_verbs_ep_t *conns; /* connections being set up */
    tw_tl_rndv_t handles; /* list head of live rendezvous handles */
    tw_verbs_rsend_t *rsends;
    uint32_t nrsends, rsend_free;
    /* QP number -> peer, open addressing (engine only) */
    uint32_t *qpn_keys;
    int *qpn_vals;
    unsigned qpn_cap;
    int events;
};

struct tw_verbs_mem {
    tw_verbs_region_t region;
};

struct tw_verbs_iface {
    tw_tl_iface_t super;
    tw_verbs_cfg_t cfg;
    uint8_t key[16];
    uint32_t qkey;
    bool threads;
    bool opened; /* iface_open finished */
    bool closing;
    int ndev;
    tw_verbs_dev_t devs[TW_VERBS_MAX_DEVS];
    tw_verbs_ep_t *eps;     /* [size]; eps[p].dev: see addr_connect */
    _Atomic(uint8_t) *down; /* [size]: failed or left (any thread reads) */
    _Atomic(unsigned) queued;
    tw_verbs_rcache_t rcache;
    bool rcache_ok;
    tw_va_t *va; /* the async event thread, watching every device */
};

static void tw_verbs_fail_peer(tw_verbs_ep_t *ep, tw_status_t why, const char *what, bool tell);
static void tw_verbs_ep_final(tw_verbs_ep_t *ep, const char *what);
static tw_status_t tw_verbs_qp_err_why(tw_verbs_dev_t *dev);
static void tw_verbs_ep_drain(tw_verbs_ep_t *ep);
static void tw_verbs_conn_send(tw_verbs_ep_t *ep, uint8_t type);
static void tw_verbs_read_done(tw_verbs_dev_t *dev, struct tw_tl_rndv *h, tw_status_t st);
static void tw_verbs_op_abort(tw_verbs_dev_t *dev, struct tw_verbs_op *op, tw_status_t st);
static void tw_verbs_srq_low(tw_verbs_dev_t *dev);
static void tw_verbs_srq_arm(tw_verbs_dev_t *dev);
static void tw_verbs_wc(tw_verbs_dev_t *dev, const struct ibv_wc *wc);

static tw_verbs_dev_t *tw_verbs_dev_of(tw_verbs_iface_t *vb, int peer)
{
    return vb->eps[peer].dev; /* set by addr_connect, before any traffic */
}

/* Thread: any (a hint for workers; the engine's own word). */
static uint8_t tw_verbs_port_state(tw_verbs_dev_t *dev)
{
    return atomic_load_explicit(&dev->port_state, memory_order_acquire);
}

static const char *tw_verbs_wc_str(enum ibv_wc_status s)
{
    return ibv_wc_status_str(s);
}

/* ---- QP number map ----------------------------------------------------- */

static unsigned tw_verbs_qpn_slot(uint32_t qpn, unsigned cap)
{
    return (unsigned)((qpn * 2654435761u) & (cap - 1));
}

static bool tw_verbs_qpn_put(tw_verbs_dev_t *dev, uint32_t qpn, int peer)
{
    unsigned i = tw_verbs_qpn_slot(qpn, dev->qpn_cap);

    for (unsigned k = 0; k < dev->qpn_cap; k++, i = (i + 1) & (dev->qpn_cap - 1)) {
        if (dev->qpn_vals[i] < 0 || dev->qpn_keys[i] == qpn) {
            dev->qpn_keys[i] = qpn;
            dev->qpn_vals[i] = peer;
            return true;
        }
    }
    return false;
}

static int tw_verbs_qpn_get(const tw_verbs_dev_t *dev, uint32_t qpn)
{
    unsigned i = tw_verbs_qpn_slot(qpn, dev->qpn_cap);

    for (unsigned k = 0; k < dev->qpn_cap; k++, i = (i + 1) & (dev->qpn_cap - 1)) {
        if (dev->qpn_vals[i] < 0) {
            return -1;
        }
        if (dev->qpn_keys[i] == qpn) {
            return dev->qpn_vals[i];
        }
    }
    return -1;
}

/* Forget @p qpn (its QP is destroyed). Linear probing: the entries after
 * it in its cluster that may not stay behind the hole move into it. */
static void tw_verbs_qpn_del(tw_verbs_dev_t *dev, uint32_t qpn)
{
    unsigned mask = dev->qpn_cap - 1, i = tw_verbs_qpn_slot(qpn, dev->qpn_cap), k;

    for (k = 0; k < dev->qpn_cap; k++, i = (i + 1) & mask) {
        if (dev->qpn_vals[i] < 0) {
            return;
        }
        if (dev->qpn_keys[i] == qpn) {
            break;
        }
    }
    if (k == dev->qpn_cap) {
        return;
    }
    unsigned hole = i;
    for (unsigned j = (i + 1) & mask; j != i && dev->qpn_vals[j] >= 0; j = (j + 1) & mask) {
        unsigned home = tw_verbs_qpn_slot(dev->qpn_keys[j], dev->qpn_cap);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            dev->qpn_keys[hole] = dev->qpn_keys[j];
            dev->qpn_vals[hole] = dev->qpn_vals[j];
            hole = j;
        }
    }
    dev->qpn_vals[hole] = -1;
}

/* ---- buffers ------------------------------------------------------------- */

static unsigned char *tw_verbs_buf(tw_verbs_dev_t *dev, uint32_t idx)
{
    return dev->pool + (size_t)idx * TW_VERBS_SEG;
}

static void tw_verbs_rx_refill(tw_verbs_dev_t *dev, bool all)
{
    struct ibv_recv_wr wr[32], *bad = NULL;
    struct ibv_sge sge[32];

    if (dev->nrx_free == 0 || (!all && dev->nrx_free < dev->rx_depth / 4)) {
        return;
    }
    while (dev->nrx_free > 0) {
        unsigned n = TW_MIN(dev->nrx_free, 32u);
        for (unsigned k = 0; k < n; k++) {
            uint32_t idx = dev->rx_free[dev->nrx_free - 1 - k];
            sge[k] = (struct ibv_sge){.addr = (uintptr_t)tw_verbs_buf(dev, idx),
                                      .length = TW_VERBS_SEG,
                                      .lkey = dev->pool_mr->lkey};
            wr[k] = (struct ibv_recv_wr){.wr_id = TW_VERBS_WR(idx, TW_VERBS_WR_RECV),
                                         .sg_list = &sge[k],
                                         .num_sge = 1,
                                         .next = k + 1 < n ? &wr[k + 1] : NULL};
        }
        int rc = ibv_post_srq_recv(dev->srq, wr, &bad);
        unsigned posted = rc == 0 ? n : (unsigned)(bad - wr);
        dev->nrx_free -= posted;
        dev->rx_posted += posted;
        if (rc != 0) {
            tw_error("verbs", "%s: cannot post receives to the SRQ: %s", dev->name, strerror(rc));
            return;
        }
    }
}

static bool tw_verbs_ud_post_recv(tw_verbs_dev_t *dev, uint32_t idx)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(dev->ud_pool + (size_t)idx * TW_VERBS_UD_BUF),
                          .length = TW_VERBS_UD_BUF,
                          .lkey = dev->pool_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = TW_VERBS_WR_UD(dev, idx, TW_VERBS_WR_UD_RECV),
                             .sg_list = &sge,
                             .num_sge = 1},
                       *bad;

    return ibv_post_recv(dev->ud, &wr, &bad) == 0;
}

/* ---- operations ------------------------------------------------------------ */

static tw_verbs_op_t *tw_verbs_op_new(size_t extra)
{
    size_t alloc_len = sizeof(tw_verbs_op_t) + extra;
    tw_verbs_op_t *op = tw_malloc(alloc_len);

    if (op != NULL) {
        memset(op, 0, sizeof(*op));
        op->alloc_len = alloc_len;
        op->sbuf = UINT32_MAX;
    }
    return op;
}

static void tw_verbs_op_free(tw_verbs_op_t *op)
{
    tw_free(op, op->alloc_len);
}

/* Release what an operation holds on the device. */
static void tw_verbs_op_release(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    if (op->sbuf != UINT32_MAX) {
        dev->tx_free[dev->ntx_free++] = op->sbuf;
        op->sbuf = UINT32_MAX;
    }
    if (op->mr != NULL) {
        (void)ibv_dereg_mr(op->mr);
        op->mr = NULL;
    }
    if (op->region != NULL) {
        tw_verbs_rcache_put(&dev->vb->rcache, op->region);
        op->region = NULL;
    }
}

/* An lkey (or rkey, for remote access) for [addr, addr + len): a cached
 * registration, or one made for this operation. */
static bool tw_verbs_reg(tw_verbs_dev_t *dev, const void *addr, size_t len, int access,
                         struct ibv_mr **mr_p, tw_verbs_region_t **region_p, uint32_t *lkey_p,
                         uint32_t *rkey_p)
{
    tw_verbs_region_t *r = tw_verbs_rcache_lookup(&dev->vb->rcache, addr, len);

    if (r != NULL) {
        *region_p = r;
        *lkey_p = r->lkey[dev->index];
        *rkey_p = r->rkey[dev->index];
        return true;
    }
    struct ibv_mr *mr = ibv_reg_mr(dev->pd, (void *)addr, len, access);
    if (mr == NULL) {
        tw_error("verbs", "%s: cannot register %zu bytes at %p: %m", dev->name, len, addr);
        return false;
    }
    *mr_p = mr;
    *lkey_p = mr->lkey;
    *rkey_p = mr->rkey;
    return true;
}

/* ---- rendezvous send table ------------------------------------------------- */

static uint64_t tw_verbs_rsend_add(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    tw_verbs_rsend_t *s;

    if (dev->rsend_free == UINT32_MAX) {
        uint32_t n = dev->nrsends == 0 ? 256 : dev->nrsends * 2;
        tw_verbs_rsend_t *a = tw_calloc(n, sizeof(*a));
        if (a == NULL) {
            return UINT64_MAX;
        }
        if (dev->nrsends > 0) {
            memcpy(a, dev->rsends, dev->nrsends * sizeof(*a));
            tw_free(dev->rsends, dev->nrsends * sizeof(*a));
        }
        for (uint32_t i = n; i-- > dev->nrsends;) {
            a[i].next_free = dev->rsend_free;
            dev->rsend_free = i;
        }
        dev->rsends = a;
        dev->nrsends = n;
    }
    uint32_t idx = dev->rsend_free;
    s = &dev->rsends[idx];
    dev->rsend_free = s->next_free;
    s->comp = op->comp;
    s->mr = op->mr;
    s->region = op->region;
    s->peer = op->peer;
    op->mr = NULL; /* the slot holds them until FIN */
    op->region = NULL;
    return (uint64_t)s->gen << 32 | idx;
}

/* Complete rendezvous send @p sid of @p peer; false if there is none. */
static bool tw_verbs_rsend_done(tw_verbs_dev_t *dev, uint64_t sid, int peer, tw_status_t st)
{
    uint32_t idx = (uint32_t)sid, gen = (uint32_t)(sid >> 32);
    tw_verbs_rsend_t *s;
    tw_tl_comp_t *comp;

    if (idx >= dev->nrsends || (s = &dev->rsends[idx])->comp == NULL || s->gen != gen ||
        s->peer != peer) {
        return false;
    }
    comp = s->comp;
    if (s->mr != NULL) {
        (void)ibv_dereg_mr(s->mr);
    }
    if (s->region != NULL) {
        tw_verbs_rcache_put(&dev->vb->rcache, s->region);
    }
    s->comp = NULL;
    s->mr = NULL;
    s->region = NULL;
    s->gen = (s->gen + 1) & 0x7fffffffu; /* bit 63 of a sid is the "registered" mark */
    s->next_free = dev->rsend_free;
    dev->rsend_free = idx;
    comp->cb(comp, st);
    return true;
}

/* ---- connections ------------------------------------------------------------ */

/* The device's timerfd: a fast tick while connections are being set up
 * or the port is waiting for our address to come back, a slower one for
 * liveness while peers are connected, else off. */
static void tw_verbs_timer_update(tw_verbs_dev_t *dev)
{
    uint64_t t = dev->vb->cfg.conn_timeout_ns;
    bool fast = dev->conns != NULL || tw_verbs_port_state(dev) == TW_VERBS_PORT_WAIT;
    uint64_t want = fast ? TW_VERBS_TICK_NS
                    : t > 0 && dev->nready > 0
                        ? TW_MIN(TW_MAX(t / 8, TW_VERBS_TICK_NS), 250ull * 1000 * 1000)
                        : 0;
    struct itimerspec its = {0};

    if (dev->timer_ns == want) {
        return;
    }
    its.it_interval.tv_sec = (time_t)(want / 1000000000u);
    its.it_interval.tv_nsec = (long)(want % 1000000000u);
    its.it_value = its.it_interval;
    (void)timerfd_settime(dev->timer_fd, 0, &its, NULL);
    dev->timer_ns = want;
}

static void tw_verbs_conn_watch(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;
    uint64_t now = tw_time_ns();

    if (ep->on_conn) {
        return;
    }
    ep->on_conn = true;
    ep->rtx_ns = TW_VERBS_RTX_FIRST;
    ep->next_tx_ns = now + ep->rtx_ns;
    ep->deadline_ns =
        dev->vb->cfg.conn_timeout_ns == 0 ? UINT64_MAX : now + dev->vb->cfg.conn_timeout_ns;
    ep->next_conn = dev->conns;
    dev->conns = ep;
    tw_verbs_timer_update(dev);
}

static void tw_verbs_conn_unwatch(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;

    if (!ep->on_conn) {
        return;
    }
    for (tw_verbs_ep_t **pp = &dev->conns; *pp != NULL; pp = &(*pp)->next_conn) {
        if (*pp == ep) {
            *pp = ep->next_conn;
            break;
        }
    }
    ep->on_conn = false;
    tw_verbs_timer_update(dev);
}

static bool tw_verbs_qp_create(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_qp_init_attr ia = {.send_cq = dev->cq,
                                  .recv_cq = dev->cq,
                                  .srq = dev->srq,
                                  .qp_type = IBV_QPT_RC,
                                  .sq_sig_all = 1,
                                  .cap = {.max_send_wr = dev->sq_depth,
                                          .max_send_sge = 1,
                                          .max_inline_data = dev->max_inline}};
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = dev->port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_WRITE};
    uint32_t psn = 0;
    int rc;

    ep->qp = ibv_create_qp(dev->qp_pd, &ia);
    if (ep->qp == NULL && dev->max_inline > 0) {
        ia.cap.max_inline_data = 0; /* some providers refuse any inline size */
        ep->qp = ibv_create_qp(dev->qp_pd, &ia);
        if (ep->qp != NULL) {
            dev->max_inline = 0;
        }
    }
    if (ep->qp == NULL) {
        tw_error("verbs", "%s: cannot create an RC QP for rank %d: %m", dev->name, ep->peer);
        return false;
    }
    rc = ibv_modify_qp(ep->qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        tw_error("verbs", "%s: RC QP for rank %d: INIT failed: %s", dev->name, ep->peer,
                 strerror(rc));
        (void)ibv_destroy_qp(ep->qp);
        ep->qp = NULL;
        return false;
    }
    if (!tw_verbs_qpn_put(dev, ep->qp->qp_num, ep->peer)) {
        tw_error("verbs", "%s: QP number table full", dev->name);
        (void)ibv_destroy_qp(ep->qp);
        ep->qp = NULL;
        return false;
    }
    if (getrandom(&psn, sizeof(psn), 0) != (ssize_t)sizeof(psn)) {
        psn = (uint32_t)tw_time_ns();
    }
    ep->psn = psn & 0xffffffu;
    tw_verbs_credits_init(&ep->sq, dev->sq_depth);
    ep->state = TW_VERBS_EP_INIT;
    return true;
}

/* INIT -> RTR -> RTS toward the peer's QP @p rqpn, of its endpoint
 * generation @p rgen. */
static bool tw_verbs_qp_connect(tw_verbs_ep_t *ep, uint32_t rqpn, uint32_t rpsn, uint32_t rgen)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = ep->mtu,
                            .dest_qp_num = rqpn,
                            .rq_psn = rpsn,
                            .max_dest_rd_atomic = (uint8_t)dev->rd_atomic,
                            .min_rnr_timer = 12,
                            .ah_attr = ep->ah_attr};
    int rc = ibv_modify_qp(ep->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);

    if (rc != 0) {
        tw_error("verbs", "%s: RC QP for rank %d: RTR failed: %s", dev->name, ep->peer,
                 strerror(rc));
        return false;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 16; /* 4.096 us * 2^16 = 268 ms per try */
    a.retry_cnt = 7;
    a.rnr_retry = 7; /* forever: an empty SRQ delays, never fails */
    a.sq_psn = ep->psn;
    a.max_rd_atomic = (uint8_t)dev->rd_atomic;
    rc = ibv_modify_qp(ep->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        tw_error("verbs", "%s: RC QP for rank %d: RTS failed: %s", dev->name, ep->peer,
                 strerror(rc));
        return false;
    }
    ep->rqpn = rqpn;
    ep->rpsn = rpsn;
    ep->rgen = rgen;
    ep->state = TW_VERBS_EP_CONNECTED;
    tw_debug("verbs", "%s: rank %d connected (QP %u -> %u, generations %u -> %u)", dev->name,
             ep->peer, ep->qp->qp_num, rqpn, ep->gen, rgen);
    return true;
}

static void tw_verbs_set_ready(tw_verbs_ep_t *ep)
{
    if (ep->ready || ep->failed) {
        return;
    }
    ep->ready = true;
    ep->last_ns = tw_time_ns();
    ep->dev->nready++;
    tw_verbs_conn_unwatch(ep);
    tw_verbs_timer_update(ep->dev);
    tw_verbs_ep_drain(ep);
}

/* Start connecting to @p ep's peer (first operation for it). */
static void tw_verbs_connect(tw_verbs_ep_t *ep)
{
    if (ep->qp != NULL || ep->failed) {
        return;
    }
    if (!tw_verbs_qp_create(ep)) {
        tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot create a QP", false);
        return;
    }
    tw_verbs_conn_send(ep, TW_VERBS_C_REQ);
    tw_verbs_conn_watch(ep);
}

/* Test hook: drop every Nth connection message we send (0 = none). */
static atomic_uint tw_verbs_drop_every;
static atomic_uint tw_verbs_drop_count;

void tw_verbs_test_drop_conn(unsigned every)
{
    atomic_store_explicit(&tw_verbs_drop_every, every, memory_order_relaxed);
}

static void tw_verbs_conn_send(tw_verbs_ep_t *ep, uint8_t type)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_conn_t c = {.type = type,
                         .src_rank = (uint32_t)vb->super.rank,
                         .dst_rank = (uint32_t)ep->peer,
                         .size = (uint32_t)vb->super.size,
                         .src_dev = (uint8_t)dev->index,
                         .dst_dev = ep->rdev,
                         .qpn = ep->qp != NULL ? ep->qp->qp_num : 0,
                         .psn = ep->psn,
                         .gen = ep->gen,
                         .echo = ep->rgen};
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_sge sge;
    uint32_t idx;
    unsigned char *buf;
    int rc;

    if (dev->nud_tx_free == 0) {
        return; /* the retransmission timer tries again */
    }
    unsigned every = atomic_load_explicit(&tw_verbs_drop_every, memory_order_relaxed);
    if (every > 0 &&
        (atomic_fetch_add_explicit(&tw_verbs_drop_count, 1, memory_order_relaxed) + 1) % every ==
            0) {
        tw_debug("verbs", "test hook: connection message %u to rank %d dropped", type, ep->peer);
        return;
    }
    if (ep->ah == NULL) {
        ep->ah = ibv_create_ah(dev->pd, &ep->ah_attr);
        if (ep->ah == NULL) {
            int err = errno;
            if (tw_verbs_qp_err_why(dev) == TW_ERR_TRANSPORT) {
                /* Our port went down (PORT_ERR is on its way): expected. */
                tw_debug("verbs", "%s: no address handle for rank %d: port down (%s)", dev->name,
                         ep->peer, strerror(err));
                return;
            }
            tw_error("verbs", "%s: cannot make an address handle for rank %d: %s", dev->name,
                     ep->peer, strerror(err));
            return;
        }
    }
    idx = dev->ud_tx_free[--dev->nud_tx_free];
    buf = dev->ud_pool + (size_t)(TW_VERBS_UD_RX + idx) * TW_VERBS_UD_BUF;
    tw_verbs_conn_pack(&c, vb->key, buf);
    sge = (struct ibv_sge){
        .addr = (uintptr_t)buf, .length = TW_VERBS_CONN_LEN, .lkey = dev->pool_mr->lkey};
    wr.wr_id = TW_VERBS_WR_UD(dev, idx, TW_VERBS_WR_UD_SEND);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ep->ah;
    wr.wr.ud.remote_qpn = ep->rud_qpn;
    wr.wr.ud.remote_qkey = vb->qkey;
    rc = ibv_post_send(dev->ud, &wr, &bad);
    if (rc != 0) {
        dev->ud_tx_free[dev->nud_tx_free++] = idx;
        tw_warn("verbs", "%s: cannot send a connection message to rank %d: %s", dev->name, ep->peer,
                strerror(rc));
    }
}

/* A connection message arrived on @p dev's UD QP. */
static void tw_verbs_conn_recv(tw_verbs_dev_t *dev, const unsigned char *buf, size_t len)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_conn_t c;
    const char *why = "?";
    tw_verbs_ep_t *ep;

    if (tw_verbs_conn_parse(buf, len, vb->key, (uint32_t)vb->super.rank, (uint32_t)vb->super.size,
                            &c, &why) != TW_OK) {
        tw_stats_inc(vb->super.stats, TW_TL_STAT_REFUSED);
        tw_warn("verbs", "%s: connection message refused: %s", dev->name, why);
        return;
    }
    ep = &vb->eps[c.src_rank];
    if (ep->dev != dev || c.src_dev != ep->rdev || c.dst_dev != dev->index) {
        tw_stats_inc(vb->super.stats, TW_TL_STAT_REFUSED);
        tw_warn("verbs", "%s: rank %u's connection message names the wrong devices", dev->name,
                c.src_rank);
        return;
    }
    dev->events++;
    /* From an endpoint of the peer's older than the one we are connected
     * to, or than the one our reset waits for; or for an older endpoint of
     * ours: the past. */
    if (tw_verbs_conn_stale(&c, ep->gen, ep->state == TW_VERBS_EP_CONNECTED, ep->rgen,
                            ep->rgen_min)) {
        tw_debug("verbs",
                 "%s: rank %u's connection message %u (generation %u, for our %u) is stale: "
                 "ours is %u",
                 dev->name, c.src_rank, c.type, c.gen, c.echo, ep->gen);
        return;
    }
    if (c.type == TW_VERBS_C_DOWN || c.type == TW_VERBS_C_RESET) {
        if (ep->state == TW_VERBS_EP_CONNECTED && c.gen == ep->rgen && ep->rqpn != c.qpn) {
            return; /* not about our connection */
        }
        if (c.type == TW_VERBS_C_RESET) {
            if (!ep->failed && ep->qp != NULL) {
                tw_verbs_fail_peer(ep, TW_ERR_TRANSPORT, "it lost our connection (for now)", false);
            }
        } else if (!ep->failed) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "it reported our connection failed", false);
        } else if (ep->transient) {
            tw_verbs_ep_final(ep, "it reported our connection failed");
        }
        return;
    }
    if (ep->failed) {
        /* For good: it will learn by its own retries, or has already. For
         * now: it repeats its REQ until our reset is done. */
        return;
    }
    if (tw_verbs_port_state(dev) != TW_VERBS_PORT_UP) {
        return; /* nothing connects now; it repeats */
    }
    if (ep->state == TW_VERBS_EP_CONNECTED && c.gen > ep->rgen) {
        /* Its endpoint is new: it lost the connection we are in (its port
         * went down, or it failed us for now) and reconnects. Ours is
         * dead too, for now: once our QP flushed, its next REQ is
         * answered. */
        tw_verbs_fail_peer(ep, TW_ERR_TRANSPORT, "it reconnects from a new endpoint", false);
        return;
    }
    if (ep->ready) {
        ep->last_ns = tw_time_ns();
    }
    if (ep->state == TW_VERBS_EP_CONNECTED && ep->rqpn != c.qpn) {
        tw_warn("verbs", "%s: rank %u announced QP %u, but we are connected to QP %u: ignored",
                dev->name, c.src_rank, c.qpn, ep->rqpn);
        return;
    }
    switch (c.type) {
    case TW_VERBS_C_REQ:
        if (ep->qp == NULL && !tw_verbs_qp_create(ep)) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot create a QP", false);
            return;
        }
        if (ep->state != TW_VERBS_EP_CONNECTED && !tw_verbs_qp_connect(ep, c.qpn, c.psn, c.gen)) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot connect the QP", false);
            return;
        }
        tw_verbs_conn_send(ep, TW_VERBS_C_REP);
        if (!ep->ready) {
            tw_verbs_conn_watch(ep); /* REP again until it answers */
        }
        break;
    case TW_VERBS_C_REP:
        if (ep->qp == NULL) {
            return; /* we never asked */
        }
        if (ep->state != TW_VERBS_EP_CONNECTED && !tw_verbs_qp_connect(ep, c.qpn, c.psn, c.gen)) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "cannot connect the QP", false);
            return;
        }
        tw_verbs_conn_send(ep, TW_VERBS_C_RTU);
        tw_verbs_set_ready(ep);
        break;
    case TW_VERBS_C_RTU:
        if (ep->state == TW_VERBS_EP_CONNECTED) {
            tw_verbs_set_ready(ep);
        }
        break;
    case TW_VERBS_C_PING:
        if (ep->ready) {
            tw_verbs_conn_send(ep, TW_VERBS_C_PONG);
        }
        break;
    case TW_VERBS_C_PONG: /* its arrival was the point */
        break;
    default:
        break;
    }
}

static void tw_verbs_enqueue(tw_verbs_dev_t *dev, struct tw_verbs_op *op);

/* Liveness. A connected peer we heard nothing from (no arrival, no
 * acknowledged send) for a quarter of TW_VERBS_TIMEOUT gets a PING over UD,
 * which its engine answers with a PONG; one that runs progress threads and
 * stays silent for the whole timeout has failed (died, hung, stopped, or
 * unreachable) -- also while we only wait for it (a receive, or a
 * rendezvous it never pulled), where no work request of ours would notice.
 * A rank in manual mode answers only inside tw_progress, so it is pinged
 * but not judged (as over tcp). If our own engine did not run for half the
 * timeout (we were stopped), the peers get a fresh start, not the blame. */
static void tw_verbs_liveness(tw_verbs_dev_t *dev, uint64_t now)
{
    tw_verbs_iface_t *vb = dev->vb;
    uint64_t t = vb->cfg.conn_timeout_ns;
    bool grace = dev->last_tick_ns != 0 && now - dev->last_tick_ns > t / 2;

    dev->last_tick_ns = now;
    if (t == 0 || dev->nready == 0) {
        return;
    }
    for (int p = 0; p < vb->super.size; p++) {
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev || !ep->ready || ep->failed) {
            continue;
        }
        if (grace) {
            ep->last_ns = now;
            continue;
        }
        if (ep->judge && now - ep->last_ns > t) {
            char what[128];
            snprintf(what, sizeof(what),
                     "nothing heard for %.1f s (TW_VERBS_TIMEOUT): died, hung, stopped or "
                     "unreachable",
                     (double)(now - ep->last_ns) / 1e9);
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, what, true);
            continue;
        }
        if (now - ep->last_ns >= t / 4 && now - ep->ping_ns >= t / 4) {
            ep->ping_ns = now;
            tw_trace("verbs", "%s: PING to rank %d", dev->name, p);
            tw_verbs_conn_send(ep, TW_VERBS_C_PING);
        }
    }
}

/* Retransmissions and deadlines of connections being set up. */
static void tw_verbs_conn_tick(tw_verbs_dev_t *dev)
{
    uint64_t now = tw_time_ns();
    for (tw_verbs_ep_t *ep = dev->conns, *next; ep != NULL; ep = next) {
        next = ep->next_conn;
        if (now >= ep->deadline_ns) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED,
                               "no answer to connection requests (TW_VERBS_TIMEOUT)", true);
            next = dev->conns; /* the list changed */
            continue;
        }
        if (now >= ep->next_tx_ns) {
            tw_verbs_conn_send(ep, ep->state == TW_VERBS_EP_CONNECTED ? TW_VERBS_C_REP
                                                                      : TW_VERBS_C_REQ);
            ep->rtx_ns = TW_MIN(ep->rtx_ns * 2, TW_VERBS_RTX_MAX);
            ep->next_tx_ns = now + ep->rtx_ns;
        }
    }
}

/* ---- posting ---------------------------------------------------------------- */

/* Coalescing: an AM or FIN waiting behind the frame being sent may share
 * its send (and its work request, credit and completion) when it fits. */
#define TW_VERBS_BATCH_MAX 64

static bool tw_verbs_batchable(const tw_verbs_op_t *op)
{
    return op != NULL && (op->kind == TW_VERBS_OP_AM || op->kind == TW_VERBS_OP_FIN);
}

static size_t tw_verbs_frame_size(const tw_verbs_op_t *op)
{
    return op->kind == TW_VERBS_OP_AM ? TW_VERBS_FRAME_LEN + op->inl_len
                                      : TW_VERBS_FRAME_LEN + TW_VERBS_FIN_LEN;
}

/* Write the frame of AM or FIN @p op at @p dst; returns its size. */
static size_t tw_verbs_frame_write(const tw_verbs_op_t *op, unsigned char *dst)
{
    tw_verbs_frame_t f = {.am_id = op->am_id};

    if (op->kind == TW_VERBS_OP_AM) {
        f.type = TW_VERBS_F_AM;
        f.hdr_len = op->hdr_len;
        f.len = op->inl_len - op->hdr_len;
    } else {
        f.type = TW_VERBS_F_FIN;
        f.sid = op->sid;
        f.status = op->status;
    }
    size_t n = tw_verbs_frame_pack(&f, dst);
    if (op->kind == TW_VERBS_OP_AM && op->inl_len > 0) {
        memcpy(dst + n, op->bytes, op->inl_len);
        n += op->inl_len;
    }
    return n;
}

/* Complete the frames coalesced behind @p op with @p st. */
static void tw_verbs_batch_done(tw_verbs_op_t *op, tw_status_t st)
{
    while (op->batch != NULL) {
        tw_verbs_op_t *b = op->batch;
        op->batch = b->batch;
        if (b->comp != NULL) {
            b->comp->cb(b->comp, st);
        }
        tw_verbs_op_free(b);
    }
}

/* Post @p op on @p ep's QP. False: no credit or buffer now (it stays
 * queued). On a failure that is final, the op is completed (and freed). */
static bool tw_verbs_post(tw_verbs_ep_t *ep, tw_verbs_op_t *op)
{
    tw_verbs_dev_t *dev = ep->dev;
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_sge sge = {0};
    unsigned char frame[TW_VERBS_FRAME_LEN + TW_VERBS_RTS_LEN];
    tw_verbs_frame_t f = {.am_id = op->am_id, .hdr_len = op->hdr_len};
    size_t flen = 0, total = 0;
    int rc;

    if (ep->sq.avail == 0) {
        return false;
    }
    wr.wr_id = (uint64_t)(uintptr_t)op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    switch (op->kind) {
    case TW_VERBS_OP_AM:
    case TW_VERBS_OP_RTS:
    case TW_VERBS_OP_FIN:
    case TW_VERBS_OP_BYE: {
        if (op->kind == TW_VERBS_OP_AM) {
            f.type = TW_VERBS_F_AM;
            f.len = op->inl_len - op->hdr_len;
        } else if (op->kind == TW_VERBS_OP_RTS) {
            uint32_t lkey;
            f.type = TW_VERBS_F_RTS;
            f.len = op->len;
            f.raddr = (uint64_t)(uintptr_t)op->data;
            if (op->sid == 0) {
                /* Once: a retry (no credit yet) keeps the registration. */
                if (!tw_verbs_reg(dev, op->data, op->len, IBV_ACCESS_REMOTE_READ, &op->mr,
                                  &op->region, &lkey, &op->rkey)) {
                    atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
                    tw_verbs_op_release(dev, op);
                    op->comp->cb(op->comp, TW_ERR_TRANSPORT);
                    tw_verbs_op_free(op);
                    return true;
                }
                uint64_t sid = tw_verbs_rsend_add(dev, op);
                if (sid == UINT64_MAX) {
                    tw_error("verbs", "out of memory for a rendezvous to rank %d", op->peer);
                    atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
                    tw_verbs_op_release(dev, op);
                    op->comp->cb(op->comp, TW_ERR_NOMEM);
                    tw_verbs_op_free(op);
                    return true;
                }
                op->sid = sid | (1ull << 63); /* nonzero marker; the bit is dropped below */
            }
            f.sid = op->sid & ~(1ull << 63);
            f.rkey = op->rkey;
        } else if (op->kind == TW_VERBS_OP_FIN) {
            f.type = TW_VERBS_F_FIN;
            f.hdr_len = 0;
            f.sid = op->sid;
            f.status = op->status;
        } else {
            f.type = TW_VERBS_F_BYE;
            f.hdr_len = 0;
        }
        flen = tw_verbs_frame_pack(&f, frame);
        total =
            flen + (op->kind == TW_VERBS_OP_AM || op->kind == TW_VERBS_OP_RTS ? op->inl_len : 0);
        wr.opcode = IBV_WR_SEND;
        bool more = op->kind != TW_VERBS_OP_BYE && tw_verbs_batchable(ep->head) &&
                    total + tw_verbs_frame_size(ep->head) <= TW_VERBS_SEG;
        unsigned char tmp[256];
        if (!more && total <= dev->max_inline && total <= sizeof(tmp)) {
            /* Small enough: the device copies it at post time. */
            memcpy(tmp, frame, flen);
            memcpy(tmp + flen, op->bytes, total - flen);
            sge.addr = (uintptr_t)tmp;
            sge.length = (uint32_t)total;
            wr.send_flags |= IBV_SEND_INLINE;
            if (!tw_verbs_credits_take(&ep->sq, 1)) {
                return false;
            }
            rc = ibv_post_send(ep->qp, &wr, &bad);
            break;
        }
        if (dev->ntx_free == 0) {
            dev->tx_starved = true; /* drained again once buffers come back */
            return false;
        }
        if (!tw_verbs_credits_take(&ep->sq, 1)) {
            return false;
        }
        op->sbuf = dev->tx_free[--dev->ntx_free];
        unsigned char *buf = tw_verbs_buf(dev, op->sbuf);
        memcpy(buf, frame, flen);
        memcpy(buf + flen, op->bytes, total - flen);
        if (more) {
            /* Frames queued behind it go in the same send, in order. */
            tw_verbs_op_t **tailp = &op->batch;
            for (unsigned k = 0; k < TW_VERBS_BATCH_MAX && tw_verbs_batchable(ep->head) &&
                                 total + tw_verbs_frame_size(ep->head) <= TW_VERBS_SEG;
                 k++) {
                tw_verbs_op_t *nx = ep->head;
                ep->head = nx->next;
                if (ep->head == NULL) {
                    ep->tail = NULL;
                }
                total += tw_verbs_frame_write(nx, buf + total);
                nx->next = NULL;
                *tailp = nx;
                tailp = &nx->batch;
                atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
            }
            tw_trace("verbs", "%s: %zu bytes of frames to rank %d in one send", dev->name, total,
                     ep->peer);
        }
        sge.addr = (uintptr_t)buf;
        sge.length = (uint32_t)total;
        sge.lkey = dev->pool_mr->lkey;
        rc = ibv_post_send(ep->qp, &wr, &bad);
        break;
    }
    case TW_VERBS_OP_PUT:
    case TW_VERBS_OP_GET:
    case TW_VERBS_OP_READ: {
        uint32_t lkey = 0, rkey_unused;
        const void *local = op->kind == TW_VERBS_OP_PUT ? op->data : op->dst;
        if (op->len > 0 && op->mr == NULL && op->region == NULL && op->kind != TW_VERBS_OP_READ &&
            /* A put's source is only read (it may be read-only memory). */
            !tw_verbs_reg(dev, local, op->len,
                          op->kind == TW_VERBS_OP_PUT ? 0 : IBV_ACCESS_LOCAL_WRITE, &op->mr,
                          &op->region, &lkey, &rkey_unused)) {
            atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
            op->comp->cb(op->comp, TW_ERR_TRANSPORT);
            tw_verbs_op_free(op);
            return true;
        }
        if (op->kind == TW_VERBS_OP_READ) {
            lkey = op->rndv->mr != NULL ? op->rndv->mr->lkey : op->rndv->region->lkey[dev->index];
        } else if (op->mr != NULL) {
            lkey = op->mr->lkey;
        } else if (op->region != NULL) {
            lkey = op->region->lkey[dev->index];
        }
        sge.addr = (uintptr_t)local;
        sge.length = (uint32_t)op->len;
        sge.lkey = lkey;
        wr.num_sge = op->len > 0 ? 1 : 0;
        wr.opcode = op->kind == TW_VERBS_OP_PUT ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
        wr.wr.rdma.remote_addr = op->raddr;
        wr.wr.rdma.rkey = op->rkey;
        if (!tw_verbs_credits_take(&ep->sq, 1)) {
            return false;
        }
        rc = ibv_post_send(ep->qp, &wr, &bad);
        break;
    }
    default:
        return true;
    }
    atomic_fetch_sub_explicit(&dev->vb->queued, 1, memory_order_relaxed);
    if (rc != 0) {
        /* The QP is in error (or the request was bad): nothing will
         * complete for it, so complete it here and fail the peer. */
        ep->sq.avail++;
        ep->sq.posted--;
        tw_error("verbs", "%s: posting to rank %d failed: %s", dev->name, ep->peer, strerror(rc));
        /* (@p op is out of the queue: failing the peer aborts the rest.) */
        tw_verbs_fail_peer(ep, tw_verbs_qp_err_why(dev), "cannot post to its QP", true);
        tw_verbs_batch_done(op, dev->vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED);
        tw_verbs_op_abort(dev, op, dev->vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED);
        return true;
    }
    op->pprev = NULL;
    op->pnext = ep->posted;
    if (ep->posted != NULL) {
        ep->posted->pprev = op;
    }
    ep->posted = op;
    return true;
}

static void tw_verbs_flush_check(tw_verbs_ep_t *ep)
{
    for (tw_verbs_op_t **pp = &ep->flushes; *pp != NULL;) {
        tw_verbs_op_t *op = *pp;
        if (ep->sq.done >= op->target) {
            *pp = op->next;
            op->comp->cb(op->comp, TW_OK);
            tw_verbs_op_free(op);
        } else {
            pp = &op->next;
        }
    }
}

/* Post what waits in @p ep's queue while credits last. */
static void tw_verbs_ep_drain(tw_verbs_ep_t *ep)
{
    while (ep->head != NULL && ep->ready && !ep->failed) {
        tw_verbs_op_t *op = ep->head;
        /* Out of the queue while it is posted: what posting calls may
         * queue (or abort) more. */
        ep->head = op->next;
        if (ep->head == NULL) {
            ep->tail = NULL;
        }
        if (op->kind == TW_VERBS_OP_FLUSH) {
            atomic_fetch_sub_explicit(&ep->dev->vb->queued, 1, memory_order_relaxed);
            op->target = ep->sq.posted;
            op->next = ep->flushes;
            ep->flushes = op;
            tw_verbs_flush_check(ep);
            continue;
        }
        if (op->kind == TW_VERBS_OP_QPERR) {
            atomic_fetch_sub_explicit(&ep->dev->vb->queued, 1, memory_order_relaxed);
            tw_verbs_op_free(op);
            continue;
        }
        if (!tw_verbs_post(ep, op)) {
            op->next = ep->head; /* back in front: no credit or buffer yet */
            ep->head = op;
            if (ep->tail == NULL) {
                ep->tail = op;
            }
            break;
        }
    }
}

/* Complete an operation that will never be posted, with @p st. */
static void tw_verbs_op_abort(tw_verbs_dev_t *dev, tw_verbs_op_t *op, tw_status_t st)
{
    tw_verbs_op_release(dev, op);
    if (op->kind == TW_VERBS_OP_READ) {
        tw_verbs_read_done(dev, op->rndv, st);
    } else if (op->kind == TW_VERBS_OP_RTS && op->sid != 0) {
        (void)tw_verbs_rsend_done(dev, op->sid & ~(1ull << 63), op->peer, st);
    } else if (op->comp != NULL) {
        op->comp->cb(op->comp, st);
    }
    tw_verbs_op_free(op);
}

/* An operation reaches the engine. */
static void tw_verbs_enqueue(tw_verbs_dev_t *dev, tw_verbs_op_t *op)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_ep_t *ep = &vb->eps[op->peer];

    if (op->kind == TW_VERBS_OP_QPERR) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        if (ep->qp != NULL && !ep->failed) {
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            int rc = ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
            tw_warn("verbs", "%s: test hook: QP to rank %d moved to the error state (%s)",
                    dev->name, op->peer, rc == 0 ? "ok" : strerror(rc));
            /* An idle QP has nothing to flush, and a modify raises no
             * async event: fail the peer (and tell it) now, as the first
             * flushed completion would. */
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "its QP was moved to the error state", true);
        }
        tw_verbs_op_free(op);
        return;
    }
    if (ep->failed || vb->closing || tw_verbs_port_state(dev) != TW_VERBS_PORT_UP) {
        /* (Accepted before the port went down: it completes like the
         * operations that were waiting then.) */
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_verbs_op_abort(dev, op, vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED);
        return;
    }
    if (op->kind == TW_VERBS_OP_FLUSH && ep->qp == NULL) {
        /* Nothing was ever posted to it: nothing to wait for. */
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        op->comp->cb(op->comp, TW_OK);
        tw_verbs_op_free(op);
        return;
    }
    op->next = NULL;
    if (ep->tail == NULL) {
        ep->head = op;
    } else {
        ep->tail->next = op;
    }
    ep->tail = op;
    if (ep->qp == NULL) {
        tw_verbs_connect(ep);
        return;
    }
    tw_verbs_ep_drain(ep);
}

static void tw_verbs_enqueue_cmd(void *arg, void *data, uint64_t u64)
{
    (void)u64;
    tw_verbs_enqueue(arg, data);
}

/* Hand @p op to its peer's device engine. Thread: any. */
static tw_status_t tw_verbs_submit(tw_verbs_iface_t *vb, tw_verbs_op_t *op, size_t len)
{
    tw_verbs_dev_t *dev = tw_verbs_dev_of(vb, op->peer);
    tw_status_t st;

    if (atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed) >= TW_VERBS_MAX_QUEUED) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_stats_inc(vb->super.stats, TW_TL_STAT_AGAIN);
        tw_verbs_op_free(op);
        return TW_ERR_AGAIN;
    }
    st = tw_tl_submit(&vb->super, dev->pe, tw_verbs_enqueue_cmd, dev, op, op->alloc_len, len);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
    }
    return st;
}

static tw_status_t tw_verbs_check_peer(tw_verbs_iface_t *vb, int peer)
{
    /* rud_qpn stays 0 for a peer addr_connect could not address (another
     * link layer): never a UD QP number (QP 0 is the SMI). */
    if (peer < 0 || peer >= vb->super.size || peer == vb->super.rank ||
        vb->eps[peer].rud_qpn == 0) {
        return TW_ERR_UNREACHABLE;
    }
    switch (atomic_load_explicit(&vb->down[peer], memory_order_acquire)) {
    case TW_VERBS_DOWN_NO:
        break;
    case TW_VERBS_DOWN_FOR_NOW:
        return TW_ERR_TRANSPORT;
    default:
        return TW_ERR_PEER_FAILED;
    }
    /* A port that is down refuses at once (not queued until it is back). */
    if (tw_verbs_port_state(tw_verbs_dev_of(vb, peer)) != TW_VERBS_PORT_UP) {
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

/* An eager frame op carrying header + payload. */
static tw_status_t tw_verbs_send_eager(tw_verbs_iface_t *vb, int peer, uint8_t am_id,
                                       const void *hdr, size_t hdr_len, const void *data,
                                       size_t len, tw_tl_comp_t *comp)
{
    tw_verbs_op_t *op = tw_verbs_op_new(hdr_len + len);

    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = TW_VERBS_OP_AM;
    op->peer = peer;
    op->am_id = am_id;
    op->hdr_len = (uint16_t)hdr_len;
    op->comp = comp;
    op->inl_len = hdr_len + len;
    if (hdr_len > 0) {
        memcpy(op->bytes, hdr, hdr_len);
    }
    if (len > 0) {
        memcpy(op->bytes + hdr_len, data, len);
    }
    return tw_verbs_submit(vb, op, len);
}

static tw_status_t tw_verbs_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_status_t st = tw_verbs_check_peer(vb, peer);

    if (st != TW_OK) {
        return st;
    }
    if (hdr_len + len > iface->attr.max_short || hdr_len > TW_VERBS_MAX_HDR) {
        return TW_ERR_INVALID;
    }
    return tw_verbs_send_eager(vb, peer, am_id, hdr, hdr_len, data, len, NULL);
}

static tw_status_t tw_verbs_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                     size_t hdr_len, const void *data, size_t len,
                                     tw_tl_comp_t *comp)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_status_t st = tw_verbs_check_peer(vb, peer);
    tw_verbs_op_t *op;

    if (st != TW_OK) {
        return st;
    }
    if (hdr_len > iface->attr.max_hdr || len > iface->attr.max_zcopy || comp == NULL) {
        return TW_ERR_INVALID;
    }
    if (hdr_len + len <= iface->attr.max_short || len == 0 || iface->recv_rndv == NULL) {
        if (hdr_len + len > iface->attr.max_short) {
            return TW_ERR_INVALID;
        }
        return tw_verbs_send_eager(vb, peer, am_id, hdr, hdr_len, data, len, comp);
    }
    op = tw_verbs_op_new(hdr_len);
    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = TW_VERBS_OP_RTS;
    op->peer = peer;
    op->am_id = am_id;
    op->hdr_len = (uint16_t)hdr_len;
    op->comp = comp;
    op->data = data;
    op->len = len;
    op->inl_len = hdr_len;
    memcpy(op->bytes, hdr, hdr_len);
    return tw_verbs_submit(vb, op, len);
}

static tw_status_t tw_verbs_rma(tw_tl_iface_t *iface, uint8_t kind, int peer, const void *src,
                                void *dst, size_t len, uint64_t raddr, const void *rkey,
                                tw_tl_comp_t *comp)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_status_t st = tw_verbs_check_peer(vb, peer);
    tw_verbs_op_t *op;
    uint32_t key = 0;

    if (st != TW_OK) {
        return st;
    }
    if (comp == NULL || len > 0x7fffffffu ||
        (kind != TW_VERBS_OP_FLUSH &&
         tw_verbs_rkey_parse(rkey, (unsigned)vb->eps[peer].rdev, &key) != TW_OK)) {
        return TW_ERR_INVALID;
    }
    op = tw_verbs_op_new(0);
    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = kind;
    op->peer = peer;
    op->comp = comp;
    op->data = src;
    op->dst = dst;
    op->len = len;
    op->raddr = raddr;
    op->rkey = key;
    return tw_verbs_submit(vb, op, len);
}

static tw_status_t tw_verbs_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                                      uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    return tw_verbs_rma(iface, TW_VERBS_OP_PUT, peer, src, NULL, len, raddr, rkey, comp);
}

static tw_status_t tw_verbs_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                                      uint64_t raddr, const void *rkey, tw_tl_comp_t *comp)
{
    return tw_verbs_rma(iface, TW_VERBS_OP_GET, peer, NULL, dst, len, raddr, rkey, comp);
}

static tw_status_t tw_verbs_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp)
{
    return tw_verbs_rma(iface, TW_VERBS_OP_FLUSH, peer, NULL, NULL, 0, 0, NULL, comp);
}

/* ---- rendezvous, receive side ------------------------------------------------ */

static void tw_verbs_handle_free(tw_tl_rndv_t *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
    tw_free(h, sizeof(*h));
}

static void tw_verbs_send_fin(tw_verbs_dev_t *dev, int peer, uint64_t sid, tw_status_t st)
{
    tw_verbs_op_t *op = tw_verbs_op_new(0);

    if (op == NULL) {
        tw_error("verbs", "out of memory answering rank %d's rendezvous", peer);
        return; /* its send completes when it fails or closes */
    }
    op->kind = TW_VERBS_OP_FIN;
    op->peer = peer;
    op->sid = sid;
    op->status = st;
    atomic_fetch_add_explicit(&dev->vb->queued, 1, memory_order_relaxed);
    tw_verbs_enqueue(dev, op);
}

/* rndv_get on the device's engine. */
static void tw_verbs_rndv_apply(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp)
{
    tw_verbs_dev_t *dev = h->dev;
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_ep_t *ep = &vb->eps[h->peer];
    uint32_t lkey, rkey_unused;
    unsigned n;

    if (len > h->len) {
        len = h->len;
    }
    if (ep->failed || vb->closing || h->gen != ep->gen) {
        /* (Of a connection that was reset since: its sender's operation
         * completed when that connection failed.) */
        tw_verbs_handle_free(h);
        comp->cb(comp, vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED);
        return;
    }
    if (len == 0) {
        tw_verbs_send_fin(dev, h->peer, h->sid, TW_OK);
        tw_verbs_handle_free(h);
        comp->cb(comp, TW_OK);
        return;
    }
    if (!tw_verbs_reg(dev, dst, len, IBV_ACCESS_LOCAL_WRITE, &h->mr, &h->region, &lkey,
                      &rkey_unused)) {
        tw_verbs_send_fin(dev, h->peer, h->sid, TW_ERR_TRANSPORT);
        tw_verbs_handle_free(h);
        comp->cb(comp, TW_ERR_TRANSPORT);
        return;
    }
    h->comp = comp;
    h->st = TW_OK;
    size_t chunk = dev->max_msg > 0 && dev->max_msg < TW_VERBS_READ_CHUNK
                       ? (size_t)dev->max_msg
                       : (size_t)TW_VERBS_READ_CHUNK;
    n = (unsigned)((len + chunk - 1) / chunk);
    h->reads_left = n;
    tw_stats_add(vb->super.stats, TW_TL_STAT_RX_BYTES, len);
    for (unsigned k = 0; k < n; k++) {
        size_t off = (size_t)k * chunk;
        tw_verbs_op_t *op = tw_verbs_op_new(0);
        if (op == NULL) {
            /* Account for the reads never made; the last completion ends it. */
            h->reads_left -= n - k - 1; /* this read's share ends it below */
            tw_verbs_read_done(dev, h, TW_ERR_NOMEM);
            break;
        }
        op->kind = TW_VERBS_OP_READ;
        op->peer = h->peer;
        op->rndv = h;
        op->dst = (unsigned char *)dst + off;
        op->len = TW_MIN(len - off, chunk);
        op->raddr = h->raddr + off;
        op->rkey = h->rkey;
        atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_verbs_enqueue(dev, op);
    }
}

/* A read of handle @p h completed with @p st. */
static void tw_verbs_read_done(tw_verbs_dev_t *dev, tw_tl_rndv_t *h, tw_status_t st)
{
    if (st != TW_OK && h->st == TW_OK) {
        h->st = st;
    }
    if (--h->reads_left > 0) {
        return;
    }
    tw_tl_comp_t *comp = h->comp;
    tw_status_t fst = h->st;
    if (h->mr != NULL) {
        (void)ibv_dereg_mr(h->mr);
    }
    if (h->region != NULL) {
        tw_verbs_rcache_put(&dev->vb->rcache, h->region);
    }
    if (!dev->vb->eps[h->peer].failed && h->gen == dev->vb->eps[h->peer].gen) {
        tw_verbs_send_fin(dev, h->peer, h->sid, fst); /* the sender's op completes so */
    }
    tw_verbs_handle_free(h);
    comp->cb(comp, fst);
}

static TW_TLS tw_tl_rndv_t *tw_verbs_announcing;

static void tw_verbs_rndv_apply_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tl_rndv_t *h = data;

    (void)arg, (void)u64;
    tw_verbs_rndv_apply(h, h->get_dst, h->get_len, h->get_comp);
}

static tw_status_t tw_verbs_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                                     tw_tl_comp_t *comp)
{
    tw_verbs_dev_t *dev = h->dev;
    tw_pe_cmd_t cmd = {.fn = tw_verbs_rndv_apply_cmd, .arg = dev, .data = h};

    (void)iface;
    if (tw_verbs_announcing == h || tw_pe_is_owner(dev->pe)) {
        tw_verbs_rndv_apply(h, dst, len, comp);
        return TW_OK;
    }
    h->get_dst = dst;
    h->get_len = len;
    h->get_comp = comp;
    tw_pe_hand_over(dev->pe, &cmd); /* never fails: the sender waits for it */
    return TW_OK;
}

/* ---- failure ------------------------------------------------------------------- */

/* Fail @p ep's peer: for good (@p why TW_ERR_PEER_FAILED, or TW_OK: it
 * left; TW_ERR_CANCELED while closing), or for now (TW_ERR_TRANSPORT: the
 * path is down; the endpoint is reset once its QP flushed,
 * tw_verbs_reset_check). Either way its QP goes to error, what is queued
 * or waits for it completes TW_ERR_PEER_FAILED, and peer_down runs with
 * @p why. @p tell: send it DOWN (for good) or RESET (for now, unless our
 * port is down). Thread: engine. */
static void tw_verbs_fail_peer(tw_verbs_ep_t *ep, tw_status_t why, const char *what, bool tell)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;
    tw_status_t st = vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED;
    bool fornow = why == TW_ERR_TRANSPORT && !vb->closing;

    if (ep->failed) {
        return;
    }
    ep->failed = true;
    ep->transient = fornow;
    atomic_store_explicit(&vb->down[ep->peer], fornow ? TW_VERBS_DOWN_FOR_NOW : TW_VERBS_DOWN_GONE,
                          memory_order_release);
    if (ep->ready) {
        dev->nready--;
    }
    tw_verbs_conn_unwatch(ep);
    tw_verbs_timer_update(dev);
    if (why == TW_OK) {
        tw_debug("verbs", "rank %d left the job", ep->peer);
    } else if (fornow) {
        tw_warn("verbs",
                "%s: rank %d is down for now: %s; its operations complete with "
                "TW_ERR_PEER_FAILED, new ones are refused (TW_ERR_TRANSPORT) until its "
                "connection is reset (and the port up), then connect again",
                dev->name, ep->peer, what);
    } else if (!vb->closing) {
        tw_error("verbs",
                 "%s: rank %d failed: %s; its operations complete with "
                 "TW_ERR_PEER_FAILED",
                 dev->name, ep->peer, what);
    }
    if (fornow) {
        ep->fail_ns = tw_time_ns();
        ep->stuck = false;
        dev->nresets++;
    }
    if (tell && why != TW_OK && ep->qp != NULL &&
        (!fornow || tw_verbs_port_state(dev) == TW_VERBS_PORT_UP)) {
        tw_verbs_conn_send(ep, fornow ? TW_VERBS_C_RESET : TW_VERBS_C_DOWN);
    }
    if (ep->qp != NULL) {
        /* Whatever is posted flushes: each completes as it comes back. */
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        (void)ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
    }
    while (ep->head != NULL) {
        tw_verbs_op_t *op = ep->head;
        ep->head = op->next;
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
        tw_verbs_op_abort(dev, op, st);
    }
    ep->tail = NULL;
    while (ep->flushes != NULL) {
        tw_verbs_op_t *op = ep->flushes;
        ep->flushes = op->next;
        op->comp->cb(op->comp, st);
        tw_verbs_op_free(op);
    }
    /* Rendezvous sends waiting for its FIN. */
    for (uint32_t i = 0; i < dev->nrsends; i++) {
        tw_verbs_rsend_t *s = &dev->rsends[i];
        if (s->comp != NULL && s->peer == ep->peer) {
            (void)tw_verbs_rsend_done(dev, (uint64_t)s->gen << 32 | i, ep->peer, st);
        }
    }
    /* Its announced messages: rndv_get finds the peer failed (or, after a
     * reset, a handle of an older connection); reads in flight complete
     * as their work requests flush. */
    if (vb->super.peer_down != NULL && !vb->closing) {
        vb->super.peer_down(vb->super.peer_down_arg, ep->peer, why);
    }
}

/* A peer failed for now turns out to be gone for good (it told us, or
 * the device died): no reset, sends fail with TW_ERR_PEER_FAILED. peer_down
 * does not run again (it ran once for this connection: the runtime's error
 * handler must not see one failure twice); rel's probes are refused.
 * Thread: engine. */
static void tw_verbs_ep_final(tw_verbs_ep_t *ep, const char *what)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;

    if (!ep->failed || !ep->transient) {
        return;
    }
    ep->transient = false;
    dev->nresets--;
    atomic_store_explicit(&vb->down[ep->peer], TW_VERBS_DOWN_GONE, memory_order_release);
    if (vb->closing) {
        return;
    }
    tw_error("verbs", "%s: rank %d (down for now) failed for good: %s", dev->name, ep->peer, what);
}

/* Back to "not connected" (a peer failed for now whose QP flushed): the
 * QP and address handle go (the port may come back with another GID
 * index), our generation grows, and from the peer only an endpoint newer
 * than the one we were connected to is heard. The next operation for the
 * peer connects again. Thread: engine. */
static void tw_verbs_ep_reset(tw_verbs_ep_t *ep)
{
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_iface_t *vb = dev->vb;

    if (ep->qp != NULL) {
        uint32_t qpn = ep->qp->qp_num;
        int rc = ibv_destroy_qp(ep->qp);
        if (rc != 0) {
            /* Leaked, not reused: the new connection gets a QP of its own. */
            tw_warn("verbs", "%s: cannot destroy the old QP to rank %d: %s", dev->name, ep->peer,
                    strerror(rc));
        }
        tw_verbs_qpn_del(dev, qpn);
        ep->qp = NULL;
    }
    if (ep->ah != NULL) {
        (void)ibv_destroy_ah(ep->ah);
        ep->ah = NULL;
    }
    ep->state = TW_VERBS_EP_IDLE;
    ep->ready = false;
    ep->failed = false;
    ep->transient = false;
    ep->stuck = false;
    ep->ping_ns = 0;
    if (ep->rgen != 0) {
        ep->rgen_min = ep->rgen + 1;
    }
    ep->rgen = 0;
    ep->rqpn = ep->rpsn = 0;
    ep->gen = ep->gen == UINT32_MAX ? 1 : ep->gen + 1;
    dev->nresets--;
    atomic_store_explicit(&vb->down[ep->peer], TW_VERBS_DOWN_NO, memory_order_release);
    tw_debug("verbs", "%s: rank %d: connection reset (generation %u): the next send connects",
             dev->name, ep->peer, ep->gen);
}

/* Reset the peers failed for now whose QP has nothing left to flush.
 * Thread: engine. */
static void tw_verbs_reset_check(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;
    uint64_t now = 0;

    if (dev->nresets == 0 || vb->closing) {
        return;
    }
    for (int p = 0; p < vb->super.size && dev->nresets > 0; p++) {
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev || !ep->failed || !ep->transient) {
            continue;
        }
        if (ep->qp == NULL || ep->sq.posted == ep->sq.done) {
            tw_verbs_ep_reset(ep);
            continue;
        }
        now = now != 0 ? now : tw_time_ns();
        if (!ep->stuck && now - ep->fail_ns > TW_VERBS_CLOSE_NS) {
            ep->stuck = true;
            tw_warn("verbs",
                    "%s: the QP to rank %d has not flushed %llu work requests in %.1f s: it "
                    "stays down until it does",
                    dev->name, p, (unsigned long long)(ep->sq.posted - ep->sq.done),
                    (double)(now - ep->fail_ns) / 1e9);
        }
    }
}

/* Device-wide faults (device, SRQ or CQ fatal): every peer on the device
 * fails for good. Thread: the device's engine (the event thread hands it
 * over with a command). */
static atomic_ulong tw_verbs_lost_ops;

unsigned long tw_verbs_test_lost_ops(void)
{
    return atomic_load_explicit(&tw_verbs_lost_ops, memory_order_relaxed);
}

/* The CQ is gone (CQ_ERR, DEVICE_FATAL): no completion comes for what is
 * in the send queues, so each posted work request completes here, as a
 * flush would have -- exactly once, as every other path. Thread: engine. */
static void tw_verbs_dev_cq_lost(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;
    unsigned long n = 0;

    dev->cq_lost = true;
    for (int p = 0; p < vb->super.size; p++) {
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev) {
            continue;
        }
        while (ep->posted != NULL) {
            struct ibv_wc wc = {.wr_id = (uint64_t)(uintptr_t)ep->posted,
                                .status = IBV_WC_WR_FLUSH_ERR,
                                .qp_num = ep->qp != NULL ? ep->qp->qp_num : 0};
            tw_verbs_wc(dev, &wc); /* takes it off the list */
            n++;
        }
    }
    atomic_fetch_add_explicit(&tw_verbs_lost_ops, n, memory_order_relaxed);
    if (n > 0) {
        tw_warn("verbs", "%s: completed %lu posted work request(s) that its lost CQ never will",
                dev->name, n);
    }
}

void tw_verbs_dev_fatal(tw_verbs_dev_t *dev, const char *what, bool cq_lost)
{
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev || p == vb->super.rank) {
            continue;
        }
        tw_verbs_fail_peer(&vb->eps[p], TW_ERR_PEER_FAILED, what, false);
        tw_verbs_ep_final(&vb->eps[p], what);
    }
    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
    dev->fatal = true;
    if (cq_lost && !dev->cq_lost) {
        tw_verbs_dev_cq_lost(dev);
    }
    tw_verbs_timer_update(dev);
}

/* A device-wide fault the async thread flagged. Thread: engine. */
static void tw_verbs_lost_check(tw_verbs_dev_t *dev)
{
    int kind = atomic_load_explicit(&dev->lost_kind, memory_order_acquire);

    if (TW_LIKELY(kind == 0) || (dev->fatal && (kind < TW_VERBS_LOST_CQ || dev->cq_lost))) {
        return;
    }
    tw_verbs_dev_fatal(dev, atomic_load_explicit(&dev->lost_what, memory_order_acquire),
                       kind >= TW_VERBS_LOST_CQ);
    tw_verbs_reset_check(dev);
}

void tw_verbs_dev_lost(tw_verbs_dev_t *dev, int kind, const char *what)
{
    int old = atomic_load_explicit(&dev->lost_kind, memory_order_relaxed);

    atomic_store_explicit(&dev->lost_what, what, memory_order_relaxed);
    while (old < kind &&
           !atomic_compare_exchange_weak_explicit(&dev->lost_kind, &old, kind, memory_order_release,
                                                  memory_order_relaxed)) {
    }
    tw_pe_wake(dev->pe);
}

/* The port went down (PORT_ERR): every peer on the device is down for now;
 * nothing connects until tw_verbs_port_up. Thread: the device's engine. */
void tw_verbs_port_down(tw_verbs_dev_t *dev, const char *what)
{
    tw_verbs_iface_t *vb = dev->vb;

    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
    tw_verbs_timer_update(dev);
    for (int p = 0; p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev || p == vb->super.rank) {
            continue;
        }
        tw_verbs_fail_peer(&vb->eps[p], dev->fatal ? TW_ERR_PEER_FAILED : TW_ERR_TRANSPORT, what,
                           false);
    }
    tw_verbs_reset_check(dev);
}

/* The UD QP back in RTS, when it is not (rxe moves it to error when a
 * datagram is posted while the netdev is down): through RESET, which
 * drops what was posted -- completions of that still coming carry the
 * old epoch and are ignored -- then the receives are posted again and the
 * send buffers are all free. Thread: engine. */
static bool tw_verbs_ud_up(tw_verbs_dev_t *dev);

static bool tw_verbs_ud_recover(tw_verbs_dev_t *dev)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = ibv_query_qp(dev->ud, &a, IBV_QP_STATE, &ia);

    if (rc == 0 && a.qp_state == IBV_QPS_RTS) {
        return true;
    }
    if (rc != 0) {
        tw_error("verbs", "%s: cannot query the UD QP: %s", dev->name, strerror(rc));
        return false;
    }
    tw_info("verbs", "%s: the UD QP is in state %d: bringing it back", dev->name, (int)a.qp_state);
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
    rc = ibv_modify_qp(dev->ud, &a, IBV_QP_STATE);
    if (rc != 0) {
        tw_error("verbs", "%s: cannot reset the UD QP: %s", dev->name, strerror(rc));
        return false;
    }
    dev->ud_epoch = (dev->ud_epoch + 1) & 0xffffffu;
    dev->nud_tx_free = 0;
    for (unsigned i = 0; i < TW_VERBS_UD_TX; i++) {
        dev->ud_tx_free[dev->nud_tx_free++] = i;
    }
    return tw_verbs_ud_up(dev);
}

/* Is our GID (value and type) at index @p i of our port? */
static bool tw_verbs_gid_is_ours(tw_verbs_dev_t *dev, int i)
{
    struct ibv_gid_entry e;

    if (ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)i, &e, 0) != 0) {
        return false;
    }
    return memcmp(e.gid.raw, dev->gid.raw, 16) == 0 &&
           (dev->gid_type < 0 || (int)e.gid_type == dev->gid_type);
}

/* Is the port usable again: active, and our address (the GID, or on
 * InfiniBand the LID, that peers got at startup) still ours? A GID that
 * came back at another index is used there. Thread: engine. */
static void tw_verbs_port_check(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;
    struct ibv_port_attr pa;
    int found = -1;

    dev->port_check_ns = tw_time_ns() + 100ull * 1000 * 1000;
    if (ibv_query_port(dev->ctx, dev->port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
        return; /* not yet */
    }
    if (dev->link == TW_VERBS_LINK_IB && pa.lid != dev->lid) {
        tw_error("verbs",
                 "%s port %u came back with LID %u, not %u: peers cannot reach it, it stays "
                 "down",
                 dev->name, dev->port, pa.lid, dev->lid);
        atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
        tw_verbs_timer_update(dev);
        return;
    }
    if (tw_verbs_gid_is_ours(dev, dev->gid_index)) {
        found = dev->gid_index;
    }
    for (int i = 0; found < 0 && i < TW_MIN(pa.gid_tbl_len, TW_VERBS_GID_SCAN); i++) {
        if (tw_verbs_gid_is_ours(dev, i)) {
            found = i;
        }
    }
    if (found < 0) {
        return; /* our GID is not back (yet): look again */
    }
    if (found != dev->gid_index) {
        tw_info("verbs", "%s port %u: our GID is at index %d now (was %d)", dev->name, dev->port,
                found, dev->gid_index);
        dev->gid_index = found;
        for (int p = 0; p < vb->super.size; p++) {
            if (vb->eps[p].dev == dev && vb->eps[p].ah_attr.is_global) {
                vb->eps[p].ah_attr.grh.sgid_index = (uint8_t)found;
            }
        }
    }
    if (!tw_verbs_ud_recover(dev)) {
        tw_error("verbs",
                 "%s port %u is active again, but connections cannot be set up: it "
                 "stays down",
                 dev->name, dev->port);
        atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
        tw_verbs_timer_update(dev);
        return;
    }
    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_UP, memory_order_release);
    tw_verbs_timer_update(dev);
    tw_info("verbs", "%s port %u is usable again: its peers connect again on their next send",
            dev->name, dev->port);
}

/* PORT_ACTIVE: the port may be used again once our address is back
 * (tw_verbs_port_check, again every 100 ms until it is). Peers down for
 * now connect again on their next operation (a rel probe). Thread: the
 * device's engine. */
void tw_verbs_port_up(tw_verbs_dev_t *dev)
{
    if (dev->fatal || tw_verbs_port_state(dev) != TW_VERBS_PORT_DOWN) {
        return;
    }
    atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_WAIT, memory_order_release);
    tw_verbs_port_check(dev);
    tw_verbs_timer_update(dev);
}

/* How a peer fails for error completion @p s on its QP. Errors of the
 * path are for now: no answer (retries exceeded: the peer's port may be
 * down), a local QP operation error (rxe's when the route under the port
 * went away -- before ibv_query_port shows the port down), a flush as the
 * first sign; the connection made again decides (a dead peer does not
 * answer it: for good then, and rel's keepalive judges it anyway). Errors
 * the peer answered with, or of our own memory, are for good unless our
 * port is down. Thread: engine. */
static tw_status_t tw_verbs_wc_why(tw_verbs_dev_t *dev, enum ibv_wc_status s)
{
    if (dev->fatal) {
        return TW_ERR_PEER_FAILED;
    }
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
        return TW_ERR_TRANSPORT;
    default:
        return tw_verbs_qp_err_why(dev);
    }
}

/* How a peer fails for an error on its QP: for now while our port is
 * down (a work request fails when the port under it went away, often
 * before PORT_ERR reached this engine; the port is then marked down here
 * already), else for good. Thread: engine. */
static tw_status_t tw_verbs_qp_err_why(tw_verbs_dev_t *dev)
{
    struct ibv_port_attr pa;

    if (dev->fatal) {
        return TW_ERR_PEER_FAILED;
    }
    if (tw_verbs_port_state(dev) != TW_VERBS_PORT_UP) {
        return TW_ERR_TRANSPORT;
    }
    if (ibv_query_port(dev->ctx, dev->port, &pa) == 0 && pa.state != IBV_PORT_ACTIVE) {
        tw_debug("verbs", "%s port %u is down (PORT_ERR on its way)", dev->name, dev->port);
        atomic_store_explicit(&dev->port_state, TW_VERBS_PORT_DOWN, memory_order_release);
        tw_verbs_timer_update(dev);
        return TW_ERR_TRANSPORT;
    }
    return TW_ERR_PEER_FAILED;
}

void tw_verbs_qp_fatal(tw_verbs_dev_t *dev, uint32_t qp_num, const char *what)
{
    int peer = tw_verbs_qpn_get(dev, qp_num);

    /* For good -- unless our port is down: then that is why, and the QP
     * goes with the reset anyway. */
    if (peer >= 0 && dev->vb->eps[peer].dev == dev && !dev->vb->eps[peer].failed) {
        tw_verbs_fail_peer(&dev->vb->eps[peer], tw_verbs_qp_err_why(dev), what, true);
    }
}

/* An async event handed to the device's engine (tw_verbs_dev_report). */
static void tw_verbs_event_cmd(void *arg, void *data, uint64_t u64)
{
    tw_verbs_dev_t *dev = arg;
    const char *what = data;

    if (u64 == UINT64_MAX) {
        tw_verbs_dev_fatal(dev, what, false);
    } else if (u64 == UINT64_MAX - 1) {
        tw_verbs_srq_low(dev);
    } else if (u64 == UINT64_MAX - 2) {
        tw_verbs_port_down(dev, what);
    } else if (u64 == UINT64_MAX - 3) {
        tw_verbs_port_up(dev);
    } else {
        tw_verbs_qp_fatal(dev, (uint32_t)u64, what);
    }
    tw_verbs_reset_check(dev);
}

tw_status_t tw_verbs_dev_report(tw_verbs_dev_t *dev, int64_t qp_num, const char *what)
{
    tw_pe_cmd_t cmd = {.fn = tw_verbs_event_cmd,
                       .arg = dev,
                       .data = (void *)(uintptr_t)what,
                       .u64 = qp_num == TW_VERBS_REPORT_SRQ         ? UINT64_MAX - 1
                              : qp_num == TW_VERBS_REPORT_PORT_DOWN ? UINT64_MAX - 2
                              : qp_num == TW_VERBS_REPORT_PORT_UP   ? UINT64_MAX - 3
                              : qp_num < 0                          ? UINT64_MAX
                                                                    : (uint64_t)qp_num};

    return tw_pe_submit(dev->pe, &cmd);
}

/* ---- the async event thread's handler -------------------------------------------- */

/* Arm the SRQ's limit event: a quarter of the receives left. Engine owner
 * (or before the engine runs). */
static void tw_verbs_srq_arm(tw_verbs_dev_t *dev)
{
    struct ibv_srq_attr a = {.srq_limit = TW_MAX(dev->rx_depth / 4, 1u)};
    int rc = ibv_modify_srq(dev->srq, &a, IBV_SRQ_LIMIT);

    if (rc != 0) {
        tw_debug("verbs", "%s: no SRQ limit event (ibv_modify_srq: %s): refills by count only",
                 dev->name, strerror(rc));
    }
}

/* SRQ_LIMIT_REACHED: receives ran low between two refills (a burst faster
 * than the engine's passes): refill now and re-arm (the event fires once
 * per arming). Thread: the device's engine. */
static void tw_verbs_srq_low(tw_verbs_dev_t *dev)
{
    tw_debug("verbs", "%s: SRQ limit reached: refilling", dev->name);
    tw_verbs_rx_refill(dev, true);
    tw_verbs_srq_arm(dev);
}

/* An async event of @p arg's device, on the async event thread: log it and
 * hand what it asks for to the device's engine. Acknowledged by the
 * thread when this returns. */
static void tw_verbs_async_event(void *arg, const struct ibv_async_event *ev)
{
    tw_verbs_dev_t *dev = arg;
    tw_va_action_t act = tw_va_classify(ev->event_type);
    const char *type = ibv_event_type_str(ev->event_type);
    int64_t what_qp = -1;
    const char *what = NULL;

    switch (act) {
    case TW_VA_PORT_DOWN:
        if (ev->element.port_num != dev->port) {
            return;
        }
        what = "its port went down (IBV_EVENT_PORT_ERR)";
        break;
    case TW_VA_PORT_UP:
        if (ev->element.port_num != dev->port) {
            return;
        }
        tw_info("verbs", "%s: async event %s: port %u is active again", dev->name, type, dev->port);
        what_qp = TW_VERBS_REPORT_PORT_UP;
        break;
    case TW_VA_DEVICE_FATAL:
    case TW_VA_SRQ_FATAL:
    case TW_VA_CQ_FATAL:
        /* Through a flag the engine looks at on every pass, not the lane:
         * this must not be lost. The CQ's loss also means the posted work
         * requests never complete by themselves. */
        tw_warn("verbs", "%s: async event %s: %s", dev->name, type, tw_va_action_name(act));
        tw_verbs_dev_lost(dev, act == TW_VA_SRQ_FATAL ? TW_VERBS_LOST_SRQ : TW_VERBS_LOST_CQ,
                          act == TW_VA_DEVICE_FATAL ? "the device failed (IBV_EVENT_DEVICE_FATAL)"
                          : act == TW_VA_CQ_FATAL   ? "the device's CQ failed (IBV_EVENT_CQ_ERR)"
                                                  : "the device's SRQ failed (IBV_EVENT_SRQ_ERR)");
        return;
    case TW_VA_QP_FATAL:
        if (ev->element.qp == NULL || ev->element.qp == dev->ud) {
            what = "its connection QP failed";
        } else {
            what_qp = ev->element.qp->qp_num;
            what = ev->event_type == IBV_EVENT_QP_FATAL ? "its QP failed (IBV_EVENT_QP_FATAL)"
                   : ev->event_type == IBV_EVENT_QP_REQ_ERR
                       ? "its QP failed (IBV_EVENT_QP_REQ_ERR)"
                       : "its QP failed (IBV_EVENT_QP_ACCESS_ERR)";
        }
        break;
    case TW_VA_SRQ_LIMIT:
        what_qp = TW_VERBS_REPORT_SRQ;
        break;
    case TW_VA_IGNORE:
        tw_debug("verbs", "%s: async event %s", dev->name, type);
        return;
    }
    if (what != NULL) {
        tw_warn("verbs", "%s: async event %s: %s", dev->name, type, tw_va_action_name(act));
        if (what_qp == -1 && tw_va_peer_status(act) == TW_ERR_TRANSPORT) {
            what_qp = TW_VERBS_REPORT_PORT_DOWN; /* the device's peers: down for now */
        }
    }
    /* The engine's lane may be full for a moment: this thread can wait. */
    for (int i = 0; tw_verbs_dev_report(dev, what_qp, what) == TW_ERR_AGAIN; i++) {
        if (i == 10000) {
            tw_error("verbs", "%s: cannot hand async event %s to the engine", dev->name, type);
            return;
        }
        usleep(100);
    }
}

/* ---- completions --------------------------------------------------------------- */

/* The frame at @p buf (of @p len bytes left in the receive): returns its
 * size, or 0 when it was bad (the peer has failed). */
static size_t tw_verbs_rx_frame(tw_verbs_dev_t *dev, tw_verbs_ep_t *ep, const unsigned char *buf,
                                size_t len)
{
    tw_verbs_iface_t *vb = dev->vb;
    tw_verbs_frame_t f;
    const char *why = "?";

    if (tw_verbs_frame_parse(buf, len, TW_VERBS_MAX_HDR, TW_VERBS_MAX_MSG, &f, &why) != TW_OK) {
        tw_stats_inc(vb->super.stats, TW_TL_STAT_BAD_FRAMES);
        tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, why, true);
        return 0;
    }
    switch (f.type) {
    case TW_VERBS_F_AM:
        tw_stats_inc(vb->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(vb->super.stats, TW_TL_STAT_RX_BYTES, f.len);
        vb->super.recv(vb->super.recv_arg, ep->peer, f.am_id, buf + f.hdr_off, f.hdr_len,
                       buf + f.data_off, (size_t)f.len);
        break;
    case TW_VERBS_F_RTS: {
        tw_tl_rndv_t *h;
        if (vb->super.recv_rndv == NULL) {
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "a rendezvous nobody can take", true);
            return 0;
        }
        h = tw_calloc(1, sizeof(*h));
        if (h == NULL) {
            tw_error("verbs", "out of memory taking a rendezvous from rank %d", ep->peer);
            tw_verbs_send_fin(dev, ep->peer, f.sid, TW_ERR_NOMEM);
            return f.total; /* its sender learns; the frames after it still count */
        }
        h->dev = dev;
        h->peer = ep->peer;
        h->gen = ep->gen;
        h->raddr = f.raddr;
        h->rkey = f.rkey;
        h->len = f.len;
        h->sid = f.sid;
        h->next = dev->handles.next;
        h->prev = &dev->handles;
        h->next->prev = h;
        dev->handles.next = h;
        tw_stats_inc(vb->super.stats, TW_TL_STAT_RX_MSGS);
        tw_tl_rndv_t *outer = tw_verbs_announcing;
        tw_verbs_announcing = h;
        vb->super.recv_rndv(vb->super.recv_arg, ep->peer, f.am_id, buf + f.hdr_off, f.hdr_len,
                            (size_t)f.len, h);
        tw_verbs_announcing = outer;
        break;
    }
    case TW_VERBS_F_FIN:
        if (!tw_verbs_rsend_done(dev, f.sid, ep->peer, (tw_status_t)f.status)) {
            tw_stats_inc(vb->super.stats, TW_TL_STAT_BAD_FRAMES);
            tw_verbs_fail_peer(ep, TW_ERR_PEER_FAILED, "FIN for no rendezvous of ours", true);
        }
        break;
    case TW_VERBS_F_BYE:
        ep->left = true;
        tw_verbs_fail_peer(ep, TW_OK, "left", false);
        break;
    default:
        break;
    }
    return f.total;
}

static void tw_verbs_wc(tw_verbs_dev_t *dev, const struct ibv_wc *wc)
{
    tw_verbs_iface_t *vb = dev->vb;
    unsigned tag = (unsigned)(wc->wr_id & 3u);
    uint32_t idx = (uint32_t)(wc->wr_id >> 2);

    dev->events++;
    switch (tag) {
    case TW_VERBS_WR_RECV: {
        int peer = tw_verbs_qpn_get(dev, wc->qp_num);
        dev->rx_posted--;
        if (wc->status == IBV_WC_SUCCESS && peer >= 0) {
            tw_verbs_ep_t *ep = &vb->eps[peer];
            if (!ep->failed) {
                if (!ep->ready && ep->state == TW_VERBS_EP_CONNECTED) {
                    tw_verbs_set_ready(ep); /* its first frame: it is connected */
                }
                ep->last_ns = tw_time_ns();
                /* One or more frames (coalesced by the sender). */
                const unsigned char *buf = tw_verbs_buf(dev, idx);
                for (size_t off = 0, n; off < wc->byte_len && !ep->failed; off += n) {
                    n = tw_verbs_rx_frame(dev, ep, buf + off, wc->byte_len - off);
                    if (n == 0) {
                        break;
                    }
                }
            }
        } else if (wc->status != IBV_WC_SUCCESS && peer >= 0 && !vb->closing &&
                   !vb->eps[peer].failed) {
            char what[96];
            snprintf(what, sizeof(what), "receive completed with %s", tw_verbs_wc_str(wc->status));
            tw_verbs_fail_peer(&vb->eps[peer], tw_verbs_wc_why(dev, wc->status), what, true);
        }
        dev->rx_free[dev->nrx_free++] = idx;
        break;
    }
    case TW_VERBS_WR_UD_RECV:
        if ((idx >> 8) != dev->ud_epoch) {
            break; /* posted before the UD QP was reset: re-posted since */
        }
        idx &= 0xffu;
        if (wc->status == IBV_WC_SUCCESS && wc->byte_len >= TW_VERBS_GRH) {
            tw_verbs_conn_recv(dev, dev->ud_pool + (size_t)idx * TW_VERBS_UD_BUF + TW_VERBS_GRH,
                               wc->byte_len - TW_VERBS_GRH);
        }
        if (!vb->closing && !tw_verbs_ud_post_recv(dev, idx)) {
            tw_warn("verbs", "%s: cannot re-post a UD receive", dev->name);
        }
        break;
    case TW_VERBS_WR_UD_SEND:
        if ((idx >> 8) == dev->ud_epoch) { /* else: freed when the UD QP was reset */
            dev->ud_tx_free[dev->nud_tx_free++] = idx & 0xffu;
        }
        break;
    default: {
        tw_verbs_op_t *op = (tw_verbs_op_t *)(uintptr_t)wc->wr_id;
        tw_verbs_ep_t *ep = &vb->eps[op->peer];
        tw_status_t st = TW_OK;
        if (op->pprev != NULL) {
            op->pprev->pnext = op->pnext;
        } else {
            ep->posted = op->pnext;
        }
        if (op->pnext != NULL) {
            op->pnext->pprev = op->pprev;
        }
        if (!tw_verbs_credits_put(&ep->sq)) {
            tw_error("verbs", "%s: a completion nobody posted on rank %d's QP", dev->name,
                     op->peer);
        }
        if (wc->status != IBV_WC_SUCCESS) {
            st = vb->closing ? TW_ERR_CANCELED : TW_ERR_PEER_FAILED;
            if (!ep->failed) {
                char what[96];
                snprintf(what, sizeof(what), "a work request completed with %s",
                         tw_verbs_wc_str(wc->status));
                tw_verbs_fail_peer(ep, ep->left ? TW_OK : tw_verbs_wc_why(dev, wc->status), what,
                                   !ep->left);
            }
        }
        tw_verbs_op_release(dev, op);
        if (st == TW_OK) {
            ep->last_ns = tw_time_ns();
        }
        tw_verbs_batch_done(op, st);
        switch (op->kind) {
        case TW_VERBS_OP_RTS:
            if (st != TW_OK) {
                (void)tw_verbs_rsend_done(dev, op->sid & ~(1ull << 63), op->peer, st);
            }
            break;
        case TW_VERBS_OP_READ:
            tw_verbs_read_done(dev, op->rndv, st);
            break;
        default:
            if (op->comp != NULL) {
                op->comp->cb(op->comp, st);
            }
            break;
        }
        tw_verbs_op_free(op);
        if (ep->flushes != NULL) {
            tw_verbs_flush_check(ep);
        }
        if (ep->head != NULL) {
            tw_verbs_ep_drain(ep);
        }
        break;
    }
    }
}

static int tw_verbs_poll_cq(tw_verbs_dev_t *dev)
{
    struct ibv_wc wc[TW_VERBS_CQ_BATCH];
    int total = 0, n;

    do {
        n = ibv_poll_cq(dev->cq, TW_VERBS_CQ_BATCH, wc);
        if (n < 0) {
            tw_error("verbs", "%s: polling the CQ failed", dev->name);
            break;
        }
        for (int i = 0; i < n; i++) {
            tw_verbs_wc(dev, &wc[i]);
        }
        total += n;
    } while (n == TW_VERBS_CQ_BATCH && total < 16 * TW_VERBS_CQ_BATCH);
    return total;
}

static int tw_verbs_dev_progress(void *arg)
{
    tw_verbs_dev_t *dev = arg;
    struct ibv_cq *ecq;
    void *ectx;

    dev->events = 0;
    tw_verbs_lost_check(dev);
    /* Events are taken even from a lost CQ (its channel would stay
     * readable): it is not polled nor armed again. */
    while (ibv_get_cq_event(dev->chan, &ecq, &ectx) == 0) {
        ibv_ack_cq_events(ecq, 1);
        dev->armed = false;
    }
    if (!dev->cq_lost) {
        (void)tw_verbs_poll_cq(dev);
        tw_verbs_rx_refill(dev, false);
    }
    if (dev->tx_starved && dev->ntx_free > 0) {
        /* Buffers came back through other peers' completions. */
        tw_verbs_iface_t *vb = dev->vb;
        dev->tx_starved = false;
        for (int p = 0; p < vb->super.size; p++) {
            if (vb->eps[p].dev != dev) {
                continue;
            }
            if (vb->eps[p].head != NULL) {
                tw_verbs_ep_drain(&vb->eps[p]);
            }
        }
    }
    if (dev->timer_ns > 0) {
        uint64_t exp;
        if (read(dev->timer_fd, &exp, sizeof(exp)) < 0) {
            /* EAGAIN: not due; the checks below are cheap */
        }
        if (dev->conns != NULL) {
            tw_verbs_conn_tick(dev);
        }
        uint64_t now = tw_time_ns();
        if (tw_verbs_port_state(dev) == TW_VERBS_PORT_WAIT && now >= dev->port_check_ns) {
            tw_verbs_port_check(dev);
        }
        tw_verbs_liveness(dev, now);
    }
    if (!dev->armed && dev->cq != NULL && !dev->cq_lost) {
        if (ibv_req_notify_cq(dev->cq, 0) == 0) {
            dev->armed = true;
        }
        (void)tw_verbs_poll_cq(dev); /* what came before the arming */
        tw_verbs_rx_refill(dev, false);
    }
    tw_verbs_reset_check(dev); /* peers down for now whose QP flushed */
    return dev->events;
}

/* ---- iface ----------------------------------------------------------------------- */

static int tw_verbs_progress(tw_tl_iface_t *iface)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    int events = 0;

    if (!vb->threads) {
        for (int d = 0; d < vb->ndev; d++) {
            events += tw_pe_progress(vb->devs[d].pe);
        }
    }
    return events;
}

static tw_status_t tw_verbs_query(char *why, size_t why_len)
{
    tw_verbs_cfg_t cfg;
    struct ibv_device **list;
    int n = 0, usable = 0;
    char names[160] = "";

    tw_cfg_set_defaults(&tw_verbs_cfg_table, &cfg);
    if (tw_cfg_apply_env(&tw_verbs_cfg_table, &cfg) != TW_OK) {
        snprintf(why, why_len, "a TW_VERBS_* variable has a bad value");
        return TW_ERR_INVALID;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL || n == 0) {
        if (list == NULL) {
            snprintf(why, why_len,
                     "no RDMA device: ibv_get_device_list failed (%s: no RDMA support in "
                     "this kernel?)",
                     strerror(errno));
        } else {
            snprintf(why, why_len, "no RDMA device (ibv_get_device_list found none)");
        }
        if (list != NULL) {
            ibv_free_device_list(list);
        }
        return TW_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < n; i++) {
        int port;
        const char *name = ibv_get_device_name(list[i]);
        if (strlen(names) + strlen(name) + 2 < sizeof(names)) {
            strcat(names, names[0] != '\0' ? "," : "");
            strcat(names, name);
        }
        if (tw_cfg_list_has(cfg.devices, name, &port)) {
            usable++;
        }
    }
    ibv_free_device_list(list);
    if (usable == 0) {
        snprintf(why, why_len, "TW_VERBS_DEVICES='%s' names none of the RDMA devices here (%s)",
                 cfg.devices, names);
        return TW_ERR_UNSUPPORTED;
    }
    return TW_OK;
}

static bool tw_verbs_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    return peer != iface->rank && peer >= 0 && peer < iface->size && vb->eps[peer].rud_qpn != 0;
}

static tw_status_t tw_verbs_addr_pack_op(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_addr_t a = {.ndev = (uint8_t)vb->ndev,
                         .flags = vb->threads ? TW_VERBS_ADDR_FLAG_THREAD : 0};

    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_dev_t *dev = &vb->devs[d];
        memcpy(a.dev[d].gid, dev->gid.raw, 16);
        a.dev[d].lid = dev->lid;
        a.dev[d].port = dev->port;
        a.dev[d].link = dev->link;
        a.dev[d].ud_qpn = dev->ud->qp_num;
        a.dev[d].mtu = (uint8_t)dev->mtu;
    }
    return tw_verbs_addr_pack(&a, buf, cap, len_p);
}

static tw_status_t tw_verbs_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr,
                                         size_t len)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_ep_t *ep = &vb->eps[peer];
    tw_verbs_dev_t *dev = ep->dev;
    tw_verbs_addr_t a;
    const char *why = "?";
    const tw_verbs_addr_dev_t *r;

    if (tw_verbs_addr_parse(addr, len, &a, &why) != TW_OK) {
        tw_error("verbs", "rank %d published a bad verbs address: %s", peer, why);
        return TW_ERR_PROTOCOL;
    }
    /* The pair uses the same device index on both sides (a rail), chosen
     * by both ranks alike, so pairs spread over the devices. */
    ep->rdev = (uint8_t)((unsigned)(iface->rank + peer) % TW_MIN((unsigned)vb->ndev, a.ndev));
    ep->dev = dev = &vb->devs[ep->rdev];
    r = &a.dev[ep->rdev];
    if ((r->link == TW_VERBS_LINK_ETH) != (dev->link == TW_VERBS_LINK_ETH)) {
        tw_warn("verbs", "rank %d's device is on another link layer than %s: not reachable", peer,
                dev->name);
        return TW_OK;
    }
    memset(&ep->ah_attr, 0, sizeof(ep->ah_attr));
    ep->ah_attr.port_num = dev->port;
    ep->ah_attr.sl = 0;
    if (dev->link == TW_VERBS_LINK_ETH ||
        memcmp(r->gid, dev->gid.raw, 8) != 0 /* another subnet: route by GRH */) {
        ep->ah_attr.is_global = 1;
        memcpy(ep->ah_attr.grh.dgid.raw, r->gid, 16);
        ep->ah_attr.grh.sgid_index = (uint8_t)dev->gid_index;
        ep->ah_attr.grh.hop_limit = 64;
    }
    ep->ah_attr.dlid = r->lid;
    ep->rud_qpn = r->ud_qpn;
    ep->judge = (a.flags & TW_VERBS_ADDR_FLAG_THREAD) != 0;
    ep->mtu = TW_MIN(dev->mtu, (enum ibv_mtu)r->mtu);
    return TW_OK;
}

static void tw_verbs_ready(tw_tl_iface_t *iface)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    for (int d = 0; d < vb->ndev && vb->threads; d++) {
        if (tw_pe_start(vb->devs[d].pe) != TW_OK) {
            tw_warn("verbs",
                    "cannot start the progress thread of %s: the context's engine "
                    "drives it",
                    vb->devs[d].name);
            vb->threads = false;
        }
    }
}

static tw_status_t tw_verbs_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_verbs_iface_close(tw_tl_iface_t *iface);

static tw_status_t tw_verbs_mem_reg_op(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                                       size_t *key_len, void **handle);
static tw_status_t tw_verbs_mem_dereg_op(tw_tl_iface_t *iface, void *handle);

const tw_tl_ops_t tw_verbs_ops = {
    .name = "verbs",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_RNDV | TW_TL_CAP_PUT |
            TW_TL_CAP_GET | TW_TL_CAP_FLUSH | TW_TL_CAP_MEM_REG | TW_TL_CAP_OPT_IN,
    .cfg = &tw_verbs_cfg_table,
    .query = tw_verbs_query,
    .iface_open = tw_verbs_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_verbs_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_verbs_addr_pack_op,
    .addr_connect = tw_verbs_addr_connect,
    .ready = tw_verbs_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_verbs_reachable,
    .am_short = tw_verbs_am_short,
    .am_zcopy = tw_verbs_am_zcopy,
    .put_zcopy = tw_verbs_put_zcopy,
    .get_zcopy = tw_verbs_get_zcopy,
    .flush = tw_verbs_flush,
    .rndv_get = tw_verbs_rndv_get,
    .progress = tw_verbs_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_verbs_mem_reg_op,
    .mem_dereg = tw_verbs_mem_dereg_op,
};

/* ---- device setup ------------------------------------------------------------------ */

/* The UD QP (new, or just reset) to RTS, with every receive posted. */
static bool tw_verbs_ud_up(tw_verbs_dev_t *dev)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = dev->port, .qkey = dev->vb->qkey};
    int rc =
        ibv_modify_qp(dev->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);

    if (rc == 0) {
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
        rc = ibv_modify_qp(dev->ud, &a, IBV_QP_STATE);
    }
    if (rc == 0) {
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
        rc = ibv_modify_qp(dev->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    if (rc != 0) {
        tw_error("verbs", "%s: cannot bring the UD QP up: %s", dev->name, strerror(rc));
        return false;
    }
    for (unsigned i = 0; i < TW_VERBS_UD_RX; i++) {
        if (!tw_verbs_ud_post_recv(dev, i)) {
            tw_error("verbs", "%s: cannot post UD receives", dev->name);
            return false;
        }
    }
    return true;
}

/* Choose the GID: TW_VERBS_GID_INDEX, else on Ethernet the first
 * IPv4-mapped RoCE v2 GID of slots 0-15 (then any RoCE v2, then any
 * non-zero); on InfiniBand slot 0. */
static bool tw_verbs_pick_gid(tw_verbs_dev_t *dev, const struct ibv_port_attr *pa)
{
    int want = dev->vb->cfg.gid_index, best = -1, rank_best = 0;
    int scan = TW_MIN(pa->gid_tbl_len, TW_VERBS_GID_SCAN);

    if (want >= 0) {
        if (want >= pa->gid_tbl_len || ibv_query_gid(dev->ctx, dev->port, want, &dev->gid) != 0) {
            tw_error("verbs", "%s: TW_VERBS_GID_INDEX=%d is not a GID of port %u", dev->name, want,
                     dev->port);
            return false;
        }
        dev->gid_index = want;
        return true;
    }
    for (int i = 0; i < scan; i++) {
        struct ibv_gid_entry e;
        static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        int score;
        bool zero = true;

        if (ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)i, &e, 0) != 0) {
            continue;
        }
        for (int k = 0; k < 16; k++) {
            zero = zero && e.gid.raw[k] == 0;
        }
        if (zero) {
            continue;
        }
        if (dev->link == TW_VERBS_LINK_IB) {
            score = 1;
        } else if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
            score = memcmp(e.gid.raw, v4map, 12) == 0 ? 3 : 2;
        } else {
            score = 1;
        }
        if (score > rank_best) {
            rank_best = score;
            best = i;
            dev->gid = e.gid;
        }
        if (score == 3 || (dev->link == TW_VERBS_LINK_IB && score == 1)) {
            break;
        }
    }
    if (best < 0) {
        tw_error("verbs", "%s: port %u has no usable GID among indexes 0-%d", dev->name, dev->port,
                 scan - 1);
        return false;
    }
    dev->gid_index = best;
    return true;
}

static tw_status_t tw_verbs_dev_open(tw_verbs_iface_t *vb, tw_verbs_dev_t *dev,
                                     struct ibv_device *ibdev, int want_port,
                                     const tw_tl_params_t *params)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    tw_status_t st;
    int rc;

    dev->vb = vb;
    dev->timer_fd = -1;
    dev->handles.next = dev->handles.prev = &dev->handles;
    dev->rsend_free = UINT32_MAX;
    snprintf(dev->name, sizeof(dev->name), "%s", ibv_get_device_name(ibdev));
    dev->ctx = ibv_open_device(ibdev);
    if (dev->ctx == NULL) {
        tw_error("verbs", "cannot open %s: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    if ((rc = ibv_query_device(dev->ctx, &da)) != 0) {
        tw_error("verbs", "%s: ibv_query_device failed: %s", dev->name, strerror(rc));
        return TW_ERR_TRANSPORT;
    }
    for (int p = want_port > 0 ? want_port : 1; p <= da.phys_port_cnt; p++) {
        if (ibv_query_port(dev->ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
            dev->port = (uint8_t)p;
            break;
        }
        if (want_port > 0) {
            break;
        }
    }
    if (dev->port == 0) {
        tw_error("verbs", "%s: no active port%s", dev->name, want_port > 0 ? " (as named)" : "");
        return TW_ERR_TRANSPORT;
    }
    dev->link = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? TW_VERBS_LINK_ETH : TW_VERBS_LINK_IB;
    dev->lid = pa.lid;
    dev->mtu = pa.active_mtu;
    dev->max_msg = pa.max_msg_sz;
    if (!tw_verbs_pick_gid(dev, &pa)) {
        return TW_ERR_TRANSPORT;
    }
    {
        struct ibv_gid_entry e;
        dev->gid_type = ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)dev->gid_index, &e, 0) == 0
                            ? (int)e.gid_type
                            : -1;
    }
    if (dev->link == TW_VERBS_LINK_IB && dev->lid == 0) {
        tw_error("verbs", "%s: InfiniBand port %u has no LID (no subnet manager?)", dev->name,
                 dev->port);
        return TW_ERR_TRANSPORT;
    }
    dev->sq_depth = (uint32_t)TW_MIN(vb->cfg.sq_depth, (uint64_t)da.max_qp_wr);
    dev->rd_atomic = (uint32_t)TW_MIN(16, TW_MIN(da.max_qp_rd_atom, da.max_qp_init_rd_atom));
    if (dev->rd_atomic == 0) {
        dev->rd_atomic = 1;
    }
    dev->max_inline = TW_VERBS_INLINE_WANT;
    dev->rx_depth = (unsigned)TW_MIN(vb->cfg.rx_depth, (uint64_t)da.max_srq_wr);
    dev->pd = ibv_alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        tw_error("verbs", "%s: cannot allocate a PD: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    dev->qp_pd = dev->pd;
    if (vb->cfg.td) {
        struct ibv_td_init_attr ta = {0};
        dev->td = ibv_alloc_td(dev->ctx, &ta);
        if (dev->td != NULL) {
            struct ibv_parent_domain_init_attr pda = {.pd = dev->pd, .td = dev->td};
            struct ibv_pd *pdom = ibv_alloc_parent_domain(dev->ctx, &pda);
            if (pdom != NULL) {
                dev->qp_pd = pdom;
            } else {
                tw_debug("verbs", "%s: no parent domain (%m): QPs without a thread domain",
                         dev->name);
                (void)ibv_dealloc_td(dev->td);
                dev->td = NULL;
            }
        } else {
            tw_debug("verbs", "%s: no thread domains (%m): the provider keeps its QP locks",
                     dev->name);
        }
    }
    dev->chan = ibv_create_comp_channel(dev->ctx);
    if (dev->chan == NULL) {
        tw_error("verbs", "%s: cannot create a completion channel: %m", dev->name);
        return TW_ERR_TRANSPORT;
    }
    (void)fcntl(dev->chan->fd, F_SETFL, fcntl(dev->chan->fd, F_GETFL) | O_NONBLOCK);
    {
        /* One CQ holds every completion the device can owe at once: the
         * receives, the UD queues and each peer's send credits. Where the
         * device's CQ cannot, the per-peer credits shrink to fit (a full
         * CQ overruns: CQ_ERR, and the device is lost). */
        uint64_t fixed = (uint64_t)dev->rx_depth + TW_VERBS_UD_RX + TW_VERBS_UD_TX;
        uint64_t peers = params->size > 1 ? (uint64_t)params->size - 1 : 1;
        if (fixed + (uint64_t)dev->sq_depth * peers > (uint64_t)da.max_cqe) {
            uint64_t room = (uint64_t)da.max_cqe > fixed ? (uint64_t)da.max_cqe - fixed : 0;
            uint32_t sq = (uint32_t)TW_MAX(room / peers, 1);
            if (room / peers == 0) {
                tw_warn("verbs",
                        "%s: its CQ (%d entries) cannot hold one send per peer besides %llu "
                        "receives: lower TW_VERBS_RX_DEPTH for %llu peers",
                        dev->name, da.max_cqe, (unsigned long long)fixed,
                        (unsigned long long)peers);
            } else {
                tw_info("verbs",
                        "%s: %u sends in flight per peer (not %u): its CQ holds %d entries for "
                        "%llu peers",
                        dev->name, sq, dev->sq_depth, da.max_cqe, (unsigned long long)peers);
            }
            dev->sq_depth = sq;
        }
        int cqe = (int)TW_MIN((uint64_t)da.max_cqe, fixed + (uint64_t)dev->sq_depth * peers);
        struct ibv_cq_init_attr_ex ca = {.cqe = (uint32_t)cqe,
                                         .cq_context = dev,
                                         .channel = dev->chan,
                                         .comp_vector = 0,
                                         .wc_flags = IBV_WC_STANDARD_FLAGS,
                                         .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
                                         .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
        if (dev->td != NULL) {
            ca.comp_mask |= IBV_CQ_INIT_ATTR_MASK_PD;
            ca.parent_domain = dev->qp_pd;
        }
        dev->cqx = vb->cfg.td ? ibv_create_cq_ex(dev->ctx, &ca) : NULL;
        if (dev->cqx != NULL) {
            dev->cq = ibv_cq_ex_to_cq(dev->cqx);
        } else {
            if (vb->cfg.td) {
                tw_debug("verbs", "%s: no single-threaded CQ (%m): a plain one", dev->name);
            }
            dev->cq = ibv_create_cq(dev->ctx, cqe, dev, dev->chan, 0);
        }
        if (dev->cq == NULL) {
            tw_error("verbs", "%s: cannot create a CQ of %d entries: %m", dev->name, cqe);
            return TW_ERR_TRANSPORT;
        }
    }
    {
        struct ibv_srq_init_attr sa = {.attr = {.max_wr = dev->rx_depth, .max_sge = 1}};
        dev->srq = ibv_create_srq(dev->pd, &sa);
        if (dev->srq == NULL) {
            tw_error("verbs", "%s: cannot create an SRQ of %u: %m", dev->name, dev->rx_depth);
            return TW_ERR_TRANSPORT;
        }
    }
    /* Buffers: receives, sends, then UD receives and sends. */
    dev->pool_len = (size_t)(dev->rx_depth + TW_VERBS_TX_BUFS) * TW_VERBS_SEG +
                    (size_t)(TW_VERBS_UD_RX + TW_VERBS_UD_TX) * TW_VERBS_UD_BUF;
    dev->pool = tw_malloc_aligned(4096, dev->pool_len);
    dev->rx_free = tw_calloc(dev->rx_depth, sizeof(*dev->rx_free));
    dev->tx_free = tw_calloc(TW_VERBS_TX_BUFS, sizeof(*dev->tx_free));
    dev->qpn_cap = 16;
    while (dev->qpn_cap < 2u * (unsigned)params->size) {
        dev->qpn_cap *= 2;
    }
    dev->qpn_keys = tw_calloc(dev->qpn_cap, sizeof(*dev->qpn_keys));
    dev->qpn_vals = tw_calloc(dev->qpn_cap, sizeof(*dev->qpn_vals));
    if (dev->pool == NULL || dev->rx_free == NULL || dev->tx_free == NULL ||
        dev->qpn_keys == NULL || dev->qpn_vals == NULL) {
        return TW_ERR_NOMEM;
    }
    for (unsigned i = 0; i < dev->qpn_cap; i++) {
        dev->qpn_vals[i] = -1;
    }
    dev->pool_mr = ibv_reg_mr(dev->pd, dev->pool, dev->pool_len, IBV_ACCESS_LOCAL_WRITE);
    if (dev->pool_mr == NULL) {
        tw_error("verbs", "%s: cannot register %zu bytes of buffers: %m", dev->name, dev->pool_len);
        return TW_ERR_TRANSPORT;
    }
    dev->ud_pool = dev->pool + (size_t)(dev->rx_depth + TW_VERBS_TX_BUFS) * TW_VERBS_SEG;
    for (unsigned i = 0; i < dev->rx_depth; i++) {
        dev->rx_free[dev->nrx_free++] = dev->rx_depth - 1 - i;
    }
    for (unsigned i = 0; i < TW_VERBS_TX_BUFS; i++) {
        dev->tx_free[dev->ntx_free++] = dev->rx_depth + TW_VERBS_TX_BUFS - 1 - i;
    }
    for (unsigned i = 0; i < TW_VERBS_UD_TX; i++) {
        dev->ud_tx_free[dev->nud_tx_free++] = i;
    }
    tw_verbs_rx_refill(dev, true);
    /* The UD QP for connection setup. */
    {
        struct ibv_qp_init_attr ia = {.send_cq = dev->cq,
                                      .recv_cq = dev->cq,
                                      .qp_type = IBV_QPT_UD,
                                      .sq_sig_all = 1,
                                      .cap = {.max_send_wr = TW_VERBS_UD_TX,
                                              .max_recv_wr = TW_VERBS_UD_RX,
                                              .max_send_sge = 1,
                                              .max_recv_sge = 1}};
        dev->ud = ibv_create_qp(dev->qp_pd, &ia);
        if (dev->ud == NULL) {
            tw_error("verbs", "%s: cannot create the UD QP: %m", dev->name);
            return TW_ERR_TRANSPORT;
        }
        if (!tw_verbs_ud_up(dev)) {
            return TW_ERR_TRANSPORT;
        }
    }
    /* Its engine. */
    {
        tw_pe_params_t p = *params->pe_params;
        char name[80];
        snprintf(name, sizeof(name), "hca:%s", dev->name);
        p.name = name;
        p.bind_package = -1;
        st = tw_pe_create(&p, &dev->pe);
        if (st != TW_OK) {
            dev->pe = NULL;
            return st;
        }
        dev->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (dev->timer_fd < 0) {
            tw_error("verbs", "cannot make a timer: %m");
            return TW_ERR_TRANSPORT;
        }
        st = tw_pe_add(dev->pe, tw_verbs_dev_progress, dev, dev->chan->fd);
        if (st == TW_OK) {
            st = tw_pe_watch(dev->pe, dev->timer_fd);
        }
        if (st != TW_OK) {
            return st;
        }
    }
    tw_debug("verbs",
             "%s port %u: %s, MTU %d, LID %u, GID index %d, thread domain %s, CQ %s, "
             "max inline %u",
             dev->name, dev->port, dev->link == TW_VERBS_LINK_ETH ? "RoCE" : "InfiniBand",
             128 << dev->mtu, dev->lid, dev->gid_index, dev->td != NULL ? "yes" : "no",
             dev->cqx != NULL ? "single-threaded" : "plain", dev->max_inline);
    return TW_OK;
}

static void tw_verbs_release_region(void *arg, tw_verbs_region_t *r)
{
    (void)arg;
    for (int d = 0; d < TW_VERBS_RCACHE_DEVS; d++) {
        if (r->mr[d] != NULL) {
            (void)ibv_dereg_mr(r->mr[d]);
        }
    }
    tw_free(r, sizeof(tw_verbs_mem_t));
}

static tw_status_t tw_verbs_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_VERBS_SEG - TW_VERBS_FRAME_LEN,
        .max_hdr = TW_VERBS_MAX_HDR,
        .max_zcopy = TW_VERBS_MAX_MSG,
    };
    tw_verbs_iface_t *vb;
    struct ibv_device **list = NULL;
    int n = 0;
    tw_status_t st;

    vb = tw_calloc(1, sizeof(*vb));
    if (vb == NULL) {
        return TW_ERR_NOMEM;
    }
    st = tw_tl_iface_init(&vb->super, &tw_verbs_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(vb, sizeof(*vb));
        return st;
    }
    for (int d = 0; d < TW_VERBS_MAX_DEVS; d++) {
        vb->devs[d].timer_fd = -1;
    }
    tw_cfg_set_defaults(&tw_verbs_cfg_table, &vb->cfg);
    if (tw_cfg_apply_env(&tw_verbs_cfg_table, &vb->cfg) != TW_OK) {
        st = TW_ERR_INVALID;
        goto err;
    }
    if (tw_siphash_key_parse(params->job_key, vb->key) != TW_OK) {
        tw_error("verbs", "no job key: the verbs transport needs twrun's TW_JOB_KEY");
        st = TW_ERR_INVALID;
        goto err;
    }
    vb->qkey = tw_verbs_qkey(vb->key);
    vb->threads = params->pe_params->thread;
    if (tw_verbs_rcache_init(&vb->rcache, tw_verbs_release_region, vb) != TW_OK) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    vb->rcache_ok = true;
    vb->eps = tw_calloc((size_t)params->size, sizeof(*vb->eps));
    vb->down = tw_calloc((size_t)params->size, sizeof(*vb->down));
    if (vb->eps == NULL || vb->down == NULL) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    list = ibv_get_device_list(&n);
    for (int i = 0; list != NULL && i < n && vb->ndev < TW_VERBS_MAX_DEVS; i++) {
        int port;
        if (!tw_cfg_list_has(vb->cfg.devices, ibv_get_device_name(list[i]), &port)) {
            continue;
        }
        tw_verbs_dev_t *dev = &vb->devs[vb->ndev];
        dev->index = vb->ndev;
        st = tw_verbs_dev_open(vb, dev, list[i], port, params);
        vb->ndev++; /* closed by iface_close either way */
        if (st != TW_OK) {
            goto err;
        }
    }
    if (vb->ndev == 0) {
        tw_error("verbs", "no RDMA device to open (TW_VERBS_DEVICES='%s')", vb->cfg.devices);
        st = TW_ERR_UNSUPPORTED;
        goto err;
    }
    ibv_free_device_list(list);
    list = NULL;
    for (int p = 0; p < params->size; p++) {
        vb->eps[p].peer = p;
        vb->eps[p].dev = &vb->devs[0]; /* addr_connect picks the peer's */
        vb->eps[p].gen = 1;
    }
    /* The async event thread: port, device, QP and SRQ events. */
    st = tw_va_create(&vb->va);
    for (int d = 0; st == TW_OK && d < vb->ndev; d++) {
        tw_verbs_srq_arm(&vb->devs[d]);
        st = tw_va_add_device(vb->va, vb->devs[d].ctx, tw_verbs_async_event, &vb->devs[d]);
        vb->devs[d].watched = st == TW_OK;
    }
    if (st != TW_OK) {
        goto err;
    }
    vb->opened = true;
    *iface_p = &vb->super;
    return TW_OK;

err:
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    tw_verbs_iface_close(&vb->super);
    return st;
}

/* Work requests of @p dev still to complete (QPs draining at close). */
static bool tw_verbs_dev_busy(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; vb->eps != NULL && p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev) {
            continue;
        }
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->qp != NULL && ep->sq.posted != ep->sq.done) {
            return true;
        }
    }
    return false;
}

/* The rendezvous handles still held and the registrations they and the
 * cache keep: released for every device before any device closes (a
 * region spans all devices, and an MR must go before its PD). */
static void tw_verbs_dev_release_handles(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    if (vb == NULL || dev->handles.next == NULL) {
        return; /* never opened */
    }
    while (dev->handles.next != &dev->handles) {
        tw_tl_rndv_t *h = dev->handles.next;
        if (h->mr != NULL) {
            (void)ibv_dereg_mr(h->mr);
        }
        if (h->region != NULL) {
            tw_verbs_rcache_put(&vb->rcache, h->region);
        }
        tw_verbs_handle_free(h);
    }
}

static void tw_verbs_dev_close(tw_verbs_dev_t *dev)
{
    tw_verbs_iface_t *vb = dev->vb;

    if (vb == NULL) {
        return; /* never opened */
    }
    for (int p = 0; vb->eps != NULL && p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev) {
            continue;
        }
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (ep->dev != dev) {
            continue;
        }
        if (ep->qp != NULL) {
            (void)ibv_destroy_qp(ep->qp);
        }
        if (ep->ah != NULL) {
            (void)ibv_destroy_ah(ep->ah);
        }
    }
    if (dev->rsends != NULL) {
        tw_free(dev->rsends, dev->nrsends * sizeof(*dev->rsends));
    }
    if (dev->ud != NULL) {
        (void)ibv_destroy_qp(dev->ud);
    }
    if (dev->srq != NULL) {
        (void)ibv_destroy_srq(dev->srq);
    }
    if (dev->cq != NULL) {
        (void)ibv_destroy_cq(dev->cq);
    }
    if (dev->chan != NULL) {
        (void)ibv_destroy_comp_channel(dev->chan);
    }
    if (dev->pool_mr != NULL) {
        (void)ibv_dereg_mr(dev->pool_mr);
    }
    if (dev->pool != NULL) {
        tw_free_aligned(dev->pool, 4096, dev->pool_len);
    }
    if (dev->rx_free != NULL) {
        tw_free(dev->rx_free, dev->rx_depth * sizeof(*dev->rx_free));
    }
    if (dev->tx_free != NULL) {
        tw_free(dev->tx_free, TW_VERBS_TX_BUFS * sizeof(*dev->tx_free));
    }
    if (dev->qpn_keys != NULL) {
        tw_free(dev->qpn_keys, dev->qpn_cap * sizeof(*dev->qpn_keys));
    }
    if (dev->qpn_vals != NULL) {
        tw_free(dev->qpn_vals, dev->qpn_cap * sizeof(*dev->qpn_vals));
    }
    if (dev->qp_pd != NULL && dev->qp_pd != dev->pd) {
        (void)ibv_dealloc_pd(dev->qp_pd);
    }
    if (dev->td != NULL) {
        (void)ibv_dealloc_td(dev->td);
    }
    if (dev->pd != NULL) {
        (void)ibv_dealloc_pd(dev->pd);
    }
    if (dev->ctx != NULL) {
        (void)ibv_close_device(dev->ctx);
    }
    if (dev->timer_fd >= 0) {
        close(dev->timer_fd);
    }
}

/* Close steps run as the owner of each device's engine (tw_pe_try_call:
 * a thread in tw_progress may still drive it). */
enum { TW_VERBS_CLOSE_BYE, TW_VERBS_CLOSE_CANCEL };
typedef struct tw_verbs_close_step {
    tw_verbs_dev_t *dev;
    int step;
} tw_verbs_close_step_t;

static int tw_verbs_close_fn(void *arg)
{
    tw_verbs_close_step_t *c = arg;
    tw_verbs_dev_t *dev = c->dev;
    tw_verbs_iface_t *vb = dev->vb;

    for (int p = 0; p < vb->super.size; p++) {
        if (vb->eps[p].dev != dev) {
            continue;
        }
        tw_verbs_ep_t *ep = &vb->eps[p];
        if (p == vb->super.rank) {
            continue;
        }
        if (c->step == TW_VERBS_CLOSE_CANCEL) {
            tw_verbs_fail_peer(ep, TW_ERR_CANCELED, "closing", false);
        } else if (ep->qp != NULL && ep->ready && !ep->failed) {
            tw_verbs_op_t *op = tw_verbs_op_new(0);
            if (op != NULL) {
                op->kind = TW_VERBS_OP_BYE;
                op->peer = p;
                atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed);
                tw_verbs_enqueue(dev, op);
            }
        }
    }
    return 1;
}

static void tw_verbs_close_all(tw_verbs_iface_t *vb, int step)
{
    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_close_step_t c = {.dev = &vb->devs[d], .step = step};
        tw_backoff_t b = TW_BACKOFF_INIT;
        while (tw_pe_try_call(vb->devs[d].pe, tw_verbs_close_fn, &c) == 0) {
            tw_backoff_wait(&b);
        }
    }
}

static void tw_verbs_iface_close(tw_tl_iface_t *iface)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    /* No more events handed to engines that are about to stop. */
    if (vb->va != NULL) {
        for (int d = 0; d < vb->ndev; d++) {
            if (vb->devs[d].watched) {
                (void)tw_va_remove_device(vb->va, vb->devs[d].ctx);
            }
        }
        tw_va_destroy(vb->va);
        vb->va = NULL;
    }

    for (int d = 0; d < vb->ndev; d++) {
        if (vb->devs[d].pe != NULL) {
            tw_pe_stop(vb->devs[d].pe); /* we drive them from here on */
        }
    }
    if (vb->opened) {
        /* Clean close: what was queued goes out, then BYE to every
         * connected peer that has not left, then wait for the sends. */
        uint64_t until = tw_time_ns() + TW_VERBS_CLOSE_NS;
        for (int d = 0; d < vb->ndev; d++) {
            (void)tw_pe_progress(vb->devs[d].pe);
        }
        tw_verbs_close_all(vb, TW_VERBS_CLOSE_BYE);
        for (;;) {
            bool busy = false;
            for (int d = 0; d < vb->ndev; d++) {
                (void)tw_pe_progress(vb->devs[d].pe);
            }
            for (int p = 0; p < iface->size && !busy; p++) {
                tw_verbs_ep_t *ep = &vb->eps[p];
                busy = !ep->failed && ep->qp != NULL &&
                       (ep->head != NULL || ep->sq.posted != ep->sq.done);
            }
            if (!busy || tw_time_ns() >= until) {
                break;
            }
            usleep(50);
        }
        /* Everything else is canceled: QPs to error, wait for the flushes. */
        vb->closing = true;
        tw_verbs_close_all(vb, TW_VERBS_CLOSE_CANCEL);
        until = tw_time_ns() + TW_VERBS_CLOSE_NS;
        for (;;) {
            bool busy = false;
            for (int d = 0; d < vb->ndev; d++) {
                (void)tw_pe_progress(vb->devs[d].pe);
                busy = busy || tw_verbs_dev_busy(&vb->devs[d]);
            }
            if (!busy) {
                break;
            }
            if (tw_time_ns() >= until) {
                tw_warn("verbs", "closing: work requests did not flush in time");
                break;
            }
            usleep(50);
        }
    }
    for (int d = 0; d < vb->ndev; d++) {
        if (vb->devs[d].pe != NULL) {
            tw_pe_destroy(vb->devs[d].pe);
            vb->devs[d].pe = NULL;
        }
    }
    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_dev_release_handles(&vb->devs[d]);
    }
    if (vb->rcache_ok) {
        tw_verbs_rcache_cleanup(&vb->rcache);
        vb->rcache_ok = false;
    }
    for (int d = 0; d < vb->ndev; d++) {
        tw_verbs_dev_close(&vb->devs[d]);
    }
    if (vb->eps != NULL) {
        tw_free(vb->eps, (size_t)iface->size * sizeof(*vb->eps));
    }
    if (vb->down != NULL) {
        tw_free(vb->down, (size_t)iface->size * sizeof(*vb->down));
    }
    tw_tl_iface_cleanup(iface);
    tw_free(vb, sizeof(*vb));
}

/* ---- registration, test hooks ----------------------------------------------------- */

tw_status_t tw_verbs_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *rkey,
                             size_t *rkey_len_p, tw_verbs_mem_t **mem_p)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_mem_t *m;
    uint32_t rkeys[TW_VERBS_MAX_DEVS];

    if (iface == NULL || iface->ops != &tw_verbs_ops || addr == NULL || len == 0 || rkey == NULL ||
        rkey_len_p == NULL || mem_p == NULL) {
        return TW_ERR_INVALID;
    }
    m = tw_calloc(1, sizeof(*m));
    if (m == NULL) {
        return TW_ERR_NOMEM;
    }
    m->region.start = (uintptr_t)addr;
    m->region.end = (uintptr_t)addr + len;
    for (int d = 0; d < vb->ndev; d++) {
        struct ibv_mr *mr =
            ibv_reg_mr(vb->devs[d].pd, addr, len,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
        if (mr == NULL) {
            tw_error("verbs", "%s: cannot register %zu bytes at %p: %m", vb->devs[d].name, len,
                     addr);
            tw_verbs_release_region(vb, &m->region);
            return TW_ERR_TRANSPORT;
        }
        m->region.mr[d] = mr;
        m->region.lkey[d] = mr->lkey;
        m->region.rkey[d] = rkeys[d] = mr->rkey;
    }
    if (tw_verbs_rcache_insert(&vb->rcache, &m->region) != TW_OK) {
        tw_verbs_release_region(vb, &m->region);
        return TW_ERR_NOMEM;
    }
    *rkey_len_p = tw_verbs_rkey_pack(rkeys, (unsigned)vb->ndev, rkey);
    *mem_p = m;
    return TW_OK;
}

tw_status_t tw_verbs_mem_dereg(tw_tl_iface_t *iface, tw_verbs_mem_t *mem)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    if (iface == NULL || iface->ops != &tw_verbs_ops || mem == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_verbs_rcache_remove(&vb->rcache, &mem->region);
}

static tw_status_t tw_verbs_mem_reg_op(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                                       size_t *key_len, void **handle)
{
    tw_verbs_mem_t *mem = NULL;
    tw_status_t st;

    _Static_assert(TW_VERBS_RKEY_MAX <= TW_TL_KEY_MAX, "a verbs key fits TW_TL_KEY_MAX");
    if (key_len == NULL || *key_len < TW_VERBS_RKEY_MAX) {
        return TW_ERR_INVALID;
    }
    st = tw_verbs_mem_reg(iface, addr, len, key, key_len, &mem);
    *handle = mem;
    return st;
}

static tw_status_t tw_verbs_mem_dereg_op(tw_tl_iface_t *iface, void *handle)
{
    return tw_verbs_mem_dereg(iface, handle);
}

tw_status_t tw_verbs_test_dev_lost(tw_tl_iface_t *iface, int kind)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;

    if (iface == NULL || iface->ops != &tw_verbs_ops || vb->ndev == 0 ||
        (kind != TW_VERBS_LOST_SRQ && kind != TW_VERBS_LOST_CQ)) {
        return TW_ERR_INVALID;
    }
    tw_verbs_dev_lost(&vb->devs[0], kind, "test hook: the device was lost");
    return TW_OK;
}

tw_status_t tw_verbs_force_qp_error(tw_tl_iface_t *iface, int peer)
{
    tw_verbs_iface_t *vb = (tw_verbs_iface_t *)iface;
    tw_verbs_op_t *op;
    tw_status_t st;

    if (iface == NULL || iface->ops != &tw_verbs_ops || peer < 0 || peer >= iface->size ||
        peer == iface->rank) {
        return TW_ERR_INVALID;
    }
    op = tw_verbs_op_new(0);
    if (op == NULL) {
        return TW_ERR_NOMEM;
    }
    op->kind = TW_VERBS_OP_QPERR;
    op->peer = peer;
    atomic_fetch_add_explicit(&vb->queued, 1, memory_order_relaxed);
    st = tw_tl_submit(iface, tw_verbs_dev_of(vb, peer)->pe, tw_verbs_enqueue_cmd,
                      tw_verbs_dev_of(vb, peer), op, op->alloc_len, 0);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&vb->queued, 1, memory_order_relaxed);
    }
    return st;
}
