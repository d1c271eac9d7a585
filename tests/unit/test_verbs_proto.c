/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport's pure parts, on any host (no RDMA device needed).
 * One ctest entry per case (unit/verbs.cmake):
 *
 *   frames      frame pack/parse: round trips, every rejection, the limits;
 *   conn        connection messages: round trips, every rejection;
 *   conn_stale  generations: which connection messages belong to a
 *               connection that is over;
 *   addr        the address blob: round trip, every rejection;
 *   rkey_key    the remote key; the job key and the qkey made of it;
 *   credits     send-queue credits;
 *   rcache      the registration cache: lookups, overlapping regions,
 *               invalidation on deregistration while an operation still
 *               holds a region;
 *   query       the transport reports a missing device with a reason
 *               instead of failing anything else.
 */
#include <stdint.h>
#include <string.h>

#include "core/tw_siphash.h"
#include "transports/base/tw_tl.h"
#include "transports/verbs/tw_verbs.h"
#include "transports/verbs/tw_verbs_proto.h"
#include "transports/verbs/tw_verbs_rcache.h"
#include "tw_test.h"

static const uint8_t key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void test_frames(void)
{
    uint8_t buf[256];
    tw_verbs_frame_t f = {.type = TW_VERBS_F_AM, .am_id = 7, .hdr_len = 5, .len = 11}, g;
    const char *why = NULL;
    size_t n = tw_verbs_frame_pack(&f, buf);

    TWT_EQ(n, (size_t)TW_VERBS_FRAME_LEN);
    memcpy(buf + n, "hhhhh", 5);
    memcpy(buf + n + 5, "ppppppppppp", 11);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 64, 1u << 20, &g, &why), TW_OK);
    TWT_EQ(g.type, TW_VERBS_F_AM);
    TWT_EQ(g.am_id, 7);
    TWT_EQ(g.hdr_len, 5);
    TWT_EQ(g.len, 11u);
    TWT_EQ(g.hdr_off, (size_t)TW_VERBS_FRAME_LEN);
    TWT_EQ(g.data_off, (size_t)TW_VERBS_FRAME_LEN + 5);
    TWT_EQ(g.total, n + 16);
    /* A frame must lie within the bytes received; more may follow it. */
    TWT_EQ(tw_verbs_frame_parse(buf, n + 15, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 17, 64, 1u << 20, &g, &why), TW_OK);
    TWT_EQ(g.total, n + 16); /* the 17th byte starts the next frame, which is bad: */
    TWT_EQ(tw_verbs_frame_parse(buf + g.total, 1, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_frame_parse(buf, n - 1, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 4, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    /* A huge len must not wrap the sum. */
    f.len = UINT64_MAX - 4;
    tw_verbs_frame_pack(&f, buf);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    /* Version, type, reserved bits. */
    f.len = 11;
    tw_verbs_frame_pack(&f, buf);
    buf[0] = 9;
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    buf[0] = TW_VERBS_VERSION;
    buf[1] = 0;
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    buf[1] = TW_VERBS_F_TYPE_MAX;
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    buf[1] = TW_VERBS_F_AM;
    buf[3] = 1;
    TWT_EQ(tw_verbs_frame_parse(buf, n + 16, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    TWT_CHECK(why != NULL);

    /* RTS */
    f = (tw_verbs_frame_t){.type = TW_VERBS_F_RTS,
                           .am_id = 3,
                           .hdr_len = 4,
                           .len = 1u << 20,
                           .sid = 0x123456789abcull,
                           .raddr = 0xfeedf00d0000ull,
                           .rkey = 0xdeadbeef};
    n = tw_verbs_frame_pack(&f, buf);
    TWT_EQ(n, (size_t)(TW_VERBS_FRAME_LEN + TW_VERBS_RTS_LEN));
    memcpy(buf + n, "HDR!", 4);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 4, 64, 1u << 20, &g, &why), TW_OK);
    TWT_EQ(g.total, n + 4);
    TWT_EQ(g.sid, f.sid);
    TWT_EQ(g.raddr, f.raddr);
    TWT_EQ(g.rkey, f.rkey);
    TWT_EQ(g.len, (uint64_t)1u << 20);
    TWT_EQ(g.hdr_off, n);
    TWT_CHECK(memcmp(buf + g.hdr_off, "HDR!", 4) == 0);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 4, 64, (1u << 20) - 1, &g, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 3, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    f.len = 0; /* a rendezvous of nothing is not one */
    tw_verbs_frame_pack(&f, buf);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 4, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);

    /* FIN, BYE */
    f = (tw_verbs_frame_t){.type = TW_VERBS_F_FIN, .sid = 42, .status = TW_ERR_NOMEM};
    n = tw_verbs_frame_pack(&f, buf);
    TWT_EQ(n, (size_t)(TW_VERBS_FRAME_LEN + TW_VERBS_FIN_LEN));
    TWT_EQ(tw_verbs_frame_parse(buf, n, 64, 1u << 20, &g, &why), TW_OK);
    TWT_EQ(g.sid, 42u);
    TWT_EQ(g.status, TW_ERR_NOMEM);
    TWT_EQ(g.total, n);
    TWT_EQ(tw_verbs_frame_parse(buf, n - 1, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    f.status = 5; /* no such status */
    tw_verbs_frame_pack(&f, buf);
    TWT_EQ(tw_verbs_frame_parse(buf, n, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);
    f = (tw_verbs_frame_t){.type = TW_VERBS_F_BYE};
    n = tw_verbs_frame_pack(&f, buf);
    TWT_EQ(tw_verbs_frame_parse(buf, n, 64, 1u << 20, &g, &why), TW_OK);
    TWT_EQ(g.type, TW_VERBS_F_BYE);
    TWT_EQ(g.total, (size_t)TW_VERBS_FRAME_LEN);
    f = (tw_verbs_frame_t){.type = TW_VERBS_F_BYE, .len = 3};
    tw_verbs_frame_pack(&f, buf);
    TWT_EQ(tw_verbs_frame_parse(buf, n + 3, 64, 1u << 20, &g, &why), TW_ERR_PROTOCOL);

    /* Coalesced: AM, FIN, AM (0 B) back to back, walked by total. */
    {
        uint8_t b2[256];
        size_t off = 0, k = 0;
        tw_verbs_frame_t a1 = {.type = TW_VERBS_F_AM, .am_id = 1, .hdr_len = 2, .len = 3};
        tw_verbs_frame_t fin = {.type = TW_VERBS_F_FIN, .sid = 9, .status = TW_OK};
        tw_verbs_frame_t a2 = {.type = TW_VERBS_F_AM, .am_id = 2};
        off += tw_verbs_frame_pack(&a1, b2 + off);
        memcpy(b2 + off, "hhppp", 5);
        off += 5;
        off += tw_verbs_frame_pack(&fin, b2 + off);
        off += tw_verbs_frame_pack(&a2, b2 + off);
        const uint8_t want[3] = {TW_VERBS_F_AM, TW_VERBS_F_FIN, TW_VERBS_F_AM};
        for (size_t o = 0; o < off; o += g.total, k++) {
            TWT_EQ(tw_verbs_frame_parse(b2 + o, off - o, 64, 1u << 20, &g, &why), TW_OK);
            TWT_CHECK(k < 3);
            TWT_EQ(g.type, want[k]);
        }
        TWT_EQ(k, 3u);
    }
}

static void test_conn(void)
{
    uint8_t buf[TW_VERBS_CONN_LEN + 8];
    tw_verbs_conn_t c = {.type = TW_VERBS_C_REQ,
                         .src_rank = 3,
                         .dst_rank = 1,
                         .size = 4,
                         .src_dev = 1,
                         .dst_dev = 0,
                         .qpn = 0x123456,
                         .psn = 0xabcdef,
                         .gen = 0xfedcba98,
                         .echo = 0x01020304},
                    d;
    uint8_t other[16];
    const char *why = NULL;

    tw_verbs_conn_pack(&c, key, buf);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_OK);
    TWT_EQ(d.type, TW_VERBS_C_REQ);
    TWT_EQ(d.src_rank, 3u);
    TWT_EQ(d.src_dev, 1);
    TWT_EQ(d.qpn, 0x123456u);
    TWT_EQ(d.psn, 0xabcdefu);
    TWT_EQ(d.gen, 0xfedcba98u);
    TWT_EQ(d.echo, 0x01020304u);
    /* UD may hand over more bytes (padding): fine; fewer: not. */
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN + 8, key, 1, 4, &d, &why), TW_OK);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN - 1, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    /* Another job's key, another rank, another size. */
    memcpy(other, key, 16);
    other[0] ^= 1;
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, other, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 2, 4, &d, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 5, &d, &why), TW_ERR_PROTOCOL);
    /* Any flipped bit breaks the MAC. */
    for (size_t i = 0; i < TW_VERBS_CONN_LEN; i++) {
        buf[i] ^= 0x10;
        TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
        buf[i] ^= 0x10;
    }
    /* Signed but out of range: source = us, a 25-bit QPN, a bad type. */
    c.src_rank = 1;
    tw_verbs_conn_pack(&c, key, buf);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    c.src_rank = 3;
    c.qpn = 1u << 24;
    tw_verbs_conn_pack(&c, key, buf);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    c.qpn = 5;
    c.type = TW_VERBS_C_TYPE_MAX;
    tw_verbs_conn_pack(&c, key, buf);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    c.type = TW_VERBS_C_DOWN;
    c.dst_dev = TW_VERBS_MAX_DEVS;
    tw_verbs_conn_pack(&c, key, buf);
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    TWT_CHECK(why != NULL);
    /* The endpoint generations: every type carries both, the sender's
     * 1 .. 2^32-1 (0 is refused: a version-1 sender wrote 0 there, and its
     * version byte is refused first), the echo of the receiver's any value
     * (0: none known). */
    c.dst_dev = 0;
    for (uint8_t t = TW_VERBS_C_REQ; t < TW_VERBS_C_TYPE_MAX; t++) {
        static const uint32_t gens[] = {1, 2, 0x80000000u, UINT32_MAX};
        for (size_t k = 0; k < sizeof(gens) / sizeof(gens[0]); k++) {
            c.type = t;
            c.gen = gens[k];
            c.echo = k == 0 ? 0 : gens[k] - 1;
            tw_verbs_conn_pack(&c, key, buf);
            TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_OK);
            TWT_EQ(d.type, t);
            TWT_EQ(d.gen, gens[k]);
            TWT_EQ(d.echo, c.echo);
        }
    }
    c.type = TW_VERBS_C_RESET;
    c.gen = 0;
    tw_verbs_conn_pack(&c, key, buf);
    why = NULL;
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    TWT_CHECK(why != NULL && strstr(why, "generation") != NULL);
    c.gen = 7;
    tw_verbs_conn_pack(&c, key, buf);
    buf[4] = 1; /* version 1 (no generation) */
    TWT_EQ(tw_verbs_conn_parse(buf, TW_VERBS_CONN_LEN, key, 1, 4, &d, &why), TW_ERR_PROTOCOL);
    /* Both sit in the signed bytes: little-endian at offsets 32 and 36. */
    c.echo = 9;
    tw_verbs_conn_pack(&c, key, buf);
    TWT_EQ(buf[32], 7);
    TWT_EQ(buf[33] | buf[34] | buf[35], 0);
    TWT_EQ(buf[36], 9);
    TWT_EQ(buf[37] | buf[38] | buf[39], 0);
}

/* Generations (tw_verbs_cm.c): which connection messages belong
 * to a connection that is over. */
static tw_verbs_conn_t msg(uint8_t type, uint32_t gen, uint32_t echo)
{
    return (tw_verbs_conn_t){.type = type, .gen = gen, .echo = echo};
}

static void test_conn_stale(void)
{
    tw_verbs_conn_t m;

    /* First connection: we (generation 1) know nothing of the peer. Its
     * REQ (echo 0) and its REP / RTU answering ours (echo 1) are current;
     * a REP for another endpoint of ours is not. */
    m = msg(TW_VERBS_C_REQ, 1, 0);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, false, 0, 0));
    m = msg(TW_VERBS_C_REP, 1, 1);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, false, 0, 0));
    m = msg(TW_VERBS_C_REP, 1, 0);
    TWT_CHECK(tw_verbs_conn_stale(&m, 1, false, 0, 0));
    m = msg(TW_VERBS_C_RTU, 1, 1);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, true, 1, 0));
    /* Connected, generations 1 <-> 1: liveness both ways, a duplicate REQ,
     * DOWN and RESET are current. */
    for (uint8_t t = TW_VERBS_C_REQ; t < TW_VERBS_C_TYPE_MAX; t++) {
        m = msg(t, 1, 1);
        TWT_CHECK(!tw_verbs_conn_stale(&m, 1, true, 1, 0));
    }
    /* Our port flapped: we reset to generation 2 and listen to the peer's
     * generations from 2 on (it had 1). Its REQ, REP, DOWN or RESET of
     * generation 1 still on the way: stale, whatever they echo. */
    for (uint8_t t = TW_VERBS_C_REQ; t < TW_VERBS_C_TYPE_MAX; t++) {
        m = msg(t, 1, 1);
        TWT_CHECK(tw_verbs_conn_stale(&m, 2, false, 0, 2));
        m = msg(t, 1, 2);
        TWT_CHECK(tw_verbs_conn_stale(&m, 2, false, 0, 2));
    }
    /* The peer reset too (generation 2): its REQ is heard, and its REP
     * answering our new REQ; a REP of its generation 2 answering our old
     * REQ (echo 1: it was sent before our reset) is not. */
    m = msg(TW_VERBS_C_REQ, 2, 1);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 2, false, 0, 2));
    m = msg(TW_VERBS_C_REP, 2, 2);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 2, false, 0, 2));
    m = msg(TW_VERBS_C_REP, 2, 1);
    TWT_CHECK(tw_verbs_conn_stale(&m, 2, false, 0, 2));
    /* The peer did not reset (its port stayed up): connected to our old
     * generation 1, it hears our REQ of generation 2 -- newer than the one
     * it is connected to, so not stale (tw_verbs_conn_recv fails its
     * connection for now and answers after its own reset). */
    m = msg(TW_VERBS_C_REQ, 2, 1);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, true, 1, 0));
    /* ... and its answer, from its generation 2, is current for us. */
    m = msg(TW_VERBS_C_REP, 2, 2);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 2, false, 0, 2));
    /* Connected to the peer's generation 3: generation 2's messages are
     * old, PING / PONG / RTU for our older endpoint too. */
    m = msg(TW_VERBS_C_PING, 2, 4);
    TWT_CHECK(tw_verbs_conn_stale(&m, 4, true, 3, 3));
    m = msg(TW_VERBS_C_PONG, 3, 3);
    TWT_CHECK(tw_verbs_conn_stale(&m, 4, true, 3, 3));
    m = msg(TW_VERBS_C_RTU, 3, 3);
    TWT_CHECK(tw_verbs_conn_stale(&m, 4, true, 3, 3));
    /* We never reset (generation 1, listening from 0) but the peer did
     * twice: connected to its generation 3, its generation 2 is past. */
    m = msg(TW_VERBS_C_PING, 2, 1);
    TWT_CHECK(tw_verbs_conn_stale(&m, 1, true, 3, 0));
    m = msg(TW_VERBS_C_PING, 3, 1);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, true, 3, 0));
    /* A DOWN or RESET from a peer that never connected to us echoes 0:
     * current; a PING or REP echoing 0 never is. */
    m = msg(TW_VERBS_C_DOWN, 1, 0);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, false, 0, 0));
    m = msg(TW_VERBS_C_RESET, 1, 0);
    TWT_CHECK(!tw_verbs_conn_stale(&m, 1, false, 0, 0));
    m = msg(TW_VERBS_C_DOWN, 1, 3);
    TWT_CHECK(tw_verbs_conn_stale(&m, 4, false, 0, 0));
    m = msg(TW_VERBS_C_PING, 1, 0);
    TWT_CHECK(tw_verbs_conn_stale(&m, 1, true, 1, 0));
}

static void test_addr(void)
{
    uint8_t buf[512];
    tw_verbs_addr_t a = {.ndev = 2, .flags = TW_VERBS_ADDR_FLAG_THREAD}, b;
    size_t len = 0;
    const char *why = NULL;

    for (int d = 0; d < 2; d++) {
        for (int k = 0; k < 16; k++) {
            a.dev[d].gid[k] = (uint8_t)(d * 16 + k);
        }
        a.dev[d].lid = (uint16_t)(d == 0 ? 0 : 7);
        a.dev[d].port = 1;
        a.dev[d].link = d == 0 ? TW_VERBS_LINK_ETH : TW_VERBS_LINK_IB;
        a.dev[d].ud_qpn = 0x1000u + (uint32_t)d;
        a.dev[d].mtu = 3;
    }
    TWT_EQ(tw_verbs_addr_pack(&a, buf, sizeof(buf), &len), TW_OK);
    TWT_EQ(len, tw_verbs_addr_len(2));
    TWT_EQ(tw_verbs_addr_parse(buf, len, &b, &why), TW_OK);
    TWT_EQ(b.ndev, 2);
    TWT_EQ(b.flags, TW_VERBS_ADDR_FLAG_THREAD);
    TWT_CHECK(memcmp(b.dev[1].gid, a.dev[1].gid, 16) == 0);
    TWT_EQ(b.dev[1].lid, 7);
    TWT_EQ(b.dev[1].ud_qpn, 0x1001u);
    TWT_EQ(b.dev[0].link, TW_VERBS_LINK_ETH);
    TWT_EQ(tw_verbs_addr_pack(&a, buf, len - 1, &len), TW_ERR_INVALID);
    TWT_EQ(tw_verbs_addr_parse(buf, len - 1, &b, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_verbs_addr_parse(buf, len + 1, &b, &why), TW_ERR_PROTOCOL);
    buf[0] ^= 1;
    TWT_EQ(tw_verbs_addr_parse(buf, len, &b, &why), TW_ERR_PROTOCOL);
    buf[0] ^= 1;
    /* Entries out of range: MTU, link, no LID on InfiniBand, QPN 0. */
    a.dev[1].mtu = 6;
    tw_verbs_addr_pack(&a, buf, sizeof(buf), &len);
    TWT_EQ(tw_verbs_addr_parse(buf, len, &b, &why), TW_ERR_PROTOCOL);
    a.dev[1].mtu = 5;
    a.dev[1].lid = 0;
    tw_verbs_addr_pack(&a, buf, sizeof(buf), &len);
    TWT_EQ(tw_verbs_addr_parse(buf, len, &b, &why), TW_ERR_PROTOCOL);
    a.dev[1].lid = 7;
    a.dev[0].ud_qpn = 0;
    tw_verbs_addr_pack(&a, buf, sizeof(buf), &len);
    TWT_EQ(tw_verbs_addr_parse(buf, len, &b, &why), TW_ERR_PROTOCOL);
    a.dev[0].ud_qpn = 1;
    a.dev[0].link = 3;
    tw_verbs_addr_pack(&a, buf, sizeof(buf), &len);
    TWT_EQ(tw_verbs_addr_parse(buf, len, &b, &why), TW_ERR_PROTOCOL);
    a.ndev = 0;
    TWT_EQ(tw_verbs_addr_pack(&a, buf, sizeof(buf), &len), TW_ERR_INVALID);
    a.ndev = TW_VERBS_MAX_DEVS + 1;
    TWT_EQ(tw_verbs_addr_pack(&a, buf, sizeof(buf), &len), TW_ERR_INVALID);
}

static void test_rkey_and_key(void)
{
    uint8_t buf[TW_VERBS_RKEY_MAX];
    const uint32_t keys[3] = {0x11111111u, 0x22222222u, 0x33333333u};
    uint32_t k = 0;
    uint8_t jk[16];

    TWT_EQ(tw_verbs_rkey_pack(keys, 3, buf), 16u);
    TWT_EQ(tw_verbs_rkey_parse(buf, 2, &k), TW_OK);
    TWT_EQ(k, 0x33333333u);
    TWT_EQ(tw_verbs_rkey_parse(buf, 3, &k), TW_ERR_INVALID);
    TWT_EQ(tw_verbs_rkey_parse(NULL, 0, &k), TW_ERR_INVALID);
    TWT_EQ(tw_verbs_rkey_parse("xxxxxxxx", 0, &k), TW_ERR_INVALID);

    TWT_EQ(tw_siphash_key_parse("000102030405060708090a0b0c0d0e0F", jk), TW_OK);
    TWT_EQ(jk[15], 0x0f);
    TWT_EQ(tw_siphash_key_parse("000102030405060708090a0b0c0d0e0", jk), TW_ERR_INVALID);
    TWT_EQ(tw_siphash_key_parse("000102030405060708090a0b0c0d0e0g", jk), TW_ERR_INVALID);
    TWT_EQ(tw_siphash_key_parse(NULL, jk), TW_ERR_INVALID);
    uint32_t q = tw_verbs_qkey(key);
    TWT_CHECK(q != 0 && (q & 0x80000000u) == 0);
    TWT_EQ(tw_verbs_qkey(key), q);
}

static void test_credits(void)
{
    tw_verbs_credits_t c;

    tw_verbs_credits_init(&c, 4);
    TWT_CHECK(!tw_verbs_credits_put(&c)); /* nothing posted yet */
    TWT_CHECK(tw_verbs_credits_take(&c, 3));
    TWT_CHECK(!tw_verbs_credits_take(&c, 2));
    TWT_EQ(c.avail, 1u);
    TWT_CHECK(tw_verbs_credits_take(&c, 1));
    TWT_CHECK(!tw_verbs_credits_take(&c, 1));
    for (int i = 0; i < 4; i++) {
        TWT_CHECK(tw_verbs_credits_put(&c));
    }
    TWT_CHECK(!tw_verbs_credits_put(&c)); /* one completion per work request, no more */
    TWT_EQ(c.avail, 4u);
    TWT_EQ(c.posted, c.done);
    TWT_EQ(c.posted, 4u);
}

/* ---- registration cache --------------------------------------------------- */

static int released;
static tw_verbs_region_t *last_released;

static void release(void *arg, tw_verbs_region_t *r)
{
    (void)arg;
    released++;
    last_released = r;
}

static void region(tw_verbs_region_t *r, uintptr_t start, uintptr_t end, uint32_t lkey)
{
    memset(r, 0, sizeof(*r));
    r->start = start;
    r->end = end;
    r->lkey[0] = lkey;
}

static void test_rcache(void)
{
    tw_verbs_rcache_t rc;
    tw_verbs_region_t a, b, c, *h;

    TWT_EQ(tw_verbs_rcache_init(&rc, release, NULL), TW_OK);
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x1000, 1) == NULL);
    region(&a, 0x1000, 0x2000, 1);
    region(&b, 0x1800, 0x4000, 2); /* overlaps a */
    region(&c, 0x8000, 0x9000, 3);
    TWT_EQ(tw_verbs_rcache_insert(&rc, &c), TW_OK);
    TWT_EQ(tw_verbs_rcache_insert(&rc, &a), TW_OK);
    TWT_EQ(tw_verbs_rcache_insert(&rc, &b), TW_OK);
    TWT_EQ(tw_verbs_rcache_count(&rc), 3u);
    /* Hits: whole range inside one region. */
    h = tw_verbs_rcache_lookup(&rc, (void *)0x1000, 0x1000);
    TWT_CHECK(h == &a);
    tw_verbs_rcache_put(&rc, h);
    h = tw_verbs_rcache_lookup(&rc, (void *)0x1900, 0x2000); /* only b holds it */
    TWT_CHECK(h == &b);
    tw_verbs_rcache_put(&rc, h);
    h = tw_verbs_rcache_lookup(&rc, (void *)0x1900, 0x10); /* both: either will do */
    TWT_CHECK(h == &a || h == &b);
    tw_verbs_rcache_put(&rc, h);
    /* Misses: straddling, before, between, past the end, wrapping. */
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x3fff, 2) == NULL);
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x800, 0x10) == NULL);
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x5000, 0x10) == NULL);
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x8fff, 2) == NULL);
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x8000, SIZE_MAX) == NULL);
    TWT_EQ(released, 0);
    /* Deregistration while an operation holds the region: no new lookup
     * finds it, the release waits for the operation. */
    h = tw_verbs_rcache_lookup(&rc, (void *)0x8100, 0x100);
    TWT_CHECK(h == &c);
    TWT_EQ(tw_verbs_rcache_remove(&rc, &c), TW_OK);
    TWT_CHECK(tw_verbs_rcache_lookup(&rc, (void *)0x8100, 0x100) == NULL);
    TWT_EQ(released, 0);
    TWT_EQ(tw_verbs_rcache_remove(&rc, &c), TW_ERR_INVALID); /* twice */
    tw_verbs_rcache_put(&rc, h);
    TWT_EQ(released, 1);
    TWT_CHECK(last_released == &c);
    /* Idle region: released at once. */
    TWT_EQ(tw_verbs_rcache_remove(&rc, &a), TW_OK);
    TWT_EQ(released, 2);
    h = tw_verbs_rcache_lookup(&rc, (void *)0x1000, 0x10);
    TWT_CHECK(h == NULL); /* 0x1000 was a's alone */
    h = tw_verbs_rcache_lookup(&rc, (void *)0x1900, 0x10);
    TWT_CHECK(h == &b);
    tw_verbs_rcache_put(&rc, h);
    region(&a, 0x10, 0x10, 1);
    TWT_EQ(tw_verbs_rcache_insert(&rc, &a), TW_ERR_INVALID); /* empty */
    /* Many regions: the sorted table grows and still finds each. */
    static tw_verbs_region_t many[100];
    for (int i = 0; i < 100; i++) {
        region(&many[i], 0x100000u + (uintptr_t)i * 0x1000u, 0x100800u + (uintptr_t)i * 0x1000u,
               (uint32_t)i);
        TWT_EQ(tw_verbs_rcache_insert(&rc, &many[i]), TW_OK);
    }
    for (int i = 99; i >= 0; i--) {
        h = tw_verbs_rcache_lookup(&rc, (void *)(0x100400u + (uintptr_t)i * 0x1000u), 0x100);
        TWT_CHECK(h == &many[i]);
        tw_verbs_rcache_put(&rc, h);
    }
    tw_verbs_rcache_cleanup(&rc); /* releases what is left */
    TWT_EQ(released, 103);
}

static void test_query(void)
{
    const tw_tl_ops_t *ops = tw_tl_find("verbs");
    char why[256] = "";

    TWT_CHECK(ops != NULL);
    TWT_CHECK(ops->caps & TW_TL_CAP_OPT_IN);
    TWT_CHECK(tw_tl_caps_consistent(ops));
    if (ops->query(why, sizeof(why)) != TW_OK) {
        /* This host: no device. Said, not hidden. */
        TWT_CHECKF(strstr(why, "RDMA") != NULL || strstr(why, "libibverbs") != NULL ||
                       strstr(why, "TW_VERBS_DEVICES") != NULL,
                   "unhelpful reason: '%s'", why);
        printf("verbs unavailable here: %s\n", why);
    }
    /* A device list naming nothing that exists. */
    setenv("TW_VERBS_DEVICES", "no_such_hca0", 1);
    TWT_CHECK(ops->query(why, sizeof(why)) != TW_OK);
    unsetenv("TW_VERBS_DEVICES");
    /* The test hook refuses what is not a verbs iface. */
    TWT_EQ(tw_verbs_force_qp_error(NULL, 1) == TW_OK, 0);
}

static const twt_case_t cases[] = {
    {"frames", test_frames},         {"conn", test_conn},
    {"conn_stale", test_conn_stale}, {"addr", test_addr},
    {"rkey_key", test_rkey_and_key}, {"credits", test_credits},
    {"rcache", test_rcache},         {"query", test_query},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
