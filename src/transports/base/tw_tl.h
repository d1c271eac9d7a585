/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The transport ops table: what every transport (self, shm, tcp, verbs,
 * lossy) offers the layers above. Transports move active messages --
 * (am_id, header bytes, payload) -- to a peer rank and report completions
 * and arrivals through callbacks; they know nothing of tags, matching or
 * reliability.
 *
 * Send flavours:
 *   am_short  header + payload copied before return (<= attr.max_short);
 *             the buffers are reusable at once, nothing completes later;
 *   am_zcopy  the payload is referenced until comp->cb runs (on the
 *             iface's progress engine);
 *   put/get/flush  one-sided, for transports with capability bits set.
 * Every slot is filled: operations a transport lacks point at the shared
 * stubs in tw_tl.c (TW_ERR_UNSUPPORTED), and its caps say so; a unit test
 * checks caps against non-stub slots. Tables are `static const`.
 *
 * Back-pressure is TW_ERR_AGAIN (no ring slot, no credit): the caller
 * retries after progress; nothing is queued behind its back.
 * A send to a peer whose path is down for now (see tw_tl_peer_down_fn_t)
 * fails at once with TW_ERR_TRANSPORT: that path is no use until it is
 * back, but the peer is not gone.
 *
 * Threads: am_short / am_zcopy / put / get / flush -- any thread.
 * progress and every callback -- the iface's progress engine owner, except
 * arrivals of params.inline_am_ids (and their zcopy completions), which a
 * transport may deliver on the sending thread.
 */
#ifndef TW_TL_H
#define TW_TL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_stats.h"
#include "progress/tw_pe.h"
#include "threadwire/threadwire.h"

typedef struct tw_tl_iface tw_tl_iface_t;
typedef struct tw_tl_ops tw_tl_ops_t;

/** Local completion of a zero-copy operation. Embed it in the request;
 * cb runs exactly once, on the progress engine owner. */
typedef struct tw_tl_comp tw_tl_comp_t;
struct tw_tl_comp {
    void (*cb)(tw_tl_comp_t *comp, tw_status_t status);
};

/** Arrival of an active message. @p hdr and @p data are valid only during
 * the call; lengths are what the wire carried (the upper layer checks its
 * own header). Thread: progress engine owner. */
typedef void (*tw_tl_recv_fn_t)(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                                const void *data, size_t len);

/** A large message announced by its sender (rendezvous): the transport
 * holds the sender's address; the receiver decides where the payload goes
 * and pulls it with ops->rndv_get. Opaque; owned by the transport. */
typedef struct tw_tl_rndv tw_tl_rndv_t;

/** Arrival of a rendezvous announcement: @p len payload bytes wait at the
 * sender. Hand @p rndv to ops->rndv_get exactly once (length 0 to release
 * the sender without data) -- or never, if the iface closes first.
 * Thread: progress engine owner. */
typedef void (*tw_tl_rndv_fn_t)(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                                size_t len, tw_tl_rndv_t *rndv);

/** A peer is unreachable through this transport. The transport has already
 * completed its own operations with that peer (with errors). @p why:
 *   TW_ERR_PEER_FAILED  gone for good (died, corrupt, unreachable);
 *   TW_OK               it closed cleanly (for good too);
 *   TW_ERR_TRANSPORT    down for now: the local path to it is down (a port
 *                       went down) and may come back. Sends to it fail at
 *                       once with TW_ERR_TRANSPORT while the path is down;
 *                       once it is back they are accepted again and the
 *                       transport reconnects lazily, on the first one. A
 *                       layer with no other path treats this as a failure;
 *                       rel probes the path and fails back.
 * After TW_ERR_TRANSPORT peer_down may run again for the same peer: with
 * TW_ERR_PEER_FAILED / TW_OK when the peer turns out to be gone, or with
 * TW_ERR_TRANSPORT when the connection made again fails again. After the
 * other two it does not. Thread: progress engine owner. */
typedef void (*tw_tl_peer_down_fn_t)(void *arg, int peer, tw_status_t why);

enum {
    TW_TL_CAP_AM_SHORT = 1u << 0,
    TW_TL_CAP_AM_ZCOPY = 1u << 1,
    TW_TL_CAP_PUT = 1u << 2,
    TW_TL_CAP_GET = 1u << 3,
    TW_TL_CAP_FLUSH = 1u << 4,
    TW_TL_CAP_RNDV = 1u << 5 /* am_zcopy announces; receivers pull (rndv_get) */
};

typedef struct tw_tl_params {
    int rank;
    int size;
    tw_pe_t *pe; /* the engine that drives this iface */
    /* How the context made its engines (name and binding aside): a
     * transport that runs engines of its own makes them alike. Valid
     * during iface_open only. */
    const tw_pe_params_t *pe_params;
    tw_tl_recv_fn_t recv; /* arrivals */
    void *recv_arg;
    /* Bit i set: arrivals of am id i run no user code, so a transport that
     * can (self) may deliver them on the sending thread instead of the
     * engine -- in send order, since one thread sends them one by one. */
    uint64_t inline_am_ids;
    tw_tl_rndv_fn_t recv_rndv;      /* rendezvous arrivals (TW_TL_CAP_RNDV) */
    tw_tl_peer_down_fn_t peer_down; /* may be NULL */
    void *peer_down_arg;
    const char *job_key; /* the launcher's job key, or "" */
    int local_rank;      /* among the ranks of this node */
    int local_size;
} tw_tl_params_t;

typedef struct tw_tl_attr {
    size_t max_short; /* am_short: header + payload */
    size_t max_hdr;   /* am_zcopy header */
    size_t max_zcopy; /* am_zcopy payload */
} tw_tl_attr_t;

/** Base of every iface; a transport's own struct has it first as `super`. */
struct tw_tl_iface {
    const tw_tl_ops_t *ops;
    tw_pe_t *pe;
    tw_stats_t *stats; /* tw_tl_stat_descs layout */
    tw_tl_attr_t attr;
    int rank;
    int size;
    tw_tl_recv_fn_t recv;
    void *recv_arg;
    uint64_t inline_am_ids;
    tw_tl_rndv_fn_t recv_rndv;
    tw_tl_peer_down_fn_t peer_down;
    void *peer_down_arg;
};

enum {
    TW_TL_STAT_TX_MSGS,
    TW_TL_STAT_TX_BYTES,
    TW_TL_STAT_RX_MSGS,
    TW_TL_STAT_RX_BYTES,
    TW_TL_STAT_AGAIN,
    TW_TL_STAT_REFUSED,    /* connections that failed the handshake */
    TW_TL_STAT_BAD_FRAMES, /* malformed frames (the connection is closed) */
    TW_TL_STAT_COUNT
};
extern const tw_stat_desc_t tw_tl_stat_descs[TW_TL_STAT_COUNT];

struct tw_tl_ops {
    const char *name;
    uint32_t caps;
    /** Used only when TW_TRANSPORTS / tw_config_t.transports names it (a
     * transport that is not complete yet), else with every usable one. */
    bool opt_in;
    /** Delivers arrivals of params.inline_am_ids on the sending thread,
     * inside am_short / am_zcopy (self): a layer that calls am_short with
     * a lock held must not mark its own ids inline for it. */
    bool inline_on_send;
    /** Usable on this host? On failure fill @p why. Thread: any. */
    tw_status_t (*query)(char *why, size_t why_len);
    tw_status_t (*iface_open)(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
    /** Close after the engine stopped; in-flight zcopy ops complete with
     * TW_ERR_CANCELED (or are delivered) before it returns. */
    void (*iface_close)(tw_tl_iface_t *iface);
    /** Address exchange. addr_pack writes what peers need to reach this
     * iface (into the bootstrap blob); addr_connect takes a peer's packed
     * address (before any traffic, for every other rank); ready runs once
     * every rank connected (after a job-wide fence) and the routes are
     * set, before the context's engines start: a transport may start
     * threads of its own there. Thread: the caller of tw_init. */
    tw_status_t (*addr_pack)(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p);
    tw_status_t (*addr_connect)(tw_tl_iface_t *iface, int peer, const void *addr, size_t len);
    void (*ready)(tw_tl_iface_t *iface);
    bool (*reachable)(tw_tl_iface_t *iface, int peer);
    tw_status_t (*am_short)(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len);
    tw_status_t (*am_zcopy)(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
    tw_status_t (*put_zcopy)(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                             uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
    tw_status_t (*get_zcopy)(tw_tl_iface_t *iface, int peer, void *dst, size_t len, uint64_t raddr,
                             const void *rkey, tw_tl_comp_t *comp);
    tw_status_t (*flush)(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp);
    /** Pull @p len bytes (at most the announced length) of a rendezvous
     * into @p dst; comp->cb runs when they landed (TW_OK), or with
     * TW_ERR_PEER_FAILED -- possibly before this returns. The sender's
     * operation completes too. Thread: engine owner. */
    tw_status_t (*rndv_get)(tw_tl_iface_t *iface, tw_tl_rndv_t *rndv, void *dst, size_t len,
                            tw_tl_comp_t *comp);
    /** Returns events handled. Thread: engine owner. */
    int (*progress)(tw_tl_iface_t *iface);
    /** What a waiting worker may do for itself while the engine is idle:
     * deliver arrivals of inline_am_ids (and the rendezvous traffic and
     * completions that go with them), stopping at the first arrival that
     * must run on the engine (user active messages), so order holds.
     * Returns events handled. Thread: holder of the engine's lock
     * (tw_pe_try_call) -- never runs user code. */
    int (*poll)(tw_tl_iface_t *iface);
    /** Register [@p addr, + @p len) for the peers' put_zcopy / get_zcopy
     * (transports with TW_TL_CAP_PUT): write the remote key they take (at
     * most TW_TL_KEY_MAX bytes; *@p key_len: room in, length out) and a
     * handle for mem_dereg. TW_ERR_UNSUPPORTED: no key of its own (a
     * wrapper over a transport without RDMA). Thread: any. */
    tw_status_t (*mem_reg)(tw_tl_iface_t *iface, void *addr, size_t len, void *key, size_t *key_len,
                           void **handle);
    /** Release a registration: the device lets go of it once the
     * operations in flight with it completed. Thread: any. */
    tw_status_t (*mem_dereg)(tw_tl_iface_t *iface, void *handle);
};

/** Largest transport remote key (mem_reg). */
#define TW_TL_KEY_MAX 48

/* Shared stubs for slots a transport does not implement. */
tw_status_t tw_tl_stub_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len);
tw_status_t tw_tl_stub_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                                 uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                                 uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp);
int tw_tl_stub_progress(tw_tl_iface_t *iface);
tw_status_t tw_tl_stub_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *rndv, void *dst, size_t len,
                                tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                               size_t *key_len, void **handle);
tw_status_t tw_tl_stub_mem_dereg(tw_tl_iface_t *iface, void *handle);
/* Address exchange of a transport that needs none. */
tw_status_t tw_tl_noaddr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p);
tw_status_t tw_tl_noaddr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len);
void tw_tl_noaddr_ready(tw_tl_iface_t *iface);

/** Fill the base part of an iface (called by a transport's iface_open). */
tw_status_t tw_tl_iface_init(tw_tl_iface_t *iface, const tw_tl_ops_t *ops,
                             const tw_tl_params_t *params, const tw_tl_attr_t *attr);
void tw_tl_iface_cleanup(tw_tl_iface_t *iface);

/** Hand @p data (a transport's fragment of @p alloc_len bytes carrying
 * @p len payload bytes) to engine @p pe, where @p fn(@p arg, @p data, 0)
 * runs; counts it sent in @p iface's stats. On failure (TW_ERR_AGAIN: the
 * lane is full) frees it, counts the refusal and returns the status.
 * Thread: any. */
tw_status_t tw_tl_submit(tw_tl_iface_t *iface, tw_pe_t *pe, void (*fn)(void *, void *, uint64_t),
                         void *arg, void *data, size_t alloc_len, size_t len);

/** Every transport compiled in, NULL-terminated. */
extern const tw_tl_ops_t *const tw_tl_all[];
const tw_tl_ops_t *tw_tl_find(const char *name);
/** True when slot and capability bits agree (unit test, debug checks). */
bool tw_tl_caps_consistent(const tw_tl_ops_t *ops);

/* Dispatch wrappers: the only way upper layers call a transport. */
static inline tw_status_t tw_tl_am_short(tw_tl_iface_t *i, int peer, uint8_t id, const void *h,
                                         size_t hl, const void *d, size_t l)
{
    return i->ops->am_short(i, peer, id, h, hl, d, l);
}
static inline tw_status_t tw_tl_am_zcopy(tw_tl_iface_t *i, int peer, uint8_t id, const void *h,
                                         size_t hl, const void *d, size_t l, tw_tl_comp_t *c)
{
    return i->ops->am_zcopy(i, peer, id, h, hl, d, l, c);
}
static inline int tw_tl_progress(tw_tl_iface_t *i)
{
    return i->ops->progress(i);
}

#endif /* TW_TL_H */
