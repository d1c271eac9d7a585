/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * route as a layer, in one process: four ranks on two nodes (0 1 | 2 3;
 * the leaders are 0 and 2), each with a fake iface (path 0 of one wire,
 * tests/common/tw_fake_tl.h) and route opened beside it (wrap_open: it
 * taps the iface). Frames are forged and put on the wire
 * (twt_fake_inject), so they come through the fake iface's receive path
 * and the tap, in the order the test chooses; a hook records every route
 * frame the wire delivers. One ctest entry per case (unit/route.cmake):
 *
 *   order        numbered frames go up in their order whatever order they
 *                came in (the early ones held), per sender; unnumbered
 *                ones go up as they come;
 *   frags        fragments rebuilt into one message (numbered ones out of
 *                order, unnumbered ones in order), two senders at once;
 *   forward      a leader passes frames on: to a rank of its node, to the
 *                other leader, through both leaders; hops counted, the
 *                header sealed again; other am ids go to the layer above
 *                the transport;
 *   send         route's am_short to a rank of another node goes through
 *                both leaders, numbered; a rank of our node is not route's;
 *   not_passed   frames a rank must not pass on (hops spent, not a
 *                leader, back where it came from): dropped and counted;
 *   down         a DOWN from our leader reports the rank up once, with
 *                how it went; frames from it are dropped after;
 *   leader_down  a leader hears a DOWN from another leader and tells its
 *                node; a rank of its node lost goes to the other leaders
 *                and on to their ranks, once;
 *   leader_lost  our leader lost: every rank of other nodes reported once;
 *                a path down for now (TW_ERR_TRANSPORT) changes nothing;
 *   malformed    a damaged header (crc_failures), malformed frames, a
 *                fragment out of its message, a stale number: dropped and
 *                counted; the layer goes on.
 */
#include <string.h>

#include "routing/tw_route.h"
#include "routing/tw_route_proto.h"
#include "tw_fake_tl.h"
#include "tw_test.h"

#define NRANKS  4
#define UHDR    16 /* upper header bytes: the message's index, then a pattern */
#define AM_UP   7  /* the upper layer's am id */
#define MAXUP   16
#define MAXSEEN 32

static const int node_of[NRANKS] = {0, 0, 1, 1};
static const tw_tl_attr_t wire_attr = {.max_short = 8192, .max_hdr = 1024, .max_zcopy = 0};

enum { F_FIRST = TW_ROUTE_F_FIRST, F_LAST = TW_ROUTE_F_LAST, F_SEQ = TW_ROUTE_F_SEQ };
enum { F_ONE = F_FIRST | F_LAST };

/* A message route handed up. */
typedef struct up_msg {
    int src;
    uint8_t am_id;
    uint32_t idx; /* from its upper header */
    size_t hdr_len, len;
    bool intact; /* upper header and payload are what message idx holds */
} up_msg_t;

typedef struct side {
    int rank;
    tw_pe_t *pe;
    tw_tl_iface_t *tl;    /* the fake transport */
    tw_tl_iface_t *route; /* beside it */
    up_msg_t up[MAXUP];
    unsigned nup;
    unsigned downs[NRANKS]; /* route's peer_down, per rank */
    tw_status_t down_why[NRANKS];
    unsigned tl_recv;  /* other am ids, to the layer above the transport */
    unsigned tl_downs; /* the transport's peer_down, to the layer above it */
} side_t;

/* A route frame the wire delivered. */
typedef struct seen {
    int from, to;
    tw_route_hdr_t h;
    size_t hdr_len, len;
} seen_t;

static struct {
    twt_fake_t wire;
    side_t s[NRANKS];
    seen_t seen[MAXSEEN];
    unsigned nseen;
    unsigned char msg[16384]; /* a message's payload (twt_fill of its index) */
} rig;

/* ---- the rig ------------------------------------------------------------- */

static void uhdr_fill(unsigned char *u, uint32_t idx)
{
    memcpy(u, &idx, sizeof(idx));
    for (size_t i = sizeof(idx); i < UHDR; i++) {
        u[i] = (unsigned char)(0xc0 + i + idx);
    }
}

static void up_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    side_t *s = arg;
    up_msg_t *m = &s->up[s->nup];
    unsigned char want[UHDR];

    TWT_CHECKF(s->nup < MAXUP, "rank %d: more messages up than the test sends", s->rank);
    s->nup++;
    *m = (up_msg_t){.src = src, .am_id = am_id, .hdr_len = hdr_len, .len = len};
    if (hdr_len == UHDR) {
        memcpy(&m->idx, hdr, sizeof(m->idx));
        uhdr_fill(want, m->idx);
        m->intact = memcmp(hdr, want, UHDR) == 0 && twt_verify(data, len, m->idx);
    }
}

static void up_down(void *arg, int peer, tw_status_t why)
{
    side_t *s = arg;

    TWT_CHECK(peer >= 0 && peer < NRANKS);
    s->downs[peer]++;
    s->down_why[peer] = why;
}

static void tl_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    (void)src, (void)am_id, (void)hdr, (void)hdr_len, (void)data, (void)len;
    ((side_t *)arg)->tl_recv++;
}

static void tl_down(void *arg, int peer, tw_status_t why)
{
    (void)peer, (void)why;
    ((side_t *)arg)->tl_downs++;
}

static twt_fake_fate_t record(void *arg, twt_fake_frame_t *f)
{
    (void)arg;
    if (f->am_id == TW_ROUTE_AM && f->hdr_len >= sizeof(tw_route_hdr_t)) {
        TWT_CHECK(rig.nseen < MAXSEEN);
        seen_t *e = &rig.seen[rig.nseen++];
        *e = (seen_t){.from = f->src, .to = f->dst, .hdr_len = f->hdr_len, .len = f->len};
        memcpy(&e->h, f->bytes, sizeof(e->h));
    }
    return TWT_FAKE_PASS;
}

static void rig_open(const char *name)
{
    printf("  %s\n", name);
    fflush(stdout);
    memset(&rig, 0, sizeof(rig));
    twt_fake_init(&rig.wire, NRANKS, &wire_attr);
    rig.wire.on_deliver = record;
    for (int r = 0; r < NRANKS; r++) {
        side_t *s = &rig.s[r];
        tw_pe_params_t pp = {.name = "route", .thread = false};
        s->rank = r;
        TWT_CHECK(tw_pe_create(&pp, &s->pe) == TW_OK);
        tw_tl_params_t tp = {.rank = r,
                             .size = NRANKS,
                             .pe = s->pe,
                             .recv = tl_recv,
                             .recv_arg = s,
                             .peer_down = tl_down,
                             .peer_down_arg = s,
                             .node_of = node_of};
        TWT_CHECK(twt_fake_open(&rig.wire, 0, &tp, &s->tl) == TW_OK);
        tw_tl_params_t rp = tp;
        rp.recv = up_recv;
        rp.peer_down = up_down;
        TWT_EQ(tw_route_ops.wrap_open(&s->tl, 1, &rp, &s->route), TW_OK);
        TWT_CHECK(s->tl->tap != NULL && s->tl->tap->am_id == TW_ROUTE_AM);
        TWT_EQ(s->route->attr.max_short, wire_attr.max_short - sizeof(tw_route_hdr_t));
    }
}

static void rig_close(void)
{
    for (int r = 0; r < NRANKS; r++) {
        side_t *s = &rig.s[r];
        tw_tl_close(s->route);
        tw_tl_close(s->tl); /* lets go of the tap, and of route */
        tw_pe_destroy(s->pe);
    }
    twt_fake_cleanup(&rig.wire);
}

static uint64_t route_stat(int r, unsigned id)
{
    return tw_stats_read(rig.s[r].route->stats, id);
}

/* A DATA frame: part [off, off + len) of message @p idx (msg_len bytes). */
typedef struct fr {
    int from, to; /* on the wire */
    int src, dst; /* in the route header */
    uint8_t hops, flags;
    uint32_t seq, msg_len, off, len, idx;
} fr_t;

/* The frame's transport header (route's, then the upper one: @p buf),
 * sealed; returns its length. */
static size_t make(const fr_t *f, unsigned char *buf)
{
    tw_route_hdr_t h = {.version = TW_ROUTE_PROTO_VERSION,
                        .type = TW_ROUTE_T_DATA,
                        .am_id = AM_UP,
                        .hops = f->hops,
                        .hdr_len = (f->flags & F_FIRST) ? UHDR : 0,
                        .flags = f->flags,
                        .src = f->src,
                        .dst = f->dst,
                        .msg_len = f->msg_len,
                        .offset = f->off,
                        .seq = f->seq};

    tw_route_seal(&h);
    memcpy(buf, &h, sizeof(h));
    uhdr_fill(buf + sizeof(h), f->idx);
    twt_fill(rig.msg, f->msg_len, f->idx);
    return sizeof(h) + h.hdr_len;
}

static void inject_raw(const fr_t *f, const unsigned char *hdr, size_t hdr_len)
{
    TWT_EQ(twt_fake_inject(&rig.wire, f->from, f->to, 0, TW_ROUTE_AM, hdr, hdr_len,
                           rig.msg + f->off, f->len),
           TW_OK);
}

static void inject(fr_t f)
{
    unsigned char buf[sizeof(tw_route_hdr_t) + UHDR];

    inject_raw(&f, buf, make(&f, buf));
}

/* A whole message in one frame, numbered @p seq (or none: flags 0). */
static fr_t one(int from, int to, int src, int dst, uint8_t seq_flag, uint32_t seq, uint32_t idx)
{
    uint32_t len = 100 + idx;

    return (fr_t){.from = from,
                  .to = to,
                  .src = src,
                  .dst = dst,
                  .hops = 0,
                  .flags = (uint8_t)(F_ONE | seq_flag),
                  .seq = seq,
                  .msg_len = len,
                  .len = len,
                  .idx = idx};
}

static void inject_down(int from, int to, int gone, uint8_t how)
{
    tw_route_hdr_t d = {.version = TW_ROUTE_PROTO_VERSION,
                        .type = TW_ROUTE_T_DOWN,
                        .am_id = how,
                        .src = from,
                        .dst = gone};

    tw_route_seal(&d);
    TWT_EQ(twt_fake_inject(&rig.wire, from, to, 0, TW_ROUTE_AM, &d, sizeof(d), NULL, 0), TW_OK);
}

/* Message k handed up by @p r: from @p src, index @p idx, intact. */
static void check_up(int r, unsigned k, int src, uint32_t idx, size_t len)
{
    const side_t *s = &rig.s[r];

    TWT_CHECKF(k < s->nup, "rank %d: message %u not handed up (%u were)", r, k, s->nup);
    const up_msg_t *m = &s->up[k];
    TWT_CHECKF(m->src == src && m->idx == idx && m->am_id == AM_UP && m->hdr_len == UHDR &&
                   m->len == len && m->intact,
               "rank %d message %u: src %d idx %u am %u hdr %zu len %zu intact %d; want src %d "
               "idx %u len %zu",
               r, k, m->src, m->idx, m->am_id, m->hdr_len, m->len, m->intact, src, idx, len);
}

/* The @p n-th route frame the wire delivered from @p from to @p to. */
static const seen_t *seen(int from, int to, unsigned n)
{
    for (unsigned i = 0; i < rig.nseen; i++) {
        if (rig.seen[i].from == from && rig.seen[i].to == to && n-- == 0) {
            return &rig.seen[i];
        }
    }
    return NULL;
}

static unsigned seen_count(int from, int to)
{
    unsigned n = 0;

    while (seen(from, to, n) != NULL) {
        n++;
    }
    return n;
}

/* A frame passed on: as @p in but one hop more, sealed again. */
static void check_passed(const seen_t *in, const seen_t *out)
{
    TWT_CHECK(in != NULL && out != NULL);
    tw_route_hdr_t a = in->h, b = out->h;
    tw_route_seal(&b);
    TWT_EQ(b.crc, out->h.crc);
    TWT_EQ(b.hops, a.hops + 1);
    a.hops = b.hops = 0;
    a.crc = b.crc = 0;
    TWT_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    TWT_EQ(out->hdr_len, in->hdr_len);
    TWT_EQ(out->len, in->len);
}

/* ---- in order ------------------------------------------------------------ */

static void case_order(void)
{
    static const uint32_t order[] = {3, 1, 0, 5, 2, 4};

    rig_open("order");
    /* Rank 0's messages 0..5 to rank 3, numbered, coming from rank 3's
     * leader in another order: the early ones wait. */
    for (size_t i = 0; i < TWT_ARRAY_SIZE(order); i++) {
        fr_t f = one(2, 3, 0, 3, F_SEQ, order[i], order[i]);
        f.hops = 2;
        inject(f);
    }
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 6);
    for (unsigned k = 0; k < 6; k++) {
        check_up(3, k, 0, k, 100 + k);
    }
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_HELD), 3); /* 3, 1 and 5 came early */
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DELIVERED), 6);
    /* Per sender: rank 0's 7 waits for its 6; rank 1's frames, and an
     * unnumbered one (rel above), go up meanwhile. */
    inject(one(2, 3, 0, 3, F_SEQ, 7, 7));
    inject(one(2, 3, 1, 3, F_SEQ, 0, 40));
    inject(one(2, 3, 1, 3, 0, 0, 41));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 8);
    check_up(3, 6, 1, 40, 140);
    check_up(3, 7, 1, 41, 141);
    inject(one(2, 3, 0, 3, F_SEQ, 6, 6));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 10);
    check_up(3, 8, 0, 6, 106);
    check_up(3, 9, 0, 7, 107);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_HELD), 4);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 0);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_CRC_FAILURES), 0);
    /* Nothing passed on, nothing else handed up anywhere. */
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_FORWARDED), 0);
    TWT_EQ(rig.s[3].tl_recv, 0);
    TWT_EQ(rig.nseen, 10);
    rig_close();
}

/* A numbered frame that comes twice while held: the copy is dropped
 * (counted), and the sender's later frames still go up. */
static void case_dup_held(void)
{
    static const uint32_t order[] = {1, 1, 0, 3, 2};

    rig_open("dup_held");
    for (size_t i = 0; i < TWT_ARRAY_SIZE(order); i++) {
        fr_t f = one(2, 3, 0, 3, F_SEQ, order[i], order[i]);
        f.hops = 2;
        inject(f);
    }
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 4);
    for (unsigned k = 0; k < 4; k++) {
        check_up(3, k, 0, k, 100 + k);
    }
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 1);
    inject(one(2, 3, 0, 3, F_SEQ, 4, 4));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 5);
    check_up(3, 4, 0, 4, 104);
    rig_close();
}

/* ---- fragments ------------------------------------------------------------- */

static void case_frags(void)
{
    /* Rank 0's message 20 (10000 bytes) in three numbered fragments, the
     * last first; rank 1's message 21 (5000 bytes) in two unnumbered ones,
     * in order, around them. */
    fr_t a = {.from = 2, .to = 3, .src = 0, .dst = 3, .hops = 2, .msg_len = 10000, .idx = 20};
    fr_t b = {.from = 2, .to = 3, .src = 1, .dst = 3, .hops = 2, .msg_len = 5000, .idx = 21};

    rig_open("frags");
    a.flags = F_LAST | F_SEQ, a.seq = 2, a.off = 8000 - UHDR, a.len = 2000 + UHDR;
    inject(a);
    b.flags = F_FIRST, b.off = 0, b.len = 3000 - UHDR;
    inject(b);
    a.flags = F_FIRST | F_SEQ, a.seq = 0, a.off = 0, a.len = 4000 - UHDR;
    inject(a);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 0); /* 1 is missing; b has a fragment to come */
    a.flags = F_SEQ, a.seq = 1, a.off = 4000 - UHDR, a.len = 4000;
    inject(a);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 1);
    check_up(3, 0, 0, 20, 10000);
    b.flags = F_LAST, b.off = 3000 - UHDR, b.len = 2000 + UHDR;
    inject(b);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 2);
    check_up(3, 1, 1, 21, 5000);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_HELD), 1);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DELIVERED), 2);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 0);
    /* The next message of rank 0 starts afresh. */
    inject(one(2, 3, 0, 3, F_SEQ, 3, 22));
    twt_fake_pump(&rig.wire);
    check_up(3, 2, 0, 22, 122);
    rig_close();
}

/* ---- leaders pass frames on ------------------------------------------------ */

static void case_forward(void)
{
    fr_t f;

    rig_open("forward");
    /* From the other leader, for a rank of our node. */
    f = one(2, 0, 3, 1, F_SEQ, 0, 30);
    f.hops = 1;
    inject(f);
    twt_fake_pump(&rig.wire);
    check_passed(seen(2, 0, 0), seen(0, 1, 0));
    TWT_EQ(seen(0, 1, 0)->h.hops, 2);
    TWT_EQ(rig.s[1].nup, 1);
    check_up(1, 0, 3, 30, 130);
    TWT_EQ(rig.s[0].nup, 0);
    TWT_EQ(route_stat(0, TW_ROUTE_STAT_FORWARDED), 1);
    TWT_EQ(route_stat(0, TW_ROUTE_STAT_FWD_BYTES), 130);
    /* From a rank of our node, for the other node's leader. */
    inject(one(1, 0, 1, 2, F_SEQ, 0, 31));
    twt_fake_pump(&rig.wire);
    check_passed(seen(1, 0, 0), seen(0, 2, 0));
    check_up(2, 0, 1, 31, 131);
    /* For a rank of the other node: through both leaders. */
    inject(one(1, 0, 1, 3, F_SEQ, 0, 32));
    twt_fake_pump(&rig.wire);
    check_passed(seen(1, 0, 1), seen(0, 2, 1));
    check_passed(seen(0, 2, 1), seen(2, 3, 0));
    TWT_EQ(seen(2, 3, 0)->h.hops, 2);
    check_up(3, 0, 1, 32, 132);
    TWT_EQ(route_stat(0, TW_ROUTE_STAT_FORWARDED), 3);
    TWT_EQ(route_stat(2, TW_ROUTE_STAT_FORWARDED), 1);
    TWT_EQ(rig.s[0].nup + rig.s[2].nup + rig.s[3].nup + rig.s[1].nup, 3);
    /* A fragment is passed on as it is: its upper header rides along. */
    f = (fr_t){.from = 1,
               .to = 0,
               .src = 1,
               .dst = 3,
               .flags = F_FIRST | F_SEQ,
               .seq = 1,
               .msg_len = 6000,
               .off = 0,
               .len = 3000,
               .idx = 33};
    inject(f);
    f.flags = F_LAST | F_SEQ, f.seq = 2, f.off = 3000;
    inject(f);
    twt_fake_pump(&rig.wire);
    check_passed(seen(0, 2, 2), seen(2, 3, 1));
    TWT_EQ(seen(2, 3, 1)->hdr_len, sizeof(tw_route_hdr_t) + UHDR);
    check_up(3, 1, 1, 33, 6000);
    /* Other am ids are not route's: the layer above the transport. */
    TWT_EQ(twt_fake_inject(&rig.wire, 2, 0, 0, 5, "x", 1, NULL, 0), TW_OK);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[0].tl_recv, 1);
    TWT_EQ(route_stat(0, TW_ROUTE_STAT_DROPPED) + route_stat(2, TW_ROUTE_STAT_DROPPED), 0);
    rig_close();
}

static void case_send(void)
{
    unsigned char u[UHDR];

    rig_open("send");
    /* route reaches the ranks of other nodes only. */
    TWT_CHECK(tw_tl_reachable(rig.s[1].route, 2) && tw_tl_reachable(rig.s[1].route, 3));
    TWT_CHECK(!tw_tl_reachable(rig.s[1].route, 0) && !tw_tl_reachable(rig.s[1].route, 1));
    uhdr_fill(u, 50);
    twt_fill(rig.msg, 500, 50);
    TWT_EQ(tw_tl_am_short(rig.s[1].route, 0, AM_UP, u, UHDR, rig.msg, 500), TW_ERR_UNREACHABLE);
    TWT_EQ(tw_tl_am_short(rig.s[1].route, 3, AM_UP, u, UHDR, rig.msg, 500), TW_OK);
    uhdr_fill(u, 51);
    twt_fill(rig.msg, 600, 51);
    TWT_EQ(tw_tl_am_short(rig.s[1].route, 3, AM_UP, u, UHDR, rig.msg, 600), TW_OK);
    TWT_EQ(rig.s[1].route->attr.max_short, 8192 - sizeof(tw_route_hdr_t));
    twt_fake_pump(&rig.wire);
    /* 1 -> its leader 0 -> leader 2 -> 3, numbered 0 and 1. */
    for (unsigned k = 0; k < 2; k++) {
        const seen_t *s = seen(1, 0, k);
        TWT_CHECK(s != NULL);
        TWT_EQ(s->h.src, 1);
        TWT_EQ(s->h.dst, 3);
        TWT_EQ(s->h.hops, 0);
        TWT_EQ(s->h.flags, F_ONE | F_SEQ);
        TWT_EQ(s->h.seq, k);
        check_passed(s, seen(0, 2, k));
        check_passed(seen(0, 2, k), seen(2, 3, k));
    }
    TWT_EQ(rig.s[3].nup, 2);
    check_up(3, 0, 1, 50, 500);
    check_up(3, 1, 1, 51, 600);
    TWT_EQ(route_stat(1, TW_ROUTE_STAT_SENT), 2);
    TWT_EQ(route_stat(1, TW_ROUTE_STAT_SENT_BYTES), 1100);
    rig_close();
}

static void case_not_passed(void)
{
    fr_t f;

    rig_open("not_passed");
    /* Hops spent. */
    f = one(2, 0, 3, 1, F_SEQ, 0, 60);
    f.hops = TW_ROUTE_MAX_HOPS;
    inject(f);
    /* A rank that is no leader. */
    inject(one(0, 1, 0, 3, F_SEQ, 0, 61));
    /* Back to where it came from. */
    inject(one(2, 0, 1, 3, F_SEQ, 0, 62));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.nseen, 3); /* nothing went on */
    TWT_EQ(route_stat(0, TW_ROUTE_STAT_DROPPED), 2);
    TWT_EQ(route_stat(1, TW_ROUTE_STAT_DROPPED), 1);
    TWT_EQ(route_stat(0, TW_ROUTE_STAT_FORWARDED) + route_stat(1, TW_ROUTE_STAT_FORWARDED), 0);
    for (int r = 0; r < NRANKS; r++) {
        TWT_EQ(rig.s[r].nup, 0);
    }
    rig_close();
}

/* ---- DOWN ------------------------------------------------------------------ */

static void case_down(void)
{
    rig_open("down");
    /* Rank 3 hears from its leader that rank 0 failed: reported once. */
    inject_down(2, 3, 0, TW_ROUTE_DOWN_FAILED);
    inject_down(2, 3, 0, TW_ROUTE_DOWN_FAILED);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].downs[0], 1);
    TWT_EQ(rig.s[3].down_why[0], TW_ERR_PEER_FAILED);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DOWNS), 1);
    /* Rank 1 left. With no rel above, that is not reported up (the news
     * may overtake its last frames, which still go up), but sends to it
     * fail from now on. */
    inject_down(2, 3, 1, TW_ROUTE_DOWN_LEFT);
    /* A rank of our own node is not route's to report. */
    inject_down(2, 3, 2, TW_ROUTE_DOWN_FAILED);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].downs[1], 0);
    TWT_EQ(rig.s[3].downs[2] + rig.s[3].downs[3], 0);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DOWNS), 1);
    TWT_EQ(tw_tl_am_short(rig.s[3].route, 1, AM_UP, rig.msg, UHDR, rig.msg, 8), TW_ERR_PEER_FAILED);
    inject(one(2, 3, 1, 3, F_SEQ, 0, 71));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 1);
    check_up(3, 0, 1, 71, 171);
    /* A non-leader passes no DOWN on; nothing of the failed rank goes up. */
    TWT_EQ(seen_count(3, 2), 0);
    inject(one(2, 3, 0, 3, F_SEQ, 0, 70));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 1);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 1);
    /* Nobody else heard of it. */
    for (int r = 0; r < 3; r++) {
        for (int x = 0; x < NRANKS; x++) {
            TWT_EQ(rig.s[r].downs[x], 0);
        }
    }
    rig_close();
}

static void case_leader_down(void)
{
    const seen_t *d;

    rig_open("leader_down");
    /* Leader 0 hears from leader 2 that rank 3 failed: it tells rank 1,
     * and both report it once. */
    inject_down(2, 0, 3, TW_ROUTE_DOWN_FAILED);
    twt_fake_pump(&rig.wire);
    d = seen(0, 1, 0);
    TWT_CHECK(d != NULL);
    TWT_EQ(d->h.type, TW_ROUTE_T_DOWN);
    TWT_EQ(d->h.dst, 3);
    TWT_EQ(d->h.am_id, TW_ROUTE_DOWN_FAILED);
    TWT_EQ(rig.s[0].downs[3], 1);
    TWT_EQ(rig.s[1].downs[3], 1);
    TWT_EQ(rig.s[1].down_why[3], TW_ERR_PEER_FAILED);
    TWT_EQ(seen_count(0, 2) + seen_count(0, 3), 0);
    /* Leader 0's transport loses rank 1: the layer above it hears first;
     * route tells leader 2, which tells rank 3; rank 1 is not route's to
     * report on its own node. */
    twt_fake_report_down(&rig.wire, 0, 0, 1, TW_ERR_PEER_FAILED);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[0].tl_downs, 1);
    TWT_EQ(rig.s[0].downs[1], 0);
    d = seen(0, 2, 0);
    TWT_CHECK(d != NULL);
    TWT_EQ(d->h.type, TW_ROUTE_T_DOWN);
    TWT_EQ(d->h.dst, 1);
    TWT_EQ(rig.s[2].downs[1], 1);
    TWT_CHECK(seen(2, 3, 0) != NULL && seen(2, 3, 0)->h.type == TW_ROUTE_T_DOWN);
    TWT_EQ(rig.s[3].downs[1], 1);
    /* Once. */
    unsigned n = rig.nseen;
    twt_fake_report_down(&rig.wire, 0, 0, 1, TW_ERR_PEER_FAILED);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.nseen, n);
    TWT_EQ(rig.s[0].tl_downs, 2);
    TWT_EQ(rig.s[2].downs[1] + rig.s[3].downs[1], 2);
    rig_close();
}

static void case_leader_lost(void)
{
    rig_open("leader_lost");
    /* A path down for now: nothing. */
    twt_fake_report_down(&rig.wire, 3, 0, 2, TW_ERR_TRANSPORT);
    TWT_EQ(rig.s[3].tl_downs, 1);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DOWNS), 0);
    /* Rank 3's leader failed: the ranks of node 0 are gone for it, once. */
    twt_fake_report_down(&rig.wire, 3, 0, 2, TW_ERR_PEER_FAILED);
    twt_fake_report_down(&rig.wire, 3, 0, 2, TW_ERR_PEER_FAILED);
    for (int x = 0; x < 2; x++) {
        TWT_EQ(rig.s[3].downs[x], 1);
        TWT_EQ(rig.s[3].down_why[x], TW_ERR_PEER_FAILED);
    }
    TWT_EQ(rig.s[3].downs[2] + rig.s[3].downs[3], 0);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DOWNS), 2);
    TWT_EQ(twt_fake_pump(&rig.wire), 0); /* it tells nobody */
    rig_close();
}

/* ---- malformed --------------------------------------------------------------- */

static void case_malformed(void)
{
    unsigned char buf[sizeof(tw_route_hdr_t) + UHDR];
    tw_route_hdr_t *h = (tw_route_hdr_t *)(void *)buf;
    fr_t f;
    size_t n;

    rig_open("malformed");
    /* A bit of the header damaged on the way: counted, not logged. */
    f = one(2, 3, 0, 3, F_SEQ, 0, 80);
    n = make(&f, buf);
    buf[9] ^= 0x10;
    inject_raw(&f, buf, n);
    twt_fake_pump(&rig.wire);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_CRC_FAILURES), 1);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 0);
    /* Sealed but malformed. */
    n = make(&f, buf);
    h->reserved = 1;
    tw_route_seal(buf);
    inject_raw(&f, buf, n);
    twt_fake_pump(&rig.wire);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 1);
    /* A middle fragment with no message under way (unnumbered). */
    f = (fr_t){
        .from = 2, .to = 3, .src = 1, .dst = 3, .msg_len = 9000, .off = 4000, .len = 10, .idx = 81};
    inject(f);
    twt_fake_pump(&rig.wire);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 2);
    TWT_EQ(rig.s[3].nup, 0);
    /* The frame itself, then again: the second is stale. */
    f = one(2, 3, 0, 3, F_SEQ, 0, 80);
    inject(f);
    inject(f);
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 1);
    check_up(3, 0, 0, 80, 180);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 3);
    /* A frame that claims to come from this rank. */
    inject(one(2, 3, 3, 3, F_SEQ, 0, 82));
    twt_fake_pump(&rig.wire);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DROPPED), 4);
    /* The layer goes on. */
    inject(one(2, 3, 0, 3, F_SEQ, 1, 83));
    twt_fake_pump(&rig.wire);
    TWT_EQ(rig.s[3].nup, 2);
    check_up(3, 1, 0, 83, 183);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_CRC_FAILURES), 1);
    TWT_EQ(route_stat(3, TW_ROUTE_STAT_DELIVERED), 2);
    rig_close();
}

static const twt_case_t cases[] = {
    {"order", case_order},
    {"dup_held", case_dup_held},
    {"frags", case_frags},
    {"forward", case_forward},
    {"send", case_send},
    {"not_passed", case_not_passed},
    {"down", case_down},
    {"leader_down", case_leader_down},
    {"leader_lost", case_leader_lost},
    {"malformed", case_malformed},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
