/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_perf: point-to-point benchmarks over the public API, after UCX's
 * ucx_perftest. README.md beside this file has the overview; perf.h says
 * who plays which role, what each test times and checks, and how the
 * ranks meet between runs.
 *
 *   twrun -n 2 tw_perf [-x lat|bw|rate] [-s SIZE|MIN:MAX] [-t THREADS] ...
 *   twrun -n N tw_perf ...           (N even: N/2 pairs, rank i against rank i + N/2)
 *   twrun -n N tw_perf --pair A,B ...  (rank A against rank B, the others bystanders)
 *   tw_perf ...                      (a job of one: rank 0 is its own partner)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

tw_context_t *g_ctx;
int g_rank, g_size, g_partner;
int g_side;
int g_npairs = 1;
int g_nworkers;
bool g_manual;
atomic_bool g_abort;

/* tw_init with the options' configuration. @return EXIT_OK or EXIT_FAIL
 * (said why). */
static int job_init(void)
{
    tw_config_t cfg;
    tw_status_t st;

    tw_config_init(&cfg);
    cfg.transports = g_opts.transports;
    cfg.progress_threads = g_opts.progress_threads;
    cfg.wait_mode = g_opts.wait_mode;
    if ((st = tw_init(&cfg, &g_ctx)) != TW_OK) {
        const char *size = getenv("TW_SIZE");
        fprintf(stderr, "tw_perf: tw_init failed: %s\n", tw_strerror(st));
        if (st == TW_ERR_UNSUPPORTED && size != NULL && strcmp(size, "1") != 0) {
            fprintf(stderr,
                    "tw_perf: a job of %s processes needs a transport between processes, which "
                    "this threadwire build may lack (the log line above says why); tw_perf "
                    "alone runs a job of one\n",
                    size);
        }
        return EXIT_FAIL;
    }
    g_rank = tw_rank(g_ctx);
    g_size = tw_size(g_ctx);
    {
        const char *env = getenv("TW_PROGRESS_THREADS");
        g_manual = env != NULL ? strcmp(env, "0") == 0 : g_opts.progress_threads == 0;
    }
    return EXIT_OK;
}

static int job_setup_common(perf_ep_t *bar, perf_worker_t **ws_p);

/* The job's shape, the error handler, the workers and the CQs (the
 * barrier's in @p bar), the one-sided windows. What is made is left for
 * job_teardown, *ws_p set as soon as allocated. @return EXIT_OK or
 * EXIT_FAIL (said why). */
static int job_setup(perf_ep_t *bar, perf_worker_t **ws_p)
{
    if (g_size < 1 || (g_size > 2 && !g_opts.pair_set && g_size % 2 != 0)) {
        fprintf(stderr,
                "tw_perf: a job of %d processes: tw_perf runs a job of 1 process (each thread "
                "its own partner), of an even number N (N/2 pairs: rank i with rank i + N/2), "
                "or of any size with --pair A,B (one pair, the others bystanders)\n",
                g_size);
        return EXIT_FAIL;
    }
    if (g_size > 2 && !g_opts.pair_set) {
        g_npairs = g_size / 2;
        g_side = g_rank < g_npairs ? ROLE_A : ROLE_B;
        g_partner = g_side == ROLE_A ? g_rank + g_npairs : g_rank - g_npairs;
        return job_setup_common(bar, ws_p);
    }
    if (g_size > 1 && (g_opts.pair[0] >= g_size || g_opts.pair[1] >= g_size)) {
        fprintf(stderr, "tw_perf: --pair %d,%d: a job of %d processes has no rank %d\n",
                g_opts.pair[0], g_opts.pair[1], g_size,
                g_opts.pair[0] >= g_size ? g_opts.pair[0] : g_opts.pair[1]);
        return EXIT_FAIL;
    }
    g_side = g_size == 1 || g_rank == g_opts.pair[0] ? ROLE_A
             : g_rank == g_opts.pair[1]              ? ROLE_B
                                                     : -1;
    /* A bystander's partner is the initiator, who releases it. */
    g_partner = g_size == 1 ? g_rank : g_opts.pair[g_side == ROLE_A ? 1 : 0];
    return job_setup_common(bar, ws_p);
}

/* job_setup once the roles are known. */
static int job_setup_common(perf_ep_t *bar, perf_worker_t **ws_p)
{
    perf_worker_t *ws;
    tw_status_t st;

    if ((st = tw_set_error_handler(g_ctx, perf_on_error, NULL)) != TW_OK) {
        fprintf(stderr, "tw_perf: tw_set_error_handler: %s\n", tw_strerror(st));
        return EXIT_FAIL;
    }
    g_nworkers = g_opts.threads * (g_opts.split && g_size == 1 ? 2 : 1);
    *ws_p = ws = calloc((size_t)g_nworkers, sizeof(*ws));
    if (ws == NULL) {
        fprintf(stderr, "tw_perf: out of memory\n");
        return EXIT_FAIL;
    }
    if ((st = tw_cq_create(g_ctx, 16, &bar->cq)) != TW_OK) {
        fprintf(stderr, "tw_perf: tw_cq_create: %s\n", tw_strerror(st));
        return EXIT_FAIL;
    }
    /* Outstanding per thread: a window of sends (and the previous one's
     * completions not yet polled), a window of receives, acks. */
    for (int i = 0; i < g_nworkers; i++) {
        if ((st = tw_cq_create(g_ctx, 4 * g_opts.window + 16, &ws[i].ep.cq)) != TW_OK) {
            fprintf(stderr, "tw_perf: tw_cq_create(depth %u): %s\n", 4 * g_opts.window + 16,
                    tw_strerror(st));
            return EXIT_FAIL;
        }
    }
    return perf_rma_setup();
}

/* Pairs of processes: every pair starts a run together. @return EXIT_OK
 * or EXIT_FAIL (said why). */
static int job_barrier(void)
{
    tw_status_t st;

    if (g_npairs == 1) {
        return EXIT_OK;
    }
    if ((st = tw_barrier(tw_group_world(g_ctx))) != TW_OK) {
        fprintf(stderr, "tw_perf: rank %d: the barrier of the pairs: %s\n", g_rank,
                tw_strerror(st));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* Test @p test at each size; @p seq numbers the barriers. */
static int measure_test(perf_ep_t *bar, perf_worker_t *ws, perf_test_t test, uint64_t *seq)
{
    size_t lo = g_opts.size_set ? g_opts.size_min : perf_default_size(test);
    size_t hi = g_opts.size_set ? g_opts.size_max : lo;

    for (size_t size = lo;; size = size * 2 > hi ? hi : size * 2) {
        perf_run_t r;

        perf_run_init(&r, test, size);
        if (perf_rma_prepare(bar, &r) != EXIT_OK || perf_rank_barrier(bar, (*seq)++) != TW_OK ||
            job_barrier() != EXIT_OK || perf_run_one(ws, &r) != EXIT_OK) {
            return EXIT_FAIL;
        }
        if (size == hi) {
            return EXIT_OK;
        }
    }
}

/* --pair: the initiator releases every bystander, once the pair is done.
 * @return EXIT_OK or EXIT_FAIL (said why). */
static int release_bystanders(perf_ep_t *bar)
{
    static char none;

    for (int r = 0; r < g_size; r++) {
        tw_status_t st;

        if (r == g_opts.pair[0] || r == g_opts.pair[1]) {
            continue;
        }
        st = tw_send(g_ctx, r, TAG_RELEASE, &none, 0, bar->cq, (void *)(uintptr_t)USER_SEND);
        if (st == TW_OK) {
            bar->sends_posted++;
            st = perf_ep_wait(bar, &bar->sends_done, bar->sends_posted);
        }
        if (st != TW_OK) {
            fprintf(stderr, "tw_perf: rank %d: releasing rank %d: %s\n", g_rank, r,
                    tw_strerror(st));
            return EXIT_FAIL;
        }
    }
    return EXIT_OK;
}

/* --pair, a rank of neither role: wait for the initiator's release, in the
 * loop the options say (with manual progress, driving tw_progress), with
 * no timeout. @return EXIT_OK or EXIT_FAIL. */
static int bystand(perf_ep_t *bar)
{
    static char none;
    tw_status_t st;

    bar->expect_tag[ROLE_B] = TAG_RELEASE;
    bar->expect_len[ROLE_B] = 0;
    bar->no_timeout = true;
    if ((st = perf_ep_recv(bar, ROLE_B, &none, 0)) == TW_OK) {
        st = perf_ep_wait(bar, &bar->recvs[ROLE_B], 1);
    }
    return st == TW_OK ? EXIT_OK : EXIT_FAIL;
}

/* Every test, then the last barrier. @return EXIT_OK or EXIT_FAIL. */
static int measure(perf_ep_t *bar, perf_worker_t *ws)
{
    uint64_t seq = 0;

    if (g_side < 0) {
        return bystand(bar);
    }
    if (g_side == ROLE_A && (g_npairs == 1 || g_rank == 0)) {
        perf_print_header();
        fflush(stdout);
    }
    for (int t = 0; t < g_opts.ntests; t++) {
        if (measure_test(bar, ws, g_opts.tests[t], &seq) != EXIT_OK) {
            return EXIT_FAIL;
        }
    }
    /* Neither rank leaves while the other still needs it. */
    if (perf_rank_barrier(bar, seq++) != TW_OK) {
        return EXIT_FAIL;
    }
    perf_rma_deregister();
    return g_side == ROLE_A && g_opts.pair_set && g_size > 2 ? release_bystanders(bar) : EXIT_OK;
}

/* Finalize and free what job_setup made. @return @p rc, or EXIT_FAIL when
 * tw_finalize fails. */
static int job_teardown(perf_ep_t *bar, perf_worker_t *ws, int rc)
{
    tw_status_t st;

    if ((st = tw_finalize(g_ctx)) != TW_OK) {
        fprintf(stderr, "tw_perf: tw_finalize: %s\n", tw_strerror(st));
        rc = EXIT_FAIL;
    }
    perf_rma_deregister(); /* after a failure: the handles tw_finalize left */
    perf_cq_close(bar->cq);
    for (int i = 0; ws != NULL && i < g_nworkers; i++) {
        perf_cq_close(ws[i].ep.cq);
    }
    perf_rma_cleanup();
    free(ws);
    return rc;
}

int main(int argc, char **argv)
{
    perf_ep_t bar = {.thread = -1};
    perf_worker_t *ws = NULL;
    int rc;

    if ((rc = perf_parse_args(argc, argv)) >= 0) {
        return rc;
    }
    if (job_init() != EXIT_OK) {
        return EXIT_FAIL;
    }
    rc = job_setup(&bar, &ws);
    if (rc == EXIT_OK && g_side == ROLE_A && (g_npairs == 1 || g_rank == 0) && !g_opts.csv) {
        perf_print_banner();
    }
    if (rc == EXIT_OK) {
        rc = measure(&bar, ws);
    }
    if (rc == EXIT_OK && g_opts.stats != PERF_STATS_NONE) {
        perf_print_stats();
    }
    return job_teardown(&bar, ws, rc);
}
