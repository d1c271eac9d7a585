/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire formats of the one-sided operations: the packed remote key, and
 * the header of the active messages that emulate puts and gets. Pure
 * functions, so the parsers can be fuzzed (tests/fuzz/fuzz_rkey.c) and
 * unit-tested (tests/unit/test_rma_wire.c) on their own. Fields are
 * fixed-width, host order (every rank of a job runs the same build).
 *
 * Packed remote key (tw_mr_pack writes it; a peer hands it to tw_put and
 * tw_get, so it crosses processes inside the application's own messages):
 *
 *   u32 magic "TWRK", u8 version, u8 sections, u16 total length,
 *   i32 owner rank, u32 0, u64 id, u64 key, u64 base, u64 length,
 *   sections x { u8 name length, name, u8 key length, key bytes }
 *
 * One section per transport that registered the region (tw_rma_mem.c),
 * named by the transport's ops name; its bytes are that transport's own
 * key, opaque here. A key longer than its sections, sections running
 * past its length, or a reserved word other than 0 is refused.
 *
 * RMA active messages (transport am id TW_MSG_AM_RMA, tw_msg_proto.h):
 * the transport header is one tw_rma_hdr_t, exactly.
 *
 *   PUT_REQ  origin -> target: write `len` payload bytes at `addr` inside
 *            region `region` whose key is `key`; answered by PUT_ACK once
 *            the bytes are in place (status TW_OK) or refused
 *   PUT_ACK  target -> origin: `cookie` names the origin's operation
 *   GET_REQ  origin -> target: read `len` bytes at `addr` of the region
 *   GET_REP  target -> origin: the bytes (len of them), or len 0 and an
 *            error status
 *
 * `status` is a tw_status_t (replies only). tw_rma_hdr_parse checks
 * length, version, type and status; the target checks region, key and
 * bounds before it touches memory; the origin checks that a reply names
 * an operation it is waiting for, from that peer, of that kind and length.
 */
#ifndef TW_RMA_PROTO_H
#define TW_RMA_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"
#include "transports/base/tw_tl.h"

/* ---- packed remote key ------------------------------------------------- */

#define TW_RMA_RKEY_MAGIC    0x4b525754u /* "TWRK" */
#define TW_RMA_RKEY_VERSION  1
#define TW_RMA_RKEY_SECT_MAX 2  /* sections: transports that register memory */
#define TW_RMA_RKEY_NAME_MAX 31 /* bytes of a section's transport name */

typedef struct tw_rma_rkey_hdr {
    uint32_t magic;    /* TW_RMA_RKEY_MAGIC */
    uint8_t version;   /* TW_RMA_RKEY_VERSION */
    uint8_t nsect;     /* sections that follow, at most TW_RMA_RKEY_SECT_MAX */
    uint16_t len;      /* the whole key, this header included */
    int32_t owner;     /* the rank whose memory it is */
    uint32_t reserved; /* 0 */
    uint64_t id;       /* the region's id at its owner */
    uint64_t key;      /* the region's random key: requests must carry it */
    uint64_t base;     /* the region, in the owner's address space */
    uint64_t size;
} tw_rma_rkey_hdr_t;

_Static_assert(sizeof(tw_rma_rkey_hdr_t) == 48, "packed key header is 48 bytes");
_Static_assert(offsetof(tw_rma_rkey_hdr_t, owner) == 8 && offsetof(tw_rma_rkey_hdr_t, id) == 16 &&
                   offsetof(tw_rma_rkey_hdr_t, key) == 24 &&
                   offsetof(tw_rma_rkey_hdr_t, size) == 40,
               "packed key header fields sit where the format says");
_Static_assert(sizeof(tw_rma_rkey_hdr_t) +
                       TW_RMA_RKEY_SECT_MAX * (2 + TW_RMA_RKEY_NAME_MAX + TW_TL_KEY_MAX) <=
                   TW_RKEY_MAX,
               "every packed key fits TW_RKEY_MAX");
_Static_assert(TW_RKEY_MAX <= UINT16_MAX && TW_TL_KEY_MAX <= UINT8_MAX,
               "the length fields hold every length");

/* A section: pointers into the packed bytes (parsed) or the sender's
 * memory (to pack). The name is not NUL-terminated on the wire. */
typedef struct tw_rma_rkey_sect {
    const char *name;
    const uint8_t *key;
    uint8_t name_len; /* 1 .. TW_RMA_RKEY_NAME_MAX */
    uint8_t key_len;  /* 0 .. TW_TL_KEY_MAX */
} tw_rma_rkey_sect_t;

/* A remote key, unpacked: h.nsect sections. */
typedef struct tw_rma_rkey {
    tw_rma_rkey_hdr_t h;
    tw_rma_rkey_sect_t sect[TW_RMA_RKEY_SECT_MAX];
} tw_rma_rkey_t;

/** Bytes tw_rma_rkey_pack writes for @p k (header and its h.nsect
 * sections). */
size_t tw_rma_rkey_size(const tw_rma_rkey_t *k);

/** Write @p k to @p out (tw_rma_rkey_size(k) bytes): its header with
 * magic, version, length and reserved filled in, then its sections.
 * @p k->h.nsect, each section's lengths and the total must be within the
 * limits above (the caller's registrations are). */
void tw_rma_rkey_pack(const tw_rma_rkey_t *k, void *out);

/** Unpack a remote key from the @p len bytes at @p buf (bytes past the
 * key's own length are not looked at). Every length is checked against
 * the bytes given before it is followed; on success @p k's sections point
 * into @p buf (those past h.nsect are zeroed). @p k is written only on success; @p why (may be
 * NULL) names the failure.
 * @return TW_OK; TW_ERR_TRUNCATED (fewer bytes than the header, or than
 *   the length it claims); TW_ERR_PROTOCOL (not a key of this format and
 *   version: magic, version, reserved word, lengths, sections). */
tw_status_t tw_rma_rkey_parse(const void *buf, size_t len, tw_rma_rkey_t *k, const char **why);

/** The key bytes of the section named @p name (the first such), or
 * NULL. */
const uint8_t *tw_rma_rkey_find(const tw_rma_rkey_t *k, const char *name);

/* ---- RMA active-message header ----------------------------------------- */

#define TW_RMA_HDR_VERSION 1

enum { TW_RMA_PUT_REQ = 1, TW_RMA_PUT_ACK = 2, TW_RMA_GET_REQ = 3, TW_RMA_GET_REP = 4 };

typedef struct tw_rma_hdr {
    uint8_t version; /* TW_RMA_HDR_VERSION */
    uint8_t type;    /* TW_RMA_* */
    int16_t status;  /* replies: a tw_status_t */
    uint32_t reserved;
    uint64_t cookie; /* the origin's operation (its slot and generation) */
    uint64_t region; /* requests: the region's id */
    uint64_t key;    /* requests: the region's key */
    uint64_t addr;   /* requests: where, in the target's address space */
    uint64_t len;    /* bytes to move; must equal the payload that came */
} tw_rma_hdr_t;

_Static_assert(sizeof(tw_rma_hdr_t) == 48, "tw_rma_hdr_t is 48 bytes on the wire");
_Static_assert(offsetof(tw_rma_hdr_t, cookie) == 8 && offsetof(tw_rma_hdr_t, len) == 40,
               "tw_rma_hdr_t fields sit where the format says");

/** Check the @p len header bytes of an RMA active message and copy them
 * to @p h (written only on success); @p why (may be NULL) names the
 * failure.
 * @return TW_OK; TW_ERR_PROTOCOL (not exactly one header, unknown version,
 *   type or status). */
tw_status_t tw_rma_hdr_parse(const void *buf, size_t len, tw_rma_hdr_t *h, const char **why);

#endif /* TW_RMA_PROTO_H */
