/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire format of the TCP transport: the connection handshake and the
 * frame header. Pure functions (no sockets), so parsers can be fuzzed and
 * unit-tested on their own. Every length read from the wire is checked
 * against the caller's limits before anything is read or allocated; a
 * value that does not fit is TW_ERR_PROTOCOL, never trusted. Integers are
 * little-endian on the wire, whatever the host.
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
 * Frame header (16 bytes), then hdr_len header bytes, then len payload:
 *   version u8 | type u8 | am_id u8 | flags u8 | hdr_len u32 | len u64
 * Types: AM (an active message), FIN (clean close: no failure report),
 * PING (keepalive on an idle connection; carries nothing).
 */
#ifndef TW_TCP_PROTO_H
#define TW_TCP_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

#define TW_TCP_MAGIC     0x43545754u /* "TWTC" */
#define TW_TCP_VERSION   1u
#define TW_TCP_HS_LEN    48u
#define TW_TCP_FRAME_LEN 16u

enum { TW_TCP_HS_HELLO = 1, TW_TCP_HS_WELCOME = 2, TW_TCP_HS_PROVE = 3 };
enum { TW_TCP_FRAME_AM = 1, TW_TCP_FRAME_FIN = 2, TW_TCP_FRAME_PING = 3 };

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
    uint32_t hdr_len;
    uint64_t len;
} tw_tcp_frame_t;

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
 * yet; TW_ERR_PROTOCOL: bad version, type or flags, hdr_len above
 * @p max_hdr, len above @p max_len, or a FIN or PING that carries bytes. */
tw_status_t tw_tcp_frame_parse(const void *buf, size_t len, uint32_t max_hdr, uint64_t max_len,
                               tw_tcp_frame_t *f, const char **why);

#endif /* TW_TCP_PROTO_H */
