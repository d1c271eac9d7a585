/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The node segment's layout as the two halves of shared-memory
 * collectives see it: tw_coll_seg.c makes, attaches and hands out its
 * slot sets; tw_coll_shm.c runs the algorithms in them. The layout and
 * its rules are in tw_coll_shm.h. Internal to src/coll.
 */
#ifndef TW_COLL_SEG_H
#define TW_COLL_SEG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "coll/tw_coll_shm.h"
#include "shmem/tw_seg.h"

#define TW_CSEG_MAGIC        0x7477637365673031ull /* "twcseg01" */
#define TW_CSEG_VERSION      7u
#define TW_CSEG_DESC_OFF     4096u
#define TW_CSHM_MEMBER_BYTES sizeof(tw_cshm_member_t)

_Static_assert(sizeof(tw_cshm_line_t) == 128, "a line is 128 bytes");
_Static_assert(sizeof(tw_cshm_member_t) == 768, "a member's lines are 6 x 128 bytes");
_Static_assert(sizeof(tw_cshm_head_t) == 128, "the head is 128 bytes");

typedef struct tw_cseg_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nlocal; /* ranks on the node */
    uint32_t nslots;
    uint32_t chunk;
    uint32_t cells;
    uint32_t reserved;
    uint64_t slot_bytes;
    uint64_t size;
    _Atomic uint64_t attached; /* a bit per local rank */
    /* Single-copy bcasts: the leader's TW_COLL_CMA, and a word of its
     * memory the others read at attach (process_vm_readv); a bit per
     * local rank that could. */
    uint64_t cma_min;
    uint64_t probe_pid;
    uint64_t probe_addr;
    uint64_t probe_value;
    _Atomic uint64_t cma_ok;
    uint64_t cma_ar_min; /* the leader's TW_COLL_CMA_ALLREDUCE */
    uint64_t gather;     /* 1: barriers gather (the leader's TW_COLL_BARRIER) */
} tw_cseg_hdr_t;

typedef struct tw_cseg_desc {
    _Atomic uint64_t owner;   /* 0: free */
    _Atomic uint64_t members; /* local ranks still holding it (bits) */
    unsigned char pad[112];
} tw_cseg_desc_t;

/* The node segment as this rank sees it. */
struct tw_cshm_node {
    tw_seg_t seg;
    tw_cseg_hdr_t *hdr;
    tw_cseg_desc_t *desc;
    unsigned char *slots;
    int nlocal;     /* ranks on the node */
    int local_rank; /* mine among them */
    int *ranks;     /* [nlocal] their world ranks */
    uint64_t slot_bytes;
    unsigned nslots;
    atomic_uint claims; /* tokens */
    uint64_t spin_ns;   /* TW_COLL_SPIN, or 0 when the node's ranks outnumber its CPUs */
    bool oversub;       /* they do */
    bool gather;        /* barriers of over 2 members gather (agreed) */
    int cpus;           /* CPUs this process may run on */
    atomic_int waiters; /* this process's threads in a blocking wait */
    uint64_t size;      /* of the segment */
    char name[TW_SEG_NAME_MAX];
    size_t cma_min;    /* bcasts this large go by process_vm_readv; 0 = never (agreed) */
    size_t cma_ar_min; /* allreduces this large too (agreed) */
    pid_t pid;
};

/* Bytes of a cell on a node of @p nlocal ranks. */
static inline size_t tw_cshm_chunk(int nlocal)
{
    size_t c = TW_CSHM_CHUNK_MAX;
    for (int n = 4; n < nlocal && c > TW_CSHM_CHUNK_MIN; n *= 2) {
        c /= 2;
    }
    return c;
}

/* Sizes of one slot set for @p nlocal ranks. */
static inline uint64_t tw_cseg_slot_bytes(int nlocal)
{
    uint64_t ring = (uint64_t)tw_cshm_chunk(nlocal) * TW_CSHM_CELLS;
    uint64_t b = sizeof(tw_cshm_head_t) + (uint64_t)nlocal * (TW_CSHM_MEMBER_BYTES + ring);
    return (b + 4095) & ~(uint64_t)4095;
}

static inline uint64_t tw_cseg_slots_off(unsigned nslots)
{
    return (TW_CSEG_DESC_OFF + (uint64_t)nslots * sizeof(tw_cseg_desc_t) + 4095) & ~(uint64_t)4095;
}

static inline long tw_futex(void *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

#endif /* TW_COLL_SEG_H */
