/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * mpi_pingpong: the MPI peer of tw_perf for tools/perf-peers.sh -- the same
 * three tests, measured the same way, over whatever transport mpirun picks
 * (the script asks Open MPI for its tcp BTL). Two ranks, one thread each
 * (MPI_THREAD_SINGLE), rank 0 the initiator.
 *
 *   lat   rank 0 sends SIZE bytes, rank 1 sends them back; each round trip
 *         is timed and halved: median and average of the samples, in us.
 *   rate  rank 0 posts a window of W MPI_Isend, rank 1 a window of W
 *         MPI_Irecv (one buffer each), then a 0-byte ack from rank 1 ends
 *         the iteration; M msgs/s = iterations * W / time.
 *   bw    as rate with SIZE bytes per message; MB/s = 10^6 B/s.
 *
 *   mpirun -np 2 mpi_pingpong -x lat|rate|bw [-s SIZE] [-n ITERS] [-w W] [-W WARMUP]
 *
 * Rank 0 prints a CSV header and one row on stdout:
 *   test,size,iterations,window,lat_median_us,lat_avg_us,bw_MBps,rate_Mmsgps
 * Build: mpicc -O2 -o mpi_pingpong mpi_pingpong.c (perf-peers.sh does it).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_DATA 1
#define TAG_ACK  2

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void)
{
    fprintf(stderr, "usage: mpirun -np 2 mpi_pingpong -x lat|rate|bw [-s SIZE] [-n ITERS] "
                    "[-w WINDOW] [-W WARMUP]\n");
}

/* One ping-pong; returns half the round trip in seconds (rank 0). */
static double pingpong(int rank, char *buf, int size)
{
    double t0 = MPI_Wtime();
    if (rank == 0) {
        MPI_Send(buf, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD);
        MPI_Recv(buf, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(buf, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD);
    }
    return (MPI_Wtime() - t0) / 2;
}

/* One window of streamed messages and its ack. Rank 1 receives message i
 * into its own slot of buf (window * size bytes); rank 0 sends from slot 0. */
static void window_iter(int rank, char *buf, int size, int window, MPI_Request *req)
{
    if (rank == 0) {
        for (int i = 0; i < window; i++)
            MPI_Isend(buf, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD, &req[i]);
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
        MPI_Recv(NULL, 0, MPI_CHAR, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        for (int i = 0; i < window; i++)
            MPI_Irecv(buf + (size_t)i * (size_t)size, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD,
                      &req[i]);
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
        MPI_Send(NULL, 0, MPI_CHAR, 0, TAG_ACK, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    const char *test = "lat";
    long size = 8, iters = 0, warmup = -1, window = 32;
    int opt;
    while ((opt = getopt(argc, argv, "x:s:n:w:W:h")) != -1) {
        switch (opt) {
        case 'x':
            test = optarg;
            break;
        case 's':
            size = atol(optarg);
            break;
        case 'n':
            iters = atol(optarg);
            break;
        case 'w':
            window = atol(optarg);
            break;
        case 'W':
            warmup = atol(optarg);
            break;
        default:
            usage();
            return 2;
        }
    }
    int lat = !strcmp(test, "lat");
    if ((!lat && strcmp(test, "rate") && strcmp(test, "bw")) || size < 0 || size > (1L << 30) ||
        window < 1 || window > 4096 || iters < 0) {
        usage();
        return 2;
    }
    if (iters == 0)
        iters = lat ? 10000 : (size >= 65536 ? 100 : 5000);
    if (warmup < 0)
        warmup = iters / 10 < 1 ? 1 : (iters / 10 > 1000 ? 1000 : iters / 10);

    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (nprocs != 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, not %d\n", nprocs);
        MPI_Finalize();
        return 1;
    }
    size_t slots = (!lat && rank == 1) ? (size_t)window : 1;
    char *buf = malloc(slots * (size_t)size + 1);
    MPI_Request *req = malloc((size_t)window * sizeof *req);
    double *samples = malloc((size_t)iters * sizeof *samples);
    if (!buf || !req || !samples) {
        fprintf(stderr, "mpi_pingpong: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, rank + 1, slots * (size_t)size + 1);

    int isize = (int)size, iwin = (int)window;
    for (long i = 0; i < warmup; i++) {
        if (lat)
            pingpong(rank, buf, isize);
        else
            window_iter(rank, buf, isize, iwin, req);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (lat)
            samples[i] = pingpong(rank, buf, isize);
        else
            window_iter(rank, buf, isize, iwin, req);
    }
    double elapsed = MPI_Wtime() - t0;

    if (rank == 0) {
        double med = 0, avg = 0, bw = 0, rate = 0;
        if (lat) {
            for (long i = 0; i < iters; i++)
                avg += samples[i];
            avg = avg / (double)iters * 1e6;
            qsort(samples, (size_t)iters, sizeof *samples, cmp_double);
            med = (iters % 2 ? samples[iters / 2]
                             : (samples[iters / 2 - 1] + samples[iters / 2]) / 2) *
                  1e6;
            bw = (double)size / (avg / 1e6) / 1e6;
            rate = 1 / avg;
        } else {
            double msgs = (double)iters * (double)window;
            med = avg = elapsed / msgs * 1e6;
            bw = msgs * (double)size / elapsed / 1e6;
            rate = msgs / elapsed / 1e6;
        }
        printf("test,size,iterations,window,lat_median_us,lat_avg_us,bw_MBps,rate_Mmsgps\n");
        printf("%s,%ld,%ld,%ld,%.3f,%.3f,%.2f,%.4f\n", test, size, iters, lat ? 1L : window, med,
               avg, bw, rate);
    }
    free(samples);
    free(req);
    free(buf);
    MPI_Finalize();
    return 0;
}
