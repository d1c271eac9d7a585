/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * mpi_coll: the MPI peer of tools/perf/tw_coll_perf.c for
 * tools/perf-coll.sh, the same loop over MPI collectives (the loop, the
 * options and the output format are in tools/perf/coll_bench.h, shared by
 * both programs):
 *
 *   mpirun -np N mpi_coll [-c barrier|bcast|reduce|allreduce|iallreduce]
 *          [-m MIN:MAX] [-i ITERS] [-x WARMUP] [-t THREADS] [-P PROBES]
 *
 * OSU-faithful: each iteration is `t0; MPI_<coll>; t1; MPI_Barrier`, the
 * report the average over ranks of each rank's mean latency (us), with the
 * min and max over ranks; MPI_DOUBLE, MPI_SUM, root 0; 1000 iterations
 * after 100 of warm-up, 100 after 10 above 8192 B. iallreduce: as
 * osu_iallreduce, the pure MPI_Iallreduce + MPI_Wait, then post, compute
 * as long, wait, and the overlap in percent (-P N: N MPI_Test calls spread
 * over the computation). -t T: MPI_THREAD_MULTIPLE, one MPI_Comm_dup of
 * MPI_COMM_WORLD per thread (also for T = 1), each thread running the loop
 * on its own communicator; RATE_KOPS sums the threads.
 * One line per size on rank 0's stdout:
 *   coll,mpi,OP,BYTES,PROCS,THREADS,ITERS,AVG_US,MIN_US,MAX_US,RATE_KOPS,
 *   OVERALL_US,COMPUTE_US,OVERLAP_PCT
 * ('#' lines are comments; coll_bench.h says what each field holds).
 * Build: mpicc -O2 -o mpi_coll tools/bench-peers/mpi_coll.c -lpthread
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, posix_memalign, pthread barriers */
#include <mpi.h>

#include "../perf/coll_bench.h"

typedef struct mpi_handle {
    MPI_Comm comm;
    MPI_Request req;
} mpi_handle_t;

static int mpi_rank;

static int mpi_ok(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "mpi_coll: rank %d: %s failed (%d)\n", mpi_rank, what, rc);
        return -1;
    }
    return 0;
}

static int mpi_coll_one(void *hv, cb_coll_t c, const void *sbuf, void *rbuf, size_t bytes)
{
    mpi_handle_t *h = hv;
    int count = (int)(bytes / sizeof(double));

    switch (c) {
    case CB_BARRIER:
        return mpi_ok(MPI_Barrier(h->comm), "MPI_Barrier");
    case CB_BCAST:
        return mpi_ok(MPI_Bcast(rbuf, (int)bytes, MPI_BYTE, 0, h->comm), "MPI_Bcast");
    case CB_REDUCE:
        return mpi_ok(MPI_Reduce(sbuf, rbuf, count, MPI_DOUBLE, MPI_SUM, 0, h->comm), "MPI_Reduce");
    case CB_ALLREDUCE:
    case CB_IALLREDUCE:
        return mpi_ok(MPI_Allreduce(sbuf, rbuf, count, MPI_DOUBLE, MPI_SUM, h->comm),
                      "MPI_Allreduce");
    }
    return -1;
}

static int mpi_barrier(void *hv)
{
    return mpi_ok(MPI_Barrier(((mpi_handle_t *)hv)->comm), "MPI_Barrier");
}

static int mpi_ipost(void *hv, const void *sbuf, void *rbuf, size_t bytes)
{
    mpi_handle_t *h = hv;

    return mpi_ok(MPI_Iallreduce(sbuf, rbuf, (int)(bytes / sizeof(double)), MPI_DOUBLE, MPI_SUM,
                                 h->comm, &h->req),
                  "MPI_Iallreduce");
}

static int mpi_itest(void *hv)
{
    int flag = 0;

    if (mpi_ok(MPI_Test(&((mpi_handle_t *)hv)->req, &flag, MPI_STATUS_IGNORE), "MPI_Test") != 0) {
        return -1;
    }
    return flag ? 1 : 0;
}

/* After a completed MPI_Test the request is MPI_REQUEST_NULL: MPI_Wait
 * returns at once. */
static int mpi_iwait(void *hv)
{
    return mpi_ok(MPI_Wait(&((mpi_handle_t *)hv)->req, MPI_STATUS_IGNORE), "MPI_Wait");
}

static int mpi_allreduce_d(double *v, int n, cb_redop_t op)
{
    MPI_Op mop = op == CB_SUM ? MPI_SUM : op == CB_MIN ? MPI_MIN : MPI_MAX;

    return mpi_ok(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, mop, MPI_COMM_WORLD),
                  "MPI_Allreduce (report)");
}

int main(int argc, char **argv)
{
    cb_opts_t o;
    cb_ops_t ops = {.prog = "mpi_coll",
                    .impl = "mpi",
                    .coll = mpi_coll_one,
                    .barrier = mpi_barrier,
                    .ipost = mpi_ipost,
                    .itest = mpi_itest,
                    .iwait = mpi_iwait,
                    .allreduce_d = mpi_allreduce_d};
    mpi_handle_t hs[CB_MAX_THREADS];
    void *handles[CB_MAX_THREADS];
    int rc, provided;

    if ((rc = cb_parse(&o, argc, argv, "mpi_coll", "mpirun -np N mpi_coll")) >= 0) {
        return rc;
    }
    MPI_Init_thread(&argc, &argv, o.threads > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
                    &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &ops.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ops.size);
    mpi_rank = ops.rank;
    if (o.threads > 1 && provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "mpi_coll: -t %d needs MPI_THREAD_MULTIPLE, this MPI gives %d\n", o.threads,
                provided);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < o.threads; i++) {
        if (mpi_ok(MPI_Comm_dup(MPI_COMM_WORLD, &hs[i].comm), "MPI_Comm_dup") != 0) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        hs[i].req = MPI_REQUEST_NULL;
        handles[i] = &hs[i];
    }
    rc = cb_run(&ops, &o, handles);
    for (int i = 0; i < o.threads; i++) {
        MPI_Comm_free(&hs[i].comm);
    }
    MPI_Finalize();
    return rc;
}
