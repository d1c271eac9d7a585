/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire formats of the TCP transport: the connection handshake, the frame
 * header and the address blob. Pure functions (no sockets), so parsers
 * can be fuzzed and unit-tested on their own. Every length read from the
 * wire is checked against the caller's limits before anything is read or
 * allocated; a value that does not fit is TW_ERR_PROTOCOL, never trusted.
 * Integers are little-endian on the wire, whatever the host.
 *
 * Handshake (connector C, acceptor A; 48-byte messages):
 *   C -> A  HELLO   magic, version, type, C's rank, job size, nonce_c
 *   A -> C  WELCOME magic, version, type, A's rank, job size, nonce_a,
 *                   proof_a = SipHash(key, "A" | nonce_c | nonce_a | ranks)
 *   C -> A  PROVE   magic, version, type, C's rank, job size, nonce_c,
 *                   proof_c = SipHash(key, "C" | nonce_a | nonce_c | ranks)
 * Each side proves it holds the job key over the other's fresh nonce, so
 * the key never travels and a recorded handshake cannot be replayed.
 *
 * Frame header (16 bytes), then hdr_len header bytes, then -- for AM and
 * DATA only -- len payload bytes:
 *   version u8 | type u8 | am_id u8 | flags u8 | hdr_len u32 | len u64
 * Types: AM (an active message), FIN (clean close: no failure report),
 * PING (keepalive on an idle connection; carries nothing), and the
 * sender-side rendezvous of a large message (tw_tcp_tx.c, tw_tcp_rx.c),
 * whose header bytes start with the sender's cookie (u64, naming the send
 * among the connection's live ones; never reused on it):
 *   RTS   sender -> receiver: cookie, then the am header (hdr_len = 8 +
 *         its length); len = the payload bytes waiting at the sender,
 *         which do not follow;
 *   CTS   receiver -> sender: cookie; am_id 0; len = the bytes asked for
 *         (at most the announced length; 0 releases the send unread);
 *   DATA  sender -> receiver: cookie; am_id 0; len = the bytes asked for,
 *         which follow; DATA answers the CTSs in the order they came;
 *   DONE  receiver -> sender: cookie; am_id 0, len 0: the DATA landed.
 * Version 2 added RTS, CTS, DATA and DONE.
 *
 * Address blob (what a rank publishes through the launcher, 12 bytes and
 * naddrs entries of 20 + 2 x lanes bytes):
 *   magic u32 ("TWTA") | version u8 | lanes u8 | naddrs u8 | flags u8 |
 *   timeout_ms u32
 *   per address: family u8 (4 or 6) | reserved u8[3] | address[16]
 *                (network order; IPv4: the first 4 bytes, then zeros) |
 *                lanes x port u16 (the port of each of its lanes)
 * A connector dials the port of lane (its rank % lanes): the lane that
 * owns their connection. flags: TW_TCP_ADDR_THREADS, the rank runs
 * progress threads (so its silence means failure). timeout_ms: its
 * TW_TCP_TIMEOUT (0: never). Reserved bytes are zero, ports never 0.
 */
#ifndef TW_TCP_PROTO_H
#define TW_TCP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

#define TW_TCP_MAGIC      0x43545754u /* "TWTC" */
#define TW_TCP_VERSION    2u
#define TW_TCP_HS_LEN     48u
#define TW_TCP_FRAME_LEN  16u
#define TW_TCP_COOKIE_LEN 8u /* leads the header bytes of RTS, CTS, DATA, DONE */

#define TW_TCP_ADDR_MAGIC   0x41545754u /* "TWTA" */
#define TW_TCP_ADDR_VERSION 1u
#define TW_TCP_ADDR_HDR     12u
#define TW_TCP_ADDR_ENTRY   20u /* and 2 bytes per lane */
#define TW_TCP_ADDR_THREADS 0x01u
#define TW_TCP_MAX_ADDRS    8
#define TW_TCP_MAX_LANES    16
/* The largest blob: every address, every lane. */
#define TW_TCP_ADDR_MAX \
    (TW_TCP_ADDR_HDR + TW_TCP_MAX_ADDRS * (TW_TCP_ADDR_ENTRY + 2u * TW_TCP_MAX_LANES))

_Static_assert(TW_TCP_ADDR_HDR == 4 + 1 + 1 + 1 + 1 + 4, "address blob header layout");
_Static_assert(TW_TCP_ADDR_ENTRY == 1 + 3 + 16, "address entry layout (before the ports)");
_Static_assert(TW_TCP_MAX_ADDRS <= UINT8_MAX && TW_TCP_MAX_LANES <= UINT8_MAX,
               "the counts are u8 on the wire");
_Static_assert(TW_TCP_ADDR_MAX <= UINT16_MAX, "the runtime carries an address in a u16 length");
_Static_assert(TW_TCP_HS_LEN == 48 && TW_TCP_FRAME_LEN == 16, "handshake and frame layouts");
_Static_assert(TW_TCP_COOKIE_LEN == sizeof(uint64_t), "a cookie is one u64");

enum { TW_TCP_HS_HELLO = 1, TW_TCP_HS_WELCOME = 2, TW_TCP_HS_PROVE = 3 };
enum {
    TW_TCP_FRAME_AM = 1,
    TW_TCP_FRAME_FIN = 2,
    TW_TCP_FRAME_PING = 3,
    TW_TCP_FRAME_RTS = 4,
    TW_TCP_FRAME_CTS = 5,
    TW_TCP_FRAME_DATA = 6,
    TW_TCP_FRAME_DONE = 7,
    TW_TCP_FRAME_NTYPES
};
_Static_assert(TW_TCP_FRAME_NTYPES - 1 <= UINT8_MAX, "the type is a u8 on the wire");

typedef struct tw_tcp_hs {
    uint8_t type; /* TW_TCP_HS_* */
    uint32_t rank;
    uint32_t size;
    uint8_t nonce[16];
    uint64_t proof; /* WELCOME, PROVE; 0 in HELLO */
} tw_tcp_hs_t;

typedef struct tw_tcp_frame {
    uint8_t type; /* TW_TCP_FRAME_* */
    uint8_t am_id;
    uint8_t flags;
    uint32_t hdr_len; /* as on the wire: with the cookie, in a rendezvous frame */
    uint64_t len;
} tw_tcp_frame_t;

typedef struct tw_tcp_addr_entry {
    uint8_t family;                   /* 4 or 6 */
    uint8_t addr[16];                 /* network order; IPv4: addr[0..3], the rest zero */
    uint16_t ports[TW_TCP_MAX_LANES]; /* [lanes]; none 0 */
} tw_tcp_addr_entry_t;

typedef struct tw_tcp_addr_blob {
    uint8_t lanes;  /* 1 .. TW_TCP_MAX_LANES */
    uint8_t naddrs; /* 1 .. TW_TCP_MAX_ADDRS */
    uint8_t flags;  /* TW_TCP_ADDR_THREADS */
    uint32_t timeout_ms;
    tw_tcp_addr_entry_t addrs[TW_TCP_MAX_ADDRS];
} tw_tcp_addr_blob_t;

/** Write @p hs as TW_TCP_HS_LEN bytes into @p buf. */
void tw_tcp_hs_pack(const tw_tcp_hs_t *hs, uint8_t buf[TW_TCP_HS_LEN]);

/** Parse one handshake message of type @p want from @p len bytes; @p hs
 * is written only on success (as with every parser here).
 * TW_ERR_AGAIN: fewer than TW_TCP_HS_LEN bytes yet; TW_ERR_PROTOCOL: @p want
 * not a TW_TCP_HS_* type, wrong
 * magic, version or type, a rank outside [0, size), or a size other than
 * @p job_size; @p why (may be NULL) then names the reason. */
tw_status_t tw_tcp_hs_parse(const void *buf, size_t len, uint8_t want, uint32_t job_size,
                            tw_tcp_hs_t *hs, const char **why);

/** The proof a side sends: @p role 'A' (acceptor) or 'C' (connector),
 * over the other side's nonce first, then its own, then both ranks. */
uint64_t tw_tcp_hs_proof(const uint8_t key[16], char role, const uint8_t their_nonce[16],
                         const uint8_t my_nonce[16], uint32_t acceptor_rank,
                         uint32_t connector_rank);

/** Write a frame header into @p buf. */
void tw_tcp_frame_pack(const tw_tcp_frame_t *f, uint8_t buf[TW_TCP_FRAME_LEN]);

/** Parse a frame header from @p len bytes. TW_ERR_AGAIN: not all 16 bytes
 * yet; TW_ERR_PROTOCOL: bad version, type or flags, an am header above
 * @p max_hdr (AM: hdr_len; RTS: hdr_len - 8), len above @p max_len, a FIN
 * or PING that carries bytes, an RTS shorter than its cookie, a CTS, DATA
 * or DONE with an am_id or header bytes other than the cookie, or a DONE
 * with a length. */
tw_status_t tw_tcp_frame_parse(const void *buf, size_t len, uint32_t max_hdr, uint64_t max_len,
                               tw_tcp_frame_t *f, const char **why);

/** The am header bytes of a parsed frame (AM, RTS; 0 for the others). */
static inline uint32_t tw_tcp_frame_am_hdr_len(const tw_tcp_frame_t *f)
{
    return f->type == TW_TCP_FRAME_AM    ? f->hdr_len
           : f->type == TW_TCP_FRAME_RTS ? f->hdr_len - TW_TCP_COOKIE_LEN
                                         : 0;
}

/** Bytes of a parsed frame after its 16-byte header, in the stream. */
static inline uint64_t tw_tcp_frame_body_len(const tw_tcp_frame_t *f)
{
    bool payload = f->type == TW_TCP_FRAME_AM || f->type == TW_TCP_FRAME_DATA;
    return (uint64_t)f->hdr_len + (payload ? f->len : 0);
}

/** Bytes of an address blob with @p lanes lanes and @p naddrs addresses. */
size_t tw_tcp_addr_blob_len(unsigned lanes, unsigned naddrs);

/** Write @p b into @p buf (@p cap bytes); *@p len_p: the bytes written.
 * TW_ERR_INVALID (nothing written) when @p cap is too small or @p b is
 * what the parser would refuse: a count out of range, an unknown flag, a
 * family other than 4 or 6, IPv4 with bytes past its 4, a port 0. */
tw_status_t tw_tcp_addr_blob_pack(const tw_tcp_addr_blob_t *b, void *buf, size_t cap,
                                  size_t *len_p);

/** Parse an address blob of exactly @p len bytes (the whole of what the
 * rank published). TW_ERR_PROTOCOL, with @p why (may be NULL) naming the
 * reason: fewer bytes than the header, wrong magic or version, a lane or
 * address count out of range, an unknown flag, @p len other than what
 * the counts say, a family other than 4 or 6, reserved or IPv4 padding
 * bytes set, a port 0. @p b is written only on success. */
tw_status_t tw_tcp_addr_blob_parse(const void *buf, size_t len, tw_tcp_addr_blob_t *b,
                                   const char **why);

#endif /* TW_TCP_PROTO_H */
