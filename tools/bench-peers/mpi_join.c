/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * mpi_join: the MPI peer of tools/perf/tw_join.c for tools/perf-join.sh.
 * Every rank times its MPI_Init (CLOCK_MONOTONIC around the call) and
 * prints one line,
 *     join,mpi,RANK,SIZE,MICROSECONDS
 * then MPI_Finalize. Build: mpicc -O2 -o mpi_join mpi_join.c.
 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    int rank, size;
    double t0 = now_us();

    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "mpi_join: MPI_Init failed\n");
        return 1;
    }
    double t1 = now_us();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("join,mpi,%d,%d,%.0f\n", rank, size, t1 - t0);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
