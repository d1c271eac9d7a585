/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Cross-process format of the shm transport (see tw_shm_proto.h). */
#include "transports/shm/tw_shm_proto.h"

#include <string.h>

#include "core/tw_bytes.h"

static const char *const tw_shm_type_names[TW_SHM_TYPE_MAX] = {"?",   "EAGER", "RTS",
                                                               "CTS", "FIN",   "DATA"};

const char *tw_shm_cell_type_name(unsigned type)
{
    return type < TW_SHM_TYPE_MAX ? tw_shm_type_names[type] : "?";
}

static void tw_shm_ring_init(tw_shm_ring_hdr_t *ring, unsigned ncells)
{
    atomic_init(&ring->tail, 0);
    atomic_init(&ring->want_wake, 0);
    for (unsigned i = 0; i < ncells; i++) {
        atomic_init(&tw_shm_cell(ring, ncells, i)->seq, i);
    }
}

void tw_shm_seg_format(void *base, const tw_shm_seg_id_t *id)
{
    tw_shm_seg_hdr_t *h = base;

    h->magic = TW_SHM_MAGIC;
    h->version = TW_SHM_VERSION;
    memset(h->reserved, 0, sizeof(h->reserved));
    h->nlocal = id->nlocal;
    h->ncells = id->ncells;
    h->cell_size = TW_SHM_CELL_SIZE;
    h->owner_local = id->owner_local;
    h->owner_pid = id->owner_pid;
    h->key_crc = id->key_crc;
    atomic_init(&h->state, TW_SHM_SEG_LIVE);
    atomic_init(&h->sleeping, 0);
    for (unsigned from = 0; from < id->nlocal; from++) {
        if (from != id->owner_local) {
            tw_shm_ring_init(tw_shm_ring(base, id->ncells, from, id->owner_local), id->ncells);
        }
    }
}

tw_status_t tw_shm_seg_check(const void *base, size_t size, const tw_shm_seg_id_t *want,
                             const char **why)
{
    const tw_shm_seg_hdr_t *h = base;
    uint32_t nlocal, ncells, owner;

    if (size < TW_SHM_HDR_SIZE) {
        return tw_shm_proto_bad(why, "segment smaller than its header");
    }
    if (h->magic != TW_SHM_MAGIC) {
        return tw_shm_proto_bad(why, "wrong segment magic");
    }
    if (h->version != TW_SHM_VERSION) {
        return tw_shm_proto_bad(why, "unsupported segment version");
    }
    if (h->reserved[0] != 0 || h->reserved[1] != 0 || h->reserved[2] != 0) {
        return tw_shm_proto_bad(why, "reserved header bytes set");
    }
    if (h->cell_size != TW_SHM_CELL_SIZE) {
        return tw_shm_proto_bad(why, "another cell size");
    }
    nlocal = h->nlocal;
    ncells = h->ncells;
    owner = h->owner_local;
    if (ncells < TW_SHM_CELLS_MIN || ncells > TW_SHM_CELLS_MAX || (ncells & (ncells - 1)) != 0) {
        return tw_shm_proto_bad(why, "cell count out of range or not a power of two");
    }
    if (owner >= nlocal) {
        return tw_shm_proto_bad(why, "owner outside the node's ranks");
    }
    if (nlocal != want->nlocal || ncells != want->ncells) {
        return tw_shm_proto_bad(why, "layout differs from ours (ranks or cells)");
    }
    if (owner != want->owner_local || h->owner_pid != want->owner_pid) {
        return tw_shm_proto_bad(why, "owner differs from its address");
    }
    if (h->key_crc != want->key_crc) {
        return tw_shm_proto_bad(why, "another job's segment");
    }
    if (size != tw_shm_seg_size(nlocal, ncells)) {
        return tw_shm_proto_bad(why, "segment size differs from what its rings need");
    }
    return TW_OK;
}

/* Layout: magic 0 | version 4 | reserved 5..7 | local_rank 8 | pid 12 |
 * ncells 16 | seg 20 | node 20 + TW_SEG_NAME_MAX. */
enum {
    TW_SHM_ADDR_SEG = 20,
    TW_SHM_ADDR_NODE = TW_SHM_ADDR_SEG + TW_SEG_NAME_MAX,
};
_Static_assert(TW_SHM_ADDR_NODE + TW_SHM_NODE_MAX == TW_SHM_ADDR_LEN, "address layout");

void tw_shm_addr_pack(const tw_shm_addr_t *a, uint8_t buf[TW_SHM_ADDR_LEN])
{
    memset(buf, 0, TW_SHM_ADDR_LEN);
    tw_put32(buf, TW_SHM_ADDR_MAGIC);
    buf[4] = TW_SHM_VERSION;
    tw_put32(buf + 8, a->local_rank);
    tw_put32(buf + 12, a->pid);
    tw_put32(buf + 16, a->ncells);
    /* Cut to fit, NUL-terminated: the fields are zero already. */
    memcpy(buf + TW_SHM_ADDR_SEG, a->seg, strnlen(a->seg, TW_SEG_NAME_MAX - 1));
    memcpy(buf + TW_SHM_ADDR_NODE, a->node, strnlen(a->node, TW_SHM_NODE_MAX - 1));
}

tw_status_t tw_shm_addr_parse(const void *buf, size_t len, tw_shm_addr_t *a_p, const char **why)
{
    const uint8_t *p = buf;
    tw_shm_addr_t a;

    if (len != TW_SHM_ADDR_LEN) {
        return tw_shm_proto_bad(why, "address of another length");
    }
    if (tw_get32(p) != TW_SHM_ADDR_MAGIC) {
        return tw_shm_proto_bad(why, "wrong address magic");
    }
    if (p[4] != TW_SHM_VERSION) {
        return tw_shm_proto_bad(why, "unsupported address version");
    }
    if (p[5] != 0 || p[6] != 0 || p[7] != 0) {
        return tw_shm_proto_bad(why, "reserved address bytes set");
    }
    if (memchr(p + TW_SHM_ADDR_SEG, '\0', TW_SEG_NAME_MAX) == NULL ||
        memchr(p + TW_SHM_ADDR_NODE, '\0', TW_SHM_NODE_MAX) == NULL) {
        return tw_shm_proto_bad(why, "address string not terminated");
    }
    if (p[TW_SHM_ADDR_SEG] != '/') {
        return tw_shm_proto_bad(why, "segment name is not /...");
    }
    a.local_rank = tw_get32(p + 8);
    a.pid = tw_get32(p + 12);
    a.ncells = tw_get32(p + 16);
    memcpy(a.seg, p + TW_SHM_ADDR_SEG, TW_SEG_NAME_MAX);
    memcpy(a.node, p + TW_SHM_ADDR_NODE, TW_SHM_NODE_MAX);
    *a_p = a; /* only on success */
    return TW_OK;
}
