/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The scripted fake transport (tests/common/tw_fake_tl.h) that rel's and
 * lossy's tests and bench_rel stand on: if it lied, they would too. Two
 * ranks, their arrivals recorded in order. One ctest entry per case:
 *
 *   table     the ops table is consistent (caps against stubs), opens
 *             only through twt_fake_open, once per endpoint;
 *   order     frames arrive intact, in send order, exactly once, with
 *             their source and class; counters match;
 *   hooks     drop, hold and release (reordering), duplicate, deliver
 *             now, discard, corrupt, replay a copy: each does just that;
 *   endpoint  refuse, dark, deaf, a full wire (TW_ERR_AGAIN), AGAIN from
 *             on_send, frames for nobody (stray), a peer_down report.
 */
#include <string.h>

#include "tw_fake_tl.h"
#include "tw_test.h"

#define AM 9

static struct {
    twt_fake_t w;
    tw_pe_t *pe[2];
    tw_tl_iface_t *ep[2];
    unsigned n;       /* arrivals */
    uint32_t seq[64]; /* their first 4 bytes */
    int src[64];
    int downs, down_peer;
    tw_status_t down_why;
    twt_fake_frame_t *kept[4];
    unsigned nkept;
} t;

static const uint8_t classes[64] = {[AM] = TW_TL_FRAME_ACK};

static void recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    (void)arg;
    TWT_CHECK(am_id == AM && hdr_len == 4 && len == 12 && t.n < 64);
    TWT_CHECK(twt_verify(data, len, 7));
    memcpy(&t.seq[t.n], hdr, 4);
    t.src[t.n++] = src;
}

static void down_cb(void *arg, int peer, tw_status_t why)
{
    (void)arg;
    t.downs++;
    t.down_peer = peer;
    t.down_why = why;
}

static void open2(void)
{
    static const tw_tl_attr_t attr = {.max_short = 64, .max_hdr = 16, .max_zcopy = 0};

    memset(&t, 0, sizeof(t));
    twt_fake_init(&t.w, 2, &attr);
    t.w.hook_arg = &t;
    for (int r = 0; r < 2; r++) {
        tw_pe_params_t pp = {.name = "fake", .thread = false};
        TWT_EQ(tw_pe_create(&pp, &t.pe[r]), TW_OK);
        tw_tl_params_t p = {.rank = r,
                            .size = 2,
                            .pe = t.pe[r],
                            .recv = recv_cb,
                            .peer_down = down_cb,
                            .am_class = classes};
        TWT_EQ(twt_fake_open(&t.w, 0, &p, &t.ep[r]), TW_OK);
    }
}

static void close2(void)
{
    for (int r = 0; r < 2; r++) {
        tw_tl_close(t.ep[r]);
        tw_pe_destroy(t.pe[r]);
    }
    TWT_CHECK(t.w.ep[0][0].iface == NULL && t.w.ep[1][0].iface == NULL);
    twt_fake_cleanup(&t.w);
}

/* Message @p seq from rank 0 to 1. */
static tw_status_t send0(uint32_t seq)
{
    unsigned char data[12];

    twt_fill(data, sizeof(data), 7);
    return tw_tl_am_short(t.ep[0], 1, AM, &seq, 4, data, sizeof(data));
}

static void expect(const uint32_t *seqs, unsigned n)
{
    TWT_EQ(t.n, n);
    for (unsigned i = 0; i < n; i++) {
        TWT_EQ(t.seq[i], seqs[i]);
    }
}

static void case_table(void)
{
    tw_tl_iface_t *i = NULL;
    tw_tl_params_t p = {.rank = 0, .size = 2};

    TWT_CHECK(tw_tl_caps_consistent(&twt_fake_ops));
    TWT_CHECK(strcmp(twt_fake_ops.name, "fake") == 0);
    TWT_EQ(twt_fake_ops.caps, TW_TL_CAP_AM_SHORT);
    /* Without the wire it cannot open; an endpoint opens once. */
    TWT_EQ(tw_tl_iface_open(&twt_fake_ops, &p, &i), TW_ERR_INVALID);
    TWT_CHECK(i == NULL);
    open2();
    p.pe = t.pe[0];
    TWT_EQ(twt_fake_open(&t.w, 0, &p, &i), TW_ERR_INVALID);
    TWT_EQ(twt_fake_open(&t.w, TWT_FAKE_PATHS, &p, &i), TW_ERR_INVALID);
    p.rank = 2;
    TWT_EQ(twt_fake_open(&t.w, 1, &p, &i), TW_ERR_INVALID);
    TWT_CHECK(i == NULL);
    TWT_CHECK(t.ep[0]->caps == TW_TL_CAP_AM_SHORT && strcmp(t.ep[0]->name, "fake") == 0);
    TWT_CHECK(tw_tl_reachable(t.ep[0], 1) && !tw_tl_reachable(t.ep[0], 2));
    TWT_EQ(t.ep[0]->attr.max_short, 64u);
    close2();
}

static void case_order(void)
{
    static const uint32_t want[] = {0, 1, 2, 3, 4};

    open2();
    for (uint32_t i = 0; i < 5; i++) {
        TWT_EQ(send0(i), TW_OK);
    }
    TWT_EQ(t.n, 0u); /* nothing moves before the pump */
    TWT_EQ(t.w.queued, 5u);
    TWT_EQ(twt_fake_pump(&t.w), 5u);
    expect(want, 5);
    TWT_EQ(t.src[4], 0);
    TWT_EQ(t.w.ep[0][0].sent[TW_TL_FRAME_ACK], 5u); /* the class from am_class */
    TWT_EQ(t.w.ep[0][0].sent[TW_TL_FRAME_DATA], 0u);
    TWT_EQ(t.w.ep[1][0].received, 5u);
    TWT_EQ(t.w.delivered, 5u);
    TWT_EQ(t.w.dropped + t.w.duplicated + t.w.stray + t.w.queued + t.w.held, 0u);
    TWT_EQ(twt_fake_pump(&t.w), 0u);
    close2();
}

/* Frame 1: dropped; 2: held; 3: duplicated once; 4: corrupted (bit 0 of
 * its seq: it arrives as 5); 0: a copy kept. */
static twt_fake_fate_t script(void *arg, twt_fake_frame_t *f)
{
    uint32_t seq;

    (void)arg;
    memcpy(&seq, f->bytes, 4);
    switch (seq) {
    case 0:
        t.kept[t.nkept++] = twt_fake_copy(&t.w, f);
        return TWT_FAKE_PASS;
    case 1:
        return TWT_FAKE_DROP;
    case 2:
        t.kept[t.nkept++] = f;
        return TWT_FAKE_HOLD;
    case 3: /* the copy comes by here too */
        return t.w.duplicated == 0 ? TWT_FAKE_DUP : TWT_FAKE_PASS;
    case 4:
        twt_fake_flip_bit(&t.w, f, 0);
        return TWT_FAKE_PASS;
    default:
        return TWT_FAKE_PASS;
    }
}

static void case_hooks(void)
{
    static const uint32_t want[] = {0, 3, 5, 3, 2, 0, 6};

    open2();
    t.w.on_deliver = script;
    for (uint32_t i = 0; i < 5; i++) {
        TWT_EQ(send0(i), TW_OK);
    }
    TWT_EQ(twt_fake_pump(&t.w), 6u); /* five, and the duplicate */
    TWT_EQ(t.w.held, 2u);
    t.w.on_deliver = NULL;
    twt_fake_release(&t.w, t.kept[1]); /* frame 2, after all the others */
    twt_fake_release(&t.w, t.kept[0]); /* the replay of frame 0 */
    TWT_EQ(send0(6), TW_OK);
    TWT_EQ(twt_fake_pump(&t.w), 3u);
    expect(want, 7);
    TWT_EQ(t.w.dropped, 1u);
    TWT_EQ(t.w.duplicated, 1u);
    TWT_EQ(t.w.corrupted, 1u);
    TWT_EQ(t.w.held, 0u);
    /* Held, then delivered at once or lost. */
    t.w.on_deliver = script;
    t.nkept = 0;
    TWT_EQ(send0(2), TW_OK);
    TWT_EQ(send0(2), TW_OK);
    TWT_EQ(twt_fake_pump(&t.w), 2u);
    TWT_EQ(t.nkept, 2u);
    twt_fake_deliver(&t.w, t.kept[0]);
    TWT_EQ(t.n, 8u);
    twt_fake_discard(&t.w, t.kept[1]);
    TWT_EQ(t.w.dropped, 2u);
    TWT_EQ(t.w.held + t.w.queued, 0u);
    TWT_EQ(t.w.delivered, 8u);
    close2();
}

static unsigned again_calls;
static twt_fake_fate_t again_every_other(void *arg, twt_fake_frame_t *f)
{
    (void)arg, (void)f;
    return again_calls++ % 2 == 0 ? TWT_FAKE_AGAIN : TWT_FAKE_PASS;
}

static void case_endpoint(void)
{
    static const uint32_t want[] = {3, 4};

    open2();
    t.w.ep[0][0].refuse = TW_ERR_TRANSPORT;
    TWT_EQ(send0(1), TW_ERR_TRANSPORT);
    t.w.ep[0][0].refuse = TW_OK;
    t.w.ep[0][0].dark = true;
    TWT_EQ(send0(2), TW_OK); /* taken, and lost */
    t.w.ep[0][0].dark = false;
    TWT_EQ(send0(3), TW_OK);
    t.w.max_frames = 1;
    TWT_EQ(send0(9), TW_ERR_AGAIN); /* one is queued: full */
    t.w.max_frames = 0;
    again_calls = 0;
    t.w.on_send = again_every_other;
    TWT_EQ(send0(9), TW_ERR_AGAIN);
    TWT_EQ(send0(4), TW_OK);
    t.w.on_send = NULL;
    TWT_EQ(twt_fake_pump(&t.w), 2u);
    expect(want, 2);
    TWT_EQ(t.w.ep[0][0].refused, 3u);
    TWT_EQ(t.w.ep[0][0].sent[TW_TL_FRAME_ACK], 3u); /* 2 (dark), 3, 4 */
    TWT_EQ(t.w.dropped, 1u);
    /* deaf: lost on arrival */
    t.w.ep[1][0].deaf = true;
    TWT_EQ(send0(5), TW_OK);
    TWT_EQ(twt_fake_pump(&t.w), 1u);
    TWT_EQ(t.n, 2u);
    TWT_EQ(t.w.dropped, 2u);
    /* frames for nobody, and one too large to inject */
    unsigned char b[64] = {0};
    TWT_EQ(twt_fake_inject(&t.w, 0, 1, 3, AM, b, 4, b, 12), TW_OK);
    TWT_EQ(twt_fake_inject(&t.w, 0, 1, 0, AM, b, 4, b, 61), TW_ERR_INVALID);
    TWT_EQ(twt_fake_pump(&t.w), 1u);
    TWT_EQ(t.w.stray, 1u);
    twt_fake_report_down(&t.w, 1, 0, 0, TW_ERR_TRANSPORT);
    TWT_EQ(t.downs, 1);
    TWT_EQ(t.down_peer, 0);
    TWT_EQ(t.down_why, TW_ERR_TRANSPORT);
    close2();
}

static const twt_case_t cases[] = {
    {"table", case_table},
    {"order", case_order},
    {"hooks", case_hooks},
    {"endpoint", case_endpoint},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
