/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Cross-process format of the shm transport: the segment a rank creates
 * (header, rings, cells), the address it publishes, and the checks applied
 * to what a peer wrote. Pure functions (no syscalls, no logging), so the
 * checks can be unit-tested and fuzzed. Every length a peer wrote is
 * checked against what the cell or the segment holds; a value that does
 * not fit is TW_ERR_PROTOCOL with a reason, never trusted.
 *
 * Peers of one segment run on one node, so the shared structs are native
 * (host order, lock-free C11 atomics, which are address-free). The address
 * goes through the bootstrap blob to ranks of other nodes too, so it is
 * packed little-endian. TW_SHM_VERSION covers both: a segment or address
 * of another version is refused.
 *
 * Segment of rank R (R creates it; it holds R's inbound rings):
 *   header   TW_SHM_HDR_SIZE bytes, tw_shm_seg_hdr_t
 *   rings    one per other local rank S, in local-rank order without R:
 *            tw_shm_ring_hdr_t, then ncells cells of TW_SHM_CELL_SIZE
 * Nobody reads the layout from shared memory: both sides compute it from
 * (nlocal, ncells), and the header only confirms it on attach.
 *
 * Who writes what (R the owner and consumer, S a producer):
 *   header fields   R at open, read-only after; but
 *     state         R: LIVE at open, CLOSED (release) at close; S reads it
 *                   (acquire) once R's process is gone: left or died;
 *     sleeping      R's engine: 1 before its last look, 0 on waking (seq_cst);
 *                   S turns 1 into 2 (exchange) and sends one datagram;
 *   ring tail       S's threads only (CAS claims a cell);
 *   want_wake       S's engine sets it (its ring is full, work is queued);
 *                   R clears it (exchange) and wakes S after freeing cells;
 *   cell seq        S stores pos + 1 (release): published; R stores
 *                   pos + ncells (release): free for the next lap. Each
 *                   side loads it with acquire before touching the body;
 *   cell body       S between claim and publish; R reads it, once per
 *                   field, between publish and free.
 * A producer killed mid-copy leaves a cell that only looks unpublished.
 *
 * Cells (lengths count the cell's bytes, tw_shm_cell_bytes(); a0..a2 by
 * type):
 *   EAGER  hdr_len header bytes, then the payload (len - hdr_len); its
 *          bytes start right after `len`, at TW_SHM_EAGER_OFF, where the
 *          other types have a0..a2: a small message (a 32-byte message
 *          header and up to 16 bytes) then fills one cache line, the
 *          one the sequence word already moves, instead of two;
 *   RTS    header only (len == hdr_len); a0 the sender's address, a1 the
 *          message length (<= TW_SHM_MAX_MSG), a2 the send id;
 *   CTS    no bytes; a0 bytes wanted, a1 the receive id, a2 the send id;
 *   FIN    no bytes; a0 = 0 done, else the receiver could not take it;
 *          a2 the send id;
 *   DATA   payload only (hdr_len == 0); a0 its offset, a1 the receive id.
 * Ids name entries of the reader's own tables and carry a generation;
 * the transport checks them (and DATA against its pull) where the tables
 * are.
 *
 * Address (TW_SHM_ADDR_LEN bytes, little-endian):
 *   magic u32 | version u8 | reserved u8[3] (zero) | local_rank u32 |
 *   pid u32 | ncells u32 | seg char[64] | node char[64]
 * seg and node are NUL-terminated within their field; node is the boot
 * id. Which peers shm reaches is the runtime's node map's to say
 * (tw_tl_params_t.node_of): emulated nodes share a kernel. The boot id
 * only refuses a peer the map puts on our node that runs under another
 * kernel (a wrong map).
 */
#ifndef TW_SHM_PROTO_H
#define TW_SHM_PROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "shmem/tw_seg.h"
#include "threadwire/threadwire.h"

#define TW_SHM_MAGIC      0x314d485357547774ull /* "twTWSHM1" */
#define TW_SHM_ADDR_MAGIC 0x41535754u           /* "TWSA" */
#define TW_SHM_VERSION    3u
#define TW_SHM_HDR_SIZE   4096u
#define TW_SHM_CELL_HDR   64u
#define TW_SHM_CELL_SIZE  (TW_SHM_CELL_HDR + 8192u + 256u)
#define TW_SHM_CELL_DATA  (TW_SHM_CELL_SIZE - TW_SHM_CELL_HDR) /* bytes a cell holds, any type */
#define TW_SHM_EAGER_OFF  16u          /* where an EAGER cell's bytes start */
#define TW_SHM_CELLS_MIN  4u           /* cells per ring: a power of two in [MIN, MAX] */
#define TW_SHM_CELLS_MAX  4096u        /* (bounds the segment size: no overflow) */
#define TW_SHM_MAX_MSG    (1ull << 40) /* largest rendezvous accepted */
#define TW_SHM_NODE_MAX   64u
#define TW_SHM_ADDR_LEN   (20u + TW_SEG_NAME_MAX + TW_SHM_NODE_MAX)

enum { TW_SHM_SEG_LIVE = 1, TW_SHM_SEG_CLOSED = 2 };
enum { TW_SHM_EAGER = 1, TW_SHM_RTS, TW_SHM_CTS, TW_SHM_FIN, TW_SHM_DATA, TW_SHM_TYPE_MAX };

typedef struct tw_shm_seg_hdr {
    uint64_t magic;      /* TW_SHM_MAGIC */
    uint8_t version;     /* TW_SHM_VERSION */
    uint8_t reserved[3]; /* zero */
    uint32_t nlocal;
    uint32_t ncells;
    uint32_t cell_size;
    uint32_t owner_local;
    uint32_t owner_pid;
    uint32_t key_crc;                         /* CRC32C of the job key */
    _Atomic uint32_t state;                   /* TW_SHM_SEG_* */
    _Atomic uint32_t sleeping TW_ALIGNED(64); /* mirror of the owner engine's flag */
} tw_shm_seg_hdr_t;

typedef struct tw_shm_ring_hdr {
    _Atomic uint64_t tail; /* producers only */
    unsigned char pad[56];
    /* Set by the producer's engine when it found the ring full and has
     * work queued for it; the consumer clears it and wakes the producer
     * after freeing cells. */
    _Atomic uint32_t want_wake;
    unsigned char pad2[60];
} tw_shm_ring_hdr_t;

typedef struct tw_shm_cell {
    _Atomic uint64_t seq;
    uint8_t type;
    uint8_t am_id;
    uint16_t hdr_len;
    uint32_t len;         /* bytes of data[] used */
    uint64_t a0, a1, a2;  /* not in EAGER cells: their bytes start here */
    uint64_t reserved[3]; /* neither written nor read */
    unsigned char data[]; /* bytes of the other types */
} tw_shm_cell_t;

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared atomics are lock-free, hence address-free across processes");
_Static_assert(sizeof(tw_shm_cell_t) == TW_SHM_CELL_HDR, "cell header is 64 bytes");
_Static_assert(offsetof(tw_shm_cell_t, type) == 8 && offsetof(tw_shm_cell_t, len) == 12 &&
                   offsetof(tw_shm_cell_t, a0) == 16 && offsetof(tw_shm_cell_t, a2) == 32,
               "cell fields");
_Static_assert(TW_SHM_CELL_SIZE % 64 == 0, "cells are cache-line aligned");
_Static_assert(offsetof(tw_shm_cell_t, len) + 4 == TW_SHM_EAGER_OFF &&
                   TW_SHM_EAGER_OFF + TW_SHM_CELL_DATA <= TW_SHM_CELL_SIZE,
               "EAGER bytes follow len and fit the cell");
_Static_assert(sizeof(tw_shm_ring_hdr_t) == 128 && offsetof(tw_shm_ring_hdr_t, want_wake) == 64,
               "tail and want_wake on cache lines of their own");
_Static_assert(offsetof(tw_shm_seg_hdr_t, version) == 8 &&
                   offsetof(tw_shm_seg_hdr_t, nlocal) == 12 &&
                   offsetof(tw_shm_seg_hdr_t, key_crc) == 32 &&
                   offsetof(tw_shm_seg_hdr_t, state) == 36 &&
                   offsetof(tw_shm_seg_hdr_t, sleeping) == 64,
               "segment header fields");
_Static_assert(sizeof(tw_shm_seg_hdr_t) <= TW_SHM_HDR_SIZE, "segment header fits its page");

/* ---- layout (both sides compute it) --------------------------------- */

static inline size_t tw_shm_ring_stride(unsigned ncells)
{
    return sizeof(tw_shm_ring_hdr_t) + (size_t)ncells * TW_SHM_CELL_SIZE;
}

static inline size_t tw_shm_seg_size(unsigned nlocal, unsigned ncells)
{
    return TW_SHM_HDR_SIZE + (size_t)(nlocal > 1 ? nlocal - 1 : 1) * tw_shm_ring_stride(ncells);
}

/* Ring of sender @p from in the segment of receiver @p to (local ranks). */
static inline tw_shm_ring_hdr_t *tw_shm_ring(void *base, unsigned ncells, unsigned from,
                                             unsigned to)
{
    unsigned idx = from < to ? from : from - 1;
    return (tw_shm_ring_hdr_t *)((char *)base + TW_SHM_HDR_SIZE +
                                 (size_t)idx * tw_shm_ring_stride(ncells));
}

static inline tw_shm_cell_t *tw_shm_cell(tw_shm_ring_hdr_t *ring, unsigned ncells, uint64_t pos)
{
    return (tw_shm_cell_t *)((char *)(ring + 1) + (size_t)(pos & (ncells - 1)) * TW_SHM_CELL_SIZE);
}

/* ---- segment header ------------------------------------------------- */

/* What a segment is: its layout and whose it is. */
typedef struct tw_shm_seg_id {
    uint32_t nlocal;
    uint32_t ncells; /* a power of two in [TW_SHM_CELLS_MIN, TW_SHM_CELLS_MAX] */
    uint32_t owner_local;
    uint32_t owner_pid;
    uint32_t key_crc;
} tw_shm_seg_id_t;

/** Format a fresh segment of tw_shm_seg_size(@p id->nlocal, @p id->ncells)
 * bytes at @p base: the header (state LIVE, nobody sleeping) and every
 * inbound ring of the owner empty. Before any peer attaches. */
void tw_shm_seg_format(void *base, const tw_shm_seg_id_t *id);

/** Check the header of a peer's segment, mapped at @p base with @p size
 * bytes, against what its address and our own layout say (@p want).
 * Every field is read once. TW_OK; TW_ERR_PROTOCOL (@p why, which may be
 * NULL, names the reason): smaller than its header, wrong magic, version
 * or reserved bytes, another cell size, a cell count outside the range or
 * not a power of two, an owner outside [0, nlocal), a field other than
 * @p want's, or a size other than the rings it describes need. */
tw_status_t tw_shm_seg_check(const void *base, size_t size, const tw_shm_seg_id_t *want,
                             const char **why);

/* ---- cells ---------------------------------------------------------- */

/* Where the bytes of a cell of @p type start (TW_SHM_CELL_DATA of room). */
static inline unsigned char *tw_shm_cell_bytes(tw_shm_cell_t *c, uint8_t type)
{
    return type == TW_SHM_EAGER ? (unsigned char *)c + TW_SHM_EAGER_OFF : c->data;
}

/* A published cell as read once: the producer may still scribble on it. */
typedef struct tw_shm_cell_view {
    uint8_t type; /* TW_SHM_EAGER .. TW_SHM_DATA */
    uint8_t am_id;
    uint32_t hdr_len;          /* <= len */
    uint32_t len;              /* <= TW_SHM_CELL_DATA */
    uint64_t a0, a1, a2;       /* zero in an EAGER cell */
    const unsigned char *data; /* the cell's bytes (tw_shm_cell_bytes): len */
} tw_shm_cell_view_t;

static inline tw_status_t tw_shm_proto_bad(const char **why, const char *reason)
{
    if (why != NULL) {
        *why = reason;
    }
    return TW_ERR_PROTOCOL;
}

/** Read a published cell once and check its shape: a known type, lengths
 * within the cell, and what its type allows (see the table above).
 * TW_OK and *@p v_p; TW_ERR_PROTOCOL with the reason in @p why (may be
 * NULL). Ids and DATA against the pull it feeds are the caller's to
 * check. Inline: it runs on every cell (the small-message path). */
static inline tw_status_t tw_shm_cell_parse(const tw_shm_cell_t *c, tw_shm_cell_view_t *v_p,
                                            const char **why)
{
    tw_shm_cell_view_t v = {
        .type = c->type, .am_id = c->am_id, .hdr_len = c->hdr_len, .len = c->len};

    if (v.type == 0 || v.type >= TW_SHM_TYPE_MAX) {
        return tw_shm_proto_bad(why, "unknown cell type");
    }
    /* Read once: v.type, not the cell's byte, picks the layout. */
    v.data = tw_shm_cell_bytes((tw_shm_cell_t *)c, v.type);
    if (v.type != TW_SHM_EAGER) {
        v.a0 = c->a0;
        v.a1 = c->a1;
        v.a2 = c->a2;
    }
    if (v.len > TW_SHM_CELL_DATA) {
        return tw_shm_proto_bad(why, "cell length beyond the cell");
    }
    if (v.hdr_len > v.len) {
        return tw_shm_proto_bad(why, "cell header longer than the cell's bytes");
    }
    switch (v.type) {
    case TW_SHM_RTS:
        if (v.hdr_len != v.len) {
            return tw_shm_proto_bad(why, "RTS carries payload bytes");
        }
        if (v.a1 > TW_SHM_MAX_MSG) {
            return tw_shm_proto_bad(why, "RTS announces more than TW_SHM_MAX_MSG");
        }
        break;
    case TW_SHM_CTS:
    case TW_SHM_FIN:
        if (v.len != 0) {
            return tw_shm_proto_bad(why, "control cell carries bytes");
        }
        break;
    case TW_SHM_DATA:
        if (v.hdr_len != 0) {
            return tw_shm_proto_bad(why, "DATA cell carries a header");
        }
        break;
    default:
        break;
    }
    *v_p = v; /* only on success */
    return TW_OK;
}

/** "EAGER", "RTS", ... for log lines; "?" for anything else. */
const char *tw_shm_cell_type_name(unsigned type);

/* ---- address -------------------------------------------------------- */

typedef struct tw_shm_addr {
    uint32_t local_rank;
    uint32_t pid;
    uint32_t ncells;
    char seg[TW_SEG_NAME_MAX];  /* NUL-terminated */
    char node[TW_SHM_NODE_MAX]; /* NUL-terminated */
} tw_shm_addr_t;

/** Write @p a as TW_SHM_ADDR_LEN bytes into @p buf (strings cut to fit). */
void tw_shm_addr_pack(const tw_shm_addr_t *a, uint8_t buf[TW_SHM_ADDR_LEN]);

/** Parse a published address of @p len bytes; *@p a_p is written only on
 * success. TW_ERR_PROTOCOL (@p why may be NULL): another length, wrong
 * magic, version or reserved bytes, a string not terminated in its field,
 * or a segment name that is not "/...". Whether it is our node, and its
 * ranks and cells, are the caller's to judge. */
tw_status_t tw_shm_addr_parse(const void *buf, size_t len, tw_shm_addr_t *a_p, const char **why);

#endif /* TW_SHM_PROTO_H */
