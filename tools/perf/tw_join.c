/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_join: how long joining a job takes. Every rank times its tw_init
 * (CLOCK_MONOTONIC around the call) and prints one line,
 *     join,tw,RANK,SIZE,MICROSECONDS
 * then leaves with tw_finalize. The job joined when its slowest rank
 * did: tools/perf-join.sh takes the largest value of a run. Its Open MPI
 * peer is tools/bench-peers/mpi_join.c (MPI_Init, the same line).
 *
 *   twrun -n 4 tw_join   |   mpirun -np 4 tw_join   |   srun --mpi=pmix -n 4 tw_join
 */
#include <stdio.h>
#include <time.h>

#include "threadwire/threadwire.h"

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(void)
{
    tw_context_t *ctx;
    double t0 = now_us();
    tw_status_t st = tw_init(NULL, &ctx);
    double t1 = now_us();

    if (st != TW_OK) {
        fprintf(stderr, "tw_join: tw_init: %s\n", tw_strerror(st));
        return 1;
    }
    printf("join,tw,%d,%d,%.0f\n", tw_rank(ctx), tw_size(ctx), t1 - t0);
    fflush(stdout);
    st = tw_finalize(ctx);
    if (st != TW_OK) {
        fprintf(stderr, "tw_join: tw_finalize: %s\n", tw_strerror(st));
        return 1;
    }
    return 0;
}
