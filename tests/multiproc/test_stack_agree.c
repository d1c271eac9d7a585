/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Ranks must agree on the layers every rank runs (TW_TL_CAP_JOB_WIDE:
 * reliability): run as `twrun -n N test_stack_agree MODE`.
 *   mismatch  rank 0 turns reliability on, the others leave it off: every
 *             rank's tw_init fails with TW_ERR_INVALID (each sees the
 *             other side's address blob disagree), none hangs;
 *   agree     every rank turns it on: tw_init succeeds, and a message goes
 *             round the ring through it.
 */
#include <stdio.h>
#include <string.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

int main(int argc, char **argv)
{
    const char *r = getenv("TW_RANK");
    bool mismatch = argc > 1 && strcmp(argv[1], "mismatch") == 0;
    tw_context_t *ctx = NULL;
    tw_config_t cfg;
    int rank;

    if (r == NULL || argc != 2 || (!mismatch && strcmp(argv[1], "agree") != 0)) {
        printf("skipped: run me under twrun as test_stack_agree mismatch|agree\n");
        return TWT_SKIP;
    }
    rank = atoi(r);
    tw_config_init(&cfg);
    cfg.reliable = !mismatch || rank == 0;
    tw_status_t st = tw_init(&cfg, &ctx);
    if (mismatch) {
        TWT_RANK_CHECK(rank, st == TW_ERR_INVALID, "tw_init: %s, want TW_ERR_INVALID",
                       tw_strerror(st));
        printf("rank %d: reliability %s: refused as it must be\n", rank,
               cfg.reliable ? "on" : "off");
        return 0;
    }
    TWT_RANK_CHECK(rank, st == TW_OK, "tw_init: %s", tw_strerror(st));
    int size = tw_size(ctx), to = (rank + 1) % size, from = (rank + size - 1) % size;
    uint64_t out = 0x5eed0000u + (uint64_t)rank, in = 0;
    tw_cq_t *cq;
    tw_completion_t c[2];
    TWT_EQ(tw_cq_create(ctx, 8, &cq), TW_OK);
    TWT_EQ(tw_recv(ctx, from, 9, 0, &in, sizeof(in), cq, &in), TW_OK);
    TWT_EQ(tw_send(ctx, to, 9, &out, sizeof(out), cq, &out), TW_OK);
    for (int got = 0; got < 2;) {
        int n = tw_cq_wait(cq, c, 2, 20000);
        TWT_RANK_CHECK(rank, n > 0, "no completion in 20 s");
        for (int i = 0; i < n; i++) {
            TWT_EQ(c[i].status, TW_OK);
        }
        got += n;
    }
    TWT_EQ(in, 0x5eed0000u + (uint64_t)from);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(tw_finalize(ctx), TW_OK);
    printf("rank %d: reliability on everywhere: ok\n", rank);
    return 0;
}
