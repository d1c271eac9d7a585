/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The one-sided protocol (src/msg/tw_rma.c) between two instances joined
 * by an in-memory transport whose frames the test delivers by hand: so it
 * can hold, duplicate, forge and reorder them, refuse sends (TW_ERR_AGAIN)
 * and fail the peer between any two steps.
 *
 * One ctest entry per case (unit/msg.cmake); each opens two fresh
 * instances and a CQ, with rank 1's window registered, checks the
 * completions and every counter of both ranks, and closes them with
 * nothing left to deliver or to complete:
 *
 *   put             put, short (copied) and long (zero-copy): complete
 *                   only when the ack came back;
 *   get             get, short and long;
 *   flush           a flush held back by an unacknowledged put, and only
 *                   by the puts before it;
 *   forged_replies  forged, stale and malformed replies are dropped;
 *   dup_ack         a duplicated ack completes once;
 *   get_rep_len     a get's reply of the wrong length fails the get;
 *   refused         requests with a wrong key, out of bounds, for no
 *                   region, or shorter than they claim: refused, the
 *                   window untouched;
 *   deferred        replies the transport refused (TW_ERR_AGAIN), sent
 *                   again by the progress function;
 *   dereg_key       the key of a region deregistered, refused at the
 *                   target;
 *   origin_checks   bounds, owner and damaged keys refused at the origin;
 *   dereg_wait      a deregistration waits for a zero-copy reply still
 *                   reading the region;
 *   peer_down       a peer failing with a put, a get and a flush waiting;
 *                   its late replies are stale;
 *   finalize        regions still registered are released at finalize,
 *                   their handles then only freed.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_mem.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma.h"
#include "msg/tw_rma_proto.h"
#include "progress/tw_cq.h"
#include "tw_test.h"

#define EAGER 256

typedef struct frame frame_t;
struct frame {
    frame_t *next;
    int src, dst;
    size_t hdr_len, len;
    tw_tl_comp_t *comp; /* zero-copy: completed when delivered */
    unsigned char bytes[];
};

typedef struct fake {
    tw_tl_iface_t super;
    int rank;
    int again; /* refuse this many sends with TW_ERR_AGAIN */
} fake_t;

static frame_t *q_head, *q_tail;
static fake_t fakes[2];
static tw_tl_iface_t *routes[2][2];
static atomic_uchar down[2][2];
static tw_rma_t *rma[2];

static tw_status_t enqueue(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                           size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    fake_t *f = (fake_t *)iface;
    frame_t *fr;

    TWT_CHECK(am_id == TW_MSG_AM_RMA);
    if (f->again > 0) {
        f->again--;
        return TW_ERR_AGAIN;
    }
    fr = malloc(sizeof(*fr) + hdr_len + len);
    TWT_CHECK(fr != NULL);
    *fr = (frame_t){.src = f->rank, .dst = peer, .hdr_len = hdr_len, .len = len, .comp = comp};
    memcpy(fr->bytes, hdr, hdr_len);
    if (len > 0) {
        memcpy(fr->bytes + hdr_len, data, len);
    }
    if (q_tail != NULL) {
        q_tail->next = fr;
    } else {
        q_head = fr;
    }
    q_tail = fr;
    return TW_OK;
}

static tw_status_t fake_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len)
{
    return enqueue(iface, peer, am_id, hdr, hdr_len, data, len, NULL);
}

static tw_status_t fake_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    return enqueue(iface, peer, am_id, hdr, hdr_len, data, len, comp);
}

static const tw_tl_ops_t fake_ops = {
    .name = "fake",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY,
    .am_short = fake_short,
    .am_zcopy = fake_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static frame_t *pop(void)
{
    frame_t *fr = q_head;

    if (fr != NULL) {
        q_head = fr->next;
        if (q_head == NULL) {
            q_tail = NULL;
        }
    }
    return fr;
}

static void deliver(frame_t *fr)
{
    tw_rma_recv(rma[fr->dst], fr->src, fr->bytes, fr->hdr_len, fr->bytes + fr->hdr_len, fr->len);
    if (fr->comp != NULL) {
        fr->comp->cb(fr->comp, TW_OK);
    }
    free(fr);
}

/* Deliver every frame, those the deliveries send too; returns how many. */
static int deliver_all(void)
{
    int n = 0;
    frame_t *fr;

    while ((fr = pop()) != NULL) {
        deliver(fr);
        n++;
    }
    return n;
}

static int poll_one(tw_cq_t *cq, tw_completion_t *c)
{
    return tw_cq_poll(cq, c, 1);
}

static uint64_t stat(int r, unsigned id)
{
    return tw_stats_read(tw_rma_stats(rma[r]), id);
}

/* Every case's own rig: two fresh instances, a CQ, rank 1's window
 * registered and its key packed. */
static unsigned char win[8192], src[8192], dst[8192];
static uint8_t key[TW_RKEY_MAX];
static uint64_t base;
static tw_cq_t *cq;
static tw_mr_t *mr;

static void rig_open(void)
{
    tw_cq_params_t cp = {.depth = 64};
    size_t klen, need;

    TWT_CHECK(q_head == NULL);
    TWT_EQ(tw_cq_open(&cp, &cq), TW_OK);
    for (int r = 0; r < 2; r++) {
        fakes[r] =
            (fake_t){.super = {.ops = &fake_ops,
                               .attr = {.max_short = 1024, .max_hdr = 1024, .max_zcopy = 1u << 30}},
                     .rank = r};
        for (int p = 0; p < 2; p++) {
            routes[r][p] = &fakes[r].super;
            atomic_init(&down[r][p], 0);
        }
        tw_rma_params_t params = {
            .rank = r, .size = 2, .route = routes[r], .down = down[r], .eager_limit = EAGER};
        TWT_EQ(tw_rma_create(&params, &rma[r]), TW_OK);
    }
    memset(win, 0, sizeof(win));
    memset(dst, 0, sizeof(dst));
    for (size_t i = 0; i < sizeof(src); i++) {
        src[i] = (unsigned char)(i * 7 + 3);
    }
    TWT_EQ(tw_rma_mem_register(rma[1], win, sizeof(win), &mr), TW_OK);
    base = (uint64_t)(uintptr_t)win;
    /* Packing says how long the key is, and packs nothing shorter. */
    TWT_EQ(tw_rma_mr_pack(mr, NULL, &need), TW_OK);
    klen = need - 1;
    TWT_EQ(tw_rma_mr_pack(mr, key, &klen), TW_ERR_TRUNCATED);
    TWT_EQ(klen, need);
    klen = sizeof(key);
    TWT_EQ(tw_rma_mr_pack(mr, key, &klen), TW_OK);
    TWT_EQ(klen, need);
}

/* A case ends with nothing left to deliver or to complete; the window is
 * deregistered (unless the case took it: mr == NULL), the rest freed. */
static void rig_close(void)
{
    tw_completion_t c;

    TWT_CHECK(q_head == NULL);
    TWT_EQ(poll_one(cq, &c), 0);
    if (mr != NULL) {
        TWT_EQ(tw_rma_mem_deregister(mr), TW_OK);
        mr = NULL;
    }
    for (int r = 0; r < 2; r++) {
        tw_rma_release_regions(rma[r]);
        tw_rma_destroy(rma[r]);
    }
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

/* Rank @p r's counters equal @p want, every one of them. */
static void stats_eq(int r, const uint64_t want[TW_RMA_STAT_COUNT])
{
    for (unsigned id = 0; id < TW_RMA_STAT_COUNT; id++) {
        TWT_CHECKF(stat(r, id) == want[id], "rank %d counter %u: %" PRIu64 " != %" PRIu64, r, id,
                   stat(r, id), want[id]);
    }
}
#define STATS_EQ(r, ...) stats_eq((r), (const uint64_t[TW_RMA_STAT_COUNT]){__VA_ARGS__})

/* Register @p buf at rank 1 and pack its key into @p k. */
static tw_mr_t *reg_at_1(void *buf, size_t len, uint8_t *k)
{
    size_t klen = TW_RKEY_MAX;
    tw_mr_t *m;

    TWT_EQ(tw_rma_mem_register(rma[1], buf, len, &m), TW_OK);
    TWT_EQ(tw_rma_mr_pack(m, k, &klen), TW_OK);
    return m;
}

/* Craft a request or reply of rank @p from to rank @p to. */
static void inject(int from, int to, const tw_rma_hdr_t *h, const void *data, size_t len)
{
    TWT_EQ(enqueue(&fakes[from].super, to, TW_MSG_AM_RMA, h, sizeof(*h), data, len, NULL), TW_OK);
}

/* Put, short and long: complete only when the ack came back. */
static void test_put(void)
{
    tw_completion_t c;
    frame_t *fr;

    rig_open();
    for (size_t len = 100; len <= 4000; len += 3900) {
        memset(win, 0, sizeof(win));
        TWT_EQ(tw_rma_put(rma[0], 1, src, len, base + 10, key, cq, src), TW_OK);
        TWT_EQ(poll_one(cq, &c), 0);
        fr = pop();
        TWT_CHECK(fr != NULL && (len > EAGER) == (fr->comp != NULL));
        deliver(fr); /* the request: the bytes land, the ack goes back */
        TWT_CHECK(memcmp(win + 10, src, len) == 0);
        TWT_EQ(poll_one(cq, &c), 0);
        TWT_EQ(deliver_all(), 1);
        TWT_EQ(poll_one(cq, &c), 1);
        TWT_CHECK(c.op == TW_OP_PUT && c.status == TW_OK && c.length == len && c.user == src &&
                  c.peer == 1);
    }
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 2, [TW_RMA_STAT_PUT_BYTES] = 4100);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 2);
    rig_close();
}

/* Get, short and long. */
static void test_get(void)
{
    tw_completion_t c;

    rig_open();
    memcpy(win, src, sizeof(win));
    for (size_t len = 64; len <= 6400; len += 6336) {
        memset(dst, 0, sizeof(dst));
        TWT_EQ(tw_rma_get(rma[0], 1, dst, len, base + 10, key, cq, dst), TW_OK);
        TWT_EQ(deliver_all(), 2);
        TWT_EQ(poll_one(cq, &c), 1);
        TWT_CHECK(c.op == TW_OP_GET && c.status == TW_OK && c.length == len && c.user == dst &&
                  c.peer == 1);
        TWT_CHECK(memcmp(dst, win + 10, len) == 0);
    }
    STATS_EQ(0, [TW_RMA_STAT_GETS] = 2, [TW_RMA_STAT_GET_BYTES] = 6464);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 2);
    rig_close();
}

/* A flush waits for the put before it, and only for that one. */
static void test_flush(void)
{
    tw_completion_t c;
    frame_t *fr, *later;

    rig_open();
    TWT_EQ(tw_rma_flush(rma[0], 1, cq, NULL), TW_OK);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.op == TW_OP_FLUSH && c.status == TW_OK); /* nothing before it */
    TWT_EQ(tw_rma_put(rma[0], 1, src, 8, base, key, cq, (void *)1), TW_OK);
    TWT_EQ(tw_rma_flush(rma[0], 1, cq, (void *)2), TW_OK);
    TWT_EQ(tw_rma_put(rma[0], 1, src, 8, base + 8, key, cq, (void *)3), TW_OK);
    fr = pop(); /* the first put's request */
    later = pop();
    TWT_EQ(poll_one(cq, &c), 0);
    deliver(later); /* the second put first: its ack does not free the flush */
    TWT_EQ(deliver_all(), 1);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.user == (void *)3 && c.status == TW_OK);
    TWT_EQ(poll_one(cq, &c), 0);
    deliver(fr);
    TWT_EQ(deliver_all(), 1);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.user == (void *)1 && c.op == TW_OP_PUT);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.user == (void *)2 && c.op == TW_OP_FLUSH && c.status == TW_OK);
    TWT_CHECK(memcmp(win, src, 8) == 0 && memcmp(win + 8, src, 8) == 0);
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 2, [TW_RMA_STAT_PUT_BYTES] = 16, [TW_RMA_STAT_FLUSHES] = 2);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 2);
    rig_close();
}

/* Forged and malformed replies are dropped: an unknown cookie, a
 * generation the slot does not have, an unknown type, status and
 * version, a short header. */
static void test_forged_replies(void)
{
    tw_rma_hdr_t h = {.version = TW_RMA_HDR_VERSION, .type = TW_RMA_PUT_ACK, .cookie = 12345};
    tw_completion_t c;

    rig_open();
    inject(1, 0, &h, NULL, 0);
    h.cookie = (uint64_t)1 << 32; /* slot 0, a generation it does not have */
    inject(1, 0, &h, NULL, 0);
    h.type = 9;
    inject(1, 0, &h, NULL, 0);
    h.type = TW_RMA_PUT_ACK;
    h.status = 7; /* no such status */
    inject(1, 0, &h, NULL, 0);
    h.status = 0;
    h.version = 99;
    inject(1, 0, &h, NULL, 0);
    TWT_EQ(enqueue(&fakes[1].super, 0, TW_MSG_AM_RMA, &h, sizeof(h) - 1, NULL, 0, NULL), TW_OK);
    TWT_EQ(deliver_all(), 6);
    TWT_EQ(poll_one(cq, &c), 0);
    STATS_EQ(0, [TW_RMA_STAT_DROPPED] = 6);
    STATS_EQ(1, [TW_RMA_STAT_DROPPED] = 0);
    rig_close();
}

/* A duplicated ack: the first completes, the copy finds nothing. */
static void test_dup_ack(void)
{
    tw_completion_t c;
    frame_t *fr;

    rig_open();
    TWT_EQ(tw_rma_put(rma[0], 1, src, 8, base, key, cq, NULL), TW_OK);
    deliver(pop()); /* the request */
    fr = pop();
    TWT_CHECK(fr != NULL);
    inject(1, 0, (const tw_rma_hdr_t *)fr->bytes, NULL, 0);
    deliver(fr);
    TWT_EQ(deliver_all(), 1);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.op == TW_OP_PUT && c.status == TW_OK);
    TWT_EQ(poll_one(cq, &c), 0);
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 1, [TW_RMA_STAT_PUT_BYTES] = 8, [TW_RMA_STAT_DROPPED] = 1);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 1);
    rig_close();
}

/* A get's reply of the wrong length is dropped and fails the get
 * (TW_ERR_PROTOCOL); nothing is written. */
static void test_get_rep_len(void)
{
    tw_completion_t c;
    frame_t *fr;

    rig_open();
    TWT_EQ(tw_rma_get(rma[0], 1, dst, 16, base, key, cq, NULL), TW_OK);
    fr = pop();
    TWT_CHECK(fr != NULL && q_head == NULL);
    tw_rma_hdr_t rep = {.version = TW_RMA_HDR_VERSION,
                        .type = TW_RMA_GET_REP,
                        .cookie = ((const tw_rma_hdr_t *)fr->bytes)->cookie,
                        .len = 15};
    free(fr);
    inject(1, 0, &rep, src, 15);
    TWT_EQ(deliver_all(), 1);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.op == TW_OP_GET && c.status == TW_ERR_PROTOCOL);
    for (size_t i = 0; i < 16; i++) {
        TWT_CHECK(dst[i] == 0);
    }
    STATS_EQ(0, [TW_RMA_STAT_GETS] = 1, [TW_RMA_STAT_GET_BYTES] = 16, [TW_RMA_STAT_DROPPED] = 1);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 0);
    rig_close();
}

/* Requests the target refuses: wrong key, out of bounds, no region,
 * length not matching the payload. The window is not touched. */
static void test_refused(void)
{
    tw_completion_t c;

    rig_open();
    tw_rma_hdr_t rq = {.version = TW_RMA_HDR_VERSION,
                       .type = TW_RMA_PUT_REQ,
                       .cookie = 1,
                       .region = 1, /* the window, rank 1's first region */
                       .addr = base,
                       .len = 8};
    memset(win, 0x5a, sizeof(win));
    memcpy(&rq.key, key + offsetof(tw_rma_rkey_hdr_t, key), 8); /* the real key ... */
    rq.key ^= 1;                                                /* ... but one bit off */
    inject(0, 1, &rq, src, 8);
    rq.key ^= 1;
    rq.addr = base + sizeof(win) - 4;
    inject(0, 1, &rq, src, 8);
    rq.addr = base - 8;
    inject(0, 1, &rq, src, 8);
    rq.addr = base;
    rq.region = 77;
    inject(0, 1, &rq, src, 8);
    rq.region = 1;
    rq.type = TW_RMA_GET_REQ;
    rq.addr = base + sizeof(win);
    rq.len = 1;
    inject(0, 1, &rq, NULL, 0);
    TWT_EQ(deliver_all(), 10); /* 5 requests, 5 refusals (dropped at 0: no cookie) */
    STATS_EQ(1, [TW_RMA_STAT_REFUSED] = 5);
    STATS_EQ(0, [TW_RMA_STAT_DROPPED] = 5);
    rq.type = TW_RMA_PUT_REQ;
    rq.addr = base;
    rq.len = 8;
    inject(0, 1, &rq, src, 4); /* claims 8, carries 4 */
    TWT_EQ(deliver_all(), 2);
    for (size_t i = 0; i < sizeof(win); i++) {
        TWT_CHECK(win[i] == 0x5a);
    }
    TWT_EQ(poll_one(cq, &c), 0);
    STATS_EQ(1, [TW_RMA_STAT_REFUSED] = 5, [TW_RMA_STAT_DROPPED] = 1);
    STATS_EQ(0, [TW_RMA_STAT_DROPPED] = 6);
    rig_close();
}

/* Replies the transport refuses go out later, from the progress
 * function; a get is served again then. */
static void test_deferred(void)
{
    tw_completion_t c;

    rig_open();
    memcpy(win, src, sizeof(win));
    fakes[1].again = 2;
    TWT_EQ(tw_rma_put(rma[0], 1, src + 1, 8, base, key, cq, NULL), TW_OK);
    TWT_EQ(tw_rma_get(rma[0], 1, dst, 600, base, key, cq, NULL), TW_OK);
    TWT_EQ(deliver_all(), 2); /* both requests; both replies refused */
    TWT_EQ(stat(1, TW_RMA_STAT_DEFERRED), 2);
    TWT_EQ(poll_one(cq, &c), 0);
    TWT_EQ(tw_rma_progress(rma[1]), 2);
    TWT_EQ(tw_rma_progress(rma[1]), 0);
    TWT_EQ(deliver_all(), 2);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.status == TW_OK && c.op == TW_OP_PUT);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.status == TW_OK && c.op == TW_OP_GET && memcmp(dst, win, 600) == 0);
    TWT_CHECK(memcmp(win, src + 1, 8) == 0);
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 1, [TW_RMA_STAT_PUT_BYTES] = 8, [TW_RMA_STAT_GETS] = 1,
             [TW_RMA_STAT_GET_BYTES] = 600);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 2, [TW_RMA_STAT_DEFERRED] = 2);
    rig_close();
}

/* A region deregistered: its key is refused at the target. */
static void test_dereg_key(void)
{
    uint8_t key2[TW_RKEY_MAX];
    uint64_t at = (uint64_t)(uintptr_t)src;
    tw_completion_t c;

    rig_open();
    TWT_EQ(tw_rma_mem_deregister(reg_at_1(src, sizeof(src), key2)), TW_OK);
    TWT_EQ(tw_rma_put(rma[0], 1, dst, 8, at, key2, cq, NULL), TW_OK);
    TWT_EQ(tw_rma_get(rma[0], 1, dst, 8, at, key2, cq, NULL), TW_OK);
    TWT_EQ(deliver_all(), 4);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.op == TW_OP_PUT && c.status == TW_ERR_INVALID);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.op == TW_OP_GET && c.status == TW_ERR_INVALID);
    TWT_EQ(src[0], 3); /* not written */
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 1, [TW_RMA_STAT_PUT_BYTES] = 8, [TW_RMA_STAT_GETS] = 1,
             [TW_RMA_STAT_GET_BYTES] = 8);
    STATS_EQ(1, [TW_RMA_STAT_REFUSED] = 2);
    rig_close();
}

/* Checks at the origin: bounds, owner, a damaged key, a key whose
 * section carries a transport key longer than any, a key length past its
 * sections. Nothing is sent. */
static void test_origin_checks(void)
{
    uint8_t key2[TW_RKEY_MAX];
    tw_rma_rkey_hdr_t kh;
    tw_completion_t c;

    rig_open();
    TWT_EQ(tw_rma_put(rma[0], 1, src, 9, base + sizeof(win) - 8, key, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_rma_put(rma[0], 0, src, 8, base, key, cq, NULL), TW_ERR_INVALID);
    memcpy(key2, key, sizeof(key2));
    key2[0] ^= 1;
    TWT_EQ(tw_rma_get(rma[0], 1, dst, 8, base, key2, cq, NULL), TW_ERR_INVALID);
    memcpy(key2, key, sizeof(kh));
    memcpy(&kh, key2, sizeof(kh));
    TWT_EQ(kh.nsect, 0); /* the fake transport registers nothing */
    key2[sizeof(kh)] = 4;
    memcpy(key2 + sizeof(kh) + 1, "fake", 4);
    key2[sizeof(kh) + 5] = TW_TL_KEY_MAX + 1;
    memset(key2 + sizeof(kh) + 6, 0, TW_TL_KEY_MAX + 1);
    kh.nsect = 1;
    kh.len = (uint16_t)(sizeof(kh) + 6 + TW_TL_KEY_MAX + 1);
    memcpy(key2, &kh, sizeof(kh));
    TWT_EQ(tw_rma_put(rma[0], 1, src, 8, base, key2, cq, NULL), TW_ERR_INVALID);
    kh.nsect = 0;
    kh.len = sizeof(kh) + 1; /* a length past its (no) sections */
    memcpy(key2, &kh, sizeof(kh));
    TWT_EQ(tw_rma_put(rma[0], 1, src, 8, base, key2, cq, NULL), TW_ERR_INVALID);
    TWT_CHECK(q_head == NULL);
    TWT_EQ(poll_one(cq, &c), 0);
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 0);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 0);
    rig_close();
}

static atomic_int dereg_done;

static void *dereg_main(void *arg)
{
    TWT_EQ(tw_rma_mem_deregister(arg), TW_OK);
    atomic_store(&dereg_done, 1);
    return NULL;
}

/* Deregistration waits for a zero-copy reply still reading the region,
 * and frees it once the transport let go. */
static void test_dereg_wait(void)
{
    uint8_t key2[TW_RKEY_MAX];
    tw_completion_t c;
    tw_mr_t *mr2;
    pthread_t th;

    rig_open();
    mr2 = reg_at_1(src, sizeof(src), key2);
    TWT_EQ(tw_rma_get(rma[0], 1, dst, 4000, (uint64_t)(uintptr_t)src, key2, cq, NULL), TW_OK);
    deliver(pop()); /* the request; its reply (zero-copy, from the region) waits */
    TWT_CHECK(q_head != NULL && q_head->comp != NULL);
    atomic_store(&dereg_done, 0);
    TWT_EQ(pthread_create(&th, NULL, dereg_main, mr2), 0);
    usleep(50 * 1000);
    TWT_EQ(atomic_load(&dereg_done), 0); /* still waiting for the transport */
    TWT_EQ(deliver_all(), 1);
    TWT_EQ(pthread_join(th, NULL), 0);
    TWT_EQ(atomic_load(&dereg_done), 1);
    TWT_EQ(poll_one(cq, &c), 1);
    TWT_CHECK(c.op == TW_OP_GET && c.status == TW_OK && memcmp(dst, src, 4000) == 0);
    STATS_EQ(0, [TW_RMA_STAT_GETS] = 1, [TW_RMA_STAT_GET_BYTES] = 4000);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 1);
    rig_close();
}

/* The peer fails with a put (zero-copy), a get and a flush waiting; its
 * late replies are stale. */
static void test_peer_down(void)
{
    tw_completion_t c;
    int failed = 0;

    rig_open();
    TWT_EQ(tw_rma_put(rma[0], 1, src, 2000, base, key, cq, NULL), TW_OK);
    TWT_EQ(tw_rma_get(rma[0], 1, dst, 8, base, key, cq, NULL), TW_OK);
    TWT_EQ(tw_rma_flush(rma[0], 1, cq, NULL), TW_OK);
    deliver(pop()); /* the put's request: its send completes, the bytes land */
    deliver(pop()); /* the get's */
    atomic_store(&down[0][1], 1);
    tw_rma_peer_down(rma[0], 1);
    while (poll_one(cq, &c) == 1) {
        TWT_CHECK(c.status == TW_ERR_PEER_FAILED);
        failed++;
    }
    TWT_EQ(failed, 3);
    TWT_EQ(tw_rma_put(rma[0], 1, src, 8, base, key, cq, NULL), TW_ERR_PEER_FAILED);
    TWT_EQ(tw_rma_flush(rma[0], 1, cq, NULL), TW_ERR_PEER_FAILED);
    TWT_EQ(stat(0, TW_RMA_STAT_DROPPED), 0);
    TWT_EQ(deliver_all(), 2); /* the replies, now stale */
    TWT_EQ(poll_one(cq, &c), 0);
    STATS_EQ(0, [TW_RMA_STAT_PUTS] = 1, [TW_RMA_STAT_PUT_BYTES] = 2000, [TW_RMA_STAT_GETS] = 1,
             [TW_RMA_STAT_GET_BYTES] = 8, [TW_RMA_STAT_FLUSHES] = 1, [TW_RMA_STAT_DROPPED] = 2);
    STATS_EQ(1, [TW_RMA_STAT_SERVED] = 2);
    rig_close();
}

/* Finalize with the region still registered: released, then its handle
 * is only freed. */
static void test_finalize(void)
{
    tw_mr_t *held;
    size_t klen = sizeof(key);

    rig_open();
    tw_rma_release_regions(rma[1]);
    TWT_EQ(tw_rma_mr_pack(mr, key, &klen), TW_ERR_INVALID);
    held = mr;
    mr = NULL;
    rig_close();
    TWT_EQ(tw_rma_mem_deregister(held), TW_OK);
}

static const twt_case_t cases[] = {
    {"put", test_put},
    {"get", test_get},
    {"flush", test_flush},
    {"forged_replies", test_forged_replies},
    {"dup_ack", test_dup_ack},
    {"get_rep_len", test_get_rep_len},
    {"refused", test_refused},
    {"deferred", test_deferred},
    {"dereg_key", test_dereg_key},
    {"origin_checks", test_origin_checks},
    {"dereg_wait", test_dereg_wait},
    {"peer_down", test_peer_down},
    {"finalize", test_finalize},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
