/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A threaded 2-D stencil: Jacobi iterations of the heat equation on an
 * NX x NY grid (the top edge held at 1, the other edges at 0), split into
 * horizontal strips, one per thread of every process (P x T strips).
 *
 * Each step, every thread
 *   1. posts the receives of its two halo rows (from the strips above and
 *      below, wherever they live: another thread of this process or
 *      another process -- tw_recv does not care),
 *   2. sends its first and last rows to those neighbours,
 *   3. computes the interior of its strip, which needs no halo, while the
 *      progress threads move the rows,
 *   4. waits for the four operations -- in tw_cq_wait (--wait, the
 *      default) or in a tw_cq_poll loop (--poll, as MPI codes spin on
 *      MPI_Test; in manual mode, TW_PROGRESS_THREADS=0, it drives
 *      tw_progress itself),
 *   5. computes its first and last rows from the halos,
 *   6. adds its part of the residual (the sum of the squared changes); the
 *      threads of a process combine theirs in thread order and thread 0
 *      runs one tw_allreduce over the job, so every thread of every
 *      process sees the same residual bits.
 *
 * Before the run, a few steps without computation time the exchange alone;
 * the run times the computing and each step's exchange and computing
 * together, and reports how much the progress threads hid (report()). After
 * the run, every process computes the same grid serially and checks its
 * strips bit for bit, and the residual.
 *
 *   twrun -n 2 stencil [-t THREADS] [-x NX] [-y NY] [-s STEPS] [--poll]
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <threadwire/threadwire.h>

#define MAX_THREADS        64
#define CALIBRATION_WARMUP 5 /* the first exchanges connect: not timed */
#define CALIBRATION_STEPS  20

/* Tags: bit 32 the direction (0: a row going down, 1: going up), the
 * step above it, the receiving strip below. */
#define TAG(step, dir, strip) ((uint64_t)(step) << 33 | (uint64_t)(dir) << 32 | (uint64_t)(strip))

static struct {
    int nx, ny, steps, threads;
    bool poll;
} opt = {.nx = 1024, .ny = 1024, .steps = 100, .threads = 4};

static tw_context_t *ctx;
static int rank, size, nstrips;
static bool manual;
static pthread_barrier_t barrier;
static double partial[MAX_THREADS]; /* residual parts; between the barriers */
static double residual;             /* the step's global residual, by thread 0 */
static tw_status_t failure = TW_OK; /* the first error of any thread, under barrier order */
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;

/* The threads wait behind this lock until all of them, in every process,
 * have started: a strip whose thread failed to start would leave its
 * neighbours waiting for halos and the others in the barrier forever. */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static bool start_ok; /* written by main under start_lock */

typedef struct strip {
    int index, thread;
    int y0, rows;      /* first global row of the interior, number of rows */
    double *cur, *nxt; /* (rows + 2) x (nx + 2), halos and edges included */
    tw_cq_t *cq;
    uint64_t alone_ns;         /* the calibration: exchanges alone, posted to done */
    uint64_t step_ns, comp_ns; /* the run: steps 1-5, and the computing in them */
    uint64_t run_ns;           /* the run, every step whole */
    pthread_t th;
} strip_t;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fail(tw_status_t st, const char *what)
{
    pthread_mutex_lock(&failure_lock);
    if (failure == TW_OK) {
        failure = st;
        fprintf(stderr, "stencil: rank %d: %s: %s\n", rank, what, tw_strerror(st));
    }
    pthread_mutex_unlock(&failure_lock);
}

static bool failed(void)
{
    bool f;

    pthread_mutex_lock(&failure_lock);
    f = failure != TW_OK;
    pthread_mutex_unlock(&failure_lock);
    return f;
}

#define AT(g, i, j) ((g)[(size_t)(i) * (size_t)(opt.nx + 2) + (size_t)(j)])

/* The fixed edges of a grid whose row 0 is global row y0 - 1. */
static void set_edges(double *g, int y0, int rows)
{
    for (int i = 0; i < rows + 2; i++) {
        int y = y0 - 1 + i;
        for (int j = 0; j < opt.nx + 2; j++) {
            bool top = y == 0, edge = y == opt.ny + 1 || j == 0 || j == opt.nx + 1;
            AT(g, i, j) = top ? 1.0 : edge ? 0.0 : AT(g, i, j);
        }
    }
}

/* Rows [from, to] of @p g into @p out; @return the sum of squared changes. */
static double relax(const double *g, double *out, int from, int to)
{
    double sum = 0;

    for (int i = from; i <= to; i++) {
        for (int j = 1; j <= opt.nx; j++) {
            double v =
                0.25 * (AT(g, i - 1, j) + AT(g, i + 1, j) + AT(g, i, j - 1) + AT(g, i, j + 1));
            double d = v - AT(g, i, j);
            AT(out, i, j) = v;
            sum += d * d;
        }
    }
    return sum;
}

/* Post, and on TW_ERR_AGAIN (a full ring: the peer is behind) progress
 * and post again. */
#define POST(call)                               \
    ({                                           \
        tw_status_t st_;                         \
        while ((st_ = (call)) == TW_ERR_AGAIN) { \
            if (manual) {                        \
                tw_progress(ctx);                \
            }                                    \
        }                                        \
        st_;                                     \
    })

/* Steps 1 and 2: the halo receives and the boundary sends of @p step.
 * @return the operations posted. */
static int exchange_post(strip_t *s, int step)
{
    size_t row = (size_t)opt.nx + 2, bytes = row * sizeof(double);
    int posted = 0;
    tw_status_t st = TW_OK;

    for (int dir = 0; dir < 2 && st == TW_OK; dir++) {
        /* dir 0: the strip above sends down into our top halo */
        int from = s->index + (dir == 0 ? -1 : 1);
        if (from < 0 || from >= nstrips) {
            continue;
        }
        double *halo = dir == 0 ? s->cur : s->cur + (size_t)(s->rows + 1) * row;
        st = POST(tw_recv(ctx, from / opt.threads, TAG(step, dir, s->index), 0, halo, bytes, s->cq,
                          NULL));
        posted += st == TW_OK;
    }
    for (int dir = 0; dir < 2 && st == TW_OK; dir++) {
        /* dir 0: our last row down to the strip below */
        int to = s->index + (dir == 0 ? 1 : -1);
        if (to < 0 || to >= nstrips) {
            continue;
        }
        const double *mine = s->cur + (size_t)(dir == 0 ? s->rows : 1) * row;
        st = POST(tw_send(ctx, to / opt.threads, TAG(step, dir, to), mine, bytes, s->cq, NULL));
        posted += st == TW_OK;
    }
    if (st != TW_OK) {
        fail(st, "posting the halo exchange");
    }
    return posted;
}

/* Step 4: wait for @p n completions. */
static void exchange_wait(strip_t *s, int n)
{
    tw_completion_t c[4];

    while (n > 0 && !failed()) {
        int got = opt.poll ? tw_cq_poll(s->cq, c, 4) : tw_cq_wait(s->cq, c, 4, 100);
        if (got == 0 && opt.poll && manual) {
            tw_progress(ctx);
        }
        for (int k = 0; k < got; k++) {
            if (c[k].status != TW_OK) {
                fail(c[k].status, c[k].op == TW_OP_RECV ? "a halo receive" : "a halo send");
            }
        }
        n -= got > 0 ? got : 0;
    }
}

/* Step 6: the threads' parts in thread order, one allreduce per process. */
static double combine(strip_t *s, double mine)
{
    partial[s->thread] = mine;
    pthread_barrier_wait(&barrier);
    if (s->thread == 0) {
        double local = 0;
        tw_status_t st;
        for (int t = 0; t < opt.threads; t++) {
            local += partial[t];
        }
        st = tw_allreduce(tw_group_world(ctx), &local, &residual, 1, TW_DOUBLE, TW_SUM);
        if (st != TW_OK) {
            fail(st, "the residual allreduce");
        }
    }
    pthread_barrier_wait(&barrier);
    return residual;
}

static void *strip_main(void *arg)
{
    strip_t *s = arg;
    bool go;

    pthread_mutex_lock(&start_lock); /* main holds it until every thread started */
    go = start_ok;
    pthread_mutex_unlock(&start_lock);
    if (!go) {
        return NULL;
    }
    /* The exchange alone, timed (the residual steps keep the ranks together). */
    for (int k = 0; k < CALIBRATION_WARMUP + CALIBRATION_STEPS && !failed(); k++) {
        uint64_t t0 = now_ns();
        exchange_wait(s, exchange_post(s, opt.steps + k)); /* tags apart from the run's */
        s->alone_ns += k < CALIBRATION_WARMUP ? 0 : now_ns() - t0;
        (void)combine(s, 0);
    }
    uint64_t start = now_ns();
    for (int step = 0; step < opt.steps && !failed(); step++) {
        uint64_t t0 = now_ns(), t1, t2;
        int n = exchange_post(s, step);
        t1 = now_ns();
        double sum = s->rows > 2 ? relax(s->cur, s->nxt, 2, s->rows - 1) : 0;
        s->comp_ns += now_ns() - t1;
        exchange_wait(s, n);
        t2 = now_ns();
        sum += relax(s->cur, s->nxt, 1, 1);
        if (s->rows > 1) {
            sum += relax(s->cur, s->nxt, s->rows, s->rows);
        }
        s->comp_ns += now_ns() - t2;
        s->step_ns += now_ns() - t0;
        (void)combine(s, sum);
        double *t = s->cur;
        s->cur = s->nxt;
        s->nxt = t;
    }
    s->run_ns = now_ns() - start;
    return NULL;
}

/* The same grid and steps, serially: compare every strip of this process
 * bit for bit and the last residual (summed in another order: to 1e-12).
 * @return 0 or 1. */
static int check(strip_t *strips, double got)
{
    size_t cells = (size_t)(opt.ny + 2) * (size_t)(opt.nx + 2);
    double *a = calloc(cells, sizeof(double)), *b = calloc(cells, sizeof(double)), want = 0;
    int bad = 0;

    if (a == NULL || b == NULL) {
        fprintf(stderr, "stencil: out of memory for the serial check\n");
        free(a);
        free(b);
        return 1;
    }
    set_edges(a, 1, opt.ny);
    set_edges(b, 1, opt.ny);
    for (int step = 0; step < opt.steps; step++) {
        want = relax(a, b, 1, opt.ny);
        double *t = a;
        a = b;
        b = t;
    }
    for (int t = 0; t < opt.threads; t++) {
        strip_t *s = &strips[t];
        for (int i = 1; i <= s->rows && bad == 0; i++) {
            for (int j = 1; j <= opt.nx; j++) {
                if (memcmp(&AT(s->cur, i, j), &AT(a, s->y0 - 1 + i, j), sizeof(double)) != 0) {
                    fprintf(stderr, "stencil: rank %d: cell (%d, %d) is %.17g, serially %.17g\n",
                            rank, s->y0 - 1 + i, j, AT(s->cur, i, j), AT(a, s->y0 - 1 + i, j));
                    bad = 1;
                    break;
                }
            }
        }
    }
    want = sqrt(want);
    if (fabs(got - want) > 1e-12 * (want > 1 ? want : 1)) {
        fprintf(stderr, "stencil: rank %d: residual %.17g, serially %.17g\n", rank, got, want);
        bad = 1;
    }
    free(a);
    free(b);
    return bad;
}

/* @return true when @p mine holds in every process (one allreduce). */
static bool everyone(bool mine)
{
    int32_t in = mine, all = 0;

    return tw_allreduce(tw_group_world(ctx), &in, &all, 1, TW_INT32, TW_MIN) == TW_OK && all == 1;
}

static int parse(int argc, char **argv)
{
    static const struct option longs[] = {{"poll", no_argument, NULL, 'p'},
                                          {"wait", no_argument, NULL, 'w'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c;

    while ((c = getopt_long(argc, argv, "t:x:y:s:h", longs, NULL)) != -1) {
        switch (c) {
        case 't':
            opt.threads = atoi(optarg);
            break;
        case 'x':
            opt.nx = atoi(optarg);
            break;
        case 'y':
            opt.ny = atoi(optarg);
            break;
        case 's':
            opt.steps = atoi(optarg);
            break;
        case 'p':
            opt.poll = true;
            break;
        case 'w':
            opt.poll = false;
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: twrun -n P stencil [-t THREADS (4)] [-x NX (1024)] [-y NY (1024)] "
                    "[-s STEPS (100)] [--wait | --poll]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (opt.threads < 1 || opt.threads > MAX_THREADS || opt.nx < 1 || opt.ny < 1 || opt.steps < 1) {
        fprintf(stderr, "stencil: want 1..%d threads, a grid of at least 1 x 1, 1 step or more\n",
                MAX_THREADS);
        return 2;
    }
    return -1;
}

/* The strips of this process: rows, grids, CQs. @return 0 or 1. */
static int setup(strip_t *strips)
{
    for (int t = 0; t < opt.threads; t++) {
        strip_t *s = &strips[t];
        size_t cells;
        tw_status_t st;

        s->thread = t;
        s->index = rank * opt.threads + t;
        s->y0 = 1 + (int)((int64_t)s->index * opt.ny / nstrips);
        s->rows = 1 + (int)((int64_t)(s->index + 1) * opt.ny / nstrips) - s->y0;
        cells = (size_t)(s->rows + 2) * (size_t)(opt.nx + 2);
        s->cur = calloc(cells, sizeof(double));
        s->nxt = calloc(cells, sizeof(double));
        if (s->cur == NULL || s->nxt == NULL) {
            fprintf(stderr, "stencil: out of memory\n");
            return 1;
        }
        set_edges(s->cur, s->y0, s->rows);
        set_edges(s->nxt, s->y0, s->rows);
        if ((st = tw_cq_create(ctx, 16, &s->cq)) != TW_OK) {
            fprintf(stderr, "stencil: tw_cq_create: %s\n", tw_strerror(st));
            return 1;
        }
    }
    return 0;
}

/* Rank 0's threads, averaged: the exchange alone (comm), the computing
 * (comp) and the two together (both) per step; hidden is the share of the
 * shorter of comm and comp that running them together saved,
 * (comm + comp - both) / min(comm, comp), as tw_perf's overlap. */
static void report(strip_t *strips, double secs, int bad)
{
    double alone = 0, comp = 0, both = 0, hidden;

    for (int t = 0; t < opt.threads; t++) {
        alone += (double)strips[t].alone_ns / CALIBRATION_STEPS;
        comp += (double)strips[t].comp_ns / opt.steps;
        both += (double)strips[t].step_ns / opt.steps;
    }
    alone /= opt.threads * 1e3;
    comp /= opt.threads * 1e3;
    both /= opt.threads * 1e3;
    hidden = (alone + comp - both) / (alone < comp ? alone : comp);
    hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
    printf("stencil: %d processes x %d threads, %d x %d grid, %d steps, %s, %s progress\n", size,
           opt.threads, opt.nx, opt.ny, opt.steps, opt.poll ? "poll loop" : "tw_cq_wait",
           manual ? "manual" : "thread");
    printf("  residual %.6e after %d steps: %s\n", residual, opt.steps,
           bad ? "DIFFERS from the serial computation"
               : "the grid and residual match the serial computation");
    printf("  %.1f steps/s; per step: halo exchange alone %.1f us, computing %.1f us, both "
           "%.1f us: %.0f %% of the shorter hidden\n",
           opt.steps / secs, alone, comp, both, hidden * 100);
}

int main(int argc, char **argv)
{
    tw_config_t cfg;
    tw_status_t st;
    strip_t *strips;
    int rc = parse(argc, argv), bad;

    if (rc >= 0) {
        return rc;
    }
    tw_config_init(&cfg);
    if ((st = tw_init(&cfg, &ctx)) != TW_OK) {
        fprintf(stderr, "stencil: tw_init: %s\n", tw_strerror(st));
        return 1;
    }
    rank = tw_rank(ctx);
    size = tw_size(ctx);
    nstrips = size * opt.threads;
    {
        const char *p = getenv("TW_PROGRESS_THREADS");
        manual = p != NULL && strcmp(p, "0") == 0;
    }
    strips = calloc((size_t)opt.threads, sizeof(*strips));
    if (nstrips > opt.ny) {
        fprintf(stderr, "stencil: %d strips for %d rows: make the grid taller (-y)\n", nstrips,
                opt.ny);
        rc = 2;
    } else if (strips == NULL || setup(strips) != 0) {
        rc = 1;
    }
    if (rc < 0) {
        int started = 0;
        pthread_barrier_init(&barrier, NULL, (unsigned)opt.threads);
        pthread_mutex_lock(&start_lock);
        for (; started < opt.threads; started++) {
            int err = pthread_create(&strips[started].th, NULL, strip_main, &strips[started]);
            if (err != 0) {
                fprintf(stderr, "stencil: rank %d: pthread_create of thread %d: %s\n", rank,
                        started, strerror(err));
                break;
            }
        }
        start_ok = everyone(started == opt.threads);
        pthread_mutex_unlock(&start_lock);
        for (int t = 0; t < started; t++) {
            pthread_join(strips[t].th, NULL);
        }
        pthread_barrier_destroy(&barrier);
        if (!start_ok) {
            if (started == opt.threads) {
                fprintf(stderr, "stencil: rank %d: a thread of another process did not start\n",
                        rank);
            }
            rc = 1;
        }
    }
    if (rc < 0) {
        double secs = (double)strips[0].run_ns / 1e9;
        bad = failed() || check(strips, sqrt(residual));
        residual = sqrt(residual);
        if (!failed()) {
            /* every process's verdict, so that rank 0 speaks for the grid */
            int mine = bad;
            if ((st = tw_allreduce(tw_group_world(ctx), &mine, &bad, 1, TW_INT32, TW_MAX)) !=
                TW_OK) {
                fail(st, "the verdict allreduce");
                bad = 1;
            } else if (rank == 0) {
                report(strips, secs, bad);
            }
        }
        rc = bad;
    }
    for (int t = 0; strips != NULL && t < opt.threads; t++) {
        if (strips[t].cq != NULL) {
            tw_cq_destroy(strips[t].cq);
        }
        free(strips[t].cur);
        free(strips[t].nxt);
    }
    free(strips);
    if ((st = tw_finalize(ctx)) != TW_OK) {
        fprintf(stderr, "stencil: tw_finalize: %s\n", tw_strerror(st));
        rc = 1;
    }
    return rc;
}
