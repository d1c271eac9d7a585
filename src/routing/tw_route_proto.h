/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * route's frames. Each is an active message of id TW_ROUTE_AM on a
 * transport between two neighbours (a rank and its leader, two leaders):
 * the transport header is a tw_route_hdr_t, then -- DATA, first fragment
 * only -- the upper layer's header; the payload is a fragment of the
 * upper layer's. A message larger than a frame goes in fragments that
 * follow one another on every hop, so a receiver builds one message per
 * sender at a time.
 *
 *   DATA  @p src's message to @p dst, upper am id @p am_id;
 *         flags FIRST / LAST, @p offset of this fragment in the whole
 *         @p msg_len; @p hops: leaders it went through so far (at most 2).
 *         SEQ: numbered (@p seq) per (src, dst) -- the receiver hands
 *         frames up in that order whatever order the hops kept (a
 *         transport keeps order per sending thread only, and a frame
 *         passes through several threads). Without SEQ (rel above, which
 *         orders itself and repairs losses) frames go up as they come.
 *   DOWN  from a neighbour: rank @p dst can no longer be reached (gone, or
 *         its node's leader is); @p am_id says how (TW_ROUTE_DOWN_*).
 */
#ifndef TW_ROUTE_PROTO_H
#define TW_ROUTE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

#define TW_ROUTE_AM            96 /* transport am id (>= 64: frame class data) */
#define TW_ROUTE_PROTO_VERSION 1
#define TW_ROUTE_MAX_HOPS      2

enum { TW_ROUTE_T_DATA = 1, TW_ROUTE_T_DOWN = 2 };
enum { TW_ROUTE_F_FIRST = 1u << 0, TW_ROUTE_F_LAST = 1u << 1, TW_ROUTE_F_SEQ = 1u << 2 };
enum { TW_ROUTE_DOWN_LEFT = 0, TW_ROUTE_DOWN_FAILED = 1 };

typedef struct tw_route_hdr {
    uint8_t version;
    uint8_t type;
    uint8_t am_id;
    uint8_t hops;
    uint16_t hdr_len; /* upper header bytes after this one */
    uint8_t flags;
    uint8_t reserved; /* 0 */
    int32_t src;
    int32_t dst;
    uint32_t msg_len;
    uint32_t offset;
    uint32_t crc; /* crc32c of this header with crc 0 (the payload is the upper layer's) */
    uint32_t seq; /* DATA with TW_ROUTE_F_SEQ: @p src's frames to @p dst are numbered */
} tw_route_hdr_t;
_Static_assert(sizeof(tw_route_hdr_t) == 32, "tw_route_hdr_t is 32 bytes on the wire");

/** Set @p h's checksum (after its last change: each hop changes hops). */
void tw_route_seal(void *h);

/** Check a frame (transport header @p hdr_len bytes, payload @p len) from
 * a job of @p size ranks whose messages are at most @p max_msg: TW_OK with
 * the header in *@p h; TW_ERR_AGAIN when its checksum fails (damaged on
 * the way), or TW_ERR_INVALID (malformed), with the reason in *@p why. */
tw_status_t tw_route_parse(const void *hdr, size_t hdr_len, size_t len, int size, uint64_t max_msg,
                           tw_route_hdr_t *h, const char **why);

#endif /* TW_ROUTE_PROTO_H */
