/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport beyond messaging (twrun -n 2, TW_TRANSPORTS=verbs,self;
 * needs an RDMA device -- Soft-RoCE in the VM -- and skips (77) without one):
 *
 *   rma    each rank registers a 1 MiB window (tw_verbs_mem_reg) and sends
 *          its address and remote key to the other; then puts into the
 *          peer's window from a registered buffer (cached lkey), from an
 *          unregistered one (registered per operation), 0 B .. 300 KB, and
 *          from read-only memory,
 *          flushes, and tells the peer, which checks every byte; then gets
 *          the peer's window back into an unregistered buffer and checks
 *          it; finally deregisters while nothing uses the window.
 *   qperr  rank 0 streams 32 KiB messages (rendezvous) and small ones to
 *          rank 1 and, after 100, moves its QP to rank 1 into the error
 *          state (tw_verbs_force_qp_error): every operation on both ranks
 *          completes (OK or TW_ERR_PEER_FAILED, never hangs), what arrived
 *          is intact and arrived once, each rank's error handler runs once
 *          (rank 1 learns it from rank 0's DOWN message), and later sends
 *          are refused with TW_ERR_PEER_FAILED. Reliability off.
 *   devlost  as qperr, but rank 0 loses its whole device's CQ (the test
 *          hook of IBV_EVENT_CQ_ERR / DEVICE_FATAL): no completion comes
 *          from that CQ any more, so every work request still posted must
 *          be completed by the transport itself; rank 1 learns it from its
 *          own errors or liveness (TW_VERBS_TIMEOUT, no DOWN is sent).
 *   uddrop every other connection message is dropped (a lossy UD fabric):
 *          retransmission still connects, and messages both ways arrive.
 *   udblack every connection message is dropped, TW_VERBS_TIMEOUT=1s: the
 *          receive from the peer completes TW_ERR_PEER_FAILED (connection
 *          timed out) on both ranks, each error handler runs once, and
 *          later sends are refused.
 *   failover  the same QP error with TW_RELIABLE=1 and another path
 *          (TW_TRANSPORTS=verbs,tcp,self): the reliability layer moves the
 *          traffic to tcp; all FAILOVER_MSGS messages arrive intact, once,
 *          every send completes TW_OK, and nobody's error handler runs.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/tw_context_int.h"
#include "threadwire/threadwire.h"
#include "transports/verbs/tw_verbs.h"
#include "transports/verbs/tw_verbs_proto.h"
#include "tw_test.h"

#define WIN           (1u << 20)
#define LEN           (32u * 1024u)
#define WINDOW        8
#define INJECT_AT     100
#define TAG_INFO      (1ull << 50)
#define TAG_DONE      (1ull << 51)
#define FAILOVER_MSGS 400

/* A put's source may be read-only memory (.rodata). */
static const char ro_src[] = "a put from read-only memory: registered without local write";

static atomic_int handler_calls;

static void on_error(tw_context_t *ctx, int peer, tw_status_t err, const char *what, void *arg)
{
    (void)what, (void)arg;
    TWT_EQ(peer, 1 - tw_rank(ctx));
    TWT_EQ(err, TW_ERR_PEER_FAILED);
    atomic_fetch_add(&handler_calls, 1);
}

static tw_tl_iface_t *verbs_iface(tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = ctx->impl;
    return tw_stack_find(impl, "verbs");
}

/* A transport completion counted by the test. */
typedef struct comp {
    tw_tl_comp_t super;
    atomic_int done;
    _Atomic tw_status_t st;
} comp_t;

static void comp_cb(tw_tl_comp_t *c, tw_status_t st)
{
    comp_t *m = (comp_t *)c;
    atomic_store(&m->st, st);
    atomic_fetch_add(&m->done, 1);
}

static void comp_init(comp_t *c)
{
    c->super.cb = comp_cb;
    atomic_store(&c->done, 0);
    atomic_store(&c->st, TW_OK);
}

static tw_status_t comp_wait(tw_context_t *ctx, comp_t *c)
{
    for (int i = 0; i < 60000 && atomic_load(&c->done) == 0; i++) {
        tw_progress(ctx);
        usleep(1000);
    }
    TWT_CHECKF(atomic_load(&c->done) == 1, "an operation did not complete once in 60 s (%d)",
               atomic_load(&c->done));
    return atomic_load(&c->st);
}

typedef struct info {
    uint64_t addr;
    uint8_t rkey[TW_VERBS_RKEY_MAX];
} info_t;

static void xchg(tw_context_t *ctx, tw_cq_t *cq, uint64_t tag, const void *out, void *in,
                 size_t len)
{
    int peer = 1 - tw_rank(ctx);
    tw_completion_t c[2];
    int got = 0;

    TWT_EQ(tw_recv(ctx, peer, tag, 0, in, len, cq, NULL), TW_OK);
    TWT_EQ(tw_send(ctx, peer, tag, out, len, cq, NULL), TW_OK);
    while (got < 2) {
        int n = tw_cq_wait(cq, c, 2 - got, 30000);
        TWT_CHECKF(n > 0, "no completion in 30 s");
        for (int i = 0; i < n; i++) {
            TWT_EQ(c[i].status, TW_OK);
        }
        got += n;
    }
}

static void rma(tw_context_t *ctx, tw_cq_t *cq)
{
    tw_tl_iface_t *vi = verbs_iface(ctx);
    int me = tw_rank(ctx), peer = 1 - me;
    unsigned char *win = aligned_alloc(4096, WIN), *src = aligned_alloc(4096, WIN);
    unsigned char *loose = malloc(WIN), *back = malloc(WIN);
    tw_verbs_mem_t *wmem, *smem;
    info_t mine = {0}, theirs;
    uint8_t skey[TW_VERBS_RKEY_MAX];
    size_t klen;
    static const size_t sizes[] = {0, 1, 8, 100, 4096, 9000, 65536, 300000};
    size_t off = 0;
    comp_t c;
    char token = 1, rtoken = 0;

    TWT_CHECK(vi != NULL && win != NULL && src != NULL && loose != NULL && back != NULL);
    memset(win, 0, WIN);
    TWT_EQ(tw_verbs_mem_reg(vi, win, WIN, mine.rkey, &klen, &wmem), TW_OK);
    TWT_CHECK(klen <= TW_VERBS_RKEY_MAX);
    TWT_EQ(tw_verbs_mem_reg(vi, src, WIN, skey, &klen, &smem), TW_OK);
    mine.addr = (uint64_t)(uintptr_t)win;
    xchg(ctx, cq, TAG_INFO, &mine, &theirs, sizeof(mine));

    /* Puts: from the registered buffer, then from plain memory. */
    twt_fill(src, WIN, 100 + (uint64_t)me);
    twt_fill(loose, WIN, 200 + (uint64_t)me);
    for (size_t i = 0; i < TWT_ARRAY_SIZE(sizes); i++) {
        const unsigned char *from = i % 2 == 0 ? src : loose;
        comp_init(&c);
        TWT_EQ(vi->ops->put_zcopy(vi, peer, from + off, sizes[i], theirs.addr + off, theirs.rkey,
                                  &c.super),
               TW_OK);
        TWT_EQ(comp_wait(ctx, &c), TW_OK);
        off += sizes[i];
    }
    comp_init(&c);
    TWT_EQ(vi->ops->put_zcopy(vi, peer, ro_src, sizeof(ro_src), theirs.addr + off, theirs.rkey,
                              &c.super),
           TW_OK);
    TWT_EQ(comp_wait(ctx, &c), TW_OK);
    off += sizeof(ro_src);
    comp_init(&c);
    TWT_EQ(vi->ops->flush(vi, peer, &c.super), TW_OK);
    TWT_EQ(comp_wait(ctx, &c), TW_OK);
    xchg(ctx, cq, TAG_DONE, &token, &rtoken, 1);
    /* What the peer put into our window: its pattern, piece by piece. */
    {
        unsigned char *want_a = malloc(WIN), *want_b = malloc(WIN);
        size_t o = 0;
        TWT_CHECK(want_a != NULL && want_b != NULL);
        twt_fill(want_a, WIN, 100 + (uint64_t)peer);
        twt_fill(want_b, WIN, 200 + (uint64_t)peer);
        for (size_t i = 0; i < TWT_ARRAY_SIZE(sizes); i++) {
            const unsigned char *want = i % 2 == 0 ? want_a : want_b;
            TWT_CHECKF(memcmp(win + o, want + o, sizes[i]) == 0, "put %zu (%zu B) corrupted", i,
                       sizes[i]);
            o += sizes[i];
        }
        TWT_CHECKF(memcmp(win + o, ro_src, sizeof(ro_src)) == 0, "read-only put corrupted");
        o += sizeof(ro_src);
        TWT_CHECKF(win[o] == 0, "a put wrote past its end");
        free(want_a);
        free(want_b);
    }
    /* Get the peer's window back (into unregistered memory). */
    comp_init(&c);
    TWT_EQ(vi->ops->get_zcopy(vi, peer, back, off, theirs.addr, theirs.rkey, &c.super), TW_OK);
    TWT_EQ(comp_wait(ctx, &c), TW_OK);
    xchg(ctx, cq, TAG_DONE + 1, &token, &rtoken, 1);
    {
        /* The peer's window holds what we put there. */
        size_t o = 0;
        for (size_t i = 0; i < TWT_ARRAY_SIZE(sizes); i++) {
            const unsigned char *from = i % 2 == 0 ? src : loose;
            TWT_CHECKF(memcmp(back + o, from + o, sizes[i]) == 0, "get of piece %zu corrupted", i);
            o += sizes[i];
        }
        TWT_CHECKF(memcmp(back + o, ro_src, sizeof(ro_src)) == 0, "get of the read-only piece");
    }
    /* Bad keys are refused before anything is posted. */
    comp_init(&c);
    TWT_EQ(vi->ops->get_zcopy(vi, peer, back, 8, theirs.addr, "xx", &c.super), TW_ERR_INVALID);
    TWT_EQ(tw_verbs_mem_dereg(vi, smem), TW_OK);
    TWT_EQ(tw_verbs_mem_dereg(vi, smem), TW_ERR_INVALID);
    xchg(ctx, cq, TAG_DONE + 2, &token, &rtoken, 1); /* the peer is done with our window */
    TWT_EQ(tw_verbs_mem_dereg(vi, wmem), TW_OK);
    printf("rank %d: %zu bytes put (9 pieces: registered, plain and read-only memory), flushed, "
           "got back, intact\n",
           me, off);
    free(win);
    free(src);
    free(loose);
    free(back);
}

/* Rank 0: stream, break the QP, count. A buffer is reused only once its
 * send completed (eager sends complete at once, rendezvous ones later). */
static void breaker(tw_context_t *ctx, tw_cq_t *cq, bool lost)
{
    static unsigned char bufs[WINDOW][LEN];
    bool busy[WINDOW] = {false};
    unsigned posted = 0, ok = 0, failed = 0;
    tw_completion_t c;

    for (unsigned i = 0; failed == 0; i++) {
        unsigned slot = i % WINDOW;
        while (busy[slot] && failed == 0) {
            TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "no completion for 30 s");
            busy[(uintptr_t)c.user] = false;
            if (c.status == TW_OK) {
                ok++;
            } else {
                TWT_EQ(c.status, TW_ERR_PEER_FAILED);
                failed++;
            }
        }
        if (failed > 0) {
            break;
        }
        if (i == INJECT_AT) {
            TWT_EQ(lost ? tw_verbs_test_dev_lost(verbs_iface(ctx), TW_VERBS_LOST_CQ)
                        : tw_verbs_force_qp_error(verbs_iface(ctx), 1),
                   TW_OK);
        }
        size_t len = i % 3 == 0 ? 100 : LEN;
        twt_fill(bufs[slot], len, i);
        tw_status_t st = tw_send(ctx, 1, i, bufs[slot], len, cq, (void *)(uintptr_t)slot);
        if (st == TW_ERR_PEER_FAILED) {
            failed++;
            break;
        }
        TWT_EQ(st, TW_OK);
        busy[slot] = true;
        posted++;
        TWT_CHECKF(i < 100000, "the forced QP error never failed the peer");
    }
    while (ok + failed < posted) {
        TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "an operation never completed");
        TWT_CHECK(c.status == TW_OK || c.status == TW_ERR_PEER_FAILED);
        c.status == TW_OK ? ok++ : failed++;
    }
    for (int i = 0; i < 500 && atomic_load(&handler_calls) == 0; i++) {
        usleep(10000);
    }
    TWT_EQ(atomic_load(&handler_calls), 1);
    TWT_EQ(tw_send(ctx, 1, 0, bufs[0], 8, cq, NULL), TW_ERR_PEER_FAILED);
    printf("rank 0: %s after %d sends: %u ok, %u failed (%lu posted work requests completed by "
           "the transport)\n",
           lost ? "device lost" : "QP forced to error", INJECT_AT, ok, failed,
           tw_verbs_test_lost_ops());
}

/* Rank 1: receive in order until rank 0 is gone. */
static void victim(tw_context_t *ctx, tw_cq_t *cq)
{
    static unsigned char bufs[WINDOW][LEN];
    static unsigned char seen[1u << 17];
    unsigned got = 0, done = 0, posted = 0, failed = 0;
    tw_completion_t c;

    for (unsigned i = 0; i < WINDOW; i++) {
        TWT_EQ(tw_recv(ctx, 0, i, 0, bufs[i], LEN, cq, (void *)(uintptr_t)i), TW_OK);
        posted++;
    }
    while (done < posted) {
        TWT_CHECKF(tw_cq_wait(cq, &c, 1, 60000) == 1, "rank 1: no completion for 60 s");
        done++;
        if (c.status != TW_OK) {
            TWT_EQ(c.status, TW_ERR_PEER_FAILED);
            failed++;
            continue;
        }
        unsigned i = (unsigned)(uintptr_t)c.user, tag = (unsigned)c.tag;
        size_t len = tag % 3 == 0 ? 100 : LEN;
        TWT_CHECK(tag < sizeof(seen) && tag % WINDOW == i && !seen[tag]);
        seen[tag] = 1;
        TWT_EQ(c.length, len);
        TWT_CHECKF(twt_verify(bufs[i], len, tag), "message %u corrupted", tag);
        got++;
        if (failed == 0 && tag + WINDOW < sizeof(seen)) {
            tw_status_t st =
                tw_recv(ctx, 0, tag + WINDOW, 0, bufs[i], LEN, cq, (void *)(uintptr_t)i);
            if (st == TW_OK) {
                posted++;
            } else {
                TWT_EQ(st, TW_ERR_PEER_FAILED);
            }
        }
    }
    TWT_CHECKF(failed > 0, "rank 1 never saw rank 0 fail");
    TWT_CHECK(got > 0);
    for (int i = 0; i < 500 && atomic_load(&handler_calls) == 0; i++) {
        usleep(10000);
    }
    TWT_EQ(atomic_load(&handler_calls), 1);
    TWT_EQ(tw_send(ctx, 0, 1, bufs[0], 8, cq, NULL), TW_ERR_PEER_FAILED);
    printf("rank 1: %u messages intact, each once, then rank 0 failed (%u receives failed)\n", got,
           failed);
}

/* Both ranks, TW_RELIABLE=1: rank 0 streams, breaks its verbs QP at
 * INJECT_AT; nothing may fail. */
static void failover(tw_context_t *ctx, tw_cq_t *cq)
{
    static unsigned char bufs[WINDOW][LEN];
    bool busy[WINDOW] = {false};
    tw_completion_t c;

    if (tw_rank(ctx) == 0) {
        unsigned ok = 0;
        for (unsigned i = 0; i < FAILOVER_MSGS; i++) {
            unsigned slot = i % WINDOW;
            while (busy[slot]) {
                TWT_CHECKF(tw_cq_wait(cq, &c, 1, 60000) == 1, "no completion for 60 s");
                TWT_EQ(c.status, TW_OK);
                busy[(uintptr_t)c.user] = false;
                ok++;
            }
            if (i == INJECT_AT) {
                TWT_EQ(tw_verbs_force_qp_error(verbs_iface(ctx), 1), TW_OK);
            }
            size_t len = i % 3 == 0 ? 100 : LEN;
            twt_fill(bufs[slot], len, i);
            tw_status_t st;
            while ((st = tw_send(ctx, 1, i, bufs[slot], len, cq, (void *)(uintptr_t)slot)) ==
                   TW_ERR_AGAIN) {
                tw_progress(ctx);
            }
            TWT_EQ(st, TW_OK);
            busy[slot] = true;
        }
        while (ok < FAILOVER_MSGS) {
            TWT_CHECKF(tw_cq_wait(cq, &c, 1, 60000) == 1, "no completion for 60 s");
            TWT_EQ(c.status, TW_OK);
            ok++;
        }
        printf("rank 0: %u messages sent, verbs QP broken after %d, all completed OK\n", ok,
               INJECT_AT);
    } else {
        unsigned got = 0;
        for (unsigned i = 0; i < FAILOVER_MSGS; i++) {
            unsigned slot = i % WINDOW;
            size_t len = i % 3 == 0 ? 100 : LEN;
            TWT_EQ(tw_recv(ctx, 0, i, 0, bufs[slot], LEN, cq, NULL), TW_OK);
            TWT_CHECKF(tw_cq_wait(cq, &c, 1, 60000) == 1, "message %u never arrived", i);
            TWT_EQ(c.status, TW_OK);
            TWT_EQ(c.tag, (uint64_t)i);
            TWT_EQ(c.length, len);
            TWT_CHECKF(twt_verify(bufs[slot], len, i), "message %u corrupted", i);
            got++;
        }
        printf("rank 1: %u messages intact, each once, in order\n", got);
    }
    /* Nobody leaves before the other is done. */
    char token = 1, rtoken = 0;
    xchg(ctx, cq, TAG_DONE + 3, &token, &rtoken, 1);
    TWT_EQ(atomic_load(&handler_calls), 0);
}

/* uddrop / udblack: both ranks send to each other first thing. */
static void udloss(tw_context_t *ctx, tw_cq_t *cq, bool black)
{
    int peer = 1 - tw_rank(ctx);
    uint64_t out = 0x1234 + (uint64_t)tw_rank(ctx), in = 0;
    tw_completion_t c;
    int done = 0, failed = 0;

    if (!black) {
        for (int round = 0; round < 20; round++) {
            out = (uint64_t)round << 8 | (uint64_t)tw_rank(ctx);
            xchg(ctx, cq, (uint64_t)round, &out, &in, sizeof(out));
            TWT_EQ(in, (uint64_t)round << 8 | (uint64_t)peer);
        }
        printf("rank %d: connected through dropped connection messages; 20 exchanges ok\n",
               tw_rank(ctx));
        return;
    }
    TWT_EQ(tw_recv(ctx, peer, 7, 0, &in, sizeof(in), cq, (void *)1), TW_OK);
    TWT_EQ(tw_send(ctx, peer, 7, &out, sizeof(out), cq, (void *)2), TW_OK);
    while (done < 2) {
        TWT_CHECKF(tw_cq_wait(cq, &c, 1, 30000) == 1, "no completion in 30 s");
        done++;
        if (c.user == (void *)1) {
            TWT_EQ(c.status, TW_ERR_PEER_FAILED); /* nothing can have arrived */
        } else {
            /* A small send is a copy: it completed at once, or failed. */
            TWT_CHECK(c.status == TW_OK || c.status == TW_ERR_PEER_FAILED);
        }
        failed += c.status != TW_OK;
    }
    for (int i = 0; i < 500 && atomic_load(&handler_calls) == 0; i++) {
        usleep(10000);
    }
    TWT_EQ(atomic_load(&handler_calls), 1);
    TWT_EQ(tw_send(ctx, peer, 8, &out, sizeof(out), cq, NULL), TW_ERR_PEER_FAILED);
    printf("rank %d: no connection message got through: %d operations failed, handler once\n",
           tw_rank(ctx), failed);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    char why[256] = "";
    tw_context_t *ctx;
    tw_cq_t *cq;

    if (strcmp(mode, "rma") != 0 && strcmp(mode, "qperr") != 0 && strcmp(mode, "failover") != 0 &&
        strcmp(mode, "uddrop") != 0 && strcmp(mode, "udblack") != 0 &&
        strcmp(mode, "devlost") != 0) {
        fprintf(stderr, "usage: twrun -n 2 %s rma|qperr|devlost|failover|uddrop|udblack\n",
                argv[0]);
        return 2;
    }
    const tw_tl_ops_t *ops = tw_tl_find("verbs");
    if (ops == NULL || ops->query(why, sizeof(why)) != TW_OK) {
        printf("SKIP: verbs transport unavailable: %s\n", why);
        return TWT_SKIP;
    }
    if (strcmp(mode, "uddrop") == 0 || strcmp(mode, "udblack") == 0) {
        tw_verbs_test_drop_conn(strcmp(mode, "uddrop") == 0 ? 2 : 1);
    }
    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    TWT_EQ(tw_set_error_handler(ctx, on_error, NULL), TW_OK);
    TWT_EQ(tw_size(ctx), 2);
    TWT_CHECKF(verbs_iface(ctx) != NULL, "set TW_TRANSPORTS=verbs,self");
    TWT_EQ(tw_cq_create(ctx, 64, &cq), TW_OK);
    if (strcmp(mode, "rma") == 0) {
        rma(ctx, cq);
        TWT_EQ(atomic_load(&handler_calls), 0);
    } else if (strcmp(mode, "failover") == 0) {
        failover(ctx, cq);
    } else if (strcmp(mode, "uddrop") == 0 || strcmp(mode, "udblack") == 0) {
        udloss(ctx, cq, strcmp(mode, "udblack") == 0);
    } else if (tw_rank(ctx) == 0) {
        breaker(ctx, cq, strcmp(mode, "devlost") == 0);
    } else {
        victim(ctx, cq);
    }
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return 0;
}
