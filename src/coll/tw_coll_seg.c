/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The node segment of shared-memory collectives (tw_coll_shm.h has its
 * layout and rules): made by the node's leader in tw_init's address
 * exchange, attached by the node's other ranks, its slot sets claimed,
 * bound and freed by groups, and aborted when a group fails.
 */
#define _GNU_SOURCE
#include "coll/tw_coll_seg.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>

#include "coll/tw_coll_int.h"
#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"

/* ---- the node segment ---------------------------------------------------- */

/* The leader's entry in its address blob: u64 size (host order: only the
 * ranks of its node read it), the segment's name with its NUL. */
#define TW_CSEG_ADDR_MIN 10u

static tw_status_t tw_cseg_layout(tw_cshm_node_t *node, uint64_t *size_p)
{
    node->slot_bytes = tw_cseg_slot_bytes(node->nlocal);
    *size_p = tw_cseg_slots_off(node->nslots) + node->nslots * node->slot_bytes;
    return TW_OK;
}

static void tw_cseg_map(tw_cshm_node_t *node)
{
    unsigned char *base = node->seg.base;

    node->hdr = (tw_cseg_hdr_t *)base;
    node->desc = (tw_cseg_desc_t *)(base + TW_CSEG_DESC_OFF);
    node->slots = base + tw_cseg_slots_off(node->nslots);
}

static bool tw_cseg_valid(const tw_cshm_node_t *node, uint64_t size)
{
    const tw_cseg_hdr_t *h = node->hdr;

    return h->magic == TW_CSEG_MAGIC && h->version == TW_CSEG_VERSION &&
           h->nlocal == (uint32_t)node->nlocal && h->nslots == node->nslots &&
           h->chunk == tw_cshm_chunk(node->nlocal) && h->cells == TW_CSHM_CELLS &&
           h->slot_bytes == node->slot_bytes && h->size == size;
}

/* What the node's other ranks read of the leader's memory at attach. */
static const uint64_t tw_cseg_probe_word = TW_CSEG_MAGIC ^ 0x5a5a5a5a5a5a5a5aull;

/* The leader: create and initialize the segment (its name still linked). */
static tw_status_t tw_cseg_create(tw_coll_t *coll, tw_cshm_node_t *node, uint64_t size)
{
    int nlocal = node->nlocal;
    tw_status_t st = tw_seg_make_name(coll->p.job_key, node->name, sizeof(node->name));

    if (st == TW_OK) {
        st = tw_seg_create(node->name, size, &node->seg);
    }
    if (st != TW_OK) {
        return st;
    }
    tw_cseg_map(node);
    tw_cseg_hdr_t *h = node->hdr;
    h->magic = TW_CSEG_MAGIC;
    h->version = TW_CSEG_VERSION;
    h->nlocal = (uint32_t)nlocal;
    h->nslots = node->nslots;
    h->chunk = (uint32_t)tw_cshm_chunk(nlocal);
    h->cells = TW_CSHM_CELLS;
    h->slot_bytes = node->slot_bytes;
    h->size = size;
    atomic_store(&h->attached, 1);
    h->cma_min = coll->cfg.cma_min;
    h->cma_ar_min = coll->cfg.cma_ar_min;
    h->gather = coll->cfg.barrier == TW_CSHM_BARRIER_GATHER ||
                (coll->cfg.barrier == TW_CSHM_BARRIER_AUTO && node->oversub);
    h->probe_pid = (uint64_t)node->pid;
    h->probe_addr = (uint64_t)(uintptr_t)&tw_cseg_probe_word;
    h->probe_value = tw_cseg_probe_word;
    atomic_store(&h->cma_ok, coll->cfg.cma_min > 0 ? 1 : 0);
    /* Slot set 0 is the world's, held by every local rank. */
    atomic_store(&node->desc[0].members, nlocal == 64 ? UINT64_MAX : (1ull << nlocal) - 1);
    atomic_store(&node->desc[0].owner, 1);
    return TW_OK;
}

static void tw_cshm_node_free(tw_cshm_node_t *node)
{
    if (node->seg.base != NULL) {
        if (node->local_rank == 0) {
            (void)tw_seg_unlink(&node->seg); /* tw_init failed before setup did */
        }
        tw_seg_detach(&node->seg);
    }
    tw_free(node->ranks, (size_t)node->nlocal * sizeof(int));
    tw_free(node, sizeof(*node));
}

tw_status_t tw_cshm_node_prepare(tw_coll_t *coll)
{
    tw_cshm_node_t *node;
    int me = coll->p.rank, mynode = coll->p.node_of[me], nlocal = 0;
    tw_status_t st;

    for (int r = 0; r < coll->p.size; r++) {
        nlocal += coll->p.node_of[r] == mynode;
    }
    if (nlocal < 2 || coll->cfg.slots == 0) {
        return TW_OK;
    }
    if (!coll->p.node_shm) {
        /* TW_TRANSPORTS without shm: no shared memory between the node's
         * ranks. */
        tw_debug("coll", "no shm transport: collectives within the node run point to point");
        return TW_OK;
    }
    if (nlocal > (int)TW_CSHM_MAX_LOCAL) {
        tw_warn("coll",
                "%d ranks on this node: shared-memory collectives serve at most %u; "
                "point to point instead",
                nlocal, TW_CSHM_MAX_LOCAL);
        return TW_OK;
    }
    node = tw_calloc(1, sizeof(*node));
    if (node == NULL || (node->ranks = tw_malloc((size_t)nlocal * sizeof(int))) == NULL) {
        tw_free(node, sizeof(*node));
        return TW_ERR_NOMEM;
    }
    node->seg.fd = -1;
    for (int r = 0; r < coll->p.size; r++) {
        if (coll->p.node_of[r] == mynode) {
            if (r == me) {
                node->local_rank = node->nlocal;
            }
            node->ranks[node->nlocal++] = r;
        }
    }
    node->nslots = coll->cfg.slots;
    atomic_init(&node->claims, 0);
    /* More ranks than CPUs: whoever we wait for needs our CPU -- yield at
     * once instead of spinning (the node's ranks share its CPUs). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    node->oversub = ncpu > 0 && nlocal > ncpu;
    node->spin_ns = node->oversub ? 0 : coll->cfg.spin_ns;
    cpu_set_t mask;
    node->cpus = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : (int)ncpu;
    node->cpus = node->cpus > 0 ? node->cpus : 1;
    atomic_init(&node->waiters, 0);
    node->pid = getpid();
    tw_cseg_layout(node, &node->size);
    if (node->local_rank == 0) {
        st = tw_cseg_create(coll, node, node->size);
        if (st != TW_OK) {
            tw_warn("coll", "no shared-memory collectives on this node (%s): point to point",
                    tw_strerror(st));
            tw_cshm_node_free(node);
            return TW_OK;
        }
    }
    coll->node = node;
    return TW_OK;
}

int tw_cshm_node_leader(const tw_coll_t *coll)
{
    const tw_cshm_node_t *node = coll->node;

    return node != NULL && node->local_rank != 0 ? node->ranks[0] : -1;
}

size_t tw_cshm_node_addr(const tw_coll_t *coll, void *buf, size_t room)
{
    const tw_cshm_node_t *node = coll->node;
    size_t n;

    if (node == NULL || node->local_rank != 0) {
        return 0;
    }
    n = strlen(node->name) + 1;
    if (room < 8 + n) {
        return 0;
    }
    memcpy(buf, &node->size, 8);
    memcpy((unsigned char *)buf + 8, node->name, n);
    return 8 + n;
}

void tw_cshm_node_attach(tw_coll_t *coll, const void *addr, size_t len)
{
    tw_cshm_node_t *node = coll->node;
    const unsigned char *a = addr;
    tw_status_t st = TW_ERR_PROTOCOL;

    if (node == NULL || node->local_rank == 0) {
        return;
    }
    if (addr == NULL) {
        /* The leader has none (it said why). */
        tw_debug("coll", "rank %d published no collectives segment: point to point",
                 node->ranks[0]);
        tw_cshm_node_free(node);
        coll->node = NULL;
        return;
    }
    uint64_t size = 0;
    if (len >= TW_CSEG_ADDR_MIN) {
        memcpy(&size, a, 8);
    }
    if (len >= TW_CSEG_ADDR_MIN && len - 8 <= sizeof(node->name) && a[len - 1] == '\0' &&
        size == node->size) {
        memcpy(node->name, a + 8, len - 8);
        st = tw_seg_attach(node->name, node->size, &node->seg);
    }
    if (st == TW_OK) {
        tw_cseg_map(node);
        st = tw_cseg_valid(node, node->size) ? TW_OK : TW_ERR_PROTOCOL;
    }
    if (st != TW_OK) {
        tw_warn("coll", "cannot attach the collectives' segment of rank %d (%s): point to point",
                node->ranks[0], tw_strerror(st));
        tw_cshm_node_free(node);
        coll->node = NULL;
        return;
    }
    atomic_fetch_or(&node->hdr->attached, 1ull << node->local_rank);
    /* Single copy needs every rank able to read the others' memory (yama's
     * ptrace_scope=1 refuses siblings): try the leader's word. */
    uint64_t v = 0;
    const tw_cseg_hdr_t *h = node->hdr;
    if (h->cma_min > 0 && coll->cfg.cma_min > 0 &&
        tw_cshm_cma_read((pid_t)h->probe_pid, &v, h->probe_addr, sizeof(v)) == TW_OK &&
        v == h->probe_value) {
        atomic_fetch_or(&node->hdr->cma_ok, 1ull << node->local_rank);
    }
}

tw_status_t tw_cshm_node_setup(tw_coll_t *coll)
{
    tw_cshm_node_t *node = coll->node;
    uint64_t all;

    if (node == NULL) {
        return TW_OK;
    }
    if (node->local_rank == 0) {
        (void)tw_seg_unlink(&node->seg); /* everyone attached, or never will */
    }
    /* Every rank attached before the exchange's closing barrier, so every
     * local rank reads the same mask here. */
    all = node->nlocal == 64 ? UINT64_MAX : (1ull << node->nlocal) - 1;
    node->cma_min = atomic_load(&node->hdr->cma_ok) == all ? (size_t)node->hdr->cma_min : 0;
    node->cma_ar_min = node->cma_min > 0 ? (size_t)node->hdr->cma_ar_min : 0;
    node->gather = node->hdr->gather != 0;
    if (node->nlocal > 2) {
        tw_info("coll", "barriers of more than 2 members on this node: %s",
                node->gather ? "gather (through the group's first member here)" : "flat");
    }
    if (node->cma_min == 0 && node->hdr->cma_min > 0) {
        tw_debug("coll", "a rank of this node cannot read the others' memory (process_vm_readv; "
                         "see /proc/sys/kernel/yama/ptrace_scope): bcasts go through the cells");
    }
    if (atomic_load(&node->hdr->attached) != all) {
        /* Groups without the missing rank may still use the segment; the
         * world group may not. */
        tw_warn("coll", "a rank of this node could not attach the collectives' segment: the "
                        "world group runs point to point here");
        return TW_OK;
    }
    return tw_cshm_bind(coll->world, 0);
}

void tw_cshm_node_teardown(tw_coll_t *coll)
{
    tw_cshm_node_t *node = coll->node;

    if (node == NULL) {
        return;
    }
    tw_cshm_node_free(node);
    coll->node = NULL;
}

/* The node-local rank of world rank @p rank, or -1. */
static int tw_cshm_local_rank(const tw_cshm_node_t *node, int rank)
{
    for (int i = 0; i < node->nlocal; i++) {
        if (node->ranks[i] == rank) {
            return i;
        }
    }
    return -1;
}

/* Bits (node-local ranks) of @p g's members on this node. */
static uint64_t tw_cshm_bits(const tw_cshm_node_t *node, const tw_group_t *g)
{
    uint64_t bits = 0;

    for (int i = 0; i < g->nlocal; i++) {
        int lr = tw_cshm_local_rank(node, g->ranks[g->local[i]]);
        if (lr >= 0) {
            bits |= 1ull << lr;
        }
    }
    return bits;
}

bool tw_cshm_usable(tw_coll_t *coll, tw_group_t *g)
{
    tw_cshm_node_t *node = coll->node;

    if (node == NULL || g->nlocal < 2) {
        return false;
    }
    uint64_t bits = tw_cshm_bits(node, g);
    return (atomic_load_explicit(&node->hdr->attached, memory_order_acquire) & bits) == bits;
}

int tw_cshm_claim(tw_coll_t *coll, tw_group_t *g)
{
    tw_cshm_node_t *node = coll->node;
    uint64_t token;

    if (!tw_cshm_usable(coll, g)) {
        return -1;
    }
    token = ((uint64_t)(unsigned)coll->p.rank + 1) << 32 | (atomic_fetch_add(&node->claims, 1) + 1);
    for (unsigned i = 1; i < node->nslots; i++) {
        uint64_t free_ = 0;
        if (atomic_load_explicit(&node->desc[i].owner, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong_explicit(&node->desc[i].owner, &free_, token,
                                                     memory_order_acq_rel, memory_order_relaxed)) {
            continue;
        }
        /* Nobody holds it: the lines start from zero for the new group. */
        memset(node->slots + i * node->slot_bytes, 0,
               sizeof(tw_cshm_head_t) + (size_t)node->nlocal * TW_CSHM_MEMBER_BYTES);
        atomic_store_explicit(&node->desc[i].members, tw_cshm_bits(node, g), memory_order_release);
        return (int)i;
    }
    tw_debug("coll", "no free slot set (TW_COLL_SLOTS=%u): a group runs point to point",
             node->nslots);
    return -1;
}

tw_status_t tw_cshm_bind(tw_group_t *g, int slot)
{
    tw_cshm_node_t *node = g->coll->node;
    tw_cshm_bind_t *b = &g->shm;
    unsigned char *base;

    b->slot = -1;
    if (slot < 0 || node == NULL) {
        return TW_OK;
    }
    /* Named by a message (WELCOME): only a claimable set, never the
     * world's, and one that holds this group's members here. */
    if ((unsigned)slot >= node->nslots || (slot == 0) != g->world || g->nlocal > node->nlocal) {
        tw_error("coll", "slot set %d cannot serve this group (%u sets): refused", slot,
                 node->nslots);
        return TW_ERR_PROTOCOL;
    }
    b->mem = tw_calloc((size_t)g->nlocal, sizeof(*b->mem));
    b->cells = tw_calloc((size_t)g->nlocal, sizeof(*b->cells));
    b->seen = tw_calloc((size_t)g->nlocal, sizeof(*b->seen));
    b->cell_op = 0;
    if (b->mem == NULL || b->cells == NULL || b->seen == NULL) {
        tw_cshm_unbind(g);
        return TW_ERR_NOMEM;
    }
    base = node->slots + (size_t)slot * node->slot_bytes;
    b->chunk = tw_cshm_chunk(node->nlocal);
    b->head = (tw_cshm_head_t *)base;
    for (int j = 0; j < g->nlocal; j++) {
        b->mem[j] =
            (tw_cshm_member_t *)(base + sizeof(tw_cshm_head_t) + (size_t)j * TW_CSHM_MEMBER_BYTES);
        b->cells[j] = base + sizeof(tw_cshm_head_t) + (size_t)node->nlocal * TW_CSHM_MEMBER_BYTES +
                      (size_t)j * TW_CSHM_CELLS * b->chunk;
    }
    b->slot = slot;
    return TW_OK;
}

void tw_cshm_unbind(tw_group_t *g)
{
    tw_coll_t *coll = g->coll;
    tw_cshm_node_t *node = coll->node;
    tw_cshm_bind_t *b = &g->shm;
    size_t n = (size_t)g->nlocal;

    if (b->slot >= 0 && node != NULL) {
        /* Let go: mine, and the bits of members known gone. */
        uint64_t mine = 0;
        for (int i = 0; i < g->nlocal; i++) {
            int r = g->ranks[g->local[i]];
            int lr = tw_cshm_local_rank(node, r);
            if (lr >= 0 && (r == coll->p.rank || tw_coll_is_down(coll, r))) {
                mine |= 1ull << lr;
            }
        }
        tw_cseg_desc_t *d = &node->desc[b->slot];
        uint64_t old = atomic_fetch_and_explicit(&d->members, ~mine, memory_order_acq_rel);
        if (b->slot > 0 && (old & ~mine) == 0 && (old & mine) != 0) {
            atomic_store_explicit(&d->owner, 0, memory_order_release); /* the last one */
        }
    }
    tw_free(b->mem, n * sizeof(*b->mem));
    tw_free(b->cells, n * sizeof(*b->cells));
    tw_free(b->seen, n * sizeof(*b->seen));
    tw_free(b->tmp, b->tmp_len);
    b->tmp = NULL;
    b->tmp_len = 0;
    b->mem = NULL;
    b->cells = NULL;
    b->seen = NULL;
    b->slot = -1;
}

void tw_cshm_release(tw_group_t *g)
{
    tw_cshm_node_t *node = g->coll->node;
    tw_cshm_bind_t *b = &g->shm;

    if (b->slot > 0 && node != NULL) {
        atomic_store_explicit(&node->desc[b->slot].members, 0, memory_order_relaxed);
        atomic_store_explicit(&node->desc[b->slot].owner, 0, memory_order_release);
    }
    b->slot = -1;
    tw_cshm_unbind(g);
}

void tw_cshm_abort(tw_group_t *g)
{
    tw_cshm_bind_t *b = &g->shm;

    if (b->slot < 0) {
        return;
    }
    atomic_store_explicit(&b->head->abort, 1, memory_order_seq_cst);
    for (int j = 0; j < g->nlocal; j++) {
        tw_cshm_member_t *m = b->mem[j];
        _Atomic uint64_t *words[] = {
            &m->arrive[0].seq, &m->arrive[1].seq, &m->release[0].seq, &m->release[1].seq, &m->prog,
            &m->ack,           &m->done};
        for (size_t i = 0; i < TW_ARRAY_SIZE(words); i++) {
            (void)tw_futex((void *)words[i], FUTEX_WAKE, INT_MAX, NULL);
        }
    }
}
