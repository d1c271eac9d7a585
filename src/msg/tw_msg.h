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
/** The one-sided operations (tw_rma.h) that share its routes. */
struct tw_rma *tw_msg_rma(tw_msg_t *msg);

#endif /* TW_MSG_H */
