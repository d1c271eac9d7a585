/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "bench_rel_ops.h"

#include <stdlib.h>
#include <string.h>

#include "progress/tw_pe.h"
#include "reliability/tw_rel.h"
#include "transports/base/tw_tl.h"

#define BM_UHDR   32u
#define BM_FRAME  4160u /* the wire's max_short */
#define BM_MAXLEN 256u  /* payload per message here */
#define BM_FRAMES 256u  /* frames in flight before the wire refuses */
#define BM_AM     7u

typedef struct bm_frame {
    int src, dst;
    uint8_t am_id;
    size_t hdr_len, len;
    unsigned char bytes[BM_FRAME];
} bm_frame_t;

typedef struct bm_side bm_side_t;

typedef struct bm_wire_iface {
    tw_tl_iface_t super;
    bm_rel_t *bench;
} bm_wire_iface_t;

struct bm_side {
    int rank;
    tw_pe_t *pe;
    tw_tl_iface_t *wire; /* this rank's wire iface (its callbacks: rel's or ours) */
    tw_tl_iface_t *send; /* what the sender calls: rel over the wire, or the wire */
    uint64_t next_in;
    uint64_t received;
    uint64_t bad;
};

struct bm_rel {
    bm_side_t sides[2];
    bm_frame_t *ring; /* FIFO of BM_FRAMES */
    unsigned head, tail;
    uint64_t next_out[2];
    unsigned steps;
    int opening; /* the rank whose wire iface is being opened */
};

static tw_status_t bm_wire_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                    size_t hdr_len, const void *data, size_t len)
{
    bm_rel_t *b = ((bm_wire_iface_t *)iface)->bench;
    bm_frame_t *f;

    if (hdr_len + len > BM_FRAME) {
        return TW_ERR_INVALID;
    }
    if (b->tail - b->head == BM_FRAMES) {
        return TW_ERR_AGAIN;
    }
    f = &b->ring[b->tail++ % BM_FRAMES];
    f->src = iface->rank;
    f->dst = peer;
    f->am_id = am_id;
    f->hdr_len = hdr_len;
    f->len = len;
    memcpy(f->bytes, hdr, hdr_len);
    if (len > 0) {
        memcpy(f->bytes + hdr_len, data, len);
    }
    return TW_OK;
}

static tw_status_t bm_wire_query(char *why, size_t len)
{
    (void)why, (void)len;
    return TW_OK;
}

static bool bm_wire_reachable(tw_tl_iface_t *iface, int peer)
{
    (void)iface;
    return peer == 0 || peer == 1;
}

static void bm_wire_close(tw_tl_iface_t *iface)
{
    tw_tl_iface_cleanup(iface);
    free(iface);
}

static tw_status_t bm_wire_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);

static const tw_tl_ops_t bm_wire_ops = {
    .name = "bmwire",
    .caps = TW_TL_CAP_AM_SHORT,
    .query = bm_wire_query,
    .iface_open = bm_wire_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = bm_wire_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tl_noaddr_pack,
    .addr_connect = tw_tl_noaddr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = bm_wire_reachable,
    .am_short = bm_wire_am_short,
    .am_zcopy = tw_tl_stub_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_tl_stub_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static bm_rel_t *bm_opening; /* set around iface_open, which has no user argument */

static tw_status_t bm_wire_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {.max_short = BM_FRAME, .max_hdr = 256, .max_zcopy = 0};
    bm_wire_iface_t *w = calloc(1, sizeof(*w));

    if (w == NULL || tw_tl_iface_init(&w->super, &bm_wire_ops, params, &attr) != TW_OK) {
        free(w);
        return TW_ERR_NOMEM;
    }
    w->bench = bm_opening;
    *iface_p = &w->super;
    return TW_OK;
}

/* The upper layer (msg's place): checks order and content. */
static void bm_up_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                       const void *data, size_t len)
{
    bm_side_t *s = arg;
    uint64_t idx, want;

    memcpy(&idx, hdr, sizeof(idx));
    memcpy(&want, (const unsigned char *)hdr + 8, sizeof(want));
    if (src != 1 - s->rank || am_id != BM_AM || hdr_len != BM_UHDR || idx != s->next_in ||
        (len >= 8 && memcmp(data, &want, 8) != 0)) {
        s->bad++;
    }
    s->next_in = idx + 1;
    s->received++;
}

bm_rel_t *bm_rel_create(bool reliable)
{
    bm_rel_t *b = calloc(1, sizeof(*b));

    if (b == NULL || (b->ring = calloc(BM_FRAMES, sizeof(*b->ring))) == NULL) {
        free(b);
        return NULL;
    }
    bm_opening = b;
    for (int r = 0; r < 2; r++) {
        bm_side_t *s = &b->sides[r];
        tw_pe_params_t pp = {.name = r ? "bm1" : "bm0", .thread = false};
        tw_tl_params_t tp = {.rank = r, .size = 2, .recv = bm_up_recv, .recv_arg = s};

        s->rank = r;
        if (tw_pe_create(&pp, &s->pe) != TW_OK) {
            abort();
        }
        tp.pe = s->pe;
        if (tw_tl_iface_open(&bm_wire_ops, &tp, &s->wire) != TW_OK) {
            abort();
        }
        s->send = s->wire;
        if (reliable && (tw_rel_wrap(&s->wire, 1, &tp, NULL, &s->send) != TW_OK ||
                         tw_tl_pe_add_tree(s->send) != TW_OK)) {
            abort();
        }
    }
    for (int r = 0; reliable && r < 2; r++) {
        unsigned char addr[64];
        size_t len = 0;
        if (tw_tl_addr_pack(b->sides[r].send, addr, sizeof(addr), &len) != TW_OK ||
            tw_tl_addr_connect(b->sides[1 - r].send, r, addr, len) != TW_OK) {
            abort();
        }
    }
    for (int r = 0; r < 2; r++) {
        tw_tl_ready_tree(b->sides[r].send);
    }
    bm_opening = NULL;
    return b;
}

void bm_rel_destroy(bm_rel_t *b)
{
    for (int r = 0; r < 2; r++) {
        bm_side_t *s = &b->sides[r];
        tw_tl_close(s->send); /* rel and its wire, or the wire */
        tw_pe_destroy(s->pe);
    }
    free(b->ring);
    free(b);
}

/* Deliver every frame on the wire. */
static void bm_pump(bm_rel_t *b)
{
    while (b->head != b->tail) {
        bm_frame_t *f = &b->ring[b->head % BM_FRAMES];
        bm_side_t *d = &b->sides[f->dst];
        d->wire->recv(d->wire->recv_arg, f->src, f->am_id, f->bytes, f->hdr_len,
                      f->bytes + f->hdr_len, f->len);
        b->head++;
    }
}

static bool bm_send(bm_rel_t *b, int r, size_t len)
{
    unsigned char hdr[BM_UHDR] = {0};
    unsigned char payload[BM_MAXLEN];
    uint64_t idx = b->next_out[r], tag = idx * 0x9e3779b97f4a7c15ull;
    tw_tl_iface_t *i = b->sides[r].send;

    if (len > sizeof(payload)) {
        return false;
    }
    memcpy(hdr, &idx, 8);
    memcpy(hdr + 8, &tag, 8);
    memset(payload, (int)(idx & 0xff), len);
    if (len >= 8) {
        memcpy(payload, &tag, 8);
    }
    if (tw_tl_am_short(i, 1 - r, BM_AM, hdr, BM_UHDR, payload, len) != TW_OK) {
        return false;
    }
    b->next_out[r]++;
    return true;
}

static void bm_tick(bm_rel_t *b)
{
    if (++b->steps % 32 == 0) {
        for (int r = 0; r < 2; r++) {
            tw_pe_progress(b->sides[r].pe);
        }
        bm_pump(b);
    }
}

bool bm_rel_stream_step(bm_rel_t *b, size_t len)
{
    if (!bm_send(b, 0, len)) {
        return false;
    }
    bm_pump(b);
    bm_tick(b);
    return true;
}

bool bm_rel_pingpong_step(bm_rel_t *b, size_t len)
{
    if (!bm_send(b, 0, len)) {
        return false;
    }
    bm_pump(b);
    if (!bm_send(b, 1, len)) {
        return false;
    }
    bm_pump(b);
    bm_tick(b);
    return true;
}

uint64_t bm_rel_received(const bm_rel_t *b)
{
    return b->sides[0].received + b->sides[1].received;
}

uint64_t bm_rel_bad(const bm_rel_t *b)
{
    return b->sides[0].bad + b->sides[1].bad;
}
