/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "bench_rel_ops.h"

#include <stdlib.h>
#include <string.h>

#include "progress/tw_pe.h"
#include "reliability/tw_rel.h"
#include "transports/base/tw_tl.h"
#include "tw_fake_tl.h"

#define BM_UHDR   32u
#define BM_MAXLEN 256u /* payload per message here */
#define BM_FRAMES 256u /* frames in flight before the wire refuses */
#define BM_AM     7u

typedef struct bm_side {
    int rank;
    tw_pe_t *pe;
    tw_tl_iface_t *wire; /* this rank's fake iface (its callbacks: rel's or ours) */
    tw_tl_iface_t *send; /* what the sender calls: rel over the wire, or the wire */
    uint64_t next_in;
    uint64_t received;
    uint64_t bad;
} bm_side_t;

struct bm_rel {
    twt_fake_t wire; /* no hooks: every frame passes, in order */
    bm_side_t sides[2];
    uint64_t next_out[2];
    unsigned steps;
};

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
    /* Fragments of 4096 bytes of upper header + payload, as rel's tests. */
    static const tw_tl_attr_t attr = {.max_short = 4160, .max_hdr = 256, .max_zcopy = 0};
    bm_rel_t *b = calloc(1, sizeof(*b));

    if (b == NULL) {
        return NULL;
    }
    twt_fake_init(&b->wire, 2, &attr);
    b->wire.max_frames = BM_FRAMES;
    for (int r = 0; r < 2; r++) {
        bm_side_t *s = &b->sides[r];
        tw_pe_params_t pp = {.name = r ? "bm1" : "bm0", .thread = false};
        tw_tl_params_t tp = {.rank = r, .size = 2, .recv = bm_up_recv, .recv_arg = s};

        s->rank = r;
        if (tw_pe_create(&pp, &s->pe) != TW_OK) {
            abort();
        }
        tp.pe = s->pe;
        if (twt_fake_open(&b->wire, 0, &tp, &s->wire) != TW_OK) {
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
    return b;
}

void bm_rel_destroy(bm_rel_t *b)
{
    for (int r = 0; r < 2; r++) {
        bm_side_t *s = &b->sides[r];
        tw_tl_close(s->send); /* rel and its wire, or the wire */
        tw_pe_destroy(s->pe);
    }
    twt_fake_cleanup(&b->wire);
    free(b);
}

/* Deliver every frame on the wire. */
static void bm_pump(bm_rel_t *b)
{
    twt_fake_pump(&b->wire);
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
