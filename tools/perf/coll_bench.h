/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * coll_bench.h: the collective benchmark loop that tw_coll_perf (over
 * threadwire, beside this file) and mpi_coll (over MPI,
 * tools/bench-peers/mpi_coll.c) share, so both time the same thing the same
 * way. Header-only (static functions), so that mpicc can build the MPI peer
 * from its one file with nothing of threadwire; the includer supplies a
 * backend (cb_ops_t): the collective, the barrier, the nonblocking
 * allreduce and a reduction over the whole job for the report.
 *
 * The method is the OSU micro-benchmarks' (osu_allreduce, osu_iallreduce):
 * - every iteration is `t0; collective; t1; barrier`, so only the
 *   collective is timed (a barrier row times barriers back to back, as
 *   osu_barrier); a process's figure is its mean over the measured
 *   iterations; the report is the average over processes, with the minimum
 *   and maximum over them;
 * - 1000 iterations after 100 of warm-up up to 8192 B, 100 after 10 above
 *   (-i and -x set both); before the first size, unlike OSU, barriers for
 *   at least 200 ms (-S): unbound processes may share a core for the first
 *   tens of ms (cb_settle); sizes double from MIN (rounded up to a power of
 *   two) to MAX, 8 B to 1 MiB by default; reductions are of doubles, sum,
 *   and skip sizes under 8 B; roots are rank 0;
 * - iallreduce: the pure collective (post, wait) timed first, then post,
 *   compute for as long as that took (this process's own mean), wait: the
 *   overlap is 100 - (overall - compute) / pure * 100, at least 0. -P N
 *   splits the computation in N pieces, each followed by a test
 *   (MPI_Test / tw_cq_poll), whose time is taken out of the computation's
 *   as OSU's -t does. -C US computes US microseconds instead, the same
 *   for both libraries, so that their OVERALL_US compare at equal work
 *   (the overlap is still figured against each one's pure collective).
 * Unlike OSU, the buffers are checked after each size (the last result),
 * and -t T runs T threads per process, each on its own communicator or
 * group; the threads of a process start each size together.
 *
 * Output (stdout of rank 0; the format is a contract for scripts such as
 * tools/perf-coll.sh): lines starting with '#' are comments, the first of
 * them names the columns; then one line per size, comma-separated:
 *   coll,IMPL,OP,BYTES,PROCS,THREADS,ITERS,AVG_US,MIN_US,MAX_US,RATE_KOPS,
 *   OVERALL_US,COMPUTE_US,OVERLAP_PCT
 * IMPL is mpi or tw; OP the collective (-c); BYTES the message size (0 for
 * barrier); ITERS the measured iterations. AVG_US is the average over
 * processes and threads of each one's mean latency in microseconds, MIN_US
 * and MAX_US the smallest and largest of those means. RATE_KOPS is the
 * aggregate rate of a process, in thousands of collectives per second: the
 * sum over its threads of 1 / (that thread's latency averaged over the
 * processes) -- with one thread, 1000 / AVG_US. For iallreduce the last
 * three are the mean time of post + compute + wait, of the computation
 * (tests excluded), and the overlap in percent; AVG_US is then the pure
 * collective's. Otherwise OVERALL_US is the mean time of a whole
 * iteration -- the collective and the barrier after it, averaged like
 * AVG_US -- and the other two are "-". Where a library makes its members
 * wait, in the collective or in the barrier after it, moves time between
 * the two: on an oversubscribed node AVG_US says much about that (a bcast
 * root that only pushes its data returns at once, and its receivers find
 * it there), OVERALL_US is the loop's throughput.
 * -q adds, after each size's line of a blocking collective, a comment
 *   # quantiles,OP,BYTES,P50_US,P90_US,P99_US,MAX_US
 * of the single iterations' latencies: each process's and thread's own
 * quantile, the largest over them (the slowest member's tail); the means
 * above hide whether a gap between libraries is the common case or a few
 * slow iterations.
 * Exit status: 0; 1 a failed call or a wrong result (the job stops);
 * 2 a usage error.
 */
#ifndef TW_COLL_BENCH_H
#define TW_COLL_BENCH_H

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CB_MAX_THREADS 64
#define CB_LARGE       8192 /* OSU's LARGE_MESSAGE_SIZE */
#define CB_MAX_BYTES   ((size_t)1 << 30)

typedef enum cb_coll { CB_BARRIER, CB_BCAST, CB_REDUCE, CB_ALLREDUCE, CB_IALLREDUCE } cb_coll_t;
static const char *const cb_coll_names[] = {"barrier", "bcast", "reduce", "allreduce",
                                            "iallreduce"};

typedef enum cb_redop { CB_SUM, CB_MIN, CB_MAX } cb_redop_t;

typedef struct cb_opts {
    cb_coll_t coll;
    size_t min, max;
    long iters, warmup; /* -1: by size, as OSU */
    long settle_ms;     /* barriers for this long before the first size */
    int threads;
    int probes;      /* tests during an iallreduce's computation */
    long compute_us; /* iallreduce: compute this long (0: the pure collective's time) */
    bool quantiles;  /* -q: each blocking iteration's latency kept, quantiles reported */
} cb_opts_t;

/* A backend. Every call but allreduce_d runs on a benchmark thread with
 * that thread's handle; each returns 0, or -1 after printing why. */
typedef struct cb_ops {
    const char *prog; /* for messages: mpi_coll, tw_coll_perf */
    const char *impl; /* the output's IMPL column */
    int rank, size;   /* of the job */
    int (*coll)(void *h, cb_coll_t c, const void *sbuf, void *rbuf, size_t bytes);
    int (*barrier)(void *h);
    int (*ipost)(void *h, const void *sbuf, void *rbuf, size_t bytes); /* iallreduce */
    int (*itest)(void *h); /* 1 completed, 0 not yet, -1 failed */
    int (*iwait)(void *h); /* returns at once after an itest that said 1 */
    /* The main thread, between sizes: @p n doubles reduced over the job with
     * @p op, the result on every process, in place. */
    int (*allreduce_d)(double *v, int n, cb_redop_t op);
} cb_ops_t;

static inline double cb_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ---- options ---------------------------------------------------------- */

static void cb_usage(FILE *out, const char *prog, const char *launch)
{
    fprintf(out,
            "usage: %s %s [options]\n"
            "\n"
            "Collective latency after the OSU micro-benchmarks: each iteration is\n"
            "'t0; collective; t1; barrier', only the collective timed; per size, the average\n"
            "over processes of each one's mean latency, and the min and max over them.\n"
            "\n"
            "  -c COLL      barrier, bcast, reduce, allreduce or iallreduce (default\n"
            "               allreduce); reductions: doubles, sum, root 0\n"
            "  -m MIN:MAX   sizes in bytes, doubling from MIN (rounded up to a power of 2)\n"
            "               to MAX; -m MAX alone keeps MIN; suffixes k, m (default 8:1m)\n"
            "  -i ITERS     measured iterations per size (default 1000, 100 above %d B)\n"
            "  -x WARMUP    unmeasured iterations first (default 100, 10 above %d B)\n"
            "  -S MS        before the first size, barriers for at least MS ms (default\n"
            "               200; 0: none), so the first size is not measured while the\n"
            "               kernel still places the processes\n"
            "  -t THREADS   threads per process, 1..%d, each on its own communicator or\n"
            "               group; RATE_KOPS sums them (default 1)\n"
            "  -P PROBES    iallreduce: split the computation in PROBES pieces, each\n"
            "               followed by a test of the request (default 0, as OSU)\n"
            "  -C US        iallreduce: compute US microseconds, the same for every\n"
            "               library, instead of as long as the pure collective took\n"
            "               (OSU's way, the default): OVERALL_US then compares\n"
            "               libraries at equal work\n"
            "  -q           blocking collectives: after each size's line, a comment with\n"
            "               the quantiles of single iterations (P50, P90, P99, max), the\n"
            "               largest over processes and threads\n"
            "  -h           this text\n"
            "\n"
            "Output: '#' comment lines, then one line per size:\n"
            "  coll,IMPL,OP,BYTES,PROCS,THREADS,ITERS,AVG_US,MIN_US,MAX_US,RATE_KOPS,\n"
            "  OVERALL_US,COMPUTE_US,OVERLAP_PCT\n"
            "(OVERALL_US: a whole iteration, the collective and the barrier after it;\n"
            "the last two '-' except for iallreduce, where the three are its overlap\n"
            "figures; the header of coll_bench.h has the details).\n",
            prog, launch, CB_LARGE, CB_LARGE, CB_MAX_THREADS);
}

/* A size: decimal, then optionally k or m (2^10, 2^20). */
static bool cb_parse_size(const char *s, size_t *v)
{
    char *end;
    unsigned long long n;

    errno = 0;
    n = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *s == '-') {
        return false;
    }
    if (*end == 'k' || *end == 'K') {
        n <<= 10, end++;
    } else if (*end == 'm' || *end == 'M') {
        n <<= 20, end++;
    }
    if (*end != '\0' || n > CB_MAX_BYTES) {
        return false;
    }
    *v = (size_t)n;
    return true;
}

static bool cb_parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || n < lo || n > hi) {
        return false;
    }
    *v = n;
    return true;
}

static int cb_parse_sizes(cb_opts_t *o, char *arg)
{
    char *colon = strchr(arg, ':');

    if (colon == NULL) {
        return cb_parse_size(arg, &o->max) ? 0 : -1;
    }
    *colon = '\0';
    if (!cb_parse_size(arg, &o->min) || !cb_parse_size(colon + 1, &o->max)) {
        return -1;
    }
    return 0;
}

/* One option. @return 0, or -1 for a bad value. */
static int cb_parse_opt(cb_opts_t *o, int opt, char *arg)
{
    long v;

    switch (opt) {
    case 'c':
        for (int i = 0; i <= CB_IALLREDUCE; i++) {
            if (strcmp(arg, cb_coll_names[i]) == 0) {
                o->coll = (cb_coll_t)i;
                return 0;
            }
        }
        return -1;
    case 'm':
        return cb_parse_sizes(o, arg);
    case 'i':
        return cb_parse_long(arg, 1, 1L << 30, &o->iters) ? 0 : -1;
    case 'x':
        return cb_parse_long(arg, 0, 1L << 30, &o->warmup) ? 0 : -1;
    case 'S':
        return cb_parse_long(arg, 0, 60000, &o->settle_ms) ? 0 : -1;
    case 't':
        if (!cb_parse_long(arg, 1, CB_MAX_THREADS, &v)) {
            return -1;
        }
        o->threads = (int)v;
        return 0;
    case 'C':
        return cb_parse_long(arg, 1, 10000000, &o->compute_us) ? 0 : -1;
    case 'P':
        if (!cb_parse_long(arg, 0, 1000000, &v)) {
            return -1;
        }
        o->probes = (int)v;
        return 0;
    }
    return -1;
}

/* Parse the command line. @return -1 to go on, or the exit status (0 after
 * -h, 2 after a usage error, said why). */
static int cb_parse(cb_opts_t *o, int argc, char **argv, const char *prog, const char *launch)
{
    int opt;

    *o = (cb_opts_t){.coll = CB_ALLREDUCE,
                     .min = 8,
                     .max = 1 << 20,
                     .iters = -1,
                     .warmup = -1,
                     .settle_ms = 200,
                     .threads = 1};
    opterr = 0;
    while ((opt = getopt(argc, argv, ":c:m:i:x:S:t:P:C:qh")) != -1) {
        if (opt == 'h') {
            cb_usage(stdout, prog, launch);
            return 0;
        }
        if (opt == 'q') {
            o->quantiles = true;
            continue;
        }
        if (opt == ':' || opt == '?') {
            fprintf(stderr, "%s: %s -%c\n", prog,
                    opt == ':' ? "a value is missing after" : "unknown option", optopt);
            return 2;
        }
        if (cb_parse_opt(o, opt, optarg) != 0) {
            fprintf(stderr, "%s: -%c %s: bad value (%s -h lists the options)\n", prog, opt, optarg,
                    prog);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return 2;
    }
    if (o->min < 1 || o->min > o->max) {
        fprintf(stderr, "%s: -m: want 1 <= MIN <= MAX\n", prog);
        return 2;
    }
    for (size_t p = 1;; p *= 2) { /* OSU rounds MIN up to a power of two */
        if (p >= o->min) {
            o->min = p;
            break;
        }
    }
    return -1;
}

/* ---- the measurement -------------------------------------------------- */

/* What the threads of a process share; set by the main thread between the
 * two waits on bar that frame each size. */
typedef struct cb_shared {
    const cb_ops_t *ops;
    const cb_opts_t *o;
    pthread_barrier_t bar;
    size_t bytes;
    long iters, warmup;
    bool stop;
} cb_shared_t;

/* One benchmark thread: its handle, its buffers, what it measured. */
typedef struct cb_thread {
    cb_shared_t *sh;
    void *h;
    int id;
    pthread_t th;
    unsigned char *sbuf, *rbuf;
    double lat_us, overall_us, compute_us, test_us; /* means over iterations */
    double *lats;                                   /* -q: each iteration's, or NULL */
    double q[4];                                    /* -q: P50, P90, P99, max of lats */
    int bad;                                        /* a wrong result */
    volatile double sink;                           /* what cb_compute computed */
} cb_thread_t;

static void cb_fail(const cb_ops_t *ops, const char *what)
{
    fprintf(stderr, "%s: rank %d: %s failed\n", ops->prog, ops->rank, what);
    fflush(stderr);
    exit(1); /* the launcher stops the others */
}

/* Some arithmetic the compiler cannot drop (its result goes to the
 * thread's sink), for @p us microseconds by the clock, as OSU's dummy
 * compute. */
static double cb_compute(double us)
{
    double x = 1.0, t0 = cb_now_us();

    do {
        for (int i = 0; i < 64; i++) {
            x = x * 1.000000001 + 1e-12;
        }
    } while (cb_now_us() - t0 < us);
    return x;
}

/* The pattern: element j of rank r's send buffer is r + 1 + j % 7, so the
 * sum over P ranks is P (P + 1) / 2 + P (j % 7), exact in doubles; a bcast
 * carries byte b = 7 b + 1 from the root. */
static void cb_fill(cb_thread_t *t, size_t bytes)
{
    const cb_ops_t *ops = t->sh->ops;
    double *s = (double *)t->sbuf;

    for (size_t j = 0; j < bytes / sizeof(double); j++) {
        s[j] = ops->rank + 1 + (double)(j % 7);
    }
    for (size_t b = 0; b < bytes; b++) {
        t->rbuf[b] = t->sh->o->coll == CB_BCAST && ops->rank == 0 ? (unsigned char)(7 * b + 1) : 0;
    }
}

/* Whether the last iteration left the right result. */
static bool cb_check(const cb_thread_t *t, size_t bytes)
{
    const cb_ops_t *ops = t->sh->ops;
    const double *r = (const double *)t->rbuf;
    double p = ops->size;

    switch (t->sh->o->coll) {
    case CB_BARRIER:
        return true;
    case CB_BCAST:
        for (size_t b = 0; b < bytes; b++) {
            if (t->rbuf[b] != (unsigned char)(7 * b + 1)) {
                return false;
            }
        }
        return true;
    case CB_REDUCE:
        if (ops->rank != 0) {
            return true;
        }
        /* fall through */
    case CB_ALLREDUCE:
    case CB_IALLREDUCE:
        for (size_t j = 0; j < bytes / sizeof(double); j++) {
            if (r[j] != p * (p + 1) / 2 + p * (double)(j % 7)) {
                return false;
            }
        }
        return true;
    }
    return false;
}

/* Blocking collectives: the mean time of one, in us. */
static double cb_loop(cb_thread_t *t, size_t bytes, long iters, long warmup)
{
    const cb_ops_t *ops = t->sh->ops;
    cb_coll_t c = t->sh->o->coll;
    double total = 0, start = 0;

    for (long i = 0; i < warmup + iters; i++) {
        double t0 = cb_now_us();
        if (i == warmup) {
            start = t0;
        }
        if (ops->coll(t->h, c, t->sbuf, t->rbuf, bytes) != 0) {
            cb_fail(ops, cb_coll_names[c]);
        }
        double t1 = cb_now_us();
        if (i >= warmup) {
            total += t1 - t0;
            if (t->lats != NULL) {
                t->lats[i - warmup] = t1 - t0;
            }
        }
        if (c != CB_BARRIER && ops->barrier(t->h) != 0) { /* barriers back to back */
            cb_fail(ops, "barrier");
        }
    }
    t->overall_us = (cb_now_us() - start) / (double)iters; /* whole iterations */
    return total / (double)iters;
}

static int cb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* -q: the quantiles of the @p n latencies in lats (sorted here). */
static void cb_quantiles(cb_thread_t *t, long n)
{
    static const double at[3] = {0.50, 0.90, 0.99};

    qsort(t->lats, (size_t)n, sizeof(double), cb_cmp_double);
    for (int k = 0; k < 3; k++) {
        t->q[k] = t->lats[(long)(at[k] * (double)(n - 1))];
    }
    t->q[3] = t->lats[n - 1];
}

/* Test during the computation: -P pieces, each followed by a test. */
static double cb_compute_probing(cb_thread_t *t, double us, bool *done)
{
    const cb_ops_t *ops = t->sh->ops;
    int probes = t->sh->o->probes;
    double test_us = 0;

    if (probes == 0) {
        t->sink += cb_compute(us);
        return 0;
    }
    for (int k = 0; k < probes; k++) {
        t->sink += cb_compute(us / probes);
        double t0 = cb_now_us();
        int rc = *done ? 1 : ops->itest(t->h);
        test_us += cb_now_us() - t0;
        if (rc < 0) {
            cb_fail(ops, "test");
        }
        *done = rc == 1;
    }
    return test_us;
}

/* iallreduce: the pure collective (post, wait), then post, compute, wait. */
static void cb_loop_nb(cb_thread_t *t, size_t bytes, long iters, long warmup)
{
    const cb_ops_t *ops = t->sh->ops;
    double pure = 0, overall = 0, comp = 0, test = 0;

    for (long i = 0; i < warmup + iters; i++) {
        double t0 = cb_now_us();
        if (ops->ipost(t->h, t->sbuf, t->rbuf, bytes) != 0 || ops->iwait(t->h) != 0) {
            cb_fail(ops, "iallreduce");
        }
        double t1 = cb_now_us();
        pure += i >= warmup ? t1 - t0 : 0;
        if (ops->barrier(t->h) != 0) {
            cb_fail(ops, "barrier");
        }
    }
    t->lat_us = pure / (double)iters;
    for (long i = 0; i < warmup + iters; i++) {
        bool done = false;
        double t0 = cb_now_us(), tt;
        if (ops->ipost(t->h, t->sbuf, t->rbuf, bytes) != 0) {
            cb_fail(ops, "iallreduce");
        }
        double tc = cb_now_us();
        tt = cb_compute_probing(
            t, t->sh->o->compute_us > 0 ? (double)t->sh->o->compute_us : t->lat_us, &done);
        tc = cb_now_us() - tc;
        if (ops->iwait(t->h) != 0) {
            cb_fail(ops, "iallreduce wait");
        }
        double t1 = cb_now_us();
        if (i >= warmup) {
            overall += t1 - t0, comp += tc, test += tt;
        }
        if (ops->barrier(t->h) != 0) {
            cb_fail(ops, "barrier");
        }
    }
    t->overall_us = overall / (double)iters;
    t->compute_us = comp / (double)iters;
    t->test_us = test / (double)iters;
}

/* One size on one thread. */
static void cb_run_size(cb_thread_t *t)
{
    const cb_shared_t *sh = t->sh;

    cb_fill(t, sh->bytes);
    if (sh->ops->barrier(t->h) != 0) {
        cb_fail(sh->ops, "barrier");
    }
    t->overall_us = t->compute_us = t->test_us = 0;
    if (sh->o->coll == CB_IALLREDUCE) {
        cb_loop_nb(t, sh->bytes, sh->iters, sh->warmup);
    } else {
        t->lats = sh->o->quantiles ? malloc((size_t)sh->iters * sizeof(double)) : NULL;
        if (sh->o->quantiles && t->lats == NULL) {
            cb_fail(sh->ops, "allocating the latencies (-q)");
        }
        t->lat_us = cb_loop(t, sh->bytes, sh->iters, sh->warmup);
        if (t->lats != NULL) {
            cb_quantiles(t, sh->iters);
            free(t->lats);
            t->lats = NULL;
        }
    }
    t->bad = !cb_check(t, sh->bytes);
}

/* Before the first size: barriers for at least settle_ms by rank 0's
 * clock, which says when in an 8-byte bcast after every 50 (so every
 * process stops after the same one). Unbound processes may start on one
 * core and share it until the kernel's load balancer, which follows
 * load averages of tens of ms, moves one; a first size measured then
 * says more about the start than about the library. */
static void cb_settle(cb_thread_t *t)
{
    const cb_ops_t *ops = t->sh->ops;
    double until = cb_now_us() + 1e3 * (double)t->sh->o->settle_ms, stop = 0;

    while (t->sh->o->settle_ms > 0 && stop == 0) {
        for (int i = 0; i < 50; i++) {
            if (ops->barrier(t->h) != 0) {
                cb_fail(ops, "barrier");
            }
        }
        stop = ops->rank == 0 && cb_now_us() >= until ? 1 : 0;
        if (ops->coll(t->h, CB_BCAST, &stop, &stop, sizeof(stop)) != 0) {
            cb_fail(ops, "bcast");
        }
    }
}

static void *cb_thread_main(void *arg)
{
    cb_thread_t *t = arg;

    cb_settle(t);
    for (;;) {
        pthread_barrier_wait(&t->sh->bar); /* the main thread set the size, or stop */
        if (t->sh->stop) {
            return NULL;
        }
        cb_run_size(t);
        pthread_barrier_wait(&t->sh->bar); /* results ready */
    }
}

/* Reduce the threads' figures over the job and print the size's line
 * (rank 0). @return 0, or 1 when a result was wrong somewhere. */
static int cb_report(const cb_shared_t *sh, const cb_thread_t *ts)
{
    const cb_ops_t *ops = sh->ops;
    int n = sh->o->threads;
    double sum[CB_MAX_THREADS + 4] = {0}, mn[CB_MAX_THREADS], mx[CB_MAX_THREADS];
    double p = ops->size, avg = 0, lo = 1e300, hi = 0, rate = 0;

    for (int i = 0; i < n; i++) {
        sum[i] = mn[i] = mx[i] = ts[i].lat_us;
        sum[n] += ts[i].overall_us, sum[n + 1] += ts[i].compute_us;
        sum[n + 2] += ts[i].test_us, sum[n + 3] += ts[i].bad;
    }
    if (ops->allreduce_d(sum, n + 4, CB_SUM) != 0 || ops->allreduce_d(mn, n, CB_MIN) != 0 ||
        ops->allreduce_d(mx, n, CB_MAX) != 0) {
        cb_fail(ops, "the report's reduction");
    }
    if (sum[n + 3] > 0) {
        if (ops->rank == 0) {
            fprintf(stderr, "%s: %s of %zu B: a wrong result on %.0f thread(s)\n", ops->prog,
                    cb_coll_names[sh->o->coll], sh->bytes, sum[n + 3]);
        }
        return 1;
    }
    for (int i = 0; i < n; i++) {
        avg += sum[i] / (p * n);
        lo = mn[i] < lo ? mn[i] : lo;
        hi = mx[i] > hi ? mx[i] : hi;
        rate += sum[i] > 0 ? 1e3 * p / sum[i] : 0;
    }
    if (ops->rank != 0) {
        return 0;
    }
    printf("coll,%s,%s,%zu,%d,%d,%ld,%.3f,%.3f,%.3f,%.1f", ops->impl, cb_coll_names[sh->o->coll],
           sh->bytes, ops->size, n, sh->iters, avg, lo, hi, rate);
    if (sh->o->coll == CB_IALLREDUCE) {
        double overall = sum[n] / (p * n), comp = (sum[n + 1] - sum[n + 2]) / (p * n);
        double ov = avg > 0 ? 100 - (overall - comp) / avg * 100 : 0;
        printf(",%.3f,%.3f,%.1f\n", overall, comp, ov < 0 ? 0 : ov > 100 ? 100 : ov);
    } else {
        printf(",%.3f,-,-\n", sum[n] / (p * n));
    }
    fflush(stdout);
    return 0;
}

/* -q: the quantiles' line of a blocking collective's size, the largest of
 * each over the job's threads (every rank takes part in the reduction). */
static void cb_report_quantiles(const cb_shared_t *sh, const cb_thread_t *ts)
{
    const cb_ops_t *ops = sh->ops;
    double q[4] = {0};

    if (!sh->o->quantiles || sh->o->coll == CB_IALLREDUCE) {
        return;
    }
    for (int i = 0; i < sh->o->threads; i++) {
        for (int k = 0; k < 4; k++) {
            q[k] = ts[i].q[k] > q[k] ? ts[i].q[k] : q[k];
        }
    }
    if (ops->allreduce_d(q, 4, CB_MAX) != 0) {
        cb_fail(ops, "the quantiles' reduction");
    }
    if (ops->rank == 0) {
        printf("# quantiles,%s,%zu,%.3f,%.3f,%.3f,%.3f\n", cb_coll_names[sh->o->coll], sh->bytes,
               q[0], q[1], q[2], q[3]);
        fflush(stdout);
    }
}

/* Set up a size: OSU's iteration counts unless -i / -x. */
static void cb_size_counts(cb_shared_t *sh, size_t bytes)
{
    bool large = bytes > CB_LARGE;

    sh->bytes = bytes;
    sh->iters = sh->o->iters > 0 ? sh->o->iters : large ? 100 : 1000;
    sh->warmup = sh->o->warmup >= 0 ? sh->o->warmup : large ? 10 : 100;
}

/* Every size on o->threads threads of this process, handles[i] thread i's
 * (the main thread is thread 0). @return the exit status: 0, or 1 (said
 * why). */
static int cb_run(const cb_ops_t *ops, const cb_opts_t *o, void **handles)
{
    cb_shared_t sh = {.ops = ops, .o = o};
    cb_thread_t ts[CB_MAX_THREADS];
    size_t cap = o->coll == CB_BARRIER ? 64 : o->max;
    int rc = 0;

    pthread_barrier_init(&sh.bar, NULL, (unsigned)o->threads);
    for (int i = 0; i < o->threads; i++) {
        ts[i] = (cb_thread_t){.sh = &sh, .h = handles[i], .id = i};
        if (posix_memalign((void **)&ts[i].sbuf, 4096, cap) != 0 ||
            posix_memalign((void **)&ts[i].rbuf, 4096, cap) != 0) {
            cb_fail(ops, "allocating buffers");
        }
        memset(ts[i].sbuf, 0, cap);
        memset(ts[i].rbuf, 0, cap);
        if (i > 0 && pthread_create(&ts[i].th, NULL, cb_thread_main, &ts[i]) != 0) {
            cb_fail(ops, "pthread_create");
        }
    }
    cb_settle(&ts[0]);
    if (ops->rank == 0) {
        printf("# coll,impl,op,bytes,procs,threads,iters,avg_us,min_us,max_us,rate_kops,"
               "overall_us,compute_us,overlap_pct\n"
               "# %s: %s over %d processes x %d threads, OSU loop (t0; coll; t1; barrier)%s\n",
               ops->prog, cb_coll_names[o->coll], ops->size, o->threads,
               o->coll == CB_REDUCE || o->coll >= CB_ALLREDUCE ? ", doubles, sum" : "");
        fflush(stdout);
    }
    for (size_t b = o->coll == CB_BARRIER ? 0 : o->min; rc == 0 && b <= o->max; b *= 2) {
        bool reduction = o->coll == CB_REDUCE || o->coll >= CB_ALLREDUCE;
        if (reduction && b < sizeof(double)) {
            continue; /* as OSU: no reduction of less than one element */
        }
        cb_size_counts(&sh, b);
        pthread_barrier_wait(&sh.bar);
        cb_run_size(&ts[0]);
        pthread_barrier_wait(&sh.bar);
        rc = cb_report(&sh, ts);
        if (rc == 0) {
            cb_report_quantiles(&sh, ts);
        }
        if (o->coll == CB_BARRIER) {
            break;
        }
    }
    sh.stop = true;
    pthread_barrier_wait(&sh.bar);
    for (int i = 0; i < o->threads; i++) {
        if (i > 0) {
            pthread_join(ts[i].th, NULL);
        }
        free(ts[i].sbuf);
        free(ts[i].rbuf);
    }
    pthread_barrier_destroy(&sh.bar);
    return rc;
}

#endif /* TW_COLL_BENCH_H */
