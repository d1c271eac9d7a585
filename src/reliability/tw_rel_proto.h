/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire format of the reliability layer (README.md has the overview).
 *
 * Every rel frame is one transport active message: the transport header
 * bytes are a tw_rel_hdr_t, followed -- in the first fragment of a message
 * only -- by the upper layer's header (hdr_len bytes); the transport
 * payload is the fragment's share of the upper payload. Four transport am
 * ids tell frame classes apart (so that the lossy transport can fault each
 * class on its own); the header's type must agree with the id.
 *
 * A fifth id, TW_REL_AM_SDATA, carries the common case in a short form: a
 * whole message in one fragment whose sender holds nothing out of order
 * (no selective ack bits). Its 24-byte tw_rel_shdr_t leaves out what that
 * case fixes (fragment 0 of 1, offset 0, message length = frame length,
 * no ack bitmap) and folds both incarnations into one word, so a small
 * message -- shm's 64-byte cell header, this header, msg's 32-byte header
 * and 8 payload bytes -- fits two cache lines, as it does without rel,
 * instead of three. tw_rel_parse expands it into a tw_rel_hdr_t.
 *
 * Fields are fixed-width, host order (every rank of a job runs the same
 * build), and every one is checked before use: tw_rel_parse is the only
 * way in, and it is fuzzed.
 */
#ifndef TW_REL_PROTO_H
#define TW_REL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TW_REL_VERSION 2 /* 2: the short DATA form */

/* Transport am ids of rel frames. */
#define TW_REL_AM_DATA  16
#define TW_REL_AM_ACK   17
#define TW_REL_AM_NACK  18
#define TW_REL_AM_CTRL  19
#define TW_REL_AM_SDATA 20 /* DATA in the short form (tw_rel_shdr_t) */

enum {
    TW_REL_T_DATA = 1,  /* a fragment of a message, in sequence */
    TW_REL_T_ACK,       /* ack fields only */
    TW_REL_T_NACK,      /* ack fields, and: resend what I lack now */
    TW_REL_T_PING,      /* keepalive: answer with PONG */
    TW_REL_T_PONG,      /* keepalive answer */
    TW_REL_T_PROBE,     /* is this path healthy again? answer on it */
    TW_REL_T_PROBE_ACK, /* yes */
    TW_REL_T_MAX = TW_REL_T_PROBE_ACK
};

#define TW_REL_F_ACK 0x01u /* ack_base / ack_bits are valid */
/* Never on the wire: tw_rel_parse marks a header it expanded from the
 * short form; src_epoch then holds the folded word (tw_rel_epochs) and
 * dst_epoch is 0. */
#define TW_REL_F_SHORT 0x80u

/* Upper messages: am id 0 is rel's own "goodbye", sent in sequence after
 * everything else at finalize. */
#define TW_REL_BYE_AM 0

/* Largest message (upper payload) and upper header rel carries. */
#define TW_REL_MAX_MSG  (1ull << 30)
#define TW_REL_MAX_UHDR 2048u

typedef struct tw_rel_hdr {
    uint8_t version;    /* TW_REL_VERSION */
    uint8_t type;       /* TW_REL_T_* */
    uint8_t flags;      /* TW_REL_F_* */
    uint8_t am_id;      /* DATA: the upper layer's am id */
    uint8_t path;       /* the sender's path index (probes answer on it) */
    uint8_t reserved;   /* 0 */
    uint16_t hdr_len;   /* DATA, first fragment: upper header bytes that follow */
    uint32_t src_epoch; /* the sender's incarnation */
    uint32_t dst_epoch; /* the incarnation of the receiver it was meant for */
    uint32_t seq;       /* DATA: fragment sequence number; PING/PROBE: cookie */
    uint32_t ack_base;  /* F_ACK: every fragment before it arrived */
    uint64_t ack_bits;  /* F_ACK: bit i set = fragment ack_base + 1 + i arrived */
    uint32_t frag;      /* DATA: index of this fragment in its message */
    uint32_t nfrags;    /* DATA: fragments of the message */
    uint64_t msg_len;   /* DATA: upper payload bytes of the whole message */
    uint64_t offset;    /* DATA: where this fragment's payload goes in it */
    uint32_t len;       /* payload bytes in this frame */
    uint32_t crc;       /* CRC32C over this header (crc = 0), upper header, payload */
} tw_rel_hdr_t;

_Static_assert(sizeof(tw_rel_hdr_t) == 64, "tw_rel_hdr_t is 64 bytes on the wire");

/* The short DATA form (am id TW_REL_AM_SDATA). The checksum comes first
 * and covers everything after it: the rest of this header, the upper
 * header, the payload -- two runs, with no field to zero. */
typedef struct tw_rel_shdr {
    uint32_t crc;      /* CRC32C over the rest of the header, upper header, payload */
    uint8_t version;   /* TW_REL_VERSION */
    uint8_t flags;     /* TW_REL_F_ACK, always */
    uint8_t am_id;     /* the upper layer's am id */
    uint8_t path;      /* the sender's path index */
    uint16_t hdr_len;  /* upper header bytes that follow */
    uint16_t reserved; /* 0 */
    uint32_t seq;      /* fragment sequence number */
    uint32_t ack_base; /* every fragment before it arrived, none after it */
    uint32_t epochs;   /* tw_rel_epochs(sender's incarnation, receiver's) */
} tw_rel_shdr_t;

_Static_assert(sizeof(tw_rel_shdr_t) == 24, "tw_rel_shdr_t is 24 bytes on the wire");

/** Both incarnations in one word. A frame from another incarnation of
 * its sender, or for another incarnation of its receiver, changes it
 * whenever only one of the two differs (a rotation and an XOR are each
 * one-to-one); when both differ it matches by chance 1 time in 2^32. */
static inline uint32_t tw_rel_epochs(uint32_t src_epoch, uint32_t dst_epoch)
{
    return src_epoch ^ (dst_epoch << 16 | dst_epoch >> 16);
}

typedef enum {
    TW_REL_PARSE_OK,
    TW_REL_PARSE_CRC, /* the checksum does not match: corrupted on the way */
    TW_REL_PARSE_BAD  /* well-formed checksum, impossible fields: a broken peer */
} tw_rel_parse_t;

/** The CRC32C a frame must carry: @p frame is its rel header (crc field
 * ignored) followed by the upper header, @p hdr_len bytes in all. */
uint32_t tw_rel_crc(const void *frame, size_t hdr_len, const void *payload, size_t len);

/** The CRC32C a short frame must carry: @p frame is its tw_rel_shdr_t
 * followed by the upper header, @p hdr_len bytes in all. */
uint32_t tw_rel_short_crc(const void *frame, size_t hdr_len, const void *payload, size_t len);

/** Check one arrival (transport am id, header bytes, payload) and copy its
 * rel header to @p out (a short frame's expanded, with TW_REL_F_SHORT).
 * On success the upper header is the last out->hdr_len bytes of @p hdr.
 * @p why names the failure. */
tw_rel_parse_t tw_rel_parse(uint8_t am_id, const void *hdr, size_t hdr_len, const void *data,
                            size_t len, tw_rel_hdr_t *out, const char **why);

/** The transport am id that carries frames of @p type. */
uint8_t tw_rel_am_of(uint8_t type);

/* Rel's entry in the job's address blob: this process's incarnation, so
 * that peers drop frames of any other. Checked by tw_rel_addr_parse. */
#define TW_REL_ADDR_VERSION 1
typedef struct tw_rel_addr {
    uint8_t version; /* TW_REL_ADDR_VERSION */
    uint8_t reserved[3];
    uint32_t epoch; /* never 0 */
} tw_rel_addr_t;
_Static_assert(sizeof(tw_rel_addr_t) == 8, "rel address entry layout");

/** Check @p len bytes at @p buf as a rel address entry; on success
 * *@p epoch_p is the peer's incarnation. False: malformed. */
bool tw_rel_addr_parse(const void *buf, size_t len, uint32_t *epoch_p);

#endif /* TW_REL_PROTO_H */
