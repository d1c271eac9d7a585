/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Faults of the shm transport that need its test hooks (run under twrun):
 *
 *   test_shm_faults chaos DIR   (3 ranks, --keep-going)
 *     Ranks 0 and 1 ping-pong checksummed messages (small and large) the
 *     whole time. Rank 2 first sends them a few good messages, then
 *     writes random values into its rings in their segments for 10^4
 *     rounds (tails, sequence words, cell headers). Ranks 0 and 1 must
 *     fail rank 2 (error handler: peer 2, TW_ERR_PEER_FAILED), and their
 *     own traffic must go on intact. They drop a file in DIR when they
 *     saw it, so rank 2 does not leave (cleanly) before.
 *
 *   test_shm_faults leak-segment  (1 rank)
 *     Creates a segment the way the shm transport names them and exits
 *     without unlinking it, as a rank killed inside tw_init would; twrun
 *     must remove it once the job is over (the script checks).
 *
 *   test_shm_faults refuse-cma  (2 ranks)
 *     process_vm_readv fails as if the kernel said EPERM: large messages
 *     must fall back to the copy through the rings, intact.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/tw_context_int.h"
#include "shmem/tw_seg.h"
#include "threadwire/threadwire.h"
#include "transports/shm/tw_shm.h"
#include "tw_mp.h"

static pid_t main_tid; /* the worker: tw_cq_wait polls from it */

static void wait_one(tw_cq_t *cq, tw_completion_t *c, tw_status_t want)
{
    int n = tw_cq_wait(cq, c, 1, 10000);
    TWT_CHECKF(n == 1, "no completion within 10 s (%d)", n);
    TWT_CHECKF(c->status == want, "completion status %s, want %s", tw_strerror(c->status),
               tw_strerror(want));
}

static void send_retry(tw_context_t *ctx, int dst, uint64_t tag, const void *buf, size_t len,
                       tw_cq_t *cq)
{
    tw_status_t st;
    while ((st = tw_send(ctx, dst, tag, buf, len, cq, NULL)) == TW_ERR_AGAIN) {
        tw_progress(ctx);
    }
    TWT_EQ(st, TW_OK);
}

/* One exchange of @p len bytes between ranks 0 and 1, both directions,
 * payload checked. Tag bit 40 carries @p flag; returns the peer's. */
#define FLAG_BIT (1ull << 40)
static bool exchange(tw_context_t *ctx, tw_cq_t *cq, int round, size_t len, bool flag,
                     unsigned char *sbuf, unsigned char *rbuf)
{
    int me = tw_rank(ctx), peer = 1 - me;
    bool peer_flag = false;
    tw_completion_t c;

    twt_fill(sbuf, len, (uint64_t)me << 32 | (unsigned)round);
    TWT_EQ(tw_recv(ctx, peer, (uint64_t)round, FLAG_BIT, rbuf, len, cq, NULL), TW_OK);
    send_retry(ctx, peer, (uint64_t)round | (flag ? FLAG_BIT : 0), sbuf, len, cq);
    for (int i = 0; i < 2; i++) {
        wait_one(cq, &c, TW_OK);
        if (c.op == TW_OP_RECV) {
            TWT_EQ(c.length, len);
            TWT_EQ(c.tag & ~FLAG_BIT, (uint64_t)round);
            peer_flag = (c.tag & FLAG_BIT) != 0;
            TWT_CHECKF(twt_verify(rbuf, len, (uint64_t)peer << 32 | (unsigned)round),
                       "round %d: corrupt payload of %zu bytes", round, len);
        }
    }
    return peer_flag;
}

static tw_tl_iface_t *shm_iface(tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = ctx->impl;
    return tw_stack_find(impl, "shm");
}

static int run_chaos(tw_context_t *ctx, tw_cq_t *cq, const char *dir)
{
    int me = tw_rank(ctx);
    size_t max = 256 * 1024;
    unsigned char *sbuf = malloc(max), *rbuf = malloc(max);
    char path[512];
    tw_completion_t c;

    TWT_EQ(tw_size(ctx), 3);
    TWT_CHECK(sbuf != NULL && rbuf != NULL);
    if (me == 2) {
        tw_tl_iface_t *shm = shm_iface(ctx);
        static const char hello[] = "a good message before the chaos";
        unsigned writes = 0;
        char ready[8];
        TWT_CHECK(shm != NULL);
        for (int peer = 0; peer < 2; peer++) {
            send_retry(ctx, peer, 1000, hello, sizeof(hello), cq);
            wait_one(cq, &c, TW_OK);
            /* Their error handler is in place: start. */
            TWT_EQ(tw_recv(ctx, peer, 1001, 0, ready, sizeof(ready), cq, NULL), TW_OK);
            wait_one(cq, &c, TW_OK);
        }
        for (uint64_t round = 0; round < 10000; round++) {
            writes += tw_shm_test_chaos(shm, 0, round * 2 + 1);
            writes += tw_shm_test_chaos(shm, 1, round * 2 + 2);
        }
        printf("rank 2: %u random writes into its rings\n", writes);
        /* Stay until both victims saw it. */
        for (int peer = 0; peer < 2; peer++) {
            snprintf(path, sizeof(path), "%s/seen-%d", dir, peer);
            for (int i = 0; access(path, F_OK) != 0; i++) {
                TWT_CHECKF(i < 3000, "rank %d never failed rank 2", peer);
                usleep(10000);
            }
        }
    } else {
        char hello[64];
        int round = 0;
        /* A good message from rank 2 first; then tell it our error
         * handler is set (main sets it before this). */
        TWT_EQ(tw_recv(ctx, 2, 1000, 0, hello, sizeof(hello), cq, NULL), TW_OK);
        wait_one(cq, &c, TW_OK);
        send_retry(ctx, 2, 1001, "ready", 6, cq);
        wait_one(cq, &c, TW_OK);
        /* Our own traffic goes on while rank 2 scribbles, and after. */
        /* Until both saw rank 2 fail (each round tells the other), and
         * at least 200 rounds: both stop at the same round. */
        for (bool mine = false, theirs = false; !(mine && theirs && round >= 200); round++) {
            TWT_CHECKF(round < 200000, "rank 2 was never failed (mine %d theirs %d handler %d)",
                       mine, theirs, tw_mp_errors_count());
            mine = tw_mp_errors_for(2, TW_ERR_PEER_FAILED) > 0;
            theirs =
                exchange(ctx, cq, round, (size_t)(round * 7919) % (round % 10 == 0 ? max : 9000),
                         mine, sbuf, rbuf);
        }
        TWT_EQ(tw_mp_errors_count(), 1);
        /* Our waits polled rank 2's ring too, but the failure (and so the
         * handler) went to the progress thread. */
        if (getenv("TW_PROGRESS_THREADS") == NULL) {
            TWT_CHECK(tw_mp_errors_get(0).tid != main_tid);
        }
        /* New traffic to the failed peer is refused. */
        TWT_EQ(tw_send(ctx, 2, 1, hello, 1, cq, NULL), TW_ERR_PEER_FAILED);
        snprintf(path, sizeof(path), "%s/seen-%d", dir, me);
        FILE *f = fopen(path, "w");
        TWT_CHECK(f != NULL);
        fclose(f);
        printf("rank %d: rank 2 failed after its chaos; %d intact exchanges with rank %d\n", me,
               round, 1 - me);
        /* Both done before either leaves. */
        exchange(ctx, cq, round, 0, true, sbuf, rbuf);
    }
    free(sbuf);
    free(rbuf);
    return 0;
}

static int run_refuse_cma(tw_context_t *ctx, tw_cq_t *cq)
{
    size_t max = 4u << 20;
    unsigned char *sbuf = malloc(max), *rbuf = malloc(max);

    TWT_EQ(tw_size(ctx), 2);
    TWT_CHECK(sbuf != NULL && rbuf != NULL);
    tw_shm_test_refuse_cma(true);
    for (int round = 0; round < (int)twt_scaled(40, 8); round++) {
        size_t len = round % 4 == 0 ? max - (size_t)round : (size_t)(round * 40503) % 300000;
        exchange(ctx, cq, round, len, false, sbuf, rbuf);
    }
    /* The pulls really were refused and fell back (not silently CMA). */
    TWT_CHECK(tw_shm_test_cma_off(shm_iface(ctx)));
    printf("rank %d: large messages went through the rings with CMA refused\n", tw_rank(ctx));
    free(sbuf);
    free(rbuf);
    return 0;
}

int main(int argc, char **argv)
{
    tw_context_t *ctx;
    tw_cq_t *cq;
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: test_shm_faults chaos DIR | refuse-cma | leak-segment\n");
        return 2;
    }
    if (strcmp(argv[1], "leak-segment") == 0) {
        const char *key = getenv("TW_JOB_KEY");
        char name[TW_SEG_NAME_MAX];
        tw_seg_t seg;
        TWT_CHECK(key != NULL);
        TWT_EQ(tw_seg_make_name(key, name, sizeof(name)), TW_OK);
        TWT_EQ(tw_seg_create(name, 4096, &seg), TW_OK);
        printf("%s\n", name);
        return 0; /* no unlink: left for twrun */
    }
    main_tid = gettid();
    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    tw_mp_attach(ctx);
    TWT_EQ(tw_cq_create(ctx, 256, &cq), TW_OK);
    if (strcmp(argv[1], "chaos") == 0 && argc == 3) {
        rc = run_chaos(ctx, cq, argv[2]);
    } else if (strcmp(argv[1], "refuse-cma") == 0) {
        rc = run_refuse_cma(ctx, cq);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        rc = 2;
    }
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    return rc;
}
