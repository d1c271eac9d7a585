/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One shm iface (rank 0 of 2) against a peer this test plays by hand:
 * rank 1, whose segment the test creates and formats and whose address it
 * publishes, attaches to the iface's segment as a peer does and writes
 * cells into its ring there with the producer protocol -- honest ones, and
 * well-formed ones that lie about a length. A lie must fail rank 1
 * (peer_down once, TW_ERR_PEER_FAILED; its ring is read no further), and
 * nothing may be read or written outside a cell or a receive buffer:
 *
 *   eager   an EAGER cell longer than a cell (or its header longer than
 *           its bytes) is never delivered; cells after it neither;
 *   data    with CMA off, a DATA chunk larger than what the pull still
 *           wants -- the first chunk, or the last -- fails the pull and
 *           the peer; the guard bytes after the receive buffer (inside
 *           its allocation, and a chunk reaching past the allocation for
 *           ASan) stay intact.
 * The honest runs of each show the harness reaches the check: the lie
 * differs from them by one length only.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_crc32c.h"
#include "shmem/tw_seg.h"
#include "transports/base/tw_tl.h"
#include "transports/shm/tw_shm_proto.h"
#include "tw_test.h"

#define JOB_KEY "shm-hostile-test"
#define NCELLS  8u
#define WANT    1000u /* bytes the pull asks for */
#define GUARD   64u   /* guard bytes after the receive buffer */

typedef struct comp {
    tw_tl_comp_t super;
    int n;
    tw_status_t st;
} comp_t;

typedef struct rig {
    tw_pe_t *pe;
    tw_tl_iface_t *iface;
    tw_seg_t peer_seg;      /* rank 1's segment: holds the iface's outbound ring */
    tw_seg_t iface_seg;     /* the iface's segment, attached as rank 1 does */
    tw_shm_ring_hdr_t *in;  /* rank 1 -> iface: the test produces */
    tw_shm_ring_hdr_t *out; /* iface -> rank 1: the test consumes */
    uint64_t out_head;
    /* What the iface did. */
    int nrecv;
    bool oob; /* it delivered more bytes than a cell holds */
    unsigned char got[TW_SHM_CELL_DATA];
    size_t got_hdr, got_len;
    int nrndv;
    tw_tl_rndv_t *rndv;
    size_t rndv_len;
    int ndown;
    int down_peer;
    tw_status_t down_why;
} rig_t;

static void on_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    rig_t *r = arg;

    (void)am_id;
    TWT_EQ(src, 1);
    r->nrecv++;
    if (hdr_len + len > TW_SHM_CELL_DATA) {
        r->oob = true; /* reading it would leave the cell */
        return;
    }
    memcpy(r->got, hdr, hdr_len);
    memcpy(r->got + hdr_len, data, len);
    r->got_hdr = hdr_len;
    r->got_len = len;
}

static void on_rndv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len, size_t len,
                    tw_tl_rndv_t *rndv)
{
    rig_t *r = arg;

    (void)am_id, (void)hdr, (void)hdr_len;
    TWT_EQ(src, 1);
    r->nrndv++;
    r->rndv = rndv;
    r->rndv_len = len;
}

static void on_down(void *arg, int peer, tw_status_t why)
{
    rig_t *r = arg;

    r->ndown++;
    r->down_peer = peer;
    r->down_why = why;
}

static void on_comp(tw_tl_comp_t *c, tw_status_t st)
{
    comp_t *x = (comp_t *)c;

    x->n++;
    x->st = st;
}

static void rig_open(rig_t *r)
{
    tw_pe_params_t pp = {.name = "hostile", .thread = false, .bind_package = -1};
    uint32_t crc = tw_crc32c(0, JOB_KEY, strlen(JOB_KEY));
    uint8_t buf[TW_SHM_ADDR_LEN];
    tw_shm_addr_t me, peer = {.local_rank = 1, .pid = (uint32_t)getpid(), .ncells = NCELLS};
    size_t len;

    memset(r, 0, sizeof(*r));
    TWT_EQ(tw_pe_create(&pp, &r->pe), TW_OK);
    tw_tl_params_t p = {.rank = 0,
                        .size = 2,
                        .pe = r->pe,
                        .recv = on_recv,
                        .recv_arg = r,
                        .recv_rndv = on_rndv,
                        .peer_down = on_down,
                        .peer_down_arg = r,
                        .job_key = JOB_KEY,
                        .local_rank = 0,
                        .local_size = 2};
    TWT_EQ(tw_tl_iface_open(tw_tl_find("shm"), &p, &r->iface), TW_OK);
    TWT_EQ(tw_tl_addr_pack(r->iface, buf, sizeof(buf), &len), TW_OK);
    TWT_EQ(len, TW_SHM_ADDR_LEN);
    TWT_EQ(tw_shm_addr_parse(buf, len, &me, NULL), TW_OK);
    TWT_EQ(me.ncells, NCELLS);

    /* Rank 1's segment and address (same node, same job). */
    TWT_EQ(tw_seg_make_name(JOB_KEY, peer.seg, sizeof(peer.seg)), TW_OK);
    TWT_EQ(tw_seg_create(peer.seg, tw_shm_seg_size(2, NCELLS), &r->peer_seg), TW_OK);
    tw_shm_seg_format(r->peer_seg.base, &(tw_shm_seg_id_t){.nlocal = 2,
                                                           .ncells = NCELLS,
                                                           .owner_local = 1,
                                                           .owner_pid = peer.pid,
                                                           .key_crc = crc});
    memcpy(peer.node, me.node, sizeof(peer.node));
    tw_shm_addr_pack(&peer, buf);
    TWT_EQ(tw_tl_addr_connect(r->iface, 1, buf, TW_SHM_ADDR_LEN), TW_OK);
    TWT_CHECK(tw_tl_reachable(r->iface, 1));

    /* Rank 1 attaches to the iface's segment, and checks it as the iface did ours. */
    TWT_EQ(tw_seg_attach(me.seg, tw_shm_seg_size(2, NCELLS), &r->iface_seg), TW_OK);
    TWT_EQ(tw_shm_seg_check(r->iface_seg.base, r->iface_seg.size,
                            &(tw_shm_seg_id_t){.nlocal = 2,
                                               .ncells = NCELLS,
                                               .owner_local = 0,
                                               .owner_pid = me.pid,
                                               .key_crc = crc},
                            NULL),
           TW_OK);
    r->in = tw_shm_ring(r->iface_seg.base, NCELLS, 1, 0);
    r->out = tw_shm_ring(r->peer_seg.base, NCELLS, 0, 1);
}

static void rig_close(rig_t *r)
{
    tw_tl_close(r->iface);
    tw_seg_detach(&r->iface_seg);
    (void)tw_seg_unlink(&r->peer_seg);
    tw_seg_detach(&r->peer_seg);
    tw_pe_destroy(r->pe);
}

/* Rank 1 publishes a cell into its ring in the iface's segment: the
 * header fields as given (true or not) and @p n bytes of @p bytes. */
static uint64_t peer_publish(rig_t *r, uint8_t type, uint8_t am_id, uint16_t hdr_len, uint32_t len,
                             uint64_t a0, uint64_t a1, uint64_t a2, const void *bytes, size_t n)
{
    uint64_t pos = atomic_load_explicit(&r->in->tail, memory_order_relaxed);
    tw_shm_cell_t *c = tw_shm_cell(r->in, NCELLS, pos);

    TWT_CHECKF(atomic_load_explicit(&c->seq, memory_order_acquire) == pos, "ring full");
    atomic_store_explicit(&r->in->tail, pos + 1, memory_order_relaxed);
    c->type = type;
    c->am_id = am_id;
    c->hdr_len = hdr_len;
    c->len = len;
    if (type != TW_SHM_EAGER) {
        c->a0 = a0;
        c->a1 = a1;
        c->a2 = a2;
    }
    TWT_CHECK(n <= TW_SHM_CELL_DATA);
    memcpy(tw_shm_cell_bytes(c, type), bytes, n);
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    return pos;
}

/* Has the iface freed the cell at @p pos (taken it in)? */
static bool peer_freed(rig_t *r, uint64_t pos)
{
    return atomic_load_explicit(&tw_shm_cell(r->in, NCELLS, pos)->seq, memory_order_acquire) ==
           pos + NCELLS;
}

/* Rank 1 takes the next cell the iface sent it, if any. */
static bool peer_take(rig_t *r, tw_shm_cell_view_t *v)
{
    tw_shm_cell_t *c = tw_shm_cell(r->out, NCELLS, r->out_head);

    if (atomic_load_explicit(&c->seq, memory_order_acquire) != r->out_head + 1) {
        return false;
    }
    TWT_EQ(tw_shm_cell_parse(c, v, NULL), TW_OK);
    atomic_store_explicit(&c->seq, r->out_head + NCELLS, memory_order_release);
    r->out_head++;
    return true;
}

static void drive(rig_t *r)
{
    for (int i = 0; i < 4; i++) {
        (void)tw_tl_progress(r->iface);
    }
}

static void expect_failed(rig_t *r)
{
    TWT_EQ(r->ndown, 1);
    TWT_EQ(r->down_peer, 1);
    TWT_EQ(r->down_why, TW_ERR_PEER_FAILED);
    TWT_EQ(tw_tl_am_short(r->iface, 1, 1, NULL, 0, "x", 1), TW_ERR_PEER_FAILED);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(seed + i * 7);
    }
}

/* ---- eager ------------------------------------------------------------- */

static unsigned char cellbuf[TW_SHM_CELL_DATA];

static void test_eager_honest(void)
{
    rig_t r;
    uint64_t pos;

    rig_open(&r);
    fill(cellbuf, sizeof(cellbuf), 1);
    pos = peer_publish(&r, TW_SHM_EAGER, 5, 2, 102, 0, 0, 0, cellbuf, 102);
    drive(&r);
    TWT_EQ(r.nrecv, 1);
    TWT_CHECK(r.got_hdr == 2 && r.got_len == 100 && memcmp(r.got, cellbuf, 102) == 0);
    TWT_CHECK(peer_freed(&r, pos));
    /* A cell filled to its last byte. */
    pos =
        peer_publish(&r, TW_SHM_EAGER, 5, 0, TW_SHM_CELL_DATA, 0, 0, 0, cellbuf, TW_SHM_CELL_DATA);
    drive(&r);
    TWT_EQ(r.nrecv, 2);
    TWT_CHECK(r.got_len == TW_SHM_CELL_DATA && memcmp(r.got, cellbuf, TW_SHM_CELL_DATA) == 0);
    TWT_CHECK(peer_freed(&r, pos) && !r.oob);
    TWT_EQ(r.ndown, 0);
    rig_close(&r);
}

static void test_eager_lie(uint16_t hdr_len, uint32_t len)
{
    rig_t r;
    uint64_t good, lie, after;

    rig_open(&r);
    fill(cellbuf, sizeof(cellbuf), 2);
    good = peer_publish(&r, TW_SHM_EAGER, 5, 0, 10, 0, 0, 0, cellbuf, 10);
    lie = peer_publish(&r, TW_SHM_EAGER, 5, hdr_len, len, 0, 0, 0, cellbuf, TW_SHM_CELL_DATA);
    after = peer_publish(&r, TW_SHM_EAGER, 5, 0, 10, 0, 0, 0, cellbuf, 10);
    drive(&r);
    TWT_CHECKF(!r.oob, "a %u-byte cell was delivered", len);
    TWT_EQ(r.nrecv, 1); /* the good one only */
    TWT_CHECK(peer_freed(&r, good) && !peer_freed(&r, lie) && !peer_freed(&r, after));
    expect_failed(&r);
    drive(&r);
    TWT_EQ(r.nrecv, 1);
    TWT_EQ(r.ndown, 1);
    rig_close(&r);
}

/* ---- data (CMA off) ------------------------------------------------------ */

/* RTS of WANT bytes, the pull into @p dst, and its CTS; returns the receive id. */
static uint64_t start_pull(rig_t *r, unsigned char *dst, comp_t *comp)
{
    tw_shm_cell_view_t v;

    peer_publish(r, TW_SHM_RTS, 9, 4, 4, 0x1000, WANT, 77, "rts!", 4);
    drive(r);
    TWT_EQ(r->nrndv, 1);
    TWT_EQ(r->rndv_len, WANT);
    *comp = (comp_t){.super.cb = on_comp};
    TWT_EQ(tw_tl_rndv_get(r->iface, r->rndv, dst, WANT, &comp->super), TW_OK);
    drive(r);
    TWT_CHECK(peer_take(r, &v));
    TWT_EQ(v.type, TW_SHM_CTS);
    TWT_CHECK(v.a0 == WANT && v.a2 == 77);
    TWT_EQ(comp->n, 0);
    return v.a1;
}

static void test_data(size_t first, size_t second)
{
    size_t alloc = WANT + GUARD;
    unsigned char *dst = malloc(alloc), src[2 * WANT];
    bool honest = first + second == WANT;
    comp_t comp;
    rig_t r;
    uint64_t rid;

    TWT_CHECK(dst != NULL && first <= sizeof(src) && first + second <= sizeof(src));
    memset(dst, 0, WANT);
    memset(dst + WANT, 0xa5, GUARD);
    fill(src, sizeof(src), 3);
    rig_open(&r);
    rid = start_pull(&r, dst, &comp);
    peer_publish(&r, TW_SHM_DATA, 0, 0, (uint32_t)first, 0, rid, 0, src, first);
    if (second > 0) {
        peer_publish(&r, TW_SHM_DATA, 0, 0, (uint32_t)second, first, rid, 0, src + first, second);
    }
    drive(&r);
    for (size_t i = WANT; i < alloc; i++) {
        TWT_CHECKF(dst[i] == 0xa5, "guard byte %zu after the buffer overwritten", i - WANT);
    }
    TWT_EQ(comp.n, 1);
    if (honest) {
        TWT_EQ(comp.st, TW_OK);
        TWT_CHECK(memcmp(dst, src, WANT) == 0);
        TWT_EQ(r.ndown, 0);
    } else {
        TWT_EQ(comp.st, TW_ERR_PEER_FAILED);
        expect_failed(&r);
        /* What fit went in; the lying chunk wrote nothing. */
        size_t in = first <= WANT ? first : 0;
        TWT_CHECK(memcmp(dst, src, in) == 0);
        for (size_t i = in; i < WANT; i++) {
            TWT_CHECKF(dst[i] == 0, "byte %zu of the buffer written by the lying chunk", i);
        }
    }
    rig_close(&r);
    free(dst);
}

int main(void)
{
    /* Small rings; large messages through them (the DATA path). */
    setenv("TW_SHM_CELLS", "8", 1);
    setenv("TW_SHM_CMA", "0", 1);

    test_eager_honest();
    test_eager_lie(0, TW_SHM_CELL_DATA + 1);
    test_eager_lie(0, UINT32_MAX);
    test_eager_lie(101, 100);
    printf("eager: lying lengths fail the peer, nothing delivered\n");

    test_data(600, 400);
    test_data(WANT + 16, 0);           /* the first chunk: into the guard */
    test_data(WANT + GUARD + 256, 0);  /* past the allocation */
    test_data(600, 416);               /* the last chunk, 16 bytes too long */
    test_data(600, WANT + GUARD + 64); /* the last chunk, far past the allocation */
    printf("data: chunks beyond the pull fail the peer, the guard is intact\n");
    return 0;
}
