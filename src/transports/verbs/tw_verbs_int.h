/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Internals of the verbs transport, shared by its sources (README.md has
 * the map): tuning constants, work request tags, the operation, endpoint,
 * device and iface structs, and what one source calls in another.
 *
 * Ownership, unless a field says otherwise: "engine" is the owner of the
 * device's progress engine (dev->pe) -- its progress thread, or whoever
 * drives it with tw_pe_progress / tw_pe_try_call (tw_progress in manual
 * mode, iface_close once it stopped the threads). A device's QPs, SRQ, CQ,
 * buffers and tables, and every endpoint of a peer reached through it, are
 * touched by that engine only, so no lock is needed. "Set at open" fields
 * are written by iface_open / addr_connect before any traffic and only
 * read after. Workers touch nothing but the atomics, the read-only fields
 * and the operations they build.
 */
#ifndef TW_VERBS_INT_H
#define TW_VERBS_INT_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_mem.h"
#include "transports/base/tw_tl.h"
#include "transports/verbs/tw_verbs.h"
#include "transports/verbs/tw_verbs_async.h"
#include "transports/verbs/tw_verbs_proto.h"
#include "transports/verbs/tw_verbs_rcache.h"

#define TW_VERBS_SEG         9216u /* receive / send buffer */
#define TW_VERBS_MAX_HDR     TW_TL_HDR_MAX
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
 * the AM header (and an eager payload) in bytes[]. Thread: the submitting
 * thread fills it in; from tw_tl_submit on it is the engine's. */
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

/* A rendezvous send waiting for FIN. Thread: engine. */
typedef struct tw_verbs_rsend {
    tw_tl_comp_t *comp; /* NULL: free */
    struct ibv_mr *mr;
    tw_verbs_region_t *region;
    int peer;
    uint32_t gen;
    uint32_t next_free;
} tw_verbs_rsend_t;

/* The receiver's handle of an announced message. Thread: engine, but for
 * the get_* fields. */
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
    uint32_t gen;           /* the connection it came on (ep->gen then) */
    tw_tl_rndv_pull_t pull; /* rndv_get from another thread: handed to the engine */
};

/* The connection to one peer. Thread: engine (of ep->dev), but for the
 * fields addr_connect sets. */
typedef struct tw_verbs_ep {
    tw_verbs_dev_t *dev; /* set at open (addr_connect); any thread reads */
    int peer;            /* set at open */
    int state;
    bool ready;         /* we may send: the peer's QP is connected to ours */
    bool failed;        /* down (failed or left) */
    bool for_now;       /* failed for now (TW_ERR_TRANSPORT): reset once flushed */
    bool flush_overdue; /* ... and its QP did not flush in time (logged once) */
    bool left;          /* BYE received */
    bool on_conn;       /* on dev->conns */
    bool silence_fails; /* set at open: it runs progress threads, so silence means failure */
    uint64_t ping_ns;   /* our last PING */
    uint64_t last_ns;   /* something arrived from it, or a send was acked */
    struct ibv_qp *qp;
    struct ibv_ah *ah;          /* to the peer's UD QP */
    struct ibv_ah_attr ah_attr; /* set at open; the engine moves grh.sgid_index */
    uint32_t rud_qpn;           /* set at open; any thread reads (0: unreachable) */
    uint8_t rdev;               /* set at open: the peer's device index for us */
    enum ibv_mtu mtu;           /* set at open */
    uint32_t psn, rqpn, rpsn;
    tw_verbs_credits_t sq;
    tw_verbs_op_t *head, *tail; /* waiting to be posted */
    tw_verbs_op_t *flushes;     /* FLUSH ops waiting for sq.done >= target */
    tw_verbs_op_t *posted;      /* in the send queue, not completed yet */
    uint64_t deadline_ns, next_tx_ns, rtx_ns;
    uint64_t fail_ns; /* when it failed for now */
    /* Generations (tw_verbs_cm.c): ours for this peer (>= 1, +1 at each
     * reset), the peer's of the connection we are in (0: none yet), and
     * the oldest of the peer's we still listen to. */
    uint32_t gen, rgen, rgen_min;
    struct tw_verbs_ep *next_conn;
} tw_verbs_ep_t;

/* One RDMA device (its first active port, or the one named). Thread:
 * engine, but for the fields set at open and the atomics. */
struct tw_verbs_dev {
    tw_verbs_iface_t *vb; /* set at open, as everything down to ud */
    bool watched;         /* by the async event thread */
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
     * looked at on every pass: it cannot be lost to a full lane. The
     * async thread writes, the engine reads. */
    atomic_int lost_kind;
    _Atomic(const char *) lost_what;
    /* set at open, as everything down to max_msg, but for the two the
     * engine moves: gid_index (the GID came back at another index) and
     * max_inline (a provider refused inline data) */
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
    /* buffers: [rx_depth receive][TX_BUFS send] x SEG, then UD rx + tx
     * (the pool itself and its MR set at open) */
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
    /* engine (pe and timer_fd set at open) */
    tw_pe_t *pe;
    int timer_fd;
    uint64_t timer_ns; /* the timerfd's period now, 0 = off */
    unsigned nready;   /* ready peers on this device (liveness) */
    uint64_t last_tick_ns;
    tw_verbs_ep_t *conns; /* connections being set up */
    tw_tl_rndv_t handles; /* list head of live rendezvous handles */
    tw_verbs_rsend_t *rsends;
    uint32_t nrsends, rsend_free;
    /* QP number -> peer, open addressing */
    uint32_t *qpn_keys;
    int *qpn_vals;
    unsigned qpn_cap;
    int events;
};

/* A region registered with tw_verbs_mem_reg. Thread: any (rcache's lock). */
struct tw_verbs_mem {
    tw_verbs_region_t region;
};

/* The transport's iface. Set at open, but where a field says otherwise. */
struct tw_verbs_iface {
    tw_tl_iface_t super;
    tw_verbs_cfg_t cfg;
    uint8_t key[16];
    uint32_t qkey;
    bool threads; /* ready() clears it when a thread cannot start */
    bool opened;  /* iface_open finished */
    bool closing; /* iface_close, as the owner of every engine */
    int ndev;
    tw_verbs_dev_t devs[TW_VERBS_MAX_DEVS];
    tw_verbs_ep_t *eps;       /* [size]; eps[p].dev: see addr_connect */
    _Atomic(uint8_t) *down;   /* [size]: failed or left; the engine writes, any thread reads */
    _Atomic(unsigned) queued; /* any thread, atomic relaxed: a bound, not an exact count */
    tw_verbs_rcache_t rcache; /* any thread (its own lock) */
    bool rcache_ok;
    tw_va_t *va; /* the async event thread, watching every device */
};

extern const tw_tl_ops_t tw_verbs_ops;

static inline tw_verbs_dev_t *tw_verbs_dev_of(tw_verbs_iface_t *vb, int peer)
{
    return vb->eps[peer].dev; /* set by addr_connect, before any traffic */
}

/* Thread: any (a hint for workers; the engine's own word). */
static inline uint8_t tw_verbs_port_state(tw_verbs_dev_t *dev)
{
    return atomic_load_explicit(&dev->port_state, memory_order_acquire);
}

static inline unsigned char *tw_verbs_buf(tw_verbs_dev_t *dev, uint32_t idx)
{
    return dev->pool + (size_t)idx * TW_VERBS_SEG;
}

static inline void tw_verbs_op_free(tw_verbs_op_t *op)
{
    tw_free(op, op->alloc_len);
}

/* What one source calls in another. Thread: engine, but where a group
 * says otherwise. */

/* tw_verbs_dev.c: device, port and GID, buffers, SRQ, UD QP. Open and
 * close: the opening or closing thread, before or after the engine. */
tw_status_t tw_verbs_dev_open(tw_verbs_iface_t *vb, tw_verbs_dev_t *dev, struct ibv_device *ibdev,
                              int want_port, const tw_tl_params_t *params);
void tw_verbs_dev_close(tw_verbs_dev_t *dev);
bool tw_verbs_dev_busy(tw_verbs_dev_t *dev);
void tw_verbs_rx_refill(tw_verbs_dev_t *dev, bool all);
tw_status_t tw_verbs_ud_post_recv(tw_verbs_dev_t *dev, uint32_t idx);
tw_status_t tw_verbs_ud_up(tw_verbs_dev_t *dev);
void tw_verbs_srq_arm(tw_verbs_dev_t *dev);
void tw_verbs_srq_low(tw_verbs_dev_t *dev);

/* tw_verbs_cm.c: QP numbers, connection setup over UD, liveness */
tw_status_t tw_verbs_qpn_init(tw_verbs_dev_t *dev, int size);
void tw_verbs_qpn_cleanup(tw_verbs_dev_t *dev);
int tw_verbs_qpn_get(const tw_verbs_dev_t *dev, uint32_t qpn);
void tw_verbs_timer_update(tw_verbs_dev_t *dev);
void tw_verbs_conn_unwatch(tw_verbs_ep_t *ep);
void tw_verbs_set_ready(tw_verbs_ep_t *ep);
void tw_verbs_connect(tw_verbs_ep_t *ep);
void tw_verbs_conn_send(tw_verbs_ep_t *ep, uint8_t type);
void tw_verbs_conn_recv(tw_verbs_dev_t *dev, const unsigned char *buf, size_t len);
void tw_verbs_ep_reset(tw_verbs_ep_t *ep);
void tw_verbs_liveness(tw_verbs_dev_t *dev, uint64_t now);
void tw_verbs_conn_tick(tw_verbs_dev_t *dev);

/* tw_verbs_tx.c: operations and posting */
void tw_verbs_op_release(tw_verbs_dev_t *dev, tw_verbs_op_t *op);
void tw_verbs_op_abort(tw_verbs_dev_t *dev, tw_verbs_op_t *op, tw_status_t st);
void tw_verbs_batch_done(tw_verbs_op_t *op, tw_status_t st);
void tw_verbs_flush_check(tw_verbs_ep_t *ep);
void tw_verbs_ep_drain(tw_verbs_ep_t *ep);
void tw_verbs_enqueue(tw_verbs_dev_t *dev, tw_verbs_op_t *op);
/* ... and what workers call. Thread: any. */
tw_verbs_op_t *tw_verbs_op_new(size_t extra);
void tw_verbs_enqueue_cmd(void *arg, void *data, uint64_t u64); /* (run by the engine) */
tw_status_t tw_verbs_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len);
tw_status_t tw_verbs_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
tw_status_t tw_verbs_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                               uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
tw_status_t tw_verbs_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                               uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
tw_status_t tw_verbs_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp);

/* tw_verbs_rndv.c: the rendezvous send table and receive side
 * (tw_verbs_rndv_get: Thread: any) */
uint64_t tw_verbs_rsend_add(tw_verbs_dev_t *dev, tw_verbs_op_t *op);
bool tw_verbs_rsend_done(tw_verbs_dev_t *dev, uint64_t sid, int peer, tw_status_t st);
void tw_verbs_rsend_fail(tw_verbs_dev_t *dev, int peer, tw_status_t st);
size_t tw_verbs_rts_recv(tw_verbs_dev_t *dev, tw_verbs_ep_t *ep, const tw_verbs_frame_t *f,
                         const unsigned char *buf);
void tw_verbs_read_done(tw_verbs_dev_t *dev, tw_tl_rndv_t *h, tw_status_t st);
tw_status_t tw_verbs_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                              tw_tl_comp_t *comp);
void tw_verbs_dev_release_handles(tw_verbs_dev_t *dev);

/* tw_verbs_cq.c: completions, the engine's progress function */
void tw_verbs_wc(tw_verbs_dev_t *dev, const struct ibv_wc *wc);
int tw_verbs_dev_progress(void *arg);

/* tw_verbs_fault.c: failing and restoring peers, devices and ports
 * (tw_verbs_async_event: Thread: the async event thread) */
void tw_verbs_fail_peer(tw_verbs_ep_t *ep, tw_status_t why, const char *what, bool tell);
void tw_verbs_ep_final(tw_verbs_ep_t *ep, const char *what);
void tw_verbs_reset_check(tw_verbs_dev_t *dev);
void tw_verbs_lost_check(tw_verbs_dev_t *dev);
void tw_verbs_port_check(tw_verbs_dev_t *dev);
tw_status_t tw_verbs_wc_why(tw_verbs_dev_t *dev, enum ibv_wc_status s);
tw_status_t tw_verbs_qp_err_why(tw_verbs_dev_t *dev);
void tw_verbs_async_event(void *arg, const struct ibv_async_event *ev);

/* tw_verbs_mr.c: memory registration (but for tw_verbs_reg, Thread: any) */
tw_status_t tw_verbs_reg(tw_verbs_dev_t *dev, const void *addr, size_t len, int access,
                         struct ibv_mr **mr_p, tw_verbs_region_t **region_p, uint32_t *lkey_p,
                         uint32_t *rkey_p);
void tw_verbs_release_region(void *arg, tw_verbs_region_t *r);
tw_status_t tw_verbs_mem_reg_op(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                                size_t *key_len, void **handle);
tw_status_t tw_verbs_mem_dereg_op(tw_tl_iface_t *iface, void *handle);

#endif /* TW_VERBS_INT_H */
