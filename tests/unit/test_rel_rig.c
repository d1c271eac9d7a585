/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* test_rel's rig (test_rel_rig.h). */
#include "test_rel_rig.h"

#include <string.h>

#include "core/tw_mem.h"

rel_rig_t rig;

/* Fragments of 4096 bytes of upper header + payload. */
static const tw_tl_attr_t wire_attr = {.max_short = 4160, .max_hdr = 1024, .max_zcopy = 0};

static uint64_t vclock(void)
{
    return rig.vnow;
}

static void fill(unsigned char *p, size_t n, uint64_t idx)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(idx * 131 + i * 7 + (i >> 8));
    }
}

static void up_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    side_t *s = arg;
    static unsigned char want[PAYLOAD_MAX]; /* scratch */
    uint64_t idx, hlen;

    TWT_CHECK(src == 1 - s->rank && am_id == 7 && hdr_len == UHDR);
    memcpy(&idx, hdr, sizeof(idx));
    memcpy(&hlen, (const unsigned char *)hdr + 8, sizeof(hlen));
    fill(want, len, idx);
    if (idx != s->next_in || hlen != len || len > PAYLOAD_MAX || memcmp(want, data, len) != 0) {
        s->bad++;
        fprintf(stderr, "rank %d: message %llu (expected %llu) of %zu bytes is wrong\n", s->rank,
                (unsigned long long)idx, (unsigned long long)s->next_in, len);
    }
    s->next_in = idx + 1;
    s->delivered++;
    if (rig.reenter != NULL && s->rank == 1) {
        twt_fake_frame_t *f = rig.reenter;
        rig.reenter = NULL;
        twt_fake_deliver(&rig.wire, f);
        rig.reenter_delivered = s->delivered;
    }
}

static void up_down(void *arg, int peer, tw_status_t why)
{
    side_t *s = arg;
    TWT_CHECK(peer == 1 - s->rank);
    s->downs++;
    s->down_why = why;
}

tw_rel_cfg_t test_cfg(void)
{
    tw_rel_cfg_t c;
    tw_cfg_set_defaults(&tw_rel_cfg_table, &c);
    c.rto_ns = 20000000;     /* 20 ms: exact counters even on a slow machine */
    c.rto_max_ns = 80000000; /* 80 ms */
    c.path_timeout_ns = 300000000;
    c.ack_delay_ns = 50000;
    c.keepalive_ns = 5000000000ull; /* out of the way unless a test wants it */
    c.probe_ns = 20000000;
    return c;
}

void case_begin(const char *name)
{
    printf("  %s\n", name);
    fflush(stdout);
    memset(&rig, 0, sizeof(rig));
    rig.vnow = 1000000000ull;
    rig.rng = 42;
}

static void side_open(side_t *s, int r, const tw_rel_opts_t *opts, int npaths)
{
    tw_pe_params_t pp = {.name = r ? "rank1" : "rank0", .thread = false};

    *s = (side_t){.rank = r};
    TWT_CHECK(tw_pe_create(&pp, &s->pe) == TW_OK);
    tw_tl_params_t up = {.rank = r,
                         .size = 2,
                         .pe = s->pe,
                         .recv = up_recv,
                         .recv_arg = s,
                         .peer_down = up_down,
                         .peer_down_arg = s};
    for (int g = 0; g < npaths; g++) {
        TWT_CHECK(twt_fake_open(&rig.wire, g, &up, &s->paths[g]) == TW_OK);
    }
    TWT_CHECK(tw_rel_wrap(s->paths, (unsigned)npaths, &up, opts, &s->rel) == TW_OK);
    for (int g = 0; g < npaths; g++) {
        /* Taken over: rel's own ids are the ones a polling worker may take in. */
        TWT_CHECK(s->paths[g]->recv != up_recv && s->paths[g]->peer_down != up_down);
        TWT_EQ(s->paths[g]->inline_am_ids, (1ull << TW_REL_AM_DATA) | (1ull << TW_REL_AM_ACK) |
                                               (1ull << TW_REL_AM_NACK) | (1ull << TW_REL_AM_CTRL) |
                                               (1ull << TW_REL_AM_SDATA));
    }
    TWT_CHECK(tw_tl_pe_add_tree(s->rel) == TW_OK);
}

void rig_open(const tw_rel_cfg_t *cfg, int npaths)
{
    const tw_rel_opts_t opts = {.cfg = cfg, .clock = vclock};

    twt_fake_init(&rig.wire, 2, &wire_attr);
    rig.wire.hook_arg = &rig;
    rig.npaths = npaths;
    for (int r = 0; r < 2; r++) {
        side_open(&rig.sides[r], r, &opts, npaths);
    }
    /* The address exchange: each rank's incarnation. */
    for (int r = 0; r < 2; r++) {
        unsigned char addr[64];
        size_t len = 0;
        TWT_CHECK(tw_tl_addr_pack(rig.sides[r].rel, addr, sizeof(addr), &len) == TW_OK);
        TWT_CHECK(tw_tl_addr_connect(rig.sides[1 - r].rel, r, addr, len) == TW_OK);
    }
    for (int r = 0; r < 2; r++) {
        TWT_CHECK(tw_tl_reachable(rig.sides[r].rel, 1 - r));
        tw_tl_ready_tree(rig.sides[r].rel);
    }
}

void rig_close(void)
{
    for (int r = 0; r < 2; r++) {
        side_t *s = &rig.sides[r];
        tw_tl_close(s->rel); /* and its paths */
        tw_pe_destroy(s->pe);
    }
    twt_fake_cleanup(&rig.wire);
}

void case_end(void)
{
    rig_close();
    for (unsigned i = 0; i < rig.nzbufs; i++) {
        tw_free(rig.zbufs[i], rig.zlens[i]);
    }
    rig.nzbufs = 0;
}

uint64_t rel_stat(int r, unsigned id)
{
    return tw_stats_read(rig.sides[r].rel->stats, id);
}

uint64_t carried(int path)
{
    return rig.wire.ep[0][path].sent[TW_TL_FRAME_DATA] +
           rig.wire.ep[1][path].sent[TW_TL_FRAME_DATA];
}

void path_dark(int path, bool dark)
{
    for (int r = 0; r < 2; r++) {
        rig.wire.ep[r][path].dark = dark;
    }
}

void path_refuse(int path, tw_status_t st)
{
    for (int r = 0; r < 2; r++) {
        rig.wire.ep[r][path].refuse = st;
    }
}

void rank_mute(int r)
{
    rig.mute[r] = true;
    for (int g = 0; g < rig.npaths; g++) {
        rig.wire.ep[r][g].dark = true;
        rig.wire.ep[r][g].deaf = true;
    }
}

static uint64_t heard(int r)
{
    uint64_t n = 0;

    for (int g = 0; g < rig.npaths; g++) {
        n += rig.wire.ep[r][g].received;
    }
    return n;
}

bool pump(int ms, bool (*done)(void))
{
    uint64_t end = rig.vnow + (uint64_t)ms * 1000000u;

    do {
        uint64_t before[2] = {heard(0), heard(1)};
        twt_fake_pump(&rig.wire);
        for (int r = 0; r < 2; r++) {
            if (heard(r) != before[r]) {
                rig.last_heard[r] = rig.vnow;
            }
            if (!rig.mute[r]) {
                tw_pe_progress(rig.sides[r].pe);
            }
        }
        if (done != NULL && done()) {
            return true;
        }
        rig.vnow += STEP_NS;
    } while (rig.vnow < end);
    return done == NULL;
}

bool all_delivered(void)
{
    return rig.sides[1].delivered >= rig.want_delivered;
}

static void sreq_done(tw_tl_comp_t *comp, tw_status_t status)
{
    sreq_t *q = (sreq_t *)comp;
    q->status = status;
    q->done++;
}

tw_status_t send_msg(int r, size_t len)
{
    static unsigned char payload[PAYLOAD_MAX]; /* scratch */
    unsigned char hdr[UHDR] = {0};
    uint64_t idx = rig.next_out[r], hlen = len;
    tw_tl_iface_t *rel = rig.sides[r].rel;
    tw_status_t st;

    memcpy(hdr, &idx, 8);
    memcpy(hdr + 8, &hlen, 8);
    fill(payload, len, idx);
    if (len <= 8192) {
        st = rel->ops->am_short(rel, 1 - r, 7, hdr, UHDR, payload, len);
    } else {
        sreq_t *q = &rig.sreqs[r][idx % MAX_MSGS];
        *q = (sreq_t){.comp = {.cb = sreq_done}};
        /* zcopy reads the buffer until acked: keep one per message */
        unsigned char *buf = tw_malloc(len);
        TWT_CHECK(buf != NULL && rig.nzbufs < MAX_MSGS);
        memcpy(buf, payload, len);
        st = rel->ops->am_zcopy(rel, 1 - r, 7, hdr, UHDR, buf, len, &q->comp);
        rig.zbufs[rig.nzbufs] = buf;
        rig.zlens[rig.nzbufs++] = len;
    }
    if (st == TW_OK) {
        rig.next_out[r]++;
    }
    return st;
}

bool is_data_frame(const twt_fake_frame_t *f)
{
    return f->am_id == TW_REL_AM_DATA || f->am_id == TW_REL_AM_SDATA;
}

bool is_data(const twt_fake_frame_t *f, uint32_t frag, uint32_t nfrags)
{
    tw_rel_hdr_t h;

    return is_data_frame(f) &&
           tw_rel_parse(f->am_id, f->bytes, f->hdr_len, f->bytes + f->hdr_len, f->len, &h, NULL) ==
               TW_REL_PARSE_OK &&
           h.frag == frag && h.nfrags == nfrags;
}
