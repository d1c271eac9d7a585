/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The transport ops table: what every transport (self, shm, tcp, verbs)
 * and every wrapper over transports (lossy, rel) offers the layers above,
 * and all the runtime needs to compose them. Transports move active
 * messages -- (am_id, header bytes, payload) -- to a peer rank and report
 * completions and arrivals through callbacks; they know nothing of tags,
 * matching or reliability.
 *
 * Send flavours:
 *   am_short  header + payload copied before return (<= attr.max_short);
 *             the buffers are reusable at once, nothing completes later;
 *   am_zcopy  the payload is referenced until comp->cb runs (on the
 *             iface's progress engine);
 *   put/get/flush  one-sided, for transports with capability bits set.
 * Every slot is filled: operations a table lacks point at the shared
 * stubs below (TW_ERR_UNSUPPORTED, or nothing to do), and its caps say so;
 * tw_tl_caps_consistent ties the two, and a unit test runs it on every
 * table. Tables are `static const`. Nobody tests a slot against a stub to
 * learn what an iface can do: that is what iface->caps is for.
 *
 * Wrappers. A wrapper (TW_TL_CAP_WRAPPER) opens over ifaces that are open
 * already (wrap_open): it takes them over (tw_tl_iface_bind points their
 * callbacks at its own), sends through them, and closes them when it
 * closes. The ifaces form a tree; the runtime holds its roots. Slots the
 * layer above calls on an iface (sends, poll, reachable, registration)
 * reach the inner ifaces only through the wrapper; the lifecycle slots
 * (addr_pack / addr_connect, ready, progress, close) are per iface, and
 * the tree helpers below run them on every iface of a tree: inner ones
 * first, except ready and quiesce (the wrapper first).
 *
 * Back-pressure is TW_ERR_AGAIN (no ring slot, no credit): the caller
 * retries after progress; nothing is queued behind its back (there is no
 * pending queue). A send to a peer whose path is down for now (see
 * tw_tl_peer_down_fn_t) fails at once with TW_ERR_TRANSPORT: that path is
 * no use until it is back, but the peer is not gone.
 *
 * Statuses every send slot may return, and what the caller does:
 *   TW_OK               sent (am_short: done; zcopy: comp->cb runs later);
 *   TW_ERR_AGAIN        no room now: retry after progress;
 *   TW_ERR_TRANSPORT    the path to the peer is down for now;
 *   TW_ERR_PEER_FAILED  the peer is gone (its peer_down ran or will run);
 *   TW_ERR_UNREACHABLE  this iface does not reach the peer;
 *   TW_ERR_INVALID      arguments beyond the iface's attr (a caller bug);
 *   TW_ERR_NOMEM        out of memory (logged);
 *   TW_ERR_UNSUPPORTED  the slot is a stub (its cap bit is clear).
 * On any status but TW_OK a zcopy completion never runs.
 *
 * Open and close. iface_open / wrap_open acquire in order and, on
 * failure, undo what they did; an iface that opened is released only by
 * iface_close, which tolerates every state open can leave behind (shm,
 * tcp and verbs open with `goto err` into their own close).
 */
#ifndef TW_TL_H
#define TW_TL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_config.h"
#include "core/tw_stats.h"
#include "progress/tw_pe.h"
#include "threadwire/threadwire.h"

typedef struct tw_tl_iface tw_tl_iface_t;
typedef struct tw_tl_ops tw_tl_ops_t;
typedef struct tw_tl_tap tw_tl_tap_t;

/** Local completion of a zero-copy operation. Embed it in the request;
 * cb runs exactly once, on the progress engine owner. */
typedef struct tw_tl_comp tw_tl_comp_t;
struct tw_tl_comp {
    void (*cb)(tw_tl_comp_t *comp, tw_status_t status);
};

/** Arrival of an active message. @p hdr and @p data are valid only during
 * the call; lengths are what the wire carried (the upper layer checks its
 * own header). Thread: progress engine owner (or, for inline ids, see
 * tw_tl_params_t.inline_am_ids). */
typedef void (*tw_tl_recv_fn_t)(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                                const void *data, size_t len);

/** A large message announced by its sender (rendezvous): the transport
 * holds the sender's address; the receiver decides where the payload goes
 * and pulls it with tw_tl_rndv_get. Opaque; owned by the transport. */
typedef struct tw_tl_rndv tw_tl_rndv_t;

/** Arrival of a rendezvous announcement: @p len payload bytes wait at the
 * sender. Hand @p rndv to tw_tl_rndv_get exactly once (length 0 to release
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

/* Capabilities: what a table can do (ops->caps) and what an open iface
 * does (iface->caps, a subset: a wrapper's are its inner's). */
enum {
    TW_TL_CAP_AM_SHORT = 1u << 0,
    TW_TL_CAP_AM_ZCOPY = 1u << 1,
    TW_TL_CAP_PUT = 1u << 2,
    TW_TL_CAP_GET = 1u << 3,
    TW_TL_CAP_FLUSH = 1u << 4,
    TW_TL_CAP_RNDV = 1u << 5,    /* am_zcopy announces; receivers pull (rndv_get) */
    TW_TL_CAP_POLL = 1u << 6,    /* poll: waiting workers may take arrivals in */
    TW_TL_CAP_MEM_REG = 1u << 7, /* mem_reg / mem_dereg: keys for peers' put/get */
    /* Delivers arrivals of inline ids on the sending thread, inside
     * am_short / am_zcopy (self): a layer that sends with a lock held must
     * not give it ids of its own as inline. */
    TW_TL_CAP_INLINE_SEND = 1u << 8,
    /* An iface beside others (TW_TL_CAP_BESIDE) that goes before them in
     * routing order (leader routing), not after them. */
    TW_TL_CAP_FIRST = 1u << 9,
    /* am_zcopy of an id in eager_am_ids never waits for the receiver: it
     * completes once the payload left the buffer, whether or not the
     * layer above there ever posts a receive for it (tcp: written to the
     * socket, which the peer's lane always reads). Its sender may then
     * send from a buffer it must not rewrite until that completion. */
    TW_TL_CAP_EAGER_IDS = 1u << 10,
    /* Selection (ops->caps only). */
    TW_TL_CAP_ALWAYS_ON = 1u << 16, /* opened whatever the transport list says */
    TW_TL_CAP_OPT_IN = 1u << 17,    /* opened only when the transport list names it */
    TW_TL_CAP_WRAPPER = 1u << 18,   /* opens over open ifaces (wrap_open, wrap_wants) */
    TW_TL_CAP_WRAP_ALL = 1u << 19,  /* one instance over every wanted iface, else one each */
    /* Every rank must run it: its address entry is marked so, and a peer
     * that has it where we do not (or the reverse) is an error. */
    TW_TL_CAP_JOB_WIDE = 1u << 20,
    /* A wrapper that opens beside the roots it wants instead of over
     * them: it taps them (tw_tl_tap) -- their callbacks stay the layer
     * above's -- and joins them as one more root, first or last in
     * routing order (TW_TL_CAP_FIRST on the iface it opened). A layer
     * that wraps them all later (rel) takes it as one more path. */
    TW_TL_CAP_BESIDE = 1u << 21,
};

/* Services the layer above asks of the stack (tw_tl_params_t.features). */
enum {
    /* Delivery despite loss, corruption and failed paths (tw_config_t.reliable). */
    TW_TL_FEATURE_RELIABLE = 1u << 0,
};

/* Frame classes (tw_tl_params_t.am_class): what a frame of an am id is to
 * the layer that sends it, for a fault injector's per-class rules. */
typedef enum tw_tl_frame_class {
    TW_TL_FRAME_DATA,
    TW_TL_FRAME_ACK,
    TW_TL_FRAME_NACK,
    TW_TL_FRAME_CTRL,
    TW_TL_FRAME_NCLASSES
} tw_tl_frame_class_t;

/** Largest header the layers above put in front of a user's active-message
 * header; transports size their header limits with TW_TL_HDR_MAX. */
#define TW_TL_HDR_SLACK 256u
#define TW_TL_HDR_MAX   (TW_AM_HDR_MAX + TW_TL_HDR_SLACK)

/** Every transport's attr.max_short is at least this (each asserts it):
 * the layers above count on it, e.g. for tw_send_inject's TW_INJECT_MAX
 * bytes and its header in one am_short on any route. */
#define TW_TL_SHORT_MIN 4096u

typedef struct tw_tl_params {
    int rank;
    int size;
    tw_pe_t *pe; /* the engine that drives this iface */
    /* How the context made its engines (name and binding aside): a
     * transport that runs engines of its own makes them alike. Valid
     * during iface_open only. */
    const tw_pe_params_t *pe_params;
    uint32_t features; /* TW_TL_FEATURE_* the layer above asks for */
    /* The layer above (tw_tl_iface_bind copies these). */
    tw_tl_recv_fn_t recv; /* arrivals */
    void *recv_arg;
    /* Bit i set: arrivals of am id i run no user code, so a transport that
     * can (self) may deliver them on the sending thread instead of the
     * engine -- in send order, since one thread sends them one by one --
     * and a waiting worker may take them in (poll). */
    uint64_t inline_am_ids;
    /* Bit i set: the layer above keeps few am_zcopy sends of am id i in
     * flight and posts their receives early (collectives), so a
     * transport whose rendezvous costs a round trip through the peer
     * (tcp: RTS, CTS, then the data) sends them at once instead, the
     * receiver staging one that comes first. A single-copy rendezvous
     * (shm's CMA, verbs' RDMA read) may stay. */
    uint64_t eager_am_ids;
    /* am_class[i] (i < 64) is the tw_tl_frame_class_t of am id i (ids
     * >= 64 are data); NULL: every id is data. Static storage. */
    const uint8_t *am_class;
    tw_tl_rndv_fn_t recv_rndv;      /* rendezvous arrivals (TW_TL_CAP_RNDV) */
    tw_tl_peer_down_fn_t peer_down; /* may be NULL */
    void *peer_down_arg;
    const char *job_key; /* the launcher's job key, or "" */
    /* The node map (the runtime's, from the launcher or TW_NODE_ID): the
     * node of every rank, [size], dense ids; ranks with one id share a
     * node. Valid during iface_open only (a transport copies what it
     * needs). */
    const int *node_of;
    int local_rank; /* among the ranks of this node, in rank order */
    int local_size;
} tw_tl_params_t;

typedef struct tw_tl_attr {
    size_t max_short; /* am_short: header + payload */
    size_t max_hdr;   /* am_zcopy header */
    size_t max_zcopy; /* am_zcopy payload */
} tw_tl_attr_t;

/** Base of every iface; a transport's own struct has it first as `super`.
 * Set by open (tw_tl_iface_init) and by tw_tl_iface_bind, read-only once
 * traffic flows. */
struct tw_tl_iface {
    const tw_tl_ops_t *ops;
    /* The transport as peers know it (remote keys, log lines): its ops'
     * name; a wrapper that only adds faults keeps its inner's. */
    const char *name;
    uint32_t caps; /* TW_TL_CAP_* this iface does (operations, not selection) */
    tw_pe_t *pe;
    tw_stats_t *stats; /* its own counters (transports: tw_tl_stat_descs) */
    tw_tl_attr_t attr;
    int rank;
    int size;
    /* The layer above. */
    tw_tl_recv_fn_t recv;
    void *recv_arg;
    uint64_t inline_am_ids;
    uint64_t eager_am_ids;
    const uint8_t *am_class;
    tw_tl_rndv_fn_t recv_rndv;
    tw_tl_peer_down_fn_t peer_down;
    void *peer_down_arg;
    /* Another layer's tap on this iface (tw_tl_tap), or NULL. */
    tw_tl_tap_t *tap;
    /* A wrapper's inner ifaces (owned: closed with it); none for a transport. */
    tw_tl_iface_t *const *inner;
    unsigned ninner;
    /* Set by tw_tl_close before the inner ifaces close (the engines have
     * stopped): what they complete or report now must not make the
     * wrapper send again -- a command queued to an engine would outlive
     * the iface it names. Thread: the closer's. */
    bool closing;
};

enum {
    TW_TL_STAT_TX_MSGS,
    TW_TL_STAT_TX_BYTES,
    TW_TL_STAT_RX_MSGS,
    TW_TL_STAT_RX_BYTES,
    TW_TL_STAT_AGAIN,
    TW_TL_STAT_REFUSED,    /* connections that failed the handshake */
    TW_TL_STAT_BAD_FRAMES, /* malformed frames (the connection is closed) */
    TW_TL_STAT_HANDED,     /* sends handed to an engine's thread (tw_tl_submit), not written
                            * by their caller: all of self's and verbs', tcp's whose lane was
                            * busy */
    TW_TL_STAT_RX_DIRECT,  /* polling passes that found data by reading, not polling, first
                            * (tcp: TW_TCP_DIRECT_RECV) */
    TW_TL_STAT_COUNT
};
extern const tw_stat_desc_t tw_tl_stat_descs[TW_TL_STAT_COUNT];

struct tw_tl_ops {
    const char *name; /* also the name of its address entry and counters */
    uint32_t caps;    /* TW_TL_CAP_*: what the table can do, and how it is selected */
    /** Its tunables (tw_info, the unknown-variable check, and validation at
     * tw_init: a bad value fails tw_init even when the table's owner is not
     * used), or NULL. */
    const tw_cfg_table_t *cfg;
    /** Usable on this host? TW_OK, or TW_ERR_UNSUPPORTED with the reason in
     * @p why (always filled on failure). Thread: any. */
    tw_status_t (*query)(char *why, size_t why_len);
    /** Open a transport: TW_OK; TW_ERR_INVALID (params it cannot work
     * with), TW_ERR_NOMEM, TW_ERR_TRANSPORT (a system resource failed:
     * logged), TW_ERR_UNSUPPORTED (wrappers). Thread: the caller of
     * tw_init. */
    tw_status_t (*iface_open)(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
    /** Wrappers: should this wrapper, asked for per @p params, go over
     * @p inner? Sets *@p wants_p. TW_ERR_INVALID for settings it cannot
     * use (logged, naming the variable): tw_init fails. Thread: the caller
     * of tw_init. */
    tw_status_t (*wrap_wants)(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                              bool *wants_p);
    /** Wrappers: open over @p inner[0 .. @p n) (one unless
     * TW_TL_CAP_WRAP_ALL), taking them over (tw_tl_iface_bind) with the
     * layer above's callbacks in @p params. On success the wrapper owns
     * them; on failure they are untouched and still the caller's. Statuses
     * as iface_open. Thread: the caller of tw_init. */
    tw_status_t (*wrap_open)(tw_tl_iface_t *const *inner, unsigned n, const tw_tl_params_t *params,
                             tw_tl_iface_t **iface_p);
    /** Release this iface alone (tw_tl_close closes a whole tree, inner
     * ifaces first), after its engine stopped: in-flight zcopy operations
     * complete with TW_ERR_CANCELED (or are delivered) before it returns.
     * Thread: the caller of tw_finalize. */
    void (*iface_close)(tw_tl_iface_t *iface);
    /** Take the callbacks of a (new) layer above from @p up: a wrapper
     * taking this iface over. Transports use tw_tl_iface_bind; a wrapper
     * also hands its inner ifaces what they need of it (lossy: the inline
     * ids). Thread: the caller of tw_init, before traffic. */
    void (*bind)(tw_tl_iface_t *iface, const tw_tl_params_t *up);
    /** Address exchange, per iface. addr_pack writes what peers need to
     * reach this iface (its entry in the bootstrap blob; 0 bytes: it needs
     * none) -- TW_OK, or TW_ERR_NOMEM when @p cap is too small;
     * addr_connect takes a peer's entry of the same name, after the inner
     * ifaces took theirs (before any traffic, for every other rank) --
     * TW_OK, TW_ERR_INVALID (a malformed entry: logged, naming the peer),
     * TW_ERR_NOMEM. Thread: the caller of tw_init. */
    tw_status_t (*addr_pack)(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p);
    tw_status_t (*addr_connect)(tw_tl_iface_t *iface, int peer, const void *addr, size_t len);
    /** Runs once every rank connected (after a job-wide fence) and the
     * routes are set, before the engines start: a transport may start
     * threads of its own here (one that cannot logs it and fails the peers
     * it would serve). A wrapper's runs before its inner ifaces', whose
     * threads may deliver to it at once. Thread: the caller of tw_init. */
    void (*ready)(tw_tl_iface_t *iface);
    /** Before close, with the engines still running: say goodbye to the
     * peers and wait (bounded) until what was sent is acknowledged. The
     * wrapper runs before its inner ifaces. Thread: the caller of
     * tw_finalize. */
    void (*quiesce)(tw_tl_iface_t *iface);
    /** Does this iface reach @p peer (after addr_connect)? Thread: any. */
    bool (*reachable)(tw_tl_iface_t *iface, int peer);
    /** Send an active message by copy (see the statuses above). Thread: any. */
    tw_status_t (*am_short)(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len);
    /** Send an active message by reference: comp->cb runs once the payload
     * is no longer needed (TW_OK), or with TW_ERR_PEER_FAILED / CANCELED.
     * Thread: any. */
    tw_status_t (*am_zcopy)(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
    /** One-sided write / read / ordering point (TW_TL_CAP_PUT / GET /
     * FLUSH): @p rkey is the peer's mem_reg key. comp->cb runs once the
     * data is in place (put: at the target; flush: every earlier put to the
     * peer is). Statuses as the sends. Thread: any. */
    tw_status_t (*put_zcopy)(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                             uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
    tw_status_t (*get_zcopy)(tw_tl_iface_t *iface, int peer, void *dst, size_t len, uint64_t raddr,
                             const void *rkey, tw_tl_comp_t *comp);
    tw_status_t (*flush)(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp);
    /** Pull @p len bytes (at most the announced length) of a rendezvous
     * into @p dst; comp->cb runs when they landed (TW_OK), or with
     * TW_ERR_PEER_FAILED -- possibly before this returns. The sender's
     * operation completes too. TW_OK, or TW_ERR_INVALID (more than was
     * announced: the handle is released). Thread: an engine of the
     * transport -- the one that announced it (from recv_rndv on), or the
     * iface's; a transport whose handles belong to one engine of its own
     * hands the pull over to it. */
    tw_status_t (*rndv_get)(tw_tl_iface_t *iface, tw_tl_rndv_t *rndv, void *dst, size_t len,
                            tw_tl_comp_t *comp);
    /** This iface's own work on its engine (not its inner ifaces': every
     * iface of a tree is registered with its engine, tw_tl_pe_add_tree).
     * Returns events handled; 0 lets the engine think of sleep. Thread:
     * engine owner. */
    int (*progress)(tw_tl_iface_t *iface);
    /** What a waiting worker may do for itself while the engine is idle
     * (TW_TL_CAP_POLL): deliver arrivals of inline_am_ids (and the
     * rendezvous traffic and completions that go with them), stopping at
     * the first arrival that must run on the engine (user active
     * messages), so order holds. The iface takes its engine's lock
     * itself (tw_pe_try_call) and does nothing when it is taken; a wrapper
     * polls its inner ifaces. Returns events handled. Thread: any --
     * never runs user code. */
    int (*poll)(tw_tl_iface_t *iface);
    /** Register [@p addr, + @p len) for the peers' put_zcopy / get_zcopy
     * (TW_TL_CAP_MEM_REG): write the remote key they take (at most
     * TW_TL_KEY_MAX bytes; *@p key_len_p: room in, length out) and a
     * handle for mem_dereg. TW_OK, TW_ERR_NOMEM, TW_ERR_INVALID (the device
     * refused the range: logged). Thread: any. */
    tw_status_t (*mem_reg)(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                           size_t *key_len_p, void **handle_p);
    /** Release a registration: the device lets go of it once the
     * operations in flight with it completed. TW_OK. Thread: any. */
    tw_status_t (*mem_dereg)(tw_tl_iface_t *iface, void *handle);
};

/** Largest transport remote key (mem_reg). */
#define TW_TL_KEY_MAX 48

/* Shared stubs for slots a table does not implement (TW_ERR_UNSUPPORTED,
 * or nothing to do for the lifecycle slots). */
tw_status_t tw_tl_stub_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
tw_status_t tw_tl_stub_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                  bool *wants_p);
tw_status_t tw_tl_stub_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                                 const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
tw_status_t tw_tl_stub_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len);
tw_status_t tw_tl_stub_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_put_zcopy(tw_tl_iface_t *iface, int peer, const void *src, size_t len,
                                 uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_get_zcopy(tw_tl_iface_t *iface, int peer, void *dst, size_t len,
                                 uint64_t raddr, const void *rkey, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_flush(tw_tl_iface_t *iface, int peer, tw_tl_comp_t *comp);
tw_status_t tw_tl_stub_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *rndv, void *dst, size_t len,
                                tw_tl_comp_t *comp);
int tw_tl_stub_progress(tw_tl_iface_t *iface);
int tw_tl_stub_poll(tw_tl_iface_t *iface);
tw_status_t tw_tl_stub_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *key,
                               size_t *key_len_p, void **handle_p);
tw_status_t tw_tl_stub_mem_dereg(tw_tl_iface_t *iface, void *handle);
/* Lifecycle of an iface with nothing of its own to exchange, start or drain. */
tw_status_t tw_tl_noaddr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p);
tw_status_t tw_tl_noaddr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len);
void tw_tl_noaddr_ready(tw_tl_iface_t *iface);
void tw_tl_noop_quiesce(tw_tl_iface_t *iface);
/** A quiesce that waits until @p pending(@p iface) says 0 -- rendezvous
 * sends of ours their receivers have not read yet (tw_finalize delivers
 * what was handed over) -- for up to 2 s, driving @p iface's engine when
 * it has no thread; then warns, naming @p what, and returns (close
 * cancels the rest). A receiver that never matches must not hold us. */
void tw_tl_quiesce_wait(tw_tl_iface_t *iface, unsigned (*pending)(tw_tl_iface_t *iface),
                        const char *what);

/** Fill the base part of an iface (a transport's iface_open): caps are the
 * table's operations. TW_OK, TW_ERR_NOMEM (counters; logged). */
tw_status_t tw_tl_iface_init(tw_tl_iface_t *iface, const tw_tl_ops_t *ops,
                             const tw_tl_params_t *params, const tw_tl_attr_t *attr);
/** Fill the base part of a wrapper over @p inner[0 .. @p n): the layer
 * above's callbacks from @p params, @p caps, @p stats (its own counters,
 * or NULL), and the inner ifaces it will own. Thread: the caller of
 * tw_init. */
void tw_tl_wrapper_init(tw_tl_iface_t *iface, const tw_tl_ops_t *ops, const tw_tl_params_t *params,
                        uint32_t caps, tw_stats_t *stats, tw_tl_iface_t *const *inner, unsigned n);
void tw_tl_iface_cleanup(tw_tl_iface_t *iface);

/** Run what is queued on the stopped engine @p pe (NULL: nothing), in
 * batches, until none is left, @p until_ns (tw_time_ns) passes, or 64
 * batches ran: commands may queue more. At close, commands submitted
 * after the engine stopped (what the layers above sent as they quiesced
 * and closed) may name an iface: they run while it exists. Thread: the
 * closer. */
void tw_tl_run_leftovers(tw_pe_t *pe, uint64_t until_ns);

/** Point @p iface's callbacks (recv, recv_rndv, peer_down and their args,
 * inline_am_ids, am_class) at those in @p up: the bind slot of a
 * transport. Transports read them at each use, never a copy. Thread: the
 * caller of tw_init, before traffic (the engines have not started). */
void tw_tl_iface_bind(tw_tl_iface_t *iface, const tw_tl_params_t *up);

/* ---- taps -------------------------------------------------------------- */

/** A layer beside the roots (TW_TL_CAP_BESIDE) sends through an iface it
 * does not own and takes from it only its own frames: arrivals of
 * @p am_id go to @p recv, everything else to the layer above as bound;
 * every peer_down goes to the layer above first, then to @p peer_down.
 * The iface keeps the tap until it closes, then calls @p release (after
 * its iface_close: nothing is delivered through the tap any more), so a
 * tap may outlive the layer that made it. Callbacks run on the threads
 * the iface delivers on. */
struct tw_tl_tap {
    uint8_t am_id;
    tw_tl_iface_t *iface; /* the tapped iface */
    void (*recv)(tw_tl_tap_t *tap, int src, const void *hdr, size_t hdr_len, const void *data,
                 size_t len);
    void (*peer_down)(tw_tl_tap_t *tap, int peer, tw_status_t why);
    void (*release)(tw_tl_tap_t *tap);
    /* The layer above's callbacks (tw_tl_iface_bind writes them here
     * while the tap is on). */
    tw_tl_recv_fn_t up_recv;
    tw_tl_rndv_fn_t up_recv_rndv;
    void *up_recv_arg;
    tw_tl_peer_down_fn_t up_peer_down;
    void *up_peer_down_arg;
};

/** Put @p tap on @p iface (no tap yet): the layer above's callbacks move
 * into it, and @p iface delivers through it from now on. Thread: the
 * caller of tw_init, before traffic. */
void tw_tl_tap(tw_tl_iface_t *iface, tw_tl_tap_t *tap);

/** The operation bits of TW_TL_CAP_*. */
#define TW_TL_CAP_OPS_MASK 0xffffu

/** Hand @p data (a transport's fragment of @p alloc_len bytes carrying
 * @p len payload bytes) to engine @p pe, where @p fn(@p arg, @p data, 0)
 * runs; counts it sent in @p iface's stats. On failure (TW_ERR_AGAIN: the
 * lane is full) frees it, counts the refusal and returns the status.
 * Thread: any. */
tw_status_t tw_tl_submit(tw_tl_iface_t *iface, tw_pe_t *pe, void (*fn)(void *, void *, uint64_t),
                         void *arg, void *data, size_t alloc_len, size_t len);

/* ---- rendezvous handed over -------------------------------------------- */

/** What a transport whose rendezvous handles belong to one engine keeps in
 * each handle so that rndv_get from any other thread runs on that engine:
 * the pull's arguments, written by the caller and published to the engine
 * by tw_pe_hand_over. */
typedef struct tw_tl_rndv_pull tw_tl_rndv_pull_t;
typedef void (*tw_tl_rndv_apply_fn_t)(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp);
struct tw_tl_rndv_pull {
    tw_tl_rndv_apply_fn_t apply;
    tw_tl_rndv_t *h;
    void *dst;
    size_t len;
    tw_tl_comp_t *comp;
};

/** Hand the announcement of @p h up (@p iface's recv_rndv): a receive that
 * matches inside it pulls at once (tw_tl_rndv_pull_on knows). Thread: the
 * engine that owns @p h. */
void tw_tl_rndv_announce(tw_tl_iface_t *iface, int src, uint8_t am_id, const void *hdr,
                         size_t hdr_len, size_t len, tw_tl_rndv_t *h);
/** Run @p apply(@p h, @p dst, @p len, @p comp) as the owner of @p pe: at
 * once when the caller owns @p pe or is announcing @p h, else handed over
 * through @p pull (a field of @p h). Never fails: the sender waits for it.
 * Thread: any. */
void tw_tl_rndv_pull_on(tw_pe_t *pe, tw_tl_rndv_t *h, tw_tl_rndv_pull_t *pull,
                        tw_tl_rndv_apply_fn_t apply, void *dst, size_t len, tw_tl_comp_t *comp);

/* ---- registry ---------------------------------------------------------- */

/** Every transport compiled in, in routing order (the first that reaches a
 * peer carries its traffic), NULL-terminated. */
extern const tw_tl_ops_t *const tw_tl_all[];
/** Wrappers over single transports (fault injection), in stacking order,
 * NULL-terminated. */
extern const tw_tl_ops_t *const tw_tl_wrappers[];
/** A transport of tw_tl_all by name, or NULL. */
const tw_tl_ops_t *tw_tl_find(const char *name);
/** True when slots and capability bits agree (unit test, debug checks). */
bool tw_tl_caps_consistent(const tw_tl_ops_t *ops);

/* ---- trees ------------------------------------------------------------- */

/** Call @p fn on every iface of the tree under @p root, inner ifaces
 * first (post-order), until it returns non-zero; returns that value. */
int tw_tl_walk(tw_tl_iface_t *root, int (*fn)(tw_tl_iface_t *iface, void *arg), void *arg);
/** Register every iface of the tree with its engine (tw_pe_add) and mark
 * the engines of polling ifaces (tw_pe_workers_poll). Before tw_pe_start. */
tw_status_t tw_tl_pe_add_tree(tw_tl_iface_t *root);
/** ready on every iface of the tree, each wrapper before its inner ifaces. */
void tw_tl_ready_tree(tw_tl_iface_t *root);
/** quiesce, the wrapper before its inner ifaces. */
void tw_tl_quiesce_tree(tw_tl_iface_t *root);
/** Close the whole tree, inner ifaces first. */
void tw_tl_close(tw_tl_iface_t *root);

/* ---- dispatch ------------------------------------------------------------ */
/* The upper layers call an iface through these, never through its ops. */

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
static inline tw_status_t tw_tl_put_zcopy(tw_tl_iface_t *i, int peer, const void *src, size_t len,
                                          uint64_t raddr, const void *rkey, tw_tl_comp_t *c)
{
    return i->ops->put_zcopy(i, peer, src, len, raddr, rkey, c);
}
static inline tw_status_t tw_tl_get_zcopy(tw_tl_iface_t *i, int peer, void *dst, size_t len,
                                          uint64_t raddr, const void *rkey, tw_tl_comp_t *c)
{
    return i->ops->get_zcopy(i, peer, dst, len, raddr, rkey, c);
}
static inline tw_status_t tw_tl_flush(tw_tl_iface_t *i, int peer, tw_tl_comp_t *c)
{
    return i->ops->flush(i, peer, c);
}
static inline tw_status_t tw_tl_rndv_get(tw_tl_iface_t *i, tw_tl_rndv_t *r, void *dst, size_t len,
                                         tw_tl_comp_t *c)
{
    return i->ops->rndv_get(i, r, dst, len, c);
}
static inline bool tw_tl_reachable(tw_tl_iface_t *i, int peer)
{
    return i->ops->reachable(i, peer);
}
static inline int tw_tl_progress(tw_tl_iface_t *i)
{
    return i->ops->progress(i);
}
static inline int tw_tl_poll(tw_tl_iface_t *i)
{
    return i->ops->poll(i);
}
static inline tw_status_t tw_tl_mem_reg(tw_tl_iface_t *i, void *addr, size_t len, void *key,
                                        size_t *key_len_p, void **handle_p)
{
    return i->ops->mem_reg(i, addr, len, key, key_len_p, handle_p);
}
static inline tw_status_t tw_tl_mem_dereg(tw_tl_iface_t *i, void *handle)
{
    return i->ops->mem_dereg(i, handle);
}
static inline tw_status_t tw_tl_addr_pack(tw_tl_iface_t *i, void *buf, size_t cap, size_t *len_p)
{
    return i->ops->addr_pack(i, buf, cap, len_p);
}
static inline tw_status_t tw_tl_addr_connect(tw_tl_iface_t *i, int peer, const void *addr,
                                             size_t len)
{
    return i->ops->addr_connect(i, peer, addr, len);
}
/** A wrapper takes @p i over: its callbacks become those of @p up. */
static inline void tw_tl_bind(tw_tl_iface_t *i, const tw_tl_params_t *up)
{
    i->ops->bind(i, up);
}
static inline tw_status_t tw_tl_query(const tw_tl_ops_t *ops, char *why, size_t why_len)
{
    return ops->query(why, why_len);
}
static inline tw_status_t tw_tl_iface_open(const tw_tl_ops_t *ops, const tw_tl_params_t *p,
                                           tw_tl_iface_t **iface_p)
{
    return ops->iface_open(p, iface_p);
}
static inline tw_status_t tw_tl_wrap_wants(const tw_tl_ops_t *ops, const tw_tl_params_t *p,
                                           const tw_tl_iface_t *inner, bool *wants_p)
{
    return ops->wrap_wants(p, inner, wants_p);
}
static inline tw_status_t tw_tl_wrap_open(const tw_tl_ops_t *ops, tw_tl_iface_t *const *inner,
                                          unsigned n, const tw_tl_params_t *p,
                                          tw_tl_iface_t **iface_p)
{
    return ops->wrap_open(inner, n, p, iface_p);
}

#endif /* TW_TL_H */
