/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One PMIx job per process (run under mpirun, pmix_mpirun_test.sh): two
 * contexts live at once, each joined through PMIx with keys of its own,
 * pass messages around a ring; with one finalized the other still works;
 * once the last is finalized the process has left the job, and tw_init
 * is refused with TW_ERR_BOOTSTRAP instead of joining a job whose server
 * no longer counts it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

/* Rank r sends to r + 1 and receives from r - 1 on @p ctx. */
static void ring(tw_context_t *ctx, int tag)
{
    int n = tw_size(ctx), r = tw_rank(ctx), out = r * 100 + tag, in = -1, done = 0;
    tw_completion_t c[2];
    tw_cq_t *cq;

    TWT_EQ(tw_cq_create(ctx, 8, &cq), TW_OK);
    TWT_EQ(tw_recv(ctx, (r + n - 1) % n, (uint64_t)tag, 0, &in, sizeof(in), cq, NULL), TW_OK);
    TWT_EQ(tw_send(ctx, (r + 1) % n, (uint64_t)tag, &out, sizeof(out), cq, NULL), TW_OK);
    while (done < 2) {
        int k = tw_cq_wait(cq, c, 2, 10000);
        TWT_CHECKF(k > 0, "rank %d: ring %d stalled", r, tag);
        for (int i = 0; i < k; i++) {
            TWT_EQ(c[i].status, TW_OK);
        }
        done += k;
    }
    TWT_EQ(in, ((r + n - 1) % n) * 100 + tag);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
}

int main(void)
{
    tw_context_t *a, *b, *c;

    if (getenv("PMIX_NAMESPACE") == NULL) {
        printf("skipped: run me under a PMIx launcher (mpirun)\n");
        return TWT_SKIP;
    }
    TWT_EQ(tw_init(NULL, &a), TW_OK);
    TWT_EQ(tw_init(NULL, &b), TW_OK);
    TWT_CHECK(tw_size(a) > 1 && tw_size(b) == tw_size(a) && tw_rank(b) == tw_rank(a));
    ring(a, 1);
    ring(b, 2);
    TWT_EQ(tw_finalize(a), TW_OK);
    ring(b, 3);
    TWT_EQ(tw_finalize(b), TW_OK);
    TWT_EQ(tw_init(NULL, &c), TW_ERR_BOOTSTRAP);
    printf("pmix once: rank ok\n");
    return 0;
}
