/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire header of the messaging layer, carried as the transport
 * active-message header: transport am id TW_MSG_AM_TAG for tagged messages
 * (no user code runs on arrival, so transports may deliver them inline),
 * TW_MSG_AM_USER for user active messages, TW_MSG_AM_COLL for the library's
 * own tagged messages (the collectives: a matching space of their own, so
 * no user tag can ever match them) and their control messages. Fixed-width, little-endian host
 * order (every rank of a job runs the same build).
 *
 *   version  TW_MSG_PROTO_VERSION; anything else is dropped
 *   type     TW_MSG_TYPE_TAG (tagged message), TW_MSG_TYPE_AM, or
 *            TW_MSG_TYPE_CTL (AM_COLL only: handed to the control hook,
 *            never matched; eager)
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
#define TW_MSG_AM_RMA        3 /* transport am id: emulated one-sided ops (tw_rma_proto.h) */
#define TW_MSG_AM_COLL       4 /* transport am id: the library's tagged messages (src/coll) */

enum { TW_MSG_TYPE_TAG = 1, TW_MSG_TYPE_AM = 2, TW_MSG_TYPE_CTL = 3 };

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

#endif /* TW_MSG_PROTO_H */
