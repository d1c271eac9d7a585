/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Statistics (median, aggregate over threads) and output: the banner, the
 * table or CSV rows, the library's counters. The table's columns and the
 * CSV's are a contract: tools/perf-*.sh and BENCHMARKS.md read them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* ---- statistics -------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static perf_result_t worker_result(perf_worker_t *w, const perf_run_t *r)
{
    perf_result_t res;
    /* lat: a message each way per iteration; put_lat, get_lat: one
     * operation; the others: a window of them. */
    uint64_t msgs = test_is_pingpong(r->test) ? 2 * r->iters
                    : test_is_lat(r->test)    ? r->iters
                                              : r->iters * r->window;
    double sum = 0, secs = (double)w->elapsed_ns * 1e-9;

    res.lat_min = res.lat_max = w->samples[0];
    for (uint64_t i = 0; i < r->iters; i++) {
        sum += w->samples[i];
        res.lat_min = w->samples[i] < res.lat_min ? w->samples[i] : res.lat_min;
        res.lat_max = w->samples[i] > res.lat_max ? w->samples[i] : res.lat_max;
    }
    res.lat_avg = sum / (double)r->iters / 1e3;
    res.lat_min /= 1e3;
    res.lat_max /= 1e3;
    res.lat_med = median_of(w->samples, r->iters) / 1e3;
    if (secs <= 0) {
        secs = 1e-9;
    }
    res.mbps = (double)msgs * (double)r->size / secs / 1e6;
    res.mmps = (double)msgs / secs / 1e6;
    return res;
}

/* Sums of bandwidth and rate; median of the thread medians. */
static perf_result_t aggregate(const perf_result_t *res, int n)
{
    perf_result_t a = res[0];
    double *med = malloc((size_t)n * sizeof(*med));
    double sum_avg = 0;

    a.mbps = a.mmps = 0;
    for (int i = 0; i < n; i++) {
        a.mbps += res[i].mbps;
        a.mmps += res[i].mmps;
        sum_avg += res[i].lat_avg;
        a.lat_min = res[i].lat_min < a.lat_min ? res[i].lat_min : a.lat_min;
        a.lat_max = res[i].lat_max > a.lat_max ? res[i].lat_max : a.lat_max;
        if (med != NULL) {
            med[i] = res[i].lat_med;
        }
    }
    a.lat_avg = sum_avg / n;
    if (med != NULL) {
        a.lat_med = median_of(med, (size_t)n);
        free(med);
    }
    return a;
}

/* ---- output ------------------------------------------------------------ */

void perf_print_header(void)
{
    if (g_opts.csv) {
        printf("test,size,threads,thread,iterations,warmup,window,lat_median_us,lat_avg_us,"
               "lat_min_us,lat_max_us,bw_MBps,rate_Mmsgps\n");
        return;
    }
    printf("%-7s %9s %7s %6s %9s %6s %10s %10s %10s %10s %11s %9s\n", "test", "size", "threads",
           "thread", "iters", "window", "median(us)", "avg(us)", "min(us)", "max(us)", "bw(MB/s)",
           "Mmsg/s");
}

static void print_row(const perf_run_t *r, const char *thread, const perf_result_t *res)
{
    unsigned wnd = test_is_lat(r->test) ? 1 : r->window;

    if (g_opts.csv) {
        printf("%s,%zu,%d,%s,%" PRIu64 ",%" PRIu64 ",%u,%.3f,%.3f,%.3f,%.3f,%.2f,%.4f\n",
               test_names[r->test], r->size, g_opts.threads, thread, r->iters, r->warmup, wnd,
               res->lat_med, res->lat_avg, res->lat_min, res->lat_max, res->mbps, res->mmps);
        return;
    }
    printf("%-7s %9zu %7d %6s %9" PRIu64 " %6u %10.3f %10.3f %10.3f %10.3f %11.2f %9.4f\n",
           test_names[r->test], r->size, g_opts.threads, thread, r->iters, wnd, res->lat_med,
           res->lat_avg, res->lat_min, res->lat_max, res->mbps, res->mmps);
}

/* overlap: what share of the shorter of communication and computation the
 * two running together hid -- (comm + compute - both) / min(comm, compute),
 * medians over the threads, 0 when nothing overlapped, 1 when the shorter
 * one vanished entirely. A '#' line: on stdout with the table, on stderr
 * with --csv (the CSV stays rows only). */
static void print_overlap(perf_worker_t *ws, const perf_result_t *all)
{
    double *v = malloc(2 * (size_t)g_opts.threads * sizeof(*v));
    double comm, compute, both = all->lat_med, share;

    if (v == NULL) {
        return;
    }
    for (int i = 0; i < g_opts.threads; i++) {
        v[i] = ws[i].comm_ns / 1e3;
        v[g_opts.threads + i] = ws[i].compute_ns / 1e3;
    }
    comm = median_of(v, (size_t)g_opts.threads);
    compute = median_of(v + g_opts.threads, (size_t)g_opts.threads);
    free(v);
    share = (comm + compute - both) / (comm < compute ? comm : compute);
    share = share < 0 ? 0 : share > 1 ? 1 : share;
    fprintf(g_opts.csv ? stderr : stdout,
            "# overlap: round trip alone %.1f us, computation %.1f us, both %.1f us: %.0f %% of "
            "the shorter hidden (%s progress)\n",
            comm, compute, both, share * 100, g_manual ? "manual" : "thread");
}

/* Pairs of processes: every initiator's aggregate to rank 0, which fills
 * @p pairs (g_npairs of them; its own is @p mine). @return EXIT_OK or
 * EXIT_FAIL (said why). */
static int gather_pairs(const perf_result_t *mine, perf_result_t *pairs)
{
    tw_completion_t c[8];
    tw_cq_t *cq;
    tw_status_t st = TW_OK;
    int want = g_rank == 0 ? g_npairs - 1 : 1, done = 0;
    uint64_t idle_since = coarse_ns();

    if ((st = tw_cq_create(g_ctx, (unsigned)want, &cq)) != TW_OK) {
        fprintf(stderr, "tw_perf: rank %d: tw_cq_create: %s\n", g_rank, tw_strerror(st));
        return EXIT_FAIL;
    }
    pairs[0] = *mine;
    for (int i = 1; st == TW_OK && i < g_npairs && g_rank == 0; i++) {
        st = tw_recv(g_ctx, i, TAG_RESULT, 0, &pairs[i], sizeof(pairs[i]), cq, NULL);
    }
    if (st == TW_OK && g_rank != 0) {
        st = tw_send(g_ctx, 0, TAG_RESULT, mine, sizeof(*mine), cq, NULL);
    }
    while (st == TW_OK && done < want) {
        int n = tw_cq_wait(cq, c, 8, PERF_WAIT_MS);
        for (int k = 0; k < n; k++) {
            if (c[k].status != TW_OK ||
                (c[k].op == TW_OP_RECV && c[k].length != sizeof(perf_result_t))) {
                st = c[k].status != TW_OK ? c[k].status : TW_ERR_TRUNCATED;
            }
        }
        done += n > 0 ? n : 0;
        if (n > 0) {
            idle_since = coarse_ns();
        } else if ((double)(coarse_ns() - idle_since) / 1e9 > g_opts.timeout_s) {
            st = TW_ERR_TIMEOUT;
        }
    }
    if (st != TW_OK) {
        fprintf(stderr, "tw_perf: rank %d: the pairs' results (%d of %d): %s\n", g_rank, done, want,
                tw_strerror(st));
    }
    perf_cq_close(cq);
    return st == TW_OK ? EXIT_OK : EXIT_FAIL;
}

/* An initiator, after run @p r: a row per thread (with -t > 1) and the
 * 'all' row; with pairs of processes, rank 0 prints a row per pair (the
 * aggregate of its threads) and the 'all' row over the pairs, the other
 * initiators send it theirs. @p res has room for a result per thread.
 * @return EXIT_OK or EXIT_FAIL (said why). */
int perf_report_run(perf_worker_t *ws, const perf_run_t *r, perf_result_t *res)
{
    perf_result_t all;

    for (int i = 0; i < g_opts.threads; i++) {
        res[i] = worker_result(&ws[i], r);
    }
    all = aggregate(res, g_opts.threads);
    if (g_npairs > 1) {
        perf_result_t *pairs = calloc((size_t)g_npairs, sizeof(*pairs));
        if (pairs == NULL || gather_pairs(&all, pairs) != EXIT_OK) {
            free(pairs);
            return EXIT_FAIL;
        }
        if (g_rank != 0) {
            free(pairs);
            return EXIT_OK;
        }
        for (int i = 0; i < g_npairs; i++) {
            char id[16];
            snprintf(id, sizeof(id), "pair%d", i);
            print_row(r, id, &pairs[i]);
        }
        all = aggregate(pairs, g_npairs);
        free(pairs);
    }
    for (int i = 0; g_npairs == 1 && g_opts.threads > 1 && i < g_opts.threads; i++) {
        char id[16];
        snprintf(id, sizeof(id), "%d", i);
        print_row(r, id, &res[i]);
    }
    print_row(r, "all", &all);
    if (r->test == TEST_OVERLAP) {
        print_overlap(ws, &all);
    }
    fflush(stdout);
    return EXIT_OK;
}

/* The environment variables that override tw_perf's library options. */
static const struct {
    const char *name, *option;
} env_knobs[] = {{"TW_TRANSPORTS", "-T"}, {"TW_PROGRESS_THREADS", "-p"}, {"TW_WAIT_MODE", "-m"}};

static const char *wait_name(tw_wait_mode_t m)
{
    return m == TW_WAIT_SPIN ? "spin" : m == TW_WAIT_BLOCK ? "block" : "adaptive";
}

static const char *loop_name(void)
{
    static char buf[32];
    if (g_opts.loop == PERF_LOOP_COMPUTE) {
        snprintf(buf, sizeof(buf), "compute:%u", g_opts.compute_us);
        return buf;
    }
    return g_opts.loop == PERF_LOOP_POLL ? "poll" : "wait";
}

/* The initiator, table output: the configuration, and which of tw_perf's library
 * options the environment overrides. */
void perf_print_banner(void)
{
    char ranks[64];
    const char *pairs = g_size > 1     ? ranks
                        : g_opts.split ? "initiator thread <-> responder thread"
                                       : "each thread its own partner";

    if (g_npairs > 1) {
        snprintf(ranks, sizeof(ranks), "%d pairs at once: rank i <-> rank i + %d", g_npairs,
                 g_npairs);
    } else {
        snprintf(ranks, sizeof(ranks), "rank %d <-> rank %d%s", g_opts.pair[0], g_opts.pair[1],
                 g_size > 2 ? ", the others bystanders" : "");
    }
    printf("# tw_perf: %d process%s (%s), %d pair%s of threads; transports %s, progress "
           "threads %d%s, wait %s, loop %s\n",
           g_size, g_size > 1 ? "es" : "", pairs, g_opts.threads, g_opts.threads > 1 ? "s" : "",
           g_opts.transports != NULL ? g_opts.transports : "all usable", g_opts.progress_threads,
           g_opts.progress_threads < 0    ? " (auto)"
           : g_opts.progress_threads == 0 ? " (manual)"
                                          : "",
           wait_name(g_opts.wait_mode), loop_name());
    for (size_t i = 0; i < sizeof(env_knobs) / sizeof(env_knobs[0]); i++) {
        const char *v = getenv(env_knobs[i].name);
        if (v != NULL) {
            printf("# note: %s=%s in the environment overrides %s\n", env_knobs[i].name, v,
                   env_knobs[i].option);
        }
    }
}

/* --stats[=json]: the library's counters on stderr, in one write per rank, so
 * the ranks' reports do not interleave. */
void perf_print_stats(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem != NULL) {
        (void)(g_opts.stats == PERF_STATS_JSON ? tw_stats_json(g_ctx, mem)
                                               : tw_stats_print(g_ctx, mem));
        fclose(mem);
        fwrite(text, 1, len, stderr);
        free(text);
    } else {
        fprintf(stderr, "tw_perf: --stats: cannot buffer the report: %s\n", strerror(errno));
    }
}
