/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire header of the messaging layer, carried as the transport
 * active-message header: transport am id TW_MSG_AM_TAG for tagged messages
 * (no user code runs on arrival, so transports may deliver them inline),
 * TW_MSG_AM_USER for user active messages. Fixed-width, little-endian host
 * order (every rank of a job runs the same build).
 *
 *   version  TW_MSG_PROTO_VERSION; anything else is dropped
 *   type     TW_MSG_TYPE_TAG (tagged message) or TW_MSG_TYPE_AM
 *   am_id    user active-message id (TYPE_AM)
 *   am_hdr_len  bytes of user AM header that follow this header (TYPE_AM);
 *            0 for TYPE_TAG
 *   src_thread  sending thread's index (diagnostics)
 *   tag      the message tag (TYPE_TAG)
 *   len      payload bytes; must equal what the transport delivered
 */
#ifndef TW_MSG_PROTO_H
#define TW_MSG_PROTO_H

#include <stdint.h>

#define TW_MSG_PROTO_VERSION 1
#define TW_MSG_AM_TAG        1 /* transport am id: tagged messages */
#define TW_MSG_AM_USER       2 /* transport am id: user active messages */
#define TW_MSG_AM_RMA        3 /* transport am id: emulated one-sided operations */

enum { TW_MSG_TYPE_TAG = 1, TW_MSG_TYPE_AM = 2 };

typedef struct tw_msg_hdr {
    uint8_t version;
    uint8_t type;
    uint8_t am_id;
    uint8_t reserved;
    uint16_t am_hdr_len;
    uint16_t reserved2;
    uint32_t src_thread;
    uint32_t reserved3;
    uint64_t tag;
    uint64_t len;
} tw_msg_hdr_t;

_Static_assert(sizeof(tw_msg_hdr_t) == 32, "tw_msg_hdr_t is 32 bytes on the wire");

/*
 * One-sided operations over active messages (tw_rma.c), transport am id
 * TW_MSG_AM_RMA, for routes without RDMA (and with reliability on, where
 * they ride rel like everything else):
 *
 *   PUT_REQ  origin -> target: write `len` payload bytes at `addr` inside
 *            region `region` whose key is `key`; answered by PUT_ACK once
 *            the bytes are in place (status TW_OK) or refused
 *   PUT_ACK  target -> origin: `cookie` names the origin's operation
 *   GET_REQ  origin -> target: read `len` bytes at `addr` of the region
 *   GET_REP  target -> origin: the bytes (len of them), or len 0 and an
 *            error status
 *
 * `status` is a tw_status_t (replies only). The target checks version,
 * type, region, key and bounds before it touches memory; the origin
 * checks that a reply names an operation it is waiting for, from that
 * peer, of that kind and length.
 */
enum { TW_RMA_PUT_REQ = 1, TW_RMA_PUT_ACK = 2, TW_RMA_GET_REQ = 3, TW_RMA_GET_REP = 4 };

typedef struct tw_rma_hdr {
    uint8_t version; /* TW_MSG_PROTO_VERSION */
    uint8_t type;
    int16_t status;
    uint32_t reserved;
    uint64_t cookie;
    uint64_t region;
    uint64_t key;
    uint64_t addr;
    uint64_t len;
} tw_rma_hdr_t;

_Static_assert(sizeof(tw_rma_hdr_t) == 48, "tw_rma_hdr_t is 48 bytes on the wire");

#endif /* TW_MSG_PROTO_H */
