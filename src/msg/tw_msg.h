/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Messaging layer: tagged send/receive with matching, and user active
 * messages, on top of the transports. One tw_msg_t per context.
 */
#ifndef TW_MSG_H
#define TW_MSG_H

#include <stdio.h>

#include "threadwire/threadwire.h"
#include "transports/base/tw_tl.h"

typedef struct tw_msg tw_msg_t;

typedef struct tw_msg_params {
    int rank;
    int size;
    tw_context_t *ctx;      /* handed to AM handlers */
    size_t eager_limit;     /* payloads up to this go am_short (copied) */
    unsigned match_buckets; /* power of two */
    uint64_t stall_warn_ns; /* TW_STALL_WARN; 0 = no watchdog */
} tw_msg_params_t;

enum {
    TW_MSG_STAT_SENT,
    TW_MSG_STAT_SENT_BYTES,
    TW_MSG_STAT_EAGER,
    TW_MSG_STAT_ZCOPY,
    TW_MSG_STAT_RECVD,
    TW_MSG_STAT_RECVD_BYTES,
    TW_MSG_STAT_UNEXPECTED,
    TW_MSG_STAT_TRUNCATED,
    TW_MSG_STAT_AM_RUN,
    TW_MSG_STAT_DROPPED, /* malformed or unhandled arrivals */
    TW_MSG_STAT_STALLS,  /* operations the watchdog warned of */
    TW_MSG_STAT_COUNT
};

tw_status_t tw_msg_create(const tw_msg_params_t *params, tw_msg_t **msg_p);
/** Cancel posted receives (TW_ERR_CANCELED), free unexpected messages. */
void tw_msg_destroy(tw_msg_t *msg);
/** Route to @p peer through @p iface (before traffic starts). */
void tw_msg_set_route(tw_msg_t *msg, int peer, tw_tl_iface_t *iface);
/** The transport arrival callback (tw_tl_params_t.recv, arg = msg). */
void tw_msg_recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len);

/** The transport rendezvous callback (tw_tl_params_t.recv_rndv, arg = msg). */
void tw_msg_rndv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len, size_t len,
                    tw_tl_rndv_t *rndv);
/** @p peer is gone: sends to it return TW_ERR_PEER_FAILED from now on, and
 * receives posted for it (exact or masked) complete with it. True the
 * first time for @p peer (several roots may reach it and each report it:
 * a transport and the leaders' route). Thread: any. */
bool tw_msg_peer_down(tw_msg_t *msg, int peer);

tw_status_t tw_msg_send(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len,
                        tw_cq_t *cq, void *user);
/** tw_send_inject: @p len <= TW_INJECT_MAX, copied by am_short whatever the
 * eager limit; no CQ. Thread: any. */
tw_status_t tw_msg_send_inject(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len);
tw_status_t tw_msg_recv(tw_msg_t *msg, int src, uint64_t tag, uint64_t ignore_mask, void *buf,
                        size_t len, tw_cq_t *cq, void *user);
tw_status_t tw_msg_am_register(tw_msg_t *msg, uint8_t id, tw_am_handler_t fn, void *arg);
tw_status_t tw_msg_am_send(tw_msg_t *msg, int dst, uint8_t id, const void *hdr, size_t hdr_len,
                           const void *data, size_t len, tw_cq_t *cq, void *user);
tw_stats_t *tw_msg_stats(tw_msg_t *msg);
/** The stall watchdog (tw_stall.h): other layers add their walkers, the
 * runtime starts it. */
struct tw_stall *tw_msg_stall(tw_msg_t *msg);

/* ---- the library's own messages (collectives) ---------------------------
 * Tagged messages in a matching space of their own (transport am id
 * TW_MSG_AM_COLL): the same eager / rendezvous paths and completions as
 * tw_msg_send / tw_msg_recv, but no user tag ever meets them. Receives
 * are exact (one source, every tag bit). Control messages are small,
 * eager, never matched: they go to the control hook as they arrive. */

/** Control arrivals: run on the engine, must not block. */
typedef void (*tw_msg_ctl_fn_t)(void *arg, int src, uint64_t tag, const void *data, size_t len);
/** Most payload bytes a send to @p dst copies at once (am_short): larger
 * ones are sent from the buffer until the receiver takes them. */
size_t tw_msg_eager_max(tw_msg_t *msg, int dst);
/** True when a collective's send to @p dst of any size completes without
 * @p dst's help (TW_TL_CAP_EAGER_IDS: no rendezvous), so it may be sent
 * from a buffer the sender keeps until its completion; false when a
 * large one waits for the receiver to take it. */
bool tw_msg_coll_detached(tw_msg_t *msg, int dst);
/** Install the control hook (before traffic starts). */
void tw_msg_coll_set_ctl(tw_msg_t *msg, tw_msg_ctl_fn_t fn, void *arg);
tw_status_t tw_msg_coll_send(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len,
                             tw_cq_t *cq, void *user);
tw_status_t tw_msg_coll_recv(tw_msg_t *msg, int src, uint64_t tag, void *buf, size_t len,
                             tw_cq_t *cq, void *user);
/** A collective's message of at most TW_INJECT_MAX bytes, copied at
 * once (am_short): no CQ slot, no completion. */
tw_status_t tw_msg_coll_inject(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len);
/** A control message of at most TW_INJECT_MAX bytes; no completion. */
tw_status_t tw_msg_coll_ctl(tw_msg_t *msg, int dst, uint64_t tag, const void *buf, size_t len);
/** Take back the posted receive for (@p src, @p tag): true when it was
 * still waiting (it will never complete; its CQ slot is given back),
 * false when it matched already (its completion comes, or came). */
bool tw_msg_coll_cancel(tw_msg_t *msg, int src, uint64_t tag);
/** Drop every unexpected message whose tag equals @p tag on @p mask (the
 * leftovers of a group that is gone); rendezvous senders are released. */
void tw_msg_coll_purge(tw_msg_t *msg, uint64_t tag, uint64_t mask);
/** No collective will read again (finalize): drop every unexpected
 * message of the library's own tags, now and as they arrive, releasing
 * rendezvous senders -- a member whose collective failed may have sent
 * for a round this one never entered, and would wait for it. */
void tw_msg_coll_close(tw_msg_t *msg);
/** The one-sided operations (tw_rma.h) that share its routes. */
struct tw_rma *tw_msg_rma(tw_msg_t *msg);

#endif /* TW_MSG_H */
