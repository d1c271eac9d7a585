/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Cross-process layout of the shm transport: the segment a rank creates
 * (header, rings, cells) and the address it publishes. Peers of one
 * segment run on one node, so the shared structs are native (host order,
 * lock-free C11 atomics, which are address-free). TW_SHM_VERSION covers
 * the segment; the address carries the segment magic.
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
 * Cells (lengths count bytes of data[]; a0..a2 by type):
 *   EAGER  hdr_len header bytes, then the payload (len - hdr_len);
 *   RTS    header only (len == hdr_len); a0 the sender's address, a1 the
 *          message length (<= TW_SHM_MAX_MSG), a2 the send id;
 *   CTS    no bytes; a0 bytes wanted, a1 the receive id, a2 the send id;
 *   FIN    no bytes; a0 = 0 done, else the receiver could not take it;
 *          a2 the send id;
 *   DATA   payload only (hdr_len == 0); a0 its offset, a1 the receive id.
 * Ids name entries of the reader's own tables and carry a generation.
 */
#ifndef TW_SHM_PROTO_H
#define TW_SHM_PROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "shmem/tw_seg.h"
#include "threadwire/threadwire.h"

#define TW_SHM_MAGIC     0x314d485357547774ull /* "twTWSHM1" */
#define TW_SHM_VERSION   1u
#define TW_SHM_HDR_SIZE  4096u
#define TW_SHM_CELL_HDR  64u
#define TW_SHM_CELL_SIZE (TW_SHM_CELL_HDR + 8192u + 256u)
#define TW_SHM_CELL_DATA (TW_SHM_CELL_SIZE - TW_SHM_CELL_HDR)
#define TW_SHM_CELLS_MIN 4u           /* cells per ring: a power of two in [MIN, MAX] */
#define TW_SHM_CELLS_MAX 4096u        /* (bounds the segment size: no overflow) */
#define TW_SHM_MAX_MSG   (1ull << 40) /* largest rendezvous accepted */
#define TW_SHM_ADDR_MAX  160u

enum { TW_SHM_SEG_LIVE = 1, TW_SHM_SEG_CLOSED = 2 };
enum { TW_SHM_EAGER = 1, TW_SHM_RTS, TW_SHM_CTS, TW_SHM_FIN, TW_SHM_DATA, TW_SHM_TYPE_MAX };

typedef struct tw_shm_seg_hdr {
    uint64_t magic;   /* TW_SHM_MAGIC */
    uint32_t version; /* TW_SHM_VERSION */
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
    uint32_t len; /* bytes of data[] used */
    uint64_t a0, a1, a2, a3;
    uint64_t pad[2];
    unsigned char data[];
} tw_shm_cell_t;

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared atomics are lock-free, hence address-free across processes");
_Static_assert(sizeof(tw_shm_cell_t) == TW_SHM_CELL_HDR, "cell header is 64 bytes");
_Static_assert(offsetof(tw_shm_cell_t, type) == 8 && offsetof(tw_shm_cell_t, len) == 12 &&
                   offsetof(tw_shm_cell_t, a0) == 16 && offsetof(tw_shm_cell_t, a2) == 32,
               "cell fields");
_Static_assert(TW_SHM_CELL_SIZE % 64 == 0, "cells are cache-line aligned");
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

/* What a rank publishes (its entry in the bootstrap blob). */
typedef struct tw_shm_addr {
    uint32_t magic;
    uint32_t local_rank;
    uint32_t pid;
    uint32_t ncells;
    char seg[TW_SEG_NAME_MAX];
    char node[64]; /* boot id: same kernel = same node */
} tw_shm_addr_t;

_Static_assert(sizeof(tw_shm_addr_t) <= TW_SHM_ADDR_MAX, "address fits");

#endif /* TW_SHM_PROTO_H */
