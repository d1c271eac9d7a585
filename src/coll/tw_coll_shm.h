/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Collectives within a node through shared memory: the node segment, its
 * slot sets, and the algorithms that run in them.
 *
 * The node segment. Where the shm transport carries the node's traffic
 * (not under TW_TRANSPORTS=tcp, say: then collectives within the node
 * run point to point), the node's leader (its lowest rank) creates one
 * segment at tw_init (shmem/tw_seg: O_EXCL, 0600, fallocated) and
 * publishes its name in its address blob, through the launcher's
 * exchange; the node's other ranks attach before the exchange's closing
 * barrier and set their bit in the header, then the leader unlinks the
 * name and every local rank reads the same bits. Layout (all offsets
 * fixed by the header):
 *
 *   page 0     header: magic, version, sizes, which local ranks attached
 *   descs      one 128-byte descriptor per slot set: owner (0 = free) and
 *              the local ranks still holding it (a bit each)
 *   slot sets  TW_COLL_SLOTS of them; set 0 is the world group's
 *
 * A slot set serves one group's members on this node (at most the node's
 * ranks, indexed by their position among the group's members here):
 *
 *   head       abort word, sleeper count                       (128 B)
 *   member j   arrive[2]  {seq, 56 inline bytes} x 2: j writes  (256 B)
 *              release[2] {seq, 56 inline bytes} x 2: j writes  (256 B)
 *                         (each in a 128-byte pair of its own)
 *              prog, red  chunks j published; chunks whose slice j
 *                         j reduced (op << 24 | k)               (128 B)
 *              ack, done  chunks j consumed; last op j finished;
 *              cma_read   op s while j reads a member's buffer   (128 B)
 *   cells      member j's ring of TW_CSHM_CELLS cells of 16-64 KiB
 *
 * Every line has a single writer; sequence numbers only grow (they are
 * the group's count of shm steps, from 1, so the zeroed lines of a fresh slot
 * set mean "nothing yet"); a reader tests >=. arrive carries 2s at the
 * entry of operation s and release 2s+1, so one comparison says which.
 * Payload first, then the sequence number with release order; readers
 * load with acquire.
 *
 * Binding. The first member of a group on a node claims a free slot set
 * (CAS on its owner), zeroes it, and says which in its JOIN; WELCOME tells
 * every member its node's slot set. No free set, a node without a
 * segment, or a member that did not attach: that node's part of the
 * group runs point to point. Each member clears its bit in the
 * descriptor when it destroys the group (and the bits of members known
 * dead); the last one frees the set.
 *
 * Large allreduces (TW_COLL_CMA bytes and up) go with one copy too:
 * every member publishes where its send and receive buffers are (arrive),
 * reads slice j of everyone's send buffer (j: its own position), reduces
 * it in member order into its receive buffer and says so (release),
 * reads the other slices from their reducers' receive buffers, and
 * returns once everyone has read its buffers (ack).
 *
 * Large bcasts (TW_COLL_CMA bytes and up) go with one copy: the root
 * publishes its buffer's address and pid in its release line, each member
 * reads it with process_vm_readv and answers in its arrive line, the root
 * returns when all answered.
 *
 * A failed single-copy operation. Its caller may reuse the buffers as
 * soon as it returns, so a member must not return from one while
 * another still reads them: a reader announces each read (cma_read = s)
 * and then looks at the abort word; a member whose operation fails
 * after it published its buffers stores abort (the group fails anyway)
 * and waits until no live member announces a read of operation s. Both
 * store, then load, sequentially consistent: either the reader sees
 * abort and does not read, or the member sees the announcement and
 * waits for the read to end.
 *
 * Single copy only where every local rank could read the
 * leader's memory at tw_init (each sets a bit in the header before the
 * exchange's barrier), with the leader's threshold for all.
 *
 * Waiting spins briefly, then yields, then sleeps on a futex in the
 * segment (writers wake only when the sleeper count says someone
 * sleeps); it checks every few hundred polls, and before sleeping,
 * whether the group failed -- a failure stores the abort word and wakes
 * every sleeper -- and sleeps at most a millisecond at a time.
 */
#ifndef TW_COLL_SHM_H
#define TW_COLL_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "threadwire/threadwire.h"

struct tw_coll;
struct tw_group;
typedef struct tw_cshm_node tw_cshm_node_t;
struct tw_coll_op;
struct tw_coll_act;

#define TW_CSHM_INLINE 56u /* inline payload bytes per line */
/* Bytes of one cell: 64 KiB up to 4 ranks on the node, halved for each
 * doubling above, down to 16 KiB (fewer steps per large message where
 * the segment stays small; tw_cshm_chunk). */
#define TW_CSHM_CHUNK_MAX (64u << 10)
#define TW_CSHM_CHUNK_MIN (16u << 10)
#define TW_CSHM_CELLS     4u  /* cells in a member's ring */
#define TW_CSHM_MAX_LOCAL 64u /* node ranks a segment serves (bits) */

/* 128 bytes, the first 64 used: a line shares its 128-byte pair (which
 * the adjacent-line prefetcher moves together) with no other line. With
 * arrive[0] and [1] in one pair, a barrier's store next to the allreduce
 * before it cost 2 pinned processes an 8 B allreduce of 0.429 us against
 * 0.386 (3 runs each of -i 200000, medians; the barrier unchanged). */
typedef struct tw_cshm_line {
    _Atomic uint64_t seq;
    unsigned char data[TW_CSHM_INLINE];
    unsigned char pad[64];
} tw_cshm_line_t;

typedef struct tw_cshm_member {
    tw_cshm_line_t arrive[2];
    tw_cshm_line_t release[2];
    _Atomic uint64_t prog;
    _Atomic uint64_t red; /* chunks whose slice j reduced (split allreduce) */
    unsigned char pad1[112];
    _Atomic uint64_t ack;
    _Atomic uint64_t done;
    _Atomic uint64_t cma_read; /* op s while j reads a member's buffer (single copy), else 0 */
    unsigned char pad2[104];
} tw_cshm_member_t;

typedef struct tw_cshm_head {
    _Atomic uint32_t abort;
    _Atomic uint32_t sleepers;
    unsigned char pad[120];
} tw_cshm_head_t;

/** A group's binding to a slot set on this node (in the group). */
typedef struct tw_cshm_bind {
    int slot; /* -1: none */
    tw_cshm_head_t *head;
    tw_cshm_member_t **mem; /* [g->nlocal] */
    unsigned char **cells;  /* [g->nlocal] each member's ring */
    uint64_t *seen;         /* [g->nlocal] last op known finished by each */
    uint64_t cell_op;       /* the last op that wrote my cells (0: none) */
    unsigned spin_skip;     /* waits left that yield at once (a spin ran out) */
    size_t chunk;           /* bytes of a cell */
    unsigned char *tmp;     /* single-copy allreduce: 2 slices' scratch (one op at a time) */
    size_t tmp_len;
} tw_cshm_bind_t;

/* Node segment set-up, in tw_init's address exchange (no messages):
 * prepare before it (the leader creates the segment), the leader's entry
 * in its address blob (addr), attach after the exchange and before its
 * closing barrier (the others), setup after that barrier (the leader
 * unlinks the name; the world group takes slot set 0 if every local rank
 * attached). Failures leave the node, or the rank, without a segment:
 * point to point, with a warning. */
tw_status_t tw_cshm_node_prepare(struct tw_coll *coll);
/** The world rank whose entry this rank attaches by, or -1 (none). */
int tw_cshm_node_leader(const struct tw_coll *coll);
/** The leader's entry into @p buf (room @p room): its length, or 0. */
size_t tw_cshm_node_addr(const struct tw_coll *coll, void *buf, size_t room);
/** Attach by the leader's entry (@p addr NULL: it published none). */
void tw_cshm_node_attach(struct tw_coll *coll, const void *addr, size_t len);
tw_status_t tw_cshm_node_setup(struct tw_coll *coll);
void tw_cshm_node_teardown(struct tw_coll *coll);

/** Read @p len bytes at @p addr of process @p pid into @p dst
 * (process_vm_readv, partial reads resumed): TW_OK, TW_ERR_PEER_FAILED
 * (the process is gone or exiting), TW_ERR_TRANSPORT (refused). */
tw_status_t tw_cshm_cma_read(pid_t pid, void *dst, uint64_t addr, size_t len);

/** Claim a free slot set for @p g's members on this node (the caller is
 * their first): its index, or -1. Thread: any. */
int tw_cshm_claim(struct tw_coll *coll, struct tw_group *g);
/** Bind @p g to slot set @p slot (or leave it unbound for -1). */
tw_status_t tw_cshm_bind(struct tw_group *g, int slot);
/** Let go of @p g's slot set (the last member frees it). */
void tw_cshm_unbind(struct tw_group *g);
/** Free the slot set @p g's claimer bound, for everyone (a creation that
 * failed before anyone else could bind it). */
void tw_cshm_release(struct tw_group *g);
/** The group failed: tell its members on this node through the slot set. */
void tw_cshm_abort(struct tw_group *g);
/** Can every member of @p g on this node use the segment? */
bool tw_cshm_usable(struct tw_coll *coll, struct tw_group *g);

/** The shm part of a schedule (a TW_ACT_SHM action): TW_OK done,
 * TW_ERR_AGAIN waiting (nonblocking operations only: blocking ones wait
 * inside), else the group failed. */
tw_status_t tw_cshm_step(struct tw_coll_op *op, struct tw_coll_act *a);

#endif /* TW_COLL_SHM_H */
