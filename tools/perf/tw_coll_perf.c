/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_coll_perf: collective latency over threadwire's public API, the loop
 * of the OSU micro-benchmarks; the same loop, options and output as its MPI
 * peer tools/bench-peers/mpi_coll.c, both built on coll_bench.h (which says
 * what is timed and documents the output line by line).
 *
 *   twrun -n N tw_coll_perf [-c barrier|bcast|reduce|allreduce|iallreduce]
 *          [-m MIN:MAX] [-i ITERS] [-x WARMUP] [-t THREADS] [-P PROBES]
 *
 * Each benchmark thread runs on its own group of every rank of the job,
 * made with tw_group_create (key = the thread's index, also with one
 * thread), and its own CQ: tw_barrier, tw_bcast, tw_reduce, tw_allreduce
 * (TW_DOUBLE, TW_SUM, root 0), the barrier between iterations a
 * tw_barrier on that group. iallreduce posts tw_iallreduce and takes its
 * completion (TW_OP_COLL) with tw_progress + tw_cq_poll -- during the
 * computation with -P, and in a poll loop after it -- as MPI_Test both
 * drives progress and looks: the progress threads drive the collective,
 * and a test moves it on too while engine 0 is idle (in manual mode,
 * TW_PROGRESS_THREADS=0, only the tests do). The report's reductions go
 * over tw_group_world.
 * The library's configuration comes from TW_* variables (tw_info lists
 * them): TW_PROGRESS_THREADS, TW_WAIT_MODE, TW_NODE_ID, ...
 * One line per size on rank 0's stdout:
 *   coll,tw,OP,BYTES,PROCS,THREADS,ITERS,AVG_US,MIN_US,MAX_US,RATE_KOPS,
 *   OVERALL_US,COMPUTE_US,OVERLAP_PCT
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, posix_memalign, pthread barriers */
#include <threadwire/threadwire.h>

#include "coll_bench.h"

typedef struct tw_handle {
    tw_group_t *g;
    tw_cq_t *cq;
    bool done; /* the posted iallreduce completed */
} tw_handle_t;

static tw_context_t *g_ctx;
static int g_rank;
static bool g_manual; /* TW_PROGRESS_THREADS=0: the polls drive progress */

static int tw_ok(tw_status_t st, const char *what)
{
    if (st != TW_OK) {
        fprintf(stderr, "tw_coll_perf: rank %d: %s: %s\n", g_rank, what, tw_strerror(st));
        return -1;
    }
    return 0;
}

static int twc_coll(void *hv, cb_coll_t c, const void *sbuf, void *rbuf, size_t bytes)
{
    tw_group_t *g = ((tw_handle_t *)hv)->g;
    size_t count = bytes / sizeof(double);

    switch (c) {
    case CB_BARRIER:
        return tw_ok(tw_barrier(g), "tw_barrier");
    case CB_BCAST:
        return tw_ok(tw_bcast(g, rbuf, bytes, 0), "tw_bcast");
    case CB_REDUCE:
        return tw_ok(tw_reduce(g, sbuf, rbuf, count, TW_DOUBLE, TW_SUM, 0), "tw_reduce");
    case CB_ALLREDUCE:
    case CB_IALLREDUCE:
        return tw_ok(tw_allreduce(g, sbuf, rbuf, count, TW_DOUBLE, TW_SUM), "tw_allreduce");
    }
    return -1;
}

static int twc_barrier(void *hv)
{
    return tw_ok(tw_barrier(((tw_handle_t *)hv)->g), "tw_barrier");
}

static int twc_ipost(void *hv, const void *sbuf, void *rbuf, size_t bytes)
{
    tw_handle_t *h = hv;

    h->done = false;
    return tw_ok(
        tw_iallreduce(h->g, sbuf, rbuf, bytes / sizeof(double), TW_DOUBLE, TW_SUM, h->cq, h),
        "tw_iallreduce");
}

static int twc_itest(void *hv)
{
    tw_handle_t *h = hv;
    tw_completion_t c;
    int n;

    if (h->done) {
        return 1;
    }
    tw_progress(g_ctx); /* as MPI_Test: drive, then look */
    if ((n = tw_cq_poll(h->cq, &c, 1)) == 0) {
        return 0;
    }
    if (n < 0 || tw_ok(c.status, "tw_iallreduce's completion") != 0) {
        return -1;
    }
    if (c.op != TW_OP_COLL || c.user != h) {
        fprintf(stderr, "tw_coll_perf: rank %d: a completion of op %d, not the collective's\n",
                g_rank, (int)c.op);
        return -1;
    }
    h->done = true;
    return 1;
}

/* A tw_cq_poll loop, as an MPI code spins in MPI_Wait. */
static int twc_iwait(void *hv)
{
    int rc;

    while ((rc = twc_itest(hv)) == 0) {
    }
    return rc < 0 ? -1 : 0;
}

static int twc_allreduce_d(double *v, int n, cb_redop_t op)
{
    tw_redop_t top = op == CB_SUM ? TW_SUM : op == CB_MIN ? TW_MIN : TW_MAX;

    return tw_ok(tw_allreduce(tw_group_world(g_ctx), v, v, (size_t)n, TW_DOUBLE, top),
                 "tw_allreduce (report)");
}

/* Thread i's group (every rank, key i) and CQ. @return 0 or -1. */
static int twc_handles(tw_handle_t *hs, int threads, int size)
{
    int *ranks = malloc((size_t)size * sizeof(int));

    if (ranks == NULL) {
        return -1;
    }
    for (int r = 0; r < size; r++) {
        ranks[r] = r;
    }
    for (int i = 0; i < threads; i++) {
        if (tw_ok(tw_group_create(g_ctx, ranks, size, (uint64_t)i, &hs[i].g), "tw_group_create") !=
                0 ||
            tw_ok(tw_cq_create(g_ctx, 4, &hs[i].cq), "tw_cq_create") != 0) {
            free(ranks);
            return -1;
        }
    }
    free(ranks);
    return 0;
}

int main(int argc, char **argv)
{
    cb_opts_t o;
    cb_ops_t ops = {.prog = "tw_coll_perf",
                    .impl = "tw",
                    .coll = twc_coll,
                    .barrier = twc_barrier,
                    .ipost = twc_ipost,
                    .itest = twc_itest,
                    .iwait = twc_iwait,
                    .allreduce_d = twc_allreduce_d};
    tw_handle_t hs[CB_MAX_THREADS] = {0};
    void *handles[CB_MAX_THREADS];
    const char *env = getenv("TW_PROGRESS_THREADS");
    int rc;

    if ((rc = cb_parse(&o, argc, argv, "tw_coll_perf", "twrun -n N tw_coll_perf")) >= 0) {
        return rc;
    }
    if (tw_ok(tw_init(NULL, &g_ctx), "tw_init") != 0) {
        return 1;
    }
    g_manual = env != NULL && strcmp(env, "0") == 0;
    ops.rank = g_rank = tw_rank(g_ctx);
    ops.size = tw_size(g_ctx);
    if (twc_handles(hs, o.threads, ops.size) != 0) {
        return 1; /* exiting stops the job */
    }
    for (int i = 0; i < o.threads; i++) {
        handles[i] = &hs[i];
    }
    rc = cb_run(&ops, &o, handles);
    for (int i = 0; i < o.threads; i++) {
        if (tw_ok(tw_group_destroy(hs[i].g), "tw_group_destroy") != 0 ||
            tw_ok(tw_cq_destroy(hs[i].cq), "tw_cq_destroy") != 0) {
            rc = 1;
        }
    }
    if (tw_ok(tw_finalize(g_ctx), "tw_finalize") != 0) {
        rc = 1;
    }
    return rc;
}
